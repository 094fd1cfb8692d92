"""Objectives at the same compute: the step budget per objective, and a comparison end to end."""

import json
import os

import pytest

from conftest import test_config
from electra_jax import UserError
from electra_jax.finetune import config as ft_config_lib
from electra_jax.apps import zeroshot
from electra_jax.finetune.inputs import prompts
from electra_jax.objectives import registry as objectives
from electra_jax.apps import compare
from electra_jax.apps import compare_suite
from test_finetune import _synthetic


@pytest.mark.fast
def test_every_run_gets_the_steps_of_the_same_flops():
  config = test_config(**{'model.vocab_size': 4096})  # a vocabulary that weighs in the FLOPs
  rows = {r['name']: r for r in compare.plan(config, list(objectives.runs()), 1000)}
  budget = 1000 * rows['electra']['flops_per_step']
  for row in rows.values():
    assert abs(row['steps'] * row['flops_per_step'] - budget) <= row['flops_per_step'] / 2
    assert row['config'].train_steps == row['steps'] == row['config'].optimizer.decay_steps
  # no generator: more steps; the vocabulary at every position (All-Tokens, ELECTRIC): fewer
  assert rows['mlm']['steps'] > 1000 == rows['electra_15']['steps'] == rows['electra_gdes']['steps']
  assert rows['all_tokens_mlm']['steps'] < rows['replace_mlm']['steps'] < 1000
  assert rows['electric']['steps'] < 1000
  assert rows['mlm']['config'].model.generator == 'tied'
  assert rows['electric']['config'].model.generator == 'two_tower'
  # COCO-LM: a full-width auxiliary network and the crop's pass cost steps
  assert rows['cocolm']['steps'] < 1000 and rows['cocolm']['config'].model.cocolm_heads
  # AMOS: a full-width generator with exits costs steps too
  assert rows['amos']['steps'] < 1000 and rows['amos']['config'].model.amos_exits
  with pytest.raises(Exception, match="unknown run 'bert'"):
    compare.plan(config, ['bert'], 10)
  # ModernBERT's 30% masking: the prediction slots follow the rate, as the field's derivation says
  assert rows['mlm_30']['config'].objective.mask_prob == 0.3
  assert rows['mlm_30']['config'].objective.max_predictions == int(
      (0.3 + 0.005) * config.data.max_seq_length) > rows['mlm']['config'].objective.max_predictions


@pytest.mark.fast
def test_runs_on_a_variant_of_the_config_share_the_budget_of_the_first():
  """`<run>@<variant>` trains on that variant of the config (the modern backbone here) at the
  FLOPs of ELECTRA's steps on the first config; a variant the comparison was not given is one
  sentence."""
  from conftest import MODERN
  config = test_config(**{'model.vocab_size': 4096})
  modern = test_config(**{'model.vocab_size': 4096, **MODERN, 'data.pack_documents': True})
  names = ['electra', 'electra@modern', 'mlm_30@modern']
  assert compare.config_variants(names + ['mlm@modern']) == ['modern']
  compare.check_runs(names)
  rows = {r['name']: r for r in compare.plan(config, names, 1000, {'modern': modern})}
  budget = 1000 * rows['electra']['flops_per_step']
  for name, row in rows.items():
    assert abs(row['steps'] * row['flops_per_step'] - budget) <= row['flops_per_step'] / 2, name
    assert (row['config'].model.backbone == 'modern') == name.endswith('@modern'), name
    assert row['config'].data.pack_documents == name.endswith('@modern'), name
  assert rows['electra@modern']['flops_per_step'] != rows['electra']['flops_per_step']
  assert rows['mlm_30@modern']['config'].objective.mask_prob == 0.3
  assert rows['mlm_30@modern']['config'].model.generator == 'tied'
  with pytest.raises(UserError, match="run 'electra@long' names the config variant 'long', which "
                     r'this comparison was not given \(it has modern\)'):
    compare.plan(config, ['electra@long'], 10, {'modern': modern})
  with pytest.raises(UserError, match="unknown run 'bert@modern'"):
    compare.check_runs(['bert@modern'])


