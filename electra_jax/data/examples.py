"""Documents of sentences -> rows of tokens: the original example builder (`ExampleBuilder`:
[CLS] A [SEP] B [SEP] examples) and the long rows of several documents (`DocumentPacker`).

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

  def flush(self) -> Example | None:
    """What is left (nothing after `end_document`)."""
    return self.end_document()

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


class DocumentPacker:
  """Rows of `max_length` tokens holding several documents one after the other (the modern
  backbone's long rows), the builder's interface: each document as [CLS] its tokens [SEP], a
  document longer than the room left cut there and continued as a piece of its own (its own
  [CLS] and [SEP]) in the next row, so rows are full but the last one.

      input_ids    the pieces' tokens, then padding
      input_mask   the piece each token belongs to: 1, 2, ... (0: padding); a token attends to
                   its own piece alone and counts positions from its [CLS]
                   (model/attention_masks.py, model/networks.py)
      segment_ids  0 (the modern backbone has no token types)

  A room of fewer than `min_piece` tokens besides [CLS] and [SEP] is left as padding. No draw:
  the rows are a function of the documents alone. `add_sentence`, `end_document` and `flush`
  return the rows they complete (a list)."""

  def __init__(self, max_length: int, cls_id: int, sep_id: int, pad_id: int = 0,
               min_piece: int = 8):
    if max_length < 5:
      raise ValueError(f'max_seq_length must be at least 5, not {max_length}')
    self.max_length, self.cls_id, self.sep_id, self.pad_id = max_length, cls_id, sep_id, pad_id
    self.min_piece = min(min_piece, max_length - 2)
    self.pieces: list[list[int]] = []  # the current row's pieces, [CLS] and [SEP] included
    self.document: list[int] = []  # the current document's tokens not yet placed

  def _room(self) -> int:
    """Tokens of a piece (besides its [CLS] and [SEP]) the current row still takes."""
    return self.max_length - sum(map(len, self.pieces)) - 2

  def _place(self, ids: list[int]):
    self.pieces.append([self.cls_id] + ids + [self.sep_id])

  def add_sentence(self, ids: list[int]) -> list[Example]:
    self.document += ids
    rows = []
    while len(self.document) > self._room():  # the row cannot end this document: fill it
      room = self._room()
      if room >= self.min_piece:
        self._place(self.document[:room])
        self.document = self.document[room:]
      rows.append(self._row())
    return rows

  def end_document(self) -> list[Example]:
    if self.document:
      self._place(self.document)
      self.document = []
    return [self._row()] if self._room() < self.min_piece else []

  def flush(self) -> list[Example]:
    rows = self.end_document()
    return rows + ([self._row()] if self.pieces else [])

  def _row(self) -> Example:
    ids = [t for piece in self.pieces for t in piece]
    mask = [i + 1 for i, piece in enumerate(self.pieces) for _ in piece]
    self.pieces = []
    pad = self.max_length - len(ids)
    return Example(np.array(ids + [self.pad_id] * pad, np.int32),
                   np.array(mask + [0] * pad, np.int32), np.zeros(self.max_length, np.int32))


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
