"""One file-system layer for every path the project reads or writes: local paths or URLs.

    fs.join(workdir, 'metrics.jsonl'); fs.open(path, 'w'); fs.makedirs(folder); fs.replace(a, b)

Paths are etils.epath's, as Orbax's checkpoints' are: local paths go to `os`, `os.path` and
`shutil` (no TensorFlow import), URLs (gs://: SCHEMES) to TensorFlow's file
systems (`tf.io.gfile`), the ones tf.data, TFRecord writers and TensorBoard use for them too. So a
workdir, a records folder, a corpus, a vocabulary, an `init_from` folder, an export or fine-tuning
files may each live in a bucket. What this module adds to epath: Python's errors for the stores'
(remote_fs.py), UTF-8 text and a file object for every mode, atomic writes, a full disk and the
free space in one sentence, the bucket's credentials checked before anything runs.

On object stores a file becomes visible only when its upload completes, so `write_atomic` writes
the final name directly there; locally it writes a temporary name and renames it. Errors come back
as Python's: FileNotFoundError, PermissionError, or OSError with the store's message.
"""

import builtins
import codecs
import contextlib
import errno
import glob as glob_lib
import io
import json
import math
import os
import posixpath
import re
import shutil
import tempfile

from etils import epath
import numpy as np
import tensorstore as ts

from electra_jax import UserError
from electra_jax.storage import remote_fs, tf_import

_SCHEME = re.compile(r'^[a-zA-Z][a-zA-Z0-9+.-]*://')


def remote(path) -> bool:
  """Whether `path` is a URL (gs://bucket/...) rather than a local path."""
  path = os.fspath(path)
  return bool(_SCHEME.match(path)) and not path.startswith('file://')


def _local(path) -> str:
  path = os.fspath(path)
  return path[len('file://'):] if path.startswith('file://') else path


# ---- paths ------------------------------------------------------------------------------------

def join(path, *parts) -> str:
  path = os.fspath(path)
  if remote(path):
    return posixpath.join(path, *parts)
  return os.path.join(path, *parts)


def dirname(path) -> str:
  path = os.fspath(path)
  return posixpath.dirname(path.rstrip('/')) if remote(path) else os.path.dirname(path)


def basename(path) -> str:
  path = os.fspath(path)
  return posixpath.basename(path.rstrip('/')) if remote(path) else os.path.basename(path)


def abspath(path) -> str:
  path = os.fspath(path)
  return path if remote(path) else os.path.abspath(_local(path))


def bucket(path) -> str:
  """'gs://name' of a path in a bucket ('' for a local path)."""
  match = re.match(r'^([a-zA-Z][a-zA-Z0-9+.-]*://[^/]+)', os.fspath(path))
  return match.group(1) if match and remote(path) else ''


# ---- queries and changes: etils.epath ----------------------------------------------------------

# The URL schemes a path may have: Google Cloud Storage, which TensorFlow's file systems (and so
# etils.epath, Orbax's checkpoints, tf.data) and TensorStore read themselves, and which the tests
# prove against a real storage server. (s3:// and az:// would need tensorflow-io's plugins, which
# nothing here installs or tests: they are refused in one sentence, not half-supported.)
SCHEMES = ('gs://',)


def _url(path) -> str:
  """`path` (a URL), checked to be one of SCHEMES."""
  path = os.fspath(path)
  if not path.startswith(SCHEMES):
    raise UserError(f'{path}: {path.split("://")[0]}:// paths are not supported (buckets are '
                    f'{", ".join(SCHEMES)}); give a local path or a bucket\'s (copy the files '
                    'there or here first)')
  tf_import.tensorflow()  # (once, quietly and off the accelerators, before epath's backend)
  return path


def _path(path) -> epath.Path:
  """`path` as an epath.Path: os, os.path and shutil for a local path, TensorFlow's file systems
  for a URL."""
  return epath.Path(_url(path) if remote(path) else _local(path))


def exists(path) -> bool:
  with remote_fs.errors(path):
    return _path(path).exists()


