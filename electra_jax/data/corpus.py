"""Where text comes from. Every source yields lines: a line is a sentence, '' ends a document.

A `Source` reads one corpus spec as documents (lists of sentences):
- a file, folder or glob: text files (plain or .gz; binary files skipped, bytes that are not UTF-8
  replaced, overlong lines cut, each counted in a `ReadReport`) and JSON-lines files (.jsonl,
  .jsonl.gz: one document per object, its text in a named field);
- 'tfds:NAME[:SPLIT]': any TensorFlow Datasets text dataset, one document per example, its text in
  the named field (e.g. 'tfds:wikipedia/20230601.en:train', 'tfds:c4/en:train');
- 'builtin': the built-in corpus, which is the Python
standard library's own documentation (the `pydoc_data` topics plus module, class and function
docstrings, read from the sources with `ast`, never imported): about 2 MB of English present
wherever Python is, so a first run needs no download.
"""

from pydoc_data import topics
import ast
import dataclasses
import functools
import glob
import contextlib
import gzip
import hashlib
import json
import os
import stat
import re
import sysconfig
import zlib
from typing import Iterator, Sequence

from electra_jax.storage import fs
from electra_jax.data import tfds as tfds_lib
from electra_jax.storage import tf_import

_SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=[A-Z0-9"\'(\[])')
_SKIP_DIRS = {'site-packages', 'dist-packages', 'test', 'tests', 'idlelib', 'lib2to3', 'turtledemo',
              'ensurepip', '__phello__', 'tkinter', 'pydoc_data'}


def _paragraph_sentences(paragraph: list[str]) -> list[str]:
  """Prose is joined and split at sentence ends; code (indented or doctest) stays line by line."""
  if any(l.startswith((' ', '\t', '>>>', '...')) for l in paragraph):
    return [l.strip() for l in paragraph if l.strip()]
  text = ' '.join(l.strip() for l in paragraph)
  return [s for s in _SENTENCE_END.split(text) if s]


def text_to_sentences(text: str) -> list[str]:
  """Splits documentation text into one sentence per line (blank lines separate paragraphs)."""
  out, para = [], []
  for line in text.expandtabs(4).splitlines():
    if line.strip():
      para.append(line.rstrip())
    elif para:
      out.extend(_paragraph_sentences(para))
      para = []
  if para:
    out.extend(_paragraph_sentences(para))
  return out


def _module_docstrings(path: str) -> str:
  try:
    with open(path, encoding='utf-8') as f:
      tree = ast.parse(f.read())
  except (SyntaxError, UnicodeDecodeError, ValueError):
    return ''
  docs = []
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      doc = ast.get_docstring(node)
      if doc:
        docs.append(doc)
  return '\n\n'.join(docs)


def _stdlib_sources() -> list[str]:
  root = sysconfig.get_paths()['stdlib']
  paths: list[str] = []
  for dirpath, dirnames, filenames in os.walk(root):
    dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith('.'))
    paths.extend(os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith('.py'))
  return sorted(paths)


def builtin_documents() -> list[list[str]]:
  """The built-in corpus as documents of sentences, in a fixed order."""
  return [list(d) for d in _builtin_documents()]


@functools.lru_cache(maxsize=1)
def _builtin_documents() -> tuple[tuple[str, ...], ...]:
  """Parsed once per process (about 5 s of `ast` work, 2 MB kept)."""
  docs: list[Sequence[str]] = [text_to_sentences(topics.topics[k]) for k in sorted(topics.topics)]
  docs.extend(d for _, d in builtin_module_documents())
  return tuple(tuple(d) for d in docs if d)


@functools.lru_cache(maxsize=1)
def builtin_module_documents() -> tuple[tuple[str, tuple[str, ...]], ...]:
  """(top-level module or package, sentences) of each standard-library source file with
  docstrings, in the built-in corpus's order: `email/parser.py` is ('email', ...)."""
  root = sysconfig.get_paths()['stdlib']
  out = []
  for path in _stdlib_sources():
    text = _module_docstrings(path)
    sentences = tuple(text_to_sentences(text)) if text else ()
    if sentences:
      top = os.path.relpath(path, root).split(os.sep)[0]
      out.append((top[:-3] if top.endswith('.py') else top, sentences))
  return tuple(out)


def builtin_lines() -> Iterator[str]:
  for doc in builtin_documents():
    yield from doc
    yield ''


MAX_LINE_BYTES = 100_000  # a longer line is cut (at a space where possible): memory stays bounded
_BINARY_PROBE = 8192  # bytes read to tell a binary file (NUL bytes in one of every 1,000 or more)


