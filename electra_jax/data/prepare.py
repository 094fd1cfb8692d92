"""Building a records folder (records.py describes it): corpus -> vocabulary -> packed examples ->
sharded TFRecord files plus their counts, then `metadata.json`.

Who reads what (records.RULES, recorded in metadata.json as `rule`):
- 'parts', a corpus of files: the files are cut into parts of about the same bytes
  (corpus.Source.parts: a file, or a byte range of a large one); part p's documents go to train
  shard p mod num_shards, its held-out ones (hash(seed, file, where the document starts) <
  eval_fraction) to eval shard (p mod num_shards) mod num_eval_shards, each part through an example
  builder seeded by (seed, split, part). A worker writes whole train shards and reads only their
  parts, spooling each part's held-out examples beside them; the eval shards are those spools
  joined in part order (`join_eval_shards`).
- 'documents', the built-in corpus and TFDS datasets: every worker reads every document; the k-th
  is held out when hash(seed, k) < eval_fraction, the j-th of a split goes to shard j mod (shards
  of that split), each shard through a builder seeded by (seed, split, shard).
Either way a shard's bytes depend on the source and the settings only, never on the number of
worker processes or the order they finish in.

Atomicity: a shard is written under a hidden temporary name and renamed when complete, then its
counts file is written (also by rename). An interrupted build leaves only complete shards; running
it again with the same settings builds just the missing ones.
"""

import contextlib
import dataclasses
import math
import multiprocessing
import os
import pickle
import queue
import signal
import time
from typing import Callable

import numpy as np

from electra_jax import UserError
from electra_jax.data import corpus as corpus_lib
from electra_jax.data import examples as examples_lib
from electra_jax.data import records
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.storage import fs
from electra_jax.storage import tf_import


def _serialize(tf, example: examples_lib.Example) -> bytes:
  feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=getattr(example, k).tolist()))
             for k in records.FEATURES}  # lists: 1.5x faster to serialize than numpy arrays
  # deterministic: map entries in key order, so the bytes are the same in every process
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(
      deterministic=True)


