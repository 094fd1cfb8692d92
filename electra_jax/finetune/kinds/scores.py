"""Task scores on whole evaluation sets (host-side numpy; none of them is a mean of batch means)."""

import numpy as np


def accuracy(labels, predictions) -> float:
  return float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def f1(labels, predictions, positive: int = 1) -> float:
  """F1 of the positive class (MRPC, QQP): 2 tp / (2 tp + fp + fn); 0 when there is no positive."""
  y, p = np.asarray(labels) == positive, np.asarray(predictions) == positive
  tp = np.sum(y & p)
  denominator = 2 * tp + np.sum(~y & p) + np.sum(y & ~p)
  return float(2 * tp / denominator) if denominator else 0.0


def mcc(labels, predictions) -> float:
  """Matthews correlation (CoLA) of binary labels; 0 when a row or column of the table is empty."""
  y, p = np.asarray(labels) == 1, np.asarray(predictions) == 1
  tp, tn = float(np.sum(y & p)), float(np.sum(~y & ~p))
  fp, fn = float(np.sum(~y & p)), float(np.sum(y & ~p))
  denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(labels, predictions) -> float:
  y, p = np.asarray(labels, np.float64), np.asarray(predictions, np.float64)
  y, p = y - y.mean(), p - p.mean()
  denominator = np.sqrt(np.sum(y * y) * np.sum(p * p))
  return float(np.sum(y * p) / denominator) if denominator else 0.0


def _ranks(x) -> np.ndarray:
  """Ranks from 1, ties sharing their mean rank (as Spearman's coefficient needs)."""
  x = np.asarray(x, np.float64)
  order = np.argsort(x, kind='stable')
  ranks = np.empty(len(x))
  sorted_x = x[order]
  start = 0
  for end in range(1, len(x) + 1):
    if end == len(x) or sorted_x[end] != sorted_x[start]:
      ranks[order[start:end]] = (start + end + 1) / 2
      start = end
  return ranks


def spearman(labels, predictions) -> float:
  return pearson(_ranks(labels), _ranks(predictions))


SCORES = {'accuracy': accuracy, 'f1': f1, 'mcc': mcc, 'pearson': pearson, 'spearman': spearman}


def compute(names, labels, predictions) -> dict[str, float]:
  return {name: SCORES[name](labels, predictions) for name in names}
