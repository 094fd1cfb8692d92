"""Before a pre-training writes anything: its config fitted to the weights it starts from and to
its objective, typed and every field checked (`configure`, the one reader of the untyped config),
and the run its workdir already holds compared with it (`check_same_run`). Each mistake is one
sentence (UserError).

What must match and what is adopted are declared with each field (model/config.py).
"""

import ml_collections

from electra_jax import UserError, user_errors
from electra_jax import fields as fields_lib
from electra_jax.config import pretraining as config_lib
from electra_jax.data import corpus as corpus_lib
from electra_jax.objectives import registry as objectives
from electra_jax.pretraining import init_from
from electra_jax.storage import fs
from electra_jax.train import partitioning
from electra_jax.train.metrics import Metric

# The held-out measure a run scores beside its objective's metrics when config.zeroshot_task names
# a task: the discriminator prompted on it (apps/zeroshot.py's probe, given by the command).
ZEROSHOT = Metric('zeroshot_accuracy', 'max', 'zero-shot accuracy (prompted, no training)')


def probe_metrics(cfg: config_lib.PretrainingConfig) -> tuple:
  """The metrics the run scores beside its objective's (`ZEROSHOT` with a zeroshot_task)."""
  return (ZEROSHOT,) if cfg.zeroshot_task else ()


def configure(config: ml_collections.ConfigDict, mesh, log=print, data: bool = True):
  """(the run's typed config, the source of its `init_from` or None): `config` (a file's, with the
  command line's overrides; left as it was) fitted to the weights it starts from and to its
  objective, typed for the devices of `mesh`, every field checked once before anything is read or
  written: one sentence for the first problem. `data=False`: the corpus is not looked for
  (compiling for a slice, which reads no data). The one place a pre-training's untyped config
  is read: everything after takes the typed one."""
  config = config.copy_and_resolve_references()
  source = _adopt_init_from(config, log)
  device = mesh.devices.flat[0]
  with user_errors(ValueError):
    config = objectives.fit_model_config(config, log)
    cfg = config_lib.parse(config, device.platform, device.device_kind)
  _check(cfg, mesh, data)
  return cfg, source


def _check(cfg: config_lib.PretrainingConfig, mesh, data: bool):
  """The checks across fields and against the devices, the objective and the corpus."""
  d, m = cfg.data, cfg.model
  with user_errors(ValueError):
    partitioning.check_batch_size(d.batch_size, mesh, 'data.batch_size', cfg.microbatches)
    partitioning.check_batch_size(d.eval_batch_size, mesh, 'data.eval_batch_size')
    objective = objectives.get(cfg.objective.name)
  if d.max_seq_length < 5:
    raise UserError(f'data.max_seq_length={d.max_seq_length} leaves an example no room: [CLS] A '
                    '[SEP] B [SEP] takes at least 5 tokens; give 128 or 512 as the presets do')
  if d.max_seq_length > m.max_position_embeddings:
    raise UserError(f'data.max_seq_length={d.max_seq_length} exceeds '
                    f'model.max_position_embeddings={m.max_position_embeddings}; shorten the '
                    'sequences or enlarge the position table')
  if d.pack_documents and not m.modern:
    raise UserError('data.pack_documents packs documents into rows whose tokens count positions '
                    "from their own document's [CLS], which the modern backbone's rotary "
                    "positions read; the BERT backbone's learned positions follow the original's "
                    "examples: set --config.model.backbone=modern (configs/*.py:modern) or leave "
                    'data.pack_documents out')
  if cfg.objective.max_predictions < 1:
    raise UserError(f'objective.mask_prob={cfg.objective.mask_prob} selects no token in '
                    f'{d.max_seq_length}-token sequences; raise it')
  if cfg.zeroshot_task and not objective.detects:
    raise UserError(f'zeroshot_task prompts the discriminator\'s detection head, and objective '
                    f'{cfg.objective.name} never trains it; leave zeroshot_task out, or '
                    'pre-train an objective with a detection loss (electra, cocolm, amos, ...)')
  with user_errors(ValueError):
    objectives.ranking(cfg.objective.name, cfg.keep_best, probe_metrics(cfg))
  if cfg.keep_best and not cfg.eval_every:
    raise UserError(f'keep_best={cfg.keep_best!r} ranks the checkpoints saved at evaluations, '
                    'but eval_every is 0; set --config.eval_every')
  if data and not d.records:
    with user_errors(FileNotFoundError, ValueError):
      corpus_lib.Source(d.corpus, d.text_field)  # a glob that matches nothing fails here


