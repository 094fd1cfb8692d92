"""The kinds of fine-tuning task, a table of the modules that define them (each a `KIND`, the
interface of interface.py), and the loading of a task by its config: a named one (GLUE, SQuAD, the
built-in tasks: inputs/tasks.py) or your own files, read by the kind of task they hold.

    registry.get('regression')                -> the kind
    registry.load(cfg.task, pretraining, log) -> (task, {split: examples})
    registry.named(cfg.task)                  -> a named task without reading its data

A named classification task takes the kind task.kind names where that is 'prompted' (the
discriminator's head at each class's label word, kinds/prompted.py); its own kind otherwise.
"""

import dataclasses

from electra_jax.finetune.inputs import tasks
from electra_jax.finetune.kinds import classification
from electra_jax.finetune.kinds import multiple_choice
from electra_jax.finetune.kinds import prompted
from electra_jax.finetune.kinds import qa
from electra_jax.finetune.kinds import regression
from electra_jax.finetune.kinds import tagging
from electra_jax.finetune.kinds.interface import Kind

KINDS: dict[str, Kind] = {m.KIND.name: m.KIND for m in (
    classification, regression, tagging, qa, multiple_choice, prompted)}


def unknown(name: str) -> str | None:
  """None for a registered kind; else what to use instead (the kinds of your own files)."""
  if name in KINDS:
    return None
  own = [k for k, kind in KINDS.items() if kind.own_data]
  return f'use {", ".join(map(repr, own[:-1]))} or {own[-1]!r}'


def get(name: str) -> Kind:
  """The kind registered as `name`; ValueError naming the kinds otherwise."""
  if unknown(name):
    raise ValueError(f'task.kind is {name!r}; {unknown(name)}')
  return KINDS[name]


def load(cfg, pretraining=None, log=print) -> tuple[tasks.Task, dict[str, list]]:
  """(task, {split: examples}) from `config.task`; `pretraining` is the init run's config.

  `task.max_train_examples` keeps a fixed random subset of the train split; test splits whose
  every example is labelled are scored (`Task.test_splits`).
  """
  task, splits = _load(cfg, pretraining, log)
  task = _as_configured(task, cfg)
  if not cfg.name.startswith('builtin'):  # the built-in tasks draw that many examples themselves
    splits = tasks.sample_train(splits, cfg.max_train_examples, log)
  return tasks.with_test_splits(task, splits), splits


def named(cfg) -> tasks.Task | None:
  """tasks.named_task, of the kind `cfg.kind` names where that is 'prompted'; None for your own
  data. ValueError for a prompted task that is not a classification."""
  task = tasks.named_task(cfg)
  return None if task is None else _as_configured(task, cfg)


def _as_configured(task: tasks.Task, cfg) -> tasks.Task:
  """`task` fine-tuned as the prompted kind where `cfg.kind` says so."""
  if cfg.kind != prompted.KIND.name or task.kind == cfg.kind:
    return task
  if not get(task.kind).text_classes:
    raise ValueError(f'task.kind=prompted picks the class of each text by its label word, and '
                     f'task {task.name} is {task.kind}; give a classification task, or leave '
                     'task.kind out')
  return dataclasses.replace(task, kind=cfg.kind)


def _load(cfg, pretraining, log) -> tuple[tasks.Task, dict[str, list]]:
  if cfg.name in tasks.SQUAD:
    return tasks.load_squad(cfg)
  if cfg.name == 'builtin':
    seed = pretraining.seed if pretraining is not None else 0
    fraction = pretraining.data.eval_fraction if pretraining is not None else 0.05
    return tasks.BUILTIN, tasks.load_builtin(seed, fraction, cfg.max_train_examples or 4000)
  if cfg.name == 'builtin_topic':
    seed = pretraining.seed if pretraining is not None else 0
    return tasks.BUILTIN_TOPIC, tasks.load_builtin_topic(seed, cfg.max_train_examples or 4000)
  if cfg.name in tasks.GLUE and cfg.glue_dir:
    return tasks.glue_task(cfg.name), tasks.load_glue_tsv(cfg.glue_dir, cfg.name, log)
  if cfg.name in tasks.GLUE and not cfg.train:
    return tasks.glue_task(cfg.name), tasks.load_glue(cfg.name, cfg.tfds_data_dir or None)
  if not cfg.train:
    raise ValueError(f'task.name is {cfg.name!r}, not a GLUE task ({", ".join(tasks.GLUE)}), '
                     'squad1, squad2, builtin or builtin_topic; for your own data set task.train '
                     '(and task.dev, task.test) to .csv/.tsv/.jsonl (or CoNLL) files')
  kind = get(cfg.kind)
  if not kind.own_data:
    raise ValueError(f'task.kind={kind.name!r} reads no files of your own; use '
                     f'{", ".join(k for k, v in KINDS.items() if v.own_data)}')
  return kind.load(cfg, log)
