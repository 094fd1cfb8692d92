"""Parity with HF transformers (PyTorch) on the same weights, and exact round trips."""

import dataclasses
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import HAS_ONNX, ROOT, assert_onnx_agrees, test_config
from conftest import topic_dev_examples
from electra_jax.config.pretraining import parse
from electra_jax.convert import hf
from electra_jax.model import networks as model_lib
from electra_jax.data.synthetic import synthetic_batch
from electra_jax.train import partitioning

torch = pytest.importorskip('torch',
                            reason='parity tests need the test extra: pip install -e ".[test]"')
transformers = pytest.importorskip('transformers', reason='parity tests need the test extra')

LAYOUTS = {
    # Small's layout: embeddings narrower than the discriminator (embeddings_project), a generator
    # of a quarter width; Base's: embeddings as wide as the discriminator.
    'small': {'model.embedding_size': 16, 'model.hidden_size': 64,
              'model.generator_hidden_fraction': 0.25},
    'base': {'model.embedding_size': 64, 'model.hidden_size': 64,
             'model.generator_hidden_fraction': 1 / 2},
}


def _model(layout):
  cfg = model_lib.ModelConfig.from_config(test_config(**LAYOUTS[layout]).model)
  cfg = dataclasses.replace(cfg, num_heads=2, intermediate_size=4 * cfg.hidden_size)
  return cfg, model_lib.init_params(cfg, jax.random.key(1))


def _batch():
  b = synthetic_batch(4, 32, 96, seed=3)
  b['input_mask'][1, 20:] = 0  # padding in two rows, two segments everywhere
  b['input_mask'][3, 9:] = 0
  b['input_ids'] = np.where(b['input_mask'] > 0, b['input_ids'], 0)
  b['segment_ids'] = np.where(b['input_mask'] > 0, b['segment_ids'], 0)
  return b


def _hf_model(cfg, params, network):
  config = transformers.ElectraConfig(**{k: v for k, v in hf.hf_config(cfg, network).items()
                                         if k not in ('model_type', 'architectures')})
  cls = (transformers.ElectraForPreTraining if network == 'discriminator'
         else transformers.ElectraForMaskedLM)
  model = cls(config).eval()
  state = {k: torch.from_numpy(np.array(v)) for k, v in
           hf.to_hf(params, cfg, network).items()}
  missing, unexpected = model.load_state_dict(state, strict=False)
  assert not unexpected, unexpected
  assert set(missing) <= {'electra.embeddings.position_ids'}, missing
  return model


@pytest.mark.parametrize('layout', sorted(LAYOUTS))
def test_discriminator_and_generator_logits_equal_hf_transformers(layout):
  cfg, params = _model(layout)
  b = _batch()
  model = model_lib.Electra(cfg)
  positions = jnp.broadcast_to(jnp.arange(32), (4, 32))
  ours_gen, ours_disc = jax.jit(model.apply)({'params': params}, b['input_ids'], b['segment_ids'],
                                             b['input_mask'], positions)
  inputs = {'input_ids': torch.from_numpy(b['input_ids']).long(),
            'attention_mask': torch.from_numpy(b['input_mask']).long(),
            'token_type_ids': torch.from_numpy(b['segment_ids']).long()}
  with torch.no_grad():
    theirs_disc = _hf_model(cfg, params, 'discriminator')(**inputs).logits.numpy()
    theirs_gen = _hf_model(cfg, params, 'generator')(**inputs).logits.numpy()
  real = b['input_mask'] > 0
  np.testing.assert_allclose(np.asarray(ours_disc)[real], theirs_disc[real], atol=1e-4)
  np.testing.assert_allclose(np.asarray(ours_gen)[real], theirs_gen[real], atol=1e-4)
  assert np.abs(theirs_gen).max() > 0.1  # not a comparison of zeros


@pytest.mark.fast
@pytest.mark.parametrize('layout', sorted(LAYOUTS))
def test_ours_to_hf_to_ours_is_exact(layout):
  cfg, params = _model(layout)
  states = {n: hf.to_hf(params, cfg, n) for n in ('discriminator', 'generator')}
  back = hf.from_hf(states, cfg)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(back)):
    np.testing.assert_array_equal(np.asarray(a), b)
  assert jax.tree.structure(params) == jax.tree.structure(back)


