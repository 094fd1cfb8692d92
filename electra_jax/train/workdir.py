"""A workdir, made and held by one run: `<workdir>/run.lock` names the run that holds it.

    with workdir.claim(path, 'pre-training'):  # a key of RUN_KINDS
      ...  # nothing else writes here until the block ends

`claim` makes the folder (one sentence when it is a file or cannot be written), takes its lock, and
when the run is refused (a UserError) removes the folder again if it made it and it stayed empty.

The lock is a small JSON record (host, pid, command, since, heartbeat) created only where none
exists: a conditional write through TensorStore's key-value store, which is an exclusive create on
a local disk and `ifGenerationMatch=0` on a bucket, so of two runs started together exactly one
gets it. The holder rewrites its record every HEARTBEAT_S seconds (conditionally on its own last
write). Another run takes a lock over only when it is stale: its process is gone (the same host)
or its heartbeat is older than STALE_S (another host, a bucket); a live process on the same host is
never gone, however long it was stopped. A run killed with SIGKILL thus blocks its workdir not at
all on its own host and for STALE_S from another. A run whose lock was taken over while it was
stopped stops before it writes again (`confirm_held`, before each of the loop's writes).

In a run of several processes, process 0 holds the lock and every process hears its verdict.
"""

import contextlib
import datetime
import json
import os
import socket
import sys
import threading
import time
import uuid

import jax

from electra_jax import UserError
from electra_jax.storage import fs
from electra_jax.train import distributed

NAME = 'run.lock'
HEARTBEAT_S = 30.0
STALE_S = 180.0


class Busy(UserError):
  """The workdir is held by another run that is alive."""


def _store(workdir: str):
  """TensorStore's key-value store of the workdir (the lock's conditional writes), or None where
  TensorStore has no driver for the path's scheme."""
  return fs.kvstore(workdir)


def _process_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # alive, under another user
    return True
  return True


def _proc_stat(pid: int) -> list[str] | None:
  """The fields of /proc/<pid>/stat after the command's name (Linux), or None."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()
  except (OSError, IndexError):
    return None


def _started(pid: int) -> int | None:
  """When process `pid` started, in clock ticks since boot (Linux), or None where unknown: with
  the pid, it names one process, even after the pid is given to another."""
  fields = _proc_stat(pid)
  return int(fields[19]) if fields and len(fields) > 19 and fields[19].isdigit() else None


def _stopped(pid: int) -> bool:
  fields = _proc_stat(pid)
  return fields is not None and bool(fields) and fields[0] in ('T', 't')


def stale(record: dict, now: float | None = None, workdir: str = '') -> bool:
  """Whether a lock record's run is gone: on the same host, its process has ended (a live one is
  never gone, however old its heartbeat: it may be stopped, by Ctrl-Z or a suspended machine), or
  the lock was copied with the folder from another one a run of this host holds; on another host
  or in a bucket, its heartbeat is older than STALE_S."""
  now = time.time() if now is None else now
  if record.get('host') == socket.gethostname() and isinstance(record.get('pid'), int):
    pid = record['pid']
    if not _process_alive(pid):
      return True
    started = record.get('started')
    if started is not None and _started(pid) not in (None, started):
      return True  # the pid now names another process
    return bool(workdir) and record.get('workdir', _where(workdir)) != _where(workdir)
  return now - float(record.get('heartbeat', 0)) > STALE_S


def _where(workdir: str) -> str:
  """The workdir as a lock names it: a local folder's real path, or the URL."""
  return workdir if fs.remote(workdir) else os.path.realpath(workdir)


def describe(record: dict, lock_file: str = '') -> str:
  """'a pre-training run (pid 4242 on host-a, since 2026-...)' of a lock record."""
  where = f'; lock file {lock_file}' if lock_file else ''
  return (f'a {record.get("what", "")} run (pid {record.get("pid", "?")} on '
          f'{record.get("host", "?")}, since {record.get("since", "?")}{where})'
          ).replace('a  run', 'a run')


class Lost(UserError):
  """Another run took this run's workdir over (its heartbeat stopped for longer than STALE_S)."""


_HELD: set = set()  # the locks this process holds


def confirm_held():
  """Raises Lost before a write where another run has taken over a workdir this process holds:
  free while the heartbeat keeps up, one look at the lock file when it is late (this process was
  stopped, or its machine suspended)."""
  for held in list(_HELD):
    held.confirm()