class _Shard:
  """One shard being written: its builder, its writer (to a temporary name) and its counts. Its
  examples come from one builder seeded `seed`, or, under the parts rule, from a builder per part
  (`restart`); a part's held-out examples are a shard of their own, spooled (`spool_name`)."""

  def __init__(self, tf, out_dir, settings: records.Settings, name: str, seed: str, special,
               vocab_size):
    self.tf, self.out_dir, self.name, self.special = tf, out_dir, name, special
    # locally a temporary name, renamed when complete; in a bucket the object itself, which
    # appears only when its upload completes
    self.tmp: str | None = (fs.join(out_dir, self.name) if fs.remote(out_dir) else
                fs.join(out_dir, f'.{self.name}.tmp-{os.getpid()}'))
    self.writer = tf.io.TFRecordWriter(self.tmp)
    self.pack = settings.pack_documents
    self.builder: examples_lib.ExampleBuilder | examples_lib.DocumentPacker = (
        examples_lib.DocumentPacker(settings.max_seq_length, special.cls, special.sep)
        if self.pack else self._examples(settings.max_seq_length, seed))
    self.counts = np.zeros(vocab_size, np.int64)
    self.pending: list[np.ndarray] = []
    self.examples = self.tokens = self.documents = self.long_sentences = 0
    self.max_length = settings.max_seq_length
    self.piece = max(4, settings.max_seq_length // 4)

  def restart(self, max_length: int, seed: str):
    """The examples that follow come from a new builder seeded `seed`; a packer (which draws
    nothing) goes on filling its row."""
    if not self.pack:
      self.builder = self._examples(max_length, seed)

  def _examples(self, max_length: int, seed: str) -> examples_lib.ExampleBuilder:
    return examples_lib.ExampleBuilder(max_length, self.special.cls, self.special.sep, seed=seed)

  def add_document(self, sentences: list[list[int]]):
    self.documents += 1
    for ids in sentences:
      # The builder drops what overflows an example (as the original): a sentence longer than a
      # whole example (a paragraph without sentence ends) would lose all but its start, so it goes
      # in as pieces of a quarter example, of which at most part of one is dropped per example.
      if len(ids) <= self.max_length:
        self._emit(self.builder.add_sentence(ids))
        continue
      self.long_sentences += 1
      for start in range(0, len(ids), self.piece):
        self._emit(self.builder.add_sentence(ids[start:start + self.piece]))
    self._emit(self.builder.end_document())

  def _emit(self, examples):
    """Writes an Example, or a packer's list of them (None: nothing)."""
    for example in [examples] if isinstance(examples, examples_lib.Example) else examples or ():
      self.writer.write(_serialize(self.tf, example))
      n = int((example.input_mask > 0).sum())  # (a row's tokens come first, padding after)
      self.examples += 1
      self.tokens += n
      self.pending.append(example.input_ids[:n])
      if len(self.pending) >= 1024:
        self._count()

  def _count(self):
    if self.pending:
      self.counts += np.bincount(np.concatenate(self.pending), minlength=len(self.counts))
      self.pending = []

  def finish(self, **extra) -> dict:
    """Renames the finished shard and writes its counts (with `extra`), which mark it done."""
    self._emit(self.builder.flush())
    self.writer.close()
    self._count()
    path = fs.join(self.out_dir, self.name)
    if self.tmp != path:
      fs.replace(self.tmp, path)  # the shard is complete under its own name ...
    self.tmp = None
    counts = dict(file=self.name, bytes=fs.getsize(path), examples=self.examples,
                  tokens=self.tokens, documents=self.documents,
                  long_sentences=self.long_sentences,
                  token_counts=self.counts.tolist(), **extra)
    # ... and now marked done
    records.write_json(records.counts_path(self.out_dir, self.name), counts)
    return counts


class _Pending:
  """Documents waiting to be tokenized in one call (8K sentences, or 4M characters, a call: 2x
  faster than a call per document, and the tokenizer's memory bounded whatever the sentences'
  length), each for its shard, added to them in order so that each shard's bytes are fixed."""

  SENTENCES, CHARS = 8192, 4_000_000

  def __init__(self, tokenizer):
    self.tokenizer, self.docs, self.sentences, self.chars = tokenizer, [], 0, 0

  def add(self, shard: _Shard, doc: list[str]):
    self.docs.append((shard, doc))
    self.sentences += len(doc)
    self.chars += sum(map(len, doc))
    if self.sentences >= self.SENTENCES or self.chars >= self.CHARS:
      self.flush()

  def flush(self):
    ids = self.tokenizer.encode_batch([s for _, doc in self.docs for s in doc])
    i = 0
    for shard, doc in self.docs:
      shard.add_document(ids[i:i + len(doc)])
      i += len(doc)
    self.docs, self.sentences, self.chars = [], 0, 0


def write_shards(out_dir: str, settings: records.Settings, wanted: list[tuple[str, int]],
                 log: Callable[[str], None] = print, name: str = 'worker',
                 log_every_s: float = 10.0) -> dict:
  """Reads the whole source once and writes the `wanted` shards (the 'documents' rule); returns
  the source's ReadReport. Every worker reads every document (to know its index) but tokenizes
  only its own shards' ones.
  """
  tf = tf_import.tensorflow()
  tokenizer = tokenizer_lib.load_tokenizer(fs.join(out_dir, records.vocab_file(settings)),
                                           lower_case=settings.lower_case)
  source = _source(settings, out_dir)
  shards = {key: _Shard(tf, out_dir, settings, settings.file(*key),
                        f'{settings.seed}:{key[0]}:{key[1]}', tokenizer.special,
                        tokenizer.vocab_size) for key in wanted}
  seen = {s: 0 for s in records.SPLITS}
  pending = _Pending(tokenizer)
  start = last = time.time()
  try:
    for k, doc in enumerate(source.documents()):
      split = 'eval' if records.held_out(settings.seed, k, settings.eval_fraction) else 'train'
      key = (split, seen[split] % settings.count(split))
      seen[split] += 1
      shard = shards.get(key)
      if shard is not None:
        pending.add(shard, doc)
      if time.time() - last > log_every_s:
        last = time.time()
        log(_progress_line(name, source, shards, last - start))
    pending.flush()
    done = [shard.finish() for shard in shards.values()]
  except Exception as e:
    if not fs.no_space(e):
      raise
    raise ValueError(_disk_full(out_dir, source)) from None
  finally:
    _discard_unfinished(list(shards.values()))
  log(_progress_line(name, source, shards, time.time() - start, final=True))
  return dict(report=dataclasses.asdict(source.report), documents=sum(seen.values()),
              shards=sorted(d['file'] for d in done))


_SPOOL = '.part-'


def spool_name(part: int) -> str:
  """The file of a part's held-out examples (the parts rule): written beside its train shard,
  joined into its eval shard at the end (`join_eval_shards`), then removed."""
  return f'{_SPOOL}{part:06d}.eval.tfrecord'


def eval_shard_of(settings: records.Settings, part: int) -> int:
  """The eval shard of part `part`'s held-out documents: that of its train shard, so that a worker
  writing train shards reads no part for the held-out split alone."""
  return (part % settings.num_shards) % settings.num_eval_shards


def write_parts(out_dir: str, settings: records.Settings, wanted: list[int],
                log: Callable[[str], None] = print, name: str = 'worker',
                log_every_s: float = 10.0, done: Callable[[int], None] | None = None) -> dict:
  """Writes the train shards `wanted` of a file corpus under the parts rule (records.RULES),
  reading only their parts: part p's documents go to train shard p mod num_shards, each part's
  examples from a builder of its own, its held-out documents into its spool (`spool_name`). Each
  shard's counts keep what reading its parts met (`read`: the folder's warnings); `done` is told
  the bytes of its parts read so far, each second. Returns the bytes this worker read from the
  files."""
  tf = tf_import.tensorflow()
  tokenizer = tokenizer_lib.load_tokenizer(fs.join(out_dir, records.vocab_file(settings)),
                                           lower_case=settings.lower_case)
  source = _source(settings, out_dir)
  parts = source.parts(settings.num_shards)
  every = settings.num_shards
  total = sum(p.end - p.start for p in parts if p.index % every in wanted)
  pending = _Pending(tokenizer)
  mine = corpus_lib.ReadReport()  # (the worker's own reading: bytes done and read)
  writing: list[_Shard] = []  # (the shards open now: a finished one's memory is let go)
  finished = 0  # examples of the shards finished

  def new(file: str, seed: str) -> _Shard:
    writing.append(_Shard(tf, out_dir, settings, file, seed, tokenizer.special,
                          tokenizer.vocab_size))
    return writing[-1]

  def finish(shard: _Shard, **extra):
    nonlocal finished
    shard.finish(**extra)
    writing.remove(shard)
    finished += shard.examples

  start = last = told = time.time()
  try:
    for index in wanted:
      shard, report = new(settings.file('train', index), ''), corpus_lib.ReadReport()
      for part in parts[index::every]:
        shard.restart(settings.max_seq_length, f'{settings.seed}:train:part{part.index}')
        spool = new(spool_name(part.index), f'{settings.seed}:eval:part{part.index}')
        for offset, doc in source.part_documents(part, report):
          held = records.held_out_at(settings.seed, part.file, offset, settings.eval_fraction)
          pending.add(spool if held else shard, doc)
          now = time.time()
          if done is not None and now - told > 1:
            told = now
            done(mine.bytes_done + report.bytes_done)
          if now - last > log_every_s:
            last = now
            log(_parts_line(name, mine.bytes_done + report.bytes_done, mine.bytes_read, total,
                            finished + sum(s.examples for s in writing), now - start))
        pending.flush()  # (before the next part's builder)
        finish(spool)
      read = dataclasses.asdict(report)
      mine.bytes_done += read.pop('bytes_done')
      mine.bytes_read += read.pop('bytes_read')
      finish(shard, read=read)
  except Exception as e:
    if not fs.no_space(e):
      raise
    raise ValueError(_disk_full(out_dir, source)) from None
  finally:
    _discard_unfinished(writing)
  if done is not None:
    done(mine.bytes_done)
  log(_parts_line(name, mine.bytes_done, mine.bytes_read, total, finished, time.time() - start,
                  final=True))
  return dict(bytes_read=mine.bytes_read, shards=[settings.file('train', i) for i in wanted])


def _discard_unfinished(shards: list[_Shard]):
  """After a failure: no temporary file stays behind."""
  for shard in shards:
    if shard.tmp is not None and not fs.remote(shard.tmp) and fs.exists(shard.tmp):
      try:
        shard.writer.close()
      except Exception:
        pass  # (a full disk fails the close too)
      fs.remove(shard.tmp)


def _eta(fraction: float, elapsed: float) -> str:
  """', 40%, ETA 1m30s' of a progress line (nothing before any progress)."""
  if not fraction:
    return ''
  return f', {100 * fraction:.0f}%, ETA {fs.duration_text(elapsed * (1 - fraction) / fraction)}'


def _parts_line(name: str, done: int, read: int, total: int, examples: int, elapsed: float,
                final: bool = False) -> str:
  line = (f'{name}: {done / 1e6:,.1f} of {total / 1e6:,.1f} MB of its parts read, {examples:,} '
          f'examples written, {done / 1e6 / max(elapsed, 1e-9):.2f} MB/s')
  if final:
    return line + (f', done in {fs.duration_text(elapsed)}; {read / 1e6:,.1f} MB read from the '
                   'files in all')
  return line + _eta(done / total if total else 0, elapsed)


def _all_line(workers: int, done: int, total: int, elapsed: float) -> str:
  return (f'all {workers} workers: {done / 1e6:,.1f} of {total / 1e6:,.1f} MB read, '
          f'{done / 1e6 / max(elapsed, 1e-9):.2f} MB/s' + _eta(done / total if total else 0,
                                                             elapsed))


def join_eval_shards(out_dir: str, settings: records.Settings, parts: int, wanted: list[int]):
  """Each eval shard of `wanted`: its parts' spools joined in part order (TFRecord files join
  whole), written under a temporary name and renamed, then its counts (the spools' summed)."""
  for index in wanted:
    name = settings.file('eval', index)
    members = [spool_name(p) for p in range(parts) if eval_shard_of(settings, p) == index]
    counts = [records.read_json(records.counts_path(out_dir, m)) for m in members]
    path = fs.join(out_dir, name)
    tmp = path if fs.remote(out_dir) else fs.join(out_dir, f'.{name}.tmp-{os.getpid()}')
    with fs.open(tmp, 'wb') as out:
      for member in members:
        out.write(fs.read_bytes(fs.join(out_dir, member)))
    if tmp != path:
      fs.replace(tmp, path)
    summed = dict(file=name, bytes=fs.getsize(path),
                  **{k: sum(c[k] for c in counts)
                     for k in ('examples', 'tokens', 'documents', 'long_sentences')},
                  token_counts=np.sum([c['token_counts'] for c in counts], axis=0).tolist()
                  if counts else [])
    records.write_json(records.counts_path(out_dir, name), summed)


def _disk_full(out_dir: str, source) -> str:
  """One sentence for a full disk under `out_dir`: what is free, about what the records take."""
  free = fs.free_bytes(out_dir)
  size = source.total_bytes
  if source.spec == 'builtin':
    size = sum(len(s) + 1 for doc in corpus_lib.builtin_documents() for s in doc)
  need = (f'; records take about 1.3 times the text, here about {fs.size_text(1.3 * size)}'
          if size else '')
  return (f'the disk holding {out_dir} is full' +
          (f' ({fs.size_text(free)} free)' if free is not None else '') + need +
          '; free space or give another --output, then run the same command again')


def _progress_line(name, source, shards, elapsed, final=False) -> str:
  mb = source.report.bytes_done / 1e6
  examples = sum(s.examples for s in shards.values())
  line = (f'{name}: {mb:,.1f} MB read, {examples:,} examples written, '
          f'{mb / max(elapsed, 1e-9):.2f} MB/s')
  if final:
    return line + f', done in {fs.duration_text(elapsed)}'
  return line + _eta(source.fraction_read(), elapsed)


_STOPS = {signal.SIGINT, signal.SIGTERM}


@contextlib.contextmanager
def _stops_deferred():
  """Ctrl-C and SIGTERM arriving inside the block take effect at its end: a worker being handed its
  start-up data when one arrives would be left reading a closed pipe (a traceback on stderr). Both
  are held in this thread's mask, which the workers inherit until their initializer, and their
  Python handlers only note them: the process's other threads (TensorFlow's) can take a signal
  the mask holds, and Python then runs the handler in this thread all the same."""
  arrived: list[int] = []
  previous = {s: signal.signal(s, lambda signum, frame: arrived.append(signum)) for s in _STOPS}
  held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
  try:
    yield
  finally:
    signal.pthread_sigmask(signal.SIG_SETMASK, held)  # (a held one is noted here)
    for s, handler in previous.items():
      signal.signal(s, handler if handler is not None else signal.SIG_DFL)
    if arrived:
      signal.raise_signal(arrived[0])


_DONE = None  # (in a worker: the bytes of its parts each worker has read, shared with the parent)


def _start_worker(done=None):
  """In a worker: Ctrl-C and SIGTERM are the parent's to handle (it stops the workers); the mask
  the parent held while starting them is lifted (a SIGTERM of the pool's ends the worker)."""
  global _DONE
  _DONE = done
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)


