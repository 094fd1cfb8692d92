"""The model a fine-tuning starts from: the discriminator, vocabulary and model config of a
pre-training workdir (its latest checkpoint) or of weights made elsewhere (convert/sources.py).
"""

import dataclasses
import functools
import json
import os

import jax
import numpy as np

from electra_jax import UserError, user_errors
from electra_jax.config import pretraining as config_defaults
from electra_jax.convert import sources
from electra_jax.data import records as records_lib
from electra_jax.model import networks as model_lib
from electra_jax.storage import fs
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import optim
from electra_jax.train import step as step_lib
from electra_jax.train import workdir as workdir_lib

# the parameters a fine-tuning reads from a pre-training checkpoint (GDES's residual word table
# included): not the generator, the optimizer's moments or the counters
_READ = ('embeddings', 'discriminator', 'embeddings_residual')
_HEAD = 'discriminator_predictions'  # the detection head (zero-shot prompting reads it)


@dataclasses.dataclass
class Pretrained:
  model_cfg: model_lib.ModelConfig
  params: dict | None  # {'embeddings': ..., 'discriminator': ...}; None from scratch
  vocab: str
  lower_case: bool
  checkpoint: str
  config: config_defaults.PretrainingConfig | None  # of the pre-training run, when known


def load(init: str, from_scratch: bool = False, log=print, step: str | int = 'latest',
         head: bool = False) -> Pretrained:
  """The discriminator, vocabulary and model config of `init`: the workdir of a pre-training run
  (its checkpoint `step`: 'latest', 'best' by the run's keep_best metric, or a step number), or
  weights made elsewhere (an HF transformers folder, a folder of launch/export.py, an original
  TensorFlow checkpoint; see electra_jax/convert/sources.py). `head`: its detection head too
  (`discriminator_predictions`; one-sentence UserError for a source that has none)."""
  step = str(step)
  if not init:
    raise UserError('init is empty; set --init to a pre-training workdir (the --workdir of '
                    'launch/train.py), an HF transformers folder or an original checkpoint')
  path = fs.join(init, 'config.json')
  config, kind = None, workdir_lib.kind_of(init)
  if kind in ('fine-tuning', 'fine-tuning search'):
    started = workdir_lib.read_config(init).get('init') or '?'
    raise UserError(f'--init {init} holds a {kind}, not a pre-training: give the pre-training it '
                    f'started from ({started}), or launch/export.py\'s folder of it (an HF model)')
  if kind == 'pre-training':
    config = workdir_lib.read_config(init)
    if not from_scratch:
      workdir_lib.require_checkpoint(init)
  elif fs.isfile(path):
    with fs.open(path) as f:
      try:
        config = json.load(f)
      except ValueError:
        config = None  # not ours: the other sources say what is wrong with it
  if not (isinstance(config, dict) and 'objective' in config):
    if step != 'latest':
      raise UserError(f'init_step={step} picks a checkpoint of a pre-training workdir, and {init} '
                      'is not one; leave init_step at latest')
    return _load_source(init, from_scratch, log, head)
  with user_errors(ValueError, FileNotFoundError):
    config = config_defaults.from_json(config)  # (the fields it lacks at their defaults)
    _, _, vocab = records_lib.workdir_vocab(init, config)
  model_cfg = config.model
  params, where = None, 'random initial weights (from_scratch)'
  if not from_scratch:
    params, where = _read_checkpoint(init, config, model_cfg, step, log, head)
  return Pretrained(model_cfg, params, vocab, config.data.lower_case, where, config)


# What a fine-tuning's workdir keeps of the model it started from, so that its models are used
# (predicted with, exported) from the workdir alone: the model config and the vocabulary.
SAVED, SAVED_VOCAB = 'pretrained.json', 'vocab'


def save(pretrained: Pretrained, workdir: str):
  """Writes `pretrained`'s model config and a copy of its vocabulary into a fine-tuning's
  `workdir` (read back by `saved`)."""
  vocab = SAVED_VOCAB + os.path.splitext(pretrained.vocab)[1]
  fs.write_atomic(fs.join(workdir, vocab), fs.read_bytes(pretrained.vocab))
  fs.write_atomic(fs.join(workdir, SAVED), json.dumps({
      'model': dataclasses.asdict(pretrained.model_cfg), 'vocab': vocab,
      'lower_case': pretrained.lower_case, 'checkpoint': pretrained.checkpoint}, indent=1))


def saved(workdir: str) -> Pretrained | None:
  """The model config and vocabulary a fine-tuning's `workdir` keeps (no weights: its seeds'
  checkpoints hold them); None for a workdir written before they were kept."""
  path = fs.join(workdir, SAVED)
  if not fs.isfile(path):
    return None
  d = fs.read_json(path, 'fine-tune again to rewrite it', want=dict)
  with user_errors(ValueError, TypeError, KeyError):
    model_cfg = model_lib.ModelConfig.from_config(d['model'])
    vocab = fs.join(workdir, d['vocab'])
    if not fs.isfile(vocab):
      raise UserError(f'{vocab}, the fine-tuning\'s copy of its vocabulary, is missing; put it '
                      f'back (the pre-training\'s vocabulary, or the file from a copy of {workdir})'
                      ', or fine-tune again to rewrite it')
    return Pretrained(model_cfg, None, vocab, bool(d['lower_case']), d['checkpoint'], None)


