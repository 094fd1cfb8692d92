"""Fine-tuning's batches: the train stream of (seed, epoch) orders, the arrays of a batch
assembled from packing's plan (`assemble`), this process's share of global batches on the
devices, and predictions and scores over whole splits.

A kind whose examples are sequences (every kind but SQuAD's windows) gets its batches as rows
planned by finetune/inputs/packing.py: with `packing`, several sequences share a row; without, a
row each.
"""

import functools
import itertools

import jax
import numpy as np

from electra_jax.finetune.inputs import packing
from electra_jax.finetune.kinds import interface as kinds
from electra_jax.hardware import xla_options
from electra_jax.train import partitioning


def to_devices(arrays: dict, sharding) -> dict:
  """This process's share of a global batch (a dict of arrays) as global jax.Arrays: one
  device_put of the whole dict in a single process (a seventh of the host's time per batch of
  seven arrays, which a short step's loop spends beside the step), else each array assembled from
  every process's share."""
  if jax.process_count() == 1:
    return jax.device_put(arrays, sharding)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in arrays.items()}


def global_batch(arrays: dict, rows: np.ndarray, sharding) -> dict:
  """This process's share of the global batch `rows`, assembled into global jax.Arrays."""
  p, n = jax.process_index(), jax.process_count()
  local = rows.reshape(n, -1)[p]
  return to_devices({k: v[local] for k, v in arrays.items()}, sharding)


def step_examples(n: int, batch_size: int, seed: int, start: int = 0):
  """The example indices of the train batches after step `start`: epoch e visits the examples in
  an order drawn from (seed, e), so a resumed run continues the stream of an uninterrupted one."""
  steps_per_epoch = n // batch_size
  order, drawn = np.empty(0, np.int64), None  # (drawn at the first step)
  for step in itertools.count(start + 1):
    epoch, index = divmod(step - 1, steps_per_epoch)
    if drawn != epoch:
      order, drawn = np.random.default_rng([seed, epoch]).permutation(n), epoch
    yield order[index * batch_size:(index + 1) * batch_size]


def train_shapes(data, batch_size: int, seed: int, total_steps: int, pack: bool, mesh,
                 most: int = 1) -> packing.Shapes:
  """The shapes the train batches of a fine-tuning take (packing.shapes: at most `most` row
  counts), from all its batches: the same for the whole run, resumed or not."""
  batches = list(itertools.islice(step_examples(len(data), batch_size, seed), total_steps))
  return packing.shapes(data, batches, pack, mesh.devices.size, jax.process_count(), most)


def packed_batch(data, examples: np.ndarray, shapes: packing.Shapes, pack: bool,
                 sharding) -> dict:
  """The global batch of `examples` in the smallest of `shapes` that holds every process's share:
  each process packs its share of the examples into its share of the rows."""
  p, n = jax.process_index(), jax.process_count()
  shares = np.split(np.asarray(examples), n)
  plans = [packing.place(data, share, pack) for share in shares]  # every process's: one shape
  layout = shapes.holding(max(len(plan) for plan in plans), n)
  rows = layout.rows // n
  arrays = assemble(data, shares[p], layout, pack, row_offset=p * rows, rows=rows,
                    placed=plans[p])
  return to_devices(arrays, sharding)


def train_batches(data, batch_size: int, seed: int, start: int, sharding,
                  shapes: packing.Shapes | None = None, pack: bool = True):
  """The train batches after step `start` (`step_examples`): rows in one of `shapes`
  (packing.Shapes), or without them each example a row as `encode` gave it (SQuAD's windows)."""
  for examples in step_examples(len(data), batch_size, seed, start):
    if shapes is None:
      yield global_batch(data.arrays(), examples, sharding)
    else:
      yield packed_batch(data, examples, shapes, pack, sharding)


