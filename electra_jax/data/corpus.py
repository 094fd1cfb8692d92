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
# A document of more characters goes on as a new document (its sentences' pairs and the example
# builder's memory stay bounded, however long a text without blank lines is)
MAX_DOCUMENT_CHARS = 1_000_000
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
  long_documents_cut: int = 0  # documents of more than MAX_DOCUMENT_CHARS, cut (counted per cut)
  lines_split: int = 0  # text lines holding several sentences, split at their sentence ends
  null_texts: int = 0  # JSON-lines objects whose text is null (skipped)
  bytes_done: int = 0  # bytes of the corpus files consumed so far (compressed bytes for .gz)
  bytes_read: int = 0  # bytes read from the files (a part's reader: its range, the end of its
  #                      last document and the look back at its start)

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
    if self.long_documents_cut:
      out.append(f'{self.long_documents_cut} cut(s) made in documents longer than '
                 f'{MAX_DOCUMENT_CHARS:,} characters (each piece a document of its own; a blank '
                 'line ends a document)')
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


class _Counted:
  """A binary file whose reads add the bytes they return to a ReadReport's `bytes_read`: what a
  reader took from storage (a .gz file's compressed bytes), seeks back and forth included."""

  def __init__(self, f, report: 'ReadReport'):
    self._f, self._report = f, report

  def read(self, *args):
    data = self._f.read(*args)
    self._report.bytes_read += len(data)
    return data

  def readline(self, *args):
    data = self._f.readline(*args)
    self._report.bytes_read += len(data)
    return data

  def __getattr__(self, name):
    return getattr(self._f, name)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self._f.close()


def _open_binary(path: str, report: 'ReadReport | None' = None):
  f = fs.open_binary(path)
  if report is not None:
    f = _Counted(f, report)
  return _GzipFile(fileobj=f, mode='rb') if path.endswith('.gz') else f


def _raw_position(f) -> int:
  """Bytes of the file on disk consumed so far (the compressed position of a .gz file)."""
  return f.fileobj.tell() if isinstance(f, gzip.GzipFile) else f.tell()  # type: ignore[union-attr]


_UTF16_BOMS = (b'\xff\xfe', b'\xfe\xff')


def _binary(path: str, report: 'ReadReport | None' = None) -> str:
  """Where `path` holds no text, why ('a NUL byte at byte 12, 30 in its first 8,192 bytes'); ''
  for text, stray NUL bytes included. A damaged .gz file or text in UTF-16/32 raises ValueError
  naming it."""
  with _reading(path):
    with _open_binary(path, report) as f:
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


def _lines(f, path: str, report: ReadReport, offset: int = 0,
           base: int = 0) -> Iterator[tuple[int, str]]:
  """(where its line starts, the text) of the decoded lines of the open file `f` from `offset` (a
  line start), a long line in pieces of at most MAX_LINE_BYTES, whatever the file holds. A line of
  whitespace alone (NUL bytes dropped), however long, is one blank line: '' (a document's end);
  the blank pieces of a long line that holds text are left out. `report.bytes_done` is `base`
  plus the bytes consumed from `offset`."""
  limit = MAX_LINE_BYTES
  carry, continued, count, line_start, origin = b'', False, 0, offset, offset
  has_text = False  # (a piece of the line so far held text)
  while True:
    count += 1
    if count % 4096 == 0:
      report.bytes_done = base + _raw_position(f) - origin
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
    if not continued:
      line_start = offset
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
    if not continued:
      has_text = False
    if text:
      has_text = True
      yield line_start, text
    elif ended and not has_text:  # the end of a line of whitespace alone
      yield line_start, ''
    continued = not ended


def _whitespace(data: bytes) -> bool:
  """Whether bytes that start at a character hold whitespace alone, NUL bytes dropped (as `_lines`
  decodes them)."""
  return not data.replace(b'\0', b'').decode('utf-8', errors='replace').strip()


