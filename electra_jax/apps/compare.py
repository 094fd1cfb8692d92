"""Objectives side by side at the same pre-training compute, then fine-tuned on the same task.

    budget (FLOPs of N steps of `electra`) -> per objective: steps = budget / its FLOPs per step
    -> one records folder shared by all -> pre-train each -> fine-tune each with the same seeds
    (and the same model from random weights) -> one table: comparison.md / comparison.json

FLOPs per step are the analytic matmul count of each objective's step (pretraining/step_flops.py):
an objective without a generator (BERT MLM) gets more steps. A run `<run>@<variant>` pre-trains
on a variant of the config (`variants`: the modern backbone's `configs/tiny.py:modern`, say) at
the same budget, on records of its own kind built with the same vocabulary. Re-running the same
command resumes: finished pre-trainings and fine-tunings are read back, not redone.
"""

import copy
import json
import time

import jax
import ml_collections

from electra_jax import UserError, user_errors
from electra_jax.config import pretraining as config_lib
from electra_jax.data import records as records_lib
from electra_jax.data import synthetic
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.finetune import config as ft_config_lib
from electra_jax.apps import search
from electra_jax.apps import zeroshot
from electra_jax.finetune.inputs import prompts
from electra_jax.finetune.inputs import tasks as tasks_lib
from electra_jax.finetune.kinds import registry
from electra_jax.model import flops as flops_lib
from electra_jax.model import networks as model_lib
from electra_jax.objectives import registry as objectives
from electra_jax.objectives.config import ObjectiveConfig
from electra_jax.pretraining import preflight
from electra_jax.pretraining import run as pretrain
from electra_jax.pretraining import setup as pretrain_setup
from electra_jax.pretraining import step_flops as step_flops_lib
from electra_jax.storage import fs
from electra_jax.train import partitioning
from electra_jax.train import step as step_lib
from electra_jax.train import workdir as workdir_lib

HEADLINE = ('electra', 'mlm')  # the paper's comparison, stated in a line of its own when both ran
DEFAULT_RUNS = ('electra', 'electra_15', 'mlm', 'replace_mlm', 'all_tokens_mlm', 'electric',
                'cocolm', 'amos')


def check_runs(names) -> None:
  """Refuses (UserError) --runs that names no run, a run twice (planned and pre-trained twice),
  or a run that does not exist, before anything is planned."""
  runs = objectives.runs()
  if not names:
    raise UserError(f'--runs is empty; give one or more of {", ".join(runs)}')
  twice = sorted({n for n in names if list(names).count(n) > 1})
  if twice:
    raise UserError(f'--runs names {", ".join(twice)} more than once; each run is pre-trained '
                    'once: give each name once')
  unknown = [n for n in names if n.partition('@')[0] not in runs]
  if unknown:
    raise UserError(f'unknown run {unknown[0]!r}; use some of {", ".join(runs)} (each also as '
                    '<run>@<variant of --config>, e.g. electra@modern)')


def config_variants(names) -> list[str]:
  """The variants of the pre-training config that runs `<run>@<variant>` name, in order."""
  return list(dict.fromkeys(v for n in names for v in [n.partition('@')[2]] if v))


def run_config(config: ml_collections.ConfigDict, name: str,
               variants: dict | None = None) -> ml_collections.ConfigDict:
  """The pre-training config of run `name` (`<run>` or `<run>@<variant>`: of `variants[variant]`
  instead of `config`)."""
  run, _, variant = name.partition('@')
  runs = objectives.runs()  # each objective's, and its variants
  if run not in runs:
    raise UserError(f'unknown run {name!r}; use some of {", ".join(runs)}')
  variants = variants or {}
  if variant and variant not in variants:
    raise UserError(f'run {name!r} names the config variant {variant!r}, which this comparison '
                    f'was not given (it has {", ".join(variants) or "none"})')
  objective, overrides = runs[run]
  c = copy.deepcopy(variants[variant] if variant else config)  # derived fields follow the
  c.objective.name = objective  #                                 overrides (max_predictions)
  for path, value in overrides.items():
    section, field = path.split('.')
    c[section][field] = value
  c = ml_collections.ConfigDict(c.to_dict())  # a copy whose derived fields are plain values
  with user_errors(ValueError):
    c = objectives.fit_model_config(c, log=lambda *_: None)
  return c


