"""The training loop on several CPU devices of one process (steps one at a time), and on one device
(steps queued ahead, as every accelerator run and a single-CPU run queue them)."""

import itertools
import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from conftest import CHILD_ENV, ROOT, TEST_XLA_FLAGS
from electra_jax.config.pretraining import parse
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import logs as logs_lib
from electra_jax.train import loop
from electra_jax.train import partitioning
from electra_jax.train import step as step_lib

# A child with 8 CPU devices runs `steps` small steps whose gradient is all-reduced over them,
# through loop.run, with XLA's rendezvous timeouts shortened (warn at 5 s, abort at 10 s).
CHILD = r'''
import sys
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import logs as logs_lib
from electra_jax.train import loop
from electra_jax.train import step as step_lib

workdir, steps = sys.argv[1], int(sys.argv[2])
mesh = jax.make_mesh((8,), ('data',))
x = jax.device_put(jnp.ones((64, 64)), NamedSharding(mesh, P('data')))

@jax.jit
def step_fn(state, x):
  def loss(w):
    h = x
    for _ in range(4):
      h = jnp.tanh(h @ w)
    return (h ** 2).mean()
  value, grad = jax.value_and_grad(loss)(state.params)  # rows on 8 devices: an all-reduce
  state = state.replace(step=state.step + 1, params=state.params - 0.01 * grad)
  return state, {'loss': jnp.stack([value, 1.0]), 'nonfinite_steps': jnp.zeros(2)}

state = step_lib.TrainState(
    step=jnp.zeros((), jnp.int32), params=jax.device_put(jnp.eye(64) * 0.5,
                                                          NamedSharding(mesh, P())),
    opt_state={}, nonfinite_steps=jnp.zeros((), jnp.int32),
    first_nonfinite=jnp.full((), -1, jnp.int32))
plan = loop.Plan(total_steps=steps, log_every=steps, eval_every=0, save_every=0, nonfinite='stop',
                 fields=('loss',))
ckpt = checkpoint_lib.Checkpointer(workdir + '/checkpoints')
result = loop.run(plan, state, step_fn, iter(lambda: x, None), 0, evaluate=lambda s, st: {},
                  ckpt=ckpt, meta=lambda s: {'step': s}, logs=logs_lib.Logs(workdir), log=print)
print('finished at step', int(result.state.step), 'queue_ahead', loop.queue_ahead())
'''