def _previous_line_blank(f, at: int) -> bool:
  """Whether the line that ends just before the line start `at` holds whitespace alone (a
  document's end to `_lines`), read backwards in blocks (256 bytes, doubling to 64 KiB) that
  start at a character; True at the file's start."""
  end = at - 1  # its newline
  block = 128
  while end > 0:
    block = min(2 * block, 1 << 16)
    begin = max(0, end - block)
    f.seek(begin)
    data = f.read(end - begin)
    shift = 0  # (back to a character's start: a block never splits one)
    while begin > 0 and shift < len(data) and data[shift] & 0xC0 == 0x80:
      shift += 1
    data, begin = data[shift:], begin + shift
    newline = data.rfind(b'\n')
    if not _whitespace(data[newline + 1:]):
      return False
    if newline >= 0:
      return True
    end = begin
  return True


def _line_start_at_or_after(f, start: int, end: int | None = None) -> tuple[int, bool]:
  """(the first line start at or after byte `start` of the seekable file `f`, whether the line
  before it is blank: a document can start there), `f` left at that line start. The search stops
  at byte `end` (given): a line start at or past it is (`end`, False), whatever comes after, so a
  part inside one long line reads its own bytes only."""
  if start == 0:
    return 0, True
  f.seek(start - 1)
  if f.read(1) != b'\n':  # inside a line: its end is the next line's start
    while True:
      piece = f.readline(1 << 20 if end is None else max(1, min(1 << 20, end - f.tell())))
      if not piece or piece.endswith(b'\n'):
        break
      if end is not None and f.tell() >= end:  # (no line starts before the part's end)
        return end, False
    if not piece:  # the file ends inside that line: nothing starts after it
      return f.tell(), False
  at = f.tell()
  blank = _previous_line_blank(f, at)
  f.seek(at)
  return at, blank


_TALLIED = ('nul_bytes', 'first_nul', 'lines_with_bad_bytes', 'long_lines_cut')


def _tally(report: ReadReport) -> tuple:
  """What `_lines` has counted so far, to take back the counts of lines another part reads."""
  return tuple(getattr(report, k) for k in _TALLIED)


def _untally(report: ReadReport, tally: tuple):
  for k, v in zip(_TALLIED, tally):
    setattr(report, k, v)


def _text_documents(f, path: str, report: ReadReport, start: int, end: int | None,
                    base: int) -> Iterator[tuple[int, list[str]]]:
  """(where it starts, its lines) of each document of a text file that starts in bytes [start,
  end) (`end` None: to the file's end); a document that crosses `end` is read to its end, and one
  that crosses `start` is the previous part's. What reading met is counted by the part whose
  lines it was in (a crossing document's lines: its own part's)."""
  at, boundary = _line_start_at_or_after(f, start, end)
  if end is not None and at >= end:  # no line starts in the part
    return
  lines = _lines(f, path, report, at, base)
  if not boundary:  # inside a document of the part before: skip to its end (a blank line), or
    kept = _tally(report)  # to the part's end, past which nothing is this part's
    for line_start, text in lines:
      if not text or (end is not None and line_start >= end):
        break
    _untally(report, kept)
  doc: list[str] = []
  first, size, cut = 0, 0, False  # (cut: the lines go on a document cut for its length)
  kept = _tally(report)
  for line_start, text in lines:
    if not doc and not cut and end is not None and line_start >= end:  # the next part's
      _untally(report, kept)
      return
    if text:
      if not doc and not cut:
        first = line_start
      doc.append(text)
      size += len(text)
    if (not text or size >= MAX_DOCUMENT_CHARS) and doc:  # a long one goes on in documents of
      report.long_documents_cut += bool(text)  # its own, each at the start of the whole (held
      yield first, doc  #                          out or not together)
      doc, size = [], 0
    cut = bool(text) and (cut or not doc)
    kept = _tally(report)
  if doc:
    yield first, doc


