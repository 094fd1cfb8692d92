"""gs:// everywhere, against a real storage server (tests/gcs_server.py, started on 127.0.0.1):
records built from a corpus in a bucket (read in parts) and into a bucket, pre-training there
killed and resumed bit-identically, an export and a fine-tuning from and to the bucket, two
processes writing one checkpoint there, and the one-line errors for a missing bucket, missing
credentials and an object where a folder is needed."""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import CHILD_ENV, HAS_HF, ROOT, launch_command, load_config, run_config_file
from conftest import start_gcs_server
from conftest import assert_same_states, test_config
from electra_jax import UserError
from electra_jax.data import records
from electra_jax.storage import fs
from electra_jax.storage import remote_fs
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.pretraining import run as pretrain

BUCKET = 'gs://electra-test'


@pytest.fixture(scope='module', autouse=True)
def gcs(gcs_server):
  """The server's environment for this module's tests (and the processes they start)."""
  with pytest.MonkeyPatch.context() as patch:
    for key, value in gcs_server['env'].items():
      patch.setenv(key, value)
    remote_fs.credentials_problem.cache_clear()
    yield {**CHILD_ENV, **gcs_server['env']}
  remote_fs.credentials_problem.cache_clear()


@pytest.fixture(scope='module')
def bucket_records(corpus_file, gcs):
  """The test corpus as a records folder in the bucket, built by WORKSPACE.md's command."""
  out = f'{BUCKET}/records/test'
  c = test_config()
  done = _run([os.path.join(ROOT, 'launch', 'prepare_data.py'), f'--corpus={corpus_file}',
               f'--output={out}', f'--vocab_size={c.model.vocab_size}',
               f'--max_seq_length={c.data.max_seq_length}', '--num_shards=4',
               '--num_eval_shards=1', f'--eval_fraction={c.data.eval_fraction}',
               '--num_workers=2'], gcs)
  assert done.returncode == 0, done.stderr[-3000:]
  return out


def _run(args, env, timeout=600):
  done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                        timeout=timeout, check=False)
  return done


def _last_line(done) -> str:
  lines = [l for l in done.stderr.splitlines() if l.strip()]
  return lines[-1] if lines else ''


@pytest.mark.fast
@pytest.mark.parametrize('where', ['bucket', 'local'])
def test_files_in_a_bucket_behave_as_local_files(where, tmp_path):
  root = f'{BUCKET}/fs' if where == 'bucket' else str(tmp_path / 'fs')
  fs.makedirs(fs.join(root, 'a'))
  fs.write_atomic(fs.join(root, 'a', 'x.txt'), 'one\ntwo\n' + 'y' * 5000 + '\n')
  fs.write_atomic(fs.join(root, 'a', 'b.bin'), b'\x00\x01')
  assert fs.isdir(fs.join(root, 'a')) and fs.isfile(fs.join(root, 'a', 'x.txt'))
  assert not fs.isfile(fs.join(root, 'a')) and not fs.exists(fs.join(root, 'nothing'))
  assert sorted(fs.listdir(fs.join(root, 'a'))) == ['b.bin', 'x.txt']
  assert fs.glob(fs.join(root, 'a', '*.txt')) == [fs.join(root, 'a', 'x.txt')]
  assert fs.getsize(fs.join(root, 'a', 'b.bin')) == 2
  with fs.open_binary(fs.join(root, 'a', 'x.txt')) as f:  # what the corpus reader uses
    assert f.readline(100) == b'one\n' and f.readline(100) == b'two\n'
    assert f.readline(100) == b'y' * 100 and f.tell() == 108
    assert f.seek(4) == 4 and f.readline(100) == b'two\n' and f.tell() == 8  # (a corpus's parts)
    f.seek(-3, os.SEEK_END)
    assert f.read() == b'yy\n'
  fs.replace(fs.join(root, 'a', 'b.bin'), fs.join(root, 'c.bin'))
  assert fs.read_bytes(fs.join(root, 'c.bin')) == b'\x00\x01'
  assert not fs.exists(fs.join(root, 'a', 'b.bin'))
  fs.copytree(fs.join(root, 'a'), fs.join(root, 'copy'))
  assert fs.read_text(fs.join(root, 'copy', 'x.txt')).startswith('one\ntwo\n')
  assert sorted(fs.walk_files(root)) == [fs.join(root, 'a', 'x.txt'), fs.join(root, 'c.bin'),
                                         fs.join(root, 'copy', 'x.txt')]
  with pytest.raises(OSError, match='not empty'):
    fs.rmdir(fs.join(root, 'copy'))
  with pytest.raises(FileNotFoundError):
    fs.read_text(fs.join(root, 'missing.txt'))
  with pytest.raises(FileNotFoundError, match='bucket gs://no-such-bucket does not exist'):
    fs.check_access('gs://no-such-bucket/x')
  fs.rmtree(root)
  assert not fs.exists(fs.join(root, 'copy', 'x.txt'))


