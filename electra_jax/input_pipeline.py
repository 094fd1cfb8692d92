"""tf.data over a records folder -> global `jax.Array` batches (TensorFlow is imported lazily).

Each process reads its own subset of the shard files, shuffles with a seeded buffer, repeats,
batches `global_batch / process_count` examples and prefetches; the host batches become one global
array sharded over the mesh's data axis with `jax.make_array_from_process_local_data`.
"""

import os
from typing import Iterator

import jax
import numpy as np

from electra_jax import records

def local_batch_size(global_batch: int) -> int:
  n = jax.process_count()
  if global_batch % n:
    raise ValueError(f'the batch size {global_batch} does not divide among {n} processes; '
                     f'use a multiple of {n}')
  return global_batch // n


def make_dataset(records_dir: str, split: str, global_batch: int, *, seed: int = 0,
                 shuffle: bool = True, shuffle_buffer: int = 10_000):
  """An endless, deterministic tf.data.Dataset of host-local batches of dicts of int32 arrays."""
  tf = records.tensorflow()
  meta = records.read_metadata(records_dir)
  length = meta['max_seq_length']
  files = [os.path.join(records_dir, f) for f in meta['splits'][split]['files']]
  index, count = jax.process_index(), jax.process_count()
  mine = files[index::count] if len(files) >= count else files
  ds = tf.data.Dataset.from_tensor_slices(mine)
  if shuffle:
    ds = ds.shuffle(len(mine), seed=seed, reshuffle_each_iteration=True)
  ds = ds.repeat()
  ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(len(mine), 8), block_length=16,
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  if len(files) < count:  # fewer files than processes: split the examples instead
    ds = ds.shard(count, index)
  if shuffle:
    ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
  ds = ds.batch(local_batch_size(global_batch), drop_remainder=True)
  spec = {k: tf.io.FixedLenFeature([length], tf.int64) for k in records.FEATURES}

  def parse(serialized):
    return {k: tf.cast(v, tf.int32) for k, v in tf.io.parse_example(serialized, spec).items()}

  ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  options = tf.data.Options()
  options.deterministic = True
  return ds.with_options(options).prefetch(2)


def global_batches(dataset, sharding) -> Iterator[dict]:
  """Host-local numpy batches -> global jax.Arrays laid out by `sharding`."""
  for local in dataset.as_numpy_iterator():
    yield {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
           for k, v in local.items()}
