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

import hashlib
import logging
import os
import platform

import jax
import jaxlib

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


class _Counter(logging.Filter):
  """Counts JAX's persistent-cache hits and misses from its compiler's log records, and lets
  through only what the log would have shown without it (the records below the level it had)."""

  def __init__(self, level: int):
    super().__init__()
    self.level, self.hits, self.misses = level, 0, 0

  def filter(self, record):
    message = record.getMessage()
    if message.startswith('Persistent compilation cache hit'):
      self.hits += 1
    elif message.startswith('PERSISTENT COMPILATION CACHE MISS'):
      self.misses += 1
    return record.levelno >= self.level


CACHED = _Counter(logging.WARNING)  # (the counts of this process)


def enable(root: str | None) -> str | None:
  """Turns the cache on for this process, in `folder(root)`; `root` '' or None: off. Returns the
  folder used (JAX_COMPILATION_CACHE_DIR's where that is set), or None."""
  if os.environ.get('JAX_COMPILATION_CACHE_DIR'):
    path = os.environ['JAX_COMPILATION_CACHE_DIR']
  elif root:
    path = folder(os.path.expanduser(root))
  else:
    jax.config.update('jax_enable_compilation_cache', False)
    return None
  jax.config.update('jax_compilation_cache_dir', path)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', MIN_COMPILE_S)
  jax.config.update('jax_compilation_cache_max_size', MAX_BYTES)
  logger = logging.getLogger('jax._src.compiler')
  if CACHED not in logger.filters:
    CACHED.level = logger.getEffectiveLevel()
    logger.addFilter(CACHED)
    logger.setLevel(logging.DEBUG)  # (the filter keeps what is shown as it was)
  return path


def note(before: tuple[int, int]) -> str:
  """' (3 of 4 programs from the compilation cache)' since the counts `before` (hits, misses), or
  '' when none came from it."""
  hits, misses = CACHED.hits - before[0], CACHED.misses - before[1]
  if not hits:
    return ''
  return f' ({hits} of {hits + misses} programs from the compilation cache)'


def counts() -> tuple[int, int]:
  return CACHED.hits, CACHED.misses
