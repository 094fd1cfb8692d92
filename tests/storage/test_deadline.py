"""The storage watchdog (electra_jax/storage/deadline.py), in child processes whose main thread
waits on a bucket that never answers: the waiting lines, the deadline's exit 75, and SIGTERM
honoured within its bounds whether or not the run took it up. (With a real storage server that
dies: tests/storage/test_gcs.py.)"""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import CHILD_ENV, ROOT

CHILD = '''
import signal, sys, time
from electra_jax.storage import deadline
taken = sys.argv[1] == 'taken'
def handle(signum, frame):  # the run's handler: it takes the stop up (and would save)
  if taken:
    deadline.stop_taken_up()
signal.signal(signal.SIGTERM, handle)
deadline.watch()
print('waiting', flush=True)
with deadline.waiting(sys.argv[2]):
  end = time.monotonic() + float(sys.argv[3])
  while time.monotonic() < end:  # (a client retrying: the handler runs, the wait goes on)
    time.sleep(0.02)
deadline.unwatch()
print('answered', flush=True)
'''


def _child(taken: str, path: str, wait_s: float, deadline_s: float, signals: int = 0,
           after_s: float = 0.5):
  proc = subprocess.Popen([sys.executable, '-c', CHILD, taken, path, str(wait_s)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                          env={**CHILD_ENV, 'ELECTRA_JAX_STORAGE_DEADLINE_S': str(deadline_s)})
  assert proc.stdout.readline() == 'waiting\n'
  time.sleep(after_s)
  start = time.monotonic()
  for _ in range(signals):
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
  out, err = proc.communicate(timeout=60)
  return proc.returncode, time.monotonic() - start, out, err.strip().splitlines()


@pytest.mark.fast
def test_a_wait_past_the_deadline_ends_the_run_with_75_after_saying_it_waits():
  code, took, out, err = _child('taken', 'gs://b/run/metrics.jsonl', 60, 4)
  assert code == 75 and took < 8 and 'answered' not in out, (code, took, err)
  assert re.match(r'waiting for gs://b/run/metrics.jsonl: no answer for [1-3] s \(the storage '
                  r'client retries; the run ends after 4 s without one', err[0]), err
  assert re.match(r'error: gs://b/run/metrics.jsonl has not answered for [4-6] s \(the storage '
                  r'or the network to it is down\); stopped', err[-1]), err


@pytest.mark.fast
def test_sigterm_during_a_wait_ends_it_at_once_or_after_the_save_s_bound():
  code, took, _, err = _child('not taken', 'gs://b/run/x', 60, 60, signals=1)
  assert code == 143 and took < 5 + 3, (code, took, err)
  assert re.match(r'SIGTERM received while waiting \d s for gs://b/run/x, which does not answer: '
                  'stopped without saving', err[-1]), err
  code, took, _, err = _child('taken', 'gs://b/run/x', 60, 8, signals=1)  # a save: 4 s
  assert code == 143 and 3.5 < took < 4 + 3, (code, took, err)
  assert re.match(r'SIGTERM received, and the save waited \d s for gs://b/run/x', err[-1]), err
  code, took, _, err = _child('taken', 'gs://b/run/x', 60, 60, signals=2)  # the second: at once
  assert code == 143 and took < 2, (code, took, err)


@pytest.mark.fast
def test_a_wait_that_ends_or_a_local_folder_is_left_alone():
  code, _, out, err = _child('taken', 'gs://b/run/x', 1.5, 4)  # answered before its deadline
  assert code == 0 and out.split() == ['answered'], (code, err)
  code, took, out, err = _child('taken', os.path.join(ROOT, 'x'), 3, 1)  # a local disk: unwatched
  assert code == 0 and out.split() == ['answered'] and not err, (code, err)
