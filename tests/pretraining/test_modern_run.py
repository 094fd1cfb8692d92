"""A pre-training on the modern backbone, end to end: it resumes bit-identical, fine-tunes (packed),
and exports as HF's ModernBert classes with our logits."""

import json
import os

import pytest

from conftest import MODERN, OBJECTIVE_RUN, assert_same_states, cat_texts, test_config
from electra_jax.pretraining import run as pretrain

# a generator with a word table of its own width: exportable as ModernBertForMaskedLM
FIELDS = {**MODERN, **OBJECTIVE_RUN, 'model.untied_generator_embeddings': True}


@pytest.fixture(scope='module')
def modern_runs(tmp_path_factory, records_dir):
  """(config, a run straight to step 6, a run stopped at 4 and resumed to 6)."""
  root = tmp_path_factory.mktemp('modern')
  config = test_config(**{'data.records': records_dir, **FIELDS, 'train_steps': 6,
                          'model.dropout_rate': 0.1, 'model.attention_dropout_rate': 0.1})
  straight, resumed = str(root / 'straight'), str(root / 'resumed')
  lines = []
  pretrain.train_and_evaluate(config, straight, log=lines.append)
  stopped = config.copy_and_resolve_references()
  stopped.train_steps = 4
  pretrain.train_and_evaluate(stopped, resumed, log=lines.append)
  again = pretrain.train_and_evaluate(config, resumed, log=lines.append)
  assert again['step'] == 6 and any(l.startswith('resumed from') for l in lines)
  return config, straight, resumed


def test_a_modern_run_resumes_bit_identical(modern_runs):
  config, straight, resumed = modern_runs
  with open(os.path.join(straight, 'config.json')) as f:
    assert json.load(f)['model']['backbone'] == 'modern'
  assert_same_states(config, [straight, resumed], 6, 'resumed at step 4')


def test_a_modern_run_exports_as_modernbert_with_our_logits(modern_runs, tmp_path):
  pytest.importorskip('torch', reason='the check needs the test extra')
  from electra_jax.apps import export as export_lib
  _, straight, _ = modern_runs
  done = export_lib.export(straight, str(tmp_path / 'hf'), log=lambda *_: None)
  with open(os.path.join(done.folders[0], 'config.json')) as f:
    saved = json.load(f)
  assert saved['architectures'] == ['ModernBertForTokenClassification']
  assert saved['layer_types'] == ['full_attention', 'sliding_attention']
  result = export_lib.verify(done, log=lambda *_: None, num_texts=8)
  assert set(result) == {'discriminator', 'generator'}
  for network, checked in result.items():
    assert checked['max_abs_diff'] < 1e-4, network
    assert checked['same_ids'] == checked['texts'], network


def test_a_modern_pre_training_fine_tunes_packed(modern_runs, tmp_path):
  """The fine-tuning wing takes the modern encoder as it is (no branch on the backbone): a
  packed fine-tuning on words where 'cat' decides the label learns it."""
  from electra_jax.finetune import config as config_lib
  from electra_jax.finetune import run

  _, straight, _ = modern_runs
  cfg = config_lib.default_config()
  cfg.update(init=straight, batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=4.0,
             log_every=10, dropout_rate=0.0, packing=True)
  cfg.task.update(name='own', train=cat_texts(tmp_path / 'train.csv', 320, 0),
                  dev=cat_texts(tmp_path / 'dev.csv', 160, 1))
  cfg.optimizer.learning_rate = 2e-3
  lines = []
  result = run.finetune(cfg, str(tmp_path / 'ft'), log=lines.append)
  assert any(' examples a step packed in ' in line for line in lines), lines[:6]
  assert result['seeds'][0]['dev']['accuracy'] > 0.8


def test_a_run_on_packed_documents_learns_and_its_records_are_checked(corpus_file, tmp_path):
  """data.pack_documents: records of 128-token rows holding several documents each, a modern run
  on them whose MLM loss falls; the BERT backbone and records of the other kind are refused in
  one sentence each."""
  import numpy as np
  import tensorflow as tf
  from electra_jax import UserError
  from electra_jax.data import records

  fields = {**MODERN, **OBJECTIVE_RUN, 'data.corpus': corpus_file, 'data.max_seq_length': 128,
            'data.pack_documents': True, 'data.batch_size': 8, 'train_steps': 30,
            'model.max_position_embeddings': 128,
            'log_every': 10, 'eval_every': 0}
  workdir = str(tmp_path / 'packed')
  result = pretrain.train_and_evaluate(test_config(**fields), workdir, log=lambda *_: None)
  data = os.path.join(workdir, 'data')
  meta = records.read_metadata(data)
  assert meta['pack_documents'] is True
  shard = os.path.join(data, meta['splits']['train']['files'][0])
  masks = np.array([tf.train.Example.FromString(raw.numpy()).features.feature['input_mask']
                    .int64_list.value for raw in tf.data.TFRecordDataset(shard).take(8)])
  assert masks.shape == (8, 128) and masks.max() > 1 and (masks > 0).mean() > 0.9
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    losses = [r['mlm_loss'] for r in map(json.loads, f) if r['split'] == 'train']
  assert len(losses) == 3 and losses[-1] < losses[0] - 0.2, losses
  assert np.isfinite(result['eval']['loss'])
  with pytest.raises(UserError, match='set --config.model.backbone=modern'):
    pretrain.train_and_evaluate(test_config(**{**fields, 'model.backbone': 'bert'}),
                                str(tmp_path / 'bert'), log=lambda *_: None)
  with pytest.raises(UserError, match='--config.data.pack_documents=True or build new records'):
    pretrain.train_and_evaluate(test_config(**{**fields, 'data.pack_documents': False,
                                               'data.records': os.path.join(workdir, 'data')}),
                                str(tmp_path / 'other'), log=lambda *_: None)