@pytest.mark.fast
def test_the_plan_estimates_time_at_one_measured_flop_rate(tmp_path):
  config = test_config()
  tasks = {}
  for label, seeds in (('a', 1), ('b', 2)):
    ft = ft_config_lib.default_config()
    ft.update(batch_size=16, max_seq_length=32, epochs=2.0, num_seeds=seeds)
    ft.task.update(name='own', train=_synthetic(tmp_path / f'{label}.csv', 64, 'classification', 0),
                   dev=_synthetic(tmp_path / f'{label}_dev.csv', 32, 'classification', 1))
    tasks[label] = ft
  rows, finetune, total = compare.estimate(config, tasks, ('electra', 'mlm'), 100, 0.5)
  assert rows[0]['seconds'] == pytest.approx(50.0)  # 100 steps of 0.5 s
  assert rows[1]['seconds'] == pytest.approx(50.0, rel=0.02)  # the same FLOPs, more steps
  assert finetune['a']['steps'] == finetune['b']['steps'] == 8  # 2 epochs of 64 // 16
  assert finetune['b']['seconds'] == pytest.approx(2 * finetune['a']['seconds'])  # two seeds
  assert total == pytest.approx(rows[0]['seconds'] + rows[1]['seconds'] +
                                3 * (finetune['a']['seconds'] + finetune['b']['seconds']))
  tasks['a'].search = 'optimizer.learning_rate=1e-4,3e-4; epochs=2,4'  # 4 recipes: 2 + 4 epochs
  searched = compare.estimate(config, tasks, ('electra', 'mlm'), 100, 0.5)[1]['a']
  assert searched['steps'] == 2 * (8 + 16) and searched['recipes'] == 4
  per_run = 3 * 16 * 8 + 32  # forward passes: train steps (3 x a forward of 16 rows), 32 dev rows
  assert searched['seconds'] == pytest.approx(
      (3 * 16 * 48 + 4 * 32) / per_run * finetune['a']['seconds'])  # 48 steps, dev scored 4 times
  step_s = compare.measure_electra_step(config)
  assert 0 < step_s < 60
  lines = []
  assert compare.print_plan(config, tasks, ('electra', 'mlm'), 100, step_s, lines.append) > 0
  assert lines[1].startswith('| run | objective | steps |') and lines[3].startswith('| electra |')
  assert lines[-1].startswith('estimated total: ')
  assert not os.path.exists(tmp_path / 'cmp')


