"""Freed host memory kept for the next step on CPU runs (platform/host_memory.py): counted in page
faults, which a step of fresh mappings pays for every page of its temporaries."""

import json
import os
import re
import platform
import subprocess
import sys

import pytest

from electra_jax.platform import host_memory

# A program with 64 MB of temporaries (y), more than glibc's largest mmap threshold (32 MB).
CHILD = r'''
import json, os, resource, sys
from electra_jax.platform import host_memory
kept = host_memory.keep_freed()
import jax, jax.numpy as jnp
x = jnp.ones((8192, 256), jnp.float32)
w = jnp.ones((256, 2048), jnp.float32) / 256
v = jnp.ones((2048, 16), jnp.float32)
f = jax.jit(lambda x: (jnp.tanh(x @ w) @ v) * 2).lower(x).compile()
faults = []
for _ in range(13):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  jax.block_until_ready(f(x))
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
child = os.popen(sys.executable + ' -c "import os; print(os.environ.get(\'MALLOC_ARENA_MAX\'))"')
print(json.dumps({'kept': kept, 'faults': faults, 'child_arenas': child.read().strip()}))
'''


def _child(env_extra: dict) -> dict:
  env = {k: v for k, v in os.environ.items()
         if not k.startswith('MALLOC_') and k != 'GLIBC_TUNABLES'}
  env.update(env_extra, JAX_PLATFORMS='cpu')
  out = subprocess.run([sys.executable, '-c', CHILD], env=env, capture_output=True, text=True,
                       timeout=300, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.fast
@pytest.mark.skipif(platform.system() != 'Linux' or platform.libc_ver()[0] != 'glibc',
                    reason='glibc malloc settings')
def test_a_step_reuses_the_last_steps_pages():
  kept = _child({})
  default = _child({'MALLOC_ARENA_TEST': '8'})  # glibc configured by the user: left as it is
  pages = 8192 * 2048 * 4 // 4096
  assert kept['kept'] and not default['kept']
  # With glibc's defaults every run faults in its 64 MB of temporaries again; kept, a run after
  # the first mostly reuses the pages the one before freed (now and then a run's temporaries land
  # elsewhere in the heap and extend it once more).
  assert min(default['faults'][1:]) > pages // 2, default
  assert sorted(kept['faults'][1:])[3] < pages // 20, kept
  assert sum(kept['faults'][1:]) < sum(default['faults'][1:]) * 0.6, (kept, default)
  assert kept['faults'][0] > pages // 2  # (the first run touches them: they were never mapped)
  # A process started from a kept one runs with the same allocator (a peer in a child process).
  assert kept['child_arenas'] == '1' and default['child_arenas'] == 'None'


@pytest.mark.fast
def test_only_cpu_runs_and_unconfigured_glibc(monkeypatch):
  for name in [k for k in os.environ if k.startswith('MALLOC_')] + ['GLIBC_TUNABLES']:
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setenv('JAX_PLATFORMS', 'tpu')
  assert not host_memory.cpu_run() and not host_memory.keep_freed()
  assert 'MALLOC_ARENA_MAX' not in os.environ
  monkeypatch.setenv('JAX_PLATFORMS', 'cuda,cpu')
  assert not host_memory.cpu_run()
  monkeypatch.setenv('JAX_PLATFORMS', 'cpu')
  assert host_memory.cpu_run() and not host_memory.configured()
  # JAX_PLATFORMS unset: JAX's probes of the machine decide (a TPU chip, an NVIDIA or AMD GPU).
  monkeypatch.delenv('JAX_PLATFORMS')
  probes = host_memory.hardware_utils
  for tpus, nvidia, amd in ((0, False, 0), (4, False, 0), (0, True, 0), (0, False, 1)):
    monkeypatch.setattr(probes, 'num_available_tpu_chips_and_device_id', lambda t=tpus: (t, None))
    monkeypatch.setattr(probes, 'has_visible_nvidia_gpu', lambda n=nvidia: n)
    monkeypatch.setattr(probes, 'num_available_amd_gpus', lambda stop_at=None, a=amd: a)
    assert host_memory.cpu_run() == (not (tpus or nvidia or amd)), (tpus, nvidia, amd)
  monkeypatch.delattr(probes, 'has_visible_nvidia_gpu')  # (another JAX): left as glibc has it
  assert not host_memory.cpu_run()
  monkeypatch.setenv('JAX_PLATFORMS', 'cpu')
  monkeypatch.setenv('GLIBC_TUNABLES', 'glibc.malloc.arena_max=4')
  assert host_memory.configured() and not host_memory.keep_freed()  # the user's, as given
  assert 'MALLOC_ARENA_MAX' not in os.environ


def test_a_cpu_run_fits_its_step_to_the_hosts_memory_before_the_first_step(tmp_path, records_dir,
                                                                           monkeypatch):
  """A CPU's limit is the memory the host has available, shared by this process's CPU devices:
  the step is fitted to it before the first step as a TPU slice's is to its HBM (microbatches),
  and a step whose state alone exceeds it is one sentence (a batch of 1,000,000 ended in a
  RESOURCE_EXHAUSTED traceback after compiling)."""
  from conftest import test_config
  from electra_jax import UserError
  from electra_jax.pretraining import run as pretrain
  from electra_jax.train import aot
  assert 0 < aot.device_memory_limit() <= aot.host_available_bytes() // 8
  config = test_config(**{'data.records': records_dir, 'train_steps': 1,
                          'data.batch_size': 1024, 'data.eval_batch_size': 16})
  lines = []
  monkeypatch.setattr(aot, 'host_available_bytes', lambda: 8 * 24 * 2**20)  # 24 MiB a device
  pretrain.train_and_evaluate(config, str(tmp_path / 'fits'), log=lines.append)
  fitted = [l for l in lines if re.match(r'microbatches=auto: \d+ parts of \d+ rows per step', l)]
  assert fitted and int(fitted[0].split()[1]) > 1, lines[:12]
  monkeypatch.setattr(aot, 'host_available_bytes', lambda: 8 * 2**14)  # 16 KiB a device
  with pytest.raises(UserError, match=r'the parameters and optimizer state alone take .* GiB of '
                     r'the .* GiB per device'):
    pretrain.train_and_evaluate(config, str(tmp_path / 'does_not_fit'), log=lines.append)