@pytest.mark.fast
def test_hf_weights_of_another_size_or_missing_are_named():
  cfg, params = _model('small')
  states = {n: hf.to_hf(params, cfg, n) for n in ('discriminator', 'generator')}
  wider = dataclasses.replace(cfg, hidden_size=128, intermediate_size=512)
  with pytest.raises(ValueError, match=r'electra.embeddings_project.weight has shape \(64, 16\), '
                     r'the config wants \(128, 16\)'):
    hf.from_hf(states, wider)
  del states['generator']['generator_lm_head.bias']
  with pytest.raises(ValueError, match='the HF generator has no parameter generator_lm_head.bias'):
    hf.from_hf(states, cfg)
  with pytest.raises(ValueError, match='not converted, e.g. generator'):
    hf.from_hf({'discriminator': states['discriminator']}, cfg)


# ================================================================================================
# Folders: export, tokenizers, import (HF and the original release)
# ================================================================================================

from electra_jax import UserError  # noqa: E402
from electra_jax.convert import original  # noqa: E402
from electra_jax.convert import sources  # noqa: E402
from electra_jax.convert import vocab as vocab_lib  # noqa: E402
from electra_jax.data import records as records_lib  # noqa: E402
from electra_jax.data import tokenizer as tokenizer_lib  # noqa: E402
from electra_jax.finetune import pretrained as finetune_pretrained  # noqa: E402
from electra_jax.apps import export as export_lib  # noqa: E402
from electra_jax.train import checkpoint as checkpoint_lib  # noqa: E402
from electra_jax.pretraining import init_from  # noqa: E402
from electra_jax.pretraining import preflight  # noqa: E402
from electra_jax.pretraining import run as pretrain  # noqa: E402
from electra_jax.pretraining import setup as pretrain_setup  # noqa: E402
from electra_jax.train import step as step_lib  # noqa: E402

TEXTS = ['The cat sat on a mat, while dogs ran past green trees.',
         '  Kings   build castles;\tmerchants sell silk!\n',
         'Café Ünïcödé naïve façade — “quotes” and ½ ﬁve ① ＡＢＣ 日本語 😀',
         'UPPER lower MiXeD 12345 1,111 3.14159 e-mail@example.com (brackets) [x] {y}', '', ' ']


@pytest.fixture(scope='module')
def export_result(pretrained, tmp_path_factory):
  out = str(tmp_path_factory.mktemp('export') / 'hf')
  return export_lib.export(pretrained, out, log=lambda *_: None)


@pytest.fixture(scope='module')
def exported(export_result):
  return os.path.dirname(export_result.folders[0])


def test_export_check_reports_agreement_with_hf(export_result):
  lines = []
  result = export_lib.verify(export_result, lines.append, num_texts=8)
  assert sorted(result) == ['discriminator', 'generator'] and len(lines) == 2
  for values in result.values():
    assert values['max_abs_diff'] < 1e-4 and values['max_abs_logit'] > 0.01
    assert values['same_ids'] >= 0.99 * values['texts'] and values['texts'] == 2000


@pytest.mark.skipif(not HAS_ONNX, reason='needs the onnx extra (in the test extra)')
def test_an_onnx_export_runs_in_onnx_runtime_with_our_logits(pretrained, tmp_path):
  """launch/export.py --onnx: each network's folder holds onnx/model.onnx beside its config.json
  and tokenizer.json (onnx-community's layout), and ONNX Runtime gives our logits on batches of
  sizes and lengths the export never traced (what --check runs)."""
  lines = []
  done = export_lib.export(pretrained, str(tmp_path / 'hf'), log=lines.append, onnx=True)
  for folder in done.folders:
    assert {'config.json', 'tokenizer.json', 'onnx'} <= set(os.listdir(folder))
    assert os.listdir(os.path.join(folder, 'onnx')) == ['model.onnx']
  assert sum('onnx/model.onnx: inputs input_ids, token_type_ids, attention_mask; outputs logits'
             in l for l in lines) == 2, lines
  result = export_lib.verify(done, lines.append, num_texts=8)
  assert sorted(result) == ['discriminator', 'generator']
  for values in result.values():
    assert_onnx_agrees(values)


