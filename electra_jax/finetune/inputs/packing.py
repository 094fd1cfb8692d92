"""Fine-tuning's rows, planned: which encoded sequences of a batch share a row of max_seq_length
tokens (`place`, `plan`), the shapes a run's batches take (`shapes`), a split's prediction calls
(`prediction_calls`) and whether packing pays. The arrays of a batch are assembled from a plan in
finetune/batches.py (`assemble`), which asks this module and is never asked by it.

An example is one encoded sequence ([CLS] a [SEP] (b [SEP])), or, for multiple choice, one per
candidate. Without packing each sequence fills a row of its own, padded (the layout of HF's and
the original's fine-tuning); with packing, as many as fit share a row:

    input_ids, segment_ids  [R, L]  the sequences' tokens and token types, one after the other
    input_mask              [R, L]  the sequence each token belongs to: 1, 2, ... (0: padding); a
                                    token attends to its own sequence alone
                                    (model/attention_masks.py)
    positions               [R, L]  each token's position in its sequence (0 at its [CLS])
    starts                  [R, S]  where each of a row's sequences starts (-1: no sequence)
    slots                   [X, K]  each example's sequences as row * S + slot (-1: no example)
    labels                  [X] per example, or [R, L] per token (tagging: a word's first token)

Every example is computed exactly as in a row of its own (its positions, its attention, the head
on its [CLS] or the mean of its tokens), so the logits and gradients are the padded layout's; the
batch holds the same examples per step (`batch_size` counts examples), in few rows. A run's
batches take one of a few shapes (`Shapes`: at most `packing_shapes` row counts, chosen over the
run's batches to leave the fewest rows empty, each batch in the smallest that holds it), so a
few programs are compiled.

Packing is used where it pays (`pays`): a packed row costs more than a padded one (attention by
sequence, pooling by slot), so texts that fill most of max_seq_length keep a row each.
"""

import dataclasses

import numpy as np

from electra_jax.finetune.inputs.encode import Encoded


@dataclasses.dataclass(frozen=True)
class Layout:
  rows: int  # rows per batch (all processes; a multiple of the devices)
  slots: int  # sequences per row at most (S)
  examples: int  # examples per batch (X)
  choices: int  # sequences per example (K: multiple choice's candidates, else 1)
  length: int  # tokens per row (L)


# Packing pays where it needs at most this share of the rows a row per sequence takes. Measured on
# a 2-core CPU (docs/finetuning.md, "Speed"): a Small step on debian_section at 128 tokens packed
# in 10.3 of 32 rows ran at 2.95x the padded examples/s; on man_section in 29.3 of 32 rows at
# 0.92x (prediction 0.81x).
PAYS = 0.75


def pays(packed_rows: float, padded_rows: float) -> bool:
  return packed_rows <= PAYS * padded_rows


def choices(data: Encoded) -> int:
  """Sequences per example: the candidates of multiple choice ([N, K, L] arrays), else 1."""
  return data.input_ids.shape[1] if data.input_ids.ndim == 3 else 1


def lengths(data: Encoded) -> np.ndarray:
  """[N, K] tokens of each example's sequences."""
  return data.lengths


def plan(sizes: list, capacity: int, pack: bool, decreasing: bool = True) -> list[list[int]]:
  """Rows of sequence indices: sequence i has `sizes[i]` tokens. Packed: first fit, the longest
  first (`decreasing`: a deterministic order that packs well) or in order; else one sequence per
  row."""
  if not pack:
    return [[i] for i in range(len(sizes))]
  rows: list[list[int]] = []
  free: list[int] = []
  order = range(len(sizes))
  for i in sorted(order, key=lambda i: (-sizes[i], i)) if decreasing else order:
    fit(rows, free, i, sizes[i], capacity)
  return rows


def fit(rows: list, free: list, index: int, size: int, capacity: int, pack: bool = True):
  """First fit of one sequence: `index` (of `size` tokens) into the first of `rows` with room for
  it (`free`: each row's room), else into a new row of `capacity`; not packed, always a new row.
  The lists are changed in place."""
  row = next((r for r, room in enumerate(free) if room >= size), None) if pack else None
  if row is None:
    rows.append([])
    free.append(capacity)
    row = len(rows) - 1
  rows[row].append(index)
  free[row] -= size


def place(data: Encoded, examples: np.ndarray, pack: bool) -> list[list[int]]:
  """`plan`'s rows for the sequences of `examples` (indices into `data`; -1: no example), numbered
  in order."""
  sizes = lengths(data)
  return plan([int(n) for i in examples if i >= 0 for n in sizes[i]], data.input_ids.shape[-1],
              pack)


