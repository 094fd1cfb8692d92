"""launch/finetune.py's job: a fine-tuning (finetune/run.py), or a search of a few recipes, each
fine-tuned K times, the one with the best dev median kept.

    --config.search='optimizer.learning_rate=1e-4,3e-4,1e-3'
    --config.search='optimizer.learning_rate=1e-4,3e-4; epochs=3,10'     (the grid: 4 recipes)

The paper fine-tunes this way (a learning rate out of a few per task, Base and Large also the
layer-wise decay). Each recipe, in the order given, is fine-tuned `num_seeds` times in its own
folder of the workdir (named by the recipe, e.g. `optimizer.learning_rate=1e-4/`) exactly as
launch/finetune.py would without the search, so a killed search resumes where it stopped. The
recipe whose median on the first dev split's first metric is highest is chosen (the first given
wins a tie); the test split plays no part in the choice. results.md lists every recipe's medians
and marks the chosen one; results.json holds them and, where a fine-tuning's own results.json has
them, the chosen recipe's seeds and medians. --mode=eval and --mode=predict use the chosen
recipe's fine-tunings.
"""

import difflib
import itertools
import json
import re

from electra_jax import UserError
from electra_jax import fields
from electra_jax.finetune import baseline as baseline_lib
from electra_jax.finetune import config as config_lib
from electra_jax.finetune import run
from electra_jax.storage import fs
from electra_jax.train import partitioning
from electra_jax.train import workdir as workdir_lib

# what a recipe may not change: the data, the start (init, init_step, from_scratch), the seeds
_FIXED = ('task.', 'init', 'from_scratch', 'seed', 'num_seeds', 'search')


def parse(spec: str) -> list[tuple[str, list[str]]]:
  """[(field path, [values as written])] of a search spec (axes joined by ';' or spaces)."""
  axes: list[tuple] = []
  for part in (p for p in re.split(r'[;\s]+', spec.strip()) if p):
    key, _, values = part.partition('=')
    texts = values.split(',')
    if not key or not values or not all(texts):
      raise UserError(f"--config.search: {part!r} is not 'field=value,value'; write e.g. "
                      "--config.search='optimizer.learning_rate=1e-4,3e-4,1e-3'")
    if key in dict(axes):
      raise UserError(f'--config.search names {key} twice; give all its values once, comma '
                      'separated')
    axes.append((key, texts))
  return axes


def _value(key: str, text: str, field):
  kind = field.field_type or type(field.default)
  if kind is bool:
    if text.lower() not in ('true', 'false'):
      raise UserError(f'--config.search: {key} takes True or False, not {text!r}')
    return text.lower() == 'true'
  if kind is str:
    return text
  try:
    number = float(text)
  except ValueError:
    number = None
  if number is None or (kind is int and not number.is_integer()):
    raise UserError(f'--config.search: {key}={text} is not '
                    f'{"an integer" if kind is int else "a number"}')
  return int(number) if kind is int else number


def recipes(cfg) -> list[tuple[str, dict]]:
  """[(folder name, {field path: value})] of the grid, in the order given; every value checked."""
  axes = parse(cfg.search)
  declared = fields.declared(config_lib.CONFIG)
  for key, _ in axes:
    if key not in declared or key.startswith(_FIXED):
      close = difflib.get_close_matches(key, [p for p in declared if not p.startswith(_FIXED)], 1)
      raise UserError(f'--config.search: {key} is not a recipe field; ' + (
          f'did you mean {close[0]}?' if close and key not in declared else
          'search the recipe\'s fields, e.g. optimizer.learning_rate, epochs, pooling, '
          'optimizer.layerwise_decay, dropout_rate (not the task, the start, the seeds or the '
          'search)'))
  grid: list[tuple[str, dict]] = []
  for combo in itertools.product(*[[(k, t) for t in texts] for k, texts in axes]):
    name = ','.join(f'{k}={t}' for k, t in combo)
    grid.append((name, {k: _value(k, t, declared[k]) for k, t in combo}))
  if len({name for name, _ in grid}) < len(grid):
    raise UserError('--config.search gives a value twice; give each once')
  return grid


def recipe_config(cfg: config_lib.FinetuningConfig, recipe: dict) -> config_lib.FinetuningConfig:
  """`cfg` with the recipe's values and no search; its values checked."""
  return config_lib.with_values(cfg, {'search': '', **recipe})


def configs(cfg: config_lib.FinetuningConfig) -> list[tuple[str, config_lib.FinetuningConfig]]:
  """[(folder name, config)] of each recipe of `cfg.search`; [('', cfg)] without a search."""
  if not cfg.search:
    return [('', cfg)]
  return [(name, recipe_config(cfg, recipe)) for name, recipe in recipes(cfg)]