def _worker(args, log=None):
  out_dir, settings, wanted, name, rule, slot = args
  log = log or (lambda line: print(line, flush=True))
  if rule == 'parts':
    shared = _DONE

    def done(read: int):
      shared[slot] = read

    return write_parts(out_dir, settings, [i for _, i in wanted], log=log, name=name,
                       done=None if shared is None else done)
  return write_shards(out_dir, settings, wanted, log=log, name=name)


def _differences(old: dict, new: dict) -> list[str]:
  return [f'{k} {old.get(k)!r} -> {new.get(k)!r}' for k in sorted(set(old) | set(new))
          if old.get(k) != new.get(k)]


def _source(settings: records.Settings, out_dir: str) -> corpus_lib.Source:
  """The corpus of `settings`, without the files of the records folder `out_dir` or of any other
  (which may lie inside a corpus folder: the next build read them as text, and took the corpus for
  changed)."""
  return corpus_lib.Source(settings.source, settings.text_field, exclude=out_dir,
                           marker=records.PLAN)


def _source_changed(out_dir: str, source: corpus_lib.Source) -> str:
  """'' where the corpus files are as they were when the build in `out_dir` began (or that was
  not recorded: records built before it was), else a clause saying how they changed."""
  path = fs.join(out_dir, records.SOURCE)
  if not fs.isfile(path):
    return ''
  then, now = records.read_json(path), source.state()
  if then == now:
    return ''
  now = now or {}
  return (f'the corpus {source.spec!r} changed since the records in {out_dir} were begun from it '
          f'({then.get("files")} file(s) of {then.get("bytes"):,} bytes then, '
          f'{now.get("files")} of {now.get("bytes", 0):,} now, or newer files)')


