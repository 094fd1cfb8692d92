"""The original example builder: documents of sentences -> packed [CLS] A [SEP] B [SEP] examples.

Faithful to ELECTRA's `build_pretraining_dataset.py`:
- sentences are appended until the example's target length is reached; a blank line (end of a
  document) closes the example early, so examples never cross documents;
- tokens beyond the example's length are dropped, never carried into the next example;
- 10% of examples are a single segment; otherwise segment A takes sentences while it is under
  (target - 3) // 2 tokens, with a coin flip for the sentence that crosses that line;
- after each example, 5% of the time the next target length is drawn from [5, max_length].
Every draw comes from one `random.Random(seed)`, so the output is a function of input and seed.
"""

import random
from typing import Iterable, Iterator, NamedTuple

import numpy as np


class Example(NamedTuple):
  input_ids: np.ndarray  # [max_length] int32, 0-padded
  input_mask: np.ndarray  # [max_length] int32, 1 on real tokens
  segment_ids: np.ndarray  # [max_length] int32, 0 for [CLS] A [SEP], 1 for B [SEP]


class ExampleBuilder:
  """Feeds sentences (lists of ids) in; yields an Example whenever one is complete."""

  def __init__(self, max_length: int, cls_id: int, sep_id: int, seed: int | str = 0,
               pad_id: int = 0):
    if max_length < 5:
      raise ValueError(f'max_seq_length must be at least 5, not {max_length}')
    self.max_length, self.cls_id, self.sep_id, self.pad_id = max_length, cls_id, sep_id, pad_id
    self.rng = random.Random(seed)
    self.sentences: list[list[int]] = []
    self.length = 0
    self.target_length = max_length

  def add_sentence(self, ids: list[int]) -> Example | None:
    self.sentences.append(ids)
    self.length += len(ids)
    if self.length >= self.target_length:
      return self._create_example()
    return None

  def end_document(self) -> Example | None:
    return self._create_example() if self.length else None

  def _create_example(self) -> Example:
    rng = self.rng
    # 10% of examples hold a single segment (as classification inputs do).
    first_target = 100_000 if rng.random() < 0.1 else (self.target_length - 3) // 2
    first: list[int] = []
    second: list[int] = []
    for sentence in self.sentences:
      if (not first or len(first) + len(sentence) < first_target or
          (not second and len(first) < first_target and rng.random() < 0.5)):
        first += sentence
      else:
        second += sentence
    # Trim, leaving room for [CLS] and one or two [SEP].
    first = first[:self.max_length - 2]
    second = second[:max(0, self.max_length - len(first) - 3)]
    self.sentences, self.length = [], 0
    self.target_length = (rng.randint(5, self.max_length) if rng.random() < 0.05
                          else self.max_length)
    return self._pack(first, second)

  def _pack(self, first: list[int], second: list[int]) -> Example:
    ids = [self.cls_id] + first + [self.sep_id]
    segments = [0] * len(ids)
    if second:
      ids += second + [self.sep_id]
      segments += [1] * (len(second) + 1)
    n, pad = len(ids), self.max_length - len(ids)
    return Example(np.array(ids + [self.pad_id] * pad, np.int32),
                   np.array([1] * n + [0] * pad, np.int32),
                   np.array(segments + [0] * pad, np.int32))


def build_examples(tokenized_lines: Iterable[list[int] | None], max_length: int, cls_id: int,
                   sep_id: int, seed: int = 0) -> Iterator[Example]:
  """`tokenized_lines`: a list of ids per sentence, None at the end of each document."""
  builder = ExampleBuilder(max_length, cls_id, sep_id, seed)
  for ids in tokenized_lines:
    example = builder.end_document() if ids is None else builder.add_sentence(ids)
    if example is not None:
      yield example
  example = builder.end_document()
  if example is not None:
    yield example