def finetune(config, workdir: str, log=print, mode: str = 'train') -> dict:
  """The fine-tuning of `config` (a config file's or a typed one) in `workdir` (run.finetune), or,
  where its `search` names recipes, the search: each recipe fine-tuned in its own folder, the one
  with the best dev median chosen (--mode eval / predict: the chosen recipe's fine-tunings)."""
  run.check_mode(mode)
  cfg = config_lib.parse(config, partitioning.make_mesh())
  if not cfg.search:
    return run.finetune(cfg, workdir, log, mode)
  grid = configs(cfg)
  if cfg.task.train and not cfg.task.dev:
    raise UserError('--config.search chooses a recipe on the dev split; name one with '
                    '--config.task.dev=FILE')
  with workdir_lib.claim(workdir, 'fine-tuning search'):
    if mode != 'train':
      name = _chosen(workdir)
      log(f'the search in {workdir} chose {name}; --mode={mode} uses its fine-tunings')
      chosen = dict(grid).get(name) or config_lib.saved_config(fs.join(workdir, name), mode)
      return run.finetune(chosen, fs.join(workdir, name), log, mode)
    config = fs.join(workdir, 'config.json')
    fresh = not any(fs.isdir(fs.join(workdir, name)) for name, _ in grid)
    _note_other_recipes(workdir, grid, log)
    fs.write_atomic(config, json.dumps(cfg.as_json, indent=2))
    done = []
    try:
      for k, (name, recipe_cfg) in enumerate(grid):
        log(f'== recipe {k + 1} of {len(grid)}: {name} ({cfg.num_seeds} seed(s))')
        recipe_cfg = config_lib.with_values(  # the same splits: the baseline scored once
            recipe_cfg, {'baseline': cfg.baseline and k == 0})
        result = run.finetune(recipe_cfg, fs.join(workdir, name), log, 'train')
        done.append((name, result))
    except BaseException:  # refused before the first recipe began (its inputs): nothing kept
      if fresh and not any(fs.isdir(fs.join(workdir, name)) for name, _ in grid):
        fs.remove(config)
      raise
    return _write(cfg, done, workdir, log)


def _note_other_recipes(workdir: str, grid: list, log):
  """Says so when the search finished in `workdir` listed other recipes than `grid`: its
  results.md and results.json will list and choose among this list alone (the fine-tunings of
  the others stay in their folders)."""
  path = fs.join(workdir, 'results.json')
  if not fs.isfile(path):
    return
  before = [r.get('recipe') for r in fs.read_json(
      path, 'delete it: the search writes it again', want=dict).get('recipes', ())]
  now = [name for name, _ in grid]
  if before != now:
    gone = [n for n in before if n not in now]
    log(f'note: the search in {workdir} listed other recipes ({", ".join(before)}); its results '
        f'are written again for these ({", ".join(now)})' + (
            f', and the fine-tunings of {", ".join(gone)} stay in their folders' if gone else ''))


def choose(done: list[tuple[str, dict]]) -> int:
  """The index of the recipe with the highest median on the first dev split's first metric."""
  key = next(iter(done[0][1]['median']))
  if key.startswith('test'):
    raise UserError('--config.search chooses on a dev split, and the task has none; name one '
                    'with --config.task.dev=FILE')
  return max(range(len(done)), key=lambda i: (done[i][1]['median'][key], -i))


def _write(cfg, done: list, workdir: str, log) -> dict:
  best = choose(done)
  name, result = done[best]
  columns = list(result['median'])
  base = done[0][1].get('baseline')
  lines = [f'| recipe (median of {cfg.num_seeds} seed(s)) | ' + ' | '.join(columns) + ' |',
           '|' + '---|' * (len(columns) + 1)]
  for i, (n, r) in enumerate(done):
    cells = [f'{100 * r["median"][c]:.2f}' for c in columns]
    lines.append(f'| {n}{" (chosen)" if i == best else ""} | ' + ' | '.join(
        f'**{c}**' if i == best else c for c in cells) + ' |')
  if base:
    lines.append('| TF-IDF baseline | ' + ' | '.join(
        f'{100 * base[s][m]:.2f}' if s in base else '-'
        for s, m in (c.split('/', 1) for c in columns)) + ' |')
  table = '\n'.join(lines) + '\n'
  level = [n for i, (n, r) in enumerate(done)
           if i != best and r['median'][columns[0]] == result['median'][columns[0]]]
  chosen = name + (f' (level on {columns[0]} with {", ".join(level)}; the first given is kept)'
                   if level else '')
  summary = {**result, 'search': cfg.search, 'chosen': name,
             'recipes': [{'recipe': n, 'median': r['median']} for n, r in done]}
  if base:
    summary['baseline'] = base
  fs.write_atomic(fs.join(workdir, 'results.json'), fs.json_text(summary, indent=2))
  fs.write_atomic(fs.join(workdir, 'results.md'), (
      f'# {result["task"]}: {len(done)} recipes, chosen on {columns[0]}, from {result["init"]}\n\n'
      f'{table}\nchosen: {chosen}; its seeds: {name}/results.md\n'))
  log(table)
  log(f'chosen on {columns[0]}: {chosen}')
  for c in columns if base else ():
    split, metric = c.split('/', 1)
    if split in base and c == f'{split}/{next(iter(base[split]))}':
      log(baseline_lib.verdict(split, metric, result['median'][c], base[split][metric]))
  return summary


def _chosen(workdir: str) -> str:
  path = fs.join(workdir, 'results.json')
  if not fs.isfile(path):
    raise UserError(f'{workdir} holds no finished search (no results.json); run it with '
                    '--mode=train first, the same command continues it')
  return fs.read_json(path, 'run the search again with --mode=train', want=dict)['chosen']
