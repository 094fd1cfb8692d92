"""Nothing lost, nothing silently wrong, every mistake one line: the cases a skeptical user tried.

Each test is one entry of the README's "Bad input" catalogue: a damaged final checkpoint, a
non-finite update, text in long lines, bad config values and a workdir they must not lock, a
corrupted shard, a full disk, and the smaller one-line errors of the launch scripts.
"""

import csv
import json
import glob
import os
import re
import shutil
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from conftest import CHILD_ENV, ROOT, WORDS, launch_command, poisoned_setup, run_config_file
from conftest import script, test_config, write_corpus
from electra_jax.config.pretraining import parse
from electra_jax import UserError
from electra_jax import fields as fields_lib
from electra_jax.data import corpus as corpus_lib
from electra_jax.data import input_pipeline
from electra_jax.data import prepare as prepare_lib
from electra_jax.data import records as records_lib
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.hardware import compile_cache
from electra_jax.data.synthetic import synthetic_batch
from electra_jax.data.tokenizer import SPECIAL
from electra_jax.train import partitioning
from electra_jax.pretraining import preflight
from electra_jax.pretraining import run as pretrain
from electra_jax.pretraining import setup as pretrain_setup
from electra_jax.train import step as step_lib
from electra_jax.train.config import OptimizerConfig


def _quiet(*_):
  pass


def _launch(name, *args, env=None, timeout=300):
  return subprocess.run([*script(name), *args], capture_output=True, text=True, cwd=ROOT,
                        env=env or CHILD_ENV, timeout=timeout, check=False)


def _last(done) -> str:
  lines = [l for l in done.stderr.splitlines() if l.strip()]
  return lines[-1] if lines else ''


def _truncate(folder):
  """Cuts every larger file of a checkpoint in half, as a full disk or a killed copy leaves it."""
  for root, _, files in os.walk(folder):
    for name in files:
      path = os.path.join(root, name)
      if os.path.getsize(path) > 1024:
        with open(path, 'r+b') as f:
          f.truncate(os.path.getsize(path) // 2)


def test_a_damaged_final_checkpoint_is_trained_again_rewritten_and_exports(tmp_path, records_dir):
  """The same command after the final checkpoint was damaged: falls back to the one before,
  trains the lost steps again and saves the final step again (not skipped), which exports."""
  from electra_jax.apps import export
  workdir = str(tmp_path / 'w')
  config = test_config(**{'data.records': records_dir, 'save_every': 2})
  pretrain.train_and_evaluate(config, workdir, log=_quiet)  # saves 2 and 4 (the final step)
  copy = str(tmp_path / 'copy')  # its step 4's array data alone cut in half: reads fail midway
  shutil.copytree(workdir, copy)
  for folder in glob.glob(os.path.join(copy, 'checkpoints', '4', 'state', '**', 'd'),
                          recursive=True):
    _truncate(folder)
  _truncate(os.path.join(workdir, 'checkpoints', '4', 'state'))
  with pytest.raises(UserError, match=r'checkpoints/4 cannot be read .*run the pre-training '
                                      r'command again to rewrite it, or export another step'):
    export.export(workdir, str(tmp_path / 'hf_damaged'), log=_quiet)
  assert not os.path.exists(tmp_path / 'hf_damaged')
  # as a command: that one sentence alone, without a traceback per read that Orbax had started
  # (checkpoint._unraisable drops those a failed read allows; without it, about half the runs of
  # this export printed them)
  done = _launch('export.py', f'--workdir={copy}', f'--out={tmp_path / "hf_damaged"}')
  assert done.returncode == 2 and 'Traceback' not in done.stderr, done.stderr[-3000:]
  assert [l for l in done.stderr.splitlines() if l.strip()] == [_last(done)], done.stderr[-3000:]
  assert _last(done).startswith(f'error: the checkpoint {copy}/checkpoints/4 cannot be read')
  lines = []
  summary = pretrain.train_and_evaluate(config, workdir, log=lines.append)
  assert any(l.startswith('warning: checkpoint') and '/checkpoints/4 cannot be read' in l
             for l in lines), lines
  assert any('resumed from' in l and '/checkpoints/2 ' in l for l in lines), lines
  assert any(l.startswith('warning: moved the damaged checkpoint to') for l in lines), lines
  assert summary['step'] == 4
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['2', '4', '4.damaged']
  done = export.export(workdir, str(tmp_path / 'hf'), log=_quiet)  # the rewritten step reads
  assert done.folders and os.path.isfile(os.path.join(done.folders[0], 'model.safetensors'))


@pytest.mark.fast
def test_only_the_late_errors_of_a_failed_checkpoint_read_are_dropped(tmp_path):
  """A process that reads checkpoints still prints every other library's unraisable errors, also
  a 'RuntimeError: Event loop is closed' of its own, before and after a failed read; the late
  errors a failed read allows (asyncio's closed loop, two per array) are dropped, none after a
  read that succeeded."""
  script = ('import asyncio, sys\n'
            'from electra_jax.train import checkpoint\n'
            'checkpoint.Checkpointer(sys.argv[1]).close()\n'
            'class Closed:\n'
            '  def __del__(self): raise RuntimeError("Event loop is closed")\n'
            'class Other:\n'
            '  def __del__(self): raise ValueError("another library")\n'
            'def late():\n'  # what a read Orbax had started meets: a callback on a closed loop
            '  loop = asyncio.new_event_loop(); loop.close()\n'
            '  class Callback:\n'
            '    def __del__(self): loop.call_soon(print)\n'
            '  Callback()\n'
            'Closed(); Other(); late()\n'
            'print("read fails", file=sys.stderr, flush=True)\n'
            'try:\n'
            '  with checkpoint._reading(arrays=1):\n'
            '    raise ValueError("damaged")\n'
            'except ValueError:\n'
            '  Closed(); Other(); late(); late(); late()\n'
            'print("read whole", file=sys.stderr, flush=True)\n'
            'with checkpoint._reading(arrays=1):\n'
            '  pass\n'
            'late()\n')
  done = subprocess.run([sys.executable, '-c', script, str(tmp_path / 'c')], capture_output=True,
                        text=True, env=CHILD_ENV, timeout=120, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  before, after, whole = re.split('read fails|read whole', done.stderr)
  assert before.count('RuntimeError: Event loop is closed') == 2, before
  assert after.count('RuntimeError: Event loop is closed') == 2, after  # own, one late beyond 2
  assert before.count('ValueError: another library') == after.count('ValueError') == 1, after
  assert whole.count('RuntimeError: Event loop is closed') == 1, whole  # a whole read allows none


def test_a_nonfinite_update_is_never_applied_and_bad_optimizer_settings_are_refused():
  """Unclipped, finite loss and gradients can still give a non-finite update (a NaN learning
  rate): the step is not applied and is counted. Clipped, a huge but finite gradient gives a
  finite update, so the step does not compute the update's norm. The settings that produce
  non-finite updates are refused up front."""
  import dataclasses
  import optax
  mesh = partitioning.make_mesh(jax.devices()[:1])
  batch = synthetic_batch(16, 32, 96, seed=2)
  setup = pretrain_setup.build_setup(parse(test_config(**{'optimizer.grad_clip_norm': 0.0})),
                                     SPECIAL)
  assert setup.check_update
  poisoned = dataclasses.replace(setup, tx=optax.chain(setup.tx, optax.scale(float('nan'))))
  init_fn, train_fn, _ = step_lib.compile_steps(poisoned, mesh)
  state = init_fn()
  before = jax.device_get(state.params)
  state, _ = train_fn(state, batch)
  assert int(state.nonfinite_steps) == 1 and int(state.first_nonfinite) == 1
  for a, b in zip(jax.tree.leaves(jax.device_get(state.params)), jax.tree.leaves(before)):
    np.testing.assert_array_equal(a, b)

  clipped = pretrain_setup.build_setup(parse(test_config()), SPECIAL)  # grad_clip_norm 1.0
  assert not clipped.check_update
  tiny_eps = parse(test_config(**{'optimizer.eps': 1e-35}))
  assert pretrain_setup.build_setup(tiny_eps, SPECIAL).check_update
  huge = lambda *args, **kw: (lambda l, m: (l * 1e15, m))(*clipped.loss_fn(*args, **kw))
  init_fn, train_fn, _ = step_lib.compile_steps(dataclasses.replace(clipped, loss_fn=huge), mesh)
  state = init_fn()
  before = jax.device_get(state.params)
  for _ in range(2):
    state, metrics = train_fn(state, batch)
  assert int(state.nonfinite_steps) == 0
  norm = float(metrics['grad_norm'][0]) / float(metrics['grad_norm'][1])
  assert 1e10 < norm < float('inf'), norm  # clipped by a factor of 1e10 or more
  after = jax.tree.leaves(jax.device_get(state.params))
  assert all(np.isfinite(a).all() for a in after)
  assert any(not np.array_equal(a, b) for a, b in zip(after, jax.tree.leaves(before)))
  for field, value, want in [('learning_rate', float('nan'), 'a positive number'),
                             ('learning_rate', -1e-3, 'a positive number'),
                             ('b2', 1.0, 'in [0, 1)'), ('eps', 0.0, 'a positive number'),
                             ('weight_decay', -0.1, '0 or more')]:
    config = test_config(**{f'optimizer.{field}': value})
    with pytest.raises(ValueError, match=rf'optimizer\.{field} is .*; give {re.escape(want)}'):
      OptimizerConfig.from_config(config.optimizer)  # (checked once, when made)


@pytest.mark.fast
def test_text_in_long_lines_is_kept(tmp_path):
  """A corpus of one paragraph per line, and one without sentence ends, keep their text: lines
  are split at sentence ends, sentences longer than an example go in as pieces, and the
  vocabulary trainer gets lines longer than it takes as pieces (it would skip them)."""
  import random
  rng = random.Random(1)
  words = lambda: ' '.join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))
  sentence = lambda: words().capitalize() + '.'
  paragraphs = tmp_path / 'paragraphs.txt'
  paragraphs.write_text('\n\n'.join(' '.join(sentence() for _ in range(12)) for _ in range(60)))
  endless = tmp_path / 'endless.txt'  # no sentence end at all; every line over 4,192 bytes
  endless.write_text('\n\n'.join(' '.join(rng.choice(WORDS) for _ in range(1200))
                                 for _ in range(30)))
  for corpus, length in ((paragraphs, 64), (endless, 64)):
    lines = []
    out = str(tmp_path / f'records_{corpus.stem}')
    prepare_lib.records_folder(records_lib.Settings(source=str(corpus), max_seq_length=length,
                                             eval_fraction=0.2, num_shards=1, vocab_size=96),
                        out, log=lines.append)
    source = corpus_lib.Source(str(corpus))
    tokenizer = tokenizer_lib.load_tokenizer(os.path.join(out, 'vocab.model'))
    text_tokens = sum(len(ids) for doc in source.documents()
                      for ids in tokenizer.encode_batch(doc))
    kept_text = 0  # text tokens in the records: every real token but [CLS] and [SEP]
    for split in records_lib.SPLITS:
      for batch in input_pipeline.make_dataset(out, split, 1, shuffle=False).as_numpy_iterator():
        ids = batch['input_ids'][batch['input_mask'] > 0]
        kept_text += int(np.sum((ids != tokenizer.special.cls) & (ids != tokenizer.special.sep)))
    # (the example builder, as the original, drops what of the sentence that crosses an example's
    # length does not fit: with sentences of 10-20 tokens in 64-token examples, about a tenth)
    assert kept_text > 0.8 * text_tokens, (corpus.stem, kept_text, text_tokens, lines)
    if corpus == paragraphs:
      assert any('line(s) held several sentences and were split' in l for l in lines), lines
    else:
      assert any('longer than an example (64 tokens) went into examples as pieces' in l
                 for l in lines), lines
      assert any('were cut into pieces for the vocabulary trainer' in l for l in lines), lines


