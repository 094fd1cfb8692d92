"""One run per workdir: the lock's exclusive create, its holder named, a lock left by a run that is
gone taken over (its process, or its heartbeat), and the commands refusing a held workdir."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import CHILD_ENV, ROOT, run_config_file, test_config
from electra_jax import UserError
from electra_jax.pretraining import run as pretrain
from electra_jax.train import workdir as workdir_lib


def _record(path, **fields):
  with open(os.path.join(path, workdir_lib.NAME), 'w') as f:
    json.dump({'what': 'pre-training', 'host': socket.gethostname(), 'pid': os.getpid(),
               'since': '2026-01-01T00:00:00+00:00', 'heartbeat': time.time(), **fields}, f)


@pytest.mark.fast
def test_the_lock_is_held_by_one_run_and_names_it(tmp_path):
  held = workdir_lib.acquire(str(tmp_path), 'pre-training')
  record = json.loads((tmp_path / workdir_lib.NAME).read_text())
  assert record['pid'] == os.getpid() and record['host'] == socket.gethostname()
  with pytest.raises(workdir_lib.Busy) as refused:
    workdir_lib.acquire(str(tmp_path), 'fine-tuning')
  message = str(refused.value)
  assert (f'is in use by a pre-training run (pid {os.getpid()} on {socket.gethostname()}, since '
          f'{record["since"]}' in message and 'use another --workdir' in message), message
  held.release()
  assert not os.listdir(tmp_path)  # released: no file left
  workdir_lib.acquire(str(tmp_path), 'pre-training').release()


@pytest.mark.fast
def test_of_runs_started_together_exactly_one_gets_the_lock(tmp_path):
  won, refused = [], []

  def start():
    try:
      won.append(workdir_lib.acquire(str(tmp_path), 'pre-training'))
    except workdir_lib.Busy:
      refused.append(1)

  threads = [threading.Thread(target=start) for _ in range(8)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert len(won) == 1 and len(refused) == 7
  won[0].release()


@pytest.mark.fast
def test_a_lock_whose_run_is_gone_is_taken_over(tmp_path, capsys):
  dead = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                        capture_output=True, text=True, check=True)
  _record(tmp_path, pid=int(dead.stdout))  # this host, a process that has ended
  workdir_lib.acquire(str(tmp_path), 'pre-training').release()
  assert f'pid {int(dead.stdout)}' in capsys.readouterr().err
  _record(tmp_path, host='another-host', pid=1,  # another host, no heartbeat for too long
          heartbeat=time.time() - workdir_lib.STALE_S - 5)
  workdir_lib.acquire(str(tmp_path), 'pre-training').release()
  _record(tmp_path, host='another-host', pid=1, heartbeat=time.time() - 10)  # alive there
  with pytest.raises(workdir_lib.Busy, match='pid 1 on another-host'):
    workdir_lib.acquire(str(tmp_path), 'pre-training')
  (tmp_path / workdir_lib.NAME).write_text('{"what": "pre-')  # a foreign, damaged file
  workdir_lib.acquire(str(tmp_path), 'pre-training').release()
  assert 'unreadable lock file' in capsys.readouterr().err


@pytest.mark.fast
def test_the_home_root_or_current_folder_is_no_workdir_unless_it_holds_a_run(tmp_path,
                                                                            monkeypatch):
  """`--workdir=$HOME/$RUN` with RUN unset: the home folder, refused before anything is written
  (a run there wrote config.json, seed_0/, results.md among the user's files)."""
  home = tmp_path / 'home'
  home.mkdir()
  (home / '.bashrc').write_text('# the user\'s')
  monkeypatch.setenv('HOME', str(home))
  command = [sys.executable, os.path.join(ROOT, 'launch', 'train.py'),
             f'--config={os.path.join(ROOT, "configs", "tiny.py")}', f'--workdir={home}/']
  done = subprocess.run(command, capture_output=True, text=True, env={**CHILD_ENV,
                        'HOME': str(home)}, timeout=300, check=False)
  assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == (
      f'error: --workdir {home}/ is your home folder and holds files of its own (.bashrc); give '
      f'the run a folder of its own, e.g. --workdir={home}/electra_run'), done.stderr[-2000:]
  assert os.listdir(home) == ['.bashrc']
  with pytest.raises(UserError, match='is the root folder and holds files of its own'):
    workdir_lib.check_own_folder('/')
  monkeypatch.chdir(home)
  with pytest.raises(UserError, match='is your home folder'):
    workdir_lib.check_own_folder('.')
  workdir_lib.check_own_folder(str(home / 'run'))  # a folder of its own (absent, or empty)
  (home / 'run').mkdir()
  workdir_lib.check_own_folder(str(home / 'run'))
  (home / workdir_lib.KIND_FILE).write_text('{"kind": "pre-training"}')  # it holds a run
  workdir_lib.check_own_folder(str(home))


@pytest.mark.fast
def test_a_copy_of_a_held_workdir_is_not_held(tmp_path, capsys):
  """A workdir copied while its run goes on carries the lock file of that run, which holds the
  original folder only: a run in the copy takes it over, and the original stays held."""
  first = tmp_path / 'a'
  first.mkdir()
  held = workdir_lib.acquire(str(first), 'pre-training')
  shutil.copytree(first, tmp_path / 'copy')
  workdir_lib.check_free(str(tmp_path / 'copy'))
  workdir_lib.acquire(str(tmp_path / 'copy'), 'pre-training').release()
  assert (f'held the lock of a pre-training run (pid {os.getpid()} on {socket.gethostname()}'
          in capsys.readouterr().err)
  with pytest.raises(workdir_lib.Busy):
    workdir_lib.acquire(str(first), 'pre-training')
  os.symlink(first, tmp_path / 'link')  # the same folder by another name: held
  with pytest.raises(workdir_lib.Busy):
    workdir_lib.acquire(str(tmp_path / 'link'), 'pre-training')
  held.release()


@pytest.mark.fast
def test_the_holder_keeps_its_heartbeat_and_notices_a_takeover(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(workdir_lib, 'HEARTBEAT_S', 0.05)
  held = workdir_lib.acquire(str(tmp_path), 'pre-training')
  first = json.loads((tmp_path / workdir_lib.NAME).read_text())['heartbeat']
  deadline = time.time() + 10
  while json.loads((tmp_path / workdir_lib.NAME).read_text())['heartbeat'] == first:
    assert time.time() < deadline, 'the heartbeat was not refreshed'
    time.sleep(0.02)
  _record(tmp_path, host='another-host', pid=1)  # taken for stale by another run
  deadline = time.time() + 10
  while 'took over' not in capsys.readouterr().err:
    assert time.time() < deadline, 'the takeover went unnoticed'
    time.sleep(0.05)
  held.release()  # conditional on its own record: the other run's lock stays
  assert json.loads((tmp_path / workdir_lib.NAME).read_text())['host'] == 'another-host'


def test_a_held_workdir_refuses_pretraining_and_finetuning(tmp_path, records_dir, pretrained):
  """A second run while the first holds the workdir: refused before it writes anything, in one
  line from the command (exit 2); a run past its train_steps is refused before config.json."""
  from electra_jax.finetune import config as ft_config
  from electra_jax.finetune import run as finetune_run
  held_dir = str(tmp_path / 'w')
  with workdir_lib.claim(held_dir, 'pre-training'):
    with pytest.raises(UserError, match='is in use by a pre-training run'):
      pretrain.train_and_evaluate(test_config(**{'data.records': records_dir}), held_dir,
                                  log=lambda *_: None)
    assert sorted(os.listdir(held_dir)) == [workdir_lib.NAME, workdir_lib.KIND_FILE]
    done = subprocess.run([sys.executable, os.path.join(ROOT, 'launch', 'train.py'),
                           f'--config={run_config_file(tmp_path, records_dir)}',
                           f'--workdir={held_dir}'], capture_output=True, text=True,
                          env=CHILD_ENV, timeout=300, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith(
        f'error: {held_dir} is in use by a pre-training run (pid {os.getpid()}'), done.stderr
  assert os.listdir(held_dir) == [workdir_lib.KIND_FILE]  # released; its kind recorded
  ft = ft_config.default_config()
  ft.init = pretrained
  with workdir_lib.claim(str(tmp_path / 'ft'), 'fine-tuning'):
    with pytest.raises(UserError, match='is in use by a fine-tuning run'):
      finetune_run.finetune(ft, str(tmp_path / 'ft'), log=lambda *_: None)
  copy = str(tmp_path / 'copy')
  shutil.copytree(pretrained, copy)
  with pytest.raises(UserError, match=r'is at step \d+, past train_steps=1; raise'):
    pretrain.train_and_evaluate(test_config(**{'data.records': records_dir, 'train_steps': 1}),
                                copy, log=lambda *_: None)
  with open(os.path.join(pretrained, 'config.json')) as a:
    with open(os.path.join(copy, 'config.json')) as b:
      assert a.read() == b.read()  # refused before config.json was rewritten


def _tree(path) -> dict:
  """{relative path: bytes} of every file under `path`."""
  out = {}
  for root, _, files in os.walk(path):
    for name in files:
      with open(os.path.join(root, name), 'rb') as f:
        out[os.path.relpath(os.path.join(root, name), path)] = f.read()
  return out


def test_a_workdir_holds_one_kind_of_run(tmp_path, records_dir, pretrained):
  """A fine-tuning in a pre-training's workdir (--init=W --workdir=W), a pre-training in a
  fine-tuning's: refused in one sentence before anything is written, also in a workdir made before
  the kind was recorded (known by its config.json); the claim records the kind."""
  from electra_jax.finetune import config as ft_config
  from electra_jax.finetune import run as finetune_run
  assert workdir_lib.kind_of(pretrained) == 'pre-training'
  assert json.loads((tmp_path / '..' / pretrained / workdir_lib.KIND_FILE).read_text()) == {
      'kind': 'pre-training'}
  w = str(tmp_path / 'w')
  shutil.copytree(pretrained, w)
  before = _tree(w)
  ft = ft_config.default_config()
  ft.init = w
  with pytest.raises(UserError, match=rf'^--workdir {w} holds a pre-training \(launch/train.py\), '
                                      r'and a fine-tuning there would overwrite it; give the '
                                      rf'fine-tuning a folder of its own \(--init={w} starts it'):
    finetune_run.finetune(ft, w, log=lambda *_: None)
  os.remove(os.path.join(w, workdir_lib.KIND_FILE))  # a workdir of an earlier version
  with pytest.raises(UserError, match='holds a pre-training'):
    finetune_run.finetune(ft, w, log=lambda *_: None)
  del before[workdir_lib.KIND_FILE]
  assert _tree(w) == before

  tuned = tmp_path / 'tuned'  # a fine-tuning's workdir, as far as its kind goes
  tuned.mkdir()
  (tuned / 'config.json').write_text(ft.to_json())
  with pytest.raises(UserError, match=rf'^--workdir {tuned} holds a fine-tuning '
                                      r'\(launch/finetune.py\), and a pre-training there'):
    pretrain.train_and_evaluate(test_config(**{'data.records': records_dir}), str(tuned),
                                log=lambda *_: None)
  assert os.listdir(tuned) == ['config.json']
  (tuned / workdir_lib.KIND_FILE).write_text(json.dumps({'kind': 'fine-tuning search'}))
  with pytest.raises(UserError, match='holds a fine-tuning search'):
    finetune_run.finetune(ft, str(tuned), log=lambda *_: None)


@pytest.mark.fast
def test_a_file_in_place_of_a_folder_is_refused_before_anything_is_written(tmp_path,
                                                                          records_dir):
  w = tmp_path / 'w'
  w.mkdir()
  (w / 'checkpoints').write_text('not a folder')
  with pytest.raises(UserError, match=rf'^{w}/checkpoints is a file where the run keeps its '
                                      r'checkpoints \(a folder\); move the file away$'):
    pretrain.train_and_evaluate(test_config(**{'data.records': records_dir}), str(w),
                                log=lambda *_: None)
  assert os.listdir(w) == ['checkpoints']
  os.remove(w / 'checkpoints')
  (w / 'metrics.jsonl').mkdir()
  with pytest.raises(UserError, match='metrics.jsonl is a folder where the run writes its file'):
    pretrain.train_and_evaluate(test_config(**{'data.records': records_dir}), str(w),
                                log=lambda *_: None)
  assert os.listdir(w) == ['metrics.jsonl']


@pytest.mark.fast
def test_a_stopped_run_on_this_host_keeps_its_workdir(tmp_path):
  """SIGSTOP (Ctrl-Z, a suspended machine) silences a run's heartbeat; on its own host it is alive
  and keeps the lock however old its heartbeat, and the refusal says it is stopped."""
  child = subprocess.Popen(['sleep', '60'])
  try:
    os.kill(child.pid, signal.SIGSTOP)
    deadline = time.time() + 10
    while not workdir_lib._stopped(child.pid):
      assert time.time() < deadline, 'the child did not stop'
      time.sleep(0.02)
    _record(tmp_path, pid=child.pid, started=workdir_lib._started(child.pid),
            heartbeat=time.time() - 10 * workdir_lib.STALE_S)
    with pytest.raises(workdir_lib.Busy) as refused:
      workdir_lib.acquire(str(tmp_path), 'pre-training')
    assert (f'which is stopped (Ctrl-Z, or SIGSTOP): resume it (`fg` in its shell, or kill -CONT '
            f'{child.pid}) or end it' in str(refused.value)), str(refused.value)
    with pytest.raises(workdir_lib.Busy):
      workdir_lib.check_free(str(tmp_path))
    # the same pid with another start time: the pid was given to another process since
    _record(tmp_path, pid=child.pid, started=workdir_lib._started(child.pid) - 1)
    workdir_lib.acquire(str(tmp_path), 'pre-training').release()
  finally:
    child.kill()
    child.wait()


@pytest.mark.fast
def test_a_run_whose_lock_was_taken_stops_before_it_writes_again(tmp_path, capsys):
  held = workdir_lib.acquire(str(tmp_path), 'pre-training')
  workdir_lib.confirm_held()  # its own: nothing to say
  _record(tmp_path, host='another-host', pid=7)  # taken over while this run was silent
  workdir_lib.confirm_held()  # the heartbeat is not late: no look at the file
  held.confirmed -= 200  # stopped for 200 s
  with pytest.raises(workdir_lib.Lost) as lost:
    workdir_lib.confirm_held()
  assert ('a pre-training run (pid 7 on another-host' in str(lost.value) and
          'stopped before writing there again' in str(lost.value)), str(lost.value)
  held.release()  # the other run's lock stays
  assert json.loads((tmp_path / workdir_lib.NAME).read_text())['host'] == 'another-host'
  workdir_lib.confirm_held()  # released: no longer checked
  capsys.readouterr()


def test_a_pretraining_whose_lock_is_taken_writes_nothing_more(tmp_path, records_dir):
  """The loop asks before each write: a run stopped past STALE_S and taken over by a run on
  another host ends with Lost, no checkpoint and no record after the takeover."""
  workdir = str(tmp_path / 'run')
  lines = []

  def log(line):
    lines.append(line)
    if ' step 2/' in line:  # the second step's line: another host takes the lock over now
      _record(workdir, host='another-host', pid=7)
      for held in workdir_lib._HELD:
        held.confirmed -= 10 * workdir_lib.STALE_S

  config = test_config(**{'data.records': records_dir, 'train_steps': 6, 'log_every': 1,
                          'save_every': 1, 'eval_every': 0})
  with pytest.raises(workdir_lib.Lost, match='another-host'):
    pretrain.train_and_evaluate(config, workdir, log=log)
  steps = [json.loads(l)['step'] for l in open(os.path.join(workdir, 'metrics.jsonl'))]
  assert max(steps) <= 2, steps
  saved = [int(n) for n in os.listdir(os.path.join(workdir, 'checkpoints')) if n.isdigit()]
  assert saved and max(saved) <= 2, saved
  assert json.loads(open(os.path.join(workdir, workdir_lib.NAME)).read())['host'] == 'another-host'


@pytest.mark.fast
def test_a_workdir_that_is_a_link_to_nowhere_is_one_sentence(tmp_path):
  """A loop of links said 'File exists; choose a folder you can write to'."""
  os.symlink(tmp_path / 'b', tmp_path / 'a')
  os.symlink(tmp_path / 'a', tmp_path / 'b')
  os.symlink(tmp_path / 'gone', tmp_path / 'dangling')
  for name, why in (('a', r'a loop of links: .*/b'), ('dangling', r'No such file or directory: '
                                                               r'.*/gone')):
    with pytest.raises(UserError, match=rf'^--workdir .*/{name} is a symbolic link that leads '
                       rf'nowhere \({why}\); give a folder, or a link to one$'):
      workdir_lib.make(str(tmp_path / name))
  os.symlink(tmp_path / 'real', tmp_path / 'fine')
  (tmp_path / 'real').mkdir()
  workdir_lib.make(str(tmp_path / 'fine'))  # a link to a folder: the folder
