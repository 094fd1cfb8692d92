"""A pre-training on the modern backbone, end to end: it resumes bit-identical, fine-tunes (packed),
and exports as HF's ModernBert classes with our logits."""

import json
import os

import pytest

from conftest import (HAS_ONNX, MODERN, OBJECTIVE_RUN, assert_onnx_agrees, assert_same_states,
                      cat_texts, test_config)
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
  done = export_lib.export(straight, str(tmp_path / 'hf'), log=lambda *_: None, onnx=HAS_ONNX)
  with open(os.path.join(done.folders[0], 'config.json')) as f:
    saved = json.load(f)
  assert saved['architectures'] == ['ModernBertForTokenClassification']
  assert saved['layer_types'] == ['full_attention', 'sliding_attention']
  result = export_lib.verify(done, log=lambda *_: None, num_texts=8)
  assert set(result) == {'discriminator', 'generator'}
  for network, checked in result.items():
    assert checked['max_abs_diff'] < 1e-4, network
    assert checked['same_ids'] == checked['texts'], network
    if HAS_ONNX:  # ModernBERT's local and global layers in ONNX Runtime, its rotary positions
      assert_onnx_agrees(checked)


def test_a_modern_run_is_diagnosed_layer_by_layer(modern_runs):
  """launch/diagnose.py on the modern backbone: each layer's statistics, its attention's entropy
  over the keys it may see (a local layer's window, each packed sequence's own, rotary
  positions)."""
  from electra_jax.apps import diagnose
  _, straight, _ = modern_runs
  out = diagnose.diagnose(straight, num_batches=1, batch_size=8, log=lambda *_: None)
  for rows in out['steps'].values():
    assert [r['layer'] for r in rows] == [0, 1, 2]
    for r in rows[1:]:
      assert 0 < r['attention_entropy'] <= 1 + 1e-6 and r['weight_norm'] > 0, r


def test_a_modern_pre_training_fine_tunes_packed(modern_runs, tmp_path):
  """The fine-tuning wing takes the modern encoder as it is (no branch on the backbone): a
  packed fine-tuning on words where 'cat' decides the label learns it, its head (dense, GELU,
  LayerNorm) started from the detection head's; it exports as ModernBertForSequenceClassification
  whose run of the dev file through HF's pipeline gives our label on every row."""
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
  pytest.importorskip('torch', reason='the check needs the test extra')
  from electra_jax.apps import export as export_lib
  done = export_lib.export(str(tmp_path / 'ft'), str(tmp_path / 'ft_hf'), log=lambda *_: None)
  with open(os.path.join(done.folders[0], 'config.json')) as f:
    saved = json.load(f)
  assert saved['architectures'] == ['ModernBertForSequenceClassification']
  assert 'auto_map' not in saved and saved['classifier_pooling'] == 'cls'
  checked = export_lib.verify(done, log=lambda *_: None, num_texts=8)['ft_hf']
  assert checked['max_abs_diff'] < 1e-4 and checked['dev']['agrees'], checked
  assert checked['dev']['rows'] == checked['dev']['same'] == 160, checked


@pytest.mark.fast
def test_the_modern_task_head_starts_from_the_pre_trained_head():
  """A modern fine-tuning's head before the classifier (HF's `head`) starts from the detection
  head's dense and LayerNorm, from the MLM head's where only that was trained (BERT MLM), and
  fresh where neither fits; the classifier is always fresh."""
  import jax
  import numpy as np
  from electra_jax.finetune.kinds import heads
  from electra_jax.model import networks as model_lib
  cfg = model_lib.ModelConfig.from_config(test_config(**MODERN).model)
  pretrained = model_lib.init_params(cfg, jax.random.key(1))
  model = heads.Classifier(cfg, 3)
  fresh = heads.init_params(model, jax.random.key(2))
  tuned = heads.init_params(model, jax.random.key(2), pretrained=pretrained)
  detection = pretrained['discriminator_predictions']
  for name in ('dense', 'LayerNorm'):
    for leaf, value in tuned['head'][name].items():
      np.testing.assert_array_equal(value, detection[name][leaf])
  np.testing.assert_array_equal(tuned['classifier']['kernel'], fresh['classifier']['kernel'])
  assert not np.array_equal(fresh['head']['dense']['kernel'], detection['dense']['kernel'])
  mlm = {k: v for k, v in pretrained.items() if k != 'discriminator_predictions'}
  mlm['generator_predictions'] = {'dense': detection['dense'], 'LayerNorm': detection['LayerNorm'],
                                  'output_bias': np.zeros(cfg.vocab_size, np.float32)}
  from_mlm = heads.init_params(model, jax.random.key(2), pretrained=mlm)
  np.testing.assert_array_equal(from_mlm['head']['dense']['kernel'], detection['dense']['kernel'])
  del mlm['generator_predictions']
  neither = heads.init_params(model, jax.random.key(2), pretrained=mlm)
  np.testing.assert_array_equal(neither['head']['dense']['kernel'],
                                fresh['head']['dense']['kernel'])


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


