"""Objectives at the same compute: the step budget per objective, and a comparison end to end."""

import json
import os

import pytest

from conftest import test_config
from electra_jax import compare
from electra_jax.finetune import config as ft_config_lib
from test_finetune import _synthetic


def test_every_run_gets_the_steps_of_the_same_flops():
  config = test_config(**{'model.vocab_size': 4096})  # a vocabulary that weighs in the FLOPs
  rows = {r['name']: r for r in compare.plan(config, list(compare.RUNS), 1000)}
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
  with pytest.raises(Exception, match="unknown run 'bert'"):
    compare.plan(config, ['bert'], 10)


def test_comparison_end_to_end_writes_one_table_and_resumes(tmp_path, records_dir):
  config = test_config(**{'data.records': records_dir})
  ft = ft_config_lib.default_config()
  ft.update(batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=1.0, num_seeds=1,
            log_every=50)
  ft.task.update(name='own', train=_synthetic(tmp_path / 'train.csv', 64, 'classification', 0),
                 dev=_synthetic(tmp_path / 'dev.csv', 32, 'classification', 1))
  workdir = str(tmp_path / 'cmp')
  lines = []
  rows = compare.compare(config, ft, workdir, ('electra', 'mlm'), electra_steps=3,
                         log=lines.append)
  assert [r['run'] for r in rows] == ['electra', 'mlm', 'random init']
  assert rows[0]['steps'] == 3 and rows[1]['steps'] >= 3 and 'disc_auc' in rows[0]
  assert 'disc_auc' not in rows[1] and 'mlm_loss' in rows[1]
  for r in rows:
    assert 0 <= r['downstream_median'] <= 1 and r['downstream_metric'] == 'dev/accuracy'
  table = open(os.path.join(workdir, 'comparison.md')).read()
  assert table.count('\n| ') == 4 and '| mlm | mlm |' in table  # header + 3 rows
  assert json.load(open(os.path.join(workdir, 'comparison.json')))[1]['run'] == 'mlm'
  # A second call reads the finished runs back: the same table, no fine-tuning again.
  again = compare.compare(config, ft, workdir, ('electra', 'mlm'), electra_steps=3,
                          log=lines.append)
  assert [r['downstream_median'] for r in again] == [r['downstream_median'] for r in rows]