@dataclasses.dataclass
class ReadReport:
  """What reading a corpus met on the way: files read and skipped, bytes that were not UTF-8."""
  files: int = 0
  skipped_binary: list = dataclasses.field(default_factory=list)  # 'path (a NUL byte at ...)'
  nul_bytes: int = 0  # stray NUL bytes in text files (dropped)
  first_nul: str = ''  # where the first of them was: 'byte 5,210 of path'
  lines_with_bad_bytes: int = 0
  long_lines_cut: int = 0
  lines_split: int = 0  # text lines holding several sentences, split at their sentence ends
  null_texts: int = 0  # JSON-lines objects whose text is null (skipped)
  bytes_done: int = 0  # bytes of the corpus files consumed so far (compressed bytes for .gz)

  def warnings(self) -> list[str]:
    out = []
    if self.skipped_binary:
      names = ', '.join(self.skipped_binary[:3]) + (' ...' if len(self.skipped_binary) > 3 else '')
      out.append(f'skipped {len(self.skipped_binary)} binary file(s): {names}')
    if self.nul_bytes:
      out.append(f'{self.nul_bytes} NUL byte(s) in text were dropped (the first at '
                 f'{self.first_nul})')
    if self.lines_with_bad_bytes:
      out.append(f'{self.lines_with_bad_bytes} line(s) held bytes that are not UTF-8; each such '
                 'byte was replaced by U+FFFD')
    if self.long_lines_cut:
      out.append(f'{self.long_lines_cut} cut(s) made in lines longer than {MAX_LINE_BYTES:,} bytes '
                 '(at spaces; the pieces are kept)')
    if self.lines_split:
      out.append(f'{self.lines_split} line(s) held several sentences and were split at their '
                 'sentence ends (a line is read as one sentence; nothing is dropped)')
    if self.null_texts:
      out.append(f'{self.null_texts} JSON-lines object(s) had a null text and were skipped')
    return out


class _GzipFile(gzip.GzipFile):
  """A gzip reader that closes the file it reads when it is closed."""

  def close(self):
    raw = self.fileobj
    super().close()
    if raw is not None:
      raw.close()


def _open_binary(path: str):
  f = fs.open_binary(path)
  return _GzipFile(fileobj=f, mode='rb') if path.endswith('.gz') else f


def _raw_position(f) -> int:
  """Bytes of the file on disk consumed so far (the compressed position of a .gz file)."""
  return f.fileobj.tell() if isinstance(f, gzip.GzipFile) else f.tell()  # type: ignore[union-attr]


_UTF16_BOMS = (b'\xff\xfe', b'\xfe\xff')


def _binary(path: str) -> str:
  """Where `path` holds no text, why ('a NUL byte at byte 12, 30 in its first 8,192 bytes'); ''
  for text, stray NUL bytes included. A damaged .gz file or text in UTF-16/32 raises ValueError
  naming it."""
  with _reading(path):
    with _open_binary(path) as f:
      probe = f.read(_BINARY_PROBE)
  zeros = lambda half: half.count(0) / max(1, len(half))
  odd, even = zeros(probe[1::2]), zeros(probe[0::2])
  if probe.startswith(_UTF16_BOMS) or (len(probe) >= 64 and (
      (odd > 0.8 and even < 0.1) or (even > 0.8 and odd < 0.1))):  # ASCII text, two bytes each
    raise ValueError(f'{path} looks like UTF-16 (or UTF-32) text; convert it to UTF-8, e.g. '
                     f'iconv -f UTF-16 -t UTF-8 {path} > {os.path.splitext(path)[0]}.utf8.txt')
  nuls = probe.count(0)
  if nuls * 1000 <= len(probe):  # a stray NUL in text (read as text, the byte dropped and counted)
    return ''
  return (f'a NUL byte at byte {probe.index(0):,}, {nuls:,} in its first {len(probe):,} bytes: '
          'not text')


@contextlib.contextmanager
def _reading(path: str):
  """A .gz file that is cut short or damaged: one sentence naming it, not a traceback."""
  try:
    yield
  except (EOFError, gzip.BadGzipFile, zlib.error) as e:
    raise ValueError(f'{path} is a damaged .gz file ({" ".join(str(e).split())[:100]}); copy it '
                     f'again (gzip -t {path} checks one)') from None