def with_fields(target: ml_collections.ConfigDict, source: ml_collections.ConfigDict,
                fields) -> ml_collections.ConfigDict:
  """A copy of `target` with each dotted field of `fields` set to its value in `source` (the
  command line's --finetune_config.<field> overrides, given to every built-in task)."""
  out = ml_collections.ConfigDict(target.to_dict())
  for field in fields:
    *path, last = field.split('.')
    src, dst = source, out
    for p in path:
      src, dst = src[p], dst[p]
    setattr(dst, last, getattr(src, last))
  return out


def step_flops(c: ml_collections.ConfigDict) -> float:
  cfg = model_lib.ModelConfig.from_config(c.model)
  return step_flops_lib.step_matmul_flops(cfg, c.data.max_seq_length, c.data.batch_size,
                                     c.objective.max_predictions, c.objective.name,
                                     ObjectiveConfig.from_config(c.objective))


def plan(config, names, electra_steps: int, variants: dict | None = None) -> list[dict]:
  """[{name, config, flops_per_step, steps}]: each run's steps for the same total FLOPs (those of
  `electra_steps` ELECTRA steps of `config`, whatever variant a run trains)."""
  budget = electra_steps * step_flops(run_config(config, 'electra'))
  rows = []
  for name in names:
    c = run_config(config, name, variants)
    per_step = step_flops(c)
    c.train_steps = max(1, int(round(budget / per_step)))
    c.optimizer.decay_steps = c.train_steps
    rows.append({'name': name, 'config': c, 'flops_per_step': per_step, 'steps': c.train_steps})
  return rows


def _pretrain(c, workdir: str, log) -> dict:
  """The pre-training's summary: read back when it finished with this very config (nothing is
  compiled then), else trained, resumed or refused by train_and_evaluate."""
  path, saved = fs.join(workdir, 'summary.json'), fs.join(workdir, 'config.json')
  if fs.isfile(path) and fs.isfile(saved):
    run, _ = preflight.configure(c, partitioning.make_mesh(), log=lambda *_: None)
    with fs.open(saved) as f:
      same = json.load(f) == run.as_json
    with fs.open(path) as f:
      summary = json.load(f)
    if same and summary.get('step') == c.train_steps:
      log(f'finished earlier: {workdir} (summary.json read back)')
      return summary
  return pretrain.train_and_evaluate(c, workdir, log=log, probe=zeroshot.probe)


def _finetune(ft_config, init: str, workdir: str, from_scratch: bool, log) -> dict:
  f = ml_collections.ConfigDict(ft_config.to_dict())
  f.init, f.from_scratch = init, from_scratch
  f.baseline = from_scratch and f.get('baseline', True)  # the same splits for all: computed once
  path, saved = fs.join(workdir, 'results.json'), fs.join(workdir, 'config.json')
  if fs.isfile(path) and fs.isfile(saved):
    with fs.open(saved) as c:
      same = json.load(c) == json.loads(f.to_json())
    if same:  # finished with this very config: read back. Otherwise fine-tuning decides: more
      with fs.open(path) as r:  # seeds continue, a different recipe is refused
        return json.load(r)
  return search.finetune(f, workdir, log=log)


def as_tasks(ft_configs) -> dict:
  """{task label: fine-tuning config}; one config is labelled by its task's name (your own data:
  the name launch/finetune.py gives it, from its train file), so that the fine-tunings of several
  tasks can share one --workdir and its pre-trainings."""
  if isinstance(ft_configs, ml_collections.ConfigDict):
    return {tasks_lib.task_name(ft_configs.task): ft_configs}
  return dict(ft_configs)


