"""The one fine-tuning config: every field, its default and what it means, and its checks.

The model (sizes, vocabulary) comes from the pre-training run named by `init`; what is set here is
the task and the recipe. Zeros mean "the paper's value for this model size / task".

A config file and the command line set an ml_collections config (`default_config`, built from the
declarations); `parse` types it once, at the edge (`FinetuningConfig`: the run's own fields and
the typed task, prompt, qa and optimizer sections, every field declared once here), and nothing
below the commands reads the untyped one.
"""

import dataclasses
import functools
import json
from typing import Any

import ml_collections

from electra_jax import UserError, user_errors
from electra_jax import fields
from electra_jax.train import config as train_config
from electra_jax.fields import Section, at_least, declare, inside, one_of, rule
from electra_jax.finetune.kinds import heads
from electra_jax.finetune.kinds import registry
from electra_jax.storage import fs
from electra_jax.train import partitioning
from electra_jax.train.config import OptimizerConfig


def _kind(name):
  return registry.unknown(name)


POOLINGS = ('cls', 'mean')
BOOL = one_of(False, True)
_RATE = rule(lambda x: x == -1 or 0 <= x < 1, 'a rate in [0, 1), or -1 for the rate the model '
             'was pre-trained with')

@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskConfig:
  """The task: a named benchmark or your own files (the config's `task` section)."""
  name: str = declare('sst2', "a GLUE task (cola sst2 mrpc qqp stsb mnli qnli rte wnli), squad1, "
                      "squad2, 'builtin', or 'own' (named after the train file, or its folder for "
                      'train.csv)')
  max_train_examples: int = declare(0, "train examples used, a fixed random subset (0: all; "
                                    "'builtin': 4,000)",
                                    rule(lambda x: x >= 0, '0 (all) or a number of examples'))
  tfds_data_dir: str = declare('', "TFDS data_dir for GLUE ('' = TFDS's default)")
  glue_dir: str = declare('', "GLUE from the original download's TSV folders "
                          '(<glue_dir>/MNLI/train.tsv ...)')
  train: str = declare('', 'your own data: a .csv/.tsv (header row) or .jsonl file ...')
  dev: str = declare('', '... evaluated after training (optional)')
  test: str = declare('', '... predicted (optional); scored too when every row has a label')
  header: bool = declare(True, '.csv/.tsv: the first row names the columns; False: name them by '
                         'position', BOOL)
  text_a: str | int = declare('text', 'the column holding the text (header=False: its position, '
                              '0 first)')
  text_b: str | int = declare('', "a second text column for pair tasks ('' = single text)")
  label: str | int = declare('label', 'the label column')
  kind: str = declare('classification', "'classification' (names), 'regression' (numbers), "
                      "'tagging' (CoNLL), 'multiple_choice' (a context and candidates), "
                      "'prompted' (a classification, named or your own, trained through the "
                      "discriminator's detection head at each class's label word: the prompt "
                      "section): finetune/kinds/registry.py's table", _kind)
  shots: int = declare(0, 'K: each seed trains on its own draw of K train examples per class (the '
                       'few-shot setting; a class with fewer gives all it has); 0: the whole train '
                       'split', at_least(0))
  choices: str = declare('', "multiple choice: the candidates' columns, comma separated (the "
                         "label: the right one's index, 0 first)")
  tag_column: int = declare(-1, 'tagging: the column of a CoNLL line that holds the tag (-1: the '
                            'last)')

  def __post_init__(self):
    fields.check_typed(self, TASK, 'task.')


TASK = fields.section_of(TaskConfig, doc='the task: a named benchmark or your own files')


@dataclasses.dataclass(frozen=True, kw_only=True)
class PromptConfig:
  """The prompt of task.kind='prompted' and of launch/zeroshot.py."""
  template: str = declare('', "a sentence holding {label} once, after the text ('It was "
                          "{label}.') or around the texts {a} and {b} ('{a}? {label}, {b}'); '': "
                          "the task's default")
  label_words: str = declare('', "each class's word: 'class=word,class=word' ('': the task's "
                             'default)')


PROMPT = fields.section_of(PromptConfig, doc="the prompt of task.kind='prompted' and of "
                           "launch/zeroshot.py: a template and each class's word "
                           '(finetune/inputs/prompts.py)')


