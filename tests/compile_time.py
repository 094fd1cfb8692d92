"""How long the test model's train step takes to trace, lower and compile on the 8 fake CPU devices
(not a test: a measurement; the compilation cache is off), with the suite's XLA flags
(conftest.TEST_XLA_FLAGS) or XLA's defaults; XLA flags of your own are kept:

    python tests/compile_time.py
    PYTEST_XLA_DEFAULTS=1 python tests/compile_time.py
PYTEST_XLA_DEFAULTS=1 XLA_FLAGS='--xla_cpu_use_fusion_emitters=false' python tests/compile_time.py

prints one JSON line: the flags, trace+lower and compile seconds, a step's milliseconds and its
loss.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402

from conftest import test_config  # noqa: E402
from electra_jax.config.pretraining import parse  # noqa: E402
from electra_jax.data.tokenizer import SPECIAL  # noqa: E402
from electra_jax.data.synthetic import synthetic_batch  # noqa: E402
from electra_jax.train import partitioning  # noqa: E402
from electra_jax.pretraining import setup as pretrain_setup  # noqa: E402
from electra_jax.train import step as step_lib  # noqa: E402


def main():
  jax.config.update('jax_enable_compilation_cache', False)
  config = test_config()
  mesh = partitioning.make_mesh(jax.devices())
  setup = pretrain_setup.build_setup(parse(config), SPECIAL)
  init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
  state = init_fn()
  batch = jax.device_put(synthetic_batch(16, 32, config.model.vocab_size, seed=0),
                         partitioning.batch_sharding(mesh))
  t0 = time.perf_counter()
  lowered = train_fn.lower(state, batch)
  t1 = time.perf_counter()
  compiled = lowered.compile()
  t2 = time.perf_counter()
  state, m = compiled(state, batch)
  jax.block_until_ready(m)
  t3 = time.perf_counter()
  for _ in range(5):
    state, m = compiled(state, batch)
  jax.block_until_ready(m)
  print(json.dumps({'xla_flags': os.environ['XLA_FLAGS'], 'lower_s': round(t1 - t0, 2),
                    'compile_s': round(t2 - t1, 2),
                    'step_ms': round((time.perf_counter() - t3) / 5 * 1e3, 1),
                    'loss': float(m['loss'][0] / m['loss'][1])}))


if __name__ == '__main__':
  main()
