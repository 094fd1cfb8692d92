"""Classification: one class per text or pair of texts (GLUE's classification tasks, the built-in
tasks, your own labelled files), read from [CLS] (or the mean of the tokens), scored by accuracy,
F1 or Matthews correlation; exported as HF's ElectraForSequenceClassification ([CLS]) or as the
mean-pooled class an export ships (convert/hf_code.py); the modern backbone as
ModernBertForSequenceClassification with either pooling.
"""

import jax.numpy as jnp
import numpy as np
import optax

from electra_jax import UserError
from electra_jax.convert import hf
from electra_jax.convert import hf_code
from electra_jax.finetune.inputs import encode as encode_lib
from electra_jax.finetune.inputs import files
from electra_jax.finetune.inputs import tasks as tasks_lib
from electra_jax.finetune.kinds import heads
from electra_jax.finetune.kinds import interface as kinds
from electra_jax.finetune.kinds import scores as scores_lib
from electra_jax.train import metrics as metrics_lib
from electra_jax.storage import fs

# Leaderboard file names of GLUE's test splits.
LEADERBOARD = {'cola': 'CoLA', 'sst2': 'SST-2', 'mrpc': 'MRPC', 'qqp': 'QQP', 'stsb': 'STS-B',
               'qnli': 'QNLI', 'rte': 'RTE', 'wnli': 'WNLI', 'mnli/test_matched': 'MNLI-m',
               'mnli/test_mismatched': 'MNLI-mm'}


def class_loss(logits, labels):
  """Mean cross-entropy over the items whose label is not -1 (examples, or tagged tokens), and
  their accuracy."""
  weights = (labels >= 0).astype(jnp.float32)
  labels = jnp.maximum(labels, 0)
  per_item = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
  loss = jnp.sum(per_item * weights) / jnp.maximum(jnp.sum(weights), 1.0)
  correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32) * weights
  return loss, {'loss': metrics_lib.ratio(loss, 1.0),
                'accuracy': metrics_lib.ratio(correct, weights)}


def softmax(logits) -> np.ndarray:
  """The softmax over the last axis, in float64 (what prediction files give as probabilities)."""
  z = np.asarray(logits, np.float64)
  z = np.exp(z - z.max(-1, keepdims=True))
  return z / z.sum(-1, keepdims=True)


def logits_of(params, batch, rng, deterministic, model):
  """The head's outputs on a batch of rows: per sequence [R, S, outputs] (per token [R, L, ...])."""
  return model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                     batch['input_mask'], deterministic, batch['positions'], batch['starts'],
                     rngs={'dropout': rng}, **kinds.token_inputs(batch))


def example_logits(params, batch, rng, deterministic, model):
  """[X, K, outputs]: the outputs at each example's sequences (packing's slots)."""
  return heads.per_example(logits_of(params, batch, rng, deterministic, model), batch['slots'])