@dataclasses.dataclass(frozen=True, kw_only=True)
class QAConfig:
  """SQuAD's settings (task.name squad1 / squad2)."""
  doc_stride: int = declare(128, "tokens between the starts of a context's windows", at_least(1))
  max_query_length: int = declare(64, 'question tokens kept', at_least(1))
  n_best: int = declare(20, 'spans considered per question', at_least(1))
  max_answer_length: int = declare(30, 'tokens of an answer at most', at_least(1))
  start_top: int = declare(5, 'best starts whose end logits are computed at prediction time',
                           at_least(1))
  null_threshold: float = declare(-2.75, 'SQuAD 2.0: no answer where the null log-odds exceed '
                                  'this')

  def __post_init__(self):
    fields.check_typed(self, QA, 'qa.')


QA = fields.section_of(QAConfig, doc='SQuAD (task.name squad1 / squad2)')

_ADAMW = train_config.OPTIMIZER.fields  # AdamW's own settings as the pre-training declares them


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecipeOptimizer:
  """A fine-tuning's AdamW as its config sets it (zeros: the paper's value for the model's size);
  `optimizer_config` makes the typed OptimizerConfig of a run from it."""
  learning_rate: float = declare(0.0, "0: the paper's for the size (3e-4 Small, 1e-4 Base, 5e-5 "
                                 'Large)', at_least(0))
  layerwise_decay: float = declare(0.0, "0: the paper's (0.8 Small/Base, 0.9 Large); 1 disables",
                                   at_least(0))
  layerwise_decay_rule: str = declare('intended', "'intended' or 'original' (the release's "
                                      'off-by-one)', one_of('intended', 'original'))
  word_table_lr: float = declare(
      1.0, 'a further learning-rate factor of the word embeddings (the paper: 1). The table feeds '
      "a LayerNorm, so only its rows' directions matter, and Adam moves each weight by about the "
      'learning rate whatever its size: pre-training leaves the rows larger than at '
      "initialization, so they turn more slowly than random weights' "
      '(docs/short_pretraining.md). A factor of 10 is the same as starting from a table 10x '
      'smaller', rule(lambda x: x > 0, 'a positive factor (1: the same learning rate as the rest '
                      'of the layer)'))
  warmup_fraction: float = declare(0.1, 'share of the steps spent warming up',
                                   inside(0, 1, True, True))
  weight_decay: float = declare(0.0, "the paper's 0 (the original code used 0.01)", at_least(0))
  b1: float = fields.redeclared(_ADAMW['b1'])
  b2: float = fields.redeclared(_ADAMW['b2'])
  eps: float = fields.redeclared(_ADAMW['eps'])
  bias_correction: bool = fields.redeclared(_ADAMW['bias_correction'])
  grad_clip_norm: float = fields.redeclared(_ADAMW['grad_clip_norm'])

  def __post_init__(self):
    fields.check_typed(self, OPTIMIZER, 'optimizer.')


