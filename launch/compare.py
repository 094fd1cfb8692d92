r"""Pre-train several objectives at the same compute, fine-tune each the same way, print one table.

    python launch/compare.py --workdir=/tmp/electra_compare --plan   # steps and estimated time only
    python launch/compare.py --workdir=/tmp/electra_compare
python launch/compare.py --workdir=/tmp/cmp --runs=electra,mlm,electra_gdes --electra_steps=3500 \
        --config=configs/tiny.py --finetune_config=configs/finetune/builtin.py:topic --num_seeds=3

The budget is the FLOPs of --electra_steps steps of ELECTRA under --config; every run gets the
steps that cost the same (BERT MLM, without a generator, gets more). Runs: electra, electra_15, mlm,
mlm_30 (30% masked), replace_mlm, all_tokens_mlm, electric, cocolm, amos, electra_gdes,
electra_nes; each also as <run>@<variant>, pre-trained on that variant of the --config file (with
the same --config.<field> overrides, on records of its own kind with the same vocabulary):

    python launch/compare.py --workdir=/tmp/cmp_modern --runs=electra,electra@modern,mlm_30@modern

compares the BERT backbone with ELECTRA beside the modern one with ELECTRA and with ModernBERT's
MLM at 30%, all at the FLOPs of the BERT ELECTRA's steps. Each is fine-tuned with the same
seeds on both built-in tasks (coherence and topic), or on --finetune_config's task alone when it is
given, and so is the same model from random weights; --finetune_config.<field>=<value> without
--finetune_config sets the field for both built-in tasks. The table goes to
<workdir>/comparison.md and comparison.json; re-running the command resumes. --plan prints each
run's steps and the estimated time (one ELECTRA step is compiled and timed) and trains nothing.

    python -m benchmarks.build_tasks --out=/tmp/electra_suite
python launch/compare.py --workdir=/tmp/suite_cmp --suite=/tmp/electra_suite --runs=electra,mlm
--plan

--suite runs the comparison on every task of a suite of benchmarks/build_tasks.py, each run
pre-trained on that task's own train texts (<workdir>/<task>/), fine-tuned with
configs/finetune/own.py (or --finetune_config), beside random weights and the TF-IDF baseline; one
table over the tasks goes to <workdir>/suite.md. --tasks=man_section,debian_section runs those tasks
of the suite alone.
"""

import importlib.util
import os

from absl import flags

from electra_jax import cli
from electra_jax.config import files as config_files
from electra_jax.apps import compare, compare_suite

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CONFIG = cli.define_config_file(
    'config', os.path.join(_ROOT, 'configs', 'tiny.py'), 'the pre-training config of every run')
_FT_CONFIG = cli.define_config_file(
    'finetune_config', os.path.join(_ROOT, 'configs', 'finetune', 'builtin.py'),
    'the fine-tuning config of every run', 'fine-tuning')
_WORKDIR = flags.DEFINE_string('workdir', None, 'folder for all runs and the table')
_RUNS = flags.DEFINE_list('runs', ','.join(compare.DEFAULT_RUNS), 'runs to compare')
_STEPS = flags.DEFINE_integer('electra_steps', 2000, 'the budget: FLOPs of this many ELECTRA steps')
_SEEDS = flags.DEFINE_integer('num_seeds', 3, 'fine-tunings per run (the same seeds for all)')
_SUITE = flags.DEFINE_string('suite', None, 'a folder written by benchmarks/build_tasks.py: '
                             'compare on each of its tasks, pre-training on its own texts')
_TASKS = flags.DEFINE_list('tasks', [], "with --suite: these of its tasks alone (comma separated; "
                           'default: every task)')
_PLAN = flags.DEFINE_bool('plan', False, 'print the steps and estimated time; train nothing')
flags.mark_flags_as_required(['workdir'])


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}')
  if _STEPS.value < 1 or _SEEDS.value < 1:
    raise cli.UserError('--electra_steps and --num_seeds must be at least 1')
  config_files.require_config(_CONFIG.value, 'pre-training')
  config_files.require_config(_FT_CONFIG.value, 'fine-tuning', '--finetune_config')
  cli.check_paths(_WORKDIR.value, _CONFIG.value, _FT_CONFIG.value)
  compare.check_runs(_RUNS.value)
  log = lambda line: print(line, flush=True)
  if _SUITE.value:
    return _suite(compare, log)
  if _TASKS.value:
    raise cli.UserError('--tasks picks tasks of a suite; give the suite with --suite=<folder of '
                        'benchmarks/build_tasks.py>, or leave --tasks out')
  if _FT_CONFIG.present:
    tasks = compare.as_tasks(_FT_CONFIG.value)  # named as finetune.py names it (own data: its file)
  else:  # both built-in tasks, each with the --finetune_config.<field> overrides given
    spec = importlib.util.spec_from_file_location(
        'builtin', os.path.join(_ROOT, 'configs', 'finetune', 'builtin.py'))
    builtin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builtin)
    fields = _FT_CONFIG.overridden
    tasks = {label: compare.with_fields(builtin.get_config(label), _FT_CONFIG.value, fields)
             for label in builtin.TASKS}
  for ft in tasks.values():
    ft.num_seeds = _SEEDS.value
  variants = {v: _CONFIG.variant(v) for v in compare.config_variants(_RUNS.value)}
  if _PLAN.value:
    compare.print_plan(_CONFIG.value, tasks, _RUNS.value, _STEPS.value,
                       compare.measure_electra_step(_CONFIG.value), log, variants)
    return
  compare.compare(_CONFIG.value, tasks, _WORKDIR.value, _RUNS.value, _STEPS.value, log=log,
                  variants=variants)


def _suite(compare, log):
  if _FT_CONFIG.present:
    ft = _FT_CONFIG.value
  else:  # your own data's defaults, with the --finetune_config.<field> overrides given
    own = config_files.load_config_file(os.path.join(_ROOT, 'configs', 'finetune', 'own.py'),
                                        'finetune_config')
    ft = compare.with_fields(own, _FT_CONFIG.value, _FT_CONFIG.overridden)
  ft.num_seeds = _SEEDS.value
  variants = {v: _CONFIG.variant(v) for v in compare.config_variants(_RUNS.value)}
  if not _PLAN.value:
    compare_suite.compare_suite(_CONFIG.value, _SUITE.value, ft, _WORKDIR.value, _RUNS.value,
                                _STEPS.value, log=log, tasks=_TASKS.value, variants=variants)
    return
  tasks = compare_suite.suite_tasks(_SUITE.value, ft, _TASKS.value)  # a bad name: before timing
  step_s = compare.measure_electra_step(_CONFIG.value)
  total = 0.0
  for name, corpus, task_ft in tasks:
    log(f'== {name} (pre-training on {corpus})')
    total += compare.print_plan(compare_suite.suite_config(_CONFIG.value, corpus),
                                {name: task_ft}, _RUNS.value, _STEPS.value, step_s, log,
                                {v: compare_suite.suite_config(c, corpus)
                                 for v, c in variants.items()})
  log(f'the whole suite: estimated {total / 60:.1f} min (one ELECTRA step measured once; the '
      'records and vocabulary of each task come on top)')


if __name__ == '__main__':
  cli.run(main)