class _Lock:
  """A held lock: its store, key, our record and the generation of our last write."""

  def __init__(self, store, record: dict, generation: bytes, workdir: str = ''):
    self.store, self.record, self.generation = store, record, generation
    self.workdir, self.lost = workdir, ''
    self.confirmed = time.time()  # (wall time: it runs on while a process is stopped or suspended)
    self._writing = threading.Lock()
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._beat, daemon=True, name='workdir-lock')
    self._thread.start()
    _HELD.add(self)

  def _refresh(self) -> bool:
    """Rewrites our record where it is still ours; False once it is not (or a write failed)."""
    with self._writing:
      if self.lost:
        return False
      self.record['heartbeat'] = time.time()
      try:
        stamp = self.store.write(NAME, json.dumps(self.record),
                                 if_equal=self.generation).result()
      except Exception as e:
        print(f'warning: could not refresh the workdir lock ({" ".join(str(e).split())[:200]}); '
              'retrying', file=sys.stderr, flush=True)
        return False
      if not stamp.generation:  # someone else's record: our run was taken for stale
        try:
          holder = json.loads(self.store.read(NAME).result().value)
        except Exception:
          holder = {}
        taker = describe(holder) if isinstance(holder, dict) and holder else 'another run'
        self.lost = (f'{taker} took over {self.workdir or "this workdir"} while this run was '
                     f'silent for {time.time() - self.confirmed:.0f} s (stopped, or its machine '
                     f'suspended; a lock waits {STALE_S:.0f} s for its heartbeat); this run '
                     'stopped before writing there again: let that run finish, or stop it and '
                     'run this command again to resume')
        print(f'warning: {self.lost}', file=sys.stderr, flush=True)
        return False
      self.generation, self.confirmed = stamp.generation, time.time()
      return True

  def _beat(self):
    while not self._stop.wait(HEARTBEAT_S) and not self.lost:
      self._refresh()

  def confirm(self):
    """Raises Lost where another run holds our workdir now; looks at the lock file only when the
    heartbeat is late."""
    if not self.lost and time.time() - self.confirmed > 1.5 * HEARTBEAT_S:
      self._refresh()
    if self.lost:
      raise Lost(self.lost)

  def release(self):
    _HELD.discard(self)
    self._stop.set()
    self._thread.join()
    if self.lost:
      return  # the lock is another run's
    try:
      self.store.write(NAME, None, if_equal=self.generation).result()
    except Exception:
      pass  # a lock left behind is stale once this process is gone


def acquire(workdir: str, what: str, attempts: int = 5) -> _Lock | None:
  """Takes the lock of `workdir` for this process, or raises Busy naming the holder. None where
  the path's storage has no conditional writes (the run goes on unlocked, with a warning)."""
  store = _store(workdir)
  if store is None:
    print(f'warning: {workdir} cannot be locked (no conditional writes for its scheme); make sure '
          'no other run uses it', file=sys.stderr, flush=True)
    return None
  now = time.time()
  since = datetime.datetime.fromtimestamp(now).astimezone().isoformat(timespec='seconds')
  record = {'what': what, 'host': socket.gethostname(), 'pid': os.getpid(),
            'started': _started(os.getpid()), 'workdir': _where(workdir), 'since': since,
            'heartbeat': now, 'token': uuid.uuid4().hex, 'command': ' '.join(sys.argv)[:500]}
  for _ in range(attempts):
    current = store.read(NAME).result()
    if current.state == 'value':
      try:
        holder = json.loads(current.value)
      except ValueError:
        holder = {}  # written whole or not at all, so not ours: a damaged file, taken over
      if not isinstance(holder, dict):
        holder = {}
      if holder and not stale(holder, workdir=workdir):
        raise _busy(workdir, holder)
    stamp = store.write(NAME, json.dumps(record), if_equal=current.stamp.generation).result()
    if stamp.generation:
      if current.state == 'value':
        copied = holder.get('workdir', _where(workdir)) != _where(workdir)
        gone = (f'held the lock of {describe(holder)} in {holder["workdir"]}, copied with the '
                'folder' if holder and copied else
                f'was locked by {describe(holder)}, which is gone' if holder else
                'held an unreadable lock file')
        print(f'note: {workdir} {gone}; taking it over',
              file=sys.stderr, flush=True)
      return _Lock(store, record, stamp.generation, workdir)
    time.sleep(0.05)  # another run wrote first: read whose it is
  raise Busy(f'could not lock {workdir}: its lock file {fs.join(workdir, NAME)} keeps changing; '
             'is another run starting there?')