OPTIMIZER = fields.section_of(RecipeOptimizer, doc="AdamW; zeros mean the paper's value for the "
                              "model's size")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FinetuningConfig:
  """A fine-tuning's config, typed: its own fields (declared here), the task, prompt, SQuAD and
  optimizer sections, and `as_json`, the one serialization that config.json, the checkpoints'
  metadata and the resume checks use. Made once, at the edge (`parse`), and everything below
  takes it alone; each field is checked when it is made."""
  init: str = declare('', 'a pre-training workdir: its final checkpoint, vocabulary and model '
                      'config')
  init_step: str | int = declare(
      'latest', "which checkpoint of a pre-training workdir: 'latest', 'best' (the one its "
      "keep_best kept, e.g. the lowest held-out disc_loss) or a step number",
      lambda x: None if x in ('latest', 'best') or str(x).isdigit() else
      "give 'latest', 'best' or a step number such as 1000")
  from_scratch: bool = declare(False, 'True: that model and vocabulary with random weights (a '
                               'baseline)', BOOL)
  seed: int = declare(0, 'seed of the first fine-tuning; run k uses seed + k', fields.seed)
  num_seeds: int = declare(1, 'fine-tunings from the same checkpoint; the median is reported '
                           '(paper: 10)', at_least(1), resume='free')
  epochs: float = declare(0.0, "0: the paper's for the task (3; 10 for RTE and STS-B; 3 for your "
                          'own data)', at_least(0))
  batch_size: int = declare(32, 'global batch (a multiple of the number of devices)', at_least(1))
  eval_batch_size: int = declare(32, 'global batch of evaluation and prediction', at_least(1),
                                 resume='free')
  max_seq_length: int = declare(128, 'tokens per example, [CLS] and [SEP]s included',
                                rule(lambda x: x >= 3, 'at least 3: [CLS] and [SEP] take 2 tokens '
                                     '(the default is 128)'))
  dropout_rate: float = declare(
      -1.0, "dropout in the encoder and on the head's input; -1: the rate the model was "
      "pre-trained with (0.1 for the paper's presets; an HF folder's hidden_dropout_prob; tiny: "
      '0)', _RATE)
  packing: bool = declare(
      True, 'fine-tuning and prediction batches as rows of max_seq_length that hold as many whole '
      'examples as fit, each computed exactly as in a row of its own (its positions, its '
      'attention, its [CLS]), where that takes at most 3/4 of the rows (else a row each); False: '
      'a row per example, padded (finetune/inputs/packing.py)', BOOL, resume='free')
  packing_shapes: int = declare(3, 'with packing: the batch shapes (row counts) a run compiles at '
                                'most, chosen over its batches to leave the fewest rows empty; 1: '
                                "one shape, the fullest batch's", at_least(1), resume='free')
  pooling: str = declare('cls', "the classifier's input: 'cls' ([CLS]'s hidden state: the paper, "
                         "HF's head) or 'mean' (the mean over the example's tokens); tagging "
                         'reads every token', one_of(*POOLINGS))
  head_init: str = declare(
      'random', "the head's start: 'random' (glorot-uniform: the paper) or 'probe' (a logistic / "
      "ridge regression fitted on the frozen encoder's features of the train split, then "
      'everything fine-tuned: LP-FT; classification and regression; finetune/probe.py)',
      one_of('random', 'probe'))
  reinit: str = declare('', 'parts of the pre-trained encoder that start from random weights '
                        'instead, comma separated: embeddings, word_embeddings, layer_<i> (0: the '
                        'lowest), top (the last)')
  log_every: int = declare(50, 'steps between progress lines and records (fewer where a seed has '
                           'under ten times as many steps: ten lines a seed)', at_least(1),
                           resume='free')
  eval_every: int = declare(0, 'steps between dev scores (0: at the end only); the best '
                            'checkpoint is kept', at_least(0), resume='free')
  save_every: int = declare(500, 'steps between checkpoints (and at the end, and when stopped by '
                            'SIGTERM)', at_least(0), resume='free')
  baseline: bool = declare(True, 'classification / regression: also score a TF-IDF + logistic '
                           '(ridge) regression baseline on the same splits (finetune/baseline.py)',
                           BOOL, resume='free')
  search: str = declare(
      '', "recipes to choose among by their dev median, each fine-tuned num_seeds times: "
      "'field=value,value[; field=value,value]', e.g. 'optimizer.learning_rate=1e-4,3e-4' ('': "
      'the recipe as set; apps/search.py)', resume='free')
  task: TaskConfig = dataclasses.field(default_factory=TaskConfig)
  prompt: PromptConfig = dataclasses.field(default_factory=PromptConfig)
  qa: QAConfig = dataclasses.field(default_factory=QAConfig)
  optimizer: RecipeOptimizer = dataclasses.field(default_factory=RecipeOptimizer)

  def __post_init__(self):
    fields.check_typed(self, _OWN, '')

  @functools.cached_property
  def as_json(self) -> dict:
    """The config as its config.json holds it (every field, the sections nested)."""
    return json.loads(json.dumps(dataclasses.asdict(self)))


_OWN = fields.section_of(FinetuningConfig)
CONFIG = Section(fields=dict(_OWN.fields, task=TASK, prompt=PROMPT, qa=QA, optimizer=OPTIMIZER))
_SECTION_TYPES = {'task': TaskConfig, 'prompt': PromptConfig, 'qa': QAConfig,
             'optimizer': RecipeOptimizer}


def default_config() -> ml_collections.ConfigDict:
  """The fine-tuning config with every default (an ml_collections.ConfigDict: what a config file
  and the command line set)."""
  return fields.build(CONFIG)


def short_pretraining_recipe(cfg) -> ml_collections.ConfigDict:
  """The recipe of configs/finetune/own.py and builtin.py for a model from a short pre-training,
  chosen on the real-text suite (docs/objectives.md, "A suite of real text nobody here wrote"): the
  head reads the mean of the token vectors, every layer learns at one rate, the word table 10x
  faster, 2 epochs. Sets those fields of `cfg` and returns it."""
  cfg.pooling = 'mean'
  cfg.optimizer.layerwise_decay = 1.0  # every layer at the head's rate
  cfg.optimizer.word_table_lr = 10.0
  cfg.epochs = 2.0
  return cfg


