"""Multiple choice (SWAG, COPA and the like): a context and N candidate endings; each pair
[CLS] context [SEP] candidate [SEP] gets one score from its [CLS], a softmax over the N scores is
trained by cross-entropy against the right candidate, scored by accuracy; exported as HF's
ElectraForMultipleChoice.

Your own files: `task.text_a` the context's column, `task.choices` the candidates' columns (comma
separated, in order), `task.label` the column holding the right candidate's index (0 first).
"""

import numpy as np

from electra_jax import UserError
from electra_jax.convert import hf
from electra_jax.convert import hf_code
from electra_jax.finetune.inputs import encode as encode_lib
from electra_jax.finetune.inputs import files
from electra_jax.finetune.inputs import tasks as tasks_lib
from electra_jax.finetune.kinds import classification
from electra_jax.finetune.kinds import heads


class ChoiceScorer(heads.Classifier):
  """The Classifier with one output, on every candidate of [N, C, L] inputs: [N, C] scores. On
  rows of packed sequences (each candidate one), a score per sequence, as the Classifier's."""

  def __call__(self, input_ids, segment_ids, input_mask, deterministic: bool = True,
               positions=None, starts=None):
    if input_ids.ndim == 2:  # rows (finetune/inputs/packing.py)
      return super().__call__(input_ids, segment_ids, input_mask, deterministic, positions,
                              starts)
    n, c, length = input_ids.shape
    flat = lambda x: x.reshape(n * c, length)
    return super().__call__(flat(input_ids), flat(segment_ids), flat(input_mask),
                            deterministic).reshape(n, c)


def columns(cfg) -> tuple[str, ...]:
  names = tuple(c.strip() for c in str(cfg.choices).split(',') if c.strip())
  if len(names) < 2:
    raise ValueError(f'task.choices is {cfg.choices!r}; name the columns of the '
                     'candidates, at least two, comma separated (e.g. '
                     '--config.task.choices=ending0,ending1,ending2,ending3)')
  twice = sorted({n for n in names if names.count(n) > 1})
  if twice:
    raise ValueError(f'task.choices names {", ".join(twice)} more than once; name each '
                     'candidate\'s column once')
  return names