def test_comparison_end_to_end_writes_one_table_and_resumes(tmp_path, records_dir, monkeypatch):
  config = test_config(**{'data.records': records_dir})
  # the first task has a prompt: each pre-trained run is prompted zero-shot on it
  monkeypatch.setitem(prompts.DEFAULTS, 'first', ('It has {label}.', 'yes=cat,no=dog'))
  tasks = {}
  for label, seed in (('first', 0), ('second', 2)):
    ft = ft_config_lib.default_config()
    ft.update(batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=1.0, num_seeds=1,
              log_every=50)
    ft.task.update(name='own', train=_synthetic(tmp_path / f'{label}.csv', 64, 'classification',
                                                seed),
                   dev=_synthetic(tmp_path / f'{label}_dev.csv', 32, 'classification', seed + 1))
    tasks[label] = ft
  # a labelled test split for the second task: scored, and shown after its dev median
  tasks['second'].task.test = _synthetic(tmp_path / 'second_test.csv', 32, 'classification', 5)
  workdir = str(tmp_path / 'cmp')
  lines = []
  rows = compare.compare(config, tasks, workdir, ('electra', 'mlm'), electra_steps=3,
                         log=lines.append)
  assert [r['run'] for r in rows] == ['electra', 'mlm', 'random init', 'TF-IDF baseline']
  assert rows[0]['steps'] == 3 and rows[1]['steps'] >= 3 and 'disc_auc' in rows[0]
  assert 'disc_auc' not in rows[1] and 'mlm_loss' in rows[1]
  scratch = json.load(open(os.path.join(workdir, 'random_init_second', 'results.json')))
  assert rows[3]['downstream']['second']['median'] == scratch['baseline']['dev']['accuracy']
  assert rows[3]['downstream']['second']['test_median'] == scratch['baseline']['test']['accuracy']
  base = rows[3]['downstream']['second']['test_median']
  best, name = max((r['downstream']['second']['test_median'], r['run']) for r in rows[:3])
  ahead = next(l for l in lines if l.startswith('second (test): ahead is '))
  assert ahead == (f'second (test): ahead is the TF-IDF baseline ({100 * base:.2f}), '
                   f'{100 * (base - best):.2f} points above the best fine-tuning, {name} '
                   f'({100 * best:.2f})' if base > best else
                   f'second (test): ahead is {name} ({100 * best:.2f}); the TF-IDF baseline '
                   f'{100 * base:.2f}'), ahead
  for r in rows[:3]:
    assert list(r['downstream']) == ['first', 'second']
    for d in r['downstream'].values():
      assert 0 <= d['median'] <= 1 and d['metric'] == 'dev/accuracy' and len(d['seeds']) == 1
    assert 'test_median' not in r['downstream']['first']
    assert r['downstream']['second']['test_seeds'] == [r['downstream']['second']['test_median']]
  for run in ('electra', 'mlm', 'random_init'):
    for label in tasks:
      assert os.path.isfile(os.path.join(workdir, f'{run}_{label}', 'results.json'))
  table = open(os.path.join(workdir, 'comparison.md')).read()
  assert table.count('\n| ') == 5 and '| mlm | mlm |' in table  # header + 4 rows
  tfidf = 100 * rows[3]['downstream']['first']['median']
  # the held-out columns of the runs compared only (MLM loss, disc AUC; not COCO-LM's), and the
  # zero-shot accuracy of the pre-trained runs on the task with a prompt
  assert f'| TF-IDF baseline | - | 0 | 0 | - | - | - | {tfidf:.2f} |' in table
  prompted = rows[0]['zeroshot']  # (BERT MLM trains no detection head: not prompted)
  assert list(prompted) == ['first'] and 0 <= prompted['first']['accuracy'] <= 1
  assert f'| {100 * prompted["first"]["accuracy"]:.2f} | ' in table and rows[1]['zeroshot'] == {}
  with pytest.raises(UserError, match=f'{workdir}/mlm was pre-trained with objective mlm, which '
                     "never trains the discriminator's detection head"):
    zeroshot.evaluate(tasks['first'], os.path.join(workdir, 'mlm'), log=lambda *_: None)
  majority = rows[0]['zeroshot']['first']['majority_accuracy']
  assert (f'| held-out MLM loss | disc AUC | first zero-shot accuracy (majority class '
          f'{100 * majority:.2f}) | first ') in table and 'contrastive' not in table
  assert ('| first dev/accuracy (median of seeds) | second dev/accuracy (median of seeds) / test '
          'median |') in table
  second = [r['downstream']['second'] for r in rows]
  assert f'{100 * second[1]["median"]:.2f} ({100 * second[1]["seeds"][0]:.2f}) / ' \
      f'{100 * second[1]["test_median"]:.2f} |' in table
  assert json.load(open(os.path.join(workdir, 'comparison.json')))[1]['run'] == 'mlm'
  for split, key in (('dev', 'median'), ('test', 'test_median')):
    better = [r['run'] for r, d in zip(rows[:2], second) if d[key] >= second[2][key]]
    verdict = (f'second ({split}): {len(better)} of 2 pre-trained runs at least as good as random '
               f'init ({100 * second[2][key]:.2f})' + (f': {", ".join(better)}' if better else ''))
    gap = second[0][key] - second[1][key]
    versus = (f'second ({split}): electra {"at least matches" if gap >= 0 else "is below"} mlm '
              f'({100 * gap:+.2f} points)')
    assert verdict in lines and versus in lines and f'- {verdict}\n' in table, (verdict, lines)
    seeds = 'seeds' if key == 'median' else 'test_seeds'
    won = [sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in d[seeds] for b in second[2][seeds])
           for d in second[:2]]
    assert (f'second ({split}): seed pairs won against random init (ties count half; two runs of '
            f'one recipe win half on average): electra {won[0]:g} of 1, mlm {won[1]:g} of 1'
            ) in lines
  assert not any(l.startswith('first (test)') for l in lines)
  # A second call reads the finished runs back: the same table, no fine-tuning again.
  lines.clear()
  again = compare.compare(config, tasks, workdir, ('electra', 'mlm'), electra_steps=3,
                          log=lines.append)
  assert [r['downstream'] for r in again] == [r['downstream'] for r in rows]
  assert not any(' recipe: ' in l or ' seed 0: ' in l or 'compiling' in l for l in lines), lines
  assert sum('summary.json read back' in l for l in lines) == 2
  # A changed fine-tuning recipe is not answered with the results of the old one.
  tasks['second'].optimizer.learning_rate = 1e-3
  with pytest.raises(UserError, match=r'cmp/electra_second holds fine-tunings with a different '
                     r'config \(optimizer'):
    compare.compare(config, tasks, workdir, ('electra', 'mlm'), electra_steps=3, log=lines.append)