def _workdir_model(workdir):
  import ml_collections
  with open(os.path.join(workdir, 'config.json')) as f:
    config = ml_collections.ConfigDict(json.load(f))
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'))
  state, _ = ckpt.restore_arrays(ckpt.latest_step())
  ckpt.close()
  _, _, vocab = records_lib.workdir_vocab(workdir, config)
  return config, model_lib.ModelConfig.from_config(config.model), state['params'], vocab


def _same_ids(ours, theirs: list[int], text: str):
  assert ours.encode(text) == theirs, text


def test_export_loads_in_hf_transformers_with_our_ids_and_logits(pretrained, exported):
  config, cfg, params, vocab = _workdir_model(pretrained)
  ours = tokenizer_lib.load_tokenizer(vocab, config.data.lower_case)
  assert sorted(os.listdir(exported)) == ['discriminator', 'generator']
  tok = transformers.AutoTokenizer.from_pretrained(os.path.join(exported, 'discriminator'))
  for text in TEXTS:
    _same_ids(ours, tok(text, add_special_tokens=False)['input_ids'], text)
  pair = tok(TEXTS[0], TEXTS[1])
  s = ours.special
  assert pair['input_ids'] == [s.cls] + ours.encode(TEXTS[0]) + [s.sep] + ours.encode(
      TEXTS[1]) + [s.sep]
  assert pair['token_type_ids'] == [0] * (len(ours.encode(TEXTS[0])) + 2) + [1] * (
      len(ours.encode(TEXTS[1])) + 1)
  assert tok.mask_token_id == s.mask and tok.pad_token_id == s.pad

  batch = tok(TEXTS[:4], TEXTS[1:5], padding=True, truncation=True, max_length=32,
              return_tensors='np')
  ids, segments, mask = batch['input_ids'], batch['token_type_ids'], batch['attention_mask']
  gen, disc = model_lib.Electra(cfg).apply(
      {'params': params}, ids, segments, mask, np.broadcast_to(np.arange(ids.shape[1]), ids.shape))
  real = mask > 0
  inputs = {k: torch.from_numpy(v).long() for k, v in batch.items()}
  with torch.no_grad():
    theirs_disc = transformers.ElectraForPreTraining.from_pretrained(
        os.path.join(exported, 'discriminator')).eval()(**inputs).logits.numpy()
    theirs_gen = transformers.ElectraForMaskedLM.from_pretrained(
        os.path.join(exported, 'generator')).eval()(**inputs).logits.numpy()
  np.testing.assert_allclose(np.asarray(disc)[real], theirs_disc[real], atol=1e-4)
  np.testing.assert_allclose(np.asarray(gen)[real], theirs_gen[real], atol=1e-4)


