"""Your own labelled files: .csv / .tsv (with or without a header row) and .jsonl, read as meant.

    read_splits(cfg.task)  -> {split: [Example]} of task.train / dev / test
    class_names(splits)    -> the train split's classes, checked against the other splits

Labels are read as their writer meant them (a byte-order mark and surrounding whitespace read away,
1, "1" and 1.0 one class); a missing column, an empty label, a label that is not a number where
one is needed, a tab-separated file named .csv, rows with too many fields are refused in one
sentence naming the file, the rows and the fix.
"""

import csv
import io
import json
import os

import numpy as np

from electra_jax.finetune.inputs.tasks import Example
from electra_jax.storage import fs


def _unique_keys(path: str, n: int):
  """json.loads' object_pairs_hook: a key given twice in one line is refused (which would
  count?)."""
  def hook(pairs):
    keys = [k for k, _ in pairs]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
      raise ValueError(f'line {n} of {path} gives the key {twice[0]!r} twice; keep one')
    return dict(pairs)
  return hook


def _jsonl_rows(path: str, text: str):
  rows, line_numbers = [], []
  for n, line in enumerate(text.splitlines(), start=1):
    if line.strip():
      try:
        rows.append(json.loads(line, object_pairs_hook=_unique_keys(path, n)))
      except json.JSONDecodeError as e:
        raise ValueError(f'line {n} of {path} is not JSON ({e.msg}); each line must be one '
                         'object') from None
      if not isinstance(rows[-1], dict):
        raise ValueError(f'line {n} of {path} is not a JSON object ({{"text": ..., "label": '
                         '...}}); each line must be one')
      line_numbers.append(n)
  return rows, line_numbers


def _records(path: str, text: str, delimiter: str) -> list[tuple[list, int, int]]:
  """(fields, first line, last line) of each non-empty record of a .csv/.tsv text. A quoted field
  that runs to the end of the file is refused naming the line its quote opened."""
  csv.field_size_limit(2**31 - 1)  # a long text is data, not an error (the default: 131,072)
  reader = csv.reader(io.StringIO(text, newline=''), delimiter=delimiter, strict=True)
  out: list[tuple[list, int, int]] = []
  last = 0
  while True:
    try:
      fields = next(reader)
    except StopIteration:
      return out
    except csv.Error as e:
      if 'end of data' in str(e) or 'EOF' in str(e):
        raise ValueError(f'line {last + 1} of {path} opens a quoted field (") that is never '
                         'closed; close it, or double each quote inside a quoted field ("")'
                         ) from None
      if reader.line_num > last + 1:
        raise ValueError(f'lines {last + 1}-{reader.line_num} of {path} are not one row: a quote '
                         f'(") opened in line {last + 1} closes only in line {reader.line_num}, '
                         f'mid-field ({e}); close the quote where its field ends, or double each '
                         'quote inside a quoted field ("")') from None
      raise ValueError(f'line {reader.line_num} of {path} is not '
                       f'{"tab" if delimiter == chr(9) else "comma"}-separated text as written '
                       f'({e}); a field holding the delimiter or a quote must be quoted, with its '
                       'quotes doubled ("")') from None
    if fields:
      out.append((fields, last + 1, reader.line_num))
    last = reader.line_num


def _merged_rows(path: str, records: list, width: int, label_at: int | None, delimiter: str):
  """Refuses a record whose quoted field swallowed the rows after it (a quote opened and closed
  only rows later): a field running over several lines whose later lines look like rows of the
  file (a tab in a .tsv; in a .csv, as many fields as the header and a label of other rows)."""
  labels = {f[label_at].strip() for f, a, b in records if a == b and label_at is not None
            and label_at < len(f)}
  for fields, first, last in records:
    if first == last:
      continue
    for field in fields:
      for k, line in enumerate(field.split('\n')[1:], start=1):
        cells = next(csv.reader([line], delimiter=delimiter), [])
        looks = (delimiter == '\t' and '\t' in line) or (
            len(cells) == width and label_at is not None and cells[label_at].strip() in labels)
        if looks:
          raise ValueError(f'lines {first}-{last} of {path} are one row: a quote (") opened in '
                           'line '
                           f'{first} closes only in line {last}, and line {first + k} inside it '
                           'looks like a row of its own; close the quote where the field ends, or '
                           'double each quote inside a quoted field ("")')


def _split_header(path: str, records: list, header: bool, label):
  """(column names, data records, width, the label's position or None) of a table's records."""
  if header:
    columns, records = (records[0][0] if records else []), records[1:]
    twice = sorted({c for c in columns if columns.count(c) > 1})
    if twice:
      where = [i + 1 for i, c in enumerate(columns) if c == twice[0]]
      raise ValueError(f'the header of {path} names the column {twice[0]!r} more than once '
                       f'(columns {", ".join(map(str, where))}); give each column its own name')
    return columns, records, len(columns), columns.index(label) if label in columns else None
  width = max((len(f) for f, _, _ in records), default=0)
  label_at = int(label) if str(label).isdigit() and int(label) < width else None
  return list(range(width)), records, width, label_at