@pytest.mark.fast
def test_finetune_config_fields_without_a_file_reach_both_builtin_tasks():
  """`compare.py --finetune_config.word_table_lr=3` (no --finetune_config=FILE) sets the field for
  both built-in tasks, over topic's own 10: absl counts the file flag as absent then, and the
  override was dropped."""
  import sys
  from conftest import ROOT
  from electra_jax.config import files as config_files
  sys.path.insert(0, os.path.join(ROOT, 'configs', 'finetune'))
  import builtin
  default = os.path.join(ROOT, 'configs', 'finetune', 'builtin.py')
  value, fields = config_files.config_from(default, ['word_table_lr=3', 'epochs=1'],
                                           'finetune_config')
  assert fields == ['optimizer.word_table_lr', 'epochs']
  with pytest.raises(UserError, match="unknown config field 'word_tabel_lr'; did you mean "
                     r'--finetune_config.optimizer.word_table_lr\?'):
    config_files.config_from(default, ['word_tabel_lr=10'], 'finetune_config')
  own = ft_config_lib.short_pretraining_recipe(ft_config_lib.default_config())
  for label in builtin.TASKS:  # one recipe: your own data's, no per-task settings
    c = builtin.get_config(label)
    assert (c.pooling, c.epochs, c.optimizer.to_dict()) == (own.pooling, own.epochs,
                                                             own.optimizer.to_dict())
  tasks = {label: compare.with_fields(builtin.get_config(label), value, fields)
           for label in builtin.TASKS}
  assert [t.task.name for t in tasks.values()] == list(builtin.TASKS.values())
  for t in tasks.values():
    assert t.optimizer.word_table_lr == 3.0 and t.epochs == 1.0 and t.pooling == 'mean'
  for t in tasks.values():  # fields not given keep the file's values
    assert t.optimizer.layerwise_decay == 1.0 and t.max_seq_length == 64


@pytest.mark.fast
def test_a_misspelt_field_of_a_default_config_file_is_one_sentence(tmp_path):
  """compare.py's config flags have default files, which read their overrides as they are
  defined: a field they do not have is one sentence, not a traceback."""
  import subprocess
  import sys
  from conftest import CHILD_ENV, ROOT
  done = subprocess.run([sys.executable, os.path.join(ROOT, 'launch', 'compare.py'),
                         f'--workdir={tmp_path / "cmp"}', '--finetune_config.word_tabel_lr=10',
                         '--plan'], capture_output=True, text=True, env=CHILD_ENV, timeout=300)
  assert done.returncode == 2 and done.stderr.strip().splitlines() == [
      "error: unknown config field 'word_tabel_lr'; did you mean "
      '--finetune_config.optimizer.word_table_lr?'], done.stderr
  assert not os.path.exists(tmp_path / 'cmp')


@pytest.mark.fast
def test_runs_named_twice_none_or_unknown_are_one_sentence_before_the_plan(tmp_path):
  """--runs=electra,electra planned (and would pre-train) it twice; --runs='' planned nothing."""
  import subprocess
  import sys
  from conftest import CHILD_ENV, ROOT
  compare.check_runs(('electra', 'mlm'))
  for runs, said in (('electra,electra', '--runs names electra more than once; each run is '
                      'pre-trained once: give each name once'),
                     ('', '--runs is empty; give one or more of electra, '),
                     ('electra,bert', "unknown run 'bert'; use some of electra, ")):
    done = subprocess.run([sys.executable, os.path.join(ROOT, 'launch', 'compare.py'),
                           f'--workdir={tmp_path / "cmp"}', f'--runs={runs}', '--plan'],
                          capture_output=True, text=True, env=CHILD_ENV, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f'error: {said}'), (
        runs, done.stderr[-2000:])
  assert not os.path.exists(tmp_path / 'cmp')


