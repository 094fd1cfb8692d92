"""JAX's persistent compilation cache for launched runs: a program compiled once is loaded again by
the next run that compiles the same program, instead of compiled anew (a Base step: about two
minutes on a GPU host's CPU).

    enable(root)    -> programs cached under root/<this jax, jaxlib and host>/ (JAX's own cache)
    CACHED.hits     -> how many programs came from it since (what a run's log says)

JAX keys each entry by the program, the jaxlib and backend versions, the devices (kinds and
count: the topology), the compile options and XLA's flags, so another version, chip or slice
never loads a wrong program. XLA compiles CPU programs for this host's instruction set, which the
key does not hold: the folder is named by it too, so a cache on a shared home folder is never read
by a host with other CPU features. `JAX_COMPILATION_CACHE_DIR`, where set, is used as it is.
"""

import contextlib
import hashlib
import os
import platform
import tempfile

import jax
from jax.experimental.compilation_cache import compilation_cache
import jax.monitoring
import jaxlib

from electra_jax.storage import fs

DEFAULT_ROOT = os.path.join(os.environ.get('XDG_CACHE_HOME') or os.path.join(
    os.path.expanduser('~'), '.cache'), 'electra_jax', 'xla')
MAX_BYTES = 4 << 30  # least recently used entries go beyond this (JAX's LRU cache)
MIN_COMPILE_S = 0.0  # every program: a run compiles a few, each worth its file


def host() -> str:
  """What a CPU program compiled here depends on: the machine and its CPU's features."""
  features = ''
  try:
    with open('/proc/cpuinfo') as f:
      features = next((l for l in f if l.startswith(('flags', 'Features'))), '')
  except OSError:
    pass
  text = f'{platform.machine()} {platform.processor()} {" ".join(sorted(features.split()))}'
  return hashlib.sha256(text.encode()).hexdigest()[:12]


def folder(root: str) -> str:
  """The cache of this JAX, jaxlib and host under `root`."""
  return os.path.join(root, f'jax-{jax.__version__}-jaxlib-{jaxlib.__version__}-{host()}')


class Unusable(Exception):
  """The cache's folder cannot be made or written to (`path`, `why`)."""

  def __init__(self, path: str, why: str):
    super().__init__(f'{path}: {why}')
    self.path, self.why = path, why


def _check(path: str):
  """Makes the local folder `path` if need be and writes a file there (then removes it), or raises
  Unusable: JAX itself would only warn at every program it fails to read or write there. A bucket
  (gs://...) is left to JAX."""
  if fs.remote(path):
    return
  try:
    os.makedirs(path, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path, prefix='.probe-'):
      pass
  except OSError as e:
    raise Unusable(path, (e.strerror or str(e)).lower()) from None


class _Counter:
  """JAX's persistent-cache hits and the programs compiled while it was on, counted from the
  events JAX records (`jax.monitoring`)."""

  def __init__(self):
    self.hits, self.requests, self.listening = 0, 0, False

  @property
  def misses(self) -> int:
    return self.requests - self.hits

  def __call__(self, event: str, **_):
    if event == '/jax/compilation_cache/cache_hits':
      self.hits += 1
    elif event == '/jax/compilation_cache/compile_requests_use_cache':
      self.requests += 1


CACHED = _Counter()  # (the counts of this process, from the first `enable`)


def enable(root: str | None) -> str | None:
  """Turns the cache on for this process, in `folder(root)`; `root` '' or None: off. Returns the
  folder used (JAX_COMPILATION_CACHE_DIR's where that is set), or None; raises Unusable, the cache
  left as it was, where a local folder cannot be made or written to."""
  path = (os.environ.get('JAX_COMPILATION_CACHE_DIR')
          or (folder(os.path.expanduser(root)) if root else None))
  if path:
    _check(path)
  if not CACHED.listening:
    jax.monitoring.register_event_listener(CACHED)
    CACHED.listening = True
  if not path:
    jax.config.update('jax_enable_compilation_cache', False)
    return None
  jax.config.update('jax_compilation_cache_dir', path)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', MIN_COMPILE_S)
  jax.config.update('jax_compilation_cache_max_size', MAX_BYTES)
  return path


@contextlib.contextmanager
def off():
  """JAX's persistent compilation cache off inside: for programs compiled for devices that are
  not here (a TPU slice: it could not load them, so writing them would only fill it and warn on
  every read)."""
  before = jax.config.jax_enable_compilation_cache
  jax.config.update('jax_enable_compilation_cache', False)
  compilation_cache.reset_cache()  # JAX decides once per process whether to use it: decide again
  try:
    yield
  finally:
    jax.config.update('jax_enable_compilation_cache', before)
    compilation_cache.reset_cache()


def note(before: tuple[int, int]) -> str:
  """' (3 of 4 programs from the compilation cache)' since the counts `before` (counts()), or ''
  when none came from it."""
  hits, misses = CACHED.hits - before[0], CACHED.misses - before[1]
  if not hits:
    return ''
  return f' ({hits} of {hits + misses} programs from the compilation cache)'


def counts() -> tuple[int, int]:
  """(JAX's cache hits, the programs compiled while it was on) of this process so far."""
  return CACHED.hits, CACHED.misses
