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
import functools
import hashlib
from importlib import metadata
import io
import json
import logging
import os
import pickle
import platform
import tempfile
import threading

import jax
from jax.experimental import serialize_executable
from jax.experimental.compilation_cache import compilation_cache
import jaxlib

from electra_jax.storage import fs

try:  # JAX's own cache entries and executables (private: `_serialized_from_entry` needs them)
  from jax._src import compilation_cache as jax_entries  # pylint: disable=ungrouped-imports
  from jax._src.lib import _jax
  from jax._src.lib import xla_client
except ImportError:  # (another JAX: programs its cache loaded are left to it, not kept)
  jax_entries = _jax = xla_client = None

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


class _Counter(logging.Filter):
  """Counts JAX's persistent-cache hits and misses from its compiler's log records, and lets
  through only what the log would have shown without it (the records below the level it had)."""

  def __init__(self, level: int):
    super().__init__()
    self.level, self.hits, self.misses = level, 0, 0
    self.hit = None  # (the thread, the key) of the last hit: its entry is what `Kept` keeps

  def filter(self, record):
    message = record.getMessage()
    if message.startswith('Persistent compilation cache hit'):
      self.hits += 1
      args = record.args if isinstance(record.args, tuple) else ()
      self.hit = (record.thread, args[-1]) if args and isinstance(args[-1], str) else None
    elif message.startswith('PERSISTENT COMPILATION CACHE MISS'):
      self.misses += 1
    return record.levelno >= self.level


CACHED = _Counter(logging.WARNING)  # (the counts of this process)


def enable(root: str | None, command: str | None = None) -> str | None:
  """Turns the cache on for this process, in `folder(root)`; `root` '' or None: off. Returns the
  folder used (JAX_COMPILATION_CACHE_DIR's where that is set), or None; raises Unusable, the cache
  left as it was, where a local folder cannot be made or written to. `command` (the command line,
  say) names the programs this run keeps or loads whole: the next run of the same command loads
  them in the background from its start (`_Ahead`)."""
  global AHEAD  # pylint: disable=global-statement
  path = (os.environ.get('JAX_COMPILATION_CACHE_DIR')
          or (folder(os.path.expanduser(root)) if root else None))
  if path:
    _check(path)
  _Kept.command, AHEAD = command, _Ahead()
  if not path:
    jax.config.update('jax_enable_compilation_cache', False)
    _Kept.folder = None
    return None
  _Kept.folder = os.path.join(path, 'kept')
  jax.config.update('jax_compilation_cache_dir', path)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', MIN_COMPILE_S)
  jax.config.update('jax_compilation_cache_max_size', MAX_BYTES)
  logger = logging.getLogger('jax._src.compiler')
  if CACHED not in logger.filters:
    CACHED.level = logger.getEffectiveLevel()
    logger.addFilter(CACHED)
    logger.setLevel(logging.DEBUG)  # (the filter keeps what is shown as it was)
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


def note(before: tuple[int, int, int]) -> str:
  """' (3 of 4 programs from the compilation cache, 2 of them kept whole: not traced)' since the
  counts `before` (counts()), or '' when none came from it."""
  kept = KEPT.loaded - before[2]
  hits, misses = CACHED.hits - before[0] + kept, CACHED.misses - before[1]
  if not hits:
    return ''
  whole = f', {kept} of them kept whole: not traced' if kept else ''
  return f' ({hits} of {hits + misses} programs from the compilation cache{whole})'


def counts() -> tuple[int, int, int]:
  """(JAX's cache hits, its misses, programs loaded whole) of this process so far."""
  return CACHED.hits, CACHED.misses, KEPT.loaded


# ================================================================================================
# Programs kept whole: loaded by the next run without tracing
# ================================================================================================
#
# JAX's cache above keys a program by its lowered text: a run traces and lowers every program
# before it can look (a Base fine-tuning step: about 1.3 s on a CPU, for a load of 1.1 s). A `Kept`
# program is keyed instead by what its trace depends on, all known before it: this package's
# source, the versions of the libraries that trace, JAX's settings, XLA's flags, the devices and
# the mesh, the arguments' shapes, dtypes and shardings, and the caller's description of what the
# program closes over (a pre-training's config, special ids, platform, model view and
# microbatches; a fine-tuning's config, model config, task and step count). A change to any of
# them is another key, so another program, compiled and kept in turn; a kept file that cannot be
# read is compiled again and replaced.