def estimate(config, ft_configs, names, electra_steps: int, electra_step_s: float,
             log=print, variants: dict | None = None) -> tuple[list[dict], dict, float]:
  """The plan with estimated seconds: each pre-training at the FLOP rate of one measured ELECTRA
  step (`electra_step_s`), each fine-tuning (its train steps, 3 x a forward, and one forward pass
  over the dev and test splits per seed) at the same rate. Returns (plan rows with 'seconds',
  {task label: steps, examples, seconds of one run's fine-tunings}, total seconds)."""
  rows = plan(config, names, electra_steps, variants)
  electra = run_config(config, 'electra')
  rate = step_flops(electra) / electra_step_s  # matmul FLOP/s achieved by the measured step
  cfg = model_lib.ModelConfig.from_config(electra.model)
  finetune_s = {}
  for label, ft in as_tasks(ft_configs).items():
    ft = ft_config_lib.parse(ft)
    with user_errors(ValueError, FileNotFoundError):
      task, splits = registry.load(ft.task, config, log=lambda *_: None)
    steps, flops = 0, 0.0
    recipes = [f for _, f in search.configs(ft)]  # a search: each of its recipes
    scored = sum(len(v) for k, v in splits.items() if k != 'train')
    for f in recipes:
      forward = flops_lib.encoder_forward_flops(cfg, f.max_seq_length)
      n = max(1, int(round((f.epochs or task.epochs) * (len(splits['train']) // f.batch_size))))
      steps += n
      flops += f.num_seeds * (3 * forward * f.batch_size * n + forward * scored)
    finetune_s[label] = {'steps': steps, 'examples': len(splits['train']), 'seconds': flops / rate,
                         'recipes': len(recipes)}
  for row in rows:
    row['seconds'] = row['steps'] * row['flops_per_step'] / rate
  total = sum(r['seconds'] for r in rows) + (len(rows) + 1) * sum(
      f['seconds'] for f in finetune_s.values())
  return rows, finetune_s, total


def print_plan(config, ft_configs, names, electra_steps: int, electra_step_s: float,
               log=print, variants: dict | None = None) -> float:
  """Prints the runs' steps and estimated times (nothing is trained); returns the total seconds."""
  rows, finetune_s, total = estimate(config, ft_configs, names, electra_steps, electra_step_s,
                                     log, variants)
  log(f'budget: the FLOPs of {electra_steps:,} ELECTRA steps = '
      f'{electra_steps * step_flops(run_config(config, "electra")):.3g}; one ELECTRA step measured '
      f'at {electra_step_s * 1e3:.0f} ms on this machine, every estimate at its FLOP rate')
  log('| run | objective | steps | GFLOP per step | est. pre-training |')
  log('|---|---|---|---|---|')
  for r in rows:
    log(f'| {r["name"]} | {r["config"].objective.name} | {r["steps"]:,} | '
        f'{r["flops_per_step"] / 1e9:.2f} | {_duration(r["seconds"])} |')
  for label, f in finetune_s.items():
    log(f'fine-tuning {label}: {f["examples"]:,} train examples, {f["steps"]:,} steps per seed'
        + (f' over {f["recipes"]} recipes' if f['recipes'] > 1 else '') + ', '
        f'est. {_duration(f["seconds"])} per run ({len(rows)} runs + random init)')
  log(f'estimated total: {_duration(total)} (matmul FLOPs only: input pipeline, evaluation '
      'during pre-training, compilation and checkpoints come on top)')
  return total


def measure_electra_step(config) -> float:
  """Seconds of one ELECTRA step of `config` on this machine, on a synthetic batch: compiled, one
  step run, then 3 steps timed."""
  config = run_config(config, 'electra')
  mesh = partitioning.make_mesh()
  setup = pretrain_setup.build_setup(config_lib.parse(config), tokenizer_lib.SPECIAL)
  init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
  d = config.data
  batch = jax.device_put(synthetic.synthetic_batch(d.batch_size, d.max_seq_length,
                                                   config.model.vocab_size),
                         partitioning.batch_sharding(mesh))
  state, metrics = train_fn(init_fn(), batch)
  jax.block_until_ready(metrics)
  start = time.perf_counter()
  for _ in range(3):
    state, metrics = train_fn(state, batch)
  jax.block_until_ready(metrics)
  return (time.perf_counter() - start) / 3


def _duration(seconds: float) -> str:
  return f'{seconds / 60:.1f} min' if seconds < 5400 else f'{seconds / 3600:.1f} h'


def compare(config, ft_configs, workdir: str, names=DEFAULT_RUNS, electra_steps: int = 2000,
            log=print, variants: dict | None = None) -> list[dict]:
  """Pre-trains each run under `workdir` and fine-tunes it on each task of `ft_configs` (a config,
  or {label: config}); returns the table's rows. `variants`: {name: the pre-training config of
  runs `<run>@<name>`}."""
  tasks = as_tasks(ft_configs)
  plan(config, names, electra_steps, variants)  # every run known before anything is written
  with workdir_lib.claim(workdir, 'comparison'):  # its runs claim their own folders in it
    return _compare(config, tasks, workdir, names, electra_steps, log, variants or {})


def _variant_records(base, variant, name: str, workdir: str, log) -> ml_collections.ConfigDict:
  """`variant` with the records of `base` where it reads records of the same kind, else with
  records of its own (under <workdir>/variant_<name>) tokenized with `base`'s vocabulary."""
  out = copy.deepcopy(variant)
  out.model.vocab_size = base.model.vocab_size  # (what the corpus filled)
  if records_lib.Settings.of_config(out) == records_lib.Settings.of_config(base):
    out.data.records = base.data.records
  elif not out.data.records:
    meta = records_lib.read_metadata(base.data.records)
    out.data.vocab = fs.join(base.data.records, meta['vocab_file'])
    out.data.records, _ = pretrain.prepare_data(config_lib.parse(out),
                                                fs.join(workdir, f'variant_{name}'),
                                                lambda line: log(f'[@{name}] {line}'))
  return out


def _shared_records(config, workdir: str, log) -> ml_collections.ConfigDict:
  """`config` with one records folder for every run (built under `workdir` unless given). A
  corpus too small for the vocabulary asked gets the largest multiple of 64 it can fill."""
  base = copy.deepcopy(config)
  if base.data.records:
    return base
  built = fs.join(workdir, 'data', records_lib.PLAN)  # a re-run: the size fitted the first time
  if fs.isfile(built):
    earlier = fs.read_json(built, f'delete {fs.dirname(built)} to build the records again',
                           want=dict)
    size = earlier.get('vocab_size', base.model.vocab_size)
    if size < base.model.vocab_size and size % 64 == 0 and not base.data.vocab:
      log(f'note: the records of {workdir} have a vocabulary of {size} (what the corpus fills); '
          f'every run uses it instead of {base.model.vocab_size}')
      base.model.vocab_size = size
  try:
    base.data.records, _ = pretrain.prepare_data(base, workdir, log)
  except UserError as e:
    cause = e.__context__
    if not (isinstance(cause, tokenizer_lib.VocabTooLarge) and cause.most and cause.most >= 64
            and not base.data.vocab):
      raise
    size = cause.most // 64 * 64
    log(f'note: the corpus fills at most {cause.most} vocabulary entries; every run of this '
        f'comparison uses {size} instead of {base.model.vocab_size}')
    base.model.vocab_size = size
    base.data.records, _ = pretrain.prepare_data(base, workdir, log)
  return base


def _compare(config, tasks: dict, workdir: str, names, electra_steps: int, log,
             variants: dict) -> list[dict]:
  base = _shared_records(config, workdir, log)
  variants = {name: _variant_records(base, v, name, workdir, log) for name, v in variants.items()}
  rows = plan(base, names, electra_steps, variants)
  for row in rows:
    log(f'{row["name"]}: {row["steps"]:,} steps of {row["flops_per_step"] / 1e9:.1f} GFLOP '
        f'({row["config"].objective.name})')
  results = []
  for row in rows:
    name, c = row['name'], row['config']
    prefix = lambda line, name=name: log(f'[{name}] {line}')
    summary = _pretrain(c, fs.join(workdir, name), prefix)
    tuned = {label: _finetune(ft, fs.join(workdir, name), fs.join(workdir, f'{name}_{label}'),
                              False, prefix) for label, ft in tasks.items()}
    results.append(_row(name, c.objective.name, row['flops_per_step'], row['steps'],
                        summary.get('eval', {}), tuned))
    results[-1]['zeroshot'] = {  # the pre-trained head prompted, where the task has a prompt
        label: zeroshot.evaluate(ft, fs.join(workdir, name), log=prefix)
        for label, ft in tasks.items() if tasks_lib.task_name(ft.task) in prompts.DEFAULTS
        and objectives.get(c.objective.name).detects}  # (and the objective trains the head)
  # The same fine-tuning from random weights: what pre-training has to beat.
  scratch = {label: _finetune(ft, fs.join(workdir, rows[0]['name']),
                              fs.join(workdir, f'random_init_{label}'), True,
                              lambda line: log(f'[random init] {line}'))
             for label, ft in tasks.items()}
  results.append(_row('random init', '-', 0.0, 0, {}, scratch))
  if all(r.get('baseline') for r in scratch.values()):  # beside them: the bag-of-words model
    results.append(_baseline_row(scratch))
  _write(results, workdir, electra_steps, log)
  return results


def _baseline_row(tuned: dict) -> dict:
  """The TF-IDF baseline that the fine-tunings computed on the same splits, as a table row."""
  downstream = {}
  for label, result in tuned.items():
    metric = next(iter(result['median']))
    split, score = metric.split('/', 1)
    base = result['baseline']
    d = downstream[label] = {'metric': metric, 'median': base[split][score], 'seeds': []}
    if 'test' in base and score in base['test']:
      d.update(test_median=base['test'][score], test_seeds=[])
  return {'run': 'TF-IDF baseline', 'objective': '-', 'pretrain_flops': 0.0, 'steps': 0,
          'downstream': downstream}


def _row(name, objective, per_step, steps, held_out, tuned: dict) -> dict:
  downstream = {}
  for label, result in tuned.items():
    metric, value = next(iter(result['median'].items()))  # the first dev split's first metric
    split, score = metric.split('/', 1) if '/' in metric else ('dev', metric)
    seeds = lambda split, score=score, result=result: [s.get(split, {}).get(score)
                                                       for s in result['seeds']]
    d = downstream[label] = {'metric': metric, 'median': value, 'seeds': seeds(split)}
    if split != 'test' and f'test/{score}' in result['median']:  # a labelled test split
      d.update(test_median=result['median'][f'test/{score}'], test_seeds=seeds('test'))
  return {'run': name, 'objective': objective, 'pretrain_flops': per_step * steps, 'steps': steps,
          **{k: held_out[k] for names in objectives.columns().values() for k in names
             if k in held_out}, 'downstream': downstream}


def _write(results: list[dict], workdir: str, electra_steps: int, log):
  labels = list(results[0]['downstream'])
  tested = {label: all('test_median' in r['downstream'][label] for r in results)
            for label in labels}
  # held-out metrics by column (a run reports one of each), those some run of the table reports
  columns = {c: names for c, names in objectives.columns().items()
             if any(k in r for r in results for k in names)}
  prompted = {}  # the tasks prompted zero-shot: their majority class's accuracy
  for r in results:
    for label, z in r.get('zeroshot', {}).items():
      prompted[label] = z['majority_accuracy']
  header = ('| run | objective | pre-training FLOPs | steps | ' + ' | '.join(columns) + ' | '
            + ''.join(f'{label} zero-shot accuracy (majority class {100 * m:.2f}) | '
                      for label, m in prompted.items())
            + ' | '.join(f'{label} {results[0]["downstream"][label]["metric"]} (median of seeds)'
                         + (' / test median' if tested[label] else '') for label in labels) + ' |')
  lines = [header, '|' + '---|' * (4 + len(columns) + len(prompted) + len(labels))]
  for r in results:
    held = [next((f'{r[k]:.3f}' for k in names if k in r), '-') for names in columns.values()]
    held += [f'{100 * r["zeroshot"][label]["accuracy"]:.2f}' if label in r.get('zeroshot', {})
             else '-' for label in prompted]
    cells = []
    for label in labels:
      d = r['downstream'][label]
      seeds = ', '.join(f'{100 * s:.2f}' for s in d['seeds'] if s is not None)
      cells.append(f'{100 * d["median"]:.2f}' + (f' ({seeds})' if seeds else '')
                   + (f' / {100 * d["test_median"]:.2f}' if tested[label] else ''))
    lines.append(f'| {r["run"]} | {r["objective"]} | {r["pretrain_flops"]:.3g} | {r["steps"]:,} | '
                 + ' | '.join(held + cells) + ' |')
  table = '\n'.join(lines)
  verdicts = _verdicts(results, labels, tested)
  fs.write_atomic(fs.join(workdir, 'comparison.md'),
                  f'# Objectives at the FLOPs of {electra_steps:,} ELECTRA steps, fine-tuned on '
                  f'{", ".join(labels)}\n\n{table}\n\n' + ''.join(f'- {v}\n' for v in verdicts))
  fs.write_atomic(fs.join(workdir, 'comparison.json'), json.dumps(results, indent=2))
  log(table)
  for line in verdicts:
    log(line)
  log(fs.join(workdir, 'comparison.md'))


def seed_pairs(ours: list, theirs: list) -> tuple[float, int]:
  """(won, pairs): of every pairing of one of our seeds' scores with one of theirs, how many ours
  wins, a tie counting half (the Mann-Whitney U count; pairs/2 is what two runs of one recipe
  give on average). Missing scores (None) are left out."""
  ours, theirs = [x for x in ours if x is not None], [x for x in theirs if x is not None]
  won = sum((a > b) + 0.5 * (a == b) for a in ours for b in theirs)
  return float(won), len(ours) * len(theirs)


def _verdicts(results: list[dict], labels: list, tested: dict) -> list[str]:
  """Per task and scored split: the pre-trained runs at least as good as random weights, the seed
  pairs each wins against them, and ELECTRA's median against BERT MLM's where both ran."""
  base = next((r for r in results if r['run'] == 'TF-IDF baseline'), None)
  results = [r for r in results if r is not base]
  runs, scratch = {r['run']: r for r in results[:-1]}, results[-1]
  out = []
  for label in labels:
    first = scratch['downstream'][label]['metric'].split('/')[0]  # the first dev split
    for key, split in (('median', first), ('test_median', 'test'))[:1 + tested[label]]:
      floor = scratch['downstream'][label][key]
      better = [n for n, r in runs.items() if r['downstream'][label][key] >= floor]
      out.append(f'{label} ({split}): {len(better)} of {len(runs)} pre-trained runs at least as '
                 f'good as random init ({100 * floor:.2f})'
                 + (f': {", ".join(better)}' if better else ''))
      seeds = 'seeds' if key == 'median' else 'test_seeds'
      won = [(n, *seed_pairs(r['downstream'][label][seeds], scratch['downstream'][label][seeds]))
             for n, r in runs.items()]
      if any(of for _, _, of in won):
        out.append(f'{label} ({split}): seed pairs won against random init (ties count half; '
                   'two runs of one recipe win half on average): '
                   + ', '.join(f'{n} {w:g} of {of}' for n, w, of in won if of))
      ours, theirs = HEADLINE
      if {ours, theirs} <= set(runs):
        gap = runs[ours]['downstream'][label][key] - runs[theirs]['downstream'][label][key]
        out.append(f'{label} ({split}): {ours} {"at least matches" if gap >= 0 else "is below"} '
                   f'{theirs} ({100 * gap:+.2f} points)')
      if base is not None and key in base['downstream'][label]:
        ranked = sorted([(r['downstream'][label][key], n) for n, r in runs.items()] +
                        [(floor, 'random init'),
                         (base['downstream'][label][key], 'TF-IDF baseline')], reverse=True)
        (top, lead), (second, behind) = ranked[0], ranked[1]
        out.append(f'{label} ({split}): ahead is ' + (
            f'the TF-IDF baseline ({100 * top:.2f}), {100 * (top - second):.2f} points above the '
            f'best fine-tuning, {behind} ({100 * second:.2f})' if lead == 'TF-IDF baseline' else
            f'{lead} ({100 * top:.2f}); the TF-IDF baseline '
            f'{100 * base["downstream"][label][key]:.2f}'))
  return out