def assemble(data, examples: np.ndarray, layout: packing.Layout, pack: bool, row_offset: int = 0,
             rows: int | None = None, placed: list | None = None) -> dict:
  """The arrays of a batch of `examples` (indices into `data`; -1: no example) in `rows` rows
  (default: layout.rows), its slots numbered from global row `row_offset`; `placed`: the rows as
  `packing.plan` gives them for the examples' sequences in order (default: `packing.place`'s)."""
  rows = layout.rows if rows is None else rows
  k, length, s = layout.choices, layout.length, layout.slots
  flat = lambda x: x.reshape(len(data) * k, length)
  ids, segments = flat(data.input_ids), flat(data.segment_ids)
  extra = {name: flat(v) for name, v in data.token_inputs.items()}  # (packed as the ids are)
  sizes = packing.lengths(data).reshape(-1)
  sequences = [i * k + c for i in examples if i >= 0 for c in range(k)]
  if placed is None:
    placed = packing.place(data, examples, pack)
  if len(placed) > rows or any(len(r) > s for r in placed):
    raise ValueError(f'a batch needs {len(placed)} rows of up to {max(map(len, placed))} '
                     f'sequences; the layout has {rows} of {s}')
  token_labels = data.labels.ndim == 2 and data.labels.shape[1] == length and k == 1
  out = {'input_ids': np.zeros((rows, length), np.int32),
         'segment_ids': np.zeros((rows, length), np.int32),
         'input_mask': np.zeros((rows, length), np.int32),
         'positions': np.zeros((rows, length), np.int32),
         'starts': np.full((rows, s), -1, np.int32),
         **{name: np.zeros((rows, length), v.dtype) for name, v in extra.items()}}
  if token_labels:
    out['labels'] = np.full((rows, length), -1, data.labels.dtype)
  where = {}  # sequence -> its global slot
  for r, row in enumerate(placed):
    at = 0
    for e, j in enumerate(row):
      q, n = sequences[j], int(sizes[sequences[j]])
      out['input_ids'][r, at:at + n] = ids[q, :n]
      out['segment_ids'][r, at:at + n] = segments[q, :n]
      out['input_mask'][r, at:at + n] = e + 1
      out['positions'][r, at:at + n] = np.arange(n)
      out['starts'][r, e] = at
      for name, v in extra.items():
        out[name][r, at:at + n] = v[q, :n]
      if token_labels:
        out['labels'][r, at:at + n] = data.labels[q, :n]
      where[q] = (row_offset + r) * s + e
      at += n
  out['slots'] = np.asarray([[where[i * k + c] for c in range(k)] if i >= 0 else [-1] * k
                             for i in examples], np.int32)
  if not token_labels:
    missing = -1 if np.issubdtype(data.labels.dtype, np.integer) else np.nan
    out['labels'] = np.asarray([data.labels[i] if i >= 0 else missing for i in examples],
                               data.labels.dtype)
  return out


def per_example(outputs: np.ndarray, slots: np.ndarray) -> np.ndarray:
  """[X, K, ...] of per-sequence outputs [R, S, ...] at each example's slots."""
  flat = outputs.reshape((-1,) + outputs.shape[2:])
  return flat[np.maximum(slots, 0)]


def fill(batch: dict) -> tuple[int, int]:
  """(real tokens, tokens) of a batch's rows: how full packing made them."""
  return int((batch['input_mask'] > 0).sum()), batch['input_mask'].size


@functools.lru_cache(maxsize=8)
def predict_fn(model, mesh, method: str | None = None, rows: bool = False,
               xla_defaults: bool = False):
  """One compiled forward pass per (head, mesh, method, layout): every split, seed and mode reuses
  it. `rows`: on batches of packing's rows (the outputs of each sequence). `xla_defaults`: with
  XLA's default options instead of hardware/xla_options.forward's (the benchmark's comparison)."""
  if rows:
    forward = lambda p, b: model.apply({'params': p}, b['input_ids'], b['segment_ids'],
                                      b['input_mask'], True, b['positions'], b['starts'],
                                      method=method, **kinds.token_inputs(b))
  else:
    forward = lambda p, b: model.apply({'params': p}, b['input_ids'], b['segment_ids'],
                                      b['input_mask'], True, method=method,
                                      **kinds.token_inputs(b))
  fn = jax.jit(partitioning.on_mesh(forward, mesh), out_shardings=partitioning.replicated(mesh),
               compiler_options=None if xla_defaults else xla_options.forward(model.cfg.dtype))
  return fn


