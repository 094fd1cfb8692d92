"""The baseline a fine-tuning should beat: TF-IDF features and a linear model, on the same splits.

    scores = baseline.tfidf(task, kind, splits)  # {split: {metric: value}}, or None where it
                                                 # does not apply (the kind's `baseline` is '')

Word unigrams and bigrams plus character 2-5-grams (within words), TF-IDF weighted with sublinear
term frequencies; logistic regression for classes, ridge regression for numbers. Its one setting,
the regularization strength, is chosen by 3-fold cross-validation on the train split alone (no dev
example is seen before scoring), from a fixed grid. A pair task's two texts are joined by a marker
word. Scored with the task's own metrics on its dev splits and labelled test splits.
"""

import statistics
import time

import numpy as np

from electra_jax.finetune.kinds import scores

_PAIR = ' qqsepqq '  # joins a pair's texts: a word no text holds
_STRENGTHS = (0.3, 1.0, 3.0, 10.0, 30.0)  # logistic regression's C; ridge's alpha is 1 / C


def _texts(examples) -> list[str]:
  return [e.text_a if not e.text_b else f'{e.text_a}{_PAIR}{e.text_b}' for e in examples]


def _targets(task, kind, examples) -> np.ndarray:
  if kind.baseline == 'numbers':
    return np.asarray([float(e.label) for e in examples], np.float64)
  index = {name: i for i, name in enumerate(task.labels)}
  return np.asarray([index[str(e.label)] for e in examples])


def features():
  """The TF-IDF feature extractor (scikit-learn), not yet fitted."""
  # scikit-learn takes 0.8 s to import: loaded where the baseline is computed, not by every run
  from sklearn.feature_extraction.text import TfidfVectorizer
  from sklearn.pipeline import FeatureUnion
  return FeatureUnion([
      ('words', TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1,
                                token_pattern=r'(?u)\b\w+\b')),
      ('chars', TfidfVectorizer(analyzer='char_wb', ngram_range=(2, 5), sublinear_tf=True,
                                min_df=2, max_features=300_000)),
  ])


def linear_model(numbers: bool, y: np.ndarray | None):
  """The linear model, not yet fitted: ridge regression (`numbers`) or logistic regression, its
  strength chosen from a fixed grid by 3-fold cross-validation on what it is fitted on (targets
  `y`)."""
  from sklearn.linear_model import LogisticRegression, Ridge
  from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold
  if numbers:
    return GridSearchCV(Ridge(), {'alpha': [1 / c for c in _STRENGTHS]},
                        cv=KFold(3, shuffle=True, random_state=0))
  folds = max(2, min(3, int(np.bincount(np.asarray(y)).min())))  # every class in each fold
  return GridSearchCV(LogisticRegression(max_iter=2000), {'C': list(_STRENGTHS)},
                      cv=StratifiedKFold(folds, shuffle=True, random_state=0), scoring='accuracy')


def fit(task, kind, train: list):
  """(features, model) fitted on the train examples."""
  extract = features()
  x = extract.fit_transform(_texts(train))
  y = _targets(task, kind, train)
  model = linear_model(kind.baseline == 'numbers', y)
  model.fit(x, y)
  return extract, model


def tfidf(task, kind, splits: dict) -> dict | None:
  """{split: {metric: value}} of the baseline on the task's dev and labelled test splits; None
  for a task it does not apply to (its kind's `baseline` is '') or without a train split."""
  if not kind.baseline or 'train' not in splits:
    return None
  scored = [s for s in task.dev_splits + task.test_splits if s in splits and splits[s]]
  if not scored:
    return {}
  extract, model = fit(task, kind, splits['train'])
  out = {}
  for split in scored:
    examples = splits[split]
    predictions = model.predict(extract.transform(_texts(examples)))
    out[split] = scores.compute(task.metrics, _targets(task, kind, examples), predictions)
  return out


def reported(task, kind, draws: list[dict], log) -> dict | None:
  """`tfidf` of the splits of each of `draws` (a few-shot fine-tuning's: each seed's train
  examples; else the one set of splits), the median of their scores; logged in one line with its
  time (None, and nothing logged, where it does not apply)."""
  if not kind.baseline or not any(s in draws[0] for s in task.dev_splits + task.test_splits):
    return None  # (nothing to score it on)
  t = time.time()
  each = [tfidf(task, kind, splits) or {} for splits in draws]
  base = {split: {m: statistics.median(b[split][m] for b in each) for m in scored}
          for split, scored in each[0].items()}
  of = f', the median of {len(draws)} draws of the train split' if len(draws) > 1 else ''
  log(f'TF-IDF baseline (word and character n-grams, linear model{of}; {time.time() - t:.0f} s): '
      + ' | '.join(f'{s} {m} {100 * v:.2f}' for s, scored in base.items()
                   for m, v in scored.items()))
  return base


def verdict(name: str, metric: str, tuned: float, baseline: float) -> str:
  """One line saying which of the fine-tuning and the baseline is ahead, in points."""
  gap = 100 * (tuned - baseline)
  side = ('ahead of' if gap > 0 else 'behind' if gap < 0 else 'level with')
  return (f'{name} {metric}: fine-tuned median {100 * tuned:.2f} is {side} the TF-IDF baseline '
          f'{100 * baseline:.2f} ({gap:+.2f} points)')
