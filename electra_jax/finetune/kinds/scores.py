"""Task scores on whole evaluation sets (none of them is a mean of batch means): scikit-learn's and
SciPy's, with GLUE's conventions where a score is undefined (no positive label or prediction for
F1, a constant column for MCC and the correlations: 0). Both are imported when a score is first
computed (about 1.5 s of a start that never scores otherwise)."""

import warnings

import numpy as np


def accuracy(labels, predictions) -> float:
  from sklearn import metrics
  return float(metrics.accuracy_score(labels, predictions))


def f1(labels, predictions, positive: int = 1) -> float:
  """F1 of the positive class (MRPC, QQP); 0 when there is no positive."""
  from sklearn import metrics
  return float(metrics.f1_score(np.asarray(labels) == positive,
                                np.asarray(predictions) == positive, zero_division=0.0))


def mcc(labels, predictions) -> float:
  """Matthews correlation (CoLA) of binary labels; 0 when a row or column of the table is empty."""
  from sklearn import metrics
  return float(metrics.matthews_corrcoef(np.asarray(labels) == 1, np.asarray(predictions) == 1))


def _correlation(test, labels, predictions) -> float:
  y, p = np.asarray(labels, np.float64), np.asarray(predictions, np.float64)
  if len(y) < 2 or np.all(y == y[0]) or np.all(p == p[0]):
    return 0.0  # (undefined for a constant column)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    return float(test(y, p)[0])


def pearson(labels, predictions) -> float:
  from scipy import stats
  return _correlation(stats.pearsonr, labels, predictions)


def spearman(labels, predictions) -> float:
  """Spearman's rank correlation, ties sharing their mean rank (STS-B's 0-5 ratings)."""
  from scipy import stats
  return _correlation(stats.spearmanr, labels, predictions)


SCORES = {'accuracy': accuracy, 'f1': f1, 'mcc': mcc, 'pearson': pearson, 'spearman': spearman}


def compute(names, labels, predictions) -> dict[str, float]:
  return {name: SCORES[name](labels, predictions) for name in names}
