"""Labelled text for fine-tuning: GLUE (from TFDS), the user's own CSV/TSV/JSONL files, and a
built-in task that needs no download.

Every source becomes lists of `Example(text_a, text_b, label)` per split; a `Task` says what the
labels are and how the task is scored.
"""

import csv
import dataclasses
import json
import os
from typing import Any

import numpy as np

from electra_jax import fs
from electra_jax.finetune import kinds


@dataclasses.dataclass(frozen=True)
class Example:
  text_a: Any  # the text; tagging: the sentence's words (a tuple)
  text_b: Any  # the second text or None; multiple choice: the candidates (a tuple)
  label: Any  # a class name, a number (regression), the words' BIOES tags or the right candidate's
  #             index; None if unlabelled
  idx: int | None = None  # the row's id in its source (GLUE's test index, for leaderboard files)


@dataclasses.dataclass(frozen=True)
class Task:
  name: str
  kind: str  # a name of finetune/kinds.REGISTRY: 'classification', 'regression', 'tagging', ...
  labels: tuple  # class names in output order (classification)
  metrics: tuple  # scores.SCORES names; the first is the task's headline score
  dev_splits: tuple = ('dev',)  # evaluated splits (MNLI: matched and mismatched); the first
  #                               chooses the best checkpoint
  swap_pairs: bool = False  # train on (a, b) and (b, a) (MRPC, STS-B)
  label_scale: float = 1.0  # regression targets are divided by this (STS-B: 5, to [0, 1])
  epochs: float = 3.0  # the paper's epochs for this task
  test_splits: tuple = ()  # test splits whose every example is labelled: scored at the end only


@dataclasses.dataclass(frozen=True)
class _Glue:
  fields: tuple  # the TFDS features holding text a (and b)
  labels: tuple  # class names in TFDS label order; () for regression
  metrics: tuple
  splits: dict  # our split -> TFDS split
  swap_pairs: bool = False
  epochs: float = 3.0


_BINARY = ('0', '1')
_ENTAIL = ('entailment', 'not_entailment')
_SPLITS = {'train': 'train', 'dev': 'validation', 'test': 'test'}
GLUE = {
    'cola': _Glue(('sentence',), _BINARY, ('mcc',), _SPLITS),
    'sst2': _Glue(('sentence',), _BINARY, ('accuracy',), _SPLITS),
    'mrpc': _Glue(('sentence1', 'sentence2'), _BINARY, ('f1', 'accuracy'), _SPLITS, True),
    'qqp': _Glue(('question1', 'question2'), _BINARY, ('f1', 'accuracy'), _SPLITS),
    'stsb': _Glue(('sentence1', 'sentence2'), (), ('spearman', 'pearson'), _SPLITS, True, 10.0),
    'mnli': _Glue(('premise', 'hypothesis'), ('entailment', 'neutral', 'contradiction'),
                  ('accuracy',), {'train': 'train', 'dev_matched': 'validation_matched',
                                  'dev_mismatched': 'validation_mismatched',
                                  'test_matched': 'test_matched',
                                  'test_mismatched': 'test_mismatched'}),
    'qnli': _Glue(('question', 'sentence'), _ENTAIL, ('accuracy',), _SPLITS),
    'rte': _Glue(('sentence1', 'sentence2'), _ENTAIL, ('accuracy',), _SPLITS, False, 10.0),
    'wnli': _Glue(('sentence1', 'sentence2'), _BINARY, ('accuracy',), _SPLITS),
}


def glue_task(name: str) -> Task:
  g = GLUE[name]
  dev = tuple(s for s in g.splits if s.startswith('dev'))
  return Task(name, 'regression' if not g.labels else 'classification', g.labels, g.metrics, dev,
              g.swap_pairs, 5.0 if name == 'stsb' else 1.0, g.epochs)


