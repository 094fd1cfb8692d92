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
compile_cache.MIN_COMPILE_S = 0.0  # (a small program: kept however fast it compiled)
path = compile_cache.enable(sys.argv[1])
before = compile_cache.counts()
f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
f(jnp.ones((64, 64))).block_until_ready()
hits, misses, _ = compile_cache.counts()
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


KEPT_CHILD = r'''
import json, sys
import jax, jax.numpy as jnp, numpy as np, optax
from electra_jax.hardware import compile_cache
from electra_jax.train import partitioning
root, rate, rows, keep, tag, command = (sys.argv[1], float(sys.argv[2]), int(sys.argv[3]),
                                        sys.argv[4] == 'kept', sys.argv[5], sys.argv[6])
compile_cache.enable(root, command=command)
if tag == 'entries unreadable':  # (another JAX's format, say)
  compile_cache._serialized_from_entry = lambda *a: 1 / 0
traces = []
tx = optax.adamw(rate)
def step(p, o, x, y):  # a train step: XLA fuses its iota, selects and updates into many kernels
  traces.append(1)
  loss = lambda p: optax.softmax_cross_entropy(jax.nn.gelu(x @ p['w1']) @ p['w2'],
                                               jax.nn.one_hot(y, 8)).mean()
  l, g = jax.value_and_grad(loss)(p)
  u, o = tx.update(g, o, p)
  return optax.apply_updates(p, u), o, l
mesh = partitioning.make_mesh()
fn = jax.jit(step)
if keep:
  fn = compile_cache.Kept(fn, 'step', {'rate': rate, 'tag': tag}, mesh)
p = {'w1': jnp.full((16, 32), 0.1, jnp.float32), 'w2': jnp.full((32, 8), 0.1, jnp.float32)}
o = tx.init(p)
x, y = jnp.arange(rows * 16.0).reshape(rows, 16) / 64, jnp.arange(rows) % 8
losses, before = [], compile_cache.counts()  # (the arrays' own programs above not counted)
given = (p, o, x, y)
for _ in range(3):
  p, o, l = fn(p, o, x, y)
  losses.append(float(l))
note = compile_cache.note(before)
again = True  # another seed's program of the same description: this process's own
if keep:
  again = compile_cache.Kept(jax.jit(step), 'step', {'rate': rate, 'tag': tag}, mesh).compiled(
      given) is fn.compiled(given)
print(json.dumps({'traces': len(traces), 'losses': losses, 'note': note, 'again': again,
                  'ahead': compile_cache.AHEAD.taken, 'w1': np.asarray(p['w1']).tolist()}))
'''


def _kept(root, rate=1e-2, rows=4, keep='kept', tag='', command='train') -> dict:
  env = {k: v for k, v in CHILD_ENV.items() if k != 'JAX_COMPILATION_CACHE_DIR'}
  done = subprocess.run([sys.executable, '-c', KEPT_CHILD, str(root), str(rate), str(rows), keep,
                         tag, command],
                        capture_output=True, text=True, env=env, timeout=120, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  return json.loads(done.stdout.splitlines()[-1])


def test_a_kept_program_is_loaded_by_the_next_run_without_tracing_and_computes_the_same(tmp_path):
  """A program compiled by a run is kept whole (compile_cache.Kept) and loaded by the next run
  untraced, its steps giving the same numbers to the bit, in the background from the run's start
  where the same command used it last (compile_cache._Ahead); other shapes are another program.
  A description whose program JAX's own cache already holds (a setting the program does not read,
  changed) is traced and taken from there, and kept from JAX's entry: re-serialized, a program
  loaded from there is not whole (loaded again, XLA's CPU runtime misses its kernels), so the run
  after it would fail. A damaged file is removed and made again; with the cache off nothing is
  kept."""
  root = tmp_path / 'cache'
  kept = os.path.join(compile_cache.folder(str(root)), 'kept')
  programs = lambda: sorted(f for f in os.listdir(kept) if f.endswith('.bin'))
  first = _kept(root)
  assert first['traces'] == 1 and first['note'] == ''  # compiled (JAX's cache had nothing)
  assert first['again'] and first['ahead'] == 0  # (another seed: this process's program)
  files = programs()
  assert len(files) == 1 and files[0].startswith('step-'), files
  second = _kept(root)
  assert second['traces'] == 0 and second['ahead'] == 1 and second['again'], second
  assert second['losses'] == first['losses'] and second['w1'] == first['w1']
  assert second['note'] == (' (1 of 1 programs from the compilation cache, 1 of them kept whole: '
                            'not traced)')
  another = _kept(root, command='another command')  # loaded when asked, not ahead
  assert another['traces'] == 0 and another['ahead'] == 0 and another['w1'] == first['w1']
  tag = 'a setting the program does not read'
  other = _kept(root, tag=tag)  # the same program: JAX's, kept from JAX's own entry
  assert other['traces'] == 1 and other['ahead'] == 0 and other['again']
  assert other['note'] == ' (1 of 1 programs from the compilation cache)'
  assert other['losses'] == first['losses'] and other['w1'] == first['w1']
  assert len(programs()) == 2
  other = _kept(root, tag=tag)
  assert other['traces'] == 0 and other['ahead'] == 1
  assert other['losses'] == first['losses'] and other['w1'] == first['w1']
  wider = _kept(root, rows=6)  # other shapes: another program, compiled and kept
  assert wider['traces'] == 1 and len(programs()) == 3
  wider = _kept(root, rows=6)
  assert wider['traces'] == 0 and wider['ahead'] == 1
  path = os.path.join(kept, files[0])
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 2)
  damaged = _kept(root)
  assert damaged['traces'] == 1 and damaged['losses'] == first['losses']
  assert os.path.getsize(path) > 0 and _kept(root)['traces'] == 0  # made again, whole
  for name in programs():  # listed for the command, gone: JAX's program, kept again
    os.remove(os.path.join(kept, name))
  gone = _kept(root)
  assert gone['traces'] == 1 and gone['ahead'] == 0 and gone['losses'] == first['losses']
  assert programs() == files
  off = _kept('')
  assert off['traces'] == 1 and off['note'] == '' and programs() == files


