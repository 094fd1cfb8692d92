"""tf.data over a records folder -> global `jax.Array` batches (TensorFlow is imported lazily).

The training stream is read by R *readers* (data.readers; 0 picks the most train shard files that
divide the batch). Reader r reads the shard files `files[r::R]` and gives rows [r B/R, (r+1) B/R) of
every global batch of B rows; process p of P runs readers p R/P .. (p+1) R/P - 1. The global batch
depends on (records, seed, B, R) only, never on the number of processes or devices: a run on one
host and on sixteen sees the same batches, and no two processes read the same file. Each reader's
example stream is a pure function of (seed, reader, position):

    epoch e: the reader's files in an order drawn from (seed, reader, e), cut into groups of
             `cycle` files; each group's files are interleaved one example at a time and then
             shuffled in a buffer (shuffle_buffer / R examples) seeded by (seed, reader, e, group).

A process's readers' batches are concatenated, parsed in parallel, prefetched, and become one global
array sharded over the mesh's data axis (`jax.make_array_from_process_local_data`).

Resuming at example position p of every reader (step x B/R, saved with each checkpoint with R)
needs no replay: the example counts of the files (from metadata.json) locate p's group, that group
starts afresh and skips only the examples it had already given, unparsed, at most one group's worth.

The held-out split is read once, in file order, by every process, each keeping its rows of every
global batch: it is small, and its batches are then the same for any number of processes too.
"""

import re
from typing import Iterator

import jax
import numpy as np

from electra_jax.data import records
from electra_jax.storage import deadline
from electra_jax.storage import fs
from electra_jax.storage import tf_import


def local_batch_size(global_batch: int, process_count: int | None = None) -> int:
  n = jax.process_count() if process_count is None else process_count
  if global_batch % n:
    raise ValueError(f'the batch size {global_batch} does not divide among {n} processes; '
                     f'use a multiple of {n}')
  return global_batch // n


def num_readers(meta: dict, global_batch: int, requested: int = 0) -> int:
  """R, the readers of the train split: `requested`, or (0) the most shard files dividing the
  batch."""
  files = len(meta['splits']['train']['files'])
  if requested:
    if requested < 0 or global_batch % requested:
      raise ValueError(f'data.readers={requested} does not divide the batch of {global_batch}; '
                       'use a divisor of data.batch_size, or 0 to choose one')
    if requested > files:
      raise ValueError(f'data.readers={requested} but the records hold {files} train shard '
                       f'file(s); use at most {files} readers, or rebuild the records with '
                       f'data.num_shards={requested}')
    return requested
  return max(r for r in range(1, files + 1) if global_batch % r == 0)


def process_readers(readers: int, index: int, count: int) -> range:
  """The readers process `index` of `count` runs."""
  if readers % count:
    raise ValueError(f'{readers} input reader(s) do not divide among {count} processes; set '
                     f'--config.data.readers to a multiple of {count} that divides the batch '
                     f'(the records need at least that many train shards: data.num_shards)')
  share = readers // count
  return range(index * share, (index + 1) * share)


def reader_files(meta: dict, split: str, reader: int, readers: int) -> tuple[list, list]:
  """The shard files (and their example counts) that reader `reader` of `readers` reads."""
  s = meta['splits'][split]
  files, counts = s['files'][reader::readers], s['examples_per_file'][reader::readers]
  if not sum(counts):
    raise ValueError(f'the {split} shards of input reader {reader} of {readers} hold no example; '
                     'rebuild the records with fewer shards, or set fewer data.readers')
  return files, counts


