"""A pre-training's model as HF transformers folders: OUT/discriminator (ElectraForPreTraining) and,
where HF has a class for its generator, OUT/generator (ElectraForMaskedLM). launch/export.py."""

from electra_jax import UserError
from electra_jax.config import pretraining as config_lib
from electra_jax.convert import hf
from electra_jax.convert import hf_folder
from electra_jax.data import records as records_lib
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.storage import fs
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import workdir as workdir_lib


def export(pretraining: config_lib.PretrainingConfig, workdir: str, out: str, step: int | None,
           log) -> hf_folder.Exported:
  """Checkpoint `step` (None: the latest) of the pre-training in `workdir` (its config
  `pretraining`) as HF folders under `out`."""
  workdir_lib.require_checkpoint(workdir)
  try:
    _, _, vocab = records_lib.workdir_vocab(workdir, pretraining)
  except (ValueError, FileNotFoundError) as e:
    raise UserError(str(e)) from None
  tokenizer = tokenizer_lib.load_tokenizer(vocab, pretraining.data.lower_case)
  cfg = pretraining.model
  step, state, _ = checkpoint_lib.read_kept(fs.join(workdir, 'checkpoints'), step, 'pre-training')
  networks = ['discriminator']
  problem = hf.generator_problem(cfg)
  if problem:
    log(f'{problem}; the discriminator alone is exported')
  else:
    networks.append('generator')
  written = hf_folder.write_networks(out, state['params'], cfg, tokenizer,
                                     pretraining.data.lower_case, networks)
  log(f'exported step {step} of {workdir}')
  return hf_folder.Exported(written, cfg, state['params'], tokenizer, 'pretraining')