def records_folder(settings: records.Settings, out_dir: str, *, num_workers: int = 1,
                   log: Callable[[str], None] = print, size_flag: str = '--vocab_size',
                   writer: Callable | None = None) -> dict:
  """Builds (or finishes) the records folder `out_dir` for `settings`; returns its metadata. The
  shards are written by `num_workers` processes here, or by `writer` (a corpus of files only:
  (out_dir, settings, the train shards, the eval shards, the parts, log) -> None, on_beam.writer's
  pipeline)."""
  settings.check()
  if num_workers < 1:
    raise ValueError(f'num_workers={num_workers} must be at least 1')
  if writer is not None and records.rule_of(settings.source) != 'parts':
    raise ValueError(f'--runner builds the records of a corpus of files, and {settings.source!r} '
                     'is read whole; build it here (--num_workers), without --runner')
  plan = dataclasses.asdict(settings)
  meta_path, plan_path = fs.join(out_dir, records.METADATA), fs.join(out_dir, records.PLAN)
  if fs.exists(out_dir) and not fs.isdir(out_dir):  # (a file, or /dev/null)
    raise ValueError(f'--output {out_dir} is a file; give a folder (new or empty) for the records')
  if fs.exists(plan_path):
    begun, rule = records.read_plan(plan_path)
    diffs = _differences(dataclasses.asdict(begun), plan)
    if diffs:
      raise ValueError(f'{out_dir} holds records built with other settings ({", ".join(diffs)}); '
                       'use the same settings to finish or reuse it, or another folder')
    if rule != records.rule_of(settings.source) and not fs.exists(meta_path):
      raise ValueError(f'{out_dir} is an unfinished records folder begun by an earlier version, '
                       f'which gave the documents to shards by another rule ({rule!r}); delete it '
                       'and run the same command again')
  elif fs.isdir(out_dir) and fs.listdir(out_dir):
    raise ValueError(f'{out_dir} exists and is not a records folder; remove it or choose another '
                     'folder')
  if fs.exists(meta_path):
    log(f'records {out_dir}: complete already')
    try:
      changed = _source_changed(out_dir, _source(settings, out_dir))
    except (OSError, ValueError):  # the corpus is gone or unreadable: the records are what's left
      changed = ''
    if changed:
      log(f'warning: {changed}; they hold the corpus as it was then: delete {out_dir} and run the '
          'same command again to build them from the corpus as it is now')
    return records.read_metadata(out_dir)
  source = _source(settings, out_dir)  # fails early on a bad spec
  changed = _source_changed(out_dir, source)
  if changed:  # shards of two versions of the corpus would not make one records folder
    raise ValueError(f'{changed}, and the build is unfinished; delete {out_dir} and run the same '
                     'command again, or restore the corpus to finish it')
  created = not fs.exists(out_dir)
  fs.makedirs(out_dir)
  try:
    try:
      return _build(settings, source, out_dir, num_workers, log, size_flag, writer)
    except OSError as e:  # the vocabulary or a counts file on a full disk
      if not fs.no_space(e):
        raise
      raise ValueError(_disk_full(out_dir, source)) from None
  except ValueError:
    if created:  # a build this call began and that cannot succeed leaves nothing behind
      fs.rmtree(out_dir, ignore_errors=True)
    raise


