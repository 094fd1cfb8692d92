"""The head's start from a linear model on the frozen encoder (`head_init='probe'`).

    state = probe.start(cfg, task, kind, model, state, data, splits, mesh, seed, log)

The encoder, before any fine-tuning step, reads every train example without dropout; what the head
reads (the [CLS] state or the mean of the tokens: `pooling`), centred and divided by its root mean
square, feeds a logistic regression (classes) or a ridge regression (numbers) whose strength is
chosen by 3-fold cross-validation on the train split, as the TF-IDF baseline's is
(baseline.linear_model). Its weights, with the centring and scale folded in, become the head's, and
fine-tuning then trains the whole network from there: linear probing, then fine-tuning (LP-FT;
Kumar et al. 2022). A head from random weights sends large, random gradients into the encoder
while it learns its first steps; a fitted head does not. On the real-text suite that helped only
with few labels and frozen features better than random weights' (docs/measured.md, "The head from
a linear probe"). The probe's own scores on the dev split(s) are logged: what a linear model finds
in the frozen features alone.
"""

import hashlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from electra_jax.finetune import baseline as baseline_lib
from electra_jax.finetune import batches

_FITTED: dict[tuple, tuple] = {}  # the last fit, by its features and targets


def head_weights(model, x: np.ndarray, y: np.ndarray, outputs: int,
                 numbers: bool) -> tuple[np.ndarray, np.ndarray, float]:
  """(kernel [hidden, outputs], bias [outputs], the chosen strength) of the linear model fitted
  on features `x` and targets `y` (class indices, or numbers), as the head's dense layer holds it:
  x @ kernel + bias are the model's logits (classes) or its prediction (numbers)."""
  mean = x.mean(0)  # centred, and scaled by the features' size, not their spread: fine-tuning
  scale = float(np.sqrt(np.mean(np.square(x)))) + 1e-12  # moves them by that much, and weights
  #                      fitted to a spread far smaller than that would give huge logits then
  model.fit((x - mean) / scale, y)
  best = model.best_estimator_
  coef = np.atleast_2d(best.coef_).astype(np.float64)  # [classes or 1, hidden]
  intercept = np.atleast_1d(best.intercept_).astype(np.float64)
  if numbers:
    rows, biases = coef, intercept
  else:
    if len(best.classes_) == 2:  # one logit z: softmax([-z/2, z/2]) is sigmoid(z)'s
      coef, intercept = np.concatenate([-coef / 2, coef / 2]), np.concatenate(
          [-intercept / 2, intercept / 2])
    rows = np.zeros((outputs, x.shape[1]))
    biases = np.full(outputs, intercept.min() - 10.0)  # a class train lacks: never predicted
    rows[best.classes_], biases[best.classes_] = coef, intercept
  kernel = (rows / scale).T
  bias = biases - (rows * (mean / scale)).sum(1)
  strength = next(iter(model.best_params_.values()))
  return kernel.astype(np.float32), bias.astype(np.float32), float(strength)


def fit(cfg, task, kind, model, params, data: dict, splits: dict, mesh, log) -> dict:
  """The head's parameters ({'kernel', 'bias'}) from a linear model on the frozen encoder's
  features of the train split; its scores on the dev split(s) logged."""
  t = time.time()
  numbers = kind.baseline == 'numbers'
  features = lambda split: np.asarray(batches.predict(
      model, params, data[split], cfg.eval_batch_size, mesh, method='features',
      pack=batches.task_prediction_packing(cfg, kind, data[split])), np.float64)
  x, y = features('train'), np.asarray(data['train'].labels)
  key = (hashlib.sha256(x.tobytes() + y.tobytes()).hexdigest(), numbers, kind.outputs(task))
  if key not in _FITTED:  # the seeds of a pre-trained start see the same features: one fit
    linear = baseline_lib.linear_model(numbers, None if numbers else y)
    _FITTED.clear()
    _FITTED[key] = head_weights(linear, x, y, kind.outputs(task), numbers)
  kernel, bias, strength = _FITTED[key]
  shown = []
  for split in (s for s in task.dev_splits if s in data):
    scores = kind.scores(task, features(split) @ kernel + bias, data[split], splits[split], cfg)
    shown += [f'{split} {m} {100 * v:.2f}' for m, v in scores.items()]
  log(f'head from a linear probe of the frozen encoder ({"alpha" if numbers else "C"}='
      f'{1 / strength if numbers else strength:g}, {time.time() - t:.0f} s)'
      + (': ' + ' | '.join(shown) if shown else ''))
  return {'kernel': kernel, 'bias': bias}


def with_head(state, head: dict):
  """`state` with the head's parameters replaced by `head`'s, in their dtypes and placements."""
  old = state.params['classifier']
  new = {k: jax.device_put(jnp.asarray(head[k], old[k].dtype), old[k].sharding) for k in old}
  return state.replace(params={**state.params, 'classifier': new})


def start(cfg, task, kind, model, state, data: dict, splits: dict, mesh, seed: int, log):
  """`state` with the head `fit` gives (logged as seed `seed`'s)."""
  return with_head(state, fit(cfg, task, kind, model, state.params, data, splits, mesh,
                              lambda line: log(f'seed {seed}: {line}')))
