r"""Kill a pre-training run (SIGKILL) at random steps, resume it each time, and compare the end.

    python -m benchmarks.chaos --workdir=/tmp/electra_chaos --kills=10
    python -m benchmarks.chaos --workdir=/tmp/electra_chaos --config=configs/tiny.py \
        --config.train_steps=300 --config.save_every=25

Runs `launch/train.py` once straight through (<workdir>/straight), then the same command in
<workdir>/chaos, killed with SIGKILL (no handler, no last save) at `--kills` random steps and re-run
after each kill. Prints, per kill, the last step the killed process reported, the step the next run
resumed from and the steps lost, then whether the final train state (parameters, optimizer state,
step) is bit-identical to the straight run's. Exits 1 if it is not, or if a kill lost more steps
than the checkpoint interval plus the steps run while that checkpoint was being written.
Every `--config.*` flag is passed on to both runs unchanged.
"""

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

from absl import flags
import jax
import numpy as np

from electra_jax import cli
from electra_jax.config import pretraining as config_lib
from electra_jax.data import records
from electra_jax.data.tokenizer import SpecialIds
from electra_jax.pretraining import setup as pretrain_setup
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import step as step_lib

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TINY = os.path.join(_ROOT, 'configs', 'tiny.py')
_CONFIG = cli.define_config_file('config', _TINY, 'a configs/*.py file[:variant]')
_WORKDIR = flags.DEFINE_string('workdir', None, 'folder for the two runs (must not exist)')
_KILLS = flags.DEFINE_integer('kills', 10, 'how many times the run is killed')
_SEED = flags.DEFINE_integer('seed', 0, 'seed of the kill points')
flags.mark_flags_as_required(['workdir'])

# What the demo config becomes unless the command line says otherwise: short, checkpointed often,
# one progress line per step (the line tells where to kill).
_DEFAULTS = {'train_steps': 300, 'save_every': 25, 'log_every': 1, 'eval_every': 0}
_STEP_LINE = re.compile(r'^(?:\d\d:\d\d:\d\d )?step (\d+)/')
_RESUMED = re.compile(r'^resumed from .*/checkpoints/(\d+) ')


def _command(workdir: str) -> list[str]:
  given = [a for a in sys.argv[1:] if a.startswith('--config')]
  named = {a.split('=')[0] for a in given}
  defaults = [f'--config.{k}={v}' for k, v in _DEFAULTS.items() if f'--config.{k}' not in named]
  if '--config' not in named:
    given = [f'--config={_TINY}'] + given
  return [sys.executable, os.path.join(_ROOT, 'launch', 'train.py'), *given, *defaults,
          f'--workdir={workdir}']


def _run(workdir: str, env: dict, kill_after: int | None = None):
  """Runs train.py; with `kill_after`, SIGKILLs it once it reports that step.

  Returns (the step it resumed from or 0, the last step it reported, whether it was killed).
  """
  proc = subprocess.Popen(_command(workdir), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env)
  resumed, last, tail = 0, 0, []
  for line in proc.stdout:
    tail = (tail + [line])[-30:]
    if m := _RESUMED.match(line):
      resumed = int(m.group(1))
    if m := _STEP_LINE.match(line):
      last = int(m.group(1))
      if kill_after is not None and last >= kill_after:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return resumed, last, True
  if proc.wait() != 0:
    raise cli.UserError(f'the run in {workdir} failed (exit {proc.returncode}):\n' +
                        ''.join(tail))
  return resumed, last, False


def _final_states(config, workdirs: list[str]):
  records_dir = config.data.records or os.path.join(workdirs[0], 'data')
  special = SpecialIds(**records.read_metadata(records_dir)['special_ids'])
  setup = pretrain_setup.build_setup(config_lib.parse(config), special)
  target = jax.jit(lambda: step_lib.init_state(setup))()
  states = []
  for workdir in workdirs:
    ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'))
    states.append(jax.device_get(ckpt.restore(config.train_steps, target)[0]))
    ckpt.close()
  return states


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}; pass settings as --config.<field>=...')
  config = _CONFIG.value
  for key, value in _DEFAULTS.items():
    if not any(a.startswith(f'--config.{key}=') for a in sys.argv):
      config[key] = value
  steps, interval = config.train_steps, config.save_every
  if not interval:
    raise cli.UserError('save_every is 0 (a checkpoint only at the end); set '
                        '--config.save_every to a step interval')
  if _KILLS.value < 1:
    raise cli.UserError(f'--kills={_KILLS.value}: give at least 1')
  if steps < _KILLS.value + 2:
    raise cli.UserError(f'{_KILLS.value} kills need more than {steps} train steps; raise '
                        '--config.train_steps')
  if os.path.exists(_WORKDIR.value):
    raise cli.UserError(f'--workdir {_WORKDIR.value} exists; give a new folder')
  straight, chaos = (os.path.join(_WORKDIR.value, n) for n in ('straight', 'chaos'))
  # All runs share one compilation cache: a restart costs its start-up, not a compile.
  env = {'JAX_COMPILATION_CACHE_DIR': os.path.join(_WORKDIR.value, 'jax_cache'),
         'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0', **os.environ}
  os.makedirs(_WORKDIR.value)

  t = time.time()
  print(f'uninterrupted run of {steps} steps in {straight} ...', flush=True)
  _run(straight, env)
  print(f'  done in {time.time() - t:.0f} s', flush=True)
  kill_points = sorted(random.Random(_SEED.value).sample(range(2, steps), _KILLS.value))
  print(f'the same run in {chaos}, SIGKILLed after steps {kill_points} (checkpoint every '
        f'{interval} steps):', flush=True)
  lost, last = [], 0
  for i, point in enumerate(kill_points + [None]):
    target = None if point is None else max(point, last + 1)
    resumed, reported, killed = _run(chaos, env, kill_after=target)
    if i:
      lost.append(last - resumed)
      print(f'  kill {i:2d}: killed after step {last:4d} | resumed from step {resumed:4d} | '
            f'{last - resumed:3d} steps lost', flush=True)
    if not killed:
      break
    last = reported
  states = _final_states(config, [straight, chaos])
  leaves = [jax.tree.leaves(s) for s in states]
  same = all(np.array_equal(a, b) for a, b in zip(*leaves))
  diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
             for a, b in zip(*leaves) if np.size(a))
  print(f'steps lost per kill: max {max(lost)}, mean {np.mean(lost):.1f} (checkpoint interval '
        f'{interval})')
  print(f'final train state after {len(lost)} kills: '
        f'{"bit-identical to" if same else "DIFFERENT from"} the uninterrupted run '
        f'({sum(x.size for x in leaves[0]):,} values, max |difference| {diff:g}) | '
        f'{time.time() - t:.0f} s in all')
  # A save is asynchronous: a kill while the newest checkpoint is being written loses that one too,
  # so the bound is one interval plus the steps run during a write (one or two here).
  too_many = [x for x in lost if x > interval + 2]
  if too_many or not same:
    sys.exit(1)
  shutil.rmtree(os.path.join(_WORKDIR.value, 'jax_cache'), ignore_errors=True)


if __name__ == '__main__':
  cli.run(main)