@pytest.mark.fast
def test_wordpiece_vocabulary_exports_with_the_same_ids(tmp_path):
  words = sorted({w.strip('.,;!') for t in TEXTS for w in t.lower().split()} - {''})
  lines = (['[PAD]', '[unused0]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] + list('abcdefghijklmnop')
           + ['##' + c for c in 'abcdefghijklmnopqrstuvwxyz'] + list('.,;!?()[]{}-12345') + words)
  path = tmp_path / 'vocab.txt'
  path.write_text('\n'.join(dict.fromkeys(lines)) + '\n')
  for lower_case in (True, False):
    ours = tokenizer_lib.load_tokenizer(str(path), lower_case)
    folder = tmp_path / f'hf_{lower_case}'
    folder.mkdir()
    vocab_lib.write(ours, str(folder), lower_case, 512)
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    for text in TEXTS:
      assert tok(text, add_special_tokens=False)['input_ids'] == ours.encode(text), text
    assert tok('a b')['input_ids'] == [3] + ours.encode('a b') + [4]
    assert ours.encode('Kings') != ours.encode('kings') or lower_case


def test_sentencepiece_export_matches_on_random_text(exported, pretrained):
  _, _, _, vocab = _workdir_model(pretrained)
  ours = tokenizer_lib.load_tokenizer(vocab)
  tok = vocab_lib.hf_tokenizer(ours)
  rng = np.random.default_rng(0)
  alphabet = list('abcdefghij XYZ  \t\n.,;:!?\'"-()éüßñ日本ﬁ½\u00a0\u3000') + ['the ', 'cat ', '11']
  for _ in range(300):
    text = ''.join(rng.choice(alphabet, rng.integers(1, 30)))
    _same_ids(ours, tok.encode(text, add_special_tokens=False).ids, text)


def test_a_sentencepiece_export_gives_our_ids_on_the_whole_builtin_corpus_and_random_text(
    tmp_path):
  """With the demo's vocabulary size, on every sentence of the built-in corpus and on random
  text, ties between segmentations of equal score included (runs of '=', '_', '.0'), which
  SentencePiece's own encoder breaks differently: HF transformers' AutoTokenizer gives our ids."""
  from electra_jax.data import corpus
  lines = [l for l in corpus.builtin_lines() if l.strip()]
  path = str(tmp_path / 'vocab.model')
  tokenizer_lib.train_sentencepiece(iter(lines), path, 4096, lower_case=True, seed=0)
  ours = tokenizer_lib.load_tokenizer(path)
  (tmp_path / 'hf').mkdir()
  vocab_lib.write(ours, str(tmp_path / 'hf'), True, 512)
  tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / 'hf'))
  rng = np.random.default_rng(0)
  alphabet = list('abcdefghij XYZ  \t\n.,;:!?\'"-_=+|()éüßñ日本ﬁ½\u00a0\u3000') + [
      'the ', 'cat ', '11', '==', '___', '.0', '-+-']
  texts = lines + [''.join(rng.choice(alphabet, rng.integers(1, 40))) for _ in range(3000)]
  mine = ours.encode_batch(texts)
  theirs = tok(texts, add_special_tokens=False)['input_ids']
  assert [i for i in range(len(texts)) if mine[i] != theirs[i]] == []
  ties = [t for t, m in zip(lines, mine) if ours._sp.encode(t) != m]
  assert ties and all(sorted(ours._sp.encode(t)) == sorted(ours.encode(t)) for t in ties)


def test_import_of_an_export_is_exact_and_reads_the_sizes(pretrained, exported, tmp_path):
  config, cfg, params, vocab = _workdir_model(pretrained)
  source = sources.open_source(exported)
  assert source.has_generator and source.has_head and not source.notes
  for key, value in source.fields.items():
    assert getattr(cfg, key) == value, key
  assert tokenizer_lib.file_fingerprint(source.vocab) == tokenizer_lib.file_fingerprint(vocab)
  back = source.params(cfg)
  assert jax.tree.structure(back) == jax.tree.structure(params)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(back)):
    np.testing.assert_array_equal(np.asarray(a), b)
  # Fine-tuning from the export starts from the same discriminator as from the workdir.
  from_export = finetune_pretrained.load(exported, log=lambda *_: None)
  for name in ('embeddings', 'discriminator'):
    for a, b in zip(jax.tree.leaves(params[name]), jax.tree.leaves(from_export.params[name])):
      np.testing.assert_array_equal(np.asarray(a), b)
  assert from_export.model_cfg.hidden_size == cfg.hidden_size
  # Its dropout rates are its config.json's: what a fine-tuning's dropout_rate=-1 takes (it took
  # 0.1 whatever the folder said).
  from electra_jax.finetune import config as ft_config
  copy = tmp_path / 'no_dropout'
  shutil.copytree(exported, copy)
  hf_config = json.loads((copy / 'discriminator' / 'config.json').read_text())
  hf_config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.05)
  (copy / 'discriminator' / 'config.json').write_text(json.dumps(hf_config))
  loaded = finetune_pretrained.load(str(copy), log=lambda *_: None).model_cfg
  assert (loaded.dropout_rate, loaded.attention_dropout_rate) == (0.0, 0.05)
  assert ft_config.dropout_rate(ft_config.default_config(), loaded) == 0.0
  # Another run's workdir is a source too (its latest checkpoint), with the same weights.
  from_workdir = init_from.open_source(pretrained)
  assert from_workdir.fields['generator_hidden_fraction'] == cfg.generator_hidden_fraction
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(from_workdir.params(cfg))):
    np.testing.assert_array_equal(np.asarray(a), b)