# ------------------------------------------------------------------------------------------------
# From a released ModernBERT: an HF folder (ModernBertForMaskedLM, its byte-level BPE tokenizer)
# ------------------------------------------------------------------------------------------------

# The HF model's sizes, as our fields (MODERN's: 2 layers of 32, 2 heads, a window of 8)
HF_SIZES = {'model.hidden_size': 32, 'model.embedding_size': 32, 'model.num_layers': 2,
            'model.num_heads': 2, 'model.intermediate_size': 48, 'model.local_window': 8,
            'model.max_position_embeddings': 128, 'model.layer_norm_eps': 1e-5,
            'model.rope_theta_global': 20_000.0, 'model.rope_theta_local': 5_000.0}


@pytest.fixture(scope='module')
def modernbert_folder(tmp_path_factory, corpus_file):
  """A ModernBertForMaskedLM of HF_SIZES with random weights, saved with a byte-level BPE
  tokenizer.json of 300 entries trained on the test corpus (its special tokens at ids of its own:
  [UNK]=0 [CLS]=1 [SEP]=2 [PAD]=3 [MASK]=4) and a word table of 320 rows."""
  torch = pytest.importorskip('torch', reason='the HF folder needs the test extra')
  import transformers
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  folder = tmp_path_factory.mktemp('modernbert')
  tok = Tokenizer(models.BPE(unk_token='[UNK]'))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  tok.train([corpus_file], trainers.BpeTrainer(
      vocab_size=300, special_tokens=['[UNK]', '[CLS]', '[SEP]', '[PAD]', '[MASK]'],
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
  tok.save(str(folder / 'tokenizer.json'))
  torch.manual_seed(0)
  config = transformers.ModernBertConfig(
      vocab_size=320, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
      num_attention_heads=2, local_attention=8, max_position_embeddings=128,
      layer_types=['full_attention', 'sliding_attention'],
      rope_parameters={'full_attention': {'rope_type': 'default', 'rope_theta': 20_000.0},
                       'sliding_attention': {'rope_type': 'default', 'rope_theta': 5_000.0}},
      pad_token_id=3, cls_token_id=1, sep_token_id=2, bos_token_id=1, eos_token_id=2,
      initializer_range=0.2)
  model = transformers.ModernBertForMaskedLM(config).eval()
  model.save_pretrained(str(folder))
  return str(folder), model


def test_a_modernbert_folder_gives_our_encoder_its_outputs(modernbert_folder):
  """The discriminator read from a ModernBertForMaskedLM folder (its encoder; the MLM head left
  out, the detection head fresh) gives ModernBertModel's hidden states within 1e-4; the table is
  cut to the tokenizer's 300 entries."""
  import jax
  import numpy as np
  import torch
  from electra_jax.model import networks as model_lib
  from electra_jax.pretraining import init_from

  folder, hf_model = modernbert_folder
  source = init_from.open_source(folder)
  assert source.fields['vocab_size'] == 300 and source.vocab.endswith('tokenizer.json')
  assert not source.has_head and not source.has_generator
  assert (source.fields['global_every'], source.fields['rope_theta_local']) == (2, 5_000.0)
  cfg = model_lib.ModelConfig(**source.fields, untied_generator_embeddings=True,
                              generator_hidden_fraction=0.5)
  params = source.params(cfg, fill=model_lib.init_params(cfg, jax.random.key(0), 16))
  ids = np.random.default_rng(0).integers(5, 300, (2, 40)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 30:] = 0
  ours = np.asarray(model_lib.Electra(cfg).apply(
      {'params': params}, ids, np.zeros_like(ids), mask,
      method=model_lib.Electra.discriminator_hidden))
  with torch.no_grad():
    theirs = hf_model.model(input_ids=torch.from_numpy(ids.astype(np.int64)),
                            attention_mask=torch.from_numpy(mask.astype(np.int64)))
  theirs = theirs.last_hidden_state.numpy()
  real = mask > 0
  np.testing.assert_allclose(ours[real], theirs[real], atol=1e-4)


def test_a_modernbert_folder_continued_by_rtd_exports_with_its_tokenizer(modernbert_folder,
                                                                          corpus_file, tmp_path):
  """`--config.init_from=<ModernBERT folder>`: records built with its tokenizer.json, a run on
  them, exported with that tokenizer, HF's pipeline giving our ids and logits."""
  from electra_jax.apps import export as export_lib
  from electra_jax.data import records
  folder, _ = modernbert_folder
  workdir = str(tmp_path / 'continued')
  lines = []
  pretrain.train_and_evaluate(test_config(**{
      **FIELDS, **HF_SIZES, 'model.global_every': 2, 'data.corpus': corpus_file,
      'data.pack_documents': True, 'init_from': folder, 'train_steps': 4}), workdir,
      log=lines.append)
  assert any(l.startswith('init_from: data.vocab ') and 'tokenizer.json' in l for l in lines)
  meta = records.read_metadata(os.path.join(workdir, 'data'))
  assert meta['vocab_file'] == 'tokenizer.json' and meta['vocab_size'] == 300
  assert meta['special_ids'] == {'pad': 3, 'unk': 0, 'cls': 1, 'sep': 2, 'mask': 4}
  done = export_lib.export(workdir, str(tmp_path / 'hf'), log=lambda *_: None)
  result = export_lib.verify(done, log=lambda *_: None, num_texts=8)
  for network, checked in result.items():
    assert checked['max_abs_diff'] < 1e-4, network
    assert checked['same_ids'] == checked['texts'], network


@pytest.mark.fast
def test_modernbert_configs_of_either_age_give_our_fields_or_one_sentence():
  from electra_jax.convert import hf
  old = {'model_type': 'modernbert', 'vocab_size': 50368, 'hidden_size': 768,
         'intermediate_size': 1152, 'num_hidden_layers': 22, 'num_attention_heads': 12,
         'max_position_embeddings': 8192, 'global_attn_every_n_layers': 3,
         'global_rope_theta': 160000.0, 'local_rope_theta': 10000.0, 'local_attention': 128,
         'norm_eps': 1e-5, 'norm_bias': False}
  fields = hf.model_fields(old)
  assert (fields['global_every'], fields['rope_theta_global'], fields['local_window'],
          fields['embedding_size']) == (3, 160000.0, 128, 768)
  pattern = ['full_attention' if i % 3 == 0 else 'sliding_attention' for i in range(22)]
  assert hf.model_fields({**old, 'layer_types': pattern})['global_every'] == 3
  with pytest.raises(ValueError, match='attends globally in its layers \\[0, 1, 3, '):
    hf.model_fields({**old, 'layer_types': ['full_attention'] * 2 + pattern[2:]})
  with pytest.raises(ValueError, match='has biases \\(norm_bias\\)'):
    hf.model_fields({**old, 'norm_bias': True})


def test_a_modern_squad_fine_tuning_exports_with_token_types_for_its_head(modern_runs, tmp_path):
  """A SQuAD 2.0 fine-tuning of the modern backbone exports as the ModernBERT class its folder
  ships, whose tokenizer gives the token types its head reads (the encoder takes none): the
  export's check agrees with our outputs."""
  pytest.importorskip('torch', reason='the check needs the test extra')
  from electra_jax.apps import export as export_lib
  from electra_jax.finetune import config as config_lib
  from electra_jax.finetune import run
  from test_squad import _synthetic_squad
  _, straight, _ = modern_runs
  cfg = config_lib.default_config()
  cfg.update(init=straight, batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=1.0,
             dropout_rate=0.0)
  cfg.task.update(name='squad2', train=_synthetic_squad(tmp_path / 'train.json', 64, 0, 0.3),
                  dev=_synthetic_squad(tmp_path / 'dev.json', 16, 1, 0.3))
  run.finetune(cfg, str(tmp_path / 'ft'), log=lambda *_: None)
  done = export_lib.export(str(tmp_path / 'ft'), str(tmp_path / 'hf'), log=lambda *_: None)
  with open(os.path.join(done.folders[0], 'config.json')) as f:
    assert json.load(f)['architectures'] == ['ModernBertSquadForQuestionAnswering']
  with open(os.path.join(done.folders[0], 'tokenizer_config.json')) as f:
    assert 'token_type_ids' in json.load(f)['model_input_names']
  checked = export_lib.verify(done, log=lambda *_: None, num_texts=8)['hf']
  assert checked['max_abs_diff'] < 1e-4 and checked['max_abs_logit'] > 0.01, checked
