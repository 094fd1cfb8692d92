"""The one fine-tuning config: every field, its default and what it means, and its checks.

The model (sizes, vocabulary) comes from the pre-training run named by `init`; what is set here is
the task and the recipe. Zeros mean "the paper's value for this model size / task".
"""

import json

import ml_collections

from electra_jax import UserError
from electra_jax import user_errors
from electra_jax import fs
from electra_jax import partitioning
from electra_jax.finetune import heads


def default_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.init = ''  # a pre-training workdir: its final checkpoint, vocabulary and model config
  c.from_scratch = False  # True: that model and vocabulary with random weights (a baseline)
  c.seed = 0  # seed of the first fine-tuning; run k uses seed + k
  c.num_seeds = 1  # fine-tunings from the same checkpoint; the median is reported (paper: 10)
  c.epochs = 0.0  # 0: the paper's for the task (3; 10 for RTE and STS-B; 3 for your own data)
  c.batch_size = 32  # global batch (a multiple of the number of devices)
  c.eval_batch_size = 32  # global batch of evaluation and prediction
  c.max_seq_length = 128  # tokens per example, [CLS] and [SEP]s included
  c.dropout_rate = -1.0  # dropout in the encoder and on the head's input; -1: the rate the model
  #                       was pre-trained with (0.1 for the paper's presets and HF models; tiny: 0)
  c.pooling = 'cls'  # the classifier's input: 'cls' ([CLS]'s hidden state: the paper, HF's head)
  #                    or 'mean' (the mean over the example's tokens); tagging reads every token
  c.reinit = ''  # parts of the pre-trained encoder that start from random weights instead, comma
  #               separated: embeddings, word_embeddings, layer_<i> (0: the lowest), top (the last)
  c.log_every = 50  # steps between progress lines
  c.eval_every = 0  # steps between dev scores (0: at the end only); the best checkpoint is kept
  c.save_every = 500  # steps between checkpoints (and at the end, and when stopped by SIGTERM)
  c.baseline = True  # classification / regression: also score a TF-IDF + logistic (ridge)
  #                   regression baseline on the same splits (finetune/baseline.py)

  t = c.task = ml_collections.ConfigDict()
  t.name = 'sst2'  # a GLUE task (cola sst2 mrpc qqp stsb mnli qnli rte wnli), squad1, squad2,
  #                   'builtin', or 'own' (named after the train file, or its folder for train.csv)
  t.max_train_examples = 0  # train examples used, a fixed random subset (0: all; 'builtin': 4,000)
  t.tfds_data_dir = ''  # TFDS data_dir for GLUE ('' = TFDS's default)
  t.glue_dir = ''  # GLUE from the original download's TSV folders (<glue_dir>/MNLI/train.tsv ...)
  t.train = ''  # your own data: a .csv/.tsv (header row) or .jsonl file ...
  t.dev = ''  # ... evaluated after training (optional)
  t.test = ''  # ... predicted (optional); scored too when every row has a label
  t.header = True  # .csv/.tsv: the first row names the columns; False: name them by position
  t.text_a = 'text'  # the column holding the text (header=False: its position, 0 first)
  t.text_b = ''  # a second text column for pair tasks ('' = single text)
  t.label = 'label'  # the label column
  t.kind = 'classification'  # 'classification' (names), 'regression' (numbers), 'tagging' (CoNLL),
  #                            'multiple_choice' (a context and candidates: finetune/multiple_choice.py)
  t.choices = ''  # multiple choice: the candidates' columns, comma separated (the label: the right
  #                 one's index, 0 first)
  t.tag_column = -1  # tagging: the column of a CoNLL line that holds the tag (-1: the last)

  q = c.qa = ml_collections.ConfigDict()  # SQuAD (task.name squad1 / squad2)
  q.doc_stride = 128  # tokens between the starts of a context's windows
  q.max_query_length = 64  # question tokens kept
  q.n_best = 20  # spans considered per question
  q.max_answer_length = 30  # tokens of an answer at most
  q.start_top = 5  # best starts whose end logits are computed at prediction time
  q.null_threshold = -2.75  # SQuAD 2.0: no answer where the null log-odds exceed this

  o = c.optimizer = ml_collections.ConfigDict()
  o.learning_rate = 0.0  # 0: the paper's for the size (3e-4 Small, 1e-4 Base, 5e-5 Large)
  o.layerwise_decay = 0.0  # 0: the paper's (0.8 Small/Base, 0.9 Large); 1 disables
  o.layerwise_decay_rule = 'intended'  # 'intended' or 'original' (the release's off-by-one)
  o.word_table_lr = 1.0  # a further learning-rate factor of the word embeddings (the paper: 1). The
  #   table feeds a LayerNorm, so only its rows' directions matter, and Adam moves each weight by
  #   about the learning rate whatever its size: pre-training leaves the rows larger than at
  #   initialization, so they turn more slowly than random weights' (docs/short_pretraining.md).
  #   A factor of 10 is the same as starting from a table 10x smaller.
  o.warmup_fraction = 0.1  # share of the steps spent warming up
  o.weight_decay = 0.0  # the paper's 0 (the original code used 0.01)
  o.b1 = 0.9
  o.b2 = 0.999
  o.eps = 1e-6
  o.bias_correction = False  # the original Adam has no bias correction
  o.grad_clip_norm = 1.0
  return c


