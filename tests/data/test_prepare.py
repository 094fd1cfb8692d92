"""Records at scale: parallel, deterministic, resumable preparation and a resumable per-process
stream."""

import collections
import dataclasses
import filecmp
import gzip
import importlib.util
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import ROOT, WORDS, write_corpus
from electra_jax import UserError
from electra_jax.data import corpus as corpus_lib
from electra_jax.data import input_pipeline
from electra_jax.data import on_beam
from electra_jax.data import prepare as prepare_lib
from electra_jax.data import records
from electra_jax.storage import tf_import


def _quiet(*_):
  pass


@pytest.fixture(scope='module')
def mixed_corpus(tmp_path_factory):
  """Plain, gzipped and JSON-lines files in one folder."""
  folder = tmp_path_factory.mktemp('mixed')
  write_corpus(str(folder / 'a.txt'), num_docs=40, seed=1)
  text = open(write_corpus(str(folder / 'tmp.txt'), num_docs=30, seed=2)).read()
  os.remove(folder / 'tmp.txt')
  with gzip.open(folder / 'b.txt.gz', 'wt') as f:
    f.write(text)
  with open(folder / 'c.jsonl', 'w') as f:
    for d in range(30):
      f.write(json.dumps({'text': ' '.join(WORDS[d:d + 12]).capitalize() + f'. Doc {d} ends.'})
              + '\n')
  return str(folder)


@pytest.fixture(scope='module')
def settings(mixed_corpus):
  return records.Settings(source=mixed_corpus, max_seq_length=32, eval_fraction=0.1, num_shards=5,
                          num_eval_shards=2, vocab_size=96)


@pytest.fixture(scope='module')
def built(tmp_path_factory, settings):
  out = str(tmp_path_factory.mktemp('built') / 'records')
  prepare_lib.records_folder(settings, out, num_workers=1, log=_quiet)
  return out


def _same_folders(a, b):
  names = sorted(os.listdir(a))
  assert names == sorted(os.listdir(b))
  _, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
  assert not mismatch and not errors, mismatch


def _cli(*args):
  return subprocess.run([sys.executable, os.path.join(ROOT, 'launch', 'prepare_data.py'), *args],
                        capture_output=True, text=True, check=False, cwd=ROOT)


def test_the_same_bytes_whatever_the_number_of_workers_and_bad_flags(tmp_path, built, settings):
  out = str(tmp_path / 'two')
  same = [f'--corpus={settings.source}', f'--output={out}', '--eval_fraction=0.1',
          '--num_shards=5', '--num_eval_shards=2', '--vocab_size=96']
  run = _cli(*same, '--max_seq_length=32', '--num_workers=2')
  assert run.returncode == 0, run.stderr[-2000:]
  assert 'writing 7 of 7 shards' in run.stdout and 'worker 2/2:' in run.stdout
  _same_folders(built, out)
  for flags, message in [
      ([f'--output={tmp_path}/x'], 'give exactly one source'),
      ([f'--corpus={tmp_path}/none*.txt', f'--output={tmp_path}/x'], 'matches no file'),
      (same + ['--max_seq_length=64'], 'other settings (max_seq_length 32 -> 64)'),
      ([f'--corpus={settings.source}', f'--output={tmp_path}/x', '--vocab=/no/vocab.txt'],
       'is not a file'),
      ([f'--corpus={settings.source}', f'--output={tmp_path}/x', f'--vocab={built}/vocab.model',
        '--vocab_size=30000'], f'--vocab_size=30000 contradicts --vocab {built}/vocab.model, '
       "which has 96 entries; leave --vocab_size out (a given vocabulary's size is its own) or "
       'give --vocab_size=96')]:
    run = _cli(*flags)
    error = [l for l in run.stderr.splitlines() if l.startswith('error:')]
    assert run.returncode == 2 and len(error) == 1 and message in error[0], run.stderr[-2000:]
  assert not os.path.exists(tmp_path / 'x')
  _same_folders(built, out)  # the refused run changed nothing


