"""Examples -> fixed-length id arrays: [CLS] a [SEP] (b [SEP]), padded, with labels.

Truncation (the original's rule): while a pair is too long, drop the last token of the longer text;
a single text keeps its first max_len - 2 tokens. Truncated examples are counted and reported.
"""

import dataclasses
import functools

import numpy as np

from electra_jax.finetune.inputs.tasks import Example, Task


@dataclasses.dataclass
class Encoded:
  input_ids: np.ndarray  # [N, L] int32 (multiple choice: [N, candidates, L])
  segment_ids: np.ndarray
  input_mask: np.ndarray
  labels: np.ndarray  # [N] int32 class index, or float32 target (regression); -1 / nan if none;
  #                     tagging: [N, L] int32 tag index at each word's first token, -1 elsewhere
  truncated: int  # examples cut to fit
  word_positions: list | None = None  # tagging: the first token's position of each kept word
  # per-token arrays shaped as input_ids that the kind's model takes by name (the prompted kind's
  # `word_mask`: 1 at the label word's tokens)
  token_inputs: dict = dataclasses.field(default_factory=dict)

  def __len__(self):
    return len(self.labels)

  def arrays(self) -> dict[str, np.ndarray]:
    return {'input_ids': self.input_ids, 'segment_ids': self.segment_ids,
            'input_mask': self.input_mask, 'labels': self.labels, **self.token_inputs}

  @functools.cached_property
  def lengths(self) -> np.ndarray:
    """[N, K] tokens of each example's sequences (K: multiple choice's candidates, else 1)."""
    k = self.input_ids.shape[1] if self.input_ids.ndim == 3 else 1
    return (self.input_mask.reshape(len(self), k, -1) > 0).sum(-1)


def truncate_pair(a: list, b: list | None, budget: int) -> tuple[list, list | None, bool]:
  """Cuts a (and b) to `budget` tokens in all, always from the end of the longer one."""
  a = list(a)
  b = None if b is None else list(b)
  cut = False
  while len(a) + (len(b) if b is not None else 0) > budget:
    cut = True
    if b is not None and len(b) > len(a):
      b.pop()
    else:
      a.pop()
  return a, b, cut


def swapped(examples: list[Example]) -> list[Example]:
  """The examples, then each pair again with its texts in the other order (MRPC and STS-B train on
  both orders)."""
  return list(examples) + [Example(e.text_b, e.text_a, e.label, e.idx) for e in examples
                           if e.text_b is not None]


def encode(examples: list[Example], tokenizer, max_len: int, labels: np.ndarray) -> Encoded:
  """Texts (pairs) as [CLS] a [SEP] (b [SEP]), padded to `max_len`, with `labels` (one per example,
  the kind's targets)."""
  special = tokenizer.special
  ids_a = tokenizer.encode_batch([e.text_a for e in examples])
  pairs = [i for i, e in enumerate(examples) if e.text_b is not None]
  ids_b = dict(zip(pairs, tokenizer.encode_batch([examples[i].text_b for i in pairs])))
  n = len(examples)
  out = Encoded(np.full((n, max_len), special.pad, np.int32), np.zeros((n, max_len), np.int32),
                np.zeros((n, max_len), np.int32), labels, 0)
  for i in range(n):
    b = ids_b.get(i)
    a, b, cut = truncate_pair(ids_a[i], b, max_len - (3 if b is not None else 2))
    out.truncated += cut
    tokens = [special.cls] + a + [special.sep]
    segments = [0] * len(tokens)
    if b is not None:
      tokens += b + [special.sep]
      segments += [1] * (len(b) + 1)
    out.input_ids[i, :len(tokens)] = tokens
    out.segment_ids[i, :len(tokens)] = segments
    out.input_mask[i, :len(tokens)] = 1
  return out


def encode_tagged(examples: list[Example], task: Task, tokenizer, max_len: int) -> Encoded:
  """Sentences of words -> [CLS] tokens [SEP]; each word's tag sits on its first sub-token (the
  others are not scored). Words past max_len - 2 tokens are cut (and count as 'O' predictions)."""
  special = tokenizer.special
  words = [w for e in examples for w in e.text_a]
  pieces = tokenizer.encode_batch(words)
  n = len(examples)
  out = Encoded(np.full((n, max_len), special.pad, np.int32), np.zeros((n, max_len), np.int32),
                np.zeros((n, max_len), np.int32), np.full((n, max_len), -1, np.int32), 0, [])
  index = {name: i for i, name in enumerate(task.labels)}
  k, word_positions = 0, out.word_positions
  assert word_positions is not None
  for i, e in enumerate(examples):
    tokens, positions = [special.cls], []
    for j in range(len(e.text_a)):
      word = pieces[k + j] or [special.unk]
      if len(tokens) + len(word) > max_len - 1:
        out.truncated += 1
        break
      positions.append(len(tokens))
      if e.label is not None:  # (a dev tag of a type train has, never in this form: unscored)
        out.labels[i, len(tokens)] = index.get(e.label[j], -1)
      tokens += word
    k += len(e.text_a)
    tokens.append(special.sep)
    out.input_ids[i, :len(tokens)] = tokens
    out.input_mask[i, :len(tokens)] = 1
    word_positions.append(np.asarray(positions, np.int32))
  return out
