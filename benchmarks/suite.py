"""A suite of real-text classification tasks built offline from text the system's packages ship.

    tasks = suite.build(out_dir, sources=suite.Sources())   # benchmarks/build_tasks.py

Nobody here wrote these texts or chose their labels, and no recipe was tuned on them:

- `debian_section` (topic): a Debian package's one-line description -> its archive section, among
  eight topical sections (games, science, sound, graphics, net, admin, text, web); from apt's
  package index (`/var/lib/apt/lists/*_Packages*`).
- `debian_role` (kind of software): the same descriptions -> the package's `role::` debtag
  (program, shared library, development library, documentation, data, plugin).
- `man_section` (genre): the opening of a manual page's DESCRIPTION -> its section (1 commands,
  2 system calls, 3 library functions, 5 file formats, 7 overviews, 8 administration); from the
  English pages under `/usr/share/man`.
- `man_language` (language): a paragraph of a translated manual page -> its language, among the
  Latin-script translations with enough pages.

Each task gets fixed train / dev / test splits (a hash of the text, or of the page for the
paragraphs of one page, decides: the same files on every machine with the same sources), classes
capped to keep them balanced, and the train split's texts (no labels) as `corpus.txt`, the
pre-training corpus of that task. Written as `<out>/<task>/{train,dev,test}.csv` (columns text,
label) and `<out>/suite.json` (tasks, kinds, counts, sources).
"""

import csv
import dataclasses
import glob
import gzip
import hashlib
import json
import lzma
import os
import re
import subprocess
import unicodedata

from electra_jax.storage import fs

SPLITS = (('train', 0.8), ('dev', 0.1), ('test', 0.1))
TOPICS = ('games', 'science', 'sound', 'graphics', 'net', 'admin', 'text', 'web')
ROLES = {'program': 'program', 'shared-lib': 'shared library', 'devel-lib': 'development library',
         'documentation': 'documentation', 'app-data': 'data', 'plugin': 'plugin'}
MAN_SECTIONS = ('1', '2', '3', '5', '7', '8')
LANGUAGES = ('de', 'fr', 'es', 'it', 'nl', 'pl', 'pt', 'sv', 'cs', 'da', 'fi', 'hu', 'ro', 'tr')


@dataclasses.dataclass
class Sources:
  packages: str = '/var/lib/apt/lists/*_Packages*'  # apt's package indexes (plain, .gz, .xz, .lz4)
  man: str = '/usr/share/man'  # manual pages: man<k>/ (English), <lang>/man<k>/ (translations)
  per_class: int = 600  # train examples per class at most (dev and test: an eighth of it each)
  man_words: int = 60  # words of a page's DESCRIPTION kept
  min_class: int = 40  # a class with fewer train examples is left out


@dataclasses.dataclass(frozen=True)
class Task:
  name: str
  kind: str  # what the labels are: topic, kind of software, genre, language
  source: str
  examples: tuple  # (text, label, group): `group` keeps related texts in one split


def _split_of(group: str) -> str:
  x = int.from_bytes(hashlib.sha256(group.encode()).digest()[:8], 'little') / 2.0**64
  edge = 0.0
  for name, share in SPLITS:
    edge += share
    if x < edge:
      return name
  return SPLITS[-1][0]


def _rank(text: str) -> bytes:
  return hashlib.sha256(('rank:' + text).encode()).digest()


def _read_index(path: str) -> str:
  """The text of an apt index file, whatever its compression."""
  if path.endswith('.lz4'):
    try:
      return subprocess.run(['lz4cat', path], capture_output=True, check=True).stdout.decode(
          'utf-8', errors='replace')
    except FileNotFoundError:
      raise ValueError(f'{path} is lz4-compressed and lz4cat is not installed; install lz4 '
                       '(apt-get install lz4)') from None
  opener = gzip.open if path.endswith('.gz') else lzma.open if path.endswith('.xz') else open
  with opener(path, 'rt', encoding='utf-8', errors='replace') as f:
    return f.read()


def _packages(pattern: str) -> list[dict]:
  paths = sorted(p for p in glob.glob(pattern) if not p.endswith(('.diff', '.IndexDiff')))
  if not paths:
    raise ValueError(f'no apt package index matches {pattern}; run apt-get update, or give '
                     '--packages=<a Packages file>')
  stanzas = []
  for path in paths:
    for block in _read_index(path).split('\n\n'):
      fields, key = {}, None
      for line in block.splitlines():
        if line[:1] in (' ', '\t') and key:
          fields[key] += ' ' + line.strip()
        elif ':' in line:
          key, _, value = line.partition(':')
          fields[key] = value.strip()
      if fields.get('Description'):
        stanzas.append(fields)
  return stanzas


