"""TFDS's datasets as a source of text (a corpus, GLUE's and SQuAD's files): loaded, downloaded
and prepared on first use, with one sentence for a machine that cannot reach their hosts and
nothing of a failed attempt left behind."""

import collections
import concurrent.futures
import contextlib
import os
import re
import shutil
import socket
import tempfile
import urllib.parse
import urllib.request

from electra_jax.storage import tf_import


def _network_failure(e: BaseException) -> str | None:
  """The host a download could not reach, if `e` (or an exception behind it) is a failed
  connection: no network, a name that does not resolve, a refused or timed-out connection."""
  seen: BaseException | None = e
  while seen is not None:
    names = {c.__name__ for c in type(seen).__mro__}
    if names & {'ConnectionError', 'NewConnectionError', 'NameResolutionError', 'MaxRetryError',
                'ProxyError', 'Timeout', 'gaierror', 'URLError'}:
      host = re.search(r"host='([^']+)'", str(e)) or re.search(r"host='([^']+)'", str(seen))
      return host.group(1) if host else 'its server'
    seen = seen.__cause__ or seen.__context__
  return None


def _snapshot(folders: list[str]) -> set[str]:
  """The paths of `folders` and of everything under them."""
  found = {f for f in folders if os.path.lexists(f)}
  for folder in folders:
    for root, dirs, files in os.walk(folder):
      found.update(os.path.join(root, n) for n in dirs + files)
  return found


def _temporary_folders() -> set[str]:
  """TFDS's folders in the temporary folder (TMPDIR's, or the system's): `tmp*tfds`, made by each
  attempt to copy a prepared dataset's description from its bucket (`mkdtemp('tfds')`), and
  `tmp*tfds_beam_metadata`."""
  tmp = tempfile.gettempdir()
  return {os.path.join(tmp, n) for n in os.listdir(tmp) if 'tfds' in n
          and os.path.isdir(os.path.join(tmp, n))}


class Unreachable(ConnectionError):
  """None of a dataset's download hosts answers: raised before TFDS tries (and retries) them."""


def _check_reachable(tfds, name: str, data_dir: str | None, timeout_s: float = 3.0):
  """Raises Unreachable (host='...': the dataset's main download host) when neither the download
  hosts of `name` (not prepared in `data_dir`) nor TFDS's bucket can be reached (a TCP connection
  each, through the proxy the environment names, within `timeout_s`), so that a machine without a
  network hears so at once, not after TFDS's minutes of retries. Datasets whose builders list no
  URLs are left to TFDS."""
  urls = list(getattr(tfds.builder(name, data_dir=data_dir), 'url_infos', None) or ())
  if not urls:
    return
  hosts = [urllib.parse.urlsplit(u).hostname for u in urls]
  proxies = urllib.request.getproxies()
  targets = set()
  for url in urls + ['https://storage.googleapis.com/tfds-data/']:
    parts = urllib.parse.urlsplit(url)
    proxy = None if urllib.request.proxy_bypass(parts.hostname) else proxies.get(parts.scheme)
    at = urllib.parse.urlsplit(proxy) if proxy else parts
    targets.add((at.hostname, at.port or (443 if at.scheme == 'https' else 80)))

  def answers(address) -> bool:
    try:
      socket.create_connection(address, timeout=timeout_s).close()
      return True
    except OSError:
      return False

  with concurrent.futures.ThreadPoolExecutor(min(16, len(targets))) as pool:
    if not any(pool.map(answers, sorted(targets))):
      main = collections.Counter(hosts).most_common(1)[0][0]
      raise Unreachable(f"no connection (host='{main}')")


def load(name: str, split: str, data_dir: str | None, data_dir_hint: str, **kwargs):
  """`tfds.load(name, split=split, data_dir=data_dir)`: the dataset downloaded and prepared on
  first use. A failure is a ValueError in one sentence (no connection: the host, and how to
  prepare the data elsewhere; `data_dir_hint` says how to point this run at a prepared copy), and
  the files the failed attempt left in a local data_dir (an unfinished download, the dataset's
  empty folders) are removed: the next try starts clean."""
  tfds = tf_import.datasets()
  temporary = _temporary_folders()
  try:
    return _load(tfds, name, split, data_dir, data_dir_hint, **kwargs)
  finally:  # (TFDS reads the copied description and leaves its folder, also when it succeeds)
    _remove_new(temporary)


def _remove_new(temporary: set[str]):
  for path in _temporary_folders() - temporary:
    shutil.rmtree(path, ignore_errors=True)


def _load(tfds, name: str, split: str, data_dir: str | None, data_dir_hint: str, **kwargs):
  local = data_dir or os.environ.get('TFDS_DATA_DIR') or os.path.join(
      os.path.expanduser('~'), 'tensorflow_datasets')
  watched = [] if '://' in local else [os.path.join(local, name.split('/')[0]),
                                          os.path.join(local, 'downloads')]
  existed = os.path.isdir(local)
  before = _snapshot(watched)
  try:
    try:
      return tfds.load(name, split=split, data_dir=data_dir, download=False, **kwargs)
    except AssertionError:  # not prepared there: downloaded and prepared, if its hosts answer
      _check_reachable(tfds, name, data_dir)
      return tfds.load(name, split=split, data_dir=data_dir, **kwargs)
  except Exception as e:
    for path in sorted(_snapshot(watched) - before, key=len, reverse=True):  # deepest first
      if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
      elif os.path.lexists(path):
        with contextlib.suppress(OSError):
          os.remove(path)
    if watched and not existed:
      with contextlib.suppress(OSError):
        os.rmdir(local)
    host = _network_failure(e)
    if host:
      raise ValueError(
          f'TFDS could not download {name}: no connection to {host} from this machine; prepare '
          f'it where there is one (`tfds build {name} --data_dir=DIR`), copy DIR here and '
          f'{data_dir_hint}') from None
    if type(e).__name__ == 'DatasetNotFoundError':
      raise ValueError(f'TFDS has no dataset {name.split(":")[0]!r}; check the name in the TFDS '
                       'catalog (https://www.tensorflow.org/datasets/catalog), e.g. '
                       "'tfds:wikipedia/20230601.en:train'") from None
    text = ' '.join(str(e).split()).split(' Available ')[0]
    raise ValueError(f'TFDS could not load {name!r} split {split!r} ({type(e).__name__}: '
                     f'{text[:300]}); check the name in the TFDS catalog, or prepare it first '
                     f'with `tfds build {name}`') from None