def _build(settings, source, out_dir, num_workers, log, size_flag='--vocab_size',
           writer=None) -> dict:
  plan_path = fs.join(out_dir, records.PLAN)
  vocab_path = fs.join(out_dir, records.vocab_file(settings))
  if not fs.exists(plan_path):
    source.require_text()
    if settings.vocab:
      tokenizer_lib.load_tokenizer(settings.vocab, lower_case=settings.lower_case)  # readable?
      fs.write_atomic(vocab_path, fs.read_bytes(settings.vocab))
    else:
      log(f'training a SentencePiece vocabulary of {settings.vocab_size} entries on '
          f'{settings.source}')
      stats: dict[str, int] = {}
      tokenizer_lib.train_sentencepiece(
          source.lines(), vocab_path, settings.vocab_size, lower_case=settings.lower_case,
          seed=settings.seed, character_coverage=settings.character_coverage,
          max_sentences=settings.max_sentences, size_flag=size_flag, stats=stats, log=log,
          fraction_read=source.fraction_read)
      if stats.get('lines_cut'):
        log(f'warning: corpus {settings.source}: {stats["lines_cut"]:,} sentence(s) longer than '
            f'{tokenizer_lib.MAX_SENTENCE_BYTES:,} bytes were cut into pieces for the vocabulary '
            'trainer, which would skip them')
    state = source.state()  # (a stat of every corpus file: once)
    if state is not None:
      records.write_json(fs.join(out_dir, records.SOURCE), state)
    records.write_json(plan_path, {**dataclasses.asdict(settings),
                                   'rule': records.rule_of(settings.source)})
  for stale in fs.listdir(out_dir):  # temporary files of an interrupted run
    if stale.startswith('.') and '.tmp-' in stale:
      fs.remove(fs.join(out_dir, stale))

  missing = [key for key in settings.shards() if key not in records.done_shards(out_dir, settings)]
  total = len(settings.shards())
  rule = records.rule_of(settings.source)
  part_list = source.parts(settings.num_shards) if rule == 'parts' else []
  parts = len(part_list)
  # the parts rule: workers write the train shards, reading their parts alone, then the held-out
  # spools are joined into the eval shards here; 'documents': workers write any shards
  work = [key for key in missing if rule == 'documents' or key[0] == 'train']
  if rule == 'parts':  # an eval shard to join whose spools are gone: their train shards again
    joining = {i for split, i in missing if split == 'eval'}
    again = sorted({p % settings.num_shards for p in range(parts) if eval_shard_of(settings, p)
                    in joining and not _spool_done(out_dir, p)} - {i for _, i in work})
    work = sorted(work + [('train', i) for i in again], key=lambda key: key[1])
    missing = sorted(set(missing) | set(work), key=settings.shards().index)
  joined = [i for split, i in missing if split == 'eval'] if rule == 'parts' else []
  if writer is not None:  # elsewhere (on_beam.writer): the train shards, then the eval shards
    writer(out_dir, settings, [i for _, i in work], joined, parts, log)
    return _finish(out_dir, settings, log, rule, parts)
  if work:
    log(f'writing {len(missing)} of {total} shards to {out_dir} with '
        f'{min(num_workers, len(work))} worker(s)'
        + (f', {parts:,} parts of the corpus among them' if parts else ''))
    started = time.time()
    to_read = sum(p.end - p.start for p in part_list
                  if ('train', p.index % settings.num_shards) in work)
    results = _write_here(out_dir, settings, work, num_workers, rule, log, to_read)
    if rule == 'documents':  # (the parts rule's: in the shards' counts, logged by _finish)
      for warning in corpus_lib.ReadReport(**results[0]['report']).warnings():
        log(f'warning: corpus {settings.source}: {warning}')
    else:
      read = sum(r['bytes_read'] for r in results)
      log(f'the {len(results)} worker(s) read {read / 1e6:,.1f} MB from the files in all '
          f'({read / max(source.total_bytes, 1):.2f}x the corpus) in '
          f'{fs.duration_text(time.time() - started)}')
  if joined:
    log(f'joining {len(joined)} eval shard(s) from the held-out examples of their parts')
    join_eval_shards(out_dir, settings, parts, joined)
  return _finish(out_dir, settings, log, rule, parts)