def _unique(pairs) -> list[tuple[str, str]]:
  """(text, label) pairs with each text once; a text seen with two labels is dropped."""
  labels = {}
  for text, label in pairs:
    labels.setdefault(text, set()).add(label)
  return [(t, next(iter(v))) for t, v in labels.items() if len(v) == 1]


def debian_tasks(sources: Sources) -> list[Task]:
  stanzas = _packages(sources.packages)
  section = [(s['Description'], s.get('Section', '').split('/')[-1]) for s in stanzas]
  section = [(t, l) for t, l in _unique(section) if l in TOPICS]
  roles = []
  for s in stanzas:
    found = {r for r in re.findall(r'role::([\w-]+)', s.get('Tag', '')) if r in ROLES}
    if len(found) == 1:
      roles.append((s['Description'], ROLES[found.pop()]))
  where = f'apt package index ({sources.packages})'
  return [Task('debian_section', 'topic', where, tuple((t, l, t) for t, l in section)),
          Task('debian_role', 'kind of software', where,
               tuple((t, l, t) for t, l in _unique(roles)))]


_MARKS = {"'": '\u0301', '`': '\u0300', '^': '\u0302', ':': '\u0308', '~': '\u0303',
          ',': '\u0327'}
_NAMED = {'ss': '\u00df', 'ae': '\u00e6', 'AE': '\u00c6', 'o/': '\u00f8', 'O/': '\u00d8',
          'em': '-', 'en': '-', 'hy': '-', 'aq': "'", 'dq': '"', 'lq': '"', 'rq': '"', 'oq': "'",
          'cq': "'", 'Fo': '"', 'Fc': '"', 'fo': "'", 'fc': "'", 'bu': ' '}


def _special(match) -> str:
  """A groff special character (\\('e, \\[u00E9], \\[:a]) as the character it names."""
  name = match.group(1) or match.group(2)
  if name.startswith('u') and re.fullmatch(r'u[0-9A-Fa-f]{4,6}', name):
    return chr(int(name[1:], 16))
  if len(name) == 2 and name[0] in _MARKS and name[1].isalpha():
    return unicodedata.normalize('NFC', name[1] + _MARKS[name[0]])
  return _NAMED.get(name, ' ')


def _string(match) -> str:
  """A groff string (\\*(Aq, \\*[lq]): the quotes that pod2man's pages define, else nothing."""
  name = match.group(1) or match.group(2) or match.group(3)
  return {'Aq': "'", 'aq': "'", 'lq': '"', 'rq': '"', 'L"': '"', 'R"': '"', 'C`': '"',
          "C'": '"'}.get(name, '')


_ESCAPES = [(re.compile(r'\\f(\[[^\]]*\]|\(..|.)'), ''),
            (re.compile(r'\\(?:\((..)|\[([^\]]*)\])'), _special),
            (re.compile(r'\\\*(?:\((..)|\[([^\]]*)\]|(.))'), _string),
            (re.compile(r'\\n(\(..|\[[^\]]*\]|.)'), ''),
            (re.compile(r'\\s[-+]?\d'), ''), (re.compile(r'\\[&|^~0:%]'), ''),
            (re.compile(r'\\-'), '-'), (re.compile(r'\\e'), r'\\'), (re.compile(r'\\(.)'), r'\1')]


def man_text(source: str) -> list[tuple[str, list[str]]]:
  """A manual page's groff source as plain text: [(section heading, [paragraph, ...]), ...]."""
  sections, heading, paragraph = [], None, []

  def flush():
    if paragraph and heading is not None:
      sections[-1][1].append(' '.join(paragraph))
    paragraph.clear()

  for raw in source.splitlines():
    line = raw.rstrip()
    if line.startswith(('.\\"', "'\\\"", '\\"')):
      continue
    if line.startswith(('.SH', '.Sh')):
      flush()
      heading = line[3:].strip().strip('"').upper()
      sections.append((heading, []))
      continue
    if line.startswith(('.PP', '.P', '.LP', '.IP', '.TP', '.sp', '.br', '.Pp')) or not line:
      flush()  # a paragraph ends (an .IP's tag, a bullet, is no text)
      continue
    if line.startswith(('.', "'")):
      macro, _, args = line.partition(' ')
      if macro in ('.B', '.I', '.BR', '.IR', '.RB', '.RI', '.BI', '.IB', '.SM', '.Nm', '.Ar',
                   '.Fn', '.Xr', '.Em', '.Sy'):
        line = args.replace('"', '')
      else:
        continue
    for pattern, replacement in _ESCAPES:
      line = pattern.sub(replacement, line)
    if line.strip():
      paragraph.append(line.strip())
  flush()
  return sections