_UNKEPT = 'not serializable'  # kept in place of a program that cannot be
_KEPT_MAX_BYTES = 2 << 30  # the oldest-used kept programs go beyond this
_LISTS_KEPT = 1000  # lists of the programs a command used (_Ahead): the oldest go beyond this
_LIBRARIES = ('jax', 'jaxlib', 'flax', 'optax', 'numpy', 'ml_collections')


class _Kept:
  folder = None  # where, once `enable` turned the cache on
  command = None  # `enable`'s: names the list of programs loaded ahead (_Ahead)
  loaded = 0  # programs this process loaded whole (the log's note)
  programs = {}  # path -> the program this process compiled or loaded from it (the next seed's)


KEPT = _Kept()


@functools.cache
def _source_digest() -> str:
  """Of this package's Python source: another version of the code traces other programs."""
  package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  digest = hashlib.sha256()
  for folder_, dirs, files in sorted(os.walk(package)):
    dirs.sort()
    for name in sorted(files):
      if name.endswith('.py'):
        path = os.path.join(folder_, name)
        digest.update(os.path.relpath(path, package).encode() + b'\0')
        with open(path, 'rb') as f:
          digest.update(f.read() + b'\0')
  return digest.hexdigest()


@functools.cache
def _versions() -> dict:
  versions = {}
  for name in _LIBRARIES:
    try:
      versions[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      versions[name] = None
  return versions


def _environment() -> dict:
  """What, beside the code and the caller's description, a traced and compiled program depends
  on in this process."""
  client = jax.devices()[0].client
  return {
      'source': _source_digest(), 'versions': _versions(), 'host': host(),
      'backend': [client.platform, client.platform_version],
      'devices': [[d.id, d.device_kind, d.process_index] for d in jax.devices()],
      'config': {k: repr(v) for k, v in sorted(jax.config.values.items())
                 if not k.startswith(('jax_compilation_cache', 'jax_persistent_cache'))},
      'env': {k: os.environ.get(k) for k in ('XLA_FLAGS', 'LIBTPU_INIT_ARGS')},
  }


def _signature(args) -> tuple:
  leaves, tree = jax.tree.flatten(args)
  return tree, tuple((getattr(x, 'shape', None), str(getattr(x, 'dtype', type(x).__name__)),
                      getattr(x, 'weak_type', False), getattr(x, 'sharding', None))
                     for x in leaves)


def _path(name: str, describe: str, parts: dict) -> str | None:
  """The file of `name` kept under `describe` and `parts` in this process's environment, or None
  where nothing is kept (the cache off, or several processes: each keeps its own programs)."""
  where = kept_folder()
  if where is None or jax.process_count() > 1:
    return None
  AHEAD.start(where)
  key = hashlib.sha256(json.dumps({'name': name, 'describe': describe, 'parts': parts,
                                   'environment': _environment()},
                                  sort_keys=True, default=repr).encode()).hexdigest()
  return os.path.join(where, f'{name}-{key[:40]}.bin')


def _read(path: str | None):
  """What `path` holds, or None when it is absent or cannot be read (then made again)."""
  if path is None:
    return None
  try:
    with open(path, 'rb') as f:
      value = pickle.load(f)
  except FileNotFoundError:
    return None
  except Exception as e:  # a damaged or foreign file: removed, and made again
    logging.getLogger(__name__).info('kept %s not read (%s); making it again', path, e)
    with contextlib.suppress(OSError):
      os.remove(path)
    return None
  try:
    os.utime(path)  # (used: the last to go when the folder is trimmed)
  except OSError:  # (a folder shared read-only)
    pass
  return value


def _ids(sharding) -> list | None:
  devices = getattr(sharding, '_device_assignment', None)
  return None if devices is None else [d.id for d in devices]


class Kept:
  """`jitted` (a `jax.jit` function), its compiled programs kept in the cache's folder between
  runs under `name` and `describe` (JSON-able: what the function closes over, which its
  arguments do not say). Called as `jitted` is, and lowered and compiled ahead of time as it is
  (`lower(...).compile()`: loaded from the kept file where there is one, not traced)."""

  def __init__(self, jitted, name: str, describe: dict, mesh):
    self.jitted, self.name, self.mesh = jitted, name, mesh
    self.describe = json.dumps(describe, sort_keys=True, default=repr)
    self._programs = {}

  def lower(self, *args):
    return _Lowered(self, args)

  def eval_shape(self, *args):
    return self.jitted.eval_shape(*args)

  def __call__(self, *args):
    # A compiled program checks its arguments before it runs (TypeError: other shapes, dtypes
    # or trees; ValueError: other shardings): the programs of other arguments are tried, each in
    # microseconds, before the arguments' signature is made (1.5 ms for a Base state).
    for program in self._programs.values():  # (few: one per shape of the batch)
      try:
        return program(*args)
      except (TypeError, ValueError):
        pass
    return self.compiled(args)(*args)  # (its own error, where the arguments are wrong)

  def compiled(self, args):
    """The program of `args` (arrays or their shapes): kept in this process, loaded from its
    kept file, or compiled and kept."""
    signature = _signature(args)
    if signature not in self._programs:
      self._programs[signature] = self._program(args, signature)
    return self._programs[signature]

  def _program(self, args, signature):
    tree, leaves = signature
    path = _path(self.name, self.describe, {
        'mesh': [list(self.mesh.axis_names), self.mesh.device_ids.tolist()],
        'arguments': [str(tree), [[s, d, w, repr(h), _ids(h)] for s, d, w, h in leaves]]})
    if path in _Kept.programs:  # (another seed's, in this process)
      KEPT.loaded += 1
      return _Kept.programs[path]
    program, kept = (None, None) if path is None else (
        AHEAD.take(path) if AHEAD.has(path) else _load(path))
    if program is not None:
      KEPT.loaded += 1
    else:
      program, kept = self._compiled(args, path, kept)
    if path is not None and kept != _UNKEPT and os.path.exists(path):  # loaded or kept whole:
      _Kept.programs[path] = program  # the next seed's, and loaded ahead by the next run of this
      AHEAD.used(path)  #                command
    return program

  def _compiled(self, args, path, kept) -> tuple:
    """(the program of `args`, compiled or taken from JAX's cache; what was kept of it: None
    where nothing is)."""
    hits, misses = CACHED.hits, CACHED.misses
    program = self.jitted.lower(*args).compile()  # (through JAX's cache, as any program)
    if path is None or kept == _UNKEPT:
      return program, kept
    if CACHED.misses > misses:  # compiled here
      try:
        kept = (*serialize_executable.serialize(program), _device_ids(program))
      except Exception as e:  # not serializable here (a backend without it, closed-over
        #                       constants): the next runs leave it to JAX's cache
        logging.getLogger(__name__).info('program %s not kept (%s)', path, e)
        kept = _UNKEPT
    elif CACHED.hits == hits + 1 and CACHED.hit and CACHED.hit[0] == threading.get_ident():
      try:  # loaded from JAX's cache: the one hit this thread's compile logged
        kept = (*_serialized_from_entry(program, CACHED.hit[1]), _device_ids(program))
      except Exception as e:  # (the entry gone, or another format): left to JAX's cache
        logging.getLogger(__name__).info('program %s not kept (%s)', path, e)
        return program, None
    else:  # from memory (compiled for another function of the same trace): left to JAX
      return program, None
    _keep(kept, path)
    return program, kept


def _serialized_from_entry(program, key: str) -> tuple:
  """`serialize_executable.serialize(program)` for a program JAX's cache loaded (under `key`), its
  executable given as the bytes its compile wrote there: a loaded executable does not serialize
  whole again (with jaxlib 0.10.2 on CPUs the copy misses its kernels: `Function
  add_select_fusion not found` at its first run). JAX's cache's own entry format (private: a
  change raises, and the program is left to JAX's cache)."""
  # pylint: disable=protected-access
  if jax_entries is None:
    raise ValueError('this JAX has no compilation_cache module where it was')
  entry = jax_entries._cache.get(key) if jax_entries._cache is not None else None
  if entry is None:
    raise ValueError(f'JAX\'s cache has no entry {key}')
  executable, _ = jax_entries.extract_executable_and_time(
      jax_entries.decompress_executable(entry))
  given = []

  class Pickler(serialize_executable._JaxPjrtPickler):
    def persistent_id(self, obj):
      if isinstance(obj, (xla_client.LoadedExecutable, _jax.Executable)):
        given.append(obj)
        return ('exec', executable)
      return super().persistent_id(obj)

  unloaded = program._executable._unloaded_executable
  if (getattr(unloaded, 'mut', None) and unloaded.mut.in_mut) or program._params.const_args:
    raise ValueError('a program with closed-over mutable arrays or constants')
  args_info, in_tree = jax.tree.flatten(program.args_info)
  with io.BytesIO() as f:
    Pickler(f).dump((unloaded, args_info, program._no_kwargs))
    payload = f.getvalue()
  if len(given) != 1:
    raise ValueError(f'{len(given)} executables in one program')
  return payload, in_tree, program.out_tree


def _load(path: str) -> tuple:
  """(the program kept in `path`, loaded; or None, what the file held: None, or _UNKEPT for a
  program that does not serialize). A file this build cannot load is removed."""
  kept = _read(path)
  if kept is None or kept == _UNKEPT:
    return None, kept
  try:
    payload, in_tree, out_tree, ids = kept
    by_id = {d.id: d for d in jax.devices()}
    return serialize_executable.deserialize_and_load(
        payload, in_tree, out_tree, execution_devices=[by_id[i] for i in ids]), None
  except Exception as e:  # (written by a build this key does not tell apart): removed
    logging.getLogger(__name__).info('kept %s not loaded (%s); compiling it', path, e)
    with contextlib.suppress(OSError):
      os.remove(path)
    return None, None


class _Ahead:
  """The kept programs the last run of this command used, loaded in a background thread from
  `load_ahead` or this run's first look for one (its first `_path`), while it imports and reads
  its checkpoint and data. XLA loads a program without holding Python's lock: a Base fine-tuning's
  two programs take about 1 s of a CPU start. Each run writes the list of what it used (the
  files' names) under its command and environment in the kept folder's `runs/`; a program no
  longer wanted is loaded for nothing, one not listed is loaded when asked for, as before."""

  def __init__(self):
    self.started, self.listed, self.list_path = False, [], None
    self.pending, self.done = {}, {}  # path -> the thread's Event; path -> what _load gave
    self.in_use, self.taken = [], 0  # names this run used; programs it took loaded

  def start(self, where: str):
    if self.started:
      return
    self.started = True
    if _Kept.command is None:
      return
    key = hashlib.sha256(json.dumps({'command': _Kept.command, 'environment': _environment()},
                                    sort_keys=True, default=repr).encode()).hexdigest()
    self.list_path = os.path.join(where, 'runs', f'{key[:40]}.json')
    try:
      with open(self.list_path) as f:
        self.listed = [n for n in json.load(f)
                       if isinstance(n, str) and n.endswith('.bin') and '/' not in n]
      os.utime(self.list_path)  # (used: the last to go when the lists are trimmed)
    except (OSError, ValueError):
      return
    self.pending = {os.path.join(where, n): threading.Event() for n in self.listed}
    threading.Thread(target=self._load_all, args=(list(self.pending.items()),), daemon=True,
                     name='kept programs ahead').start()

  def _load_all(self, pending: list):
    for path, loaded in pending:
      try:
        self.done[path] = _load(path)
      except Exception:  # pylint: disable=broad-except  (asked for again, it says why)
        self.done[path] = (None, None)
      loaded.set()

  def has(self, path: str) -> bool:
    return path in self.pending

  def take(self, path: str) -> tuple:
    """(the program kept at `path`, loaded, or None; what its file held: see `_load`), once the
    thread has it."""
    self.pending.pop(path).wait()
    program, kept = self.done.pop(path)
    self.taken += program is not None
    return program, kept

  def used(self, path: str):
    """Notes that this run used the program kept at `path`; the list is written when it is no
    longer the start of the last run's."""
    name = os.path.basename(path)
    if self.list_path is None or name in self.in_use:
      return
    self.in_use.append(name)
    if self.in_use != self.listed[:len(self.in_use)]:
      self.listed = list(self.in_use)
      if _write(json.dumps(self.in_use).encode(), self.list_path):
        _trim(os.path.dirname(self.list_path), '.json', _LISTS_KEPT)


AHEAD = _Ahead()


class _Lowered:
  """`Kept.lower(...)`: its `compile()` the kept program (not traced where it was kept); the rest
  (the lowered text, its costs) jitted's lowering, traced where asked for."""

  def __init__(self, kept: Kept, args: tuple):
    self.kept, self.args = kept, args

  def compile(self, *args, **kwargs):
    if args or kwargs:  # (compiler options: not the kept program's)
      return self.kept.jitted.lower(*self.args).compile(*args, **kwargs)
    return self.kept.compiled(self.args)

  def __getattr__(self, name):
    if name in ('kept', 'args'):  # (not yet set: copied or unpickled)
      raise AttributeError(name)
    return getattr(self.kept.jitted.lower(*self.args), name)


def _device_ids(program) -> list[int]:
  """The devices `program` runs on, in its order (its arguments' or results' shardings')."""
  for sharding in jax.tree.leaves((program.input_shardings, program.output_shardings)):
    return [d.id for d in sharding._device_assignment]  # pylint: disable=protected-access
  raise ValueError('a program of no arrays')


def load_ahead():
  """Starts loading, in a background thread, the kept programs the last run of this command used
  (`_Ahead`): called by a launched run as soon as it is one process with its backend up, before
  its own imports and reads. Otherwise the first look into the kept folder starts it."""
  where = kept_folder()
  if where is not None and jax.process_count() == 1:
    AHEAD.start(where)


def kept_value(name: str, describe: dict, make):
  """`make()` (a value that pickles: shapes traced from the model, say), kept as programs are:
  the next run with the same `describe` (all that `make` depends on) reads it instead."""
  path = _path(name, json.dumps(describe, sort_keys=True, default=repr), {})
  value = _read(path)
  if value is None:
    value = make()
    if path is not None:
      _keep(value, path)
  return value


def kept_folder() -> str | None:
  """Where whole programs are kept: beside JAX's cache where `enable` turned it on (launched runs;
  code that patches functions, as tests do, would otherwise load programs traced without the
  patch), None where it is off."""
  if not jax.config.jax_enable_compilation_cache:
    return None
  return _Kept.folder


def _keep(value, path: str):
  """Writes `value` (pickled) to `path` whole or not at all; a folder that cannot be written
  leaves the run as it is (the next one makes it again)."""
  try:
    data = pickle.dumps(value)
  except Exception as e:  # pylint: disable=broad-except  (a value that does not pickle)
    logging.getLogger(__name__).info('%s not kept (%s)', path, e)
    return
  if _write(data, path):
    _trim(os.path.dirname(path))


def _write(data: bytes, path: str) -> bool:
  """`data` in `path`, whole or not at all (False: the disk full or read-only, said at INFO)."""
  partial = f'{path}.{os.getpid()}.partial'
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(partial, 'wb') as f:
      f.write(data)
    os.replace(partial, path)
    return True
  except OSError as e:
    logging.getLogger(__name__).info('%s not kept (%s)', path, e)
    if os.path.exists(partial):
      os.remove(partial)
    return False


def _trim(where: str, suffix: str = '.bin', most: int | None = None):
  """The oldest-used files of `where` ending in `suffix` removed, beyond _KEPT_MAX_BYTES in all
  or beyond `most` files."""
  files = []
  for entry in os.scandir(where):
    if entry.name.endswith(suffix):
      stat = entry.stat()
      files.append((stat.st_mtime, stat.st_size, entry.path))
  total, count = sum(size for _, size, _ in files), len(files)
  for _, size, path in sorted(files):
    if total <= _KEPT_MAX_BYTES and (most is None or count <= most):
      break
    try:
      os.remove(path)
    except OSError:
      pass
    total, count = total - size, count - 1