def _table(path: str, text: str, delimiter: str, header: bool, label):
  """(column names, data records) of a .csv/.tsv text read with quoting ("...")."""
  columns, records, width, label_at = _split_header(path, _records(path, text, delimiter),
                                                    header, label)
  _merged_rows(path, records, width, label_at, delimiter)
  return columns, records


def _plain_table(path: str, text: str, header: bool, label):
  """(column names, data records) of a .tsv text whose quotes are text (no quoting: GLUE's and
  most tools' tab-separated files), or None where its lines differ in their number of fields."""
  lines = [(line.rstrip('\r').split('\t'), n, n)
           for n, line in enumerate(text.split('\n'), start=1) if line.rstrip('\r')]
  if not lines or any(len(f) != len(lines[0][0]) for f, _, _ in lines):
    return None
  return _split_header(path, lines, header, label)[:2]


def _read_rows(path: str, ext: str, header: bool, label=None):
  """(rows as dicts, the column names, the header row's cells or None, the line number of each
  row or None) of a .jsonl file, or a .csv/.tsv file with or without a header row. A .tsv file is
  read with quoting unless that fails (a quote that opens and does not close as a field), and its
  lines all split into as many fields: then its quotes are text."""
  text = fs.read_user_text(path)
  if ext == '.jsonl':
    rows, line_numbers = _jsonl_rows(path, text)
    columns = sorted(set().union(*(r.keys() for r in rows))) if rows else []
    return rows, columns, None, line_numbers
  delimiter = '\t' if ext == '.tsv' else ','
  try:
    columns, records = _table(path, text, delimiter, header, label)
  except ValueError:
    plain = _plain_table(path, text, header, label) if ext == '.tsv' else None
    if plain is None:
      raise
    columns, records = plain
  width = len(columns)
  rows = []
  for fields, _, _ in records:
    row = dict(zip(columns, fields))
    if header:
      row.update({c: None for c in columns[len(fields):]})
      if len(fields) > width:
        row[None] = fields[width:]
    rows.append(row)
  return rows, columns, columns if header else None, None


def table_rows(path: str, header: bool = True) -> tuple[list[dict], list]:
  """(each row as {column: value}, the columns in the file's order) of a .csv, .tsv or .jsonl
  file, as read_table reads it (the same rows, in order): what a prediction keeps of its input."""
  ext = os.path.splitext(path)[1].lower()
  rows, columns = _read_rows(path, ext, header)[:2]
  if ext == '.jsonl':  # (in the order the keys come)
    columns = list(dict.fromkeys(k for r in rows for k in r))
  return rows, list(columns)


def column_names(path: str) -> list:
  """The columns a .csv / .tsv file's header row names, or the keys of a .jsonl file's objects."""
  ext = os.path.splitext(path)[1].lower()
  if not fs.isfile(path) or ext not in ('.csv', '.tsv', '.jsonl'):
    return []  # (read_table names the problem)
  return list(_read_rows(path, ext, True)[1])


