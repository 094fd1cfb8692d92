"""The files of predictions, as launch/predict.py writes them from a workdir and
launch/predict_onnx.py from an ONNX folder: where they go, what is refused before any work, and a
table of the input's rows with the prediction and each class's probability. Nothing here imports
JAX, PyTorch or TensorFlow.
"""

import csv
import io
import os


from electra_jax import UserError
from electra_jax.finetune.inputs import files
from electra_jax.storage import fs

TABLES = ('.tsv', '.csv', '.jsonl')  # what a 'table' kind's predictions are written as
WRITTEN = {'conll': ('.txt',), 'json': ('.json',), 'table': TABLES}


def output_path(workdir: str, input_path: str, output: str | None, fmt: str) -> str:
  """`output`, or <workdir>/predictions/<the input's name> in the kind's format."""
  stem, ext = os.path.splitext(fs.basename(input_path))
  if output:
    if os.path.splitext(output)[1].lower() not in WRITTEN[fmt]:
      raise UserError(f'--output={output}: these predictions are written as '
                      f'{" or ".join(WRITTEN[fmt])}; name the file so')
    return output
  ext = ext.lower() if ext.lower() in WRITTEN[fmt] else WRITTEN[fmt][0]
  return fs.join(workdir, 'predictions', f'{stem}{ext}')


def check_output(path: str, input_path: str, overwrite: bool):
  """Refuses (UserError), before any work, an output that is the input file (even with
  --overwrite), that exists (without it), or whose folder cannot be made or written to."""
  same = (fs.remote(path) and path == input_path) or (
      not fs.remote(path) and fs.exists(path) and fs.exists(input_path) and
      os.path.samefile(path, input_path))
  if same:
    raise UserError(f'--output {path} is the input file, and its predictions would replace it; '
                    'give another --output')
  if fs.exists(path) and not overwrite:
    raise UserError(f'{path} exists (earlier predictions?); give another --output, or '
                    '--overwrite to replace it')
  if fs.isdir(path):
    raise UserError(f'--output {path} is a folder; give a file name in it')
  folder = fs.dirname(path) or '.'
  if not fs.remote(path):
    above = os.path.abspath(folder)
    while not os.path.exists(above):
      above = os.path.dirname(above)
    if not os.path.isdir(above):
      raise UserError(f'--output {path}: {above} is a file, not a folder; give an output in a '
                      'folder')
  try:
    fs.makedirs(folder, exist_ok=True)
    probe = fs.join(folder, f'.write_test.{os.getpid()}')
    fs.write_atomic(probe, 'ok')
    fs.remove(probe)
  except OSError as e:
    raise UserError(f'cannot write the predictions into {folder} ({e.strerror or e}); give an '
                    '--output in a folder you can write to') from None


OWN = ('index', 'prediction', 'probabilities')  # the columns a prediction adds


def input_columns(input_path: str, header: bool, count: int) -> list[dict]:
  """Each input row's columns, in the file's order (positions by number for a file without a
  header row), a name the predictions use too given as `input.<name>`."""
  rows, columns = files.table_rows(input_path, header)
  assert len(rows) == count, (len(rows), count)  # (read_table reads every row)
  name = lambda c: (f'input.{c}' if str(c) in OWN or str(c).startswith('p(') else str(c))
  return [{name(c): r.get(c) for c in columns} for r in rows]


def table_text(path: str, rows: list[dict], input_path: str, header: bool) -> str:
  """A table (.tsv / .csv / .jsonl, by `path`'s name) of index, every column of the input (its
  texts, an id, ...), the prediction and each output's probability."""
  texts = input_columns(input_path, header, len(rows))
  if path.lower().endswith('.jsonl'):
    return ''.join(fs.json_text({'index': i, **t, **r}, ensure_ascii=False) + '\n'
                   for i, (t, r) in enumerate(zip(texts, rows)))
  names = list(rows[0].get('probabilities', {})) if rows else []
  columns = ['index', *texts[0], 'prediction', *(f'p({n})' for n in names)] if rows else []
  buffer = io.StringIO()
  writer = csv.writer(buffer, delimiter='\t' if path.lower().endswith('.tsv') else ',',
                      lineterminator='\n')
  writer.writerow(columns)
  for i, (t, r) in enumerate(zip(texts, rows)):
    writer.writerow([i, *t.values(), r['prediction'],
                     *(f'{r["probabilities"][n]:.6f}' for n in names)])
  return buffer.getvalue()


def check_columns(path: str, t):
  """Refuses a table without the columns the fine-tuning read its texts from (`t`: their names,
  as the task config names them; the label's may be absent: nothing is scored then)."""
  if not t.header and not path.lower().endswith('.jsonl'):
    return  # (columns by position: read_table checks them)
  names = files.column_names(path)
  roles = [('text_a', t.text_a), ('text_b', t.text_b)] + [
      ('choices', c.strip()) for c in str(t.choices or '').split(',') if c.strip()]
  missing = [(role, c) for role, c in roles if c not in (None, '') and c not in names]
  if names and missing:
    role, column = missing[0]
    raise UserError(
        f'{path} has no column {column!r}, which the fine-tuning read its {role} from (the file\'s '
        f'columns: {", ".join(map(str, names))[:200]}); name the columns as in its training files: '
        + ', '.join(f'{c} ({r})' for r, c in roles + [('label, where known', t.label)]
                    if c not in (None, '')))