def complete(cfg) -> ml_collections.ConfigDict:
  """`cfg` (a config file's, or a workdir's config.json) with the fields it lacks at their
  defaults (fields.complete)."""
  return fields.complete(CONFIG, cfg)


def parse(config, mesh=None) -> FinetuningConfig:
  """`config` typed: a config file's ml_collections config with the command line's overrides, or
  a workdir's config.json (a dict, the fields it lacks at their defaults: what the version that
  wrote it computed); a typed config is returned as it is, its batches checked for `mesh`.
  UserError (one sentence) for an unknown key, a value outside its declared range, a batch the
  devices of `mesh` do not divide (None: not checked) or seeds past the largest."""
  if isinstance(config, FinetuningConfig):
    _check_batches(config.batch_size, config.eval_batch_size, mesh)
    return config
  if isinstance(config, dict):
    values = config
  else:
    values = json.loads(config.to_json())
  return _typed(fields.with_defaults(CONFIG, values), mesh)


def with_values(cfg: FinetuningConfig, values: dict) -> FinetuningConfig:
  """`cfg` with the fields of `values` ({dotted path: value}) replaced, checked as `parse`
  checks."""
  out = json.loads(json.dumps(cfg.as_json))
  for path, value in values.items():
    *parents, name = path.split('.')
    node = out
    for p in parents:
      node = node[p]
    node[name] = value
  return _typed(out, None)


def _check_batches(batch_size: int, eval_batch_size: int, mesh):
  if mesh is not None:
    with user_errors(ValueError):
      partitioning.check_batch_size(batch_size, mesh, 'batch_size')
      partitioning.check_batch_size(eval_batch_size, mesh, 'eval_batch_size')


def _typed(values: dict, mesh) -> FinetuningConfig:
  with user_errors(ValueError):
    fields.check(CONFIG, values, 'fine-tuning config')
  _check_batches(values['batch_size'], values['eval_batch_size'], mesh)
  last = values['seed'] + values['num_seeds'] - 1
  if last > fields.MAX_SEED:
    raise UserError(f'seed={values["seed"]} with num_seeds={values["num_seeds"]} makes the last '
                    f"fine-tuning's seed {last}, and a seed is at most {fields.MAX_SEED} (a "
                    f'32-bit integer); give a seed of at most '
                    f'{fields.MAX_SEED - values["num_seeds"] + 1}')
  with user_errors(ValueError):
    return FinetuningConfig(**{name: values[name] for name in _OWN.fields},
                            **{name: cls(**values[name]) for name, cls in _SECTION_TYPES.items()})


def dropout_rate(cfg, model_cfg) -> float:
  """The fine-tuning's dropout rate: `cfg.dropout_rate`, or the pre-trained model's where -1."""
  return model_cfg.dropout_rate if cfg.dropout_rate < 0 else cfg.dropout_rate


def check_for_model(cfg, model_cfg) -> tuple[str, ...]:
  """Refuses (UserError) settings the pre-trained model cannot take; returns the parts of the
  encoder that `reinit` names (heads.reinit_parts), for the run's `Resolved`."""
  if cfg.max_seq_length > model_cfg.max_position_embeddings:
    raise UserError(f'max_seq_length={cfg.max_seq_length} exceeds the model\'s '
                    f'{model_cfg.max_position_embeddings} positions; lower it')
  with user_errors(ValueError):
    return heads.reinit_parts(cfg.reinit, model_cfg.num_layers)


@dataclasses.dataclass(frozen=True)
class Resolved:
  """A fine-tuning's values derived once per run from its config, its task and the pre-trained
  model (the paper's where the config says 0); every seed of the run is handed them."""
  epochs: float
  total_steps: int  # optimizer steps of one seed
  layerwise_decay: float
  dropout_rate: float
  reinit: tuple[str, ...]  # the encoder's parts that start from random weights
  optimizer: OptimizerConfig  # the seeds' optimizer (its learning rate the run's), checked once


def resolve(cfg, task, model_cfg, total_steps: int, reinit: tuple[str, ...]) -> Resolved:
  """The run's `Resolved` for `total_steps` optimizer steps a seed (`reinit`: check_for_model's,
  the parts of the encoder to start afresh)."""
  optimizer = optimizer_config(cfg, model_cfg, total_steps)
  return Resolved(epochs=cfg.epochs or task.epochs, total_steps=total_steps,
                  layerwise_decay=(cfg.optimizer.layerwise_decay
                                   or paper_layerwise_decay(model_cfg.num_layers)),
                  dropout_rate=dropout_rate(cfg, model_cfg), reinit=reinit, optimizer=optimizer)


