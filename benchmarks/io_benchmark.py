"""Times what feeds and keeps a run: the input pipeline (records -> global batches) and checkpoint
saves and restores of a config's full train state."""

import statistics
import time

import jax

from electra_jax.config import pretraining as config_lib
from electra_jax.data import input_pipeline, records
from electra_jax.data.tokenizer import SPECIAL
from electra_jax.pretraining import setup as pretrain_setup
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import partitioning
from electra_jax.train import step as step_lib


def benchmark_input(records_dir: str, batch_size: int, *, batches: int = 50, repeats: int = 3,
                    seed: int = 0, shuffle_buffer: int = 10_000) -> dict:
  """Times the input pipeline: records -> shuffled, parsed batches -> global jax.Arrays.

  Each run starts a fresh pipeline at a new position (as a resumed job would), skips its first
  batch (start-up) and times the next `batches`; the median run is reported.
  """
  meta = records.read_metadata(records_dir)
  sharding = partitioning.batch_sharding(partitioning.make_mesh())
  readers = input_pipeline.num_readers(meta, batch_size)  # as training reads them
  runs = []
  for r in range(repeats):
    dataset = input_pipeline.make_dataset(records_dir, 'train', batch_size, seed=seed,
                                          shuffle_buffer=shuffle_buffer, readers=readers,
                                          position=r * (batches + 1) * batch_size // readers)
    it = input_pipeline.global_batches(dataset, sharding)
    jax.block_until_ready(next(it))
    t = time.perf_counter()
    for _ in range(batches):
      out = next(it)
    jax.block_until_ready(out)
    runs.append((time.perf_counter() - t) / batches)
  batch_s = statistics.median(runs)
  seq_len = meta['max_seq_length']
  return {'batch_size': batch_size, 'seq_len': seq_len, 'ms_per_batch': 1e3 * batch_s,
          'ms_per_batch_runs': [1e3 * r for r in runs], 'examples_per_s': batch_size / batch_s,
          'tokens_per_s': batch_size * seq_len / batch_s}


def benchmark_checkpoint(config, directory: str, repeats: int = 3) -> dict:
  """Times checkpoint saves of the config's full train state: how long `save` holds the loop
  (copying the arrays off the devices) and how long until the files are complete (background)."""
  mesh = partitioning.make_mesh()
  setup = pretrain_setup.build_setup(config_lib.parse(config), SPECIAL)
  init_fn, _, _ = step_lib.compile_steps(setup, mesh)
  state = jax.block_until_ready(init_fn())
  ckpt = checkpoint_lib.Checkpointer(directory, keep=1)
  blocking, total = [], []
  for step in range(1, repeats + 1):
    t = time.perf_counter()
    ckpt.save(step, state, {'step': step})
    blocking.append(time.perf_counter() - t)
    ckpt.manager.wait_until_finished()
    total.append(time.perf_counter() - t)
  t = time.perf_counter()
  ckpt.restore(repeats, state)
  restore_s = time.perf_counter() - t
  ckpt.close()
  size = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
  return {'state_mb': size / 1e6, 'save_blocking_ms': 1e3 * statistics.median(blocking),
          'save_total_ms': 1e3 * statistics.median(total), 'restore_ms': 1e3 * restore_s,
          'save_blocking_ms_runs': [1e3 * x for x in blocking],
          'save_total_ms_runs': [1e3 * x for x in total]}