def _raw_lines(path: str, report: ReadReport) -> Iterator[str]:
  """Decoded lines of one file, each at most MAX_LINE_BYTES long, whatever the file holds."""
  limit = MAX_LINE_BYTES
  base = report.bytes_done
  with _reading(path), _open_binary(path) as f:
    carry, continued, count, offset = b'', False, 0, 0
    while True:
      count += 1
      if count % 4096 == 0:
        report.bytes_done = base + _raw_position(f)
      want = limit - len(carry)
      chunk = f.readline(want)
      if not chunk and not carry:
        return
      read = len(chunk)
      if b'\0' in chunk:
        if not report.nul_bytes:
          report.first_nul = f'byte {offset + chunk.index(0):,} of {path}'
        report.nul_bytes += chunk.count(0)
        chunk = chunk.replace(b'\0', b'')
      offset += read
      data, carry = carry + chunk, b''
      # a line ends at its newline, or at the file's end (a read shorter than asked for)
      ended = data.endswith(b'\n') or read < want
      if not ended:  # cut a long line at its last space, keep the rest for the next piece
        cut = data.rfind(b' ', limit // 2)
        if cut > 0:
          data, carry = data[:cut], data[cut + 1:]
        else:  # no space: cut before the last character start, never inside a character
          cut = len(data) - 1
          while cut > 0 and data[cut] & 0xC0 == 0x80:
            cut -= 1
          data, carry = data[:cut], data[cut:]
        report.long_lines_cut += 1
      try:
        text = data.decode('utf-8')
      except UnicodeDecodeError:
        text = data.decode('utf-8', errors='replace')
        report.lines_with_bad_bytes += 1
      text = text.strip()
      if text or not continued:  # the bare end of a cut line is not a blank line (a document end)
        yield text
      continued = not ended


def resolve_files(pattern: str) -> list[str]:
  """Files matched by a glob (or a folder, meaning every file below it), sorted."""
  if fs.remote(pattern):  # a bucket: a folder means every object below it
    files = sorted(fs.walk_files(pattern) if fs.isdir(pattern) else
                   [p for p in fs.glob(pattern) if not fs.isdir(p)])
  else:
    if os.path.isdir(pattern):
      pattern = os.path.join(pattern, '**', '*')
    elif os.path.exists(pattern) and not os.path.isfile(pattern):  # /dev/zero, a pipe, a socket
      mode = os.stat(pattern).st_mode
      what = ('a named pipe' if stat.S_ISFIFO(mode) else 'a device' if stat.S_ISCHR(mode) or
              stat.S_ISBLK(mode) else 'a socket' if stat.S_ISSOCK(mode) else 'not a file')
      raise FileNotFoundError(f'the corpus {pattern!r} is {what}, not a file whose size is known; '
                              'write the text to a file and give that')
    files = sorted(p for p in glob.glob(os.path.expanduser(pattern), recursive=True)
                   if os.path.isfile(p))
  if not files:
    raise FileNotFoundError(f'the corpus {pattern!r} matches no file; give an existing file, '
                            "folder or glob, or data.corpus='builtin'")
  return files


def _jsonl_lines(path: str, text_field: str, report: ReadReport) -> Iterator[str]:
  """A JSON-lines file: each object is a document whose `text_field` is split into sentences."""
  base = report.bytes_done
  with _reading(path), _open_binary(path) as f:
    for number, raw in enumerate(f, 1):
      if number % 1024 == 0:
        report.bytes_done = base + _raw_position(f)
      if not raw.strip():
        continue
      try:
        text = raw.decode('utf-8')
      except UnicodeDecodeError:
        text = raw.decode('utf-8', errors='replace')
        report.lines_with_bad_bytes += 1
      try:
        record = json.loads(text)
      except ValueError:
        raise ValueError(f'{path} line {number} is not JSON; give one JSON object per line, or '
                         'name the file .txt to read it as plain text') from None
      if not isinstance(record, dict) or text_field not in record:
        fields = sorted(record) if isinstance(record, dict) else []
        raise ValueError(f'{path} line {number} has no field {text_field!r} (it has {fields}); '
                         'name the field that holds the text (launch/prepare_data.py '
                         '--text_field, launch/train.py --config.data.text_field)')
      value = record[text_field]
      if value is None:  # (was read as the word 'None')
        report.null_texts += 1
        continue
      if not isinstance(value, str):
        raise ValueError(f'{path} line {number} has {json.dumps(value)[:60]} as its '
                         f'{text_field!r}, not a text; give the text as a JSON string')
      yield from text_to_sentences(value)
      yield ''


def is_jsonl(path: str) -> bool:
  return path.endswith(('.jsonl', '.jsonl.gz'))


def file_lines(files: list[str], report: ReadReport | None = None,
               text_field: str = 'text') -> Iterator[str]:
  """Lines of text files; a blank line or the end of a file ends a document.

  Binary files are skipped, bytes that are not UTF-8 are replaced, and overlong lines are cut; all
  three are counted in `report`. JSON-lines files (.jsonl, .jsonl.gz) give one document
  per object, from its `text_field`.
  """
  report = report if report is not None else ReadReport()
  done = 0
  for path in files:
    why = _binary(path)
    if why:
      report.skipped_binary.append(f'{path} ({why})')
    else:
      report.files += 1
      if is_jsonl(path):
        yield from _jsonl_lines(path, text_field, report)
      else:
        yield from _raw_lines(path, report)
        yield ''
    done += fs.getsize(path)
    report.bytes_done = done


def _tfds_documents(name: str, split: str, text_field: str, data_dir: str | None,
                    report: ReadReport) -> Iterator[list[str]]:
  """One document per example of a TFDS dataset, from its `text_field`."""
  tfds = tf_import.datasets()
  dataset = tfds_lib.load(name, split, data_dir, 'set TFDS_DATA_DIR=DIR',
                               shuffle_files=False)
  fields = dataset.element_spec
  if not isinstance(fields, dict) or text_field not in fields:
    raise ValueError(f'the TFDS dataset {name!r} has no field {text_field!r} (it has '
                     f'{sorted(fields) if isinstance(fields, dict) else []}); set the text field '
                     '(--tfds_field or data.text_field) to the one that holds the text')
  for example in tfds.as_numpy(dataset.map(lambda x: x[text_field])):
    report.bytes_done += len(example)
    try:
      text = example.decode('utf-8')
    except UnicodeDecodeError:
      text = example.decode('utf-8', errors='replace')
      report.lines_with_bad_bytes += 1
    yield text_to_sentences(text)


class Source:
  """A corpus spec read as documents: 'builtin', 'tfds:NAME[:SPLIT]', or a file, folder or glob.

  Reading is streamed (memory stays bounded whatever the corpus size) and repeatable: two reads of
  the same source give the same documents in the same order.
  """

  def __init__(self, spec: str, text_field: str = 'text', tfds_data_dir: str | None = None):
    self.spec, self.text_field, self.tfds_data_dir = spec, text_field, tfds_data_dir
    self.report = ReadReport()
    self.files: list[str] = []
    self.total_bytes = 0
    if spec.startswith('tfds:'):
      name, _, split = spec[len('tfds:'):].partition(':')
      if not name:
        raise ValueError(f'the corpus {spec!r} names no dataset; write tfds:NAME[:SPLIT], e.g. '
                         "'tfds:wikipedia/20230601.en:train'")
      self.tfds_name, self.tfds_split = name, split or 'train'
    elif spec != 'builtin':
      self.files = resolve_files(spec)
      self.sizes = [fs.getsize(p) for p in self.files]
      self.total_bytes = sum(self.sizes)

  def documents(self) -> Iterator[list[str]]:
    """Non-empty documents (lists of sentences) in a fixed order."""
    self.report = ReadReport()
    if self.spec == 'builtin':
      for doc in builtin_documents():
        self.report.bytes_done += sum(len(s) + 1 for s in doc)
        yield doc
      return
    if self.spec.startswith('tfds:'):
      for doc in _tfds_documents(self.tfds_name, self.tfds_split, self.text_field,
                                 self.tfds_data_dir, self.report):
        if doc:
          yield doc
      return
    doc = []
    for line in file_lines(self.files, self.report, self.text_field):
      if line:
        sentences = _SENTENCE_END.split(line)  # a paragraph per line is common in user corpora
        if len(sentences) > 1:
          self.report.lines_split += 1
        doc.extend(s for s in sentences if s)
      elif doc:
        yield doc
        doc = []
    if doc:
      yield doc

  def state(self) -> dict | None:
    """What the source's files are now (their number, bytes, and a digest of each one's path,
    size and modification time), to tell a corpus changed since records were built from it; None
    for the built-in corpus and TFDS datasets (versioned by their own names)."""
    if not self.files:
      return None
    digest = hashlib.sha256()
    for path, size in zip(self.files, self.sizes):
      mtime = 0 if fs.remote(path) else os.stat(path).st_mtime_ns
      digest.update(f'{path}\0{size}\0{mtime}\n'.encode())
    return {'files': len(self.files), 'bytes': self.total_bytes,
            'digest': digest.hexdigest()[:16]}

  def require_text(self):
    """Fails with one sentence when the source holds no document (reads up to the first one)."""
    if next(iter(self.documents()), None) is None:
      binary = self.report.skipped_binary
      raise ValueError(f'the corpus {self.spec!r} holds no text' + (
          f' (skipped as binary: {"; ".join(binary[:3])}{" ..." if len(binary) > 3 else ""})'
          if binary else '') + '; give a corpus with at least one non-empty line of text')

  def lines(self) -> Iterator[str]:
    """Sentences, with '' after each document."""
    for doc in self.documents():
      yield from doc
      yield ''

  def fraction_read(self) -> float | None:
    """Share of the source read so far, where its size is known."""
    return self.report.bytes_done / self.total_bytes if self.total_bytes else None


def corpus_lines(corpus: str, report: ReadReport | None = None,
                 text_field: str = 'text') -> Iterator[str]:
  """Lines of a corpus given as 'builtin' or a glob; fails early if there is nothing to read."""
  if corpus == 'builtin':
    return builtin_lines()
  return file_lines(resolve_files(corpus), report, text_field)
