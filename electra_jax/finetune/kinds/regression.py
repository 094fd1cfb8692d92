"""Regression: one number per text or pair of texts (STS-B, your own files with numeric labels),
a single output from [CLS] trained by squared error, scored by Spearman and Pearson correlation;
exported as HF's ElectraForSequenceClassification with problem_type 'regression'.
"""

import jax.numpy as jnp
import numpy as np

from electra_jax.finetune.inputs import files
from electra_jax.finetune.inputs import tasks as tasks_lib
from electra_jax.finetune.kinds import classification
from electra_jax.finetune.kinds import scores as scores_lib
from electra_jax.train import metrics as metrics_lib


class Regression(classification.Classification):
  name = 'regression'
  baseline = 'numbers'
  onnx_rows = 'number'
  own_data = 'a text (pair) and its number per row'
  text_classes = False  # (a number, no class)
  problem_type = 'regression'

  def load(self, cfg, log=print):
    """The task of your own files, its targets scaled to [0, 1] by the train split's range."""
    splits = files.read_splits(cfg, numeric=True, log=log)
    values = [e.label for e in splits.get('train', ())]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if high == low:
      raise ValueError(f'every target of the train data is {low:g}; a regression task needs at '
                       'least 2 distinct values')
    return tasks_lib.Task(tasks_lib.task_name(cfg), self.name, (), self.metrics(()),
                          ('dev',) if 'dev' in splits else (), label_scale=high - low,
                          label_offset=low), splits

  def metrics(self, labels: tuple) -> tuple:
    return ('spearman', 'pearson')

  def shape_of_outputs(self, task) -> str:
    return 'one number'

  def outputs(self, task) -> int:
    return 1

  def loss(self, params, batch, rng, deterministic=False, *, model, task):
    """Mean squared error over the examples that have a target (a batch's padding has none)."""
    predicted = classification.example_logits(params, batch, rng, deterministic, model)[:, 0, 0]
    targets = batch['labels']
    weights = jnp.isfinite(targets).astype(jnp.float32)
    errors = jnp.square(predicted - jnp.where(weights > 0, targets, 0.0)) * weights
    loss = jnp.sum(errors) / jnp.maximum(jnp.sum(weights), 1.0)
    return loss, {'loss': metrics_lib.ratio(loss, 1.0)}

  def label_shapes(self, task, layout) -> dict:
    return {'labels': ((layout.examples,), jnp.float32)}

  def targets(self, task, examples: list) -> np.ndarray:
    """Each label in the task's [0, 1] (STS-B: divided by 5); NaN where none."""
    return np.asarray([(float(e.label) - task.label_offset) / task.label_scale
                       if e.label is not None else np.nan for e in examples], np.float32)

  def predictions(self, task, logits) -> np.ndarray:
    """The output in the labels' own units."""
    return logits[:, 0] * task.label_scale + task.label_offset

  def scores(self, task, outputs, data, examples: list, cfg=None) -> dict:
    return scores_lib.compute(task.metrics, data.labels * task.label_scale + task.label_offset,
                              self.predictions(task, outputs))

  def in_units(self, state: dict, meta: dict) -> dict:
    """The exported head's output in the labels' own units (checkpoints that record them)."""
    scale, offset = meta.get('label_scale', 1.0), meta.get('label_offset', 0.0)
    out = 'classifier.out_proj' if 'classifier.out_proj.weight' in state else 'classifier'
    return {**state, f'{out}.weight': state[f'{out}.weight'] * scale,
            f'{out}.bias': state[f'{out}.bias'] * scale + offset}

  def predicted(self, task, outputs, data, examples: list, cfg=None) -> list[dict]:
    return [{'prediction': float(v)} for v in self.predictions(task, outputs)]

  def from_units(self, outputs, meta: dict):
    return (outputs - meta.get('label_offset', 0.0)) / meta.get('label_scale', 1.0)

  def shown(self, task, logits) -> list[str]:
    return [f'{v:.3f}' for v in self.predictions(task, logits)]

  def names(self, labels: list[str]) -> list[str]:
    return ['score']


KIND = Regression()