class MultipleChoice(classification.Classification):
  name = 'multiple_choice'
  baseline = ''
  onnx_rows = ''
  own_data = 'a context, its candidates and the right one\'s index per row'
  hf_class = 'ElectraForMultipleChoice'
  hf_pipeline = ''  # (HF has no multiple-choice pipeline)
  init_shape = (1, 2, 8)
  text_classes = False  # (an example's class is one of its own candidates)

  def load(self, cfg, log=print):
    names = columns(cfg)
    splits = files.read_splits(cfg, choices=names, log=log)
    labels = tuple(str(i) for i in range(len(names)))
    for split, examples in splits.items():
      wrong = [i for i, e in enumerate(examples) if e.label is not None and e.label not in labels]
      if wrong:
        more = f' (and {len(wrong) - 1} more)' if len(wrong) > 1 else ''
        raise ValueError(f'data row {wrong[0] + 1} of {getattr(cfg, split)}{more} has the '
                         f'label {examples[wrong[0]].label!r}; a label is the index of the right '
                         f'candidate among task.choices ({", ".join(names)}): 0 to '
                         f'{len(names) - 1}')
    return tasks_lib.Task(tasks_lib.task_name(cfg), self.name, labels, self.metrics(labels),
                          ('dev',) if 'dev' in splits else ()), splits

  def metrics(self, labels: tuple) -> tuple:
    return ('accuracy',)

  def shape_of_outputs(self, task) -> str:
    return f'one of {len(task.labels)} candidates'

  def model(self, model_cfg, task, cfg, rate: float):
    return ChoiceScorer(model_cfg, 1, rate, pooling=cfg.pooling)

  def sequences(self, task) -> int:
    return len(task.labels)

  def encode(self, task, examples: list, tokenizer, max_len: int, train: bool, cfg=None):
    """Every (context, candidate) pair encoded as a text pair: [N, C, L] arrays."""
    c = len(task.labels)
    pairs = [tasks_lib.Example(e.text_a, ending, None) for e in examples for ending in e.text_b]
    flat = encode_lib.encode(pairs, tokenizer, max_len, np.zeros(len(pairs), np.int32))
    grouped = lambda x: x.reshape(len(examples), c, max_len)
    return encode_lib.Encoded(grouped(flat.input_ids), grouped(flat.segment_ids),
                              grouped(flat.input_mask), self.targets(task, examples),
                              flat.truncated)

  def notes(self, split: str, data, examples: list, max_len: int) -> list[str]:
    if not data.truncated:
      return []
    pairs = data.input_ids.shape[0] * data.input_ids.shape[1]
    return [f'{split}: {data.truncated} of {pairs} context-candidate pairs cut to {max_len} tokens '
            '(the longer text loses its last tokens first)']

  def loss(self, params, batch, rng, deterministic=False, *, model, task):
    """Cross-entropy of the softmax over each example's candidates' scores."""
    scores = classification.example_logits(params, batch, rng, deterministic, model)[..., 0]
    return classification.class_loss(scores, batch['labels'])

  def read_new(self, cfg, path: str, task, log=print) -> list:
    examples = files.read_table(path, cfg.text_a, cfg.text_b, cfg.label, labelled=None,
                                header=cfg.header, choices=columns(cfg), log=log)
    wrong = [i for i, e in enumerate(examples)
             if e.label is not None and e.label not in task.labels]
    if wrong:
      raise ValueError(f'data row {wrong[0] + 1} of {path} has the label '
                       f'{examples[wrong[0]].label!r};'
                       f' a label is the index of the right candidate among task.choices '
                       f'({cfg.choices}): 0 to {len(task.labels) - 1}; fix it, or leave the '
                       f'column {cfg.label!r} out to predict without scoring')
    return examples

  def columns(self, task, outputs, examples: list) -> tuple[tuple, list]:
    """The predicted candidate's index, the context and that candidate."""
    return ('prediction', 'context', 'choice'), [
        (k, e.text_a, e.text_b[k]) for e, k in zip(examples, self.predictions(task, outputs))]

  def check(self, cfg, splits: dict):
    if cfg.max_seq_length < 5:
      raise UserError(f'max_seq_length={cfg.max_seq_length} leaves a context and a candidate no '
                      'room ([CLS] and two [SEP] take 3 tokens, each text needs one); raise it '
                      '(the default is 128)')

  def check_model(self, model_cfg, outputs: int, pooling: str = 'cls', cfg=None):
    return ChoiceScorer(model_cfg, 1, pooling=pooling)

  def to_hf(self, params, model_cfg, labels: list[str], dropout: float,
            pooling: str = 'cls', cfg=None) -> tuple[dict, dict]:
    """ElectraForMultipleChoice: its sequence summary reads the first token with no projection and
    no activation, then its classifier is our dense. A head on the mean of the tokens: the class
    hf_code.py ships (SequenceSummary's 'mean' would average the padding too). The modern
    backbone: ModernBertForMultipleChoice, with either pooling."""
    if model_cfg.modern:
      return hf.modern_task_to_hf(params, model_cfg, self.hf_class, pooling, dropout, {})
    if pooling == 'mean':
      return hf.dense_head_to_hf(params, model_cfg), {
          **hf_code.mean_pooled('AutoModelForMultipleChoice'), 'classifier_dropout': dropout}
    return hf.dense_head_to_hf(params, model_cfg), {
        'architectures': [self.hf_class], 'summary_type': 'first', 'summary_use_proj': False,
        'summary_activation': '', 'summary_first_dropout': 0.0, 'summary_last_dropout': dropout}

  def hf_inputs(self, ids, segments, mask) -> tuple:
    """Pairs of texts grouped two by two as the candidates of one example: [B / 2, 2, L]."""
    grouped = lambda x: x[:len(x) // 2 * 2].reshape(len(x) // 2, 2, x.shape[-1])
    return grouped(ids), grouped(segments), grouped(mask)


KIND = MultipleChoice()