def predict(model, params, data, batch_size: int, mesh, method: str | None = None,
            pack: bool | None = None, xla_defaults: bool = False):
  """The head's outputs for every example, in order, without dropout: logits [N, C] ([N, 1] for
  regression, [N, L, C] for tagging, [N, candidates] for multiple choice), or SQuAD's dict of
  arrays; with method='features', what a classifier's head reads ([N, hidden]). `pack`: the
  examples as packing's rows, `batch_size` rows a call, several sequences a row (True) or one
  (False); None: each example a row as `encode` gave it (SQuAD's windows). `xla_defaults`: see
  predict_fn."""
  if pack is not None:
    return _predict_rows(model, params, data, batch_size, mesh, method, pack, xla_defaults)
  sharding = partitioning.batch_sharding(mesh)
  fn = predict_fn(model, mesh, method, xla_defaults=xla_defaults)
  n = len(data)
  padded = -(-n // batch_size) * batch_size
  named = getattr(data, 'token_inputs', {})  # (SQuAD's windows have none)
  arrays = {k: v for k, v in data.arrays().items() if k in kinds.INPUTS or k in named}
  arrays = {k: np.concatenate([v, np.zeros((padded - n,) + v.shape[1:], v.dtype)])
            for k, v in arrays.items()}
  arrays['input_mask'][n:, ..., 0] = 1  # padding rows attend to one token (their logits are
  #                                        dropped)
  out = [jax.device_get(fn(params, global_batch(arrays, np.arange(s, s + batch_size), sharding)))
         for s in range(0, padded, batch_size)]
  return jax.tree.map(lambda *parts: np.concatenate(parts)[:n], *out)


def task_prediction_packing(cfg, kind, data) -> bool | None:
  """`prediction_packing` of a fine-tuning: `cfg.eval_batch_size` rows a call, `cfg.packing` for a
  task kind that packs (None for one that does not)."""
  return packing.prediction_packing(data, cfg.eval_batch_size,
                                    cfg.packing if kind.packs else None)


def _predict_rows(model, params, data, rows: int, mesh, method, pack: bool,
                  xla_defaults: bool = False):
  sharding = partitioning.batch_sharding(mesh)
  fn = predict_fn(model, mesh, method, rows=True, xla_defaults=xla_defaults)
  calls = packing.prediction_calls(data, rows, pack)
  slots = max(len(r) for _, placed in calls for r in placed)
  k = packing.choices(data)
  per_token = getattr(model, 'per_token', False) and method is None
  outputs = []
  for call, placed in calls:
    layout = packing.Layout(rows=rows, slots=slots, examples=len(call), choices=k,
                            length=data.input_ids.shape[-1])
    batch = assemble(data, np.asarray(call), layout, pack, placed=placed)
    inputs = {key: v for key, v in batch.items() if key not in ('slots', 'labels')}
    out = np.asarray(jax.device_get(fn(params, global_batch(inputs, np.arange(rows), sharding))))
    if per_token:  # [R, L, C] -> each example's tokens from its row, at positions 0, 1, ...
      part = np.zeros((len(call), data.input_ids.shape[-1]) + out.shape[2:], out.dtype)
      for x, slot in enumerate(batch['slots'][:, 0]):
        r, e = divmod(int(slot), slots)
        start, n = batch['starts'][r, e], int(packing.lengths(data)[call[x], 0])
        part[x, :n] = out[r, start:start + n]
    else:
      part = per_example(out, batch['slots'])  # [X, K, ...]
      part = part[:, 0] if k == 1 else part[..., 0]
    outputs.append(part)
  return np.concatenate(outputs)


def split_scores(cfg, task, kind, model, params, data: dict, splits: dict, mesh,
                 names=None) -> dict:
  """{split: scores} of the dev splits, or of the splits `names` (labelled test splits)."""
  return {split: kind.scores(task, predict(model, params, data[split], cfg.eval_batch_size, mesh,
                                           pack=task_prediction_packing(cfg, kind, data[split])),
                             data[split], splits[split], cfg)
          for split in (task.dev_splits if names is None else names) if split in data}