def load_glue(name: str, data_dir: str | None = None) -> dict[str, list[Example]]:
  """The splits of GLUE task `name` from TFDS (`glue/<name>`); test labels are None."""
  from electra_jax import tf_import  # pylint: disable=import-outside-toplevel
  tfds = tf_import.datasets()
  g = GLUE[name]
  out = {}
  for ours, theirs in g.splits.items():
    examples = []
    for row in tfds.as_numpy(tfds.load(f'glue/{name}', split=theirs, data_dir=data_dir)):
      texts = [row[f].decode('utf-8') for f in g.fields]
      label = row['label']
      if ours.startswith('test') or (g.labels and int(label) < 0):
        label = None
      elif g.labels:
        label = g.labels[int(label)]
      else:
        label = float(label)
      examples.append(Example(texts[0], texts[1] if len(texts) > 1 else None, label,
                              int(row['idx'])))
    out[ours] = examples
  return out


@dataclasses.dataclass(frozen=True)
class _GlueTsv:
  folder: str  # the task's folder in GLUE's download layout
  text: tuple  # header names of text a (and b)
  label: str  # header name of the label
  index: str | None = None  # header name of the row id of test.tsv
  files: tuple = (('train', 'train.tsv'), ('dev', 'dev.tsv'), ('test', 'test.tsv'))


_MNLI_FILES = (('train', 'train.tsv'), ('dev_matched', 'dev_matched.tsv'),
               ('dev_mismatched', 'dev_mismatched.tsv'), ('test_matched', 'test_matched.tsv'),
               ('test_mismatched', 'test_mismatched.tsv'))
GLUE_TSV = {
    'cola': _GlueTsv('CoLA', ('sentence',), 'label', 'index'),  # train/dev: no header (see below)
    'sst2': _GlueTsv('SST-2', ('sentence',), 'label', 'index'),
    'mrpc': _GlueTsv('MRPC', ('#1 String', '#2 String'), 'Quality', 'index'),
    'qqp': _GlueTsv('QQP', ('question1', 'question2'), 'is_duplicate', 'id'),
    'stsb': _GlueTsv('STS-B', ('sentence1', 'sentence2'), 'score', 'index'),
    'mnli': _GlueTsv('MNLI', ('sentence1', 'sentence2'), 'gold_label', 'index', _MNLI_FILES),
    'qnli': _GlueTsv('QNLI', ('question', 'sentence'), 'label', 'index'),
    'rte': _GlueTsv('RTE', ('sentence1', 'sentence2'), 'label', 'index'),
    'wnli': _GlueTsv('WNLI', ('sentence1', 'sentence2'), 'label', 'index'),
}


def load_glue_tsv(root: str, name: str, log=print) -> dict[str, list[Example]]:
  """GLUE task `name` from the original download's folders (<root>/<Task>/train.tsv, ...).

  Rows with too few columns (QQP has some) are skipped and counted; test.tsv is optional.
  """
  spec, g = GLUE_TSV[name], GLUE[name]
  folder = fs.join(root, spec.folder)
  if not fs.isdir(folder) and fs.isfile(fs.join(root, 'train.tsv')):
    folder = root  # the task's own folder was given
  out = {}
  for split, file in spec.files:
    path = fs.join(folder, file)
    if not fs.isfile(path):
      if split.startswith('test'):
        continue
      raise FileNotFoundError(f'{path} does not exist; task.glue_dir must hold GLUE\'s download '
                              f'layout ({spec.folder}/{file}, ...)')
    with fs.open(path, encoding='utf-8', newline='') as f:
      rows = list(csv.reader(f, delimiter='\t', quoting=csv.QUOTE_NONE))
    test = split.startswith('test')
    if name == 'cola' and (not test or (rows and len(rows[0]) == 4 and rows[0][1] in '01')):
      # CoLA's train/dev (and labelled copies of its test) have no header: source, label, _, text
      header, rows = ['source', 'label', 'original', 'sentence'], rows
    else:
      header, rows = (rows[0], rows[1:]) if rows else ([], [])
    # Test files are unlabelled in GLUE's download; many public copies carry the labels: scored.
    labelled = not test or spec.label in header
    wanted = list(spec.text) + ([spec.label] if labelled else [spec.index])
    missing = [c for c in wanted if c not in header]
    if missing:
      raise ValueError(f'{path} has no column(s) {missing} (its header: {header}); is it GLUE\'s '
                       f'{spec.folder} file?')
    col = {c: header.index(c) for c in wanted + [spec.index] if c in header}
    examples, skipped = [], 0
    for n, row in enumerate(rows):
      if len(row) <= max(col.values()):
        skipped += 1
        continue
      texts = [row[col[c]] for c in spec.text]
      label = None
      if labelled:
        label = row[col[spec.label]]
        if g.labels and label not in g.labels:
          raise ValueError(f'row {n + 1} of {path} has the label {label!r}, not one of '
                           f'{list(g.labels)}')
        label = float(label) if not g.labels else label
      index = int(row[col[spec.index]]) if test and spec.index in col else n
      examples.append(Example(texts[0], texts[1] if len(texts) > 1 else None, label, index))
    if skipped:
      log(f'warning: {path}: {skipped} row(s) with too few columns skipped')
    out[split] = examples
  return out


