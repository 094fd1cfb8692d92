"""The results of K fine-tunings: a markdown table of the seeds, their median and the TF-IDF
baseline, written as results.md and results.json in the workdir; the panels of their curves.
"""

import statistics

from electra_jax.finetune import baseline as baseline_lib
from electra_jax.storage import fs


def scored(task) -> tuple:
  """The splits a fine-tuning is scored on: the dev splits, then the labelled test splits."""
  return task.dev_splits + task.test_splits


def panels(task) -> list[tuple[str, str]]:
  """The loss curves' panels of a fine-tuning: (metric, title)."""
  dev = task.dev_splits[0] if task.dev_splits else None  # (without one: train's curves only)
  return [('loss', 'loss'), ('accuracy', f'accuracy (train{" and dev" if dev else ""})'),
          ('learning_rate', 'learning rate')] + [
              (m, f'{m} ({dev})') for m in task.metrics if m != 'accuracy' and dev]


def table_of(task, results: list[dict], base: dict | None = None) -> tuple[str, dict]:
  """(markdown table of the seeds, their median and the TF-IDF baseline `base`; the medians)."""
  splits = [s for s in scored(task) if all(s in r for r in results)]
  columns = [(s, m) for s in splits for m in task.metrics]
  median = {f'{s}/{m}': statistics.median(r[s][m] for r in results) for s, m in columns}
  head = '| seed | ' + ' | '.join(f'{s} {m}' for s, m in columns) + ' |'
  lines = [head, '|' + '---|' * (len(columns) + 1)]
  for r in results:
    lines.append(f'| {r["seed"]} | ' + ' | '.join(f'{100 * r[s][m]:.2f}' for s, m in columns)
                 + ' |')
  lines.append('| **median** | ' + ' | '.join(f'**{100 * median[f"{s}/{m}"]:.2f}**'
                                                for s, m in columns) + ' |')
  if base:
    lines.append('| TF-IDF baseline | ' + ' | '.join(
        f'{100 * base[s][m]:.2f}' if s in base else '-' for s, m in columns) + ' |')
  return '\n'.join(lines) + '\n', median


def write(task, results, init: str, workdir: str, log, base: dict | None = None) -> dict:
  """Writes and logs the table, and says whether the median is ahead of the baseline."""
  table, median = table_of(task, results, base)
  if not median:  # no dev split and no labelled test split
    table = ('nothing was scored: the task has no dev split (nor a labelled test split); name one '
             'with --config.task.dev=FILE to score the fine-tunings\n')
  summary = {'task': task.name, 'init': init, 'seeds': results, 'median': median}
  if base:
    summary['baseline'] = base
  fs.write_atomic(fs.join(workdir, 'results.json'), fs.json_text(summary, indent=2))
  fs.write_atomic(fs.join(workdir, 'results.md'),
                  f'# {task.name}, {len(results)} seed(s), from {init}\n\n{table}')
  log(table)
  metric = task.metrics[0]
  for split in scored(task):
    if base and split in base and f'{split}/{metric}' in median:
      log(baseline_lib.verdict(split, metric, median[f'{split}/{metric}'], base[split][metric]))
  return summary
