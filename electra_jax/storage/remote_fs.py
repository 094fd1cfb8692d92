"""URLs (gs://) through TensorFlow's file systems, for fs.py: their errors as Python's,
file objects whose errors are Python's, and whether Google Cloud credentials are found."""

import contextlib
import functools
import io
import os
import re

import google.auth
from google.auth import exceptions

from electra_jax.storage import deadline
from electra_jax.storage import tf_import


def gfile():
  return tf_import.tensorflow().io.gfile


@contextlib.contextmanager
def errors(path):
  """TensorFlow's file-system errors as Python's, naming `path`; a wait on a bucket watched
(deadline.py)."""
  try:
    with deadline.waiting(path):
      yield
  except Exception as e:
    raise translate(e, path) from None


def translate(e: Exception, path) -> Exception:
  """The Python exception a TensorFlow (or other storage) error `e` about `path` stands for."""
  if isinstance(e, OSError):
    return e
  name, message = type(e).__name__, ' '.join(str(e).split())
  if name == 'NotFoundError':
    return FileNotFoundError(2, f'not found ({message[:200]})', os.fspath(path))
  if name in ('PermissionDeniedError', 'UnauthenticatedError') or no_credentials(message):
    return PermissionError(13, f'access denied ({message[:300]})', os.fspath(path))
  if name in ('AlreadyExistsError', 'FailedPreconditionError', 'AbortedError',
              'UnavailableError', 'DeadlineExceededError', 'InternalError', 'UnknownError',
              'DataLossError', 'OutOfRangeError', 'ResourceExhaustedError',
              'InvalidArgumentError', 'UnimplementedError'):
    return OSError(5, f'{name}: {message[:300]}', os.fspath(path))
  return e


def no_credentials(message: str) -> bool:
  return bool(re.search(r'bearer token|credentials|authentication|oauth|metadata server',
                        message, re.I))


class File:
  """A GFile whose errors are Python's."""

  def __init__(self, path, mode):
    self._path = os.fspath(path)
    with errors(path):
      self._f = gfile().GFile(self._path, mode)

  def __getattr__(self, name):
    attr = getattr(self._f, name)
    if not callable(attr):
      return attr
    def call(*args, **kwargs):
      with errors(self._path):
        return attr(*args, **kwargs)
    return call

  def __iter__(self):
    with errors(self._path):
      yield from self._f

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    with errors(self._path):
      self._f.close()


class RawRemote(io.RawIOBase):
  """A remote file as a raw binary stream, so io.BufferedReader (readline with a limit, tell,
  seek: a corpus read in parts) and gzip can read it."""

  def __init__(self, path):
    super().__init__()
    self._file, self._position = File(path, 'rb'), 0

  def readable(self):
    return True

  def readinto(self, buffer):
    data = self._file.read(len(buffer))
    buffer[:len(data)] = data
    self._position += len(data)
    return len(data)

  def tell(self):
    return self._position

  def seekable(self):
    return True

  def seek(self, offset, whence=io.SEEK_SET):
    if whence == io.SEEK_CUR:
      offset += self._position
    elif whence == io.SEEK_END:
      offset += self._file.size()
    self._file.seek(offset)
    self._position = offset
    return offset

  def close(self):
    if not self.closed:
      self._file.close()
    super().close()


@functools.cache
def credentials_problem() -> str:
  """'' when Google Cloud credentials are found (Application Default Credentials, as TensorFlow,
  TensorStore and the storage client use them), else why not."""
  if os.environ.get('GOOGLE_AUTH_TOKEN_FOR_TESTING'):
    return ''
  try:
    google.auth.default()
  except exceptions.DefaultCredentialsError:
    return 'no Google Cloud credentials were found'
  return ''