def _read_rows(path: str, ext: str, header: bool):
  """(rows as dicts, the column names, the header row's cells or None, the line number of each
  row or None) of a .jsonl file, or a .csv/.tsv file with or without a header row."""
  first = None  # a header row's cells, shown when a named column is missing
  line_numbers = None  # of each row: a .jsonl file's lines, a table's data rows
  with fs.open(path, encoding='utf-8-sig', newline='') as f:  # a byte-order mark is read away
    if ext == '.jsonl':
      rows, line_numbers = [], []
      for n, line in enumerate(f, start=1):
        if line.strip():
          try:
            rows.append(json.loads(line))
          except json.JSONDecodeError as e:
            raise ValueError(f'line {n} of {path} is not JSON ({e.msg}); each line must be one '
                             'object') from None
          if not isinstance(rows[-1], dict):
            raise ValueError(f'line {n} of {path} is not a JSON object ({{"text": ..., "label": '
                             '...}}); each line must be one')
          line_numbers.append(n)
      columns = sorted(set().union(*(r.keys() for r in rows))) if rows else []
    elif header:
      reader = csv.DictReader(f, delimiter='\t' if ext == '.tsv' else ',')
      rows, columns = list(reader), list(reader.fieldnames or [])
      first = columns
    else:
      rows = [dict(enumerate(r)) for r in csv.reader(f, delimiter='\t' if ext == '.tsv' else ',')
              if r]
      columns = list(range(max((len(r) for r in rows), default=0)))
  return rows, columns, first, line_numbers


