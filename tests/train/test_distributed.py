"""Several JAX processes on this machine (CPU devices, gloo): the multi-host path, run for real."""

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from conftest import (CHILD_ENV, ROOT, TEST_XLA_FLAGS, launch_command, load_config,
                      run_config_file)
from electra_jax.config.pretraining import parse
from electra_jax.data.tokenizer import SPECIAL
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import distributed
from electra_jax.pretraining import run as pretrain
from electra_jax.pretraining import setup as pretrain_setup
from electra_jax.train import step as step_lib

CLUSTER = os.path.join(ROOT, 'launch', 'local_cluster.py')
# (run_config_file's decay horizon is fixed: runs of different lengths share their learning rates
# step by step.)
FIELDS = {'save_every': 2}


def _cluster(config_file, workdir, tmp_path, processes=2, devices=4, cores=None, **overrides):
  """launch/local_cluster.py's run of `processes` processes; on the CPU cores `cores` only when
  given (a process inherits the cores of the thread that starts it, as do its own children)."""
  extra = [f'--config.{k}={v}' for k, v in overrides.items()]
  mine = os.sched_getaffinity(0)  # this thread's
  os.sched_setaffinity(0, cores or mine)
  try:
    return subprocess.run(
        [sys.executable, CLUSTER, f'--num_processes={processes}',
         f'--devices_per_process={devices}',
         f'--log_dir={tmp_path / "logs"}', '--', *launch_command(config_file, workdir)[1:], *extra],
        capture_output=True, text=True, env=CHILD_ENV, timeout=600)
  finally:
    os.sched_setaffinity(0, mine)


def _params(workdir, step, config):
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'))
  setup = pretrain_setup.build_setup(parse(config), SPECIAL)
  state, meta = ckpt.restore(step, jax.jit(lambda: step_lib.init_state(setup))())
  ckpt.close()
  return state, meta


def _config_file(tmp_path, records_dir, **fields):
  path = run_config_file(tmp_path, records_dir)
  text = path.read_text().replace('  return c\n', ''.join(
      f'  c.{k} = {v!r}\n' for k, v in {**FIELDS, **fields}.items()) + '  return c\n')
  path.write_text(text)
  return path