@pytest.mark.fast
def test_documents_go_to_the_shards_of_their_parts_and_are_counted(built, settings):
  """The parts rule: a document goes to the train shard of its part (p mod num_shards), or, held
  out by the hash of where it starts, to that shard's eval shard; every document once; the
  spools of the held-out examples are gone once the folder is complete."""
  meta = records.read_metadata(built)
  s = meta['splits']
  assert meta['rule'] == 'parts' and s['train']['documents'] + s['eval']['documents'] == 100
  source = corpus_lib.Source(settings.source)
  parts = source.parts(settings.num_shards)
  assert meta['parts'] == len(parts) >= settings.num_shards
  train, held = [0] * settings.num_shards, [0] * settings.num_eval_shards
  for part in parts:
    for offset, _ in source.part_documents(part, corpus_lib.ReadReport()):
      if records.held_out_at(settings.seed, part.file, offset, settings.eval_fraction):
        held[prepare_lib.eval_shard_of(settings, part.index)] += 1
      else:
        train[part.index % settings.num_shards] += 1
  documents = lambda split: [records.read_json(os.path.join(built, f[:-9] + '.json'))['documents']
                             for f in s[split]['files']]
  assert documents('train') == train and documents('eval') == held and sum(held) > 0
  assert len(s['train']['files']) == 5 and len(s['eval']['files']) == 2
  assert sum(s['train']['examples_per_file']) == s['train']['examples']
  assert not [n for n in os.listdir(built) if n.startswith('.')]
  # The hash split holds out about the requested share.
  share = np.mean([records.held_out_at(7, k % 3, 101 * k, 0.1) for k in range(20_000)])
  assert abs(share - 0.1) < 0.007