class Classification(kinds.Kind):
  name = 'classification'
  baseline = 'classes'
  onnx_rows = 'classes'
  text_classes = True
  own_data = 'a text (pair) and its class per row'
  hf_class = 'ElectraForSequenceClassification'
  hf_pipeline = 'text-classification'
  problem_type = 'single_label_classification'

  def load(self, cfg, log=print):
    splits = files.read_splits(cfg, log=log)
    labels = files.class_names(splits)
    if len(splits['train']) >= 20 and len(labels) > len(splits['train']) / 2:  # (an id column?)
      log(f'warning: the train data has {len(labels)} classes among {len(splits["train"])} '
          f'examples (about {len(splits["train"]) / len(labels):.1f} each): is task.label='
          f'{cfg.label!r} the column of the labels?')
    return tasks_lib.Task(tasks_lib.task_name(cfg), self.name, labels, self.metrics(labels),
                          ('dev',) if 'dev' in splits else ()), splits

  def metrics(self, labels: tuple) -> tuple:
    return ('accuracy', 'f1') if len(labels) == 2 else ('accuracy',)

  def shape_of_outputs(self, task) -> str:
    return f'{len(task.labels)} classes'

  def outputs(self, task) -> int:
    return len(task.labels)

  def model(self, model_cfg, task, cfg, rate: float):
    return heads.Classifier(model_cfg, self.outputs(task), rate, pooling=cfg.pooling)

  def loss(self, params, batch, rng, deterministic=False, *, model, task):
    return class_loss(example_logits(params, batch, rng, deterministic, model)[:, 0],
                      batch['labels'])

  def label_shapes(self, task, layout) -> dict:
    return {'labels': ((layout.examples,), jnp.int32)}

  def targets(self, task, examples: list) -> np.ndarray:
    index = {name: i for i, name in enumerate(task.labels)}
    return np.asarray([index[str(e.label)] if e.label is not None else -1 for e in examples],
                      np.int32)

  def encode(self, task, examples: list, tokenizer, max_len: int, train: bool, cfg=None):
    if train and task.swap_pairs:
      examples = encode_lib.swapped(examples)
    return encode_lib.encode(examples, tokenizer, max_len, self.targets(task, examples))

  def predictions(self, task, logits) -> np.ndarray:
    return logits.argmax(-1)

  def scores(self, task, outputs, data, examples: list, cfg=None) -> dict:
    return scores_lib.compute(task.metrics, data.labels, self.predictions(task, outputs))

  def shown(self, task, logits) -> list[str]:
    """The predictions as written to a file."""
    return [task.labels[i] for i in self.predictions(task, logits)]

  def columns(self, task, outputs, examples: list) -> tuple[tuple, list]:
    """(header, rows) of a prediction file after its index column: the prediction first."""
    return ('prediction', 'text_a', 'text_b'), [
        (v, e.text_a, e.text_b) for e, v in zip(examples, self.shown(task, outputs))]

  def write_predictions(self, task, split: str, outputs, examples: list, folder: str, data=None,
                        cfg=None) -> str:
    """GLUE's test splits: the leaderboard's `<Task>.tsv` (index, prediction); other data: a TSV
    of index, prediction and the example's text(s) (`columns`)."""
    fs.makedirs(folder, exist_ok=True)
    name = LEADERBOARD.get(f'{task.name}/{split}', LEADERBOARD.get(task.name))
    glue = name is not None and split.startswith('test') and task.name in tasks_lib.GLUE
    path = fs.join(folder, f'{name}.tsv' if glue else f'{split}_predictions.tsv')
    header, rows = self.columns(task, outputs, examples)
    keep = 1 if glue else len(header)
    clean = lambda t: ('' if t is None else str(t)).replace('\t', ' ').replace('\n', ' ')
    lines = ['\t'.join(('index',) + header[:keep]) + '\n'] + [
        '\t'.join([str(e.idx if e.idx is not None else i)] + [clean(c) for c in row[:keep]]) + '\n'
        for i, (e, row) in enumerate(zip(examples, rows))]
    fs.write_atomic(path, ''.join(lines))
    return path

  def read_new(self, cfg, path: str, task, log=print) -> list:
    examples = files.read_table(path, cfg.text_a, cfg.text_b, cfg.label, labelled=None,
                                header=cfg.header, numeric=self.baseline == 'numbers', log=log)
    unseen = sorted({str(e.label) for e in examples if e.label is not None} - set(task.labels))
    if task.labels and unseen:
      raise ValueError(f'{path} has the label(s) {unseen[:5]} in its column {cfg.label!r}, which '
                       f'the fine-tuning never saw (its labels are {list(task.labels)[:10]}); '
                       'fix those labels, or leave the column out to predict without scoring')
    return examples

  def predicted(self, task, outputs, data, examples: list, cfg=None) -> list[dict]:
    names = self.names(list(task.labels))
    return [{'prediction': shown, 'probabilities': dict(zip(names, map(float, p)))}
            for shown, p in zip(self.shown(task, outputs), softmax(outputs))]

  def check(self, cfg, splits: dict):
    super().check(cfg, splits)
    if cfg.max_seq_length < 5 and any(e.text_b for e in splits['train']):
      raise UserError(f'max_seq_length={cfg.max_seq_length} leaves a pair of texts no room '
                      '([CLS] and two [SEP] take 3 tokens, each text needs one); raise it (the '
                      'default is 128)')

  def describe(self, cfg) -> str:
    return f', head on {cfg.pooling}'

  def check_model(self, model_cfg, outputs: int, pooling: str = 'cls', cfg=None):
    return heads.Classifier(model_cfg, outputs, pooling=pooling)

  def to_hf(self, params, model_cfg, labels: list[str], dropout: float,
            pooling: str = 'cls', cfg=None) -> tuple[dict, dict]:
    """ElectraForSequenceClassification's head is dense -> GELU -> dense where ours is one dense:
    its first dense is the identity shifted to where GELU is the identity, its second ours less
    the shift. A head on the mean of the tokens: ours as it is, in the class hf_code.py ships. The
    modern backbone: ModernBertForSequenceClassification, our head as it is."""
    fields = {**hf.labelled(self.names(labels)), 'problem_type': self.problem_type,
              'classifier_dropout': dropout}
    if model_cfg.modern:
      return hf.modern_task_to_hf(params, model_cfg, self.hf_class, pooling, dropout, fields)
    if pooling == 'mean':
      return hf.dense_head_to_hf(params, model_cfg), {
          **fields, **hf_code.mean_pooled('AutoModelForSequenceClassification')}
    kernel, bias = hf.dense(params)
    state = hf.encoder_to_hf(params, model_cfg)
    shift = hf.identity_shift(params, model_cfg).astype(np.float32)  # the value subtracted
    state.update({'classifier.dense.weight': np.eye(model_cfg.hidden_size, dtype=np.float32),
                  'classifier.dense.bias': shift,
                  'classifier.out_proj.weight': kernel.T,
                  'classifier.out_proj.bias': (bias.astype(np.float64) - shift.astype(np.float64)
                                               @ kernel.astype(np.float64)).astype(np.float32)})
    return state, {**fields, 'architectures': [self.hf_class]}

  def names(self, labels: list[str]) -> list[str]:
    return labels


KIND = Classification()