def test_a_program_whose_jax_cache_entry_cannot_be_read_is_left_to_jax(tmp_path):
  """Where JAX's entry of a program it loaded cannot be read, nothing is kept (no marker either:
  the next run may read it), and the program runs as JAX's cache gave it."""
  root = tmp_path / 'cache'
  kept = os.path.join(compile_cache.folder(str(root)), 'kept')
  first = _kept(root)
  for _ in range(2):
    other = _kept(root, tag='entries unreadable')
    assert other['traces'] == 1 and other['losses'] == first['losses']
    assert len([f for f in os.listdir(kept) if f.endswith('.bin')]) == 1


@pytest.mark.fast
def test_a_kept_programs_key_holds_the_code_libraries_and_devices(monkeypatch, tmp_path):
  """Another source of this package, another version of a library that traces, other XLA flags or
  another description name another file; the same ones the same file."""
  monkeypatch.setattr(compile_cache._Kept, 'folder', str(tmp_path))
  here = compile_cache._path('step', '{}', {})
  assert here == compile_cache._path('step', '{}', {}) and here.startswith(str(tmp_path))
  assert compile_cache._path('step', '{"rate": 1}', {}) != here
  assert compile_cache._path('step', '{}', {'arguments': 'f32[4]'}) != here
  monkeypatch.setenv('XLA_FLAGS', os.environ.get('XLA_FLAGS', '') + ' --xla_cpu_use_thunk_runtime')
  assert compile_cache._path('step', '{}', {}) != here
  monkeypatch.undo()
  monkeypatch.setattr(compile_cache._Kept, 'folder', str(tmp_path))
  assert compile_cache._path('step', '{}', {}) == here
  monkeypatch.setattr(compile_cache, '_versions', lambda: {'jax': '0.0.1'})
  assert compile_cache._path('step', '{}', {}) != here
  monkeypatch.undo()
  monkeypatch.setattr(compile_cache._Kept, 'folder', str(tmp_path))
  monkeypatch.setattr(compile_cache, '_source_digest', lambda: 'another source')
  assert compile_cache._path('step', '{}', {}) != here
  monkeypatch.setattr(compile_cache._Kept, 'folder', None)  # the cache off (or tests: not enabled)
  assert compile_cache._path('step', '{}', {}) is None


@pytest.mark.fast
def test_the_lists_of_programs_commands_used_keep_the_most_recently_used(tmp_path):
  """The folder of lists (one per command, `_Ahead`) keeps its `most` most recently used files;
  the programs beside them are not counted."""
  for i in range(5):
    path = tmp_path / f'{i}.json'
    path.write_text('[]')
    os.utime(path, (1000 + i, 1000 + i))
  (tmp_path / 'a.bin').write_bytes(b'program')
  os.utime(tmp_path / 'a.bin', (1, 1))
  compile_cache._trim(str(tmp_path), '.json', 3)
  assert sorted(os.listdir(tmp_path)) == ['2.json', '3.json', '4.json', 'a.bin']