def _write_here(out_dir: str, settings: records.Settings, work: list, num_workers: int, rule: str,
                log, total: int = 0, log_every_s: float = 10.0) -> list[dict]:
  """The shards `work` written by worker processes of this machine (one: this process), each
  writing every `num_workers`-th of them; their results. Under the parts rule, a line for all the
  workers every `log_every_s` too: the `total` bytes of their parts, read so far, and the ETA.
  A worker that dies (the out-of-memory killer's SIGKILL) ends the build with one sentence naming
  it; what the others finished stays, and the same command builds the rest."""
  workers = min(num_workers, len(work))
  tasks = [(out_dir, settings, work[w::workers], f'worker {w + 1}/{workers}', rule, w)
           for w in range(workers)]
  if workers == 1:
    return [_worker(tasks[0], log)]
  context = multiprocessing.get_context('spawn')
  done = context.RawArray('q', workers) if rule == 'parts' else None
  answers = context.Queue()
  processes: list = []
  try:  # the first worker error is raised here; an interruption reaches this process only
    with _stops_deferred():  # (a deferred one arrives at its end, the workers started)
      for task in tasks:
        processes.append(context.Process(target=_worker_process, args=(task, done, answers),
                                         daemon=True, name=task[3]))
        processes[-1].start()
    results: dict[int, dict] = {}
    start = last_line = time.time()
    while len(results) < workers:
      try:
        slot, error, result = answers.get(timeout=min(log_every_s, 1.0))
      except queue.Empty:
        _check_alive(processes, results, tasks, answers)
        # (the workers' lines say when each has begun)
        if done is not None and sum(done) and time.time() - last_line >= log_every_s:
          log(_all_line(workers, sum(done), total, time.time() - start))
          last_line = time.time()
        continue
      if error is not None:
        raise error
      results[slot] = result
    return sorted(results.values(), key=lambda r: r['shards'])
  finally:  # the workers stopped before an error or interruption goes on
    for p in processes:
      if p.is_alive():
        p.terminate()
    for p in processes:
      p.join()


