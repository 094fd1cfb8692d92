"""The comparison on a real-text suite (launch/build_tasks.py), task by task.

    suite.json -> per task: pre-train each run on the task's own train texts (records and
    vocabulary of their own) -> fine-tune on its files beside random weights and the TF-IDF
    baseline (compare.compare, under <workdir>/<task>) -> one table over the tasks: suite.md
"""

import json

import ml_collections

from electra_jax import UserError
from electra_jax import fs
from electra_jax.tools import compare as compare_lib


def suite_tasks(suite_dir: str, ft_base: ml_collections.ConfigDict, only=()) -> list[tuple]:
  """(task name, its pre-training corpus, its fine-tuning config) per task of the suite that
  launch/build_tasks.py wrote to `suite_dir`, in the suite's order; `only`: those tasks alone."""
  path = fs.join(suite_dir, 'suite.json')
  if not fs.isfile(path):
    raise UserError(f'{suite_dir} holds no suite.json; build the suite with python '
                    f'launch/build_tasks.py --out={suite_dir}')
  described = fs.read_json(path, f'build the suite again: python launch/build_tasks.py '
                                 f'--out={suite_dir}')
  names = [t['name'] for t in described['tasks']]
  if unknown := [n for n in only if n not in names]:
    raise UserError(f'the suite in {suite_dir} has no task {", ".join(map(repr, unknown))}; its '
                    f'tasks are {", ".join(names)}')
  out = []
  for t in described['tasks']:
    if only and t['name'] not in only:
      continue
    folder = fs.join(suite_dir, t['name'])  # where the suite is now, wherever it was built
    ft = ml_collections.ConfigDict(ft_base.to_dict())
    ft.task.update(name='own', kind='classification', header=True, text_a='text', text_b='',
                   label='label', **{s: fs.join(folder, f'{s}.csv') for s in ('train', 'dev',
                                                                               'test')})
    out.append((t['name'], fs.join(folder, 'corpus.txt'), ft))
  return out


def suite_config(config: ml_collections.ConfigDict, corpus: str) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict(config.to_dict())
  c.data.update(corpus=corpus, records='')
  return c


def compare_suite(config, suite_dir: str, ft_base, workdir: str, names=compare_lib.DEFAULT_RUNS,
                  electra_steps: int = 2000, log=print, tasks=()) -> dict:
  """`compare` on every task of a suite (`tasks`: those alone), each run pre-trained on the task's
  own train texts, under `workdir/<task>`; then one table over the tasks (suite.md, suite.json).
  Returns {task: rows}."""
  tables = {}
  for name, corpus, ft in suite_tasks(suite_dir, ft_base, tasks):
    log(f'== {name}: pre-training on {corpus}')
    tables[name] = compare_lib.compare(
        suite_config(config, corpus), {name: ft}, fs.join(workdir, name), names, electra_steps,
        log=lambda line, name=name: log(f'[{name}] {line}'))
  lines = ['| run | ' + ' | '.join(f'{n} (dev / test)' for n in tables) + ' |',
           '|' + '---|' * (len(tables) + 1)]
  runs = [r['run'] for r in next(iter(tables.values()))]
  for run in runs:
    cells = []
    for name, rows in tables.items():
      d = next((r['downstream'][name] for r in rows if r['run'] == run), None)
      cells.append('-' if d is None else f'{100 * d["median"]:.2f}' + (
          f' / {100 * d["test_median"]:.2f}' if 'test_median' in d else ''))
    lines.append(f'| {run} | ' + ' | '.join(cells) + ' |')
  table = '\n'.join(lines)
  fs.write_atomic(fs.join(workdir, 'suite.md'),
                  f'# The suite at the FLOPs of {electra_steps:,} ELECTRA steps (median of '
                  f'seeds, dev / test accuracy)\n\n{table}\n')
  fs.write_atomic(fs.join(workdir, 'suite.json'), json.dumps(tables, indent=1))
  log(table)
  return tables