def read_table(path: str, text_a: str, text_b: str, label: str, *, labelled: bool | None = True,
               header: bool = True, numeric: bool = False, choices: tuple = (),
               log=print) -> list[Example]:
  """Rows of a .csv, .tsv or .jsonl file (one object per line).

  A .csv/.tsv file's first row names its columns; with `header=False` every row is data and the
  columns are named by their position (0, 1, ...). Labels are read as meant (`labels`; `numeric`:
  as numbers): `labelled` True requires one in every row; None (a test file) reads them where every
  row has one and takes a file whose label cells are all empty (or absent) for unlabelled.
  `choices`: columns whose texts become the example's `text_b`, a tuple (multiple choice).
  """
  if not fs.isfile(path):
    raise FileNotFoundError(f'the data file {path} does not exist; give the path of a .csv, .tsv '
                            'or .jsonl file')
  ext = os.path.splitext(path)[1].lower()
  if ext not in ('.csv', '.tsv', '.jsonl'):
    raise ValueError(f'the data file {path} is not .csv, .tsv or .jsonl; convert it to one of them')
  rows, columns, first, line_numbers = _read_rows(path, ext, header)
  line_numbers = line_numbers or list(range(1, len(rows) + 1))
  if not rows:
    raise ValueError(f'the data file {path} holds no rows; give a file with ' +
                     ('a header row and data' if header else 'data'))
  if not header and ext != '.jsonl':
    text_a, text_b, label = (_position(path, what, value, len(columns)) for what, value in
                             (('text_a', text_a), ('text_b', text_b), ('label', label)))
    choices = tuple(_position(path, 'choices', value, len(columns)) for value in choices)
  wider = next((i for i, r in enumerate(rows) if r.get(None)), None)  # csv's key for extra fields
  if wider is not None:
    fields = len(columns) + len(rows[wider][None])
    raise ValueError(f'data row {wider + 1} of {path} has {fields} fields but the header names '
                     f'{len(columns)} ({", ".join(columns)}); quote the fields that hold the '
                     'delimiter, or fix the row')
  test = labelled is None
  if labelled is None:  # a test file: labelled when any row has a label, unlabelled when none
    labelled = bool(label) and any(not _empty(r.get(label)) for r in rows)
  for column in (text_a, text_b, *choices, label if labelled else None):
    absent = [i for i, r in enumerate(rows) if r.get(column) is None] if column not in (
        None, '') else []
    if absent and first is not None and len(rows) == len(absent):
      if ext == '.csv' and any('\t' in c for c in first):
        raise ValueError(f'the data file {path} looks tab-separated (its first row holds tabs) '
                         'but is named .csv; name it .tsv')
      raise ValueError(f'the data file {path} has no column {column!r}: its first row '
                       f'({", ".join(first)[:200]}) names the columns; set task.text_a, '
                       f'task.text_b{", task.choices" if choices else ""} and task.label to some '
                       'of those, or if that row is data, '
                       'set task.header=False and give the columns by position (task.text_a=1 '
                       'task.label=0)')
    if absent and len(rows) == len(absent):
      where = 'columns' if header or ext == '.jsonl' else 'number of fields'
      shown = ', '.join(map(str, columns)) if header or ext == '.jsonl' else str(len(columns))
      raise ValueError(f'the data file {path} has no column {column!r} (its {where}: {shown}); '
                       'set the task.text_a, task.text_b and task.label columns')
    if absent and column != label:  # a missing label is named by labels()
      raise ValueError(f'{_rows(path, absent, line_numbers)} {"lack" if len(absent) > 1 else "lacks"}'
                       f' the field {column!r} ({len(absent)} of {len(rows)} rows); fix those rows'
                       ' (a field that holds the delimiter must be quoted)')
  labelled = labelled and label not in (None, '')
  names = (labels(path, [r.get(label) for r in rows], numeric, line_numbers, log, test=test)
           if labelled else None)
  second = lambda r: (tuple(str(r[c]) for c in choices) if choices else
                      str(r[text_b]) if text_b not in (None, '') else None)
  return [Example(str(r[text_a]), second(r), names[i] if labelled else None)
          for i, r in enumerate(rows)]


def _rows(path: str, indices: list[int], line_numbers: list[int]) -> str:
  """'data rows 3, 7 of f.csv' / 'line 4 of f.jsonl' for rows at `indices`."""
  word = 'line' if path.endswith('.jsonl') else 'data row'
  return (f'{word}{"s" if len(indices) > 1 else ""} '
          + ', '.join(str(line_numbers[i]) for i in indices[:5])
          + (f' and {len(indices) - 5} more' if len(indices) > 5 else '') + f' of {path}')


def _empty(value) -> bool:
  return value is None or (isinstance(value, str) and not value.strip())


def _number(value) -> float | None:
  """`value` as a number (1, "1", 1.0 and " 1 " alike), or None if it is not one."""
  if isinstance(value, bool):
    return None
  if isinstance(value, (int, float)):
    return float(value)
  try:
    return float(str(value).strip())
  except ValueError:
    return None


