"""Fine-tuning's batches: this process's share of global batches, the train stream of (seed,
epoch) orders, and predictions and scores over whole splits.
"""

import functools
import itertools

import jax
import numpy as np

from electra_jax.finetune import kinds
from electra_jax.finetune import registry
from electra_jax.train import partitioning


def global_batch(arrays: dict, rows: np.ndarray, sharding) -> dict:
  """This process's share of the global batch `rows`, assembled into global jax.Arrays."""
  p, n = jax.process_index(), jax.process_count()
  local = rows.reshape(n, -1)[p]
  return {k: jax.make_array_from_process_local_data(sharding, v[local]) for k, v in arrays.items()}


@functools.lru_cache(maxsize=8)
def predict_fn(model, mesh, method: str | None = None):
  """One compiled forward pass per (head, mesh, method): every split, seed and mode reuses it."""
  forward = lambda p, b: model.apply({'params': p}, b['input_ids'], b['segment_ids'],
                                    b['input_mask'], True, method=method)
  return jax.jit(partitioning.on_mesh(forward, mesh), out_shardings=partitioning.replicated(mesh))


def predict(model, params, data, batch_size: int, mesh, method: str | None = None):
  """The head's outputs for every example, in order, without dropout: logits [N, C] ([N, 1] for
  regression, [N, L, C] for tagging, [N, candidates] for multiple choice), or SQuAD's dict of
  arrays; with method='features', what a classifier's head reads ([N, hidden])."""
  sharding = partitioning.batch_sharding(mesh)
  fn = predict_fn(model, mesh, method)
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


def train_batches(arrays: dict, n: int, batch_size: int, seed: int, start: int, sharding):
  """The train batches after step `start`: epoch e visits the examples in an order drawn from
  (seed, e), so a resumed run continues the stream of an uninterrupted one."""
  steps_per_epoch = n // batch_size
  order, drawn = None, None
  for step in itertools.count(start + 1):
    epoch, index = divmod(step - 1, steps_per_epoch)
    if drawn != epoch:
      order, drawn = np.random.default_rng([seed, epoch]).permutation(n), epoch
    yield global_batch(arrays, order[index * batch_size:(index + 1) * batch_size], sharding)


def split_scores(cfg, task, model, params, data: dict, splits: dict, mesh, names=None) -> dict:
  """{split: scores} of the dev splits, or of the splits `names` (labelled test splits)."""
  kind = registry.get(task.kind)
  return {split: kind.scores(task, predict(model, params, data[split], cfg.eval_batch_size, mesh),
                            data[split], splits[split], cfg)
          for split in (task.dev_splits if names is None else names) if split in data}
