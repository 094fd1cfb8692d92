"""Fine-tuning's batches: this process's share of global batches, the train stream of (seed,
epoch) orders, and predictions and scores over whole splits.

A kind whose examples are sequences (every kind but SQuAD's windows) gets its batches as rows
(finetune/inputs/packing.py): with `packing`, several sequences share a row; without, a row each.
"""

import functools
import itertools

import jax
import numpy as np

from electra_jax.finetune.kinds import interface as kinds
from electra_jax.finetune.inputs import packing
from electra_jax.finetune.kinds import registry
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
  order, drawn = None, None
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
  arrays = packing.assemble(data, shares[p], layout, pack, row_offset=p * rows, rows=rows,
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


@functools.lru_cache(maxsize=8)
def predict_fn(model, mesh, method: str | None = None, rows: bool = False,
               xla_defaults: bool = False):
  """One compiled forward pass per (head, mesh, method, layout): every split, seed and mode reuses
  it. `rows`: on batches of packing's rows (the outputs of each sequence). `xla_defaults`: with
  XLA's default options instead of hardware/xla_options.forward's (the benchmark's comparison)."""
  if rows:
    forward = lambda p, b: model.apply({'params': p}, b['input_ids'], b['segment_ids'],
                                      b['input_mask'], True, b['positions'], b['starts'],
                                      method=method)
  else:
    forward = lambda p, b: model.apply({'params': p}, b['input_ids'], b['segment_ids'],
                                      b['input_mask'], True, method=method)
  return jax.jit(partitioning.on_mesh(forward, mesh), out_shardings=partitioning.replicated(mesh),
                 compiler_options=None if xla_defaults else xla_options.forward(model.cfg.dtype))


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
  arrays = {k: v for k, v in data.arrays().items() if k in kinds.INPUTS}
  arrays = {k: np.concatenate([v, np.zeros((padded - n,) + v.shape[1:], v.dtype)])
            for k, v in arrays.items()}
  arrays['input_mask'][n:, ..., 0] = 1  # padding rows attend to one token (their logits are
  #                                        dropped)
  out = [jax.device_get(fn(params, global_batch(arrays, np.arange(s, s + batch_size), sharding)))
         for s in range(0, padded, batch_size)]
  return jax.tree.map(lambda *parts: np.concatenate(parts)[:n], *out)


def _place(placed: list, free: list, sizes, first: int, length: int, pack: bool):
  """(rows, room left) after an example's sequences (`sizes`, numbered from `first`) are added by
  first fit (packed) or a row each; the lists given are left as they were."""
  placed, free = [list(r) for r in placed], list(free)
  for c, size in enumerate(int(x) for x in sizes):
    packing.fit(placed, free, first + c, size, length, pack)
  return placed, free


def prediction_calls(data, rows: int, pack: bool) -> list[tuple[list, list]]:
  """(examples, their rows as packing.plan gives them) of each prediction call, in order: as many
  examples as `rows` rows hold, each placed by first fit as it comes (an example's sequences in
  one call)."""
  length, sizes = data.input_ids.shape[-1], packing.lengths(data)
  k = sizes.shape[1]
  calls, examples, placed, free = [], [], [], []
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
  """`pack` for predicting `data`, `rows` rows a call: packed only where it pays (packing.pays:
  the packed calls at most PAYS of the padded ones'); None (a kind that does not pack) as it is."""
  per_call = rows // packing.choices(data)  # examples a padded call holds
  if not pack or not per_call:  # (too few rows: `predict` says so in one sentence)
    return pack
  return packing.pays(len(prediction_calls(data, rows, True)), -(-len(data) // per_call))


def task_prediction_packing(cfg, kind, data) -> bool | None:
  """`prediction_packing` of a fine-tuning: `cfg.eval_batch_size` rows a call, `cfg.packing` for a
  task kind that packs (None for one that does not)."""
  return prediction_packing(data, cfg.eval_batch_size, cfg.packing if kind.packs else None)


def _predict_rows(model, params, data, rows: int, mesh, method, pack: bool,
                  xla_defaults: bool = False):
  sharding = partitioning.batch_sharding(mesh)
  fn = predict_fn(model, mesh, method, rows=True, xla_defaults=xla_defaults)
  calls = prediction_calls(data, rows, pack)
  slots = max(len(r) for _, placed in calls for r in placed)
  k = packing.choices(data)
  per_token = getattr(model, 'per_token', False) and method is None
  outputs = []
  for call, placed in calls:
    layout = packing.Layout(rows=rows, slots=slots, examples=len(call), choices=k,
                            length=data.input_ids.shape[-1])
    batch = packing.assemble(data, np.asarray(call), layout, pack, placed=placed)
    inputs = {key: v for key, v in batch.items() if key not in ('slots', 'labels')}
    out = np.asarray(jax.device_get(fn(params, global_batch(inputs, np.arange(rows), sharding))))
    if per_token:  # [R, L, C] -> each example's tokens from its row, at positions 0, 1, ...
      part = np.zeros((len(call), data.input_ids.shape[-1]) + out.shape[2:], out.dtype)
      for x, slot in enumerate(batch['slots'][:, 0]):
        r, e = divmod(int(slot), slots)
        start, n = batch['starts'][r, e], int(packing.lengths(data)[call[x], 0])
        part[x, :n] = out[r, start:start + n]
    else:
      part = packing.per_example(out, batch['slots'])  # [X, K, ...]
      part = part[:, 0] if k == 1 else part[..., 0]
    outputs.append(part)
  return np.concatenate(outputs)


def split_scores(cfg, task, model, params, data: dict, splits: dict, mesh, names=None) -> dict:
  """{split: scores} of the dev splits, or of the splits `names` (labelled test splits)."""
  kind = registry.get(task.kind)
  return {split: kind.scores(task, predict(model, params, data[split], cfg.eval_batch_size, mesh,
                                           pack=task_prediction_packing(cfg, kind, data[split])),
                             data[split], splits[split], cfg)
          for split in (task.dev_splits if names is None else names) if split in data}
