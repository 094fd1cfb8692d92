"""The training loop on several CPU devices of one process."""

import os
import subprocess
import sys

from conftest import CHILD_ENV, ROOT, TEST_XLA_FLAGS

from electra_jax.train import loop

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
