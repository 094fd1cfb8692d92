"""Objectives side by side at the same pre-training compute, then fine-tuned on the same task.

    budget (FLOPs of N steps of `electra`) -> per objective: steps = budget / its FLOPs per step
    -> one records folder shared by all -> pre-train each -> fine-tune each with the same seeds
    (and the same model from random weights) -> one table: comparison.md / comparison.json

FLOPs per step are the analytic matmul count of each objective's step (flops.step_matmul_flops):
an objective without a generator (BERT MLM) gets more steps. Re-running the same command resumes:
finished pre-trainings and fine-tunings are read back, not redone.
"""

import json
import statistics

import ml_collections

from electra_jax import UserError
from electra_jax import user_errors
from electra_jax import flops as flops_lib
from electra_jax import fs
from electra_jax import model as model_lib
from electra_jax import objectives

# Run name -> (objective, model overrides).
RUNS = {
    'electra': ('electra', {}),
    'electra_15': ('electra_15', {}),
    'mlm': ('mlm', {}),
    'replace_mlm': ('replace_mlm', {}),
    'all_tokens_mlm': ('all_tokens_mlm', {}),
    'electric': ('electric', {}),
    'electra_gdes': ('electra', {'gdes': True}),
    'electra_nes': ('electra', {'untied_generator_embeddings': True}),
}
DEFAULT_RUNS = ('electra', 'electra_15', 'mlm', 'replace_mlm', 'all_tokens_mlm', 'electric')
_HELD_OUT = ('mlm_loss', 'disc_auc', 'main_mlm_loss', 'all_tokens_loss')


def run_config(config: ml_collections.ConfigDict, name: str) -> ml_collections.ConfigDict:
  if name not in RUNS:
    raise UserError(f'unknown run {name!r}; use some of {", ".join(RUNS)}')
  objective, overrides = RUNS[name]
  c = ml_collections.ConfigDict(config.to_dict())  # a copy whose derived fields are plain values
  c.objective.name = objective
  c.model.update(overrides)
  with user_errors(ValueError):
    c = objectives.fit_model_config(c, log=lambda *_: None)
  return c


def step_flops(c: ml_collections.ConfigDict) -> float:
  cfg = model_lib.ModelConfig.from_config(c.model)
  return flops_lib.step_matmul_flops(cfg, c.data.max_seq_length, c.data.batch_size,
                                     c.objective.max_predictions, c.objective.name)


def plan(config, names, electra_steps: int) -> list[dict]:
  """[{name, config, flops_per_step, steps}]: each run's steps for the same total FLOPs."""
  budget = electra_steps * step_flops(run_config(config, 'electra'))
  rows = []
  for name in names:
    c = run_config(config, name)
    per_step = step_flops(c)
    c.train_steps = max(1, int(round(budget / per_step)))
    c.optimizer.decay_steps = c.train_steps
    rows.append({'name': name, 'config': c, 'flops_per_step': per_step, 'steps': c.train_steps})
  return rows


def _finetune(ft_config, init: str, workdir: str, from_scratch: bool, log) -> dict:
  from electra_jax.finetune import run as finetune_run  # pylint: disable=import-outside-toplevel
  path = fs.join(workdir, 'results.json')
  if fs.isfile(path):
    with fs.open(path) as f:
      return json.load(f)
  f = ml_collections.ConfigDict(ft_config.to_dict())
  f.init, f.from_scratch = init, from_scratch
  return finetune_run.finetune(f, workdir, log=log)


def compare(config, ft_config, workdir: str, names=DEFAULT_RUNS, electra_steps: int = 2000,
            log=print) -> list[dict]:
  """Pre-trains and fine-tunes each run under `workdir`; returns the table's rows."""
  from electra_jax import pretrain  # pylint: disable=import-outside-toplevel
  rows = plan(config, names, electra_steps)
  pretrain.make_workdir(workdir)
  base = ml_collections.ConfigDict(config.to_dict())
  if not base.data.records:  # one records folder for every run: the same data, the same split
    base.data.records, _ = pretrain.prepare_data(base, workdir, log)
  for row in rows:
    log(f'{row["name"]}: {row["steps"]:,} steps of {row["flops_per_step"] / 1e9:.1f} GFLOP '
        f'({row["config"].objective.name})')
  results = []
  for row in rows:
    name, c = row['name'], row['config']
    c.data.records = base.data.records
    prefix = lambda line, name=name: log(f'[{name}] {line}')
    summary = pretrain.train_and_evaluate(c, fs.join(workdir, name), log=prefix)
    tuned = _finetune(ft_config, fs.join(workdir, name),
                      fs.join(workdir, f'{name}_finetune'), False, prefix)
    results.append(_row(name, c.objective.name, row['flops_per_step'], row['steps'],
                        summary.get('eval', {}), tuned))
  # The same fine-tuning from random weights: what pre-training has to beat.
  scratch = _finetune(ft_config, fs.join(workdir, rows[0]['name']),
                      fs.join(workdir, 'random_init_finetune'), True,
                      lambda line: log(f'[random init] {line}'))
  results.append(_row('random init', '-', 0.0, 0, {}, scratch))
  _write(results, workdir, electra_steps, log)
  return results


def _row(name, objective, per_step, steps, held_out, tuned) -> dict:
  metric, value = next(iter(tuned['median'].items()))
  seeds = [s for s in tuned['seeds']]
  split, score = metric.split('/', 1) if '/' in metric else ('dev', metric)
  return {'run': name, 'objective': objective, 'pretrain_flops': per_step * steps, 'steps': steps,
          **{k: held_out[k] for k in _HELD_OUT if k in held_out},
          'downstream_metric': metric, 'downstream_median': value,
          'downstream_seeds': [s.get(split, {}).get(score) for s in seeds]}


def _write(results: list[dict], workdir: str, electra_steps: int, log):
  header = ('| run | objective | pre-training FLOPs | steps | held-out MLM loss | disc AUC | '
            'main MLM / all-tokens loss | downstream (median of seeds) |')
  lines = [header, '|' + '---|' * 8]
  fmt = lambda r, k: f'{r[k]:.3f}' if k in r else '-'
  for r in results:
    main = fmt(r, 'main_mlm_loss') if 'main_mlm_loss' in r else fmt(r, 'all_tokens_loss')
    seeds = ', '.join(f'{100 * s:.2f}' for s in r['downstream_seeds'] if s is not None)
    lines.append(f'| {r["run"]} | {r["objective"]} | {r["pretrain_flops"]:.3g} | {r["steps"]:,} | '
                 f'{fmt(r, "mlm_loss")} | {fmt(r, "disc_auc")} | {main} | '
                 f'{100 * r["downstream_median"]:.2f} ({seeds}) |')
  table = '\n'.join(lines)
  metric = results[0]['downstream_metric']
  fs.write_atomic(fs.join(workdir, 'comparison.md'),
                  f'# Objectives at the FLOPs of {electra_steps:,} ELECTRA steps; downstream: '
                  f'{metric}\n\n{table}\n')
  fs.write_atomic(fs.join(workdir, 'comparison.json'), json.dumps(results, indent=2))
  log(table)
  log(f'median {statistics.median([r["downstream_median"] for r in results[:-1]]):.4f} over the '
      f'objectives; random init {results[-1]["downstream_median"]:.4f} | '
      f'{fs.join(workdir, "comparison.md")}')
