"""A workdir -> folders that HF transformers' `from_pretrained` and `AutoTokenizer` load.

    pre-training workdir -> OUT/discriminator (ElectraForPreTraining)
                            OUT/generator     (ElectraForMaskedLM)
    fine-tuning workdir  -> OUT (ElectraForSequenceClassification, or ElectraForTokenClassification
                            for tagging) of one seed

Each folder holds config.json, model.safetensors (float32) and the tokenizer (electra_jax/convert/
vocab.py). The output is written to OUT.partial and renamed when complete: an interrupted export
leaves no folder that looks finished.
"""

import json
import os
import shutil

import jax
import ml_collections
import numpy as np

from electra_jax import UserError
from electra_jax import checkpoint as checkpoint_lib
from electra_jax import model as model_lib
from electra_jax import tokenizer as tokenizer_lib
from electra_jax.convert import hf
from electra_jax.convert import vocab as vocab_lib


def _read_config(workdir: str) -> dict:
  path = os.path.join(workdir, 'config.json')
  if not os.path.isfile(path):
    raise UserError(f'{workdir} is not a workdir of launch/train.py or launch/finetune.py (it has '
                    'no config.json); give the --workdir of a run')
  with open(path) as f:
    return json.load(f)


def _restore(directory: str, step: int | None, what: str):
  ckpt = checkpoint_lib.Checkpointer(directory)
  try:
    step = ckpt.latest_step() if step is None else step
    if step is None or step not in ckpt.all_steps():
      raise UserError(f'{directory} holds no checkpoint{f" of step {step}" if step else ""} '
                      f'(it has {ckpt.all_steps() or "none"}); let the {what} save one first')
    state, meta = ckpt.restore_arrays(step)
  finally:
    ckpt.close()
  return step, jax.tree.map(np.asarray, state), meta


def _write_model(folder: str, state: dict, config: dict, tokenizer, lower_case: bool,
                 cfg: model_lib.ModelConfig):
  os.makedirs(folder, exist_ok=True)
  config = {**config, 'pad_token_id': tokenizer.special.pad}
  hf.save_folder(folder, state, config)
  vocab_lib.write(tokenizer, folder, lower_case, cfg.max_position_embeddings)


def export(workdir: str, out: str, step: int | None = None, seed: int | None = None,
           log=print) -> list[str]:
  """Writes the HF folders of `workdir`'s checkpoint (latest, or `step`) under `out`."""
  if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
    raise UserError(f'--out {out} exists and is not empty; give a new folder (nothing was '
                    'written)')
  config = _read_config(workdir)
  partial = out.rstrip('/') + '.partial'
  shutil.rmtree(partial, ignore_errors=True)
  os.makedirs(partial)
  try:
    if 'objective' in config:
      written = _pretraining(ml_collections.ConfigDict(config), workdir, partial, step, log)
    elif 'task' in config and 'init' in config:
      written = _finetuning(ml_collections.ConfigDict(config), workdir, partial, step, seed, log)
    else:
      raise UserError(f'{workdir}/config.json is not the config of an electra_jax run; give the '
                      '--workdir of launch/train.py or launch/finetune.py')
    if os.path.isdir(out):
      os.rmdir(out)  # empty, checked above
    os.replace(partial, out)
  except BaseException:
    shutil.rmtree(partial, ignore_errors=True)
    raise
  return [os.path.join(out, os.path.relpath(w, partial)) for w in written]


def _pretraining(config, workdir: str, out: str, step, log) -> list[str]:
  from electra_jax import train  # pylint: disable=import-outside-toplevel
  _, _, vocab = train.workdir_vocab(workdir, config)
  tokenizer = tokenizer_lib.load_tokenizer(vocab, config.data.lower_case)
  cfg = model_lib.ModelConfig.from_config(config.model)
  step, state, _ = _restore(os.path.join(workdir, 'checkpoints'), step, 'pre-training')
  written = []
  for network in ('discriminator', 'generator'):
    if network == 'generator' and cfg.generator == 'uniform':
      log('model.generator is uniform: no generator network to export')
      continue
    folder = os.path.join(out, network)
    _write_model(folder, hf.to_hf(state['params'], cfg, network), hf.hf_config(cfg, network),
                 tokenizer, config.data.lower_case, cfg)
    written.append(folder)
  log(f'exported step {step} of {workdir}')
  return written


def _finetuning(config, workdir: str, out: str, step, seed, log) -> list[str]:
  from electra_jax.finetune import run  # pylint: disable=import-outside-toplevel
  seeds = sorted(int(n.split('_')[1]) for n in os.listdir(workdir) if n.startswith('seed_'))
  if not seeds:
    raise UserError(f'{workdir} holds no fine-tuning (no seed_<k> folder); run launch/finetune.py '
                    'first')
  if seed is None:
    seed = _best_seed(workdir, seeds)
  elif seed not in seeds:
    raise UserError(f'--seed {seed} is not among the fine-tunings in {workdir} ({seeds})')
  pretrained = run.load_pretrained(config.init, from_scratch=True, log=log)
  tokenizer = tokenizer_lib.load_tokenizer(pretrained.vocab, pretrained.lower_case)
  step, state, meta = _restore(os.path.join(workdir, f'seed_{seed}', 'checkpoints'), step,
                               'fine-tuning')
  kind = meta.get('kind')
  if kind == 'qa' or 'classifier' not in state['params']:
    raise UserError('a question-answering fine-tuning has ELECTRA\'s SQuAD head (end conditioned on '
                    'the start, answerability), which no HF transformers class holds; export the '
                    'pre-trained model and fine-tune with HF\'s own head there')
  if kind is None:
    raise UserError(f'{workdir}/seed_{seed} was saved without its task kind; fine-tune again to '
                    'export it')
  cfg = pretrained.model_cfg
  state, fields = hf.head_to_hf(state['params'], cfg, kind, [str(x) for x in meta['labels']])
  _write_model(out, state, {**hf.hf_config(cfg, 'discriminator'), **fields,
                            'classifier_dropout': config.dropout_rate}, tokenizer,
               pretrained.lower_case, cfg)
  log(f'exported seed {seed} (step {step}) of {workdir}: {fields["architectures"][0]}, '
      f'{fields["num_labels"]} output(s)')
  return [out]


def _best_seed(workdir: str, seeds: list[int]) -> int:
  """The seed with the best first dev score in results.json (else the first seed)."""
  path = os.path.join(workdir, 'results.json')
  if not os.path.isfile(path):
    return seeds[0]
  with open(path) as f:
    results = json.load(f)
  def score(row):
    split = next((v for k, v in row.items() if isinstance(v, dict)), {})
    return next(iter(split.values()), float('-inf'))
  ranked = [r for r in results.get('seeds', []) if r.get('seed') in seeds]
  return max(ranked, key=score)['seed'] if ranked else seeds[0]