def test_hf_electra_model_without_heads_or_generator_imports_its_encoder(pretrained, tmp_path):
  _, cfg, params, _ = _workdir_model(pretrained)
  config = transformers.ElectraConfig(**{k: v for k, v in hf.hf_config(cfg, 'discriminator').items()
                                         if k not in ('model_type', 'architectures')})
  model = transformers.ElectraModel(config)
  state = {k[len('electra.'):]: torch.from_numpy(np.array(v)) for k, v in
           hf.encoder_to_hf(params, cfg).items()}
  model.load_state_dict(state, strict=False)
  model.save_pretrained(str(tmp_path / 'encoder'))  # names without 'electra.', no heads
  source = sources.open_source(str(tmp_path / 'encoder'),
                               vocab=_workdir_model(pretrained)[3])
  assert not source.has_generator and not source.has_head
  assert 'generator: fresh weights' in source.describe()
  fresh = model_lib.init_params(cfg, jax.random.key(7))
  got = source.params(cfg, fill=fresh)
  for name in ('embeddings', 'discriminator'):
    for a, b in zip(jax.tree.leaves(params[name]), jax.tree.leaves(got[name])):
      np.testing.assert_array_equal(np.asarray(a), b)
  for name in ('generator', 'discriminator_predictions'):
    for a, b in zip(jax.tree.leaves(fresh[name]), jax.tree.leaves(got[name])):
      np.testing.assert_array_equal(np.asarray(a), b)
  with pytest.raises(ValueError, match='has no parameter discriminator_predictions.dense.weight'):
    source.params(cfg)  # without fresh weights to fill in, the missing head is named
  # The same weights as an older PyTorch pickle (pytorch_model.bin) read the same.
  shutil.copytree(tmp_path / 'encoder', tmp_path / 'bin')
  os.remove(tmp_path / 'bin' / 'model.safetensors')
  torch.save(model.state_dict(), tmp_path / 'bin' / 'pytorch_model.bin')
  from_bin = sources.open_source(str(tmp_path / 'bin'), vocab=source.vocab).params(cfg, fill=fresh)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(from_bin)):
    np.testing.assert_array_equal(a, b)


def _write_original(folder, params, cfg, pad_rows=0):
  """An original-release checkpoint of `params` (TF1 names, Adam slots, global_step) + vocab."""
  import tensorflow as tf
  names, values = [], []
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    ours = tuple(k.key for k in path)
    value = np.asarray(leaf, np.float32)
    if ours[-1] in ('word_embeddings', 'output_bias') and pad_rows:
      value = np.concatenate([value, np.full((pad_rows,) + value.shape[1:], 9.0, np.float32)])
    name = original.variable_name(ours)
    names += [name, f'{name}/adam_m', f'{name}/adam_v']
    values += [value, np.zeros_like(value), np.zeros_like(value)]
  assert len(set(names)) == len(names)
  os.makedirs(folder)
  tf.raw_ops.SaveV2(prefix=os.path.join(folder, 'model.ckpt-7'),
                    tensor_names=names + ['global_step'],
                    shape_and_slices=[''] * (len(names) + 1), tensors=values + [np.int64(7)])
  with open(os.path.join(folder, 'checkpoint'), 'w') as f:
    f.write('model_checkpoint_path: "model.ckpt-7"\n')
  return folder