def _worker_process(task, done, answers):
  """A worker process: its shards written, and (its slot, an error or None, its result) sent."""
  _start_worker(done)
  try:
    answers.put((task[5], None, _worker(task)))
  except BaseException as e:  # (raised again in the parent, as the pool did)
    try:
      pickle.dumps(e)
    except Exception:
      e = RuntimeError(f'{type(e).__name__}: {e}')
    answers.put((task[5], e, None))


def _check_alive(processes, results, tasks, answers):
  """Raises UserError for a worker that ended without sending its result (after a last look at
  what it sent: a worker's result is in the queue before it exits)."""
  for slot, p in enumerate(processes):
    if slot in results or p.exitcode is None:
      continue
    with contextlib.suppress(queue.Empty):  # its answer may still be on its way
      late_slot, error, result = answers.get(timeout=1.0)
      if error is not None:
        raise error
      results[late_slot] = result
      if late_slot == slot:
        continue
    if slot in results:
      continue
    code = p.exitcode
    how = (f'was killed by {signal.Signals(-code).name}' if code < 0 else
           f'exited with status {code}')
    why = (' (the out-of-memory killer sends SIGKILL: lower --num_workers, or give the machine '
           'more memory)' if code == -signal.SIGKILL else '')
    raise UserError(f'{tasks[slot][3]} (pid {p.pid}) {how} before it finished its shards{why}; '
                    'the shards the workers finished are kept: run the same command again to '
                    'build the rest')


def _spool_done(out_dir: str, part: int) -> bool:
  """Whether part `part`'s held-out spool is complete (its counts file, and the size it gives)."""
  name = spool_name(part)
  try:
    return fs.getsize(fs.join(out_dir, name)) == records.read_json(
        records.counts_path(out_dir, name))['bytes']
  except (OSError, ValueError, KeyError):
    return False


def _read_report(reads: list[dict]) -> corpus_lib.ReadReport:
  """The ReadReports of the parts rule's train shards (their counts' `read`) as one, in order."""
  out = corpus_lib.ReadReport()
  for read in reads:
    r = corpus_lib.ReadReport(**read)
    for name, mine in dataclasses.asdict(out).items():
      value = getattr(r, name)
      setattr(out, name, (mine or value) if name == 'first_nul' else mine + value)
  return out


