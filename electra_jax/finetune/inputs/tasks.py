"""Labelled text for fine-tuning: GLUE (from TFDS or its TSV folders), SQuAD, the built-in tasks
that need no download, and your own files (read by files.py through the task's kind).

Every source becomes lists of `Example(text_a, text_b, label)` per split; a `Task` says what the
labels are and how the task is scored.
"""

import csv
import dataclasses
import hashlib
import json
import os
from typing import Any

import numpy as np

from electra_jax.data import corpus
from electra_jax.data import records
from electra_jax.finetune.inputs import squad
from electra_jax.storage import fs
from electra_jax.data import tfds as tfds_lib
from electra_jax.storage import tf_import


@dataclasses.dataclass(frozen=True)
class Example:
  text_a: Any  # the text; tagging: the sentence's words (a tuple)
  text_b: Any  # the second text or None; multiple choice: the candidates (a tuple)
  label: Any  # a class name, a number (regression), the words' BIOES tags or the right candidate's
  #             index; None if unlabelled
  idx: int | None = None  # the row's id in its source (GLUE's test index, for leaderboard files)


def fingerprint(examples: list) -> str:
  """The identity of a split's examples (Examples, or SQuAD's Questions: their texts and labels,
  in order): what a fine-tuning's checkpoint was trained on."""
  text = json.dumps([dataclasses.astuple(e) for e in examples], default=str)
  return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Task:
  name: str
  kind: str  # a name in finetune/kinds/registry.py's table: 'classification', 'regression', ...
  labels: tuple  # class names in output order (classification)
  metrics: tuple  # scores.SCORES names; the first is the task's headline score
  dev_splits: tuple = ('dev',)  # evaluated splits (MNLI: matched and mismatched); the first
  #                               chooses the best checkpoint
  swap_pairs: bool = False  # train on (a, b) and (b, a) (MRPC, STS-B)
  label_scale: float = 1.0  # regression: targets are (label - label_offset) / label_scale, in
  #                           [0, 1] (STS-B: 5 and 0; your own files: their train range)
  epochs: float = 3.0  # the paper's epochs for this task
  test_splits: tuple = ()  # test splits whose every example is labelled: scored at the end only
  label_offset: float = 0.0
  tag_scheme: str = ''  # tagging: the train file's scheme (IOB1, IOB2, BIOES), which predictions
  #                       and exports speak


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
              swap_pairs=g.swap_pairs, label_scale=5.0 if name == 'stsb' else 1.0,
              epochs=g.epochs)


_TFDS_HINT = ('point --config.task.tfds_data_dir at it, or give GLUE\'s own .tsv files with '
              '--config.task.glue_dir')


def load_glue(name: str, data_dir: str | None = None) -> dict[str, list[Example]]:
  """The splits of GLUE task `name` from TFDS (`glue/<name>`); test labels are None."""
  tfds = tf_import.datasets()
  g = GLUE[name]
  out = {}
  for ours, theirs in g.splits.items():
    examples = []
    dataset = tfds_lib.load(f'glue/{name}', theirs, data_dir, _TFDS_HINT)
    for row in tfds.as_numpy(dataset):
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
      label: str | float | None = None
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


def few_shot(train: list, labels: tuple, shots: int, seed: int) -> list:
  """`shots` train examples of each class in `labels` (all of a class that has fewer), drawn
  from (seed): each seed of a few-shot fine-tuning its own draw, in the file's order."""
  rng = np.random.default_rng([seed, shots])
  keep: list[int] = []
  for label in labels:
    of_class = [i for i, e in enumerate(train) if str(e.label) == label]
    keep += rng.permutation(of_class)[:shots].tolist()
  return [train[i] for i in sorted(keep)]


def with_test_splits(task: Task, splits: dict) -> Task:
  """The task scoring each test split whose every example has a label."""
  labelled = tuple(s for s in splits if s.startswith('test') and splits[s] and
                   all(e.label is not None for e in splits[s]))
  return dataclasses.replace(task, test_splits=labelled)


BUILTIN = Task('builtin', 'classification', ('random', 'next'), ('accuracy',), ('dev',))


def load_builtin(seed: int, eval_fraction: float, max_train: int = 4000
                 ) -> dict[str, list[Example]]:
  """Sentence coherence on the built-in corpus: does sentence b follow sentence a in its document
  ('next'), or is it a sentence of another document ('random')? Half of each.

  Dev and test pairs come only from the documents the pre-training on the built-in corpus held out
  (the same hash of (seed, document index) as the records), split between them by a second hash;
  train pairs come from the other documents. Everything is a function of `seed`.
  """
  docs = corpus.builtin_documents()
  pools: dict[str, list] = {'train': [], 'dev': [], 'test': []}
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
  area = {module: label for label, modules in TOPICS.items() for module in modules}
  # passage -> its area (docstrings repeat: each passage is kept once, in one split)
  seen: dict[str, str] = {}
  for module, sentences in corpus.builtin_module_documents():
    if module in area:
      for j in range(0, len(sentences) - 1, 2):
        seen.setdefault(' '.join(sentences[j:j + 2]), area[module])
  passages = {label: [t for t, a in seen.items() if a == label] for label in TOPICS}
  out: dict[str, list] = {'train': [], 'dev': [], 'test': []}
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


def overlap_notes(splits: dict) -> list[str]:
  """A warning for each scored split whose examples' texts are mostly (half or more) in the
  train split too: its score then measures memory (the same file given twice, say)."""
  key = lambda e: ((e.question, e.context) if isinstance(e, squad.Question) else
                   (str(e.text_a), str(e.text_b)))
  seen = {key(e) for e in splits.get('train', ())}
  out = []
  for split, examples in splits.items():
    if split == 'train' or not examples:
      continue
    share = sum(key(e) in seen for e in examples) / len(examples)
    if share >= 0.5:
      out.append(f'warning: {100 * share:.0f}% of the {split} examples are in the train data '
                 f'too: the {split} score measures what was seen (is task.{split} the train '
                 'file?)')
  return out


SQUAD = {'squad1': 'v1.1', 'squad2': 'v2.0'}


def load_squad(cfg) -> tuple[Task, dict[str, list]]:
  """SQuAD questions from the official JSON files (task.train / task.dev) or TFDS."""
  task = named_task(cfg)
  assert task is not None, 'load_squad is the loader of the named SQuAD tasks'
  if cfg.train:
    return task, {s: squad.read_json(getattr(cfg, s), SQUAD[cfg.name]) for s in ('train', 'dev')
                  if getattr(cfg, s)}
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