def _adopt_init_from(config: ml_collections.ConfigDict, log=print):
  """The source of `config.init_from` (None without one), after fitting `config` (a copy) to it.

  The model's main sizes must be the config's (another size is refused, naming it); the vocabulary
  size, the generator's shape (read from the weights: Small++ has a full-width generator) and the
  vocabulary file (unless data.vocab names one) are taken from the source and logged.
  """
  if not config.init_from:
    if config.init_generator:
      raise UserError('init_generator is set but init_from is empty; set --config.init_from to '
                      'the discriminator\'s folder')
    return None
  with user_errors(ValueError, FileNotFoundError):
    source = init_from.open_source(config.init_from, config.init_generator, config.data.vocab)
  fields, m = source.fields, config.model
  # model/config.py declares what must match the weights (init_from='same') and what is taken from
  # them
  must_match, adopted = (fields_lib.paths(config_lib.MODEL, init_from=role)
                         for role in ('same', 'adopt'))
  diffs = [f'{k} {fields[k]} (config: {m[k]})' for k in must_match
           if k in fields and fields[k] != m[k]]
  if diffs:
    raise UserError(f'{config.init_from} holds a model with other sizes than the config: '
                    f'{", ".join(diffs)}; use the config of its size (configs/small.py, base.py, '
                    'large.py) or set these fields')
  for key in adopted:
    if key in fields and fields[key] != m[key]:
      log(f'init_from: model.{key} {m[key]!r} -> {fields[key]!r} (from the weights)')
      m[key] = fields[key]
  if not config.data.vocab:
    if source.vocab is None:
      raise UserError(f'{config.init_from} has no vocabulary file (vocab.txt, a SentencePiece '
                      '.model or an HF tokenizer.json) beside its weights; give the one it was '
                      'trained with as --config.data.vocab')
    config.data.vocab, config.data.lower_case = source.vocab, source.lower_case
    log(f'init_from: data.vocab {source.vocab} (lower_case={source.lower_case})')
  for note in source.notes:
    log(f'init_from: {note}')
  return source


def checkpoint_steps(workdir: str) -> list[int]:
  folder = fs.join(workdir, 'checkpoints')
  return sorted(int(n) for n in fs.listdir(folder) if n.isdigit()) if fs.isdir(folder) else []


def _has_checkpoint(workdir: str) -> bool:
  return bool(checkpoint_steps(workdir))


def check_same_run(as_json: dict, workdir: str, log=print):
  """A workdir holds one run: resuming with a different model, objective or data (the config as
  `PretrainingConfig.as_json`) is refused. A run that stopped before its first checkpoint holds
  nothing to resume: its config is replaced. Returns the config.json compared (None without one)."""
  path = fs.join(workdir, 'config.json')
  if not fs.exists(path):
    return None
  old = fs.read_json(path, 'delete it, and the same command resumes the run from its checkpoints '
                     '(config.json is written again)', want=dict)
  # the declarations say what a resumed run must keep (resume='same'): the model, objective, data
  # and seed, but for how the model is computed (attention path, remat)
  diffs = fields_lib.same_run_diffs(config_lib.CONFIG, old, as_json)
  if diffs and not _has_checkpoint(workdir):
    log(f'note: {workdir} holds no checkpoint of its earlier run; starting it afresh with this '
        f'config ({", ".join(diffs)})')
  elif diffs:
    raise UserError(f'--workdir {workdir} holds a run with a different config '
                    f'({", ".join(diffs)}); use a new --workdir, or the same config to resume')
  return old