def isdir(path) -> bool:
  with remote_fs.errors(path):
    return _path(path).is_dir()


def isfile(path) -> bool:
  with remote_fs.errors(path):
    return _path(path).is_file()


def broken_link(path) -> str:
  """Where the local `path` is a symbolic link that leads nowhere, why ('a loop of links: b',
  'No such file or directory: /x'); '' otherwise."""
  if remote(path):
    return ''
  local = _local(path).rstrip(os.sep) or os.sep
  if not os.path.islink(local):
    return ''
  try:
    os.stat(local)
  except OSError as e:
    return (f'{"a loop of links" if e.errno == errno.ELOOP else e.strerror}: '
            f'{os.readlink(local)}')
  return ''


def getsize(path) -> int:
  if not remote(path):  # (epath's local stat also looks up the owner's name)
    return os.path.getsize(_local(path))
  with remote_fs.errors(path):
    return _path(path).stat().length


def listdir(path) -> list[str]:
  """Names in a folder (without a trailing '/' for subfolders; backup files `name~` left out,
  as TensorFlow's file systems leave them out)."""
  with remote_fs.errors(path):
    return [p.name for p in _path(path).iterdir()]


def glob(pattern) -> list[str]:
  """The paths `pattern` matches (wildcards in any part, a folder's included)."""
  if not remote(pattern):  # (epath globs below a folder, a pattern's folders fixed)
    return glob_lib.glob(_local(pattern))
  with remote_fs.errors(pattern):
    return remote_fs.gfile().glob(_url(pattern))


def walk_files(folder) -> list[str]:
  """Every file below `folder`, recursively."""
  with remote_fs.errors(folder):
    return [os.fspath(root / name) for root, _, names in _path(folder).walk() for name in names]


def makedirs(path, exist_ok: bool = True):
  with remote_fs.errors(path):
    _path(path).mkdir(parents=True, exist_ok=exist_ok)


def remove(path):
  with remote_fs.errors(path):
    _path(path).unlink()


def rmdir(path):
  """Removes an empty folder (on object stores: its marker, if any); OSError if it is not empty."""
  with remote_fs.errors(path):
    if listdir(path):
      raise OSError(errno.ENOTEMPTY, 'folder not empty', os.fspath(path))
    _path(path).rmtree()


def rmtree(path, ignore_errors: bool = False):
  try:
    with remote_fs.errors(path):
      _path(path).rmtree()
  except OSError:
    if not ignore_errors:
      raise


def replace(src, dst):
  """Renames a file, replacing `dst` (on object stores: a copy, then the source is deleted)."""
  with remote_fs.errors(src):
    _path(src).replace(_path(dst))


def copyfile(src, dst):
  with remote_fs.errors(src):
    _path(src).copy(_path(dst), overwrite=True)


def copytree(src, dst):
  """Copies the files under folder `src` to `dst` (which must not exist)."""
  makedirs(dst, exist_ok=False)
  for name in listdir(src):
    (copytree if isdir(join(src, name)) else copyfile)(join(src, name), join(dst, name))


def move_tree(src, dst):
  """Moves a folder: a rename locally, a copy then a delete on an object store."""
  if not remote(src) and not remote(dst):
    os.replace(_local(src), _local(dst))
    return
  copytree(src, dst)
  rmtree(src)


# ---- contents ---------------------------------------------------------------------------------

def open(path, mode: str = 'r', encoding: str | None = None,
         newline: str | None = None):
  """A file object; text modes read and write UTF-8 (a remote file's line ends are kept as they
  are, as newline='' keeps them)."""
  if not remote(path):
    if 'b' not in mode and encoding is None:
      encoding = 'utf-8'
    return builtins.open(_local(path), mode, encoding=encoding, newline=newline)
  return remote_fs.File(_url(path), mode)


def open_binary(path):
  """A buffered binary reader of a local or remote file (readline(limit), tell, iteration)."""
  if not remote(path):
    return builtins.open(_local(path), 'rb')
  return io.BufferedReader(remote_fs.RawRemote(_url(path)), buffer_size=1 << 20)