def test_a_suite_is_compared_task_by_task_on_its_own_texts(tmp_path):
  """compare.py --suite: each task's runs pre-train on that task's corpus (records of their own),
  fine-tune on its files, beside random weights and the TF-IDF baseline; one table over tasks."""
  import csv
  from benchmarks import suite
  suite_dir = str(tmp_path / 'suite')
  described = []
  for name, seed in (('first', 0), ('second', 1)):
    with open(_synthetic(tmp_path / f'{name}.csv', 160, 'classification', seed)) as f:
      rows = list(csv.DictReader(f))
    examples = tuple((r['text'], r['label'], f'{i}') for i, r in enumerate(rows))
    described.append(suite.write(suite.Task(name, 'test', 'synthetic', examples), suite_dir,
                                 per_class=64, min_class=4))
  with open(os.path.join(suite_dir, 'suite.json'), 'w') as f:
    json.dump({'tasks': described}, f)
  ft = ft_config_lib.default_config()
  ft.update(batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=1.0, num_seeds=1)
  workdir = str(tmp_path / 'cmp')
  lines = []
  # (each task's corpus is small: its held-out split, a hash's draw, may hold under 16 examples)
  tables = compare_suite.compare_suite(test_config(**{'data.eval_batch_size': 8}), suite_dir, ft,
                                       workdir, ('electra',), electra_steps=2, log=lines.append)
  assert list(tables) == ['first', 'second']
  for name in tables:
    assert [r['run'] for r in tables[name]] == ['electra', 'random init', 'TF-IDF baseline']
    meta = json.load(open(os.path.join(workdir, name, 'data', 'metadata.json')))
    assert meta['source'] == os.path.join(suite_dir, name, 'corpus.txt')  # its own texts
  table = open(os.path.join(workdir, 'suite.md')).read()
  assert '| run | first (dev / test) | second (dev / test) |' in table
  base = tables['second'][2]['downstream']['second']
  assert '| TF-IDF baseline | ' in table and f'{100 * base["median"]:.2f} / ' \
      f'{100 * base["test_median"]:.2f} |' in table
  assert any(l.startswith('[second] electra: 2 steps') for l in lines), lines
  level = won = pairs = 0  # the summary below the table, counted here from each run's seeds
  for name, rows in tables.items():
    ours, theirs = rows[0]['downstream'][name], rows[1]['downstream'][name]
    for key, seeds in (('median', 'seeds'), ('test_median', 'test_seeds')):
      level += ours[key] >= theirs[key]
      for a in ours[seeds]:
        for b in theirs[seeds]:
          won, pairs = won + (a > b) + 0.5 * (a == b), pairs + 1
  summary = (f'- electra: median at or above random init on {level} of 4 splits; seed pairs won '
             f'against random init {won:g} of {pairs} ')
  assert pairs == 4 and summary in table, table


@pytest.mark.fast
def test_a_corpus_too_small_for_the_vocabulary_gets_the_size_it_fills(tmp_path):
  from conftest import write_corpus
  corpus = write_corpus(str(tmp_path / 'small.txt'))
  config = test_config(**{'data.corpus': corpus, 'data.records': '', 'model.vocab_size': 4096})
  lines = []
  base = compare._shared_records(config, str(tmp_path / 'w'), lines.append)
  size = base.model.vocab_size
  assert size % 64 == 0 and 64 <= size < 4096 and config.model.vocab_size == 4096
  assert any(l.startswith('note: the corpus fills at most') and f'uses {size} instead of 4096' in l
             for l in lines), lines
  from electra_jax.data import tokenizer as tokenizer_lib
  vocab = tokenizer_lib.load_tokenizer(os.path.join(base.data.records, 'vocab.model'))
  assert vocab.vocab_size == size
  lines.clear()  # a re-run finds the records built with the fitted size
  again = compare._shared_records(config, str(tmp_path / 'w'), lines.append)
  assert again.model.vocab_size == size and any('have a vocabulary of' in l for l in lines)


@pytest.mark.fast
def test_tasks_of_a_suite_are_picked_by_name_in_the_suites_order(tmp_path):
  """compare.py --suite --tasks: the named tasks alone, in the suite's order; a name the suite does
  not hold is one sentence naming the tasks it does."""
  suite_dir = tmp_path / 'suite'
  suite_dir.mkdir()
  (suite_dir / 'suite.json').write_text(json.dumps({'tasks': [{'name': n} for n in 'abc']}))
  ft = ft_config_lib.default_config()
  picked = compare_suite.suite_tasks(str(suite_dir), ft, ['c', 'a'])
  assert [name for name, _, _ in picked] == ['a', 'c']
  assert picked[1][1] == os.path.join(str(suite_dir), 'c', 'corpus.txt')
  assert picked[1][2].task.train == os.path.join(str(suite_dir), 'c', 'train.csv')
  assert [name for name, _, _ in compare_suite.suite_tasks(str(suite_dir), ft)] == ['a', 'b', 'c']
  with pytest.raises(UserError, match=r"has no task 'd'; its tasks are a, b, c"):
    compare_suite.suite_tasks(str(suite_dir), ft, ['a', 'd'])