@pytest.mark.fast
def test_a_scheme_no_bucket_library_reaches_is_refused_in_one_sentence():
  for call in (fs.exists, fs.listdir, fs.open, fs.glob):
    for scheme in ('hdfs', 's3', 'az'):  # (s3://, az://: tensorflow-io's, not installed here)
      with pytest.raises(UserError, match=rf'^{scheme}://n/x: {scheme}:// paths are not supported '
                         r"\(buckets are gs://\); give a local path or a bucket's \(copy the "
                         r'files there or here first\)$'):
        call(f'{scheme}://n/x')


def test_records_in_a_bucket_are_the_bytes_of_local_records(bucket_records, records_dir):
  """Built into the bucket they hold what the same settings build locally: the same shards."""
  meta = records.read_metadata(bucket_records)
  records.verify(bucket_records, meta)
  local = records.read_metadata(records_dir)
  assert meta['splits'] == local['splits']
  assert meta['vocab_fingerprint'] == local['vocab_fingerprint']
  for name in meta['splits']['train']['files']:
    assert fs.read_bytes(fs.join(bucket_records, name)) == fs.read_bytes(
        os.path.join(records_dir, name))
  assert not [n for n in fs.listdir(bucket_records) if '.tmp' in n]


def test_a_corpus_in_a_bucket_is_read_in_parts_into_the_records_of_the_same_files_here(
    tmp_path, corpus_file):
  """A glob of files in the bucket, cut into byte ranges that each worker seeks to, builds the
  shards that the same files build from a local folder."""
  from electra_jax.data import prepare as prepare_lib
  text = open(corpus_file, encoding='utf-8').read()
  half = text.index('\n', len(text) // 2) + 1
  os.makedirs(tmp_path / 'corpus')
  for name, piece in (('a.txt', text[:half]), ('b.txt', text[half:])):
    (tmp_path / 'corpus' / name).write_text(piece, encoding='utf-8')
    fs.write_atomic(f'{BUCKET}/corpus/{name}', piece)
  built = {}
  for where, source, workers in (('here', str(tmp_path / 'corpus' / '*.txt'), 1),
                                 ('bucket', f'{BUCKET}/corpus/*.txt', 2)):
    settings = records.Settings(source=source, max_seq_length=32, eval_fraction=0.1,
                                num_shards=4, num_eval_shards=2, vocab_size=96)
    built[where] = str(tmp_path / where)
    meta = prepare_lib.records_folder(settings, built[where], num_workers=workers,
                                      log=lambda *_: None)
    assert meta['rule'] == 'parts' and meta['parts'] > 2 * 2, meta.get('parts')
  names = sorted(n for n in os.listdir(built['here']) if n.endswith('.tfrecord'))
  assert names == sorted(n for n in os.listdir(built['bucket']) if n.endswith('.tfrecord'))
  assert len(names) == 4 + 2
  for name in names + ['vocab.model']:
    with open(os.path.join(built['here'], name), 'rb') as a, open(
        os.path.join(built['bucket'], name), 'rb') as b:
      assert a.read() == b.read(), name


def test_pretraining_in_a_bucket_survives_sigkill_bit_identically_and_exports(
    tmp_path, bucket_records, gcs):
  config_file = run_config_file(tmp_path, bucket_records, train_steps=6, save_every=2)
  killed, straight = f'{BUCKET}/runs/killed', str(tmp_path / 'straight')
  kill_at = random.randint(3, 5)  # between saves or just after one
  proc = subprocess.Popen(launch_command(config_file, killed), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=gcs)
  for line in proc.stdout:
    if f' step {kill_at}/' in f' {line}':
      break
  proc.kill()  # SIGKILL: no handler, no last save
  proc.wait()
  ckpt = checkpoint_lib.Checkpointer(fs.join(killed, 'checkpoints'))
  committed = ckpt.latest_step()
  ckpt.close()
  done = subprocess.run(launch_command(config_file, killed), capture_output=True, text=True,
                        env=gcs, check=False, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  if committed:
    assert f'resumed from {killed}/checkpoints/{committed} ' in done.stdout, done.stdout[-2000:]
  # The uninterrupted run, local and in this process (records read from the bucket all the same).
  pretrain.train_and_evaluate(load_config(config_file), straight, log=lambda *_: None)
  assert_same_states(load_config(config_file), (killed, straight), 6, f'killed at step {kill_at}')
  listing = set(fs.listdir(killed))
  assert {'config.json', 'metrics.jsonl', 'summary.json', 'curves.png', 'tensorboard',
          'checkpoints'} <= listing, listing
  summary = json.loads(fs.read_text(fs.join(killed, 'summary.json')))  # strict JSON
  assert summary['step'] == 6 and summary['checkpoint'] == f'{killed}/checkpoints/6'
  assert fs.read_bytes(fs.join(killed, 'curves.png')).startswith(b'\x89PNG')

  # export from the bucket into the bucket, loaded by HF transformers (from a local copy) where
  # the test extra's torch is installed
  out = f'{BUCKET}/exports/killed'
  done = _run([os.path.join(ROOT, 'launch', 'export.py'), f'--workdir={killed}', f'--out={out}',
               *(['--check'] if HAS_HF else [])], gcs)
  assert done.returncode == 0, done.stderr[-3000:]
  assert sorted(fs.listdir(out)) == ['discriminator', 'generator']
  diffs = [float(l.split('max |ours - HF| ')[1].split()[0]) for l in done.stdout.splitlines()
           if 'max |ours - HF|' in l]
  assert len(diffs) == 2 * HAS_HF and max(diffs, default=0) < 1e-3, done.stdout


def test_finetuning_with_data_and_workdir_in_a_bucket(tmp_path, bucket_records, gcs):
  from electra_jax.finetune import config as ft_config
  from electra_jax.finetune import run
  pretrained = f'{BUCKET}/runs/short'
  pretrain.train_and_evaluate(test_config(**{'data.records': bucket_records}), pretrained,
                               log=lambda *_: None)
  rng = random.Random(0)
  for split, n in (('train', 64), ('dev', 32)):
    rows = []
    for _ in range(n):
      label = rng.randint(0, 1)
      rows.append(f'{"cat mat" if label else "dog tree"} {rng.randint(0, 9)}\t{label}\n')
    fs.write_atomic(f'{BUCKET}/own/{split}.tsv', 'text\tlabel\n' + ''.join(rows))
  cfg = ft_config.default_config()
  cfg.task.update(name='own', train=f'{BUCKET}/own/train.tsv', dev=f'{BUCKET}/own/dev.tsv',
                  text_a='text', label='label')
  cfg.update(init=pretrained, num_seeds=1, batch_size=16, eval_batch_size=16, max_seq_length=32,
             epochs=2.0)
  workdir = f'{BUCKET}/finetune/own'
  result = run.finetune(cfg, workdir, log=lambda *_: None)
  assert 'dev' in result['seeds'][0]
  saved = json.loads(fs.read_text(fs.join(workdir, 'results.json')))
  assert saved['init'].startswith(f'{pretrained}/checkpoints/')
  assert {'config.json', 'results.md', 'results.json', 'seed_0'} <= set(fs.listdir(workdir))
  assert fs.listdir(fs.join(workdir, 'seed_0', 'checkpoints'))


def test_two_processes_write_one_checkpoint_to_the_bucket_and_one_process_resumes_it(
    tmp_path, bucket_records, gcs):
  workdir = f'{BUCKET}/runs/two_processes'
  config_file = run_config_file(tmp_path, bucket_records, train_steps=2, save_every=2)
  cluster = [os.path.join(ROOT, 'launch', 'local_cluster.py'), '--num_processes=2',
             '--devices_per_process=4', f'--log_dir={tmp_path / "logs"}', '--',
             os.path.join(ROOT, 'launch', 'train.py'), f'--config={config_file}',
             f'--workdir={workdir}']
  done = _run(cluster, gcs, timeout=900)
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
  assert fs.listdir(fs.join(workdir, 'checkpoints')) == ['2']
  single = launch_command(config_file, workdir)[1:] + ['--config.train_steps=4']
  done = _run(single, gcs)
  assert done.returncode == 0, done.stderr[-3000:]
  assert f'resumed from {workdir}/checkpoints/2 ' in done.stdout, done.stdout[-2000:]
  assert 'steps 2 -> 4' in done.stdout
  assert sorted(fs.listdir(fs.join(workdir, 'checkpoints'))) == ['2', '4']


def test_a_missing_bucket_missing_credentials_and_an_object_as_folder_are_one_line(
    tmp_path, bucket_records, gcs):
  config_file = run_config_file(tmp_path, bucket_records)
  train = lambda workdir, env: _run(launch_command(config_file, workdir)[1:], env)

  done = train('gs://no-such-bucket/run', gcs)
  assert done.returncode == 2, done.stderr[-2000:]
  assert _last_line(done) == ('error: the bucket gs://no-such-bucket does not exist '
                              '(gs://no-such-bucket/run); create it (`gcloud storage buckets '
                              'create gs://no-such-bucket`) or fix the path')
  done = _run([os.path.join(ROOT, 'launch', 'prepare_data.py'), '--corpus=builtin',
               '--output=gs://no-such-bucket/records'], gcs)
  assert done.returncode == 2 and 'gs://no-such-bucket does not exist' in _last_line(done)

  fs.write_atomic(f'{BUCKET}/a_file', 'not a folder')
  done = train(f'{BUCKET}/a_file', gcs)
  assert done.returncode == 2 and _last_line(done) == (
      f'error: --workdir {BUCKET}/a_file is a file; give a folder'), done.stderr[-2000:]
  done = _run([os.path.join(ROOT, 'launch', 'prepare_data.py'), '--corpus=builtin',
               f'--output={BUCKET}/a_file'], gcs)
  assert done.returncode == 2 and _last_line(done).startswith(
      f'error: --output {BUCKET}/a_file is a file'), done.stderr[-2000:]

  # no credentials: no token, no key file, no gcloud login, no metadata server
  bare = {k: v for k, v in gcs.items() if k not in ('GOOGLE_AUTH_TOKEN_FOR_TESTING',
                                                     'STORAGE_EMULATOR_HOST',
                                                     'GOOGLE_APPLICATION_CREDENTIALS')}
  bare.update(HOME=str(tmp_path / 'home'), GCE_METADATA_HOST='127.0.0.1:9',
              GCE_METADATA_IP='127.0.0.1:9', CLOUDSDK_CONFIG=str(tmp_path / 'gcloud'))
  done = train(f'{BUCKET}/runs/no_credentials', bare)
  assert done.returncode == 2, done.stderr[-2000:]
  assert _last_line(done).startswith(f'error: cannot access {BUCKET}/runs/no_credentials: no '
                                     'Google Cloud credentials were found; run `gcloud auth '
                                     'application-default login`')
  assert not fs.exists(f'{BUCKET}/runs/no_credentials')


@pytest.mark.fast
def test_a_workdir_in_a_bucket_is_held_by_one_run():
  """The lock's exclusive create is GCS's precondition (ifGenerationMatch=0): of runs started
  together one gets it, the others name it; a write on a generation that changed is refused."""
  import tensorstore as ts
  import threading
  from electra_jax.train import workdir as workdir_lib
  folder = f'{BUCKET}/locked/w{random.randrange(1 << 30)}'
  store = ts.KvStore.open(folder + '/').result()
  absent = store.read('probe').result().stamp.generation
  assert store.write('probe', b'a', if_equal=absent).result().generation
  assert not store.write('probe', b'b', if_equal=absent).result().generation  # exists: refused
  assert store.read('probe').result().value == b'a'
  won, refused = [], []

  def start():
    try:
      won.append(workdir_lib.acquire(folder, 'pre-training'))
    except workdir_lib.Busy as e:
      refused.append(str(e))

  threads = [threading.Thread(target=start) for _ in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert len(won) == 1 and len(refused) == 3, refused
  assert all(f'{folder} is in use by a pre-training run (pid {os.getpid()}' in r for r in refused)
  won[0].release()
  assert store.read(workdir_lib.NAME).result().state == 'missing'


@pytest.mark.parametrize('stop', ['SIGTERM', 'deadline'])
def test_a_run_whose_storage_dies_ends_within_its_deadline_and_honours_sigterm(
    tmp_path, records_dir, stop):
  """The storage server of a run's bucket dies mid-run (a server of this test's own, killed): the
  next write waits on TensorFlow's retries, which took minutes per call. SIGTERM ends the run
  within seconds saying why, and without a signal the run says it waits, then ends at the storage
  deadline with exit 75, instead of hanging silent."""
  proc, info = start_gcs_server(tmp_path)
  env = {**CHILD_ENV, **info['env'], 'ELECTRA_JAX_STORAGE_DEADLINE_S': '20'}
  config = run_config_file(tmp_path, records_dir, train_steps=100000, save_every=2)
  child = subprocess.Popen(launch_command(config, f'{BUCKET}/dies'), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=env)
  try:
    lines = []
    for line in child.stdout:
      lines.append(line)
      if ' step 4/' in line:
        break
    assert child.poll() is None, ''.join(lines)[-3000:]
    proc.kill()
    proc.wait()
    time.sleep(2)  # the next write is waiting for the server by now
    start = time.monotonic()
    if stop == 'SIGTERM':
      child.send_signal(signal.SIGTERM)
    rest = child.communicate(timeout=120)[0]
    took = time.monotonic() - start
  finally:
    child.kill()
    proc.kill()
  said = [l for l in rest.splitlines() if l.strip()]
  if stop == 'SIGTERM':
    assert child.returncode == 143 and took < 15, (took, rest[-3000:])
    assert re.match(rf'SIGTERM received while waiting \d+ s for {BUCKET}/dies/\S+, which does not '
                    r'answer: stopped without saving; the checkpoints saved before stay', said[-1]
                    ), rest[-3000:]
  else:
    assert child.returncode == 75 and 15 < took < 40, (took, rest[-3000:])
    assert any(re.match(rf'waiting for {BUCKET}/dies/\S+: no answer for [5-9] s', l)
               for l in said), rest[-3000:]
    assert re.match(rf'error: {BUCKET}/dies/\S+ has not answered for 2\d s \(the storage or the '
                    r'network to it is down\); stopped', said[-1]), rest[-3000:]
