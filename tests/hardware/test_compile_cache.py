"""JAX's persistent compilation cache for launched runs (hardware/compile_cache.py): a program
compiled by one process is loaded by the next, in a folder of this jax and host, and counted."""

import json
import os
import subprocess
import sys

import pytest

from conftest import CHILD_ENV
from electra_jax.hardware import compile_cache

CHILD = r'''
import json, sys
import jax, jax.numpy as jnp
from electra_jax.hardware import compile_cache
path = compile_cache.enable(sys.argv[1])
before = compile_cache.counts()
f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
f(jnp.ones((64, 64))).block_until_ready()
hits, misses = compile_cache.counts()
print(json.dumps({'path': path, 'hits': hits - before[0], 'misses': misses - before[1],
                  'note': compile_cache.note(before)}))
'''


def _child(root: str) -> dict:
  env = {k: v for k, v in CHILD_ENV.items() if k != 'JAX_COMPILATION_CACHE_DIR'}
  done = subprocess.run([sys.executable, '-c', CHILD, root], capture_output=True, text=True,
                        env=env, timeout=120, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.fast
def test_a_program_compiled_by_one_run_is_loaded_by_the_next_and_said_so(tmp_path):
  first = _child(str(tmp_path / 'cache'))
  assert first['path'] == compile_cache.folder(str(tmp_path / 'cache'))
  assert first['hits'] == 0 and first['misses'] >= 1 and first['note'] == ''
  assert os.listdir(first['path'])  # written
  second = _child(str(tmp_path / 'cache'))
  assert second['hits'] >= 1 and second['misses'] == 0
  assert second['note'] == (f' ({second["hits"]} of {second["hits"]} programs from the '
                            'compilation cache)')
  off = _child('')  # --compilation_cache='': off
  assert off['path'] is None and off['hits'] == 0


@pytest.mark.fast
def test_the_cache_folder_is_this_jax_and_host(monkeypatch):
  """Another jax or jaxlib, or a host with other CPU features (XLA compiles CPU programs for the
  host's instruction set, which JAX's key does not hold), reads another folder."""
  here = compile_cache.folder('/c')
  assert here.startswith('/c/jax-') and compile_cache.host() in here
  monkeypatch.setattr(compile_cache.jax, '__version__', '0.0.1')
  assert compile_cache.folder('/c') != here
  monkeypatch.undo()
  monkeypatch.setattr(compile_cache.platform, 'processor', lambda: 'another cpu')
  assert compile_cache.folder('/c') != here