@pytest.mark.fast
def test_seed_pairs_count_each_pairing_once_and_ties_as_half():
  # ours 1 loses both pairings with 2 and 2; 2 ties twice (1); 3 wins twice (2): 3 of 6
  assert compare.seed_pairs([0.1, 0.2, 0.3], [0.2, 0.2]) == (3.0, 6)
  assert compare.seed_pairs([0.9, None], [0.1, 0.2, None]) == (2.0, 2)  # missing scores left out
  assert compare.seed_pairs([], [0.5]) == (0.0, 0)
  a, b = [0.5, 0.7, 0.6], [0.55, 0.65]  # ours + theirs always make every pair
  assert compare.seed_pairs(a, b)[0] + compare.seed_pairs(b, a)[0] == len(a) * len(b)


def test_a_stop_notice_during_a_pre_training_stops_the_whole_comparison(tmp_path, records_dir):
  """Ctrl-C (or SIGTERM) while a run pre-trains: that run saves where it is and the comparison
  ends there (exit 130, or 143, from the command line); nothing is fine-tuned from the
  half-trained weights, which a later call would read back as the run's result."""
  import signal
  from electra_jax import Stopped
  config = test_config(**{'data.records': records_dir, 'log_every': 1})
  ft = ft_config_lib.default_config()
  ft.update(batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=1.0, num_seeds=1)
  ft.task.update(name='own', train=_synthetic(tmp_path / 'train.csv', 32, 'classification', 0),
                 dev=_synthetic(tmp_path / 'dev.csv', 16, 'classification', 1))
  workdir, lines = tmp_path / 'cmp', []

  def log(line):
    lines.append(line)
    if '[electra]' in line and 'step 2/' in line:  # a progress line: the notice comes now
      os.kill(os.getpid(), signal.SIGINT)

  before = signal.getsignal(signal.SIGINT)
  with pytest.raises(Stopped) as stopped:
    compare.compare(config, {'task': ft}, str(workdir), ('electra',), electra_steps=50, log=log)
  assert stopped.value.signal == 'SIGINT' and stopped.value.exit_code == 130
  step = stopped.value.step
  assert 2 <= step < 50 and os.path.isdir(workdir / 'electra' / 'checkpoints' / str(step)), lines
  assert any(l.startswith(f'[electra] stopped by SIGINT at step {step}: ') for l in lines), lines
  assert not any(name.startswith(('electra_', 'random_init')) for name in os.listdir(workdir)), (
      os.listdir(workdir))
  assert signal.getsignal(signal.SIGINT) == before  # the loop put the handler before it back


def test_a_variant_that_reads_other_records_gets_its_own_with_the_same_vocabulary(tmp_path,
                                                                                  records_dir):
  """electra beside electra@modern (packed documents): the variant's records are built once, of
  its kind, tokenized with the first run's vocabulary; both pre-train and fine-tune into one
  table, and a re-run reads everything back."""
  from conftest import MODERN
  from electra_jax.data import records as records_lib
  config = test_config(**{'data.records': records_dir})
  modern = test_config(**{**MODERN, 'data.pack_documents': True})
  ft = ft_config_lib.default_config()
  ft.update(batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=1.0, num_seeds=1)
  ft.task.update(name='own', train=_synthetic(tmp_path / 'train.csv', 64, 'classification', 0),
                 dev=_synthetic(tmp_path / 'dev.csv', 32, 'classification', 1))
  workdir = str(tmp_path / 'cmp')
  lines = []
  rows = compare.compare(config, ft, workdir, ('electra', 'electra@modern'), electra_steps=2,
                         log=lines.append, variants={'modern': modern})
  assert [r['run'] for r in rows][:3] == ['electra', 'electra@modern', 'random init']
  built = os.path.join(workdir, 'variant_modern', 'data')
  ours, theirs = records_lib.read_metadata(built), records_lib.read_metadata(records_dir)
  assert ours['pack_documents'] and not theirs.get('pack_documents', False)
  assert ours['vocab_fingerprint'] == theirs['vocab_fingerprint']
  saved = json.load(open(os.path.join(workdir, 'electra@modern', 'config.json')))
  assert saved['model']['backbone'] == 'modern' and saved['data']['records'] == built
  lines.clear()
  again = compare.compare(config, ft, workdir, ('electra', 'electra@modern'), electra_steps=2,
                          log=lines.append, variants={'modern': modern})
  assert [r['downstream'] for r in again] == [r['downstream'] for r in rows]
  assert sum('summary.json read back' in l for l in lines) == 2, lines
  assert not any('writing' in l and 'shards' in l for l in lines), lines