def _jsonl_documents(f, path: str, text_field: str, report: ReadReport, start: int,
                     end: int | None, base: int) -> Iterator[tuple[int, list[str]]]:
  """(where its line starts, its sentences) of each object of a JSON-lines file whose line starts
  in bytes [start, end): a document of its `text_field`'s text split into sentences."""
  at, _ = _line_start_at_or_after(f, start)
  offset = at
  for number, raw in enumerate(iter(f.readline, b''), 1):
    line_start, offset = offset, offset + len(raw)
    if end is not None and line_start >= end:
      return
    if number % 1024 == 0:
      report.bytes_done = base + _raw_position(f) - at
    if not raw.strip():
      continue
    where = f'line {number}' if at == 0 else f'the line at byte {line_start:,}'
    try:
      text = raw.decode('utf-8')
    except UnicodeDecodeError:
      text = raw.decode('utf-8', errors='replace')
      report.lines_with_bad_bytes += 1
    try:
      record = json.loads(text)
    except ValueError:
      raise ValueError(f'{path} {where} is not JSON; give one JSON object per line, or name the '
                       'file .txt to read it as plain text') from None
    if not isinstance(record, dict) or text_field not in record:
      fields = sorted(record) if isinstance(record, dict) else []
      raise ValueError(f'{path} {where} has no field {text_field!r} (it has {fields}); name the '
                       'field that holds the text (launch/prepare_data.py --text_field, '
                       'launch/train.py --config.data.text_field)')
    value = record[text_field]
    if value is None:  # (was read as the word 'None')
      report.null_texts += 1
      continue
    if not isinstance(value, str):
      raise ValueError(f'{path} {where} has {json.dumps(value)[:60]} as its {text_field!r}, not '
                       'a text; give the text as a JSON string')
    yield line_start, text_to_sentences(value)


def _file_documents(path: str, text_field: str, report: ReadReport, start: int = 0,
                    end: int | None = None) -> Iterator[tuple[int, list[str]]]:
  """(where it starts, its lines or sentences) of each document of one file that starts in bytes
  [start, end) of it: the whole file by default (a .gz file is read whole, from its decompressed
  text). Binary files are the caller's to skip."""
  base = report.bytes_done
  with _reading(path), _open_binary(path, report) as f:
    if is_jsonl(path):
      yield from _jsonl_documents(f, path, text_field, report, start, end, base)
    else:
      yield from _text_documents(f, path, report, start, end, base)


def _inside(path: str, folder: str) -> bool:
  if fs.remote(path) != fs.remote(folder):
    return False
  if fs.remote(path):
    return path.startswith(folder.rstrip('/') + '/')
  return os.path.abspath(path).startswith(os.path.abspath(folder).rstrip(os.sep) + os.sep)


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


def is_jsonl(path: str) -> bool:
  return path.endswith(('.jsonl', '.jsonl.gz'))


def file_lines(files: list[str], report: ReadReport | None = None,
               text_field: str = 'text') -> Iterator[str]:
  """Lines of text files; a blank line or the end of a file ends a document ('' after each).

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
      for _, doc in _file_documents(path, text_field, report):
        yield from doc
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


def _split_line(line: str, report: ReadReport) -> list[str]:
  """A line's sentences: a paragraph per line is common in user corpora (counted where split)."""
  sentences = _SENTENCE_END.split(line)
  if len(sentences) > 1:
    report.lines_split += 1
  return [s for s in sentences if s]


# A file corpus is read in parts, each by one reader alone (data/prepare.py): about this many per
# shard of the train split, so that the shards balance (a part's bytes: the corpus's over this
# times the shards; a small corpus's parts are small, and every shard gets some documents).
PARTS_PER_SHARD = 8


@dataclasses.dataclass(frozen=True)
class Part:
  """The documents that start in bytes [start, end) of the corpus's file `file` (a .gz file: all
  of them, from its decompressed text): a reader seeks there, and reads a document that crosses
  `end` to its end."""
  index: int  # its place among the corpus's parts
  file: int  # the file's index in Source.files
  start: int
  end: int