def read_text(path) -> str:
  with open(path) as f:
    return f.read()


class DamagedFile(UserError, ValueError):
  """A file the project wrote (or reads) does not parse: the sentence names it and the fix."""


def read_user_text(path) -> str:
  """The text of a file a user gave (their data): UTF-8 (a byte-order mark read away), or UTF-16
  with its byte-order mark (what spreadsheets save as 'Unicode text'); anything else is refused
  (ValueError) naming the line."""
  data = read_bytes(path)
  if data[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
    return data.decode('utf-16')
  try:
    text = data.decode('utf-8-sig')
  except UnicodeDecodeError as e:
    line = data[:e.start].count(b'\n') + 1
    raise ValueError(f'line {line} of {path} is not UTF-8 (byte 0x{data[e.start]:02x}); save the '
                     'file as UTF-8') from None
  if '\x00' in text:
    line = text[:text.index('\x00')].count('\n') + 1
    raise ValueError(f'line {line} of {path} holds a NUL character: the file is binary or '
                     'damaged; give the text file')
  return text


def json_text(value, **kwargs) -> str:
  """Strict JSON (no bare NaN, which strict parsers reject): non-finite numbers become null, and
  NumPy's numbers plain ones."""
  return json.dumps(_finite(value), allow_nan=False, **kwargs)


def _finite(value):
  if isinstance(value, dict):
    return {k: _finite(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_finite(v) for v in value]
  if isinstance(value, (float, np.floating)):
    return float(value) if math.isfinite(value) else None
  return int(value) if isinstance(value, np.integer) else value


def read_json(path, fix: str, want: type | None = None):
  """The JSON value in the file `path`; a file that is empty or does not parse, or whose value is
  not a `want` (dict: an object) where one is wanted, raises DamagedFile naming it and `fix` (what
  to do about it)."""
  text = read_text(path)
  try:
    value = json.loads(text)
  except ValueError as e:
    why = ('is empty' if not text.strip() else
           f'is not valid JSON ({getattr(e, "msg", e)} at line {getattr(e, "lineno", "?")})')
    raise DamagedFile(f'{path} {why}: the file is damaged; {fix}') from None
  if want is not None and not isinstance(value, want):
    names: dict[type, str] = {dict: 'an object', list: 'a list'}
    what = names.get(want, want.__name__)
    raise DamagedFile(f'{path} holds {json.dumps(value)[:40]}, not {what}: the file is damaged; '
                      f'{fix}')
  return value


def read_bytes(path) -> bytes:
  with open(path, 'rb') as f:
    return f.read()


def write_atomic(path, data: str | bytes, replace: bool = True):
  """Writes a whole file so that a reader sees the old contents or the new, never a part: locally
  a temporary name and a rename; on an object store the upload itself (an object appears only
  when it is complete). With `replace=False` the file is created only where none exists, in the
  same step (a hard link locally, a write conditional on no object in a bucket): FileExistsError
  where one does, even one another process made a moment before."""
  mode = 'wb' if isinstance(data, bytes) else 'w'
  if remote(path):
    if not replace:
      _create_object(path, data.encode() if isinstance(data, str) else data)
      return
    with open(path, mode) as f:
      f.write(data)
    return
  path = _local(path)
  tmp = os.path.join(os.path.dirname(path) or '.',
                     f'.{os.path.basename(path)}.tmp-{os.getpid()}')
  try:
    with open(tmp, mode) as f:
      f.write(data)
    if replace:
      os.replace(tmp, path)
    else:
      os.link(tmp, path)  # (FileExistsError where `path` exists)
      os.remove(tmp)
  except BaseException as e:  # (a full disk, a signal): the old contents stay, the part goes
    with contextlib.suppress(OSError):
      os.remove(tmp)
    if isinstance(e, OSError) and no_space(e):
      size = len(data.encode() if isinstance(data, str) else data)
      raise DiskFull(path, size) from None
    raise


def kvstore(folder: str):
  """TensorStore's key-value store of `folder` (a local path or a URL), whose conditional writes
  are an exclusive create locally and GCS's `ifGenerationMatch` in a bucket; None where
  TensorStore has no driver for the scheme."""
  path = os.fspath(folder).rstrip('/') + '/'
  spec: dict[str, str] | str = path if remote(path) else {
      'driver': 'file', 'path': os.path.abspath(_local(path)) + '/'}  # (keys appended as is)
  try:
    return ts.KvStore.open(spec).result()
  except ValueError:  # a scheme TensorStore does not speak (hdfs://, ...)
    return None


def _create_object(path: str, data: bytes):
  store = kvstore(dirname(path))
  if store is None:
    raise OSError(errno.EOPNOTSUPP, 'no conditional writes for its scheme', path)
  with remote_fs.errors(path):
    current = store.read(basename(path)).result()
    if current.state == 'value' or not store.write(
        basename(path), data, if_equal=current.stamp.generation).result().generation:
      raise FileExistsError(errno.EEXIST, 'exists', path)


@contextlib.contextmanager
def local_copy(path):
  """A local path with the contents of `path` (the path itself when it is local), for libraries
  that only read local files."""
  if not remote(path):
    yield _local(path)
    return
  with tempfile.TemporaryDirectory(prefix='electra_fs_') as tmp:
    local = os.path.join(tmp, basename(path))
    copyfile(path, local)
    yield local


# ---- space ------------------------------------------------------------------------------------

class DiskFull(OSError):
  """A file could not be written for a full disk; nothing of it was left. Its message is one
  sentence naming the file, the space it needs and the space free."""

  def __init__(self, path: str, size: int):
    self.size = size
    free = free_bytes(path)
    super().__init__(errno.ENOSPC, (
        f'the disk holding {os.path.dirname(os.path.abspath(path))} is full: {basename(path)} '
        f'takes {size_text(size)}' + (f' and {size_text(free)} are free' if free is not None
                                      else '') + '; nothing of it was written: free some space '
        'and run the same command again'), path)


def no_space(e: BaseException) -> bool:
  """Whether `e` (from Python, TensorFlow or TensorStore) says a disk is full."""
  if isinstance(e, OSError) and e.errno == errno.ENOSPC:
    return True
  return bool(re.search(r'No space left on device|os_error_code=.?28\b', str(e)))


def free_bytes(path) -> int | None:
  """Free bytes on the disk of a local path (of its nearest existing folder); None for URLs."""
  if remote(path):
    return None
  path = os.path.abspath(_local(path))
  while not os.path.exists(path) and os.path.dirname(path) != path:
    path = os.path.dirname(path)
  return shutil.disk_usage(path).free


def size_text(n: float) -> str:
  """Bytes for a sentence: '950 bytes', '240 KB', '5.5 MB', '12 GB' (decimal units)."""
  for unit, scale in (('GB', 1e9), ('MB', 1e6), ('KB', 1e3)):
    if n >= scale:
      return f'{n / scale:,.1f} {unit}' if n < 10 * scale else f'{n / scale:,.0f} {unit}'
  return f'{n:,.0f} bytes'


def duration_text(seconds: float) -> str:
  """Seconds for a progress line: '4m05s', '2h07m'; '?' for an unknown (infinite) time."""
  if not math.isfinite(seconds):
    return '?'
  seconds = int(seconds)
  if seconds >= 3600:
    return f'{seconds // 3600}h{seconds % 3600 // 60:02d}m'
  return f'{seconds // 60}m{seconds % 60:02d}s'


# ---- access to a bucket -----------------------------------------------------------------------

def check_access(path):
  """For a gs:// path: raises PermissionError without credentials and FileNotFoundError when its
  bucket does not exist (or cannot be seen), before anything is read or written. Local paths and
  other schemes pass."""
  path = os.fspath(path)
  if not path.startswith('gs://'):
    return
  problem = remote_fs.credentials_problem()
  if problem:
    raise PermissionError(13, problem, path)
  root = bucket(path)
  if not isdir(root + '/'):
    raise FileNotFoundError(2, f'the bucket {root} does not exist', path)