def held_out_batches(meta: dict, global_batch: int, wanted: int) -> int:
  """Batches of a held-out evaluation: `wanted`, or fewer where the split is smaller."""
  total = sum(meta['splits']['eval']['examples_per_file'])
  if total < global_batch:
    raise ValueError(f'the held-out split holds {total} example(s), fewer than one batch of '
                     f'{global_batch}; lower data.eval_batch_size or hold out more documents')
  return min(wanted, total // global_batch)


class Stream:
  """The plan of one reader's endless, shuffled example stream: which groups, in which order."""

  def __init__(self, files: list[str], counts: list[int], seed: int, reader: int, cycle: int):
    self.files, self.counts = files, np.asarray(counts, np.int64)
    self.seed, self.reader, self.cycle = seed, reader, max(1, min(cycle, len(files)))
    self.epoch_size = int(self.counts.sum())

  def groups(self, epoch: int) -> list[np.ndarray]:
    order = np.random.default_rng([self.seed, self.reader, epoch]).permutation(len(self.files))
    return [order[i:i + self.cycle] for i in range(0, len(order), self.cycle)]

  def group_seed(self, epoch: int, group: int) -> int:
    return int(np.random.default_rng([self.seed, self.reader, epoch, group, 1]).integers(2**62))

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
                 cycle: int = 8, readers: int = 1, process_index: int | None = None,
                 process_count: int | None = None):
  """A deterministic tf.data.Dataset of this process's rows of each global batch: dicts of int32.

  With `shuffle` (training) the stream is endless, read by `readers` readers, and `position` is the
  number of examples each reader has already given (the resume point). Without it (held-out
  evaluation) the files are read once, in order.
  """
  tf = tf_import.tensorflow()
  meta = records.read_metadata(records_dir)
  records.verify(records_dir, meta)
  index = jax.process_index() if process_index is None else process_index
  count = jax.process_count() if process_count is None else process_count
  local_batch = local_batch_size(global_batch, count)
  plain = tf.autograph.experimental.do_not_convert  # see _reader_dataset
  if shuffle:
    if global_batch % readers:
      raise ValueError(f'{readers} input readers do not divide the batch of {global_batch}')
    parts = []
    for reader in process_readers(readers, index, count):
      files, counts = reader_files(meta, split, reader, readers)
      stream = Stream([fs.join(records_dir, f) for f in files], counts, seed, reader, cycle)
      parts.append(_reader_dataset(tf, stream, position, max(1, shuffle_buffer // readers))
                   .batch(global_batch // readers, drop_remainder=True))
    ds = (parts[0] if len(parts) == 1 else
          tf.data.Dataset.zip(tuple(parts)).map(plain(lambda *b: tf.concat(b, axis=0))))
  else:  # once, in file order; every process keeps its rows of each global batch
    files = [fs.join(records_dir, f) for f in meta['splits'][split]['files']]
    ds = tf.data.TFRecordDataset(files).skip(position).batch(global_batch, drop_remainder=True)
    if count > 1:
      ds = ds.map(plain(lambda b: b[index * local_batch:(index + 1) * local_batch]))
  length = meta['max_seq_length']
  spec = {k: tf.io.FixedLenFeature([length], tf.int64) for k in records.FEATURES}

  def parse(serialized):
    return {k: tf.cast(v, tf.int32) for k, v in tf.io.parse_example(serialized, spec).items()}

  ds = ds.map(plain(parse), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  options = tf.data.Options()
  options.deterministic = True
  return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def _reader_dataset(tf, stream: Stream, position: int, shuffle_buffer: int):
  """One reader's endless example stream from `position` on. Its functions, like the others given
  to tf.data here, hold no Python control flow over tensors and are not converted by AutoGraph:
  AutoGraph writes each converted function's source to a file in the temporary folder that only
  the interpreter's normal exit removes, and the launch scripts end with os._exit (cli.exit_now)."""
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

  return groups.flat_map(tf.autograph.experimental.do_not_convert(group_examples))


def global_batches(dataset, sharding, records_dir: str | None = None) -> Iterator[dict]:
  """Host-local numpy batches -> global jax.Arrays laid out by `sharding`.

  With `records_dir`, a record that fails its checksum (TFRecord's CRC: a shard damaged on disk or
  in a copy) raises DamagedRecords naming the shard file and the record."""
  iterator = dataset.as_numpy_iterator()
  while True:
    try:
      with deadline.waiting(records_dir):  # (records in a bucket: a read that never answers ends)
        local = next(iterator)
    except StopIteration:
      return
    except Exception as e:
      if records_dir is None or type(e).__name__ not in ('DataLossError', *_GONE):
        raise
      text = ' '.join(str(e).split())
      if type(e).__name__ in _GONE:  # a shard deleted, or its bucket out of reach, mid-run
        raise DamagedRecords(gone_report(records_dir, text)) from None
      raise DamagedRecords(damage_report(records_dir, text)) from None
    yield {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
           for k, v in local.items()}


class DamagedRecords(ValueError):
  """A records shard whose bytes no longer match their checksums, or that can no longer be read."""


_GONE = ('NotFoundError', 'PermissionDeniedError')  # TensorFlow's, for a file gone or forbidden


def gone_report(records_dir: str, error: str) -> str:
  """One sentence for a shard that could be read when the run began and no longer can."""
  shard = r'(?:[a-z]+://)?[^\s:;]+\.tfrecord'
  found = re.search(f'({shard})', error)
  what = found.group(1) if found else f'a shard of {records_dir}'
  reason = 'forbidden' if 'Permission' in error or ' 403' in error else 'gone'
  said = re.sub(r'\{\{.*?\}\}\s*|\s*\[Op:.*|\s*(when reading\s*)?' + shard + r'[\s:;]*', ' ',
                error).strip(' ;:')
  return (f'{what} can no longer be read ({reason}: {said[:100]}): the records folder '
          f'{records_dir} changed while the run read it; restore it (or rebuild it) and run the '
          'same command again to continue from the last checkpoint')


def damage_report(records_dir: str, error: str = '') -> str:
  """One sentence naming the damaged shard of `records_dir` and the record where it breaks (each
  shard is read through until one fails), and how to get sound records back."""
  tf = tf_import.tensorflow()
  meta = records.read_metadata(records_dir)
  found = None
  for split in records.SPLITS:
    for name in meta['splits'][split]['files']:
      path = fs.join(records_dir, name)
      n = 0
      try:
        for _ in tf.data.TFRecordDataset(path):
          n += 1
      except Exception as e:
        if type(e).__name__ != 'DataLossError':
          raise
        found = (path, n)
        break
    if found:
      break
  where = (f'the shard {found[0]} is damaged: record {found[1]:,} fails its checksum'
           if found else f'a shard of {records_dir} is damaged ({error[:160]})')
  return (f'{where}; copy the records again, or rebuild them (delete {records_dir} and run the '
          'command that built it again: launch/prepare_data.py, or launch/train.py for the data '
          'folder of a workdir)')