def labels(path: str, cells: list, numeric: bool, line_numbers: list[int], log=print,
           test: bool = False) -> list:
  """The labels of a file's rows as meant: whitespace around them dropped, numbers compared as
  numbers (1, "1" and 1.0 are one class, named '1'), `numeric` targets as floats. A row without a
  label, or with a label that is not a finite number where a number is needed, is refused naming
  the file and the rows; classes that differ only in case are named in a warning."""
  where = lambda rows: _rows(path, rows, line_numbers)
  empty = [i for i, c in enumerate(cells) if _empty(c)]
  if empty:
    fix = ('fill those labels in, or empty every label cell to predict the file without '
           'scoring it' if test else 'fill the label in or remove the row')
    raise ValueError(f'{where(empty)} {"have" if len(empty) > 1 else "has"} no label ({len(empty)}'
                     f' of {len(cells)} rows); {fix}')
  numbers = [_number(c) for c in cells]
  bad = [i for i, x in enumerate(numbers) if x is not None and not np.isfinite(x)]
  if numeric:
    bad += [i for i, x in enumerate(numbers) if x is None]
  if bad:
    bad = sorted(bad)
    raise ValueError(f'{where(bad)} {"have" if len(bad) > 1 else "has"} the label '
                     f'{cells[bad[0]]!r}, not a finite number; '
                     + ('a regression task needs numeric labels' if numeric else
                        'give each row its class'))
  if numeric:
    return numbers
  names = [(str(int(x)) if x == int(x) else repr(x)) if x is not None else str(c).strip()
           for c, x in zip(cells, numbers)]
  by_case = {}
  for name in set(names):
    by_case.setdefault(name.lower(), []).append(name)
  clashes = [sorted(v) for v in by_case.values() if len(v) > 1]
  if clashes:
    log(f'warning: {path}: labels that differ only in case are different classes: '
        + '; '.join(' / '.join(map(repr, c)) for c in sorted(clashes)[:5])
        + '; write them alike if they mean the same')
  return names


def _position(path: str, what: str, value: str, width: int) -> int | None:
  """task.text_a / text_b / label of a file without a header: a column's position (0 first)."""
  if value == '' and what == 'text_b':
    return None
  if not str(value).isdigit():
    raise ValueError(f'task.header is False, so task.{what} must be a column position (0, 1, ... '
                     f'of the {width} in {path}), not {value!r}; e.g. --config.task.{what}=1')
  return int(value)


def task_name(cfg) -> str:
  """`task.name`, or for 'own' the train file's stem (its folder's name when the stem is a split's
  name such as train.csv)."""
  if cfg.name != 'own':
    return cfg.name
  path = cfg.train.rstrip('/')
  stem = os.path.splitext(fs.basename(path))[0]
  if stem.lower() in ('train', 'training', 'train_data', 'data'):
    folder = path[:-len(fs.basename(path))].rstrip('/')
    if not folder and '://' not in path:
      folder = os.getcwd()
    stem = fs.basename(folder) or stem
  return stem or 'own'


def sample_train(splits: dict, limit: int, log=print) -> dict:
  """At most `limit` train examples (0: all): a fixed random subset in the file's order, the same
  for every seed."""
  train = splits.get('train') or []
  if not limit or len(train) <= limit:
    return splits
  keep = np.sort(np.random.default_rng(0).choice(len(train), limit, replace=False))
  log(f'train: {limit:,} of {len(train):,} examples used (task.max_train_examples)')
  return {**splits, 'train': [train[i] for i in keep]}


def with_test_splits(task: Task, splits: dict) -> Task:
  """The task scoring each test split whose every example has a label."""
  labelled = tuple(s for s in splits if s.startswith('test') and splits[s] and
                   all(e.label is not None for e in splits[s]))
  return dataclasses.replace(task, test_splits=labelled)


def read_splits(cfg, numeric: bool = False, choices: tuple = (), log=print) -> dict:
  """{split: examples} of your own files task.train / dev / test (see `read_table`)."""
  return {split: read_table(cfg[split], cfg.text_a, cfg.text_b, cfg.label,
                            labelled=None if split == 'test' else True,
                            header=cfg.get('header', True), numeric=numeric, choices=choices,
                            log=log)
          for split in ('train', 'dev', 'test') if cfg[split]}


