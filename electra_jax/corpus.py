"""Where text comes from. Every source yields lines: a line is a sentence, '' ends a document.

Sources: text files (plain or .gz) named by a glob, and the built-in corpus, which is the Python
standard library's own documentation (the `pydoc_data` topics plus module, class and function
docstrings, read from the sources with `ast`, never imported): about 2 MB of English present
wherever Python is, so a first run needs no download.
"""

import ast
import glob
import gzip
import os
import re
import sysconfig
from typing import Iterator

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
  paths = []
  for dirpath, dirnames, filenames in os.walk(root):
    dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith('.'))
    paths.extend(os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith('.py'))
  return sorted(paths)


def builtin_documents() -> list[list[str]]:
  """The built-in corpus as documents of sentences, in a fixed order."""
  from pydoc_data import topics  # pylint: disable=import-outside-toplevel
  docs = [text_to_sentences(topics.topics[k]) for k in sorted(topics.topics)]
  texts = (_module_docstrings(p) for p in _stdlib_sources())
  docs.extend(text_to_sentences(t) for t in texts if t)
  return [d for d in docs if d]


def builtin_lines() -> Iterator[str]:
  for doc in builtin_documents():
    yield from doc
    yield ''


def _open_text(path: str):
  if path.endswith('.gz'):
    return gzip.open(path, 'rt', encoding='utf-8', errors='replace')
  return open(path, encoding='utf-8', errors='replace')


def resolve_files(pattern: str) -> list[str]:
  """Files matched by a glob (or a folder, meaning every file below it), sorted."""
  if os.path.isdir(pattern):
    pattern = os.path.join(pattern, '**', '*')
  files = sorted(p for p in glob.glob(os.path.expanduser(pattern), recursive=True)
                 if os.path.isfile(p))
  if not files:
    raise FileNotFoundError(f'the corpus {pattern!r} matches no file; give an existing file, folder '
                            "or glob, or data.corpus='builtin'")
  return files


def file_lines(files: list[str]) -> Iterator[str]:
  """Lines of text files; a blank line or the end of a file ends a document."""
  for path in files:
    with _open_text(path) as f:
      for line in f:
        yield line.strip()
    yield ''


def corpus_lines(corpus: str) -> Iterator[str]:
  """Lines of a corpus given as 'builtin' or a glob; fails early if there is nothing to read."""
  if corpus == 'builtin':
    return builtin_lines()
  return file_lines(resolve_files(corpus))