def _finish(out_dir: str, settings: records.Settings, log, rule: str = 'documents',
            part_count: int = 0) -> dict:
  """All shards done: their counts -> metadata.json (the mark of a complete folder), then the
  held-out spools of the parts rule removed. A corpus of files that changed while the shards were
  written (a file appended to) is refused: the shards would hold parts of two versions of it."""
  if rule == 'parts':
    changed = _source_changed(out_dir, _source(settings, out_dir))
    if changed:
      raise ValueError(f'{changed}, while the records were being built: they would hold parts of '
                       'two versions of it, and are not kept; run the same command again once '
                       'the corpus stays as it is (a file still being written: wait for it to '
                       'end, or build from a copy)')
  splits, counts, shards = {}, {}, []
  for split in records.SPLITS:
    parts = [records.read_json(records.counts_path(out_dir, settings.file(split, i)))
             for i in range(settings.count(split))]
    shards += parts
    splits[split] = dict(files=[p['file'] for p in parts],
                         examples_per_file=[p['examples'] for p in parts],
                         bytes_per_file=[p['bytes'] for p in parts],
                         **{k: sum(p[k] for p in parts) for k in ('examples', 'tokens',
                                                                  'documents')})
    counts[split] = np.sum([p['token_counts'] for p in parts], axis=0)
  if rule == 'parts':  # what reading the corpus met, each train shard's parts' (see write_parts)
    for warning in _read_report([p['read'] for p in shards if 'read' in p]).warnings():
      log(f'warning: corpus {settings.source}: {warning}')
  long_sentences = sum(p.get('long_sentences', 0) for p in shards)
  if long_sentences:
    piece = max(4, settings.max_seq_length // 4)
    log(f'warning: corpus {settings.source}: {long_sentences:,} sentence(s) longer than an '
        f'example ({settings.max_seq_length} tokens) went into examples as pieces of {piece} '
        'tokens, so that no more of their text is dropped than of ordinary sentences')
  documents = splits['train']['documents'] + splits['eval']['documents']
  if splits['train']['examples'] + splits['eval']['examples'] == 0:
    raise ValueError(f'the corpus {settings.source!r} holds no text; give a corpus with at least '
                     'one non-empty line')
  if documents < 2:
    raise ValueError(f'the corpus {settings.source!r} is one document, and the held-out split '
                     'needs documents of its own; give several (a blank line or a new file '
                     'starts one)')
  for split, other in (('eval', 'train'), ('train', 'eval')):
    if splits[split]['examples'] == 0:
      raise ValueError(f'all {documents} documents of the corpus {settings.source!r} went to the '
                       f'{other} split; {"raise" if split == "eval" else "lower"} the eval '
                       'fraction or give more documents (a blank line or a new file starts one)')
  tokenizer = tokenizer_lib.load_tokenizer(fs.join(out_dir, records.vocab_file(settings)),
                                           lower_case=settings.lower_case)
  metadata = dict(
      format=records.FORMAT, source=settings.source, seed=settings.seed,
      max_seq_length=settings.max_seq_length, vocab_file=records.vocab_file(settings),
      vocab_size=tokenizer.vocab_size, vocab_fingerprint=tokenizer.fingerprint,
      special_ids=tokenizer.special.as_dict(), lower_case=settings.lower_case,
      eval_fraction=settings.eval_fraction, splits=splits,
      unigram_xent=unigram_cross_entropy(counts['train'], counts['eval'], tokenizer.special),
      rule=rule, **({'parts': part_count} if part_count else {}),
      **({'pack_documents': True} if settings.pack_documents else {}))
  records.write_json(fs.join(out_dir, records.METADATA), metadata)
  for name in fs.listdir(out_dir):
    if name.startswith(_SPOOL):
      fs.remove(fs.join(out_dir, name))
  log(f'records {out_dir}: {splits["train"]["examples"]:,} train / '
      f'{splits["eval"]["examples"]:,} held-out examples of {settings.max_seq_length} tokens from '
      f'{splits["train"]["documents"] + splits["eval"]["documents"]:,} documents, unigram baseline '
      f'{metadata["unigram_xent"]:.3f} nats ({math.exp(metadata["unigram_xent"]):.0f} perplexity)')
  return metadata


def unigram_cross_entropy(train_counts, eval_counts, special) -> float:
  """Mean -log p_unigram(token) over held-out maskable tokens (add-one smoothed train counts)."""
  drop = [special.pad, special.cls, special.sep, special.mask]
  train = np.asarray(train_counts, np.float64) + 1.0
  train[drop] = 0.0
  ev = np.asarray(eval_counts, np.float64).copy()
  ev[drop] = 0.0
  logp = np.log(np.where(train > 0, train / train.sum(), 1.0))
  return float(-(ev * logp).sum() / max(ev.sum(), 1.0))