def test_steps_on_several_cpu_devices_are_not_queued_into_a_deadlock(tmp_path):
  # Queued ahead, such steps deadlock in XLA's thread pool (this child with queue_ahead forced on
  # aborted in 3 runs of 3, docs/measured.md); one at a time, 3,000 finish.
  assert not loop.queue_ahead()  # this process: 8 CPU devices (conftest)
  env = {**CHILD_ENV, 'XLA_FLAGS': f'{TEST_XLA_FLAGS} --xla_force_host_platform_device_count=8 '
         '--xla_cpu_collective_call_warn_stuck_timeout_seconds=5 '
         '--xla_cpu_collective_call_terminate_timeout_seconds=10',
         'PYTHONPATH': ROOT, 'JAX_PLATFORMS': 'cpu'}
  out = subprocess.run([sys.executable, '-c', CHILD, str(tmp_path), '3000'], env=env,
                       capture_output=True, text=True, timeout=600, check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  assert 'finished at step 3000 queue_ahead False' in out.stdout, out.stdout[-2000:]
  assert os.path.isdir(tmp_path / 'checkpoints' / '3000')


def _one_device_run(tmp_path, name: str, stop_at: int | None = None, resume: bool = False,
                    lines: list | None = None):
  """The test model on ONE of this process's devices, where the loop queues steps ahead as every
  GPU, TPU and single-CPU run does: 8 steps, a NaN at step 3 (skipped), saves every 2 steps, and
  with `stop_at` a stop notice (what SIGTERM sets) while steps are queued; its printed lines go
  to `lines`. Returns (the loop's result, or the Stopped it raised; the workdir)."""
  from conftest import poisoned_setup, test_config
  from electra_jax import Stopped
  from electra_jax.data.synthetic import synthetic_batch
  config = test_config(**{'train_steps': 8, 'save_every': 2, 'log_every': 2, 'nonfinite': 'skip'})
  mesh = partitioning.make_mesh(jax.devices()[:1])
  setup = poisoned_setup(parse(config), [3])
  init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
  batch = {k: jax.device_put(v, partitioning.batch_sharding(mesh))
           for k, v in synthetic_batch(16, 32, 96).items()}
  workdir = tmp_path / name
  ckpt = checkpoint_lib.Checkpointer(str(workdir / 'checkpoints'))
  start, state, _ = ckpt.restore_latest(init_fn()) if resume else (0, init_fn(), {})
  signals = loop.Signals(lambda *_: None, install=False)

  def batches():
    for i in itertools.count(start + 1):
      if i == stop_at:  # the notice arrives while the steps before it are still queued
        signals.received = 'SIGTERM'
      yield batch

  plan = loop.Plan.of(config, total_steps=8, fields=('loss',))
  try:
    result = loop.run(plan, state, train_fn, batches(), start, evaluate=lambda s, st: {},
                      ckpt=ckpt, meta=lambda s: {'step': s}, logs=logs_lib.Logs(str(workdir)),
                      log=(lines.append if lines is not None else lambda *_: None),
                      signals=signals)
  except Stopped as e:
    return e, workdir
  finally:
    ckpt.close()
  return result, workdir


@pytest.mark.xla_defaults
def test_steps_queued_ahead_on_one_device_stop_save_skip_and_resume_exactly(tmp_path):
  """The mode of every accelerator run, in this process: steps queued ahead (one device), a
  non-finite step skipped, saves, a stop notice landing while steps are queued (saved at the step
  it stops, exit as SIGTERM's), then the resumed run: the final state is the uninterrupted run's
  to the bit, the skipped step counted once, metrics.jsonl one record per step."""
  assert loop.queue_ahead(1) and not loop.queue_ahead()
  straight, _ = _one_device_run(tmp_path, 'straight')
  stopped, workdir = _one_device_run(tmp_path, 'stopped', stop_at=5)
  # (the notice came as step 5's batch was taken: step 5 runs, the loop stops before step 6 and
  # saves step 5, which save_every=2 would not have)
  assert stopped.signal == 'SIGTERM' and stopped.step == 5 and stopped.exit_code == 143
  assert sorted(int(n) for n in os.listdir(workdir / 'checkpoints') if n.isdigit())[-1] == 5
  resumed, _ = _one_device_run(tmp_path, 'stopped', resume=True)
  for a, b in zip(jax.tree.leaves(straight.state), jax.tree.leaves(resumed.state), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert int(resumed.state.nonfinite_steps) == 1 and int(resumed.state.first_nonfinite) == 3
  steps = [json.loads(l)['step'] for l in open(workdir / 'metrics.jsonl')]
  assert steps == [2, 4, 6, 8], steps


def _line_steps(lines) -> list[int]:
  return [int(m.group(1)) for m in map(re.compile(r'step (\d+)/8 \|').search, lines) if m]


def test_a_progress_line_comes_at_the_first_step_and_then_at_least_every_30_s(tmp_path,
                                                                             monkeypatch):
  """log_every=2: lines at the first step (also of a resumed run) and each 2nd, the records at
  each 2nd alone; with the longest silence set to 0 s, a line every step and the same records."""
  lines = []
  _one_device_run(tmp_path, 'quiet', stop_at=5, lines=lines)
  assert _line_steps(lines) == [1, 2, 4], lines
  lines.clear()
  _one_device_run(tmp_path, 'quiet', resume=True, lines=lines)
  assert _line_steps(lines) == [6, 8], lines
  monkeypatch.setattr(loop, 'LINE_EVERY_S', 0.0)
  lines.clear()
  _one_device_run(tmp_path, 'talkative', lines=lines)
  assert _line_steps(lines) == list(range(1, 9)), lines
  for name in ('quiet', 'talkative'):
    steps = [json.loads(l)['step'] for l in open(tmp_path / name / 'metrics.jsonl')]
    assert steps == [2, 4, 6, 8], (name, steps)


def test_a_launched_run_on_one_device_stops_on_sigterm_survives_sigkill_and_ends_as_a_straight_one(
    tmp_path, records_dir):
  """launch/train.py on one CPU device (steps queued ahead): SIGTERM saves and exits 143; SIGKILL
  of the resumed run; the run resumed again ends with the train state of a run never stopped, to
  the bit (both on one device)."""
  import signal
  from conftest import launch_command, run_config_file
  from test_train import _wait_for_step
  # (a compilation cache of their own: the first run compiles the programs, which one that JAX's
  # cache, shared with the other tests, held would take from there and not keep)
  env = {**CHILD_ENV, 'XLA_FLAGS': f'{TEST_XLA_FLAGS} --xla_force_host_platform_device_count=1',
         'JAX_COMPILATION_CACHE_DIR': str(tmp_path / 'cache')}
  config_file = run_config_file(tmp_path, records_dir, train_steps=12, save_every=2)
  stopped, straight = tmp_path / 'stopped', tmp_path / 'straight'
  proc = subprocess.Popen(launch_command(config_file, stopped), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env)
  _wait_for_step(proc, 4)
  proc.send_signal(signal.SIGTERM)
  out, _ = proc.communicate(timeout=120)
  assert proc.returncode == 143 and 'stopped by SIGTERM at step' in out, out[-3000:]
  proc = subprocess.Popen(launch_command(config_file, stopped), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env)
  seen = _wait_for_step(proc, 9)
  assert any(l.startswith('resumed from') for l in seen), ''.join(seen[-20:])
  # the first run's train and evaluation programs from JAX's compilation cache (and the end
  # below, to the bit, as the straight run's)
  assert any(re.search(r'compiled in .* \(2 of 2 programs from the compilation cache\)', l)
             for l in seen), ''.join(seen[-20:])
  proc.kill()
  proc.wait()
  for workdir in (stopped, straight):
    done = subprocess.run(launch_command(config_file, workdir), capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (workdir == straight) != any(l.startswith('resumed from')
                                        for l in done.stdout.splitlines()), done.stdout[-3000:]
  states = []
  for workdir in (stopped, straight):
    ckpt = checkpoint_lib.Checkpointer(str(workdir / 'checkpoints'))
    states.append(jax.tree.leaves(ckpt.restore_arrays(12)[0]))
    ckpt.close()
  for a, b in zip(*states, strict=True):
    np.testing.assert_array_equal(a, b)


@pytest.mark.fast
def test_the_first_steps_speed_says_it_holds_the_start_up_and_the_eta_leaves_it_out(monkeypatch):
  """The first line's ETA came from the first step alone, start-up and all (22 min said for a
  38 s run): it says so instead, and the intervals after it are measured from its end. The
  clock is set by hand (a fixed sequence of readings), nothing is timed."""
  readings = iter([0.0, 10.0, 11.0, 12.0])  # start, the first step's end, a look, a report
  monkeypatch.setattr(logs_lib.time, 'perf_counter', lambda: next(readings))
  progress = logs_lib.Progress(0, 101, tokens_per_step=10)
  first = progress.update(1, keep=True)  # the look at the first step: 10 s, start-up included
  assert progress.startup and first['steps_per_s'] == pytest.approx(0.1)
  assert progress.format(1, first) == ('step 1/101 | 1 tok/s over the first step, start-up '
                                       'included | ETA from the next line')
  look = progress.update(6, keep=True)  # 5 steps in 1 s after the first
  assert not progress.startup and look['steps_per_s'] == pytest.approx(5.0)
  report = progress.update(11)  # 10 steps in 2 s after the first: 90 steps left, 18 s
  assert report['eta_s'] == pytest.approx(18.0) and report['tokens_per_s'] == pytest.approx(50)
  assert progress.format(11, report) == 'step 11/101 | 50 tok/s | ETA 0m18s'