class Source:
  """A corpus spec read as documents: 'builtin', 'tfds:NAME[:SPLIT]', or a file, folder or glob.

  Reading is streamed (memory stays bounded whatever the corpus size) and repeatable: two reads of
  the same source give the same documents in the same order.
  """

  def __init__(self, spec: str, text_field: str = 'text', tfds_data_dir: str | None = None,
               exclude: str = '', marker: str = ''):
    """`exclude`: a folder whose files are never the corpus's; `marker`: a file's name that
    leaves out every file of a folder holding it (records folders inside a corpus folder, the ones
    being built from it among them: read as text, they made the next build another corpus)."""
    self.spec, self.text_field, self.tfds_data_dir = spec, text_field, tfds_data_dir
    self.report = ReadReport()
    self.files: list[str] = []
    self.excluded: list[str] = []
    self.total_bytes = 0
    self._binary: dict[int, str] = {}  # file index -> why it is binary ('' for text)
    if spec.startswith('tfds:'):
      name, _, split = spec[len('tfds:'):].partition(':')
      if not name:
        raise ValueError(f'the corpus {spec!r} names no dataset; write tfds:NAME[:SPLIT], e.g. '
                         "'tfds:wikipedia/20230601.en:train'")
      self.tfds_name, self.tfds_split = name, split or 'train'
    elif spec != 'builtin':
      self.files = resolve_files(spec)
      if exclude or marker:
        marked = {d for d in {fs.dirname(f) for f in self.files}
                  if marker and fs.exists(fs.join(d, marker))}
        self.excluded = [f for f in self.files if (exclude and _inside(f, exclude))
                         or fs.dirname(f) in marked]
        self.files = [f for f in self.files if f not in self.excluded]
        if not self.files:
          raise FileNotFoundError(f'the corpus {spec!r} matches no file outside {exclude}, the '
                                  'output; give the corpus files, or an output elsewhere')
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
    for line in file_lines(self.files, self.report, self.text_field):  # (long documents: cut)
      if line:
        doc.extend(_split_line(line, self.report))
      elif doc:
        yield doc
        doc = []
    if doc:
      yield doc

  def parts(self, shards: int) -> list['Part']:
    """The file corpus as parts of about total / (PARTS_PER_SHARD x `shards`) bytes: a file of up
    to that size is one part, a larger one is cut into byte ranges of that size, a .gz file is
    one part whatever its size (it cannot be read from the middle). The parts depend on the files
    and `shards` alone."""
    if not self.files:
      raise ValueError(f'the corpus {self.spec!r} is not files: it is read whole, in order')
    size = max(1, -(-self.total_bytes // (PARTS_PER_SHARD * shards)))
    parts: list[Part] = []
    for i, (path, total) in enumerate(zip(self.files, self.sizes)):
      cuts = [0] if path.endswith('.gz') or total <= size else range(0, total, size)
      for start in cuts:
        end = total if path.endswith('.gz') else min(start + size, total)
        parts.append(Part(len(parts), i, start, end))
    return parts

  def part_documents(self, part: 'Part', report: ReadReport) -> Iterator[tuple[int, list[str]]]:
    """(where it starts in its file, its sentences) of each non-empty document that starts in
    `part`: together, the parts of a corpus give `documents()` exactly, each document once, in
    order (`report` counts what the reading met, binary files once, by their first part)."""
    path = self.files[part.file]
    if part.file not in self._binary:  # (once a file per reader: 8 KB of it)
      self._binary[part.file] = _binary(path, report)
    why = self._binary[part.file]
    if why:
      if part.start == 0:
        report.skipped_binary.append(f'{path} ({why})')
      return
    report.files += part.start == 0
    base = report.bytes_done
    gzipped = path.endswith('.gz')
    for start, lines in _file_documents(path, self.text_field, report, part.start,
                                        None if gzipped else part.end):
      doc = [s for line in lines for s in _split_line(line, report)]
      if doc:
        yield start, doc
    report.bytes_done = base + part.end - part.start

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