@dataclasses.dataclass(frozen=True)
class Shapes:
  """The shapes a run's batches take, fewest rows first (the last holds every batch), and how many
  of the run's batches take each."""
  layouts: tuple
  counts: tuple

  @property
  def largest(self) -> Layout:
    return self.layouts[-1]

  @property
  def mean_rows(self) -> float:
    return sum(l.rows * c for l, c in zip(self.layouts, self.counts)) / sum(self.counts)

  def holding(self, rows: int, processes: int = 1) -> Layout:
    """The smallest layout with `rows` rows for each of the `processes`."""
    return next(l for l in self.layouts if l.rows // processes >= rows)


# Sequences per row are rounded up to a multiple of this: the seeds of a fine-tuning, whose
# shuffles fill rows with up to 10 or 11 sequences, then take one program (a program per shape of
# the batch; a Base step compiles for about a minute on a GPU host). A slot costs a few indices.
SLOTS_MULTIPLE = 4


def shapes(data: Encoded, batches: list, pack: bool, devices: int, processes: int = 1,
           most: int = 1) -> Shapes:
  """The shapes of `batches` (arrays of example indices, each split evenly among the processes):
  at most `most` row counts (multiples of the devices), those that leave the fewest rows empty
  when each batch takes the smallest that holds it; sequences per row: the most any row holds,
  rounded up to SLOTS_MULTIPLE."""
  needed, slots = [], 1
  for batch in batches:
    plans = [place(data, share, pack) for share in np.split(np.asarray(batch), processes)]
    per_process = max(len(p) for p in plans)
    needed.append(-(-per_process * processes // devices) * devices)  # rows, all processes
    slots = max([slots] + [len(r) for p in plans for r in p])
  sizes = _fewest_empty(sorted(set(needed)), np.bincount(needed), most)
  slots = -(-slots // SLOTS_MULTIPLE) * SLOTS_MULTIPLE
  layouts = tuple(Layout(rows=r, slots=slots, examples=len(batches[0]), choices=choices(data),
                         length=data.input_ids.shape[-1]) for r in sizes)
  taken = [next(r for r in sizes if r >= n) for n in needed]
  return Shapes(layouts, tuple(taken.count(r) for r in sizes))


def _fewest_empty(values: list, count: np.ndarray, most: int) -> list:
  """At most `most` of the row counts `values` (ascending; `count[v]` batches need v), the last
  included, that minimize the rows of all batches when each takes the smallest value it fits."""
  # best[j][b]: (rows, sizes) covering values[:j + 1] with b sizes, values[j] the largest
  cost = lambda lo, hi: values[hi] * sum(count[v] for v in values[lo:hi + 1])
  best = [[(cost(0, j), [values[j]])] for j in range(len(values))]
  for b in range(1, most):
    for j in range(len(values)):
      options = [best[j][b - 1]] + [
          (best[i][b - 1][0] + cost(i + 1, j), best[i][b - 1][1] + [values[j]])
          for i in range(j) if len(best[i]) >= b]
      best[j].append(min(options, key=lambda o: o[0]))
  return best[-1][-1][1]


def _place(placed: list, free: list, sizes, first: int, length: int, pack: bool):
  """(rows, room left) after an example's sequences (`sizes`, numbered from `first`) are added by
  first fit (packed) or a row each; the lists given are left as they were."""
  placed, free = [list(r) for r in placed], list(free)
  for c, size in enumerate(int(x) for x in sizes):
    fit(placed, free, first + c, size, length, pack)
  return placed, free


def prediction_calls(data, rows: int, pack: bool) -> list[tuple[list, list]]:
  """(examples, their rows as `plan` gives them) of each prediction call, in order: as many
  examples as `rows` rows hold, each placed by first fit as it comes (an example's sequences in
  one call)."""
  length, sizes = data.input_ids.shape[-1], lengths(data)
  k = sizes.shape[1]
  calls: list = []
  examples: list[int] = []
  placed: list = []
  free: list[int] = []
  for i in range(len(data)):
    trial = _place(placed, free, sizes[i], len(examples) * k, length, pack)
    if len(trial[0]) > rows and examples:
      calls.append((examples, placed))
      examples = []
      trial = _place([], [], sizes[i], 0, length, pack)
    if len(trial[0]) > rows:
      raise ValueError(f'example {i} needs {len(trial[0])} rows of {length} tokens (one per '
                       f'choice) but a prediction call has {rows}: set eval_batch_size to '
                       f'{len(trial[0])} or more.')
    placed, free = trial
    examples.append(i)
  return calls + ([(examples, placed)] if examples else [])


def prediction_packing(data, rows: int, pack: bool | None) -> bool | None:
  """`pack` for predicting `data`, `rows` rows a call: packed only where it pays (`pays`:
  the packed calls at most PAYS of the padded ones'); None (a kind that does not pack) as it is."""
  per_call = rows // choices(data)  # examples a padded call holds
  if not pack or not per_call:  # (too few rows: `predict` says so in one sentence)
    return pack
  return pays(len(prediction_calls(data, rows, True)), -(-len(data) // per_call))