def read_table(path: str, text_a: str | int | None, text_b: str | int | None,
               label: str | int | None, *, labelled: bool | None = True,
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
    raise FileNotFoundError(f'the data file {path} '
                            f'{"is a folder" if fs.isdir(path) else "does not exist"}; give the '
                            'path of a .csv, .tsv or .jsonl file')
  ext = os.path.splitext(path)[1].lower()
  if ext not in ('.csv', '.tsv', '.jsonl'):
    raise ValueError(f'the data file {path} is not .csv, .tsv or .jsonl; convert it to one of them')
  rows, columns, first, line_numbers = _read_rows(path, ext, header, label)
  line_numbers = line_numbers or list(range(1, len(rows) + 1))
  if not rows:
    raise ValueError(f'the data file {path} holds no rows; give a file with ' +
                     ('a header row and data' if header else 'data'))
  if not header and ext != '.jsonl':
    text_a, text_b, label = (_position(path, what, value, len(columns)) for what, value in
                             (('text_a', text_a), ('text_b', text_b), ('label', label)))
    choices = tuple(_position(path, 'choices', value, len(columns)) for value in choices)
  _check_columns(text_a, text_b, label, choices)
  if ext == '.jsonl':
    _check_types(path, rows, line_numbers, (text_a, text_b, *choices), label)
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
      if ext == '.csv' and len(first) == 1 and ';' in first[0]:
        raise ValueError(f'the data file {path} looks semicolon-separated (its first row is '
                         f'{first[0][:100]!r}); save it comma-separated, or tab-separated as .tsv')
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
      fix = ('give each line its text' if ext == '.jsonl' else
             'a field that holds the delimiter must be quoted')
      several = len(absent) > 1
      null = f', or {"have" if several else "has"} it null' if ext == '.jsonl' else ''
      raise ValueError(f'{_rows(path, absent, line_numbers)} {"lack" if several else "lacks"} '
                       f'the field {column!r}{null} ({len(absent)} of {len(rows)} rows); fix '
                       f'those rows ({fix})')
  _check_texts(path, rows, line_numbers, (text_a, text_b), choices, log)
  labelled = labelled and label not in (None, '')
  names = (labels(path, [r.get(label) for r in rows], numeric, line_numbers, log, test=test)
           if labelled else None)
  second = lambda r: (tuple(str(r[c]) for c in choices) if choices else
                      str(r[text_b]) if text_b not in (None, '') else None)
  return [Example(str(r[text_a]), second(r), names[i] if names is not None else None)
          for i, r in enumerate(rows)]


def _check_columns(text_a, text_b, label, choices: tuple):
  """Refuses a label column that holds a text, or a second text (or candidate) in text_a's."""
  if label not in (None, '') and label in (text_a, text_b, *choices):
    raise ValueError(f'task.label names the column {label!r}, which also holds the text; give '
                     'the column of the labels')
  if text_a in (text_b, *choices):
    raise ValueError(f'task.{"text_b" if text_a == text_b else "choices"} names the column '
                     f'{text_a!r}, as task.text_a does; give the other text\'s own column'
                     + ("" if choices else ", or '' for single texts"))


def _check_texts(path: str, rows: list, line_numbers: list, texts: tuple, choices: tuple, log):
  """An empty candidate (multiple choice) is refused naming its rows: a candidate of no text is
  a cell left empty or shifted. An empty text is kept ([CLS] [SEP] alone) and named in a
  warning."""
  for column in choices:
    empty = [i for i, r in enumerate(rows) if not str(r.get(column, '')).strip()]
    if empty:
      raise ValueError(f'{_rows(path, empty, line_numbers)} {"have" if len(empty) > 1 else "has"} '
                       f'an empty candidate in the column {column!r}; fill it in, or remove the '
                       'row')
  for column in texts:
    empty = [i for i, r in enumerate(rows)
             if column not in (None, '') and not str(r.get(column, '')).strip()]
    if empty:
      log(f'warning: {_rows(path, empty, line_numbers)} {"have" if len(empty) > 1 else "has"} no '
          f'text in the column {column!r} ({len(empty)} of {len(rows)} rows); used as they are')


def _check_types(path: str, rows: list, line_numbers: list, texts: tuple, label):
  """A JSON lines file's texts are strings (or numbers) and its labels one value: a list, an
  object or (for a text) true/false is refused naming the line, not read as its Python text."""
  for column, want in [(c, 'a text') for c in texts if c not in (None, '')] + [
      (label, 'one class or number')]:
    for i, r in enumerate(rows):
      value = r.get(column)
      what = ('a list' if isinstance(value, list) else 'an object' if isinstance(value, dict)
              else 'the boolean' if isinstance(value, bool) and want == 'a text' else None)
      if what:
        raise ValueError(f'line {line_numbers[i]} of {path} has {what} {json.dumps(value)[:60]} '
                         f'as its {column!r}; give {want} there')


def _rows(path: str, indices: list[int], line_numbers: list[int],
          values: list | None = None) -> str:
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
  by_case: dict[str, list[str]] = {}
  for name in set(names):
    by_case.setdefault(name.lower(), []).append(name)
  clashes = [sorted(v) for v in by_case.values() if len(v) > 1]
  if clashes:
    log(f'warning: {path}: labels that differ only in case are different classes: '
        + '; '.join(' / '.join(map(repr, c)) for c in sorted(clashes)[:5])
        + '; write them alike if they mean the same')
  return names


def _position(path: str, what: str, value: str | int | None, width: int) -> int | None:
  """task.text_a / text_b / label of a file without a header: a column's position (0 first)."""
  if value == '' and what == 'text_b':
    return None
  if not str(value).isdigit():
    raise ValueError(f'task.header is False, so task.{what} must be a column position (0, 1, ... '
                     f'of the {width} in {path}), not {value!r}; e.g. --config.task.{what}=1')
  return int(str(value))


def read_splits(cfg, numeric: bool = False, choices: tuple = (), log=print) -> dict:
  """{split: examples} of your own files task.train / dev / test (see `read_table`)."""
  return {split: read_table(getattr(cfg, split), cfg.text_a, cfg.text_b, cfg.label,
                            labelled=None if split == 'test' else True,
                            header=cfg.header, numeric=numeric, choices=choices,
                            log=log)
          for split in ('train', 'dev', 'test') if getattr(cfg, split)}


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