def test_original_checkpoint_imports_with_its_generator_size_and_padded_vocabulary(
    pretrained, records_dir, tmp_path):
  config, cfg, _, vocab = _workdir_model(pretrained)
  # A full-width generator (as ELECTRA-Small++), where the preset has a half-width one.
  full = dataclasses.replace(cfg, generator_hidden_fraction=1.0)
  params = model_lib.init_params(full, jax.random.key(3))
  folder = _write_original(str(tmp_path / 'electra_test'), params, full, pad_rows=32)
  shutil.copyfile(vocab, os.path.join(folder, 'vocab.model'))
  source = sources.open_source(folder)
  assert source.table_rows == cfg.vocab_size + 32 and source.fields['vocab_size'] == cfg.vocab_size
  assert source.fields['generator_hidden_fraction'] == 1.0 and 'num_heads' not in source.fields
  assert any('32 padding rows are dropped' in n for n in source.notes)
  got = source.params(full)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(got)):
    np.testing.assert_array_equal(np.asarray(a), b)
  # The same checkpoint exported for HF transformers, and read back: the same weights again.
  export_lib.export(folder, str(tmp_path / 'hf'), log=lambda *_: None)
  again = sources.open_source(str(tmp_path / 'hf'))
  assert again.fields['generator_hidden_fraction'] == 1.0 and again.table_rows == cfg.vocab_size
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(again.params(full))):
    np.testing.assert_array_equal(np.asarray(a), b)
  # Prompted zero-shot, the original checkpoint and its HF export give the same answers.
  from electra_jax.config import files as config_files
  from electra_jax.apps import zeroshot
  prompt_cfg = config_files.load_config_file(f'{ROOT}/configs/finetune/builtin.py:topic')
  prompt_cfg.max_seq_length = 32
  prompted = [zeroshot.evaluate(prompt_cfg, init, batch_size=64, log=lambda *_: None)
              for init in (folder, str(tmp_path / 'hf'))]
  assert prompted[0] == prompted[1] and prompted[0]['examples'] == topic_dev_examples()

  # Pre-training from it: the config's generator width is replaced by the checkpoint's, and the
  # run's first state holds the checkpoint's weights.
  lines = []
  given = test_config(**{'data.records': records_dir, 'init_from': folder})
  mesh = partitioning.make_mesh()
  run_config, source = preflight.configure(given, mesh, lines.append)
  assert run_config.model.generator_hidden_fraction == 1.0
  assert run_config.as_json['model']['generator_hidden_fraction'] == 1.0  # config.json's too
  assert given.model.generator_hidden_fraction == 0.5 and not given.data.vocab  # left as given
  assert any('generator_hidden_fraction 0.5 -> 1.0' in l for l in lines), lines
  assert run_config.data.vocab == os.path.join(folder, 'vocab.model')
  setup = pretrain_setup.build_setup(run_config, tokenizer_lib.load_tokenizer(vocab).special)
  init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
  state = pretrain.start_from(setup, init_fn(), source)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(state.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  moments = [x for x in jax.tree.leaves(state.opt_state) if x.size]
  assert int(state.step) == 0 and moments and all(not np.asarray(x).any() for x in moments)

  # End to end: a short run from it, then fine-tuning's loader reads it too.
  summary = pretrain.train_and_evaluate(test_config(**{'data.records': records_dir,
                                                    'init_from': folder, 'train_steps': 2}),
                                     str(tmp_path / 'continued'), log=lines.append)
  assert summary['step'] == 2 and any(l.startswith('initial weights: original TensorFlow') for l in
                                      lines), lines
  loaded = finetune_pretrained.load(folder, log=lambda *_: None)
  np.testing.assert_array_equal(loaded.params['embeddings']['word_embeddings'],
                                params['embeddings']['word_embeddings'][:cfg.vocab_size])


def test_bad_sources_are_one_sentence(pretrained, exported, tmp_path):
  _, cfg, _, vocab = _workdir_model(pretrained)
  with pytest.raises(FileNotFoundError, match='does not exist; give an HF transformers folder'):
    sources.open_source(str(tmp_path / 'nowhere'))
  with pytest.raises(ValueError, match='holds no model'):
    sources.open_source(str(tmp_path))
  bert = tmp_path / 'bert'
  bert.mkdir()
  (bert / 'config.json').write_text(json.dumps({'model_type': 'bert',
                                                'architectures': ['BertForMaskedLM']}))
  with pytest.raises(ValueError, match="holds a 'bert' model \\(BertForMaskedLM\\), neither "
                     'ELECTRA nor ModernBERT'):
    sources.open_source(str(bert))
  with pytest.raises(ValueError, match='holds an ELECTRA generator'):
    sources.open_source(os.path.join(exported, 'generator'))
  big = tmp_path / 'big.txt'  # a vocabulary larger than the embedding table
  big.write_text('\n'.join(list(tokenizer_lib.SPECIAL_TOKENS) + [f'w{i}' for i in range(200)]))
  with pytest.raises(ValueError, match=f'has 205 entries but the embedding table of .* has '
                     f'{cfg.vocab_size} rows'):
    sources.open_source(exported, vocab=str(big))
  wider = test_config(**{'init_from': exported, 'model.hidden_size': 64})
  with pytest.raises(UserError,
                     match=r'other sizes than the config: hidden_size 32 \(config: 64\)'):
    preflight.configure(wider, partitioning.make_mesh(), lambda *_: None)
  with pytest.raises(UserError, match='exists and is not empty'):
    export_lib.export(pretrained, exported)
  with pytest.raises(UserError, match='not a workdir of launch/train.py'):
    export_lib.export(str(tmp_path), str(tmp_path / 'out'))
  assert not os.path.exists(tmp_path / 'out') and not os.path.exists(tmp_path / 'out.partial')


@pytest.mark.fast
def test_gdes_exports_the_discriminators_own_word_table(tmp_path):
  cfg, params = _model('small')
  cfg = dataclasses.replace(cfg, gdes=True)
  params = {**params, 'embeddings_residual': 0.01 * np.asarray(jax.random.normal(
      jax.random.key(5), params['embeddings']['word_embeddings'].shape))}
  b = _batch()
  inputs = {'input_ids': torch.from_numpy(b['input_ids']).long(),
            'attention_mask': torch.from_numpy(b['input_mask']).long(),
            'token_type_ids': torch.from_numpy(b['segment_ids']).long()}
  ours = model_lib.Electra(cfg).apply({'params': params}, b['input_ids'], b['segment_ids'],
                                      b['input_mask'],
                                      method=model_lib.Electra.discriminator_logits)
  with torch.no_grad():
    theirs = _hf_model(cfg, params, 'discriminator')(**inputs).logits.numpy()
  real = b['input_mask'] > 0
  np.testing.assert_allclose(np.asarray(ours)[real], theirs[real], atol=1e-4)
  states = {n: hf.to_hf(params, cfg, n) for n in ('discriminator', 'generator')}
  back = hf.from_hf(states, cfg)
  np.testing.assert_array_equal(back['embeddings']['word_embeddings'],
                                params['embeddings']['word_embeddings'])
  np.testing.assert_allclose(back['embeddings_residual'], params['embeddings_residual'], atol=1e-7)


def test_benchmark_peer_runs_the_same_step():
  """`benchmarks/benchmark.py --peer=hf`: the PyTorch step starts from the loss ours starts from
  (MLM near ln V plus 50 x detection near ln 2, with its own random weights) and is timed."""
  from benchmarks import step_benchmark as benchmark
  config = test_config()
  result = benchmark.benchmark(config, steps=1, warmup=1, repeats=2, peer='hf')
  peer = result['peer']
  assert len(peer['ms_per_step_runs']) == 2 and min(peer['ms_per_step_runs']) > 0
  assert result['speedup_over_peer'] > 0
  setup = pretrain_setup.build_setup(parse(config), tokenizer_lib.SPECIAL)
  batch = synthetic_batch(16, 32, config.model.vocab_size)
  ours = float(jax.jit(lambda: setup.loss_fn(setup.init_params(jax.random.key(0)), batch,
                                             jax.random.key(1))[0])())
  assert abs(peer['first_loss'] - ours) < 0.15 * ours, (peer['first_loss'], ours)
