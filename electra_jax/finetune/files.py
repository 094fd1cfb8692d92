"""Your own labelled files: .csv / .tsv (with or without a header row) and .jsonl, read as meant.

    read_splits(cfg.task)  -> {split: [Example]} of task.train / dev / test
    class_names(splits)    -> the train split's classes, checked against the other splits

Labels are read as their writer meant them (a byte-order mark and surrounding whitespace read away,
1, "1" and 1.0 one class); a missing column, an empty label, a label that is not a number where
one is needed, a tab-separated file named .csv, rows with too many fields are refused in one
sentence naming the file, the rows and the fix.
"""

import csv
import json
import os

import numpy as np

from electra_jax import fs
from electra_jax.finetune.tasks import Example


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


def _rows(path: str, indices: list[int], line_numbers: list[int], values: list | None = None) -> str:
  """'data rows 3, 7 of f.csv' / 'line 4 of f.jsonl' for rows at `indices` (with `values`: each
  row's value after it, 'data rows 3 ('nan'), 7 ('inf') of f.csv')."""
  word = 'line' if path.endswith('.jsonl') else 'data row'
  return (f'{word}{"s" if len(indices) > 1 else ""} '
          + ', '.join(str(line_numbers[i]) + (f' ({values[i]!r})' if values else '')
                      for i in indices[:5])
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
    raise ValueError(f'{_rows(path, bad, line_numbers, cells)} '
                     f'{"have labels that are" if len(bad) > 1 else "has a label that is"} not a '
                     'finite number; ' + ('a regression task needs numeric labels' if numeric else
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


def read_splits(cfg, numeric: bool = False, choices: tuple = (), log=print) -> dict:
  """{split: examples} of your own files task.train / dev / test (see `read_table`)."""
  return {split: read_table(cfg[split], cfg.text_a, cfg.text_b, cfg.label,
                            labelled=None if split == 'test' else True,
                            header=cfg.header, numeric=numeric, choices=choices,
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