def dropout_rate(cfg, model_cfg) -> float:
  """The fine-tuning's dropout rate: `cfg.dropout_rate`, or the pre-trained model's where -1."""
  return model_cfg.dropout_rate if cfg.dropout_rate < 0 else cfg.dropout_rate


def check_for_model(cfg, model_cfg):
  """Refuses (UserError) settings the pre-trained model cannot take."""
  if cfg.max_seq_length > model_cfg.max_position_embeddings:
    raise UserError(f'max_seq_length={cfg.max_seq_length} exceeds the model\'s '
                    f'{model_cfg.max_position_embeddings} positions; lower it')
  with user_errors(ValueError):
    heads.reinit_parts(cfg.get('reinit', ''), model_cfg.num_layers)


def optimizer_config(cfg, model_cfg, total_steps: int) -> ml_collections.ConfigDict:
  """The optimizer of a fine-tuning of `total_steps` as optim.make_optimizer takes it: the
  original's schedule (linear warm-up, linear decay to 0), the paper's rates where `cfg` says 0."""
  o = cfg.optimizer
  return ml_collections.ConfigDict(dict(
      learning_rate=o.learning_rate or paper_learning_rate(model_cfg.hidden_size),
      warmup_steps=int(o.warmup_fraction * total_steps), decay_steps=total_steps, decay_power=1.0,
      schedule='original', b1=o.b1, b2=o.b2, eps=o.eps, bias_correction=o.bias_correction,
      weight_decay=o.weight_decay, grad_clip_norm=o.grad_clip_norm))


def recipe(cfg, task, model_cfg, pretrained: bool) -> str:
  """The recipe in one line: epochs, batch, learning rate, layer-wise decay, dropout, and what
  departs from the paper's."""
  o = cfg.optimizer
  return (f'recipe: {cfg.epochs or task.epochs:g} epochs of batch {cfg.batch_size}, learning rate '
          f'{o.learning_rate or paper_learning_rate(model_cfg.hidden_size):g}, layer-wise decay '
          f'{o.layerwise_decay or paper_layerwise_decay(model_cfg.num_layers):g}, dropout '
          f'{dropout_rate(cfg, model_cfg):g}'
          + (f', word table at {o.word_table_lr:g}x the learning rate'
             if o.get('word_table_lr', 1.0) != 1.0 else '')
          + (f', re-initialized: {cfg.reinit}' if cfg.get('reinit', '') and pretrained else ''))


def paper_learning_rate(hidden_size: int) -> float:
  return 3e-4 if hidden_size <= 256 else 1e-4 if hidden_size <= 768 else 5e-5


def paper_layerwise_decay(num_layers: int) -> float:
  return 0.9 if num_layers >= 24 else 0.8


POOLINGS = ('cls', 'mean')