def optimizer_config(cfg, model_cfg, total_steps: int) -> OptimizerConfig:
  """The optimizer of a fine-tuning of `total_steps` (checked as it is made): each field of the
  typed optimizer config, with the original's schedule (linear warm-up, linear decay to 0), the
  paper's rate where `cfg` says 0, `cfg`'s own value of a field declared in both, and the typed
  config's default of any other."""
  o = cfg.optimizer
  schedule: dict[str, Any] = dict(
      learning_rate=o.learning_rate or paper_learning_rate(model_cfg.hidden_size),
      warmup_steps=int(o.warmup_fraction * total_steps), decay_steps=total_steps, decay_power=1.0,
      schedule='original')
  typed = train_config.OptimizerConfig  # (looked up here: a wider one arrives without a line)
  return typed(**{f.name: schedule[f.name] if f.name in schedule else getattr(o, f.name)
                  for f in dataclasses.fields(typed) if f.name in schedule or hasattr(o, f.name)})


def recipe(cfg, resolved: Resolved, pretrained: bool) -> str:
  """The recipe in one line: epochs, batch, learning rate, layer-wise decay, dropout, and what
  departs from the paper's."""
  o = cfg.optimizer
  return (f'recipe: {resolved.epochs:g} epochs of batch {cfg.batch_size}, learning rate '
          f'{resolved.optimizer.learning_rate:g}, layer-wise decay {resolved.layerwise_decay:g}, '
          f'dropout {resolved.dropout_rate:g}'
          + (f', word table at {o.word_table_lr:g}x the learning rate'
             if o.word_table_lr != 1.0 else '')
          + (f', re-initialized: {cfg.reinit}' if cfg.reinit and pretrained else '')
          + (', the head from a linear probe' if cfg.head_init == 'probe' else ''))


def paper_learning_rate(hidden_size: int) -> float:
  return 3e-4 if hidden_size <= 256 else 1e-4 if hidden_size <= 768 else 5e-5


def paper_layerwise_decay(num_layers: int) -> float:
  return 0.9 if num_layers >= 24 else 0.8


def check_same_finetuning(as_json: dict, workdir: str):
  """A re-run in a workdir holding fine-tunings continues them (a killed seed resumes, a finished
  one is scored again): refused when the config (`FinetuningConfig.as_json`) would compute
  something else. Returns the config.json compared (None without fine-tunings to continue)."""
  path = fs.join(workdir, 'config.json')
  if not fs.isfile(path) or not any(n.startswith('seed_') for n in fs.listdir(workdir)):
    return None
  with fs.open(path) as f:
    before = json.load(f)
  # config.CONFIG declares what may change (resume='free': how a fine-tuning is run or reported)
  diffs = same_run_diffs(before, as_json)
  if diffs:
    raise UserError(f'--workdir {workdir} holds fine-tunings with a different config '
                    f'({"; ".join(diffs)}); use a new --workdir, or the same config to continue')
  return before


def same_run_diffs(before: dict, as_json: dict) -> list[str]:
  """'path old -> new' for each field of a fine-tuning config (both as config.json holds them)
  that a resumed run must keep."""
  return fields.same_run_diffs(CONFIG, before, as_json)


def saved_config(workdir: str, mode: str, then: str = '') -> FinetuningConfig:
  """The config a fine-tuning workdir was trained with (for --mode=eval/predict without --config;
  `then`: what to do with a fine-tuning, named where `workdir` is a pre-training's)."""
  path = fs.join(workdir, 'config.json')
  if mode != 'train' and not fs.isdir(workdir):
    raise UserError(f'--workdir {workdir} does not exist; give the --workdir of a fine-tuning '
                    '(launch/finetune.py --mode=train)')
  if mode == 'train' or not fs.isfile(path):
    raise UserError(f'--config is required ({path} does not exist); give the fine-tuning config' if
                    mode != 'train' else '--config is required for --mode=train; give a '
                    'configs/finetune/*.py file')
  config = fs.read_json(path, 'give the fine-tuning\'s config file with --config', want=dict)
  if isinstance(config, dict) and 'objective' in config and 'task' not in config:
    raise UserError(f'{workdir} is a pre-training workdir (of launch/train.py); fine-tune it with '
                    f'--init={workdir} and a new --workdir, then '
                    f'{then or f"use --mode={mode} on that one"}')
  return parse(config)