def class_names(splits: dict[str, list[Example]]) -> tuple:
  """The train split's labels, sorted: ValueError when fewer than 2, or when another split has a
  label the train split lacks."""
  labels = tuple(sorted({str(e.label) for e in splits['train']}))
  if len(labels) < 2:
    raise ValueError(f'the train data has {len(labels)} distinct label(s); a classification task '
                     'needs at least 2')
  for split, examples in splits.items():
    unseen = sorted({str(e.label) for e in examples if e.label is not None} - set(labels))
    if unseen:
      raise ValueError(f'the {split} data has label(s) {unseen[:5]} never seen in the train data '
                       f'(whose labels are {list(labels)[:10]}); fix the labels or add training '
                       'examples of them')
  return labels


BUILTIN = Task('builtin', 'classification', ('random', 'next'), ('accuracy',), ('dev',))


def load_builtin(seed: int, eval_fraction: float, max_train: int = 4000
                 ) -> dict[str, list[Example]]:
  """Sentence coherence on the built-in corpus: does sentence b follow sentence a in its document
  ('next'), or is it a sentence of another document ('random')? Half of each.

  Dev and test pairs come only from the documents the pre-training on the built-in corpus held out
  (the same hash of (seed, document index) as the records), split between them by a second hash;
  train pairs come from the other documents. Everything is a function of `seed`.
  """
  from electra_jax import corpus, records  # pylint: disable=import-outside-toplevel
  docs = corpus.builtin_documents()
  pools = {'train': [], 'dev': [], 'test': []}
  for k, doc in enumerate(docs):
    if records.held_out(seed, k, eval_fraction):
      pools['dev' if records.held_out(seed + 1, k, 0.5) else 'test'].append(doc)
    else:
      pools['train'].append(doc)
  out = {}
  for i, (split, pool) in enumerate(pools.items()):
    rng = np.random.default_rng([seed, i])
    sentences = [(d, s) for d, doc in enumerate(pool) for s in doc]
    pairs = []
    for d, doc in enumerate(pool):
      for j in range(len(doc) - 1):
        if rng.random() < 0.5:
          pairs.append(Example(doc[j], doc[j + 1], 'next'))
        else:
          other, sentence = sentences[rng.integers(len(sentences))]
          while other == d:
            other, sentence = sentences[rng.integers(len(sentences))]
          pairs.append(Example(doc[j], sentence, 'random'))
    order = rng.permutation(len(pairs))
    out[split] = [pairs[j] for j in order[:max_train if split == 'train' else None]]
  return out


# Areas of the standard library's documentation: label -> top-level modules and packages (each in
# Python 3.11 and later).
TOPICS = {
    'asyncio': ('asyncio',),
    'concurrency': ('multiprocessing', 'concurrent', 'threading', 'queue'),
    'email': ('email', 'mailbox', 'smtplib', 'imaplib', 'poplib'),
    'importing': ('importlib', 'pkgutil', 'zipimport'),
    'logging': ('logging',),
    'numbers': ('_pydecimal', 'statistics', 'fractions', 'numbers', 'random'),
    'testing': ('unittest', 'doctest'),
    'web': ('http', 'urllib', 'wsgiref'),
    'xml': ('xml', 'xmlrpc'),
}
BUILTIN_TOPIC = Task('builtin_topic', 'classification', tuple(TOPICS), ('accuracy',), ('dev',))


def load_builtin_topic(seed: int, max_train: int = 4000, per_topic: int = 450
                       ) -> dict[str, list[Example]]:
  """Which area of the standard library a passage of its documentation comes from (9 classes:
  asyncio, email, testing, ...): a task of vocabulary and subject rather than of coherence.

  A passage is two consecutive sentences of a module's docstrings. Each area gives at most
  `per_topic` passages (drawn from (seed, area)), 70% train, 15% dev, 15% test, so the classes are
  about balanced. The passages are text the pre-training on the built-in corpus may have read, as
  a user's own unlabelled text is; their labels it never saw.
  """
  from electra_jax import corpus  # pylint: disable=import-outside-toplevel
  area = {module: label for label, modules in TOPICS.items() for module in modules}
  seen = {}  # passage -> its area (docstrings repeat: each passage is kept once, in one split)
  for module, sentences in corpus.builtin_module_documents():
    if module in area:
      for j in range(0, len(sentences) - 1, 2):
        seen.setdefault(' '.join(sentences[j:j + 2]), area[module])
  passages = {label: [t for t, a in seen.items() if a == label] for label in TOPICS}
  out = {'train': [], 'dev': [], 'test': []}
  for i, (label, texts) in enumerate(passages.items()):
    order = np.random.default_rng([seed, 100 + i]).permutation(len(texts))[:per_topic]
    cut = int(round(0.15 * len(order)))
    for split, rows in (('test', order[:cut]), ('dev', order[cut:2 * cut]),
                        ('train', order[2 * cut:])):
      out[split].extend(Example(texts[j], None, label) for j in rows)
  for i, split in enumerate(out):
    rows = np.random.default_rng([seed, 200 + i]).permutation(len(out[split]))
    out[split] = [out[split][j] for j in rows[:max_train if split == 'train' else None]]
  return out


