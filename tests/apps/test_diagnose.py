"""Representation statistics of checkpoints (launch/diagnose.py): the measures, then end to end."""

import json
import os

import numpy as np
import pytest

from conftest import test_config
from electra_jax import UserError
from electra_jax.apps import diagnose


@pytest.mark.fast
def test_the_measures_on_vectors_whose_answer_is_known():
  rng = np.random.default_rng(0)
  same = np.tile(rng.normal(size=(1, 16)), (50, 1))
  assert diagnose.mean_cosine(same) == pytest.approx(1.0)
  assert diagnose.mean_cosine(np.eye(16)) == pytest.approx(0.0)
  spread = rng.normal(size=(4000, 16))
  assert abs(diagnose.mean_cosine(spread)) < 0.01
  assert diagnose.effective_rank(spread) > 15  # isotropic: all 16 directions
  flat = rng.normal(size=(4000, 3)) @ rng.normal(size=(3, 16))  # three directions only
  assert 2 < diagnose.effective_rank(flat) <= 3.01
  assert diagnose.effective_rank(same) == 1.0
  q = np.zeros((2, 5, 2, 4))
  k = rng.normal(size=(2, 5, 2, 4))
  mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
  assert diagnose.attention_entropy(q, k, mask) == pytest.approx(1.0)  # uniform over real keys
  k[..., 0] = 0
  k[:, 1, :, 0] = 50.0  # every query looks at key 1 alone
  q[..., 0] = 1.0
  assert diagnose.attention_entropy(q, k, mask) < 1e-6
  # a row packing two sequences, and a local layer's window: uniform over the keys each query
  # may see is 1 (over every real key it would be less)
  q, k = np.zeros((1, 8, 1, 4)), rng.normal(size=(1, 8, 1, 4))
  packed = np.array([[1, 1, 1, 2, 2, 2, 2, 0]])
  assert diagnose.attention_entropy(q, k, packed) == pytest.approx(1.0)
  assert diagnose.attention_entropy(q, k, packed, window=2) == pytest.approx(1.0)
  k[0, 4, 0, 0], q[..., 0] = 50.0, 1.0  # every query of the second sequence looks at key 4
  partial = diagnose.attention_entropy(q, k, packed, window=2)
  assert 0.3 < partial < 0.8  # (the first sequence, and the window's edges, still uniform)


@pytest.mark.fast
def test_the_linear_probe_finds_separable_classes_and_not_labels_without_features():
  rng = np.random.default_rng(0)
  centers = rng.normal(size=(3, 20)) * 3
  labels = rng.integers(0, 3, size=600)
  x = centers[labels] + rng.normal(size=(600, 20)) + 50.0  # far from 0: the probe standardizes
  assert diagnose.softmax_probe(x[:400], labels[:400], x[400:], labels[400:], 3) > 0.95
  noise = rng.integers(0, 3, size=600)  # labels that no feature predicts: chance on new data
  assert diagnose.softmax_probe(x[:400], noise[:400], x[400:], noise[400:], 3) < 0.45


LAYERS = test_config().model.num_layers  # of the `pretrained` fixture's model


def test_a_workdir_is_measured_at_its_initial_weights_and_its_checkpoints(pretrained, tmp_path):
  lines = []
  out = diagnose.diagnose(pretrained, num_batches=1, batch_size=8, log=lines.append,
                          probe='builtin_topic')
  assert sorted(out['steps']) == [0, 4]
  for step, rows in out['steps'].items():
    assert [r['layer'] for r in rows] == list(range(LAYERS + 1))  # the embeddings, then each layer
    for r in rows:
      assert r['norm'] > 0 and -1 <= r['cosine'] <= 1 and 1 <= r['rank'] <= 32
      assert 1 <= r['cls_rank'] <= 8
    for r in rows[1:]:
      assert 0 < r["attention_entropy"] <= 1 + 1e-6 and r["weight_norm"] > 0
  # Post-LayerNorm outputs: every token vector has a norm near sqrt(width) (16 for the embeddings,
  # 32 for the layers): LayerNorm's gain starts at 1 and four steps move it little.
  for rows in out['steps'].values():
    assert [round(r['norm']) for r in rows] == [4] + [6] * LAYERS, rows
  # Four steps of AdamW move the weights: the statistics of step 4 are not those of step 0.
  assert out['steps'][4][LAYERS]['weight_norm'] != out['steps'][0][LAYERS]['weight_norm']
  assert lines[0].startswith('step 0 (random initial weights)') and '| emb |' in lines[0]
  saved = json.load(open(os.path.join(pretrained, 'diagnose.json')))
  assert saved['steps']['4'][1]['cosine'] == pytest.approx(out['steps'][4][1]['cosine'])
  # the probe: dev accuracy per layer (the embeddings, then each layer) and of [CLS], at every step
  probe = out['probe']
  assert probe['task'] == 'builtin_topic' and probe['train'] > 1000 and probe['dev'] > 100
  assert sorted(probe['steps']) == [0, 4]
  for accuracies in probe['steps'].values():
    assert len(accuracies) == LAYERS + 2 and all(0 <= a <= 1 for a in accuracies)
    assert max(accuracies) > 1.5 / 9  # 9 topics; the test vocabulary still tells some apart
  assert any(l.startswith('probe, step 4, dev accuracy of the mean per layer | emb: ')
             for l in lines), lines
  assert saved['probe']['steps']['4'] == pytest.approx(probe['steps'][4])
  with pytest.raises(UserError, match='is not a pre-training workdir'):
    diagnose.diagnose(str(tmp_path), log=lambda *_: None)
  with pytest.raises(UserError, match='not a GLUE task'):
    diagnose.diagnose(pretrained, num_batches=1, batch_size=8, log=lambda *_: None,
                      probe='no_such_task')


def test_the_probe_reads_a_folder_of_csv_files_as_a_suite_task(pretrained, tmp_path):
  """--probe=<folder>: its train.csv and dev.csv (text, label), as build_tasks.py writes a suite's
  tasks, encoded with the pre-training's vocabulary; a path that is no folder, or a folder
  without dev.csv, is one sentence."""
  from electra_jax.config import pretraining as config_lib
  config = config_lib.complete(json.load(open(os.path.join(pretrained, 'config.json'))))
  folder = tmp_path / 'colours'
  folder.mkdir()
  words = {'red': 'the cat sat on red', 'blue': 'a dog ran to blue'}
  for split, n in (('train', 40), ('dev', 10)):
    rows = ['text,label'] + [f'{words[c]} {i},{c}' for i in range(n) for c in sorted(words)]
    (folder / f'{split}.csv').write_text('\n'.join(rows) + '\n')
  task, data = diagnose._probe_data(config, pretrained, str(folder))
  assert task.name == 'colours' and task.labels == ('blue', 'red') and task.kind == 'classification'
  assert len(data['train']) == 80 and len(data['dev']) == 20
  assert data['train'].labels.tolist() == [0, 1] * 40  # rows in file order, classes by name
  assert data['train'].input_ids.shape[1] == config.data.max_seq_length
  with pytest.raises(UserError, match=r'--probe=.*nothere is no folder; give a folder holding '
                     'train.csv and dev.csv, or a task name'):
    diagnose._probe_data(config, pretrained, str(tmp_path / 'nothere'))
  (folder / 'dev.csv').unlink()
  with pytest.raises(UserError, match=r'dev.csv does not exist'):
    diagnose._probe_data(config, pretrained, str(folder))