def check(cfg, mesh):
  """Refuses (UserError) a fine-tuning config whose values cannot run, naming the fix."""
  for what, value in (('batch_size', cfg.batch_size), ('eval_batch_size', cfg.eval_batch_size)):
    with user_errors(ValueError):
      partitioning.check_batch_size(value, mesh, what)
  if cfg.num_seeds < 1 or cfg.log_every < 1:
    raise UserError('num_seeds and log_every must be at least 1')
  if cfg.get('eval_every', 0) < 0 or cfg.get('save_every', 0) < 0:
    raise UserError('eval_every and save_every must be 0 (off) or more')
  if not (cfg.dropout_rate == -1 or 0 <= cfg.dropout_rate < 1):
    raise UserError(f'dropout_rate is {cfg.dropout_rate}; use a rate in [0, 1), or -1 for the '
                    'rate the model was pre-trained with')
  factor = cfg.optimizer.get('word_table_lr', 1.0)
  if not (isinstance(factor, (int, float)) and 0 < factor < float('inf')):
    raise UserError(f'optimizer.word_table_lr is {factor!r}; give a positive factor (1: '
                    'the same learning rate as the rest of the layer)')
  if cfg.get('pooling', 'cls') not in POOLINGS:
    raise UserError(f'pooling is {cfg.pooling!r}; use {" or ".join(POOLINGS)}')
  if cfg.task.get('max_train_examples', 0) < 0:
    raise UserError(f'task.max_train_examples is {cfg.task.max_train_examples}; give 0 (all) or '
                    'a number of examples')
  if cfg.max_seq_length < 3:
    raise UserError(f'max_seq_length={cfg.max_seq_length} leaves no room for text ([CLS] and '
                    '[SEP] take 2 tokens); raise it (the default is 128)')


# Fields that change how a fine-tuning is run or reported, not what it computes.
_MAY_CHANGE = ('num_seeds', 'log_every', 'eval_every', 'save_every', 'eval_batch_size',
               'baseline')


def check_same_finetuning(cfg, workdir: str):
  """A re-run in a workdir holding fine-tunings continues them (a killed seed resumes, a finished
  one is scored again): refused when the config would compute something else."""
  path = fs.join(workdir, 'config.json')
  if not fs.isfile(path) or not any(n.startswith('seed_') for n in fs.listdir(workdir)):
    return
  with fs.open(path) as f:
    before = _with_defaults(json.loads(default_config().to_json()), json.load(f))
  after = json.loads(cfg.to_json())
  diffs = [f'{k} {before.get(k)!r} -> {after.get(k)!r}' for k in sorted(set(before) | set(after))
           if k not in _MAY_CHANGE and before.get(k) != after.get(k)]
  if diffs:
    raise UserError(f'--workdir {workdir} holds fine-tunings with a different config '
                    f'({"; ".join(diffs)}); use a new --workdir, or the same config to continue')


def _with_defaults(defaults: dict, saved: dict) -> dict:
  """`saved` with the fields an earlier version did not have at their defaults (which is what
  that version computed)."""
  return {**defaults, **{k: _with_defaults(defaults[k], v) if isinstance(v, dict) and isinstance(
      defaults.get(k), dict) else v for k, v in saved.items()}}


def saved_config(workdir: str, mode: str) -> ml_collections.ConfigDict:
  """The config a fine-tuning workdir was trained with (for --mode=eval/predict without --config)."""
  path = fs.join(workdir, 'config.json')
  if mode != 'train' and not fs.isdir(workdir):
    raise UserError(f'--workdir {workdir} does not exist; give the --workdir of a fine-tuning '
                    '(launch/finetune.py --mode=train)')
  if mode == 'train' or not fs.isfile(path):
    raise UserError(f'--config is required ({path} does not exist); give the fine-tuning config' if
                    mode != 'train' else '--config is required for --mode=train; give a '
                    'configs/finetune/*.py file')
  config = fs.read_json(path, 'give the fine-tuning\'s config file with --config')
  if isinstance(config, dict) and 'objective' in config and 'task' not in config:
    raise UserError(f'{workdir} is a pre-training workdir (of launch/train.py); fine-tune it with '
                    f'--init={workdir} and a new --workdir, then use --mode={mode} on that one')
  return ml_collections.ConfigDict(config)
