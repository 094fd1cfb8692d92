"""A pre-training's model as HF transformers folders: OUT/discriminator (ElectraForPreTraining) and,
where HF has a class for its generator, OUT/generator (ElectraForMaskedLM). launch/export.py."""

from electra_jax import UserError
from electra_jax.convert import hf
from electra_jax.convert import hf_folder
from electra_jax.data import records as records_lib
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.model import networks as model_lib
from electra_jax.storage import fs
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import workdir as workdir_lib


def export(config, workdir: str, out: str, step: int | None, log) -> hf_folder.Exported:
  """Checkpoint `step` (None: the latest) of the pre-training in `workdir` (its config `config`)
  as HF folders under `out`."""
  workdir_lib.require_checkpoint(workdir)
  try:
    _, _, vocab = records_lib.workdir_vocab(workdir, config)
  except (ValueError, FileNotFoundError) as e:
    raise UserError(str(e)) from None
  tokenizer = tokenizer_lib.load_tokenizer(vocab, config.data.lower_case)
  cfg = model_lib.ModelConfig.from_config(config.model)
  step, state, _ = checkpoint_lib.read_kept(fs.join(workdir, 'checkpoints'), step, 'pre-training')
  networks = ['discriminator']
  problem = hf.generator_problem(cfg)
  if problem:
    log(f'{problem}; the discriminator alone is exported')
  else:
    networks.append('generator')
  written = hf_folder.write_networks(out, state['params'], cfg, tokenizer, config.data.lower_case,
                                     networks)
  log(f'exported step {step} of {workdir}')
  return hf_folder.Exported(written, cfg, state['params'], tokenizer, 'pretraining')
