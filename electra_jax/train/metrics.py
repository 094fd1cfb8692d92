"""Metric sums -> numbers: what a step returns (`ratio`: a numerator and a denominator, summed over
microbatches, devices and steps), the AUC of the detection logits' histograms, and `Metric`, the
declaration of one an objective reports. Writing and drawing them: train/logs.py."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Metric:
  """A metric an objective reports, declared beside the loss that computes it (its module's
  `Objective` entry): what the progress lines, curves.png, keep_best, the summary and the compare
  tool read of it."""
  name: str  # in the step's sums, metrics.jsonl and TensorBoard
  better: str = ''  # 'min' or 'max': keep_best may rank checkpoints by it ('': it may not)
  title: str = ''  # its panel in curves.png ('': none); an objective's first six are drawn
  baseline: bool = False  # the unigram baseline drawn on its panel (a token loss in nats)
  column: str = ''  # its column in the compare tool's table ('': none); metrics of one column
  #   are alternatives (an objective reports one of them)


def ratio(numerator, denominator):
  """A metric as the step returns it: [sum of the numerator, sum of the denominator] in float32,
  summed over microbatches, devices and log intervals, divided when read (`summarize`)."""
  return jnp.stack([jnp.sum(numerator), jnp.sum(denominator)]).astype(jnp.float32)


def auc_from_histograms(pos: np.ndarray, neg: np.ndarray) -> float:
  """Area under the ROC curve from per-bin counts of positives and negatives (ties count half)."""
  pos, neg = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
  if pos.sum() == 0 or neg.sum() == 0:
    return float('nan')
  neg_below = np.cumsum(neg) - neg
  return float((pos * (neg_below + 0.5 * neg)).sum() / (pos.sum() * neg.sum()))


HISTOGRAMS = '_histograms'  # a sum named <metric>_histograms: the two histograms of a ranking


def summarize(sums) -> dict[str, float]:
  """Accumulated {name: [numerator, denominator]} (and {<metric>_histograms: the positives' and
  negatives' histograms of a score, whose AUC is <metric>}) -> {name: value}."""
  sums = jax.device_get(sums)
  out = {}
  for name, value in sums.items():
    value = np.asarray(value)
    if name.endswith(HISTOGRAMS):
      out[name[:-len(HISTOGRAMS)]] = auc_from_histograms(value[0], value[1])
    elif name.endswith('_steps'):  # a count of steps, not a mean
      out[name] = float(value[0])
    else:
      out[name] = float(value[0] / value[1]) if value[1] > 0 else float('nan')
  return out