def _man_pages(folder: str) -> list[str]:
  return sorted(p for p in glob.glob(os.path.join(folder, '*')) if os.path.isfile(p))


def _read_page(path: str) -> str | None:
  try:
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rt', encoding='utf-8', errors='replace') as f:
      text = f.read()
  except (OSError, EOFError):
    return None
  return None if text.lstrip().startswith('.so ') else text  # a link to another page


def man_tasks(sources: Sources) -> list[Task]:
  root = sources.man
  if not os.path.isdir(root):
    raise ValueError(f'{root} does not exist; give --man=<the folder of the manual pages>')
  pages, families = [], {}
  for section in MAN_SECTIONS:
    for path in _man_pages(os.path.join(root, f'man{section}')):
      # One command's many subcommand pages (gcloud_*, git-*) count as one family of at most 5.
      family = re.split(r'[._-]', os.path.basename(path), maxsplit=1)[0]
      families[(section, family)] = families.get((section, family), 0) + 1
      if families[(section, family)] > 5:
        continue
      text = _read_page(path)
      description = next((p for h, ps in man_text(text) if h.startswith('DESCRIPTION')
                          for p in ps[:3]), None) if text else None
      if description:
        words = ' '.join(description.split()[:sources.man_words])
        pages.append((words, section, os.path.basename(path)))
  languages = []
  for language in LANGUAGES:
    for path in sorted(glob.glob(os.path.join(root, language, 'man*', '*'))):
      text = _read_page(path) if os.path.isfile(path) else None
      for _, paragraphs in (man_text(text) if text else [])[1:]:  # after NAME
        for p in paragraphs:
          if len(p.split()) >= 12:
            languages.append((' '.join(p.split()[:sources.man_words]), language,
                              f'{language}/{os.path.basename(path)}'))
  unique = {t: (t, l, g) for t, l, g in pages}  # a text once (identical pages in two sections)
  return [Task('man_section', 'genre', f'manual pages ({root}/man<k>)', tuple(unique.values())),
          Task('man_language', 'language', f'translated manual pages ({root}/<language>)',
               tuple({t: (t, l, g) for t, l, g in languages}.values()))]


def _write_csv(path: str, rows):
  with fs.open(path, 'w', encoding='utf-8', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['text', 'label'])
    writer.writerows(rows)


def write(task: Task, out_dir: str, per_class: int, min_class: int = 40) -> dict:
  """The task's split files and corpus under `out_dir/<name>`; its description."""
  splits = {name: {} for name, _ in SPLITS}
  for text, label, group in task.examples:
    splits[_split_of(group)].setdefault(label, []).append(text)
  caps = {'train': per_class, 'dev': max(1, per_class // 8), 'test': max(1, per_class // 8)}
  labels = sorted(l for l in splits['train'] if len(splits['train'][l]) >= min_class and all(
      splits[s].get(l) for s in ('dev', 'test')))
  if len(labels) < 2:
    raise ValueError(f'{task.name}: fewer than two classes with {min_class} train examples in '
                     f'{task.source}; this machine lacks the text for it')
  folder = fs.join(out_dir, task.name)
  fs.makedirs(folder, exist_ok=True)
  counts = {}
  for split, by_label in splits.items():
    rows = [(t, l) for l in labels for t in sorted(by_label.get(l, []), key=_rank)[:caps[split]]]
    rows.sort(key=lambda r: _rank(r[0]))  # classes mixed, in a fixed order
    _write_csv(fs.join(folder, f'{split}.csv'), rows)
    counts[split] = len(rows)
    if split == 'train':
      fs.write_atomic(fs.join(folder, 'corpus.txt'), '\n\n'.join(t for t, _ in rows) + '\n')
  return {'name': task.name, 'kind': task.kind, 'source': task.source, 'labels': labels,
          'examples': counts, 'folder': folder}


BUILDERS = {'debian': debian_tasks, 'man': man_tasks}


def build(out_dir: str, sources: Sources | None = None, log=print) -> list[dict]:
  """Every task of the suite under `out_dir`, and `suite.json` describing them."""
  sources = sources or Sources()
  described = []
  for builder in BUILDERS.values():
    for task in builder(sources):
      d = write(task, out_dir, sources.per_class, sources.min_class)
      described.append(d)
      log(f'{d["name"]} ({d["kind"]}): {len(d["labels"])} classes, '
          + ', '.join(f'{s} {n:,}' for s, n in d['examples'].items()) + f' | {d["folder"]}')
  fs.write_atomic(fs.join(out_dir, 'suite.json'),
                  json.dumps({'tasks': described, 'sources': dataclasses.asdict(sources)},
                             indent=1))
  return described
