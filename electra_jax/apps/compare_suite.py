"""The comparison on a real-text suite (benchmarks/build_tasks.py), task by task.

    suite.json -> per task: pre-train each run on the task's own train texts (records and
    vocabulary of their own) -> fine-tune on its files beside random weights and the TF-IDF
    baseline (compare.compare, under <workdir>/<task>) -> one table over the tasks: suite.md
"""

import copy
import json

import ml_collections

from electra_jax import UserError
from electra_jax.apps import compare as compare_lib
from electra_jax.storage import fs


def suite_tasks(suite_dir: str, ft_base: ml_collections.ConfigDict, only=()) -> list[tuple]:
  """(task name, its pre-training corpus, its fine-tuning config) per task of the suite that
  benchmarks/build_tasks.py wrote to `suite_dir`, in the suite's order; `only`: those tasks
  alone."""
  path = fs.join(suite_dir, 'suite.json')
  if not fs.isfile(path):
    raise UserError(f'{suite_dir} holds no suite.json; build the suite with python '
                    f'benchmarks/build_tasks.py --out={suite_dir}')
  described = fs.read_json(path, f'build the suite again: python -m benchmarks.build_tasks '
                                 f'--out={suite_dir}')
  tasks = described.get('tasks') if isinstance(described, dict) else None
  if not isinstance(tasks, list) or not all(
      isinstance(t, dict) and isinstance(t.get('name'), str) and t['name'] for t in tasks):
    raise UserError(f'{path} is not a suite\'s description (a "tasks" list whose entries each '
                    f'have a "name"); build the suite again: python -m benchmarks.build_tasks '
                    f'--out={suite_dir}')
  names = [t['name'] for t in tasks]
  if unknown := [n for n in only if n not in names]:
    raise UserError(f'the suite in {suite_dir} has no task {", ".join(map(repr, unknown))}; its '
                    f'tasks are {", ".join(names)}')
  out = []
  for t in tasks:
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
  c = copy.deepcopy(config)
  c.data.update(corpus=corpus, records='')
  return c


def compare_suite(config, suite_dir: str, ft_base, workdir: str, names=compare_lib.DEFAULT_RUNS,
                  electra_steps: int = 2000, log=print, tasks=(),
                  variants: dict | None = None) -> dict:
  """`compare` on every task of a suite (`tasks`: those alone), each run pre-trained on the task's
  own train texts, under `workdir/<task>`; then one table over the tasks (suite.md, suite.json).
  Returns {task: rows}."""
  tables = {}
  for name, corpus, ft in suite_tasks(suite_dir, ft_base, tasks):
    log(f'== {name}: pre-training on {corpus}')
    tables[name] = compare_lib.compare(
        suite_config(config, corpus), {name: ft}, fs.join(workdir, name), names, electra_steps,
        log=lambda line, name=name: log(f'[{name}] {line}'),
        variants={v: suite_config(c, corpus) for v, c in (variants or {}).items()})
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
  summary = suite_summary(tables)
  fs.write_atomic(fs.join(workdir, 'suite.md'),
                  f'# The suite at the FLOPs of {electra_steps:,} ELECTRA steps (median of '
                  f'seeds, dev / test accuracy)\n\n{table}\n\n'
                  + ''.join(f'- {line}\n' for line in summary))
  fs.write_atomic(fs.join(workdir, 'suite.json'), json.dumps(tables, indent=1))
  log(table)
  for line in summary:
    log(line)
  return tables


def suite_summary(tables: dict) -> list[str]:
  """Per pre-trained run, over every task and scored split of the suite: on how many splits its
  median is at least random weights', and how many of the pairings of one of its seeds with one
  of random weights' it wins (compare.seed_pairs; half is what two equal starts give)."""
  out = []
  runs = [r['run'] for r in next(iter(tables.values()))
          if r['run'] not in ('random init', 'TF-IDF baseline')]
  for run in runs:  # every task of a suite ran the same runs beside random init
    level = splits = pairs = 0
    won = 0.0  # (a tied pairing counts half)
    for name, rows in tables.items():
      by_run = {r['run']: r['downstream'][name] for r in rows}
      ours, theirs = by_run[run], by_run['random init']
      for key, seeds in (('median', 'seeds'), ('test_median', 'test_seeds')):
        if key in ours:  # a split without labels has no test median
          splits += 1
          level += ours[key] >= theirs[key]
          w, n = compare_lib.seed_pairs(ours[seeds], theirs[seeds])
          won, pairs = won + w, pairs + n
    if splits:
      out.append(f'{run}: median at or above random init on {level} of {splits} splits; seed '
                 f'pairs won against random init {won:g} of {pairs} (ties count half; two runs '
                 'of one recipe win half on average)')
  return out