def _two_processes(config_file, workdir, *flags):
  """Two processes of two CPU devices each, started by hand (no launcher), output piped."""
  env = {**CHILD_ENV, 'JAX_PLATFORMS': 'cpu',
         'XLA_FLAGS': f'{TEST_XLA_FLAGS} --xla_force_host_platform_device_count=2'}
  port = __import__('socket').socket()
  port.bind(('127.0.0.1', 0))
  address = f'127.0.0.1:{port.getsockname()[1]}'
  port.close()
  return [subprocess.Popen(
      [*launch_command(config_file, workdir), f'--coordinator_address={address}',
       '--num_processes=2', f'--process_id={i}', *flags], env=env, text=True,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(2)]


@pytest.mark.multiprocess
def test_two_processes_of_four_devices_train_like_one_process_of_eight(tmp_path, records_dir):
  config_file = _config_file(tmp_path, records_dir, train_steps=4)
  two = tmp_path / 'two'
  out = _cluster(config_file, two, tmp_path)
  assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
  assert '2 processes (flags), 8 devices in all' in out.stdout
  assert '2 processes, 8 x cpu' in out.stdout and '4 input reader(s)' in out.stdout
  # process 0 alone wrote the logs; every process wrote its shards of the checkpoint
  assert sum(1 for l in open(two / 'metrics.jsonl') if '"split": "train"' in l) == 4
  one = tmp_path / 'one'
  config = load_config(config_file)
  config.train_steps = 6
  pretrain.train_and_evaluate(config, str(one), log=lambda *_: None)  # 1 process, 8 devices
  a, meta = _params(two, 4, config)
  b, _ = _params(one, 4, config)
  assert meta['readers'] == 4 and meta['data_position'] == 4 * 16 // 4
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(x, y, atol=1e-5, rtol=1e-4)
  # the 2-process checkpoint resumes in 1 process (another process count) and continues the same
  lines = []
  pretrain.train_and_evaluate(config, str(two), log=lines.append)
  assert any(l.startswith('resumed from') and '/checkpoints/4 ' in l for l in lines), lines
  a, _ = _params(two, 6, config)
  b, _ = _params(one, 6, config)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(x, y, atol=1e-5, rtol=1e-4)


@pytest.mark.multiprocess
def test_a_killed_process_stops_the_other_within_a_minute_and_both_resume_under_load(
    tmp_path, records_dir):
  config_file = _config_file(tmp_path, records_dir, train_steps=1_000_000)
  workdir = tmp_path / 'w'
  procs = _two_processes(config_file, workdir, '--heartbeat_timeout_s=15')
  try:
    for line in procs[0].stdout:  # until it has trained a few steps and saved
      if ' step 6/' in f' {line}':
        break
    procs[1].kill()  # SIGKILL: a host lost, no goodbye
    rest, _ = procs[0].communicate(timeout=60)  # (a survivor still there after it: a failure)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  assert procs[0].returncode != 0
  assert 'another task died' in rest, rest[-3000:]
  committed = max(int(n) for n in os.listdir(workdir / 'checkpoints') if n.isdigit())
  assert committed >= 2
  # The resume runs on a loaded machine (both processes on one core, beside whatever else runs
  # there: twice as many runnable processes as cores or more): one process may finish compiling and
  # restoring long after the other (gloo alone gave it 30 s; the processes now meet at a barrier
  # before the first step).
  out = _cluster(config_file, workdir, tmp_path, devices=2, cores={min(os.sched_getaffinity(0))},
                 train_steps=committed + 2)
  assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
  assert f'/checkpoints/{committed} (input stream at example' in out.stdout, out.stdout[-3000:]
  assert f'final parameters: {workdir}/checkpoints/{committed + 2}' in out.stdout


@pytest.mark.multiprocess
def test_a_preemption_notice_to_every_process_saves_one_step_and_exits_143(tmp_path, records_dir):
  """A slice's notice (SIGTERM to every host): JAX's preemption service picks one step for all,
  each process saves its part of that checkpoint and exits 143, not 0 (the run has not finished)."""
  import signal
  config_file = _config_file(tmp_path, records_dir, train_steps=1_000_000, save_every=1000)
  workdir = tmp_path / 'w'
  procs = _two_processes(config_file, workdir)
  try:
    for line in procs[0].stdout:
      if ' step 4/' in f' {line}':
        break
    for p in procs:
      p.send_signal(signal.SIGTERM)
    outs = [p.communicate(timeout=120)[0] for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  assert [p.returncode for p in procs] == [143, 143], outs[0][-3000:] + outs[1][-3000:]
  stopped = [l for l in outs[0].splitlines() if l.startswith('stopped by preemption at step ')]
  assert len(stopped) == 1, outs[0][-3000:]
  step = int(stopped[0].split('at step ')[1].split(':')[0])
  assert step >= 4 and sorted(os.listdir(workdir / 'checkpoints')) == [str(step)]
  config = load_config(config_file)
  _, meta = _params(workdir, step, config)  # every process's part is there: it restores
  assert meta['step'] == step


@pytest.mark.fast
def test_the_launcher_stops_every_process_when_one_fails_and_says_which(tmp_path):
  script = tmp_path / 'job.py'
  script.write_text('import sys, time\n'
                    'if "--process_id=1" in sys.argv:\n'
                    '  sys.exit(3)\n'
                    'time.sleep(600)\n')
  out = subprocess.run([sys.executable, CLUSTER, '--num_processes=3', '--devices_per_process=1',
                        f'--log_dir={tmp_path / "logs"}', '--', str(script)],
                       capture_output=True, text=True, timeout=60)  # (the others' sleep: 600 s)
  assert out.returncode == 1
  assert out.stderr.strip().startswith('error: process 1 of 3 exited with code 3; its output is in')
  assert 'the others were stopped. Run the same command again to resume' in out.stderr


@pytest.mark.fast
def test_the_process_flags_go_together_and_clusters_are_detected(monkeypatch):
  for name in ('TPU_WORKER_HOSTNAMES', 'SLURM_NTASKS', 'SLURM_STEP_ID', 'OMPI_COMM_WORLD_SIZE'):
    monkeypatch.delenv(name, raising=False)
  assert distributed.initialize() is None  # no cluster here: a single-process run
  monkeypatch.setenv('SLURM_NTASKS', '4')
  assert distributed.detected_cluster() is None  # sbatch's shell, not a task of `srun`
  monkeypatch.setenv('SLURM_STEP_ID', '0')
  assert distributed.detected_cluster() == 'SLURM'
  monkeypatch.setenv('TPU_WORKER_HOSTNAMES', 't1k-0,t1k-1')
  assert distributed.detected_cluster() == 'Cloud TPU pod slice'
  with pytest.raises(ValueError, match='go together; give all three'):
    distributed.initialize('127.0.0.1:1234', 2, None)
  with pytest.raises(ValueError, match='--process_id=2 is not one of 0..1'):
    distributed.initialize('127.0.0.1:1234', 2, 2)


@pytest.mark.fast
def test_every_process_takes_one_verdict(tmp_path):
  """distributed.all_agree: true only when every process says so (the attention kernel's start-up
  check, so that every host compiles the same program), through the coordination service, whose
  client platform/private.py finds where this JAX keeps it (else this test fails); and, were it
  moved, through JAX's public multihost_utils, barriers too."""
  script = tmp_path / 'vote.py'
  script.write_text(
      'import sys\n'
      f'sys.path.insert(0, {ROOT!r})\n'
      'flags = dict(a[2:].split("=", 1) for a in sys.argv[1:])\n'
      'from electra_jax.platform import private\n'
      'from electra_jax.train import distributed\n'
      'distributed.initialize(flags["coordinator_address"], int(flags["num_processes"]),\n'
      '                       int(flags["process_id"]), 60)\n'
      'assert private.coordination_client() is not None, "the coordination client moved"\n'
      'me = int(flags["process_id"])\n'
      'print("agree:", distributed.all_agree(me != 1, "kernel"),\n'
      '      distributed.all_agree(True, "kernel"), flush=True)\n'
      'distributed.barrier("met")\n'
      'private.coordination_client = lambda: None  # a JAX that keeps it elsewhere\n'
      'distributed.barrier("met")\n'
      'print("public:", distributed.all_agree(me != 0, "kernel"),\n'
      '      distributed.all_agree(True, "kernel"), flush=True)\n')
  out = subprocess.run([sys.executable, CLUSTER, '--num_processes=2', '--devices_per_process=1',
                        f'--log_dir={tmp_path / "logs"}', '--', str(script)],
                       capture_output=True, text=True, env=CHILD_ENV, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  assert 'agree: False True' in out.stdout  # process 1 said no to the first, yes to the second
  assert 'agree: False True' in (tmp_path / 'logs' / 'process_1.log').read_text()
  assert 'public: False True' in out.stdout  # process 0 said no, through the public path
  assert 'public: False True' in (tmp_path / 'logs' / 'process_1.log').read_text()