SQUAD = {'squad1': 'v1.1', 'squad2': 'v2.0'}


def load_squad(cfg) -> tuple[Task, dict[str, list]]:
  """SQuAD questions from the official JSON files (task.train / task.dev) or TFDS."""
  from electra_jax.finetune import squad  # pylint: disable=import-outside-toplevel
  task = named_task(cfg)
  if cfg.train:
    return task, {s: squad.read_json(cfg[s]) for s in ('train', 'dev') if cfg[s]}
  version = SQUAD[cfg.name]
  return task, {'train': squad.load_tfds(version, 'train', cfg.tfds_data_dir or None),
                'dev': squad.load_tfds(version, 'validation', cfg.tfds_data_dir or None)}


def named_task(cfg) -> Task | None:
  """The task of `config.task` when its name defines it (GLUE, SQuAD, the built-in tasks) without
  reading any data; None for your own data (its labels come from the train file)."""
  if cfg.name in SQUAD:
    return Task(cfg.name, 'qa', (), ('f1', 'exact'), ('dev',), epochs=2.0)
  if cfg.name in GLUE:
    return glue_task(cfg.name)
  return {'builtin': BUILTIN, 'builtin_topic': BUILTIN_TOPIC}.get(cfg.name)


def load(cfg, pretraining=None, log=print) -> tuple[Task, dict[str, list[Example]]]:
  """(task, {split: examples}) from `config.task`; `pretraining` is the init run's config.

  `task.max_train_examples` keeps a fixed random subset of the train split; test splits whose
  every example is labelled are scored (`Task.test_splits`).
  """
  task, splits = _load(cfg, pretraining, log)
  if not cfg.name.startswith('builtin'):  # the built-in tasks draw that many examples themselves
    splits = sample_train(splits, cfg.max_train_examples, log)
  return with_test_splits(task, splits), splits


def _load(cfg, pretraining, log) -> tuple[Task, dict[str, list[Example]]]:
  if cfg.name in SQUAD:
    return load_squad(cfg)
  if cfg.name == 'builtin':
    seed = pretraining.seed if pretraining is not None else 0
    fraction = pretraining.data.eval_fraction if pretraining is not None else 0.05
    return BUILTIN, load_builtin(seed, fraction, cfg.max_train_examples or 4000)
  if cfg.name == 'builtin_topic':
    seed = pretraining.seed if pretraining is not None else 0
    return BUILTIN_TOPIC, load_builtin_topic(seed, cfg.max_train_examples or 4000)
  if cfg.name in GLUE and cfg.glue_dir:
    return glue_task(cfg.name), load_glue_tsv(cfg.glue_dir, cfg.name, log)
  if cfg.name in GLUE and not cfg.train:
    return glue_task(cfg.name), load_glue(cfg.name, cfg.tfds_data_dir or None)
  if not cfg.train:
    raise ValueError(f'task.name is {cfg.name!r}, not a GLUE task ({", ".join(GLUE)}), squad1, '
                     'squad2, builtin or builtin_topic; for your own data set task.train (and task.dev, '
                     'task.test) to .csv/.tsv/.jsonl (or CoNLL) files')
  return kinds.get(cfg.kind).load(cfg, log)