def _busy(workdir: str, holder: dict) -> Busy:
  pid = holder.get('pid')
  if holder.get('host') == socket.gethostname() and isinstance(pid, int) and _stopped(pid):
    return Busy(f'{workdir} is in use by {describe(holder, fs.join(workdir, NAME))}, which is '
                f'stopped (Ctrl-Z, or SIGSTOP): resume it (`fg` in its shell, or kill -CONT {pid}) '
                f'or end it (kill {pid}), or use another --workdir')
  return Busy(f'{workdir} is in use by {describe(holder, fs.join(workdir, NAME))}: wait for it to '
              'end or stop it, or use another --workdir')


def check_free(workdir: str):
  """Refuses (Busy) a workdir that a live run holds, before a run reads its inputs (`claim` asks
  again, atomically)."""
  try:
    holder = json.loads(fs.read_text(fs.join(workdir, NAME)))
  except (OSError, ValueError):
    return  # no lock, or one being written or damaged: claim decides
  if isinstance(holder, dict) and holder and not stale(holder, workdir=workdir):
    raise _busy(workdir, holder)


def read_config(path: str):
  """The config.json of the run in workdir `path` (a dict), or one sentence when it is damaged:
  the run's own command writes it again and resumes from the checkpoints."""
  return fs.read_json(fs.join(path, 'config.json'),
                      f'delete it and run the command that made {path} again: it writes '
                      'config.json again and resumes from its checkpoints', want=dict)


def check_place(path: str):
  """Refuses (UserError) a --workdir that is empty or a file, before anything is read."""
  if not str(path).strip():
    raise UserError('--workdir is empty; give a folder')
  if why := fs.broken_link(path):
    raise UserError(f'--workdir {path} is a symbolic link that leads nowhere ({why}); give a '
                    'folder, or a link to one')
  if fs.exists(path) and not fs.isdir(path):
    raise UserError(f'--workdir {path} is a file; give a folder')


def check_own_folder(path: str):
  """Refuses (UserError) a --workdir that is a place of other files and holds no run: the root
  folder, the home folder, the current folder or a mount point (`--workdir=$HOME/$RUN` with RUN
  unset), where a run would mix its checkpoints, logs and config.json with them."""
  if fs.remote(path) or not fs.isdir(path) or kind_of(path) is not None:
    return
  real = os.path.realpath(path)
  place = ('the root folder' if real == os.path.realpath(os.sep) else
           'your home folder' if real == os.path.realpath(os.path.expanduser('~')) else
           'the current folder' if real == os.path.realpath(os.getcwd()) else
           'a mount point' if os.path.ismount(real) else '')
  theirs = sorted(os.listdir(real), key=lambda n: (n.startswith('.'), n))  # (dotfiles count)
  if place and theirs:
    raise UserError(f'--workdir {path} is {place} and holds files of its own '
                    f'({", ".join(theirs[:4])}{", ..." if len(theirs) > 4 else ""}); give the run '
                    'a folder of its own, e.g. '
                    f'--workdir={os.path.join(path, "electra_run")}')


def make(path: str):
  """Makes the folder `path` (and its parents), or one sentence on why it cannot be written."""
  check_place(path)
  try:
    fs.makedirs(path, exist_ok=True)
    probe = fs.join(path, f'.write_test.{jax.process_index()}.{os.getpid()}')
    with fs.open(probe, 'w') as f:
      f.write('ok')
    fs.remove(probe)
  except OSError as e:
    raise UserError(f'cannot write to --workdir {path} ({e.strerror or e}); choose a folder you '
                    'can write to') from None


def check_entries(path: str, folders: tuple = (), files: tuple = ()):
  """Refuses (UserError) a workdir where a run would meet a file in place of one of its `folders`
  or a folder in place of one of its `files`: before it writes anything, not at its first save."""
  for name in folders:
    if fs.exists(fs.join(path, name)) and not fs.isdir(fs.join(path, name)):
      raise UserError(f'{fs.join(path, name)} is a file where the run keeps its {name} (a folder); '
                      'move the file away')
  for name in files:
    if fs.isdir(fs.join(path, name)):
      raise UserError(f'{fs.join(path, name)} is a folder where the run writes its file {name}; '
                      'move the folder away')