@pytest.mark.parametrize('files', [1, 3])
def test_each_worker_reads_only_its_parts_and_any_split_of_the_work_writes_the_same_bytes(
    tmp_path, files):
  """A corpus of one file or of several: the train shards split between 2 or 3 workers (each run
  here in turn), each reads its shards' parts alone (their bytes, and at most a quarter more for
  a file's first 8 KB, looked at once, the look-backs and the documents crossing a part's end,
  with parts of 11 KB here), and the folder they make is the one worker's, byte for byte."""
  corpus = tmp_path / 'corpus'
  corpus.mkdir()
  for i in range(files):
    write_corpus(str(corpus / f'{i}.txt'), num_docs=1200 // files, seed=i)
  total = sum(os.path.getsize(corpus / n) for n in os.listdir(corpus))
  settings = records.Settings(source=str(corpus), max_seq_length=32, eval_fraction=0.1,
                              num_shards=6, num_eval_shards=2, vocab_size=96)
  one = str(tmp_path / 'one')
  prepare_lib.records_folder(settings, one, log=_quiet)
  parts = corpus_lib.Source(settings.source).parts(settings.num_shards)
  for workers in (2, 3):
    out = str(tmp_path / f'by_{workers}')
    os.makedirs(out)
    for name in (records.PLAN, records.SOURCE, 'vocab.model'):
      shutil.copy(os.path.join(one, name), out)
    for w in range(workers):
      shards = list(range(6))[w::workers]
      own = sum(p.end - p.start for p in parts if p.index % 6 in shards)
      told = []  # (what the worker tells the command of its progress: its parts' bytes)
      done = prepare_lib.write_parts(out, settings, shards, log=_quiet, done=told.append)
      assert told and told[-1] == own and told == sorted(told)
      assert own < done["bytes_read"] <= 1.25 * own and own < 0.55 * total * 2 / workers, (
          workers, w, own, total, done['bytes_read'])
    prepare_lib.records_folder(settings, out, log=_quiet)  # (joins the eval shards)
    _same_folders(one, out)


@pytest.mark.fast
def test_the_builtin_corpus_keeps_the_rule_of_one_read_in_order(tmp_path):
  """A source that is no files (the built-in corpus, a TFDS dataset) is read whole by every worker,
  the k-th document held out by a hash of (seed, k) and the j-th of a split in shard j mod shards
  (the rule every folder had before the parts rule)."""
  settings = records.Settings(source='builtin', max_seq_length=32, eval_fraction=0.2,
                              num_shards=3, num_eval_shards=2, vocab_size=300)
  out = str(tmp_path / 'records')
  meta = prepare_lib.records_folder(settings, out, log=_quiet)
  docs = len(corpus_lib.builtin_documents())
  held = sum(records.held_out(settings.seed, k, 0.2) for k in range(docs))
  assert meta['rule'] == 'documents' and 'parts' not in meta
  assert (meta['splits']['eval']['documents'], meta['splits']['train']['documents']) == (
      held, docs - held)
  per_shard = [records.read_json(os.path.join(out, f[:-9] + '.json'))['documents']
               for f in meta['splits']['train']['files']]
  assert max(per_shard) - min(per_shard) <= 1  # round robin


@pytest.mark.fast
def test_a_corpus_changed_since_its_records_were_built_is_said(tmp_path):
  """A complete folder is reused with a warning that it holds the corpus as it was; an unfinished
  one is not finished from another version of the corpus (its shards would not fit together)."""
  corpus = write_corpus(str(tmp_path / 'corpus.txt'))
  settings = records.Settings(source=corpus, max_seq_length=32, eval_fraction=0.2, vocab_size=96)
  out = str(tmp_path / 'records')
  prepare_lib.records_folder(settings, out, log=_quiet)
  logged = []
  prepare_lib.records_folder(settings, out, log=logged.append)
  assert logged == [f'records {out}: complete already']
  with open(corpus, 'a') as f:
    f.write('A sentence added later.\n')
  logged = []
  prepare_lib.records_folder(settings, out, log=logged.append)
  assert logged[1].startswith(f"warning: the corpus '{corpus}' changed since the records in {out} "
                              'were begun from it (1 file(s) of ') and logged[1].endswith(
      f'they hold the corpus as it was then: delete {out} and run the same command again to '
      'build them from the corpus as it is now')
  complete = str(tmp_path / 'complete')
  shutil.copytree(out, complete)
  os.remove(os.path.join(out, records.METADATA))  # unfinished
  with pytest.raises(ValueError, match=r'changed since the records .* and the build is '
                     'unfinished; delete .* and run the same command again, or restore the corpus'):
    prepare_lib.records_folder(settings, out, log=_quiet)
  os.remove(corpus)  # a complete folder outlives its corpus
  logged = []
  prepare_lib.records_folder(settings, complete, log=logged.append)
  assert logged == [f'records {complete}: complete already']


@pytest.mark.fast
def test_an_interrupted_build_is_finished_with_the_same_bytes(tmp_path, built):
  partial = str(tmp_path / 'partial')
  shutil.copytree(built, partial)
  os.remove(os.path.join(partial, records.METADATA))
  os.remove(os.path.join(partial, 'train-00001-of-00005.json'))  # written, never marked done
  with open(os.path.join(partial, 'eval-00000-of-00002.tfrecord'), 'r+b') as f:
    f.truncate(100)  # cut short under its final name
  with open(os.path.join(partial, '.train-00003-of-00005.tfrecord.tmp-123'), 'wb') as f:
    f.write(b'half')  # the temporary file of a killed worker
  with pytest.raises(FileNotFoundError, match=r'unfinished records folder \(5 of 7 shards '
                     r'written\); run the same prepare command again'):
    records.read_metadata(partial)
  settings, _ = records.read_plan(os.path.join(partial, records.PLAN))
  logged = []
  prepare_lib.records_folder(settings, partial, log=logged.append)
  # (the held-out spools went with the complete folder: eval shard 0's parts are read again)
  assert 'writing 5 of 7 shards' in logged[0]
  _same_folders(built, partial)


@pytest.mark.fast
def test_a_build_stopped_before_its_eval_shards_joins_them_from_the_spools(tmp_path, built,
                                                                           settings,
                                                                           monkeypatch):
  """Killed after its train shards (each part's held-out examples spooled beside them), a build
  run again writes only the eval shards, from the spools, to the same bytes."""
  out = str(tmp_path / 'stopped')

  def killed(*_):
    raise RuntimeError('killed')

  with monkeypatch.context() as m:
    m.setattr(prepare_lib, 'join_eval_shards', killed)
    with pytest.raises(RuntimeError, match='killed'):
      prepare_lib.records_folder(settings, out, log=_quiet)
  spools = [n for n in os.listdir(out) if n.startswith('.part-') and n.endswith('.tfrecord')]
  assert len(spools) == len(corpus_lib.Source(settings.source).parts(settings.num_shards))
  logged = []
  prepare_lib.records_folder(settings, out, log=logged.append)
  assert logged[0] == 'joining 2 eval shard(s) from the held-out examples of their parts', logged
  _same_folders(built, out)


@pytest.mark.fast
def test_a_damaged_shard_or_vocabulary_is_found_before_training(tmp_path, built):
  broken = str(tmp_path / 'broken')
  shutil.copytree(built, broken)
  meta = records.read_metadata(broken)
  path = os.path.join(broken, 'train-00002-of-00005.tfrecord')
  size = os.path.getsize(path)
  with open(path, 'r+b') as f:
    f.truncate(size // 2)
  with pytest.raises(ValueError, match=f'is {size // 2:,} bytes instead of {size:,}: the records '
                     'folder is damaged'):
    input_pipeline.make_dataset(broken, 'train', 8)
  shutil.copyfile(os.path.join(built, 'train-00002-of-00005.tfrecord'), path)
  records.verify(broken, meta)
  with open(os.path.join(broken, records.VOCAB), 'ab') as f:
    f.write(b'\0')
  with pytest.raises(ValueError, match='differs from the one the records were tokenized with'):
    records.verify(broken, meta)
  shutil.copyfile(os.path.join(built, records.VOCAB), os.path.join(broken, records.VOCAB))
  # metadata.json edited (or copied from a folder of a larger vocabulary), the vocabulary intact
  claimed = {**meta, 'vocab_size': 2 * meta['vocab_size']}
  with pytest.raises(ValueError, match=re.escape(
      f"{broken}/metadata.json says vocab_size is {2 * meta['vocab_size']}, and the vocabulary "
      f"the records were tokenized with ({broken}/{records.VOCAB}) gives {meta['vocab_size']}: "
      'the metadata was changed')):
    records.verify(broken, claimed)
  with pytest.raises(ValueError, match='says special_ids is'):
    records.verify(broken, {**meta, 'special_ids': {**meta['special_ids'], 'mask': 7}})


def _examples(dataset, n):
  """The first n local examples of a dataset of batches, as tuples of ids."""
  out = []
  for batch in dataset.as_numpy_iterator():
    out.extend(tuple(row) for row in batch['input_ids'])
    if len(out) >= n:
      return out[:n]


@pytest.mark.fast
def test_readers_read_disjoint_files_that_together_cover_every_example(built):
  meta = records.read_metadata(built)
  everything = collections.Counter()
  tf = tf_import.tensorflow()
  spec = {'input_ids': tf.io.FixedLenFeature([32], tf.int64)}
  for f in meta['splits']['train']['files']:
    for raw in tf.data.TFRecordDataset(os.path.join(built, f)).as_numpy_iterator():
      everything[tuple(tf.io.parse_single_example(raw, spec)['input_ids'].numpy())] += 1
  seen, files = collections.Counter(), []
  for r in range(2):  # 2 readers, each run by its own process: one row of each batch of 2
    mine, counts = input_pipeline.reader_files(meta, 'train', r, 2)
    files.append(set(mine))
    ds = input_pipeline.make_dataset(built, 'train', 2, seed=5, shuffle_buffer=64, readers=2,
                                     process_index=r, process_count=2, cycle=2)
    seen.update(_examples(ds, sum(counts)))  # one epoch of this reader
  assert not files[0] & files[1] and len(files[0] | files[1]) == 5
  assert seen == everything


@pytest.mark.fast
def test_the_global_batch_is_the_same_for_any_number_of_processes(built):
  meta = records.read_metadata(built)
  assert input_pipeline.num_readers(meta, 8) == 4  # 5 train files: the most dividing 8
  assert input_pipeline.num_readers(meta, 10) == 5 and input_pipeline.num_readers(meta, 7) == 1
  assert input_pipeline.num_readers(meta, 8, requested=2) == 2
  with pytest.raises(ValueError, match='data.readers=3 does not divide the batch of 8'):
    input_pipeline.num_readers(meta, 8, requested=3)
  with pytest.raises(ValueError, match='rebuild the records with data.num_shards=8'):
    input_pipeline.num_readers(meta, 8, requested=8)
  with pytest.raises(ValueError, match='4 input reader.s. do not divide among 3 processes'):
    input_pipeline.process_readers(4, 0, 3)

  def global_batches(processes, split='train', position=0):
    shuffle = split == 'train'
    per_process = [list(input_pipeline.make_dataset(
        built, split, 8, seed=2, shuffle_buffer=40, readers=4, position=position, cycle=2,
        shuffle=shuffle, process_index=p, process_count=processes).take(6).as_numpy_iterator())
                   for p in range(processes)]
    return [np.concatenate([batches[i]['input_ids'] for batches in per_process])
            for i in range(len(per_process[0]))]

  one = global_batches(1)
  for processes in (2, 4):
    for a, b in zip(global_batches(processes), one, strict=True):
      np.testing.assert_array_equal(a, b)
  # resuming each reader at step 2's position continues the same global batches
  for a, b in zip(global_batches(2, position=2 * 8 // 4)[:4], one[2:], strict=True):
    np.testing.assert_array_equal(a, b)
  held_out = global_batches(1, 'eval')
  assert held_out and len(global_batches(2, 'eval')) == len(held_out)
  for a, b in zip(global_batches(2, 'eval'), held_out, strict=True):
    np.testing.assert_array_equal(a, b)


@pytest.mark.fast
@pytest.mark.parametrize('where', [(0, 1), (0, 37), (0.5, 8), (2, 16)])
def test_resuming_at_a_position_equals_continuing(built, where):
  make = lambda pos, batch: input_pipeline.make_dataset(
      built, 'train', batch, seed=3, shuffle_buffer=100, position=pos, cycle=2)
  epoch = records.read_metadata(built)['splits']['train']['examples']
  position = int(where[0] * epoch) + where[1]  # in the first group, mid-epoch, in the third epoch
  whole = _examples(make(0, 1), position + 64)
  assert _examples(make(position, 1), 64) == whole[position:]
  if position % 8 == 0:  # batches of 8 after a resume at a step
    assert _examples(make(position, 8), 64) == whole[position:]
  other_seed = _examples(input_pipeline.make_dataset(built, 'train', 1, seed=4, shuffle_buffer=100,
                                                     cycle=2), 64)
  assert other_seed != whole[:64] and sorted(other_seed) != sorted(whole[:64])


@pytest.mark.fast
def test_each_epoch_is_a_new_order_of_every_example(built):
  meta = records.read_metadata(built)
  files, counts = input_pipeline.reader_files(meta, 'train', 0, 1)
  stream = input_pipeline.Stream(files, counts, seed=0, reader=0, cycle=2)
  assert stream.locate(stream.epoch_size * 2 + 3) == (2, 0, 3)
  n = stream.epoch_size
  two = _examples(input_pipeline.make_dataset(built, 'train', 1, seed=0, shuffle_buffer=100,
                                              cycle=2), 2 * n)
  assert collections.Counter(two[:n]) == collections.Counter(two[n:])
  assert two[:n] != two[n:]
  # Shuffled: neighbours in the stream are rarely neighbours in the files.
  order = _examples(input_pipeline.make_dataset(built, 'train', 1, shuffle=False), n)
  index = {ex: i for i, ex in enumerate(order)}
  adjacent = np.mean([abs(index[a] - index[b]) == 1 for a, b in zip(two, two[1:n])])
  assert adjacent < 0.1


@pytest.mark.fast
def test_a_tfds_dataset_is_one_more_source(tmp_path):
  tfds = pytest.importorskip('tensorflow_datasets')
  settings = records.Settings(source='tfds:wikipedia/20230601.en:train', max_seq_length=32,
                              eval_fraction=0.2, num_shards=2, vocab_size=16)
  with tfds.testing.mock_data(num_examples=40):
    meta = prepare_lib.records_folder(settings, str(tmp_path / 'wiki'), log=_quiet)
    s = meta['splits']
    assert s['train']['documents'] + s['eval']['documents'] == 40
    for split in ('train', 'eval'):  # every document gives an example of its own
      assert s[split]['examples'] >= s[split]['documents'] > 0
      assert s[split]['tokens'] > 3 * s[split]['examples']
    assert meta['vocab_size'] == 16 and meta['source'] == settings.source
    bad = dataclasses.replace(settings, text_field='body')
    with pytest.raises(ValueError, match=r"has no field 'body' \(it has \['text', 'title'\]\)"):
      prepare_lib.records_folder(bad, str(tmp_path / 'bad'), log=_quiet)
    assert not os.path.exists(tmp_path / 'bad')


@pytest.mark.fast
def test_the_input_benchmark_reads_real_batches(built):
  from benchmarks import io_benchmark
  r = io_benchmark.benchmark_input(built, 8, batches=4, repeats=2)
  assert r['seq_len'] == 32 and len(r['ms_per_batch_runs']) == 2
  assert r['tokens_per_s'] == pytest.approx(r['examples_per_s'] * 32) and r['examples_per_s'] > 0


@pytest.mark.fast
def test_held_out_evaluation_reads_each_example_once_in_every_process_alike(built):
  meta = records.read_metadata(built)
  per_file = meta['splits']['eval']['examples_per_file']
  assert input_pipeline.held_out_batches(meta, 8, 1000) == sum(per_file) // 8
  assert input_pipeline.held_out_batches(meta, 8, 2) == 2
  with pytest.raises(ValueError, match='fewer than one batch of'):
    input_pipeline.held_out_batches(meta, 2 * sum(per_file) + 1, 1)
  batches = list(input_pipeline.make_dataset(built, 'eval', 8, shuffle=False).as_numpy_iterator())
  assert len(batches) == sum(per_file) // 8
  rows = [tuple(r) for b in batches for r in b['input_ids']]
  assert len(set(rows)) == len(rows)


@pytest.mark.fast
def test_the_commands_flags_for_the_records_settings_are_their_declarations():
  """prepare_data.py's flags for the records' settings carry each declaration's meaning and
  default, but for the shard counts it states as its own; build_vocab.py's the same."""
  declared = records.declarations()
  for script, own in (('prepare_data.py', {'num_shards': 64, 'num_eval_shards': 4}),
                      ('build_vocab.py', {})):
    done = subprocess.run([sys.executable, os.path.join(ROOT, 'launch', script), '--helpshort'],
                          capture_output=True, text=True, timeout=300, check=False)
    text = ' '.join(done.stdout.split())
    shown = [name for name in declared if f'--{name}: ' in text or f'--[no]{name}: ' in text]
    assert len(shown) >= 6, (script, text[-2000:])
    for name in shown:
      default = own.get(name, declared[name].default)
      default = str(default).lower() if isinstance(default, bool) else default
      assert f"{' '.join(declared[name].doc.split())} (default: '{default}')" in text, (
          script, name, text[-3000:])


needs_beam = pytest.mark.skipif(importlib.util.find_spec('apache_beam') is None,
                                reason='needs the beam extra: pip install -e ".[beam]"')


@needs_beam
def test_beams_direct_runner_writes_the_local_build_byte_for_byte(tmp_path, built, settings):
  """launch/prepare_data.py --runner=DirectRunner, two worker processes: the local build's folder
  (shards, counts, metadata) byte for byte; a runner Beam lacks, a flag neither knows, a value
  of the wrong type, options a runner needs and lacks, a job service that refuses connections and
  a corpus read whole are one sentence each, before anything is written."""
  out = str(tmp_path / 'beam')
  same = [f'--corpus={settings.source}', '--eval_fraction=0.1', '--num_shards=5',
          '--num_eval_shards=2', '--vocab_size=96', '--max_seq_length=32']
  run = _cli(*same, f'--output={out}', '--runner=DirectRunner', '--direct_num_workers=2',
             '--direct_running_mode=multi_processing')
  assert run.returncode == 0, run.stderr[-3000:]
  assert 'writing 5 train and 2 eval shard(s)' in run.stdout and 'on Apache Beam' in run.stdout
  _same_folders(built, out)
  for flags, message in [
      (['--runner=NoSuchRunner'], '--runner=NoSuchRunner is not a runner of Apache Beam'),
      (['--runner=DirectRunner', '--direct_num_workrs=2'], '--direct_num_workrs is neither a flag '
       'of this command nor a pipeline option of Apache Beam'),
      (['--direct_num_workers=2'], '--direct_num_workers is not a flag of this command (Apache '
       "Beam's pipeline options go with --runner)"),
      (['--runner=PortableRunner', '--job_endpoint=localhost:1'], '--job_endpoint=localhost:1 '
       'cannot be reached (Connection refused); start the job service there'),
      (['--runner=DirectRunner', '--direct_num_workers=two'], "Apache Beam refuses its options: "
       "argument --direct_num_workers: invalid int value: 'two'; give the option a value of its "
       'type'),
      (['--runner=DirectRunner', '--direct_num_workers', 'two'], "argument --direct_num_workers: "
       "invalid int value: 'two'"),  # (Beam's options also as --name value)
      (['--runner=DataflowRunner'], '--runner=DataflowRunner: Apache Beam finds its options '
       'incomplete or wrong (Missing GCS path option: temp_location.')]:
    run = _cli(*same, f'--output={tmp_path}/x', *flags)
    error = [l for l in run.stderr.splitlines() if l.startswith('error:')]
    assert run.returncode == 2 and len(error) == 1 and message in error[0], run.stderr[-2000:]
    assert 'usage:' not in run.stderr, run.stderr[-2000:]  # (Beam's usage of every option)
  with pytest.raises(ValueError, match="--runner builds the records of a corpus of files, and "
                     "'builtin' is read whole"):
    prepare_lib.records_folder(dataclasses.replace(settings, source='builtin'),
                               f'{tmp_path}/x', writer=lambda *_: None)
  assert not os.path.exists(tmp_path / 'x')


@pytest.mark.fast
def test_a_runner_without_beam_installed_is_one_sentence(monkeypatch):
  monkeypatch.setitem(sys.modules, 'apache_beam', None)  # (as if not installed)
  with pytest.raises(ValueError, match=r'--runner builds the records on Apache Beam, which is not '
                     r'installed; pip install -e "\.\[beam\]"'):
    on_beam.writer('DirectRunner', [])


@pytest.mark.fast
def test_records_built_before_the_parts_rule_are_reused_and_an_unfinished_build_of_them_refused(
    tmp_path, built):
  """A folder built by the earlier rule (no `rule` in its plan and metadata): complete, it is
  reused as it is and read; unfinished, finishing it by another rule is refused in one sentence."""
  old = str(tmp_path / 'old')
  shutil.copytree(built, old)
  for name in (records.PLAN, records.METADATA):
    data = records.read_json(os.path.join(old, name))
    del data['rule']
    records.write_json(os.path.join(old, name), data)
  settings, rule = records.read_plan(os.path.join(old, records.PLAN))
  assert rule == 'documents'
  logged = []
  meta = prepare_lib.records_folder(settings, old, log=logged.append)
  assert logged == [f'records {old}: complete already'] and 'rule' not in meta
  records.verify(old, records.read_metadata(old))
  batch = next(iter(input_pipeline.make_dataset(old, 'train', 4, seed=0, shuffle_buffer=8,
                                                readers=1)))
  assert batch['input_ids'].shape == (4, 32)
  os.remove(os.path.join(old, records.METADATA))
  with pytest.raises(ValueError, match=rf'{old} is an unfinished records folder begun by an '
                     r"earlier version, which gave the documents to shards by another rule "
                     r"\('documents'\); delete it and run the same command again"):
    prepare_lib.records_folder(settings, old, log=_quiet)


def test_a_dead_worker_ends_the_build_in_one_sentence_and_the_rerun_finishes_it(tmp_path, built,
                                                                                settings):
  """A worker killed as the out-of-memory killer kills (SIGKILL) ends the build naming it, instead
  of a pool waiting for it forever; the same build again writes the same bytes."""
  out = str(tmp_path / 'records')
  killed = []

  def kill_the_second_worker():
    deadline = time.time() + 120
    while time.time() < deadline and not killed:
      for child in multiprocessing.active_children():
        if child.name == 'worker 2/2':
          os.kill(child.pid, signal.SIGKILL)
          killed.append(child.pid)
      time.sleep(0.01)

  killer = threading.Thread(target=kill_the_second_worker)
  killer.start()
  with pytest.raises(UserError) as ended:
    prepare_lib.records_folder(settings, out, num_workers=2, log=_quiet)
  killer.join()
  assert killed and str(ended.value).startswith(
      f'worker 2/2 (pid {killed[0]}) was killed by SIGKILL before it finished its shards (the '
      'out-of-memory killer sends SIGKILL: lower --num_workers'), str(ended.value)
  assert 'run the same command again to build the rest' in str(ended.value)
  assert not [c for c in multiprocessing.active_children() if c.name.startswith('worker')]
  prepare_lib.records_folder(settings, out, num_workers=2, log=_quiet)
  _same_folders(built, out)


@pytest.mark.fast
def test_a_corpus_file_that_grows_while_its_records_are_built_is_refused(tmp_path):
  """A file appended to during the build: the records held both versions, and a re-run said they
  held "the corpus as it was then". Now the build ends in one sentence and keeps nothing."""
  corpus = tmp_path / 'corpus.txt'
  write_corpus(str(corpus), num_docs=40, seed=3)
  settings = records.Settings(source=str(corpus), max_seq_length=32, eval_fraction=0.1,
                              num_shards=2, num_eval_shards=1, vocab_size=96)

  def appended_once_writing_begins(line):
    if line.startswith('writing '):
      with open(corpus, 'a') as f:
        f.write('\nA document written while the records were built. It goes on.\n')

  out = str(tmp_path / 'records')
  with pytest.raises(ValueError, match=r'changed since the records in .* were begun from it \(1 '
                     r'file\(s\) of [\d,]+ bytes then, 1 of [\d,]+ now.*\), while the records were '
                     r'being built: they would hold parts of two versions of it, and are not kept'):
    prepare_lib.records_folder(settings, out, log=appended_once_writing_begins)
  assert not os.path.exists(out)
  assert prepare_lib.records_folder(settings, out, log=_quiet)['splits']['train']['examples'] > 0


@pytest.mark.fast
def test_records_built_inside_their_corpus_folder_are_never_read_as_its_text(tmp_path):
  """--output inside the --corpus folder: the next build read the records as text (+558 examples)
  and every run warned that the corpus had changed."""
  folder = tmp_path / 'corpus'
  folder.mkdir()
  write_corpus(str(folder / 'a.txt'), num_docs=40, seed=4)
  settings = records.Settings(source=str(folder), max_seq_length=32, eval_fraction=0.1,
                              num_shards=2, num_eval_shards=1, vocab_size=96)
  first = prepare_lib.records_folder(settings, str(folder / 'records'), log=_quiet)
  logged = []
  again = prepare_lib.records_folder(settings, str(folder / 'records'), log=logged.append)
  assert logged == [f'records {folder / "records"}: complete already'] and again == first
  second = prepare_lib.records_folder(settings, str(folder / 'records_2'), log=_quiet)
  assert second['splits'] == first['splits']  # (the first folder's files left out of the corpus)


def _descendants(pid: int) -> list[int]:
  """The processes below `pid` (from /proc: each one's parent)."""
  parents = {}
  for entry in os.listdir('/proc'):
    if entry.isdigit():
      try:
        with open(f'/proc/{entry}/stat') as f:
          parents[int(entry)] = int(f.read().rsplit(')', 1)[1].split()[1])
      except (OSError, IndexError, ValueError):
        pass
  found, frontier = [], [pid]
  while frontier:
    children = [p for p, parent in parents.items() if parent in frontier]
    found += children
    frontier = children
  return found


@needs_beam
def test_a_beam_worker_killed_ends_the_build_in_one_sentence_and_the_rerun_finishes_it(
    tmp_path, built, settings):
  """A DirectRunner worker process killed as the out-of-memory killer kills: Beam's tracebacks
  ended the command; now its last line says what happened and what to do, and doing it works."""
  out = str(tmp_path / 'beam')
  command = [sys.executable, os.path.join(ROOT, 'launch', 'prepare_data.py'),
             f'--corpus={settings.source}', '--eval_fraction=0.1', '--num_shards=5',
             '--num_eval_shards=2', '--vocab_size=96', '--max_seq_length=32', f'--output={out}',
             '--runner=DirectRunner', '--direct_num_workers=2',
             '--direct_running_mode=multi_processing']
  errors = open(tmp_path / 'stderr.txt', 'w+')  # (Beam's tracebacks would fill a pipe)
  child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True, cwd=ROOT)
  killed = None
  for line in child.stdout:
    if 'on Apache Beam' in line:
      deadline = time.time() + 120
      while killed is None and time.time() < deadline:  # (one at work: its data channel up)
        if 'Data channel established' not in (tmp_path / 'stderr.txt').read_text():
          time.sleep(0.05)
          continue
        workers = [p for p in _descendants(child.pid)
                   if 'sdk_worker_main' in open(f'/proc/{p}/cmdline').read()
                   and open(f'/proc/{p}/comm').read().startswith('python')]
        if workers:
          killed = workers[0]
          os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)
      break
  child.communicate(timeout=300)
  err = (tmp_path / 'stderr.txt').read_text()
  assert killed and child.returncode == 2, err[-3000:]
  assert err.strip().splitlines()[-1].startswith(
      'error: --runner=DirectRunner: the pipeline failed (') and err.strip().endswith(
      'the shards it finished are kept: run the same command again to build the rest (a worker '
      'killed for memory: fewer workers per machine)'), err[-3000:]
  again = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
  assert again.returncode == 0, again.stderr[-3000:]
  _same_folders(built, out)


@pytest.mark.fast
@pytest.mark.parametrize('ending', ['killed', 'exits'])
def test_the_beam_worker_watch_interrupts_for_a_killed_worker_alone(ending):
  """A worker started as Beam's DirectRunner starts one (a shell's child, waited for in a thread
  that raises where it ended with an error: local_job_service.SubprocessSdkWorker.run) and killed
  by a signal interrupts the command's main thread (Beam itself may wait forever for its bundle);
  a worker that exits does not."""
  from electra_jax.data import on_beam
  pause = 60 if ending == 'killed' else 0.3
  started = []

  def worker():  # Beam's code path
    p = subprocess.Popen(f'{sys.executable} -c "import time; time.sleep({pause})"', shell=True)
    started.append(p)
    p.wait()
    if p.returncode:
      raise RuntimeError('Worker subprocess exited with return code %s' % p.returncode)

  interrupted = False
  # Python's own handler, as a command has it (an earlier test of this worker process may have
  # left another: interrupt_main then does nothing)
  handler = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    with on_beam._WorkerWatch(lambda said: said) as watch:
      thread = threading.Thread(target=worker)
      thread.start()
      time.sleep(0.5)
      if ending == 'killed':
        started[0].kill()
      thread.join()
      time.sleep(1.0)  # (the interrupt lands here)
  except KeyboardInterrupt:
    interrupted = True
  finally:
    signal.signal(signal.SIGINT, handler)
  assert interrupted == (ending == 'killed')
  assert watch.lost == ('Worker subprocess exited with return code -9' if ending == 'killed'
                        else '')


@pytest.mark.fast
def test_a_command_stuck_after_its_beam_worker_died_ends_in_one_sentence():
  """Where the main thread does not leave the pipeline after the interrupt, the process ends
  within the watch's grace, with the sentence and exit status 2."""
  script = ('import threading, time\n'
            'from electra_jax.data import on_beam\n'
            'def die():\n'
            '  raise RuntimeError("Worker subprocess exited with return code 137")\n'
            'with on_beam._WorkerWatch(lambda said: f"stuck ({said})", grace_s=1.0):\n'
            '  dying = threading.Thread(target=die)\n'
            '  for i in range(300):\n'
            '    try:\n'
            '      if i == 0:\n'
            '        dying.start()  # (the interrupt may land while start() waits)\n'
            '      time.sleep(0.1)\n'
            '    except KeyboardInterrupt:\n'
            '      pass  # (a pipeline that does not leave)\n'
            'print("left")\n')
  done = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                        cwd=ROOT, timeout=20)
  assert done.returncode == 2 and 'left' not in done.stdout, done
  assert done.stderr.strip().splitlines()[-1] == (
      'error: stuck (Worker subprocess exited with return code 137)'), done.stderr