def _read_checkpoint(init: str, config, model_cfg, step: str, log,
                     head: bool = False) -> tuple[dict, str]:
  """(the discriminator's parameters, the checkpoint's path) of checkpoint `step` of the
  pre-training in `init`, read into this process's first device (its layout: the run's model and
  optimizer; the discriminator and embeddings alone are read, and the detection head with
  `head`)."""
  read = _READ + (_HEAD,) if head else _READ
  mode = _best_mode(init, config) if step == 'best' else 'max'
  ckpt = checkpoint_lib.Checkpointer.of_run(init, config, mode)
  try:
    if ckpt.latest_step() is None:
      raise UserError(f'{init} has no checkpoint yet; let its pre-training save one (it saves '
                      'at the end, at save_every steps and when stopped)')
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    # The run's state as shapes alone (one initialized only to be overwritten cost a second at
    # start).
    optimizer = optim.make_optimizer(config.optimizer)[0]
    shapes = step_lib.shapes_of_state(optimizer, jax.eval_shape(
        functools.partial(model_lib.init_params, model_cfg), jax.random.key(0)))
    target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device),
                          shapes)
    with user_errors(ValueError):
      if step == 'latest':
        step, state, meta = ckpt.restore_latest(target, log, only=read)
        if not step:  # every checkpoint deleted while read
          raise UserError(f'{init} holds no checkpoint any more (its run deleted them while '
                          'they were read); try again, or give another --init')
      else:
        chosen = _chosen_step(ckpt, init, step, config.keep_best)
        ckpt.check_shapes(chosen, target)
        state, meta = ckpt.restore(chosen, target, only=read)
        step = str(chosen)
  finally:
    ckpt.close()
  if head and meta.get('detection_head') is False:  # (checkpoints before it was recorded: read)
    raise UserError(f'{init} was pre-trained with objective {config.objective.name}, which never '
                    "trains the discriminator's detection head that prompting scores with; give "
                    'a pre-training of an objective with a detection loss (electra, cocolm, '
                    'amos, ...)')
  params = {k: state.params[k] for k in ('embeddings', 'discriminator') + (_HEAD,) * head}
  if 'embeddings_residual' in state.params:  # GDES: the discriminator's own word table
    params['embeddings'] = {**params['embeddings'], 'word_embeddings': (
        params['embeddings']['word_embeddings'] + state.params['embeddings_residual'])}
  return params, fs.join(ckpt.directory, str(step))


def _best_mode(init: str, config) -> str:
  """Which way the pre-training's keep_best metric is better ('min' or 'max'): as its latest
  checkpoint records it (what its objective declares), or, in checkpoints saved before they
  recorded it, by the table that ranked them then (lower for a loss, higher for the rest)."""
  ckpt = checkpoint_lib.Checkpointer(fs.join(init, 'checkpoints'))
  try:
    latest = ckpt.latest_step()
    meta = ckpt.meta(latest) if latest is not None else {}
  except (OSError, ValueError):  # a damaged latest checkpoint: the reading after this says so
    meta = {}
  finally:
    ckpt.close()
  return meta.get('keep_best_mode') or ('min' if config.keep_best.endswith('loss') else 'max')


def for_finetuning(cfg, mode: str, log=print, head: bool = False) -> Pretrained:
  """The start of a fine-tuning config `cfg` (its init, init_step, from_scratch; the detection
  head too with `head`); the saved fine-tunings' own weights replace it outside mode 'train'."""
  return load(cfg.init, cfg.from_scratch or mode != 'train', log, cfg.init_step, head)


def _chosen_step(ckpt, init: str, step: str, keep_best: str) -> int:
  """The step named by init_step 'best' or '<number>' among the checkpoints on disk."""
  steps = sorted(ckpt.all_steps())
  if step == 'best':
    best = ckpt.best_step()
    if best is None:
      raise UserError(f'init_step=best, but the pre-training in {init} kept no best checkpoint '
                      + ('(it ran without --config.keep_best, e.g. keep_best=disc_loss with '
                         'eval_every)' if not keep_best else f'by {keep_best} (none was saved '
                         'at an evaluation)') + f'; use latest or one of the steps {steps}')
    return best
  if int(step) not in steps:
    raise UserError(f'init_step={step}, but {init} has no checkpoint of that step; its '
                    f'checkpoints are at steps {steps}')
  return int(step)


def _load_source(init: str, from_scratch: bool, log, head: bool = False) -> Pretrained:
  with user_errors(ValueError, FileNotFoundError):
    source = sources.open_source(init)
    if head and not source.has_head:
      raise ValueError(f'{init} holds no detection head (discriminator_predictions) beside the '
                       'discriminator, and prompting scores with it; give a pre-trained '
                       'discriminator with its head (ElectraForPreTraining)')
    if source.vocab is None:
      raise ValueError(f'{init} has no vocabulary file (vocab.txt, a SentencePiece .model or an '
                       'HF tokenizer.json) beside its weights; copy the one it was trained with '
                       'there')
    config = config_defaults.default_config()
    # An original checkpoint does not record its heads: width / 64, as every released model.
    config.model.update({'num_heads': max(1, source.fields['hidden_size'] // 64), **source.fields})
    config.data.vocab, config.data.lower_case = source.vocab, source.lower_case
    model_cfg = model_lib.ModelConfig.from_config(config.model)
    params, where = None, 'random initial weights (from_scratch)'
    if not from_scratch:
      shapes = jax.eval_shape(lambda k: model_lib.init_params(model_cfg, k), jax.random.key(0))
      params = source.params(model_cfg, fill=jax.tree.map(
          lambda x: np.zeros(x.shape, np.float32), shapes))
      params = {k: params[k] for k in ('embeddings', 'discriminator') + (_HEAD,) * head}
      where = source.describe().split(' (')[0]
      for note in source.notes:
        log(note)
  # The pre-training config is unknown: the builtin task uses its default held-out split.
  return Pretrained(model_cfg, params, source.vocab, source.lower_case, where, None)