def test_bad_config_values_are_refused_before_anything_is_written(tmp_path, records_dir,
                                                                  monkeypatch):
  config = os.path.join(ROOT, 'configs', 'tiny.py')
  for args, last in [
      (('--config.data.batch_size=0',),
       'error: data.batch_size is 0; it must be a number of at least 1'),
      (('--config.data.batch_size=-4',),
       'error: data.batch_size is -4; it must be a number of at least 1'),
      (('--config.objective.mask_prob=1.5',),
       'error: objective.mask_prob is 1.5; it must lie in (0, 1]'),
      (('--config.optimizer.learning_rate=nan',),
       "error: optimizer.learning_rate is nan; give a positive number, e.g. 5e-4")]:
    done = _launch('train.py', f'--config={config}', f'--workdir={tmp_path / "w"}', *args)
    assert done.returncode == 2 and _last(done) == last, (args, done.stderr[-2000:])
    assert not os.path.exists(tmp_path / 'w')
  # a run that stopped before its first checkpoint does not lock its workdir: a changed command
  # starts it afresh
  workdir = str(tmp_path / 'locked')
  real = pretrain_setup.build_setup
  with monkeypatch.context() as m:  # a NaN loss at step 3, before the first checkpoint
    m.setattr(pretrain_setup, 'build_setup', lambda config, special, *rest, **named: poisoned_setup(
                          config, [3], lambda c, s: real(c, s, *rest, **named)))
    with pytest.raises(UserError, match='^step 3: the loss, gradient norm or update is not finite'):
      pretrain.train_and_evaluate(test_config(**{'data.records': records_dir,
                                                  'data.shuffle_buffer': 50}), workdir,
                                   log=_quiet)
  assert os.path.isfile(os.path.join(workdir, 'config.json'))
  assert not os.path.exists(os.path.join(workdir, 'checkpoints', '2'))
  lines = []
  pretrain.train_and_evaluate(test_config(**{'data.records': records_dir}), workdir,
                               log=lines.append)
  assert any(l.startswith(f'note: {workdir} holds no checkpoint of its earlier run') for l in lines)