def require_checkpoint(path: str, what: str = 'pre-training'):
  """Refuses (UserError) a run's workdir that holds no checkpoint yet, before its other files
  (a records folder built later, or not at all) are looked for."""
  folder = fs.join(path, 'checkpoints')
  if not (fs.isdir(folder) and any(n.isdigit() for n in fs.listdir(folder))):
    raise UserError(f'{path} holds no checkpoint yet: its {what} has not saved one (it saves at '
                    f'save_every steps, at its end and when stopped); run it (the same command, '
                    f'--workdir={path}) until it has')


# What a workdir holds, recorded in KIND_FILE when a run first claims it, and the command of each.
RUN_KINDS = {'pre-training': 'launch/train.py', 'fine-tuning': 'launch/finetune.py',
             'fine-tuning search': 'launch/finetune.py with --config.search',
             'comparison': 'launch/compare.py'}
KIND_FILE = 'workdir.json'


def kind_of(path: str) -> str | None:
  """The kind of run `path` holds (a key of RUN_KINDS), or None where it holds none (absent,
  empty, a folder of other files). Workdirs made before KIND_FILE existed are known by their
  config.json."""
  if not fs.isdir(path):
    return None
  recorded = fs.join(path, KIND_FILE)
  if fs.isfile(recorded):
    record = fs.read_json(recorded, f'delete it: the next run in {path} writes it again')
    if isinstance(record, dict) and record.get('kind') in RUN_KINDS:
      return record['kind']
  config_path = fs.join(path, 'config.json')
  if fs.isfile(config_path):
    try:
      with fs.open(config_path) as f:
        config = json.load(f)
    except (OSError, ValueError):
      config = None
    if isinstance(config, dict) and 'objective' in config:
      return 'pre-training'
    if isinstance(config, dict) and 'task' in config:
      return 'fine-tuning search' if config.get('search') else 'fine-tuning'
  if fs.isfile(fs.join(path, 'comparison.md')):
    return 'comparison'
  return None


def check_kind(path: str, kind: str, flag: str = '--workdir'):
  """Refuses (UserError) a workdir that holds a run of another kind than `kind`."""
  held = kind_of(path)
  if held is None or held == kind:
    return
  hint = {('pre-training', 'fine-tuning'): f' (--init={path} starts it from that pre-training)',
          ('pre-training', 'fine-tuning search'): f' (--init={path} starts it from that '
                                                  'pre-training)'}.get((held, kind), '')
  raise UserError(f'{flag} {path} holds a {held} ({RUN_KINDS[held]}), and a {kind} there would '
                  f'overwrite it; give the {kind} a folder of its own{hint}')


@contextlib.contextmanager
def claim(path: str, kind: str, mode: str = ''):
  """The workdir `path`, made, for this run of `kind` (a key of RUN_KINDS) alone while inside
  (process 0 holds the lock; every process learns whether it got it). A workdir holding another
  kind of run is refused before anything is written; the kind is recorded on the first claim. A
  run refused, failed or stopped before it wrote anything leaves nothing behind: neither the
  record of the kind nor the folder if it made it."""
  check_kind(path, kind)
  check_own_folder(path)
  existed = fs.isdir(path)
  make(path)
  held, error, recorded = None, None, None
  try:
    if distributed.is_main():
      try:
        held = acquire(path, f'{kind}{f" ({mode})" if mode else ""}')
      except Busy as e:
        error = e
    if not distributed.all_agree(error is None, 'workdir_lock'):
      raise error or Busy(f'process 0 could not lock {path}; see its output')
    try:
      check_kind(path, kind)  # (again: another run may have claimed it first)
      if distributed.is_main() and not fs.exists(fs.join(path, KIND_FILE)):
        recorded = set(fs.listdir(path)) - {NAME}  # what the run found
        fs.write_atomic(fs.join(path, KIND_FILE), json.dumps({'kind': kind}))
      yield held
    finally:
      if held is not None:
        held.release()
  except BaseException:  # refused, failed or stopped before it wrote anything: nothing claimed
    if distributed.is_main():
      with contextlib.suppress(OSError):  # (the run's own error is the one to tell)
        if recorded is not None and set(fs.listdir(path)) - {KIND_FILE, NAME} == recorded:
          fs.remove(fs.join(path, KIND_FILE))
        if not existed and fs.isdir(path) and not fs.listdir(path):
          fs.rmdir(path)
    raise
