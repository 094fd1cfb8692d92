"""Storage that stops answering: a deadline on every wait for a bucket, and stop signals honoured
while one lasts.

    with deadline.waiting('gs://b/run/metrics.jsonl'):  # a call that may wait on remote storage
      ...
    deadline.watch()    # the training loop, while it runs: the watchdog and the signals
    deadline.unwatch()

Storage clients retry a server that is gone for minutes per call (TensorFlow's, TensorStore's), and
the interpreter runs a signal's handler only once the main thread is back from such a call: a run
whose bucket went away said nothing for minutes and ignored SIGTERM. While `watch` is on, a
watchdog thread looks every second at what the main thread waits for:
- after `note_s()` without an answer, a line `waiting for <path>: no answer for N s` (again every
  `note_s()`);
- after `deadline_s()` (DEADLINE_S, or $ELECTRA_JAX_STORAGE_DEADLINE_S), the run ends with one line
  `error: <path> has not answered for N s ...` and exit status 75 (EX_TEMPFAIL: try again later);
  what was saved before stays, and the same command resumes from the last checkpoint;
- SIGTERM or Ctrl-C reach it at once (`signal.set_wakeup_fd`, written by the interpreter's C
  handler whatever the main thread does): one that arrives while the main thread waits on storage,
  and that the run has not taken up within TAKE_UP_S, ends the process with 143 / 130 without a
  save, saying so; one the run took up, whose save then waits on storage for `save_s()`, the same;
  a second signal ends the process at once, as the loop's own handler promises.
Waits in a local folder are not watched (a local disk answers or fails).
"""

import contextlib
import os
import select
import signal
import sys
import threading
import time

DEADLINE_S = 300.0  # a wait for storage longer than this ends the run
TAKE_UP_S = 5.0  # a stop signal not taken up by then, while the main thread waits on storage
EXIT_STORAGE = 75  # EX_TEMPFAIL (sysexits.h): a temporary failure, the same command later


def deadline_s() -> float:
  value = os.environ.get('ELECTRA_JAX_STORAGE_DEADLINE_S', '')
  try:
    return max(float(value), 1.0) if value else DEADLINE_S
  except ValueError:
    return DEADLINE_S


def note_s() -> float:
  return min(30.0, deadline_s() / 4)


def save_s() -> float:
  """How long a save begun after a stop signal may wait on storage."""
  return min(60.0, deadline_s() / 2)


def _remote(path) -> bool:
  text = os.fspath(path) if path is not None else ''
  return '://' in text and not text.startswith('file://')


_waits: dict[int, list] = {}  # thread id -> [path, since, depth]


@contextlib.contextmanager
def waiting(path):
  """Marks the calls inside as a wait on the storage of `path` (a URL; local paths: no mark)."""
  if not _remote(path):
    yield
    return
  ident = threading.get_ident()
  entry = _waits.get(ident)
  if entry is None:
    _waits[ident] = entry = [os.fspath(path), time.monotonic(), 0]
  entry[2] += 1
  try:
    yield
  finally:
    entry[2] -= 1
    if not entry[2]:
      _waits.pop(ident, None)


class _Watchdog:
  """The thread of `watch`: reads the signals' wakeup pipe and looks at the main thread's wait."""

  def __init__(self) -> None:
    self.read_fd, self.write_fd = os.pipe()
    os.set_blocking(self.write_fd, False)
    self.previous_fd = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
    self.stops: list[tuple[int, float]] = []  # (signal, when) of the stop signals that arrived
    self.taken_up = False
    self.main = threading.main_thread().ident
    self.noted = 0.0
    self.done = threading.Event()
    self.thread = threading.Thread(target=self._run, daemon=True, name='storage-watchdog')
    self.thread.start()

  def _run(self):
    while not self.done.is_set():
      ready, _, _ = select.select([self.read_fd], [], [], 1.0)
      if ready:
        try:
          data = os.read(self.read_fd, 64)
        except OSError:
          return
        for number in data:
          if number in (signal.SIGTERM, signal.SIGINT):
            self._stop_arrived(number)
      if not self.done.is_set():
        self._look()

  def _stop_arrived(self, number: int):
    self.stops.append((number, time.monotonic()))
    if len(self.stops) >= 2:  # the second: out now, whatever the main thread is doing
      _exit(128 + number, '')

  def _look(self):
    entry = _waits.get(self.main)
    if entry is None:
      return
    path, since = entry[0], entry[1]
    now = time.monotonic()
    waited = now - since
    if self.stops:
      number, arrived = self.stops[0]
      name = signal.Signals(number).name
      if not self.taken_up and now - arrived >= TAKE_UP_S:
        _exit(128 + number, f'{name} received while waiting {waited:.0f} s for {path}, which '
              'does not answer: stopped without saving; the checkpoints saved before stay, and '
              'the same command resumes from the last')
      if self.taken_up and now - arrived >= save_s():
        _exit(128 + number, f'{name} received, and the save waited {waited:.0f} s for {path}, '
              'which does not answer: stopped without it; the checkpoints saved before stay, and '
              'the same command resumes from the last')
    if waited >= deadline_s():
      _exit(EXIT_STORAGE, f'error: {path} has not answered for {waited:.0f} s (the storage or the '
            'network to it is down); stopped: the checkpoints saved before stay, and the same '
            'command resumes from the last once it answers (ELECTRA_JAX_STORAGE_DEADLINE_S sets '
            f'how long a run waits: {deadline_s():.0f} s)')
    if waited >= note_s() and now - self.noted >= note_s():
      self.noted = now
      print(f'waiting for {path}: no answer for {waited:.0f} s (the storage client retries; the '
            f'run ends after {deadline_s():.0f} s without one, and SIGTERM or Ctrl-C stops it '
            'now)', file=sys.stderr, flush=True)

  def close(self):
    self.done.set()
    self.thread.join()
    with contextlib.suppress(ValueError):  # (not in the main thread: nothing was set)
      signal.set_wakeup_fd(self.previous_fd)
    os.close(self.read_fd)
    os.close(self.write_fd)


def _exit(status: int, line: str):
  if line:
    print(line, file=sys.stderr, flush=True)
  os._exit(status)


_watchdog: _Watchdog | None = None


def watch():
  """Starts the watchdog (in the main thread only: the signals' wakeup pipe is the main
  thread's); a second call while it runs does nothing."""
  global _watchdog
  if _watchdog is None and threading.current_thread() is threading.main_thread():
    _watchdog = _Watchdog()


def stop_taken_up():
  """Called by the run's signal handler: the stop is the run's now (it saves)."""
  if _watchdog is not None:
    _watchdog.taken_up = True


def unwatch():
  global _watchdog
  if _watchdog is not None:
    _watchdog.close()
    _watchdog = None
