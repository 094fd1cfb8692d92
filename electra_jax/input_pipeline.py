"""tf.data over a records folder -> global `jax.Array` batches (TensorFlow is imported lazily).

Each JAX process reads its own shard files (`files[process_index::process_count]`), so processes
never read the same example. Its example stream is a pure function of (seed, process, position):

    epoch e: the process's files in an order drawn from (seed, process, e), cut into groups of
             `cycle` files; each group's files are interleaved one example at a time and then
             shuffled in a buffer seeded by (seed, process, e, group).

Batches of `global_batch / process_count` examples are parsed in parallel, prefetched, and become
one global array sharded over the mesh's data axis (`jax.make_array_from_process_local_data`).

Resuming at example position p (step x local batch, saved with each checkpoint) needs no replay:
the example counts of the files (from metadata.json) locate p's group, that group starts afresh
and skips only the examples it had already given, unparsed, at most one group's worth.
"""

import os
from typing import Iterator

import jax
import numpy as np

from electra_jax import records


def local_batch_size(global_batch: int, process_count: int | None = None) -> int:
  n = jax.process_count() if process_count is None else process_count
  if global_batch % n:
    raise ValueError(f'the batch size {global_batch} does not divide among {n} processes; '
                     f'use a multiple of {n}')
  return global_batch // n


def process_files(meta: dict, split: str, index: int, count: int) -> tuple[list, list]:
  """The shard files (and their example counts) that process `index` of `count` reads."""
  s = meta['splits'][split]
  if len(s['files']) < count:
    raise ValueError(f'the {split} split has {len(s["files"])} shard file(s) but {count} processes '
                     f'read it, so some would get none; rebuild the records with at least {count} '
                     f'{split} shards')
  files, counts = s['files'][index::count], s['examples_per_file'][index::count]
  if not sum(counts):
    raise ValueError(f'the {split} shards of process {index} hold no example; rebuild the records '
                     'with fewer shards')
  return files, counts


def held_out_batches(meta: dict, global_batch: int, wanted: int, count: int | None = None) -> int:
  """Batches of a held-out evaluation: `wanted`, or fewer where the split is smaller.

  The same number in every process (each must run the same steps), and no example read twice.
  """
  count = jax.process_count() if count is None else count
  local = local_batch_size(global_batch, count)
  smallest = min(sum(process_files(meta, 'eval', p, count)[1]) for p in range(count))
  if smallest < local:
    raise ValueError(f'the held-out split gives a process {smallest} example(s), fewer than one '
                     f'batch of {local}; lower data.eval_batch_size or hold out more documents')
  return min(wanted, smallest // local)


class Stream:
  """The plan of one process's endless, shuffled example stream: which groups, in which order."""

  def __init__(self, files: list[str], counts: list[int], seed: int, process: int, cycle: int):
    self.files, self.counts = files, np.asarray(counts, np.int64)
    self.seed, self.process, self.cycle = seed, process, max(1, min(cycle, len(files)))
    self.epoch_size = int(self.counts.sum())

  def groups(self, epoch: int) -> list[np.ndarray]:
    order = np.random.default_rng([self.seed, self.process, epoch]).permutation(len(self.files))
    return [order[i:i + self.cycle] for i in range(0, len(order), self.cycle)]

  def group_seed(self, epoch: int, group: int) -> int:
    return int(np.random.default_rng([self.seed, self.process, epoch, group, 1]).integers(2**62))

  def locate(self, position: int) -> tuple[int, int, int]:
    """(epoch, group, examples to skip in that group) of the example at `position`."""
    epoch, rest = divmod(position, self.epoch_size)
    for g, members in enumerate(self.groups(epoch)):
      size = int(self.counts[members].sum())
      if rest < size:
        return epoch, g, rest
      rest -= size
    raise AssertionError('unreachable: rest < epoch size')

  def descriptions(self, position: int) -> Iterator[tuple]:
    """(file names padded to `cycle`, number of files, shuffle seed, skip) of each group."""
    epoch, group, skip = self.locate(position)
    while True:
      groups = self.groups(epoch)
      for g in range(group, len(groups)):
        names = [self.files[i] for i in groups[g]]
        yield (names + [''] * (self.cycle - len(names)), len(names), self.group_seed(epoch, g),
               skip)
        skip = 0
      epoch, group = epoch + 1, 0


def make_dataset(records_dir: str, split: str, global_batch: int, *, seed: int = 0,
                 shuffle: bool = True, shuffle_buffer: int = 10_000, position: int = 0,
                 cycle: int = 8, process_index: int | None = None,
                 process_count: int | None = None):
  """A deterministic tf.data.Dataset of host-local batches of dicts of int32 arrays.

  With `shuffle` (training) the stream is endless and `position` is the number of examples of this
  process's stream already consumed (the resume point). Without it (held-out evaluation) the files
  are read once, in order.
  """
  tf = records.tensorflow()
  meta = records.read_metadata(records_dir)
  records.verify(records_dir, meta)
  index = jax.process_index() if process_index is None else process_index
  count = jax.process_count() if process_count is None else process_count
  files, counts = process_files(meta, split, index, count)
  files = [os.path.join(records_dir, f) for f in files]
  local_batch = local_batch_size(global_batch, count)
  if shuffle:
    stream = Stream(files, counts, seed, index, cycle)
    width = stream.cycle
    groups = tf.data.Dataset.from_generator(
        lambda: stream.descriptions(position),
        output_signature=(tf.TensorSpec([width], tf.string), tf.TensorSpec([], tf.int64),
                          tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int64)))

    def group_examples(names, n, group_seed, skip):
      examples = tf.data.Dataset.from_tensor_slices(names[:n]).interleave(
          tf.data.TFRecordDataset, cycle_length=width, block_length=1,
          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
      return examples.shuffle(shuffle_buffer, seed=group_seed).skip(skip)

    ds = groups.flat_map(group_examples)
  else:
    ds = tf.data.TFRecordDataset(files).skip(position)  # once, in file order
  ds = ds.batch(local_batch, drop_remainder=True)
  length = meta['max_seq_length']
  spec = {k: tf.io.FixedLenFeature([length], tf.int64) for k in records.FEATURES}

  def parse(serialized):
    return {k: tf.cast(v, tf.int32) for k, v in tf.io.parse_example(serialized, spec).items()}

  ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  options = tf.data.Options()
  options.deterministic = True
  return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def global_batches(dataset, sharding) -> Iterator[dict]:
  """Host-local numpy batches -> global jax.Arrays laid out by `sharding`."""
  for local in dataset.as_numpy_iterator():
    yield {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
           for k, v in local.items()}