@pytest.mark.fast
def test_a_corrupted_shard_is_named_with_its_record(tmp_path, records_dir):
  """Ten bytes overwritten, the size unchanged: TFRecord's checksums find it and the run stops
  with one sentence naming the shard and the record."""
  damaged = str(tmp_path / 'records')
  shutil.copytree(records_dir, damaged)
  meta = records_lib.read_metadata(damaged)
  shard = os.path.join(damaged, meta['splits']['train']['files'][1])
  size = os.path.getsize(shard)
  with open(shard, 'r+b') as f:
    f.seek(size // 2)
    f.write(b'\xff' * 10)
  with pytest.raises(UserError) as e:
    pretrain.train_and_evaluate(test_config(**{'data.records': damaged, 'train_steps': 40}),
                                 str(tmp_path / 'w'), log=_quiet)
  message = str(e.value)
  assert message.startswith(f'the shard {shard} is damaged: record ') and 'checksum' in message
  assert 'copy the records again, or rebuild them' in message


def _on_small_disk(disk, size: str, command: str, timeout: int = 300):
  """Runs shell `command` in a mount namespace of its own where `disk` is a tmpfs of `size` (no
  huge pages, so that small files take small space)."""
  return subprocess.run(['unshare', '-Urm', 'sh', '-c',
                         f'mount -t tmpfs -o size={size},huge=never tmpfs {disk} && {command}'],
                        capture_output=True, text=True, env=CHILD_ENV, timeout=timeout, check=False)


def _disk_folder(tmp_path):
  """tmp_path/disk, where _on_small_disk mounts its tmpfs (the test is skipped where it cannot)."""
  disk = tmp_path / 'disk'
  disk.mkdir()
  if shutil.which('unshare') is None:
    pytest.skip('unshare (util-linux) is not installed: it mounts the small disk')
  if _on_small_disk(disk, '1m', 'true').returncode != 0:
    pytest.skip('this machine cannot mount a tmpfs in a user namespace (unshare -Urm)')
  return disk


@pytest.mark.fault
def test_a_full_disk_is_one_line_and_keeps_what_is_complete(tmp_path, records_dir):
  """Records onto a full disk: one line naming the disk and the space, nothing left behind. A
  checkpoint that does not fit: one line, the checkpoint before it untouched. (In a mount namespace
  of the test's own, with a small tmpfs.)"""
  disk = _disk_folder(tmp_path)
  corpus = os.path.join(tmp_path, 'corpus.txt')
  with open(corpus, 'w') as f:
    f.write('\n\n'.join(' '.join(WORDS[i % len(WORDS)] for i in range(j, j + 40)) + '.'
                        for j in range(3000)))
  prepare = (f'{sys.executable} {os.path.join(ROOT, "launch", "prepare_data.py")} '
             f'--corpus={corpus} --output={disk}/records --vocab_size=96 --max_seq_length=32 '
             '--num_shards=2 --num_eval_shards=1 --num_workers=1')
  done = _on_small_disk(disk, '200k', f'{prepare}; echo "exit=$?"; ls -A {disk}')
  assert 'exit=2' in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
  assert _last(done).startswith(f'error: the disk holding {disk}/records is full ('), done.stderr
  assert 'records take about 1.3 times the text' in _last(done)
  assert done.stdout.strip().endswith('exit=2'), done.stdout  # nothing left on the disk

  # The test model (its compiled step shared with the other tests): its train state (parameters
  # and both Adam moments) is about 240 KB, a checkpoint about 520 KB on the tmpfs (4 KB pages).
  config_file = run_config_file(tmp_path, records_dir, train_steps=6, save_every=2)
  train = (f'{sys.executable} {os.path.join(ROOT, "launch", "train.py")} --config={config_file} '
           f'--workdir={disk}/w')
  # The checkpoint of step 2 fits beside the run's other files (curves.png among them, drawn
  # before it where the host is slow); the one of step 4 is refused by the free-space check (or,
  # failing that, fails while written).
  done = _on_small_disk(disk, '800k', f'{train}; echo "exit=$?"; ls -A {disk}/w/checkpoints; '
                        f'echo "--"; du -a {disk}', timeout=600)
  assert 'exit=2' in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
  # (a thread of the asyncio loop Orbax leaves behind may print around it: the error is looked for;
  # the free space left depends on the run's other files, down to none)
  assert re.search(f'error: the disk holding {re.escape(str(disk))}/w/checkpoints is full: a '
                   r'checkpoint of this run takes about 2\d\d KB and ([\d.]+ KB|\d+ bytes) are '
                   'free',
                   done.stderr), done.stderr[-3000:]
  saved, usage = done.stdout.split('exit=2')[1].split('--')
  assert saved.split() == ['2'], (saved, usage, done.stderr[-3000:])  # only complete checkpoints
  assert f'the last complete checkpoint {disk}/w/checkpoints/2 is untouched' in done.stderr


@pytest.mark.fast
@pytest.mark.fault
def test_a_save_that_fills_the_disk_while_written_leaves_no_unfinished_folder(tmp_path):
  """Where the free space is not known beforehand (a mounted bucket), a checkpoint can fail half
  written: one DiskFull, its unfinished folder deleted, the checkpoint before it intact."""
  disk = _disk_folder(tmp_path)
  script = tmp_path / 'save.py'
  script.write_text(f'''
import numpy as np
from electra_jax.storage import fs
from electra_jax.train import checkpoint
fs.free_bytes = lambda path: None  # unknown, as on a bucket: no check before writing
state = {{'w': np.random.default_rng(0).standard_normal((1024, 768)).astype(np.float32)}}  # 3 MB
ckpt = checkpoint.Checkpointer('{disk}/checkpoints')
ckpt.save(1, state, {{'step': 1}})
ckpt.wait()
try:
  ckpt.save(2, {{'w': state['w'] + 1}}, {{'step': 2}})
  ckpt.wait()
except checkpoint.DiskFull as e:
  print('DiskFull:', e)
restored, meta = ckpt.restore_arrays(1)
print('intact:', bool(np.array_equal(np.asarray(restored['w']), state['w'])), meta)
''')
  done = _on_small_disk(disk, '5m', f'{sys.executable} {script}; echo "exit=$?"; '
                        f'ls -A {disk}/checkpoints')
  assert 'exit=0' in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
  assert (f'DiskFull: the disk holding {disk}/checkpoints is full: a checkpoint of this run takes '
          f'about 3.1 MB; the last complete checkpoint {disk}/checkpoints/1 is untouched'
          in done.stdout), done.stdout[-2000:] + done.stderr[-3000:]
  assert "intact: True {'step': 1}" in done.stdout, done.stdout[-2000:]
  assert done.stdout.split('exit=0')[1].split() == ['1'], done.stdout  # no unfinished folder


@pytest.mark.fast
@pytest.mark.fault
def test_a_whole_file_that_does_not_fit_is_one_sentence_and_leaves_nothing(tmp_path):
  """fs.write_atomic (results, configs, curves, an export's files) onto a full disk: DiskFull
  naming the file, its size and the free space; the old contents intact, no temporary file."""
  disk = _disk_folder(tmp_path)
  script = tmp_path / 'write.py'
  script.write_text(f'''
from electra_jax.storage import fs
fs.write_atomic('{disk}/results.json', 'old contents')
try:
  fs.write_atomic('{disk}/results.json', b'x' * 3_000_000)
except fs.DiskFull as e:
  print('DiskFull:', e.strerror)
print('kept:', open('{disk}/results.json').read())
''')
  done = _on_small_disk(disk, '1m', f'{sys.executable} {script}; echo "exit=$?"; ls -A {disk}')
  assert 'exit=0' in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
  assert re.search(rf'DiskFull: the disk holding {disk} is full: results.json takes 3.0 MB and '
                   r'[\d.]+ [KM]B are free; nothing of it was written: free some space and run the '
                   'same command again', done.stdout), done.stdout
  assert 'kept: old contents' in done.stdout
  assert done.stdout.split('exit=0')[1].split() == ['results.json'], done.stdout  # no .tmp-<pid>


@pytest.mark.fault
def test_an_export_onto_a_full_disk_is_one_sentence_and_leaves_nothing(tmp_path, pretrained):
  disk = _disk_folder(tmp_path)
  done = _on_small_disk(disk, '8k', f'{sys.executable} {ROOT}/launch/export.py '
                        f'--workdir={pretrained} --out={disk}/hf; echo "exit=$?"; ls -A {disk}')
  assert re.fullmatch(rf'error: the disk holding {disk} is full: the export takes at least '
                      r'[\d.]+ KB and [\d.]+ KB are free; nothing was written: free some space '
                      'and run the same command again', _last(done)), done.stderr[-3000:]
  assert done.stdout.split() == ['exit=2'], done.stdout  # no hf/, no hf.partial/


@pytest.mark.fast
def test_a_command_whose_output_is_closed_still_runs_and_ends_well(tmp_path):
  """`command >&-`: Python has no sys.stdout then (print raised AttributeError); the lines go to
  /dev/null and no file the run opens takes the closed descriptor."""
  corpus = write_corpus(str(tmp_path / 'c.txt'))
  out = tmp_path / 'records'
  done = subprocess.run(['bash', '-c', f'{sys.executable} {ROOT}/launch/prepare_data.py '
                         f'--corpus={corpus} --output={out} --vocab_size=60 --eval_fraction=0.2 '
                         '>&-'],
                        capture_output=True, text=True, env=CHILD_ENV, timeout=300, check=False)
  assert done.returncode == 0 and 'Traceback' not in done.stderr, done.stderr[-2000:]
  records_lib.verify(str(out), records_lib.read_metadata(str(out)))


@pytest.mark.parametrize('part', [pytest.param('first', marks=pytest.mark.fast), 'rest'])
def test_small_mistakes_of_the_launch_scripts_are_one_line(tmp_path, part):
  """Each mistake is one sentence, exit 2, nothing written. The first mistake of each script is
  in the fast subset (`part='first'`), the others in the whole suite."""
  a_file = tmp_path / 'a_file'
  a_file.write_text('x')
  corpus = tmp_path / 'c.txt'
  corpus.write_text('The cat sat on the mat. A dog ran past the tree.\nBirds sang songs.\n')
  raises, returns = tmp_path / 'raises.py', tmp_path / 'returns.py'
  raises.write_text('def get_config():\n  raise RuntimeError("boom")\n')
  returns.write_text('def get_config():\n  return 42\n')
  cases = [
      (('prepare_data.py', '--corpus=builtin', f'--output={a_file}'),
       f'error: --output {a_file} is a file; give a folder (new or empty) for the records'),
      (('prepare_data.py', f'--corpus={corpus}', f'--output={tmp_path / "r1"}',
        '--vocab_size=3'), 'error: vocab_size=3 leaves no room beside the five special tokens; '
       "give a larger vocabulary (BERT's has 30522 entries)"),
      (('prepare_data.py', f'--corpus={corpus}', f'--output={tmp_path / "r2"}',
        '--character_coverage=2'), 'error: character_coverage=2.0 must lie in (0, 1], e.g. 0.9995'),
      (('prepare_data.py', f'--corpus={corpus}', f'--output={tmp_path / "r3"}',
        '--vocab_size=5000'), 'error: the corpus is too small for a vocabulary of 5000 entries; '
       'lower --vocab_size to at most'),
      (('build_vocab.py', f'--corpus={corpus}', f'--output={tmp_path / "v.model"}',
        '--vocab_size=5000'), 'error: the corpus is too small for a vocabulary of 5000 entries; '
       'lower --vocab_size to at most'),
      (('build_vocab.py', f'--corpus={corpus}', f'--output={tmp_path / "v.model"}',
        '--vocab_size=12'), 'error: a vocabulary of 12 entries cannot hold the'),
      (('benchmark.py', '--config=configs/tiny.py', '--steps=0'),
       'error: --steps=0: 0 is not a positive integer'),
      (('benchmark.py', '--config=configs/tiny.py', '--repeats=0'),
       'error: --repeats=0: 0 is not a positive integer'),
      (('benchmark.py', '--config=configs/tiny.py', '--steps=ten'),
       'error: --steps=ten: give an integer'),
      # compile_table.py checks every slice, preset and field before its first cell compiles
      (('compile_table.py', '--presets=small', '--slices=v5e-8,v9z-8', f'--out={tmp_path / "t"}'),
       "error: --slices='v9z-8' is not a Cloud TPU accelerator type; use one such as"),
      (('compile_table.py', '--presets=small,nope', '--slices=v5e-8', f'--out={tmp_path / "t"}'),
       'error: --presets: the config file '),
      (('compile_table.py', '--presets=small', '--slices=v5e-8', '--set=nofield=1',
        f'--out={tmp_path / "t"}'), 'error: --set nofield: no such config field'),
      # a field of a config flag that has no file (a fine-tuning's eval/predict read the workdir's)
      (('finetune.py', f'--workdir={tmp_path / "ft"}', '--mode=predict',
        f'--config.task.test={corpus}'), f'error: --config.task.test={corpus} sets a field of the '
       '--config file, and the command names none; give --config=<its file> too, or predict on a '
       'new file with launch/predict.py --workdir=<the fine-tuning> --input=<the file>'),
      (('predict.py', f'--workdir={tmp_path / "ft"}', f'--input={corpus}'),
       f'error: --workdir {tmp_path / "ft"} does not exist; give the --workdir of a fine-tuning'),
      # a seed is what every consumer of it takes (an int32 in the programs), checked for the last
      # seed a run uses before anything is written
      (('train.py', '--config=configs/tiny.py', f'--workdir={tmp_path / "w1"}',
        '--config.seed=2147483648'), 'error: seed is 2147483648; a seed is a whole number from 0 '
       'to 2147483647 (a 32-bit integer)'),
      (('finetune.py', '--config=configs/finetune/builtin.py:topic', f'--init={tmp_path / "w1"}',
        f'--workdir={tmp_path / "f1"}', '--config.seed=2147483647', '--num_seeds=2'),
       "error: seed=2147483647 with num_seeds=2 makes the last fine-tuning's seed 2147483648, and "
       'a seed is at most 2147483647 (a 32-bit integer); give a seed of at most 2147483646'),
      (('prepare_data.py', f'--corpus={corpus}', f'--output={tmp_path / "r4"}',
        '--seed=99999999999999999999'), 'error: flag --seed=99999999999999999999: a seed is a '
       'whole number from 0 to 2147483647'),
      (('prepare_data.py', '--corpus=builtin', '--output=/dev/null'),
       'error: --output /dev/null is a file; give a folder (new or empty) for the records'),
      (('prepare_data.py', '--tfds=', f'--output={tmp_path / "r5"}'),
       'error: --tfds is empty; give a dataset name such as wikipedia/20230601.en:train'),
      # a config file's own code that fails: its line and error, not a traceback
      (('train.py', f'--config={raises}', f'--workdir={tmp_path / "w2"}'),
       f'error: --config={raises}: line 2 of {raises} raised RuntimeError: boom; fix the config '
       'file'),
      (('train.py', f'--config={returns}', f'--workdir={tmp_path / "w2"}'),
       f'error: --config={returns}: get_config() of {returns} returned int, not an '
       'ml_collections.ConfigDict; return the config (see configs/tiny.py)'),
      (('zeroshot.py', f'--init={tmp_path / "w1"}', '--config=configs/finetune/builtin.py',
        '--template=It was.', '--label_words=next=yes,random=no'),
       "error: --template='It was.' must hold {label} exactly once, where each class's label word "
       "goes, e.g. --template='It was {label}.'"),
      (('compare.py', f'--workdir={tmp_path / "cmp"}', f'--suite={tmp_path / "suite"}'),
       f'error: {tmp_path / "suite" / "suite.json"} is not a suite\'s description (a "tasks" list '
       'whose entries each have a "name"); build the suite again: python -m benchmarks.build_tasks '
       f'--out={tmp_path / "suite"}'),
  ]
  (tmp_path / 'suite').mkdir()
  (tmp_path / 'suite' / 'suite.json').write_text(json.dumps({'tasks': [{'title': 'x'}]}))
  scripts: set[str] = set()
  for args, want in cases:
    first = args[0] not in scripts
    scripts.add(args[0])
    if first != (part == 'first'):
      continue
    done = _launch(*args)
    assert done.returncode == 2 and _last(done).startswith(want), (args, done.stderr[-2000:])
  assert len(scripts) == 9  # every launch script of the table has a first mistake
  for name in ('r1', 'r2', 'r3', 'r4', 'r5', 'w1', 'w2', 'f1', 'ft', 'cmp', 't.md', 't.json'):
    assert not os.path.exists(tmp_path / name)


@pytest.mark.fast
def test_a_compilation_cache_that_cannot_be_written_is_one_line_or_a_warning(tmp_path):
  """A cache folder asked for (--compilation_cache, JAX_COMPILATION_CACHE_DIR) that cannot be made
  or written to ends the run in one sentence before anything is written; the default folder only
  warns once, and the run goes on without the cache (JAX alone would warn at every program)."""
  a_file = tmp_path / 'a_file'
  a_file.write_text('x')
  corpus = tmp_path / 'c.txt'
  corpus.write_text('The cat sat on the mat. A dog ran past the tree.\nBirds sang songs.\n')
  env = {k: v for k, v in CHILD_ENV.items() if k != 'JAX_COMPILATION_CACHE_DIR'}
  done = _launch('prepare_data.py', '--corpus=builtin', f'--output={tmp_path / "r1"}',
                 f'--compilation_cache={a_file}', env=env)
  assert done.returncode == 2 and _last(done) == (
      f'error: --compilation_cache={a_file}: compiled programs cannot be kept in '
      f'{compile_cache.folder(str(a_file))} (not a directory); give a folder this user can write '
      'to, or --compilation_cache= to compile without keeping them'), done.stderr[-2000:]
  done = _launch('prepare_data.py', '--corpus=builtin', f'--output={tmp_path / "r2"}',
                 env={**env, 'JAX_COMPILATION_CACHE_DIR': str(a_file / 'x')})
  assert done.returncode == 2 and _last(done) == (
      f'error: JAX_COMPILATION_CACHE_DIR={a_file / "x"}: compiled programs cannot be kept there '
      '(not a directory); give it a folder this user can write to, or unset it')
  done = _launch('prepare_data.py', f'--corpus={corpus}', f'--output={tmp_path / "r3"}',
                 '--vocab_size=3', env={**env, 'XDG_CACHE_HOME': str(a_file)})
  assert done.returncode == 2 and _last(done).startswith('error: vocab_size=3 leaves no room')
  warning = (f'warning: compiled programs cannot be kept in '
             f'{os.path.join(a_file, "electra_jax", "xla")}/')
  assert [l.startswith(warning) for l in done.stderr.splitlines()].count(True) == 1, done.stderr
  for name in ('r1', 'r2', 'r3'):
    assert not os.path.exists(tmp_path / name)
  compile_cache._check('gs://a-bucket/cache')  # (a bucket: left to JAX, nothing made here)
  with pytest.raises(compile_cache.Unusable, match='not a directory'):
    compile_cache._check(str(a_file / 'cache'))


@pytest.mark.fast
def test_rows_with_more_fields_than_the_header_are_refused(tmp_path):
  from electra_jax.finetune.inputs import files
  path = tmp_path / 'train.tsv'
  path.write_text('text\tlabel\ngood film\t1\nbad\tfilm\t0\n')
  with pytest.raises(ValueError, match=r'data row 2 of .*train.tsv has 3 fields but the header '
                                       r'names 2 \(text, label\); quote the fields'):
    files.read_table(str(path), 'text', '', 'label')


def test_resuming_may_change_how_but_not_what_is_computed(tmp_path, records_dir, monkeypatch):
  """model.remat and model.attention may change on resume; the model may not. A resumed run
  compares its config with the saved one once; a checkpoint saved with another run's config is
  refused, naming what differs."""
  workdir = str(tmp_path / 'w')
  config = test_config(**{'data.records': records_dir})
  pretrain.train_and_evaluate(config, workdir, log=_quiet)
  as_json = lambda c: json.loads(c.to_json())
  again = test_config(**{'data.records': records_dir, 'model.remat': True,
                         'model.attention': 'explicit', 'train_steps': config.train_steps + 2})
  compared = preflight.check_same_run(as_json(again), workdir)  # accepted
  with pytest.raises(UserError, match=r'model.hidden_size 32 -> 64'):
    preflight.check_same_run(as_json(test_config(**{'data.records': records_dir,
                                                    'model.hidden_size': 64})), workdir)
  with open(os.path.join(workdir, 'config.json')) as f:
    assert json.load(f)['model']['remat'] is False
  with pytest.raises(UserError, match=r'belongs to another run \(seed \d+ -> \d+\)'):
    pretrain._check_belongs(as_json(again), compared, {}, {'config': {
        **compared, 'seed': compared['seed'] + 1}}, 'checkpoints/8', records_dir)
  comparisons = []
  real = fields_lib.same_run_diffs
  monkeypatch.setattr(fields_lib, 'same_run_diffs',
                      lambda *args: comparisons.append(args) or real(*args))
  pretrain.train_and_evaluate(again, workdir, log=_quiet)  # resumed
  assert len(comparisons) == 1


def test_damaged_or_foreign_files_of_a_workdir_are_one_sentence(tmp_path, pretrained, records_dir):
  """A workdir's config.json cut short or empty, records metadata without its splits or cut
  short, a checkpoints folder that is a file, a fine-tuning --mode on a pre-training workdir or on
  none, a truncated model.safetensors: each one sentence naming the file and the fix."""
  from electra_jax.apps import export
  from electra_jax.convert import hf
  from electra_jax.finetune import config as finetune_config
  from electra_jax.finetune import pretrained as finetune_pretrained
  from electra_jax.finetune import run as finetune_run
  workdir = str(tmp_path / 'w')
  shutil.copytree(pretrained, workdir)
  config = test_config(**{'data.records': records_dir})
  config_json = os.path.join(workdir, 'config.json')
  for damage in (lambda t: t[:len(t) // 2], lambda t: ''):
    with open(config_json) as f:
      text = f.read()
    with open(config_json, 'w') as f:
      f.write(damage(text))
    damaged = re.escape(config_json) + r' (is not valid JSON \(.*\)|is empty): the file is damaged'
    with pytest.raises(UserError, match=damaged + '; delete it, and the same command resumes'):
      pretrain.train_and_evaluate(config, workdir, log=_quiet)
    with pytest.raises(UserError, match=damaged + '; delete it and run'):
      finetune_pretrained.load(workdir, log=_quiet)
    with pytest.raises(UserError, match=damaged + '; delete it and run'):
      export.export(workdir, str(tmp_path / 'hf'), log=_quiet)
    with open(config_json, 'w') as f:
      f.write(text)
  assert not os.path.exists(tmp_path / 'hf')
  records = str(tmp_path / 'records')
  shutil.copytree(records_dir, records)
  meta_path = os.path.join(records, 'metadata.json')
  with open(meta_path) as f:
    meta = json.load(f)
  del meta['splits']['eval']
  with open(meta_path, 'w') as f:
    json.dump(meta, f)
  with pytest.raises(UserError, match=re.escape(meta_path) + r' lacks the description of its '
                     r'splits \(train, eval\): the file is damaged; delete the records folder'):
    records_lib.read_metadata(records)
  with open(meta_path, 'w') as f:
    f.write('{"format": ')
  with pytest.raises(UserError, match=re.escape(meta_path) + ' is not valid JSON'):
    records_lib.read_metadata(records)
  fresh = tmp_path / 'fresh'
  fresh.mkdir()
  (fresh / 'checkpoints').write_text('')
  with pytest.raises(UserError, match=r'/fresh/checkpoints is a file where the run keeps its '
                     r'checkpoints \(a folder\); move the file away'):
    pretrain.train_and_evaluate(config, str(fresh), log=_quiet)
  with pytest.raises(UserError, match=f'{workdir} is a pre-training workdir .*fine-tune it with '
                     f'--init={workdir} and a new --workdir, then use --mode=eval on that one'):
    finetune_config.saved_config(workdir, 'eval')
  with pytest.raises(UserError, match=r'--workdir .*/nowhere does not exist; give the --workdir '
                     'of a fine-tuning'):
    finetune_config.saved_config(str(tmp_path / 'nowhere'), 'predict')
  a_file = tmp_path / 'a_file'
  a_file.write_text('x')
  ft = finetune_config.default_config()
  ft.init = workdir
  with pytest.raises(UserError, match=f'--workdir {a_file} is a file; give a folder'):
    finetune_run.finetune(ft, str(a_file), log=_quiet)
  folder = export.export(workdir, str(tmp_path / 'hf'), log=_quiet).folders[0]
  weights = os.path.join(folder, 'model.safetensors')
  with open(weights, 'r+b') as f:
    f.truncate(os.path.getsize(weights) // 2)
  with pytest.raises(ValueError, match=re.escape(weights) + r' cannot be read \(.*\): the file is '
                     'damaged or cut short; copy the folder again'):
    hf.read_folder(folder)


def test_fine_tuning_settings_that_leave_nothing_are_refused(pretrained):
  from electra_jax.finetune import config as ft_config
  from electra_jax.finetune import run as finetune_run
  for field, value, error in (('max_seq_length', 2, r'max_seq_length is 2; give at least 3: '
                                                    r'\[CLS\] and \[SEP\] take 2'),
                              ('task.max_train_examples', -5, r'task.max_train_examples is -5; '
                               r'give 0 \(all\) or a number')):
    ft = ft_config.default_config()
    ft.init = pretrained
    if '.' in field:
      ft.task[field.split('.')[1]] = value
    else:
      ft[field] = value
    with pytest.raises(UserError, match=error):
      finetune_run.finetune(ft, '/nonexistent/never/made', log=_quiet)
  assert not os.path.exists('/nonexistent')


@pytest.mark.fast
def test_a_damaged_corpus_is_named_and_nothing_is_left(tmp_path):
  """.gz files cut short, damaged or not gzip, UTF-16 text, a JSON-lines corpus with a bad line
  (its error raised through the vocabulary trainer), a one-document corpus: one sentence each, no
  records folder left behind."""
  import gzip
  text = '\n'.join(' '.join(WORDS[(i + j) % len(WORDS)] for j in range(12)) + '.'
                   for i in range(3000))
  data = gzip.compress(text.encode())
  damaged = bytearray(data)
  damaged[len(damaged) // 2] ^= 0xFF
  files = {'cut.txt.gz': data[:len(data) // 2], 'crc.txt.gz': bytes(damaged),
           'plain.txt.gz': text.encode()[:5000], 'utf16.txt': text[:4000].encode('utf-16'),
           'utf16le.txt': text[:4000].encode('utf-16-le'),
           'bad.jsonl': b'{"text": "One line. Two lines."}\nnot json\n',
           'one.txt': text.encode()}
  errors = {'cut.txt.gz': r'cut.txt.gz is a damaged .gz file \(Compressed file ended',
            'crc.txt.gz': r'crc.txt.gz is a damaged .gz file \(',
            'plain.txt.gz': r'plain.txt.gz is a damaged .gz file \(Not a gzipped file',
            'utf16.txt': r'utf16.txt looks like UTF-16 \(or UTF-32\) text; convert it to UTF-8',
            'utf16le.txt': r'utf16le.txt looks like UTF-16',
            'bad.jsonl': r'bad.jsonl line 2 is not JSON',
            'one.txt': r"one.txt' is one document, and the held-out split needs documents of its "
                       'own'}
  for name, content in files.items():
    (tmp_path / name).write_bytes(content)
    out = tmp_path / f'records_{name}'
    with pytest.raises(ValueError, match=errors[name]):
      prepare_lib.records_folder(records_lib.Settings(source=str(tmp_path / name),
                                                      max_seq_length=32,
                                               vocab_size=60, num_shards=1, num_eval_shards=1),
                          str(out), log=_quiet)
    assert not out.exists(), name


@pytest.mark.fast
def test_sigterm_while_records_are_written_says_so_and_leaks_nothing(tmp_path):
  corpus = tmp_path / 'big.txt'
  with open(corpus, 'w') as f:
    for i in range(120_000):
      f.write(' '.join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(20)) + '.\n\n')
  proc = subprocess.Popen(
      [sys.executable, os.path.join(ROOT, 'launch', 'prepare_data.py'), f'--corpus={corpus}',
       f'--output={tmp_path / "out"}', '--vocab_size=100', '--max_seq_length=64',
       '--num_shards=16', '--num_workers=2'], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True, env=CHILD_ENV)
  for line in proc.stdout:  # the workers have started writing
    if line.startswith('writing '):
      break
  proc.send_signal(15)
  out, err = proc.communicate(timeout=120)
  assert proc.returncode == 143, (out[-2000:], err[-2000:])
  assert err.strip().splitlines()[-1] == ('stopped by SIGTERM: run the same command again to '
                                          'continue from what is complete'), err
  assert 'leaked' not in err and 'Traceback' not in err, err


@pytest.mark.fast
def test_checkpoint_errors_read_without_object_reprs_and_compare_names_own_tasks(tmp_path):
  from electra_jax.train import checkpoint as checkpoint_lib
  from electra_jax.apps import compare
  from electra_jax.finetune import config as ft_config
  e = ValueError('Read failed for state/array: <bound method PyCapsule.result of <tensorstore.'
                 'Future object at 0x7f00>> DATA_LOSS: truncated')
  assert checkpoint_lib.reason(e) == 'ValueError: Read failed for state/array: DATA_LOSS: truncated'
  configs = []
  for task in ('reviews', 'news'):
    c = ft_config.default_config()
    c.task.update(name='own', train=str(tmp_path / task / 'train.csv'))
    configs.append(c)
  assert [list(compare.as_tasks(c)) for c in configs] == [['reviews'], ['news']]


def test_an_export_to_a_place_that_cannot_be_written_is_one_line(tmp_path, pretrained):
  """Read-only or forbidden (a folder without write permission; as root, which may write there,
  /sys, which nobody may): the path named, exit 2, no traceback."""
  locked = tmp_path / 'locked'
  locked.mkdir()
  locked.chmod(0o555)
  out = locked / 'hf'
  if os.access(locked, os.W_OK):  # root: /sys refuses it as well
    out = '/sys/fs/electra_jax_test_export'
  done = _launch('export.py', f'--workdir={pretrained}', f'--out={out}')
  assert done.returncode == 2, done.stderr[-2000:]
  assert re.match(rf'error: {re.escape(str(out))}\S*: (permission denied|operation not permitted|'
                  r'read-only file system); choose a place this user can write to', _last(done)), \
      done.stderr[-2000:]
  assert 'Traceback' not in done.stderr


@pytest.mark.fault
def test_a_checkpoints_folder_made_unwritable_during_a_run_says_to_restore_access(tmp_path,
                                                                                records_dir):
  """The workdir was writable when the run began there: the fix is its write access again and
  the same command (not another place). Read-only as a bind mount of a namespace of the test's
  own, which binds root too."""
  config = run_config_file(tmp_path, records_dir, train_steps=2)
  workdir = tmp_path / 'w'
  first = subprocess.run(launch_command(config, workdir), capture_output=True, text=True,
                         env=CHILD_ENV, timeout=300, check=False)
  assert first.returncode == 0, first.stderr[-2000:]
  folder = workdir / 'checkpoints'
  if shutil.which('unshare') is None:
    pytest.skip('unshare (util-linux) is not installed: it makes the folder read-only')
  command = ' '.join([*launch_command(config, workdir), '--config.train_steps=4'])
  done = subprocess.run(['unshare', '-Urm', 'sh', '-c', f'mount --bind {folder} {folder} && '
                         f'mount -o remount,bind,ro {folder} && {command}'],
                        capture_output=True, text=True, env=CHILD_ENV, timeout=300, check=False)
  if 'mount' in done.stderr[:300] and done.returncode == 32:
    pytest.skip('this machine cannot bind-mount a folder read-only in a user namespace')
  assert done.returncode == 2, done.stderr[-2000:]
  assert re.fullmatch(rf'error: {folder}/\S+: read-only file system; give this user write access '
                      rf'to {workdir} again and run the same command again to continue from what '
                      'is complete', _last(done)), done.stderr[-2000:]
  assert os.listdir(folder) == ['2']


def _copy_checkpoint(workdir: str, source: int, target: int):
  """A second checkpoint (step `target`) of a workdir, a copy of step `source`."""
  folder = os.path.join(workdir, 'checkpoints')
  shutil.copytree(os.path.join(folder, str(source)), os.path.join(folder, str(target)))


def test_messages_name_the_real_problem(tmp_path, pretrained, records_dir, corpus_file,
                                       monkeypatch):
  """A workdir without checkpoints, a fine-tuning's workdir given to the pre-training commands,
  a checkpoint deleted while read (a running pre-training rotates them), a damaged one, records
  of another vocabulary than init_from's, an --out that is a file: each named as what it is."""
  from electra_jax.train import checkpoint as checkpoint_lib
  from electra_jax.apps import export
  from electra_jax.finetune import config as ft_config
  from electra_jax.finetune import pretrained as ft_pretrained
  from electra_jax.apps import diagnose
  empty = str(tmp_path / 'empty')  # a pre-training stopped before its first save
  os.makedirs(empty)
  shutil.copy(os.path.join(pretrained, 'config.json'), empty)
  for call in (lambda: export.export(empty, str(tmp_path / 'hf'), log=_quiet),
               lambda: diagnose.diagnose(empty, log=_quiet),
               lambda: ft_pretrained.load(empty, log=_quiet)):
    with pytest.raises(UserError, match=rf'^{empty} holds no checkpoint yet: its pre-training has '
                                        r'not saved one .*; run it \(the same command, '
                                        rf'--workdir={empty}\) until it has$'):
      call()
  tuned = tmp_path / 'tuned'
  tuned.mkdir()
  ft = ft_config.default_config()
  ft.init = pretrained
  (tuned / 'config.json').write_text(ft.to_json())
  with pytest.raises(UserError, match=rf'^{tuned} is not a pre-training workdir \(it holds a '
                                      r'fine-tuning\); give the --workdir of launch/train.py$'):
    diagnose.diagnose(str(tuned), log=_quiet)
  with pytest.raises(UserError, match=rf'^--init {tuned} holds a fine-tuning, not a pre-training: '
                                      rf'give the pre-training it started from \({pretrained}\)'):
    ft_pretrained.load(str(tuned), log=_quiet)

  rotating = str(tmp_path / 'rotating')  # checkpoints 2 and 4; 4 deleted as it is read
  shutil.copytree(pretrained, rotating)
  _copy_checkpoint(rotating, 4, 2)
  restore = checkpoint_lib.Checkpointer.restore

  def rotated_away(self, step, target, *rest):
    if step == 4:
      shutil.rmtree(os.path.join(rotating, 'checkpoints', '4'))
    return restore(self, step, target, *rest)
  monkeypatch.setattr(checkpoint_lib.Checkpointer, 'restore', rotated_away)
  lines = []
  loaded = ft_pretrained.load(rotating, log=lines.append)
  assert loaded.checkpoint == os.path.join(rotating, 'checkpoints', '2'), lines
  assert lines == [f'note: checkpoint {rotating}/checkpoints/4 was deleted while it was read (the '
                   'run writing there keeps its newest checkpoints only); reading the newest '
                   'again'], lines
  assert sorted(os.listdir(os.path.join(rotating, 'checkpoints'))) == ['2']  # nothing set aside
  monkeypatch.undo()

  damaged = str(tmp_path / 'damaged')
  shutil.copytree(pretrained, damaged)
  data = os.path.join(damaged, 'checkpoints', '4', 'state', 'ocdbt.process_0', 'd')
  for name in os.listdir(data):
    with open(os.path.join(data, name), 'r+b') as f:
      f.truncate(10)
  with pytest.raises(UserError) as e:
    export.export(damaged, str(tmp_path / 'hf'), log=_quiet)
  assert re.match(rf'^the checkpoint {damaged}/checkpoints/4 cannot be read \(ValueError: .*Error '
                  r'reading ".*" in OCDBT database .*\); run the pre-training command again',
                  str(e.value)), str(e.value)
  assert 'TensorStore details' not in str(e.value) and '<' not in str(e.value)

  # records of another vocabulary than init_from's: the conflict named, not a model field
  from test_tokenizer import write_wordpiece_vocab
  vocab = str(tmp_path / 'vocab.txt')
  size = len(write_wordpiece_vocab(vocab))
  other = str(tmp_path / 'other_records')
  prepare_lib.records_folder(records_lib.Settings(
      source=corpus_file, max_seq_length=32, eval_fraction=0.2, vocab=vocab,
      vocab_size=size, num_shards=4), other, log=_quiet)
  with pytest.raises(UserError, match=rf'^the records in {other} were tokenized with another '
                                      rf'vocabulary \({size} entries\) than --config.init_from='
                                      rf'{pretrained} was trained with \(.*, 96 entries\); build '
                                      r'records with its vocabulary '
                                      r'\(python launch/prepare_data.py '
                                      r'--vocab=.* \.\.\.\) and give those, or drop '
                                      r'--config.data.records'):
    pretrain.train_and_evaluate(test_config(**{'data.records': other, 'init_from': pretrained}),
                                str(tmp_path / 'from_init'), log=_quiet)
  assert not os.path.exists(tmp_path / 'from_init')
  with pytest.raises(UserError, match=r'holds no checkpoint of step 999 \(it has '
                                      r'\[\d+(, \d+)*\]\); give one of those with --step, or '
                                      r'leave --step out for the latest'):
    export.export(pretrained, str(tmp_path / 'hf_999'), step=999, log=_quiet)

  a_file = tmp_path / 'a_file'
  a_file.write_text('x')
  done = _launch('build_tasks.py', f'--out={a_file}')
  assert done.returncode == 2 and _last(done) == (
      f'error: --out {a_file} is a file; give a folder (new, or one to write into)'), done.stderr


def test_a_checkpoint_of_another_run_is_refused_naming_what_differs(tmp_path, pretrained,
                                                                    records_dir, corpus_file):
  """A checkpoint copied in from a run of the same shapes and vocabulary (another seed, other
  records, another fine-tuning's seed or train data) is not resumed: the sentence names what
  differs."""
  from electra_jax.finetune import config as ft_config
  from electra_jax.finetune import run as finetune_run
  from conftest import write_corpus
  records = str(tmp_path / 'records')  # the fixture's records, at a path of this test
  shutil.copytree(records_dir, records)
  other = str(tmp_path / 'other')  # seed 1, its own records: 4 steps
  pretrain.train_and_evaluate(test_config(**{'data.records': records, 'seed': 1}), other,
                              log=_quiet)
  mine = str(tmp_path / 'mine')  # the fixture's run (seed 0), with other's step 4 as step 8
  shutil.copytree(pretrained, mine)
  shutil.copytree(os.path.join(other, 'checkpoints', '4'), os.path.join(mine, 'checkpoints', '8'))
  with pytest.raises(UserError, match=rf"^the checkpoint {mine}/checkpoints/8 belongs to another "
                                      rf"run \(data.records '{records}' -> '{records_dir}'; seed 1 "
                                      r"-> 0\); move it out of the workdir"):
    pretrain.train_and_evaluate(test_config(**{'data.records': records_dir, 'train_steps': 12}),
                                mine, log=_quiet)
  # other's records rebuilt from another corpus with the same vocabulary: its checkpoint refused
  vocab = os.path.join(records, 'vocab.model')
  shutil.copy(vocab, tmp_path / 'vocab.model')
  shutil.rmtree(records)
  settings = records_lib.Settings(
      source=write_corpus(str(tmp_path / 'corpus2.txt'), seed=5), max_seq_length=32,
      eval_fraction=0.2, num_shards=4, vocab_size=96, vocab=str(tmp_path / 'vocab.model'))
  prepare_lib.records_folder(settings, records, log=_quiet)
  with pytest.raises(UserError, match=rf"^the checkpoint {other}/checkpoints/4 was trained on "
                                      rf"other records than {records} \(source '{corpus_file}' -> "
                                      rf"'{tmp_path}/corpus2.txt'\); move it out"):
    pretrain.train_and_evaluate(test_config(**{'data.records': records, 'seed': 1,
                                               'train_steps': 8}), other, log=_quiet)

  train = tmp_path / 'train.csv'
  train.write_text('text,label\n' + ''.join(f'{" ".join(WORDS[i:i + 6])},{"ab"[i % 2]}\n'
                                            for i in range(40)))
  cfg = ft_config.default_config()
  cfg.update(init=pretrained, batch_size=16, max_seq_length=32, epochs=1.0, baseline=False)
  cfg.task.update(name='own', train=str(train))
  tuned = str(tmp_path / 'tuned')
  lines = []
  finetune_run.finetune(cfg, tuned, log=lines.append)  # seed 0, 2 steps; no dev split
  assert 'seed 0: 2 steps, not scored (no dev split)' in lines, lines
  assert 'nothing was scored: the task has no dev split' in open(
      os.path.join(tuned, 'results.md')).read()
  copied = str(tmp_path / 'copied')  # seed 1, its checkpoints seed 0's
  shutil.copytree(os.path.join(tuned, 'seed_0'), os.path.join(copied, 'seed_1'))
  cfg.seed = 1
  with pytest.raises(UserError, match=rf'^the checkpoint {copied}/seed_1/checkpoints/2 belongs to '
                                      r'another fine-tuning \(seed 0 -> 1\); move it'):
    finetune_run.finetune(cfg, copied, log=_quiet)
  cfg.seed = 0
  train.write_text(train.read_text().replace(WORDS[3], 'zebra'))  # the same file, edited
  with pytest.raises(UserError, match=rf'^the checkpoint {tuned}/seed_0/checkpoints/2 belongs to '
                                      r'another fine-tuning \(other train examples\)'):
    finetune_run.finetune(cfg, tuned, log=_quiet)


@pytest.mark.fast
def test_files_are_read_exactly_as_written_or_refused_with_the_row(tmp_path):
  """Quoting, headers, types, sizes and encodings of your own files: each read as written, or
  refused in one sentence naming the line."""
  from electra_jax.finetune.inputs import files
  rows = [(f'text number {i} with words', 'ab'[i % 2]) for i in range(64)]

  def table(name, rows, sep=',', header=('text', 'label')):
    path = tmp_path / name
    path.write_text(sep.join(header) + '\n' + ''.join(sep.join(r) + '\n' for r in rows))
    return path

  def read(path):
    return files.read_table(str(path), 'text', '', 'label', log=_quiet)

  unclosed = list(rows)
  unclosed[5] = ('"an opening quote only', 'b')
  tsv = read(table('unclosed.tsv', unclosed, '\t'))  # a .tsv's quotes are text when they do not
  assert [e.text_a for e in tsv] == [t for t, _ in unclosed]  # quote a field
  with pytest.raises(ValueError, match=r'^line 7 of .*unclosed.csv opens a quoted field \(\"\) '
                                       r'that is never closed; close it'):
    read(table('unclosed.csv', unclosed))
  closed = list(unclosed)
  closed[20] = ('closes"', 'a')  # the quote closes 15 rows later, before a comma
  with pytest.raises(ValueError, match=r'^lines 7-22 of .*closed.csv are one row: a quote \(\"\) '
                                       r'opened in line 7 closes only in line 22, and line 8 '
                                       r'inside it looks like a row of its own'):
    read(table('closed.csv', closed))
  closed[20] = ('closes" mid-field', 'a')
  with pytest.raises(ValueError, match=r'^lines 7-22 of .*mid.csv are not one row: a quote'):
    read(table('mid.csv', closed))
  quoted = tmp_path / 'quoted.tsv'  # quoting as csv writers do it: read as meant
  with open(quoted, 'w', newline='') as f:
    csv.writer(f, delimiter='\t').writerows([('text', 'label'), ('He said "hi"\tthere', 'a'),
                                             ('two\nlines', 'b')])
  assert [e.text_a for e in read(quoted)] == ['He said "hi"\tthere', 'two\nlines']
  multiline = tmp_path / 'multiline.csv'
  with open(multiline, 'w', newline='') as f:
    csv.writer(f).writerows([('text', 'label'), ('one, two\nthree, a', 'a'), ('x', 'b')])
  assert [e.text_a for e in read(multiline)] == ['one, two\nthree, a', 'x']
  with pytest.raises(ValueError, match=r"^the header of .*twice.csv names the column 'review' "
                                       r"more than once \(columns 1, 2\); give each column"):
    files.read_table(str(table('twice.csv', [('a', 'b', '1')] * 3,
                               header=('review', 'review', 'stars'))), 'review', '', 'stars')
  long = list(rows)
  long[3] = ('word ' * 40_000, 'a')  # 200,000 characters in one cell
  assert read(table('long.csv', long))[3].text_a == long[3][0]
  jsonl = tmp_path / 'list.jsonl'
  jsonl.write_text('{"text": "a", "label": "x"}\n{"text": "b", "label": ["x", "y"]}\n')
  with pytest.raises(ValueError, match=r'^line 2 of .*list.jsonl has a list \["x", "y"\] as its '
                                       r"'label'; give one class or number there$"):
    read(jsonl)
  jsonl.write_text('{"text": {"title": "a"}, "label": "x"}\n')
  with pytest.raises(ValueError, match=r"^line 1 of .*list.jsonl has an object .* as its 'text'"):
    read(jsonl)
  jsonl.write_text('{"text": "a", "label": "x", "label": "y"}\n')
  with pytest.raises(ValueError, match=r"^line 1 of .*list.jsonl gives the key 'label' twice"):
    read(jsonl)
  (tmp_path / 'latin.csv').write_bytes('text,label\ncafé,a\nb,b\n'.encode('latin-1'))
  with pytest.raises(ValueError, match=r'^line 2 of .*latin.csv is not UTF-8 \(byte 0xe9\); save'):
    read(tmp_path / 'latin.csv')
  (tmp_path / 'utf16.csv').write_bytes('text,label\ncafé,a\nb,b\n'.encode('utf-16'))
  assert [e.text_a for e in read(tmp_path / 'utf16.csv')] == ['café', 'b']
  (tmp_path / 'nul.csv').write_bytes(b'text,label\na\x00b,a\n')
  with pytest.raises(ValueError, match=r'^line 2 of .*nul.csv holds a NUL character'):
    read(tmp_path / 'nul.csv')
  with pytest.raises(ValueError, match=r"semi.csv looks semicolon-separated \(its first row is "
                                       r"'text;label'\)"):
    read(table('semi.csv', rows, ';'))


@pytest.mark.fast
def test_regression_targets_are_scaled_by_their_range_and_one_value_is_refused(tmp_path):
  from electra_jax.finetune import config as ft_config
  from electra_jax.finetune.kinds import registry
  train = tmp_path / 'train.csv'
  train.write_text('text,price\na,100000\nb,900000\nc,500000\n')
  cfg = ft_config.default_config().task
  cfg.update(name='own', kind='regression', train=str(train), label='price')
  task, splits = registry.load(cfg, log=_quiet)
  kind = registry.get('regression')
  targets = kind.targets(task, splits['train'])
  np.testing.assert_allclose(targets, [0.0, 1.0, 0.5])
  np.testing.assert_allclose(kind.predictions(task, targets[:, None]), [100_000, 900_000, 500_000])
  train.write_text('text,price\na,3\nb,3.0\nc, 3\n')
  with pytest.raises(ValueError, match=r'^every target of the train data is 3; a regression task '
                                       'needs at least 2 distinct values$'):
    registry.load(cfg, log=_quiet)


def test_more_mistakes_are_one_sentence_and_leave_nothing(tmp_path, pretrained):
  """A config file given to the other command, an empty --workdir, a label column that holds the
  text, --seed for a pre-training's export, a bad --mode or --kills: one sentence each."""
  from conftest import load_config
  from electra_jax.config import files as config_files
  from electra_jax.train import workdir as workdir_lib
  from electra_jax.apps import export
  from electra_jax.finetune.inputs import files
  data = tmp_path / 'train.csv'
  data.write_text('text,label\na,x\nb,y\n')
  own = load_config(os.path.join(ROOT, 'configs', 'finetune', 'own.py'))
  tiny = load_config(os.path.join(ROOT, 'configs', 'tiny.py'))
  with pytest.raises(UserError, match=r'^--config is a fine-tuning config \(it has a task '
                                      r'section\); give --config a pre-training config such as '
                                      r'configs/tiny.py$'):
    config_files.require_config(own, 'pre-training')
  with pytest.raises(UserError, match=r'^--finetune_config is a pre-training config \(it has an '
                                      r'objective section\); give --finetune_config a fine-tuning'):
    config_files.require_config(tiny, 'fine-tuning', '--finetune_config')
  config_files.require_config(tiny, 'pre-training')
  config_files.require_config(own, 'fine-tuning')
  (tmp_path / 'syntax.py').write_text('def get_config(:\n')
  (tmp_path / 'empty.py').write_text('x = 1\n')
  (tmp_path / 'plain.py').write_text('def get_config():\n  return None\n')
  for spec, error in ((f'{tmp_path}/plain.py:big', 'has no variants .*; leave ":big" out'),
                      (str(tmp_path / 'syntax.py'), 'line 1 of .* is not Python'),
                      (str(tmp_path / 'empty.py'), r'defines no get_config\(\)'),
                      (str(data), 'is not a config file')):
    with pytest.raises(UserError, match=rf'^--config={re.escape(spec)}: .*{error}'):
      config_files.load_config_file(spec)
  with pytest.raises(UserError, match=r'^--workdir is empty; give a folder$'):
    workdir_lib.make('')
  with pytest.raises(ValueError, match=r"^task.label names the column 'text', which also holds "
                                       'the text; give the column of the labels$'):
    files.read_table(str(data), 'text', '', 'text')
  with pytest.raises(UserError, match=r"^--seed picks one of a fine-tuning's seeds, and .* is a "
                                      r'pre-training \(one model\); leave --seed out$'):
    export.export(pretrained, str(tmp_path / 'hf'), seed=3, log=_quiet)
  assert not os.path.exists(tmp_path / 'hf') and not os.path.exists(tmp_path / 'hf.partial')
  done = _launch('finetune.py', f'--workdir={tmp_path / "ft"}', '--mode=serve')
  assert done.returncode == 2 and _last(done) == (
      'error: --mode=serve: value should be one of <train|eval|predict>'), done.stderr[-2000:]
  done = _launch('chaos.py', f'--workdir={tmp_path / "chaos"}', '--kills=0')
  assert done.returncode == 2 and _last(done) == 'error: --kills=0: give at least 1'
  assert not os.path.exists(tmp_path / 'ft') and not os.path.exists(tmp_path / 'chaos')


@pytest.mark.fast
def test_round_four_inputs_of_a_new_user_are_one_sentence_or_read_as_meant(tmp_path):
  """A damaged config.json that is JSON but not an object, a JSON-lines corpus whose texts are
  null (they read as the word 'None') or numbers, a data file that is a folder, a second text
  column that is the first, a null text in a JSON-lines data file, a max_seq_length that leaves an
  example no room."""
  from electra_jax.finetune.inputs import files
  from electra_jax.storage import fs
  (tmp_path / 'config.json').write_text('[1, 2]')
  with pytest.raises(UserError, match=r'config.json holds \[1, 2\], not an object: the file is '
                                      r'damaged; delete it$'):
    fs.read_json(str(tmp_path / 'config.json'), 'delete it', want=dict)
  corpus = tmp_path / 'corpus.jsonl'
  corpus.write_text(''.join(json.dumps({'text': t}) + '\n'
                            for t in ('The cat sat.', None, 'A dog ran.', None)))
  source = corpus_lib.Source(str(corpus))
  text = [s for d in source.documents() for s in d]
  assert text == ['The cat sat.', 'A dog ran.'] and 'None' not in ' '.join(text)
  assert source.report.warnings() == ['2 JSON-lines object(s) had a null text and were skipped']
  corpus.write_text(json.dumps({'text': 12}) + '\n')
  with pytest.raises(ValueError, match=r"corpus.jsonl line 1 has 12 as its 'text', not a text; "
                                       'give the text as a JSON string$'):
    list(corpus_lib.Source(str(corpus)).documents())
  with pytest.raises(FileNotFoundError, match=rf'^the data file {tmp_path} is a folder; give the '
                                              r'path of a .csv, .tsv or .jsonl file$'):
    files.read_table(str(tmp_path), 'text', '', 'label')
  (tmp_path / 'pairs.csv').write_text('text,other,label\na,b,1\nc,d,0\n')
  with pytest.raises(ValueError, match=r"^task.text_b names the column 'text', as task.text_a "
                                       r"does; give the other text's own column, or '' for single "
                                       r'texts$'):
    files.read_table(str(tmp_path / 'pairs.csv'), 'text', 'text', 'label')
  (tmp_path / 'null.jsonl').write_text('{"text": "a", "label": 1}\n{"text": null, "label": 0}\n')
  with pytest.raises(ValueError, match=r"^line 2 of .*null.jsonl lacks the field 'text', or has "
                                       r'it null \(1 of 2 rows\); fix those rows \(give each line '
                                       r'its text\)$'):
    files.read_table(str(tmp_path / 'null.jsonl'), 'text', '', 'label')
  with pytest.raises(UserError, match=r'^data.max_seq_length=4 leaves an example no room: \[CLS\] '
                                      r'A \[SEP\] B \[SEP\] takes at least 5 tokens'):
    preflight.configure(test_config(**{'data.max_seq_length': 4}), partitioning.make_mesh())


@pytest.mark.fast
def test_data_that_is_likely_a_mistake_is_named_in_a_warning(tmp_path):
  """A dev file that is (mostly) the train file, a label column with a class per example (an id
  or text column): trained as given, and said."""
  from electra_jax.finetune import config as ft_config
  from electra_jax.finetune.kinds import registry
  from electra_jax.finetune.inputs import tasks as tasks_lib
  rows = ''.join(f'text {i},{"ab"[i % 2]}\n' for i in range(40))
  (tmp_path / 'train.csv').write_text('text,label\n' + rows)
  (tmp_path / 'dev.csv').write_text('text,label\n' + rows[:200] + 'new one,a\n')
  cfg = ft_config.default_config().task
  cfg.update(name='own', train=str(tmp_path / 'train.csv'), dev=str(tmp_path / 'dev.csv'))
  _, splits = registry.load(cfg, log=_quiet)
  share = 100 * (len(splits['dev']) - 1) / len(splits['dev'])
  assert tasks_lib.overlap_notes(splits) == [
      f'warning: {share:.0f}% of the dev examples are in the train data too: the dev score '
      'measures what was seen (is task.dev the train file?)']
  assert tasks_lib.overlap_notes({'train': splits['train'], 'dev': splits['dev'][-1:]}) == []
  from electra_jax.finetune.inputs import squad
  questions = [squad.Question(str(i), f'q{i}?', 'a context', ('a',), (0,)) for i in range(4)]
  assert tasks_lib.overlap_notes({'train': questions, 'dev': questions[:2]})[0].startswith(
      'warning: 100% of the dev examples are in the train data too')
  (tmp_path / 'ids.csv').write_text('text,label\n' + ''.join(f't {i},id{i}\n' for i in range(30)))
  cfg.update(train=str(tmp_path / 'ids.csv'), dev='')
  said = []
  registry.load(cfg, log=said.append)
  assert said == ["warning: the train data has 30 classes among 30 examples (about 1.0 each): is "
                  "task.label='label' the column of the labels?"]


TOY_TEST = '''
import os, signal, time
def test_1():
  time.sleep(0.2)
def test_2():
  if MODULE == 'crashes':
    os.kill(os.getpid(), signal.SIGSEGV)  # every time it runs: a worker's segmentation fault
  if MODULE == 'hangs':
    time.sleep(3600)
def test_3():
  time.sleep(0.2)
'''


@pytest.mark.fast
def test_a_crashed_or_stuck_test_fails_the_run_within_its_bound_and_the_rest_runs(tmp_path):
  """The test command's settings on a suite of its own: a test that crashes its worker every time
  it runs, and one stuck for an hour under a 5 s bound, each reported failed once, every other test
  run, and the run over in seconds (xdist re-ran a crashed test on worker after worker, then
  waited forever with both workers idle)."""
  import configparser
  ours = configparser.ConfigParser()
  ours.read(os.path.join(ROOT, 'setup.cfg'))
  options = ours['tool:pytest']
  assert options['timeout_method'] == 'thread' and '--dist loadscope' in options['addopts']
  (tmp_path / 'pytest.ini').write_text(
      f'[pytest]\naddopts = {options["addopts"]}\ntimeout = 5\n'
      f'timeout_method = {options["timeout_method"]}\n')
  (tmp_path / 'conftest.py').write_text(
      f'import sys\nsys.path.insert(0, {os.path.join(ROOT, "tests")!r})\nimport pytest\n'
      'import xdist_once\n@pytest.hookimpl(optionalhook=True)\n'
      'def pytest_xdist_make_scheduler(config, log):\n'
      '  return xdist_once.make_scheduler(config, log)\n')
  for module in ('calm', 'crashes', 'hangs', 'quiet'):
    (tmp_path / f'test_{module}.py').write_text(f'MODULE = {module!r}\n' + TOY_TEST)
  start = time.monotonic()
  done = subprocess.run([sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider', str(tmp_path)],
                        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
  took = time.monotonic() - start
  summary = done.stdout.strip().splitlines()[-1]
  assert done.returncode == 1 and re.match(r'=* ?2 failed, 10 passed in ', summary), (
      took, done.stdout[-3000:])
  assert "worker 'gw" in done.stdout and "crashed while running 'test_crashes.py::test_2'" in (
      done.stdout), done.stdout[-3000:]
  assert "crashed while running 'test_hangs.py::test_2'" in done.stdout and took < 120, (
      took, done.stdout[-3000:])


@pytest.mark.fast
def test_every_command_helps_with_exit_0_its_docstring_whole_and_its_config_fields():
  """--help (absl's exits 1) and --helpfull exit 0 and print the command's docstring with its line
  breaks (a `\\` at a line's end in a docstring joined the lines); --help_config lists every
  declared field of the command's config files with its default and meaning."""
  import ast
  commands = {os.path.basename(p): p for p in sorted(glob.glob(os.path.join(ROOT, 'launch',
                                                                           '*.py')))
              if 'cli.run(' in open(p).read()}
  assert len(commands) >= 8, commands
  asked = [(name, '--help') for name in commands] + [('train.py', '--helpfull')] + [
      (name, '--help_config') for name in ('train.py', 'finetune.py', 'compare.py', 'predict.py')]
  started = {(name, flag): subprocess.Popen([*script(name), flag], stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                            env=CHILD_ENV)
             for name, flag in asked}
  done = {key: (p.wait(timeout=300), *p.communicate()) for key, p in started.items()}
  for (name, flag), (code, out, err) in done.items():
    assert code == 0, (name, flag, err[-2000:])
    if flag != '--help_config':
      doc = ast.get_docstring(ast.parse(open(commands[name]).read()), clean=False)
      assert all(line in out for line in doc.splitlines() if line.strip()), (name, out[:3000])
  fields = {name: out for (name, flag), (_, out, _) in done.items() if flag == '--help_config'}
  assert '  data.batch_size = 128\n      global batch' in fields['train.py'], fields['train.py']
  assert re.search(r'\n  task.max_train_examples = 0\n      ', fields['finetune.py']), (
      fields['finetune.py'][:3000])
  assert '--config (pre-training config)' in fields['compare.py'] and (
      '--finetune_config (fine-tuning config)' in fields['compare.py'])
  assert 'takes no config file' in fields['predict.py']
  assert '--help_config lists every field of --config' in done[('train.py', '--help')][1]


@pytest.mark.fast
@pytest.mark.fault
def test_predictions_into_a_read_only_folder_are_refused_before_the_work(tmp_path):
  """A read-only --output folder was named by the hidden temporary file, after every row was
  predicted; it is checked first now, with the fix. (A read-only bind mount in a mount namespace
  of the test's own.)"""
  if shutil.which('unshare') is None:
    pytest.skip('unshare (util-linux) is not installed: it mounts the read-only folder')
  out = tmp_path / 'out'
  out.mkdir()
  (tmp_path / 'in.csv').write_text('text\nx\n')
  code = ('from electra_jax import UserError\nfrom electra_jax.apps import predict\n'
          f'try:\n  predict.check_output({str(out / "p.csv")!r}, {str(tmp_path / "in.csv")!r}, '
          'False)\nexcept UserError as e:\n  print(e)\n')
  mount = f'mount --bind {out} {out} && mount -o remount,bind,ro {out} {out}'
  done = subprocess.run(['unshare', '-Urm', 'sh', '-c', f'{mount} && {sys.executable} -c "$0"',
                         code], capture_output=True, text=True, cwd=ROOT, env=CHILD_ENV,
                        timeout=300, check=False)
  if done.returncode != 0 and 'mount' in done.stderr:
    pytest.skip('this machine cannot bind-mount a folder read-only in a user namespace')
  assert done.stdout.strip() == (f'cannot write the predictions into {out} (Read-only file '
                                 'system); give an --output in a folder you can write to'), (
      done.stdout, done.stderr[-2000:])
