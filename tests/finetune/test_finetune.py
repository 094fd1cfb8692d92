"""Fine-tuning: scores, layer-wise decay, encoding, data files, GLUE loading, learning end to
end."""

import csv
import json
import os
import random
import re
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from conftest import (CHILD_ENV, HAS_HF, HAS_ONNX, MODERN, ROOT, WORDS, assert_onnx_agrees,
                      needs_hf, record_config_reads, script, test_config)
from electra_jax import UserError
from electra_jax import fields as fields_lib
from electra_jax.convert import hf as hf_lib
from electra_jax.data.tokenizer import SPECIAL
from electra_jax.finetune import config as config_lib
from electra_jax.finetune.inputs import encode as encode_lib
from electra_jax.finetune.inputs import files
from electra_jax.finetune.kinds import heads
from electra_jax.apps import predict as predict_lib
from electra_jax.finetune import pretrained as pretrained_lib
from electra_jax.finetune.kinds import registry
from electra_jax.finetune import run
from electra_jax.finetune.kinds import scores
from electra_jax.finetune.inputs import tasks as tasks_lib
from electra_jax.model import networks as model_lib
from electra_jax.storage import tf_import
from electra_jax.apps import export as export_lib
from electra_jax.apps import search
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import optim
from electra_jax.train.config import OptimizerConfig


# ---- scores
# ---------------------------------------------------------------------------------------

@pytest.mark.fast
def test_scores_by_hand():
  y = [1, 1, 1, 0, 0, 0, 0, 1]
  p = [1, 1, 0, 0, 0, 1, 0, 1]  # tp 3, fn 1, fp 1, tn 3
  assert scores.accuracy(y, p) == 6 / 8
  assert scores.f1(y, p) == pytest.approx(2 * 3 / (2 * 3 + 1 + 1))
  assert scores.mcc(y, p) == pytest.approx((3 * 3 - 1 * 1) / np.sqrt(4 * 4 * 4 * 4))
  assert scores.mcc(y, [1] * 8) == 0.0  # a constant prediction: CoLA's convention
  assert scores.f1([0, 0], [0, 0]) == 0.0
  assert scores.spearman([1, 2, 3, 4], [10, 20, 30, 1000]) == pytest.approx(1.0)
  assert scores.pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


@pytest.mark.fast
def test_undefined_scores_are_glues_zero_and_ties_share_their_rank():
  rng = np.random.default_rng(0)
  a = rng.integers(0, 6, 300).astype(float)  # many ties, as STS-B's 0-5 ratings have
  assert scores.pearson(a, np.full(300, 2.5)) == 0.0  # a constant prediction
  assert scores.spearman(np.full(300, 2.5), a) == 0.0
  assert scores.pearson([1.0], [2.0]) == 0.0
  assert scores.mcc([0, 0, 1, 1], [0, 0, 0, 0]) == 0.0
  assert scores.f1([0, 0, 1], [0, 0, 0]) == 0.0  # no positive predicted
  # ties: [1, 1, 2] ranks [1.5, 1.5, 3]; against [1, 2, 3] the rank correlation is Pearson's of
  # the ranks, sqrt(3) / 2
  assert scores.spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(np.sqrt(3) / 2)
  assert scores.compute(('accuracy', 'f1'), [1, 0], [1, 1]) == {'accuracy': 0.5,
                                                                 'f1': pytest.approx(2 / 3)}


# ---- layer-wise learning-rate decay
# ----------------------------------------------------------------

@pytest.mark.fast
def test_layerwise_multipliers_of_a_12_layer_model_both_rules():
  cfg = model_lib.ModelConfig.from_config(test_config(**{'model.num_layers': 12}).model)
  model = heads.Classifier(cfg, 3)
  shapes = jax.eval_shape(lambda k: heads.init_params(model, k), jax.random.key(0))
  assert 'embeddings_project' in shapes['discriminator']  # embedding width 16 != hidden 32
  d = 0.8
  for rule, extra in (('intended', 0), ('original', 1)):
    f = optim.layerwise_multipliers(shapes, 12, d, rule)
    assert f['classifier']['kernel'] == f['classifier']['bias'] == 1.0
    for i in range(12):
      layer = f['discriminator'][f'layer_{i}']
      np.testing.assert_allclose(jax.tree.leaves(layer), d ** (12 - i + extra), err_msg=str(i))
    embeddings = jax.tree.leaves(f['embeddings']) + jax.tree.leaves(
        f['discriminator']['embeddings_project'])
    np.testing.assert_allclose(embeddings, d ** (13 + extra))
  top = optim.layerwise_multipliers(shapes, 12, d, 'original')['discriminator']['layer_11']
  assert jax.tree.leaves(top)[0] == pytest.approx(d ** 2)  # the release's top layer: decay^2
  with pytest.raises(ValueError, match="use 'intended' or 'original'"):
    optim.layerwise_multipliers(shapes, 12, d, 'paper')


@pytest.mark.fast
def test_layerwise_factors_scale_each_parameters_update():
  params = {'embeddings': {'w': np.ones(2, np.float32)},
            'discriminator': {'layer_0': {'w': np.ones(2, np.float32)}},
            'classifier': {'w': np.ones(2, np.float32)}}
  factors = optim.layerwise_multipliers(params, 1, 0.5)
  opt = config_lib.default_config().optimizer
  opt_cfg = OptimizerConfig(learning_rate=0.1, warmup_steps=0, decay_steps=10, b1=opt.b1,
                            b2=opt.b2, eps=opt.eps, weight_decay=0.0, grad_clip_norm=0.0)
  tx, _ = optim.make_optimizer(opt_cfg, lr_factors=factors)
  grads = jax.tree.map(np.ones_like, params)
  updates, _ = tx.update(grads, tx.init(params), params)
  step = {k: float(jax.tree.leaves(v)[0][0]) for k, v in updates.items()}
  base = step['classifier']
  assert step['discriminator'] == pytest.approx(base * 0.5)
  assert step['embeddings'] == pytest.approx(base * 0.25)


# ---- the classifier's input
# ------------------------------------------------------------------------

def test_the_head_reads_cls_or_the_mean_of_real_tokens_and_ignores_padding():
  cfg = model_lib.ModelConfig.from_config(test_config().model)
  cls_model, mean_model = (heads.Classifier(cfg, 3, pooling=p) for p in ('cls', 'mean'))
  params = jax.jit(lambda key: heads.init_params(mean_model, key))(jax.random.key(1))
  assert jax.tree.map(np.shape, params) == jax.tree.map(np.shape, jax.eval_shape(
      lambda: heads.init_params(cls_model, jax.random.key(1))))  # the same parameters
  # each model call one compiled program (run eagerly, each of its operations is one)
  apply = lambda model, *args, **kw: np.asarray(jax.jit(
      lambda p, *a: model.apply({'params': p}, *a, **kw))(params, *args), np.float32)
  rng = np.random.RandomState(0)
  ids = rng.randint(5, cfg.vocab_size, (2, 12)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[0, 7:] = 0  # the first example has 7 real tokens, then padding
  ids[0, 7:] = 0
  segments = np.zeros_like(ids)
  hidden = apply(mean_model, ids, segments, mask,
                 method=lambda m, i, s, k: m.discriminator(m.embeddings(i, s, True), k, True))
  kernel, bias = (np.asarray(params['classifier'][n]) for n in ('kernel', 'bias'))
  by_hand = np.stack([hidden[0, :7].mean(0), hidden[1].mean(0)]) @ kernel + bias
  ours = apply(mean_model, ids, segments, mask)
  np.testing.assert_allclose(ours, by_hand, rtol=1e-5, atol=1e-5)
  from_cls = apply(cls_model, ids, segments, mask)
  np.testing.assert_allclose(from_cls, hidden[:, 0] @ kernel + bias, rtol=1e-5, atol=1e-5)
  # The first example alone, without its padding, gets the same logits: padding is not averaged.
  alone = apply(mean_model, ids[:1, :7], segments[:1, :7], mask[:1, :7])
  np.testing.assert_allclose(alone, ours[:1], rtol=1e-5, atol=1e-5)
  assert not np.allclose(ours, from_cls, atol=1e-3)


def test_reinit_starts_the_named_parts_from_fresh_weights_and_keeps_the_rest():
  cfg = model_lib.ModelConfig.from_config(test_config(**{'model.num_layers': 2}).model)
  model = heads.Classifier(cfg, 3)
  pretrained = heads.init_params(model, jax.random.key(5))  # stands for pre-trained weights
  fresh = heads.init_params(model, jax.random.key(1))
  top = f'layer_{cfg.num_layers - 1}'
  reinit = heads.reinit_parts('top, word_embeddings', cfg.num_layers)
  assert reinit == (f'discriminator/{top}', 'embeddings/word_embeddings')
  params = heads.init_params(model, jax.random.key(1), pretrained=pretrained, reinit=reinit)
  flat = lambda tree: {jax.tree_util.keystr(k): v for k, v in
                       jax.tree_util.tree_leaves_with_path(tree)}
  ours, fresh, pretrained = flat(params), flat(fresh), flat(pretrained)
  from_fresh = [n for n in ours if top in n or 'word_embeddings' in n or 'classifier' in n]
  assert len(from_fresh) > 10 and len(ours) - len(from_fresh) > 10
  for name, value in ours.items():
    source = fresh if name in from_fresh else pretrained
    np.testing.assert_array_equal(value, source[name], err_msg=name)
    assert not np.array_equal(fresh[name], pretrained[name]) or 'LayerNorm' in name or (
        'bias' in name), name  # the two sources differ, so the check could fail
  assert heads.reinit_parts('', cfg.num_layers) == ()
  assert heads.reinit_parts('embeddings,layer_0', cfg.num_layers) == (
      'embeddings', 'discriminator/layer_0')
  with pytest.raises(ValueError, match=r"reinit names 'layer_7', 'head', which this model does not "
                                       r'have; use a comma-separated list of embeddings, '
                                       r'word_embeddings, top, layer_0, layer_1'):
    heads.reinit_parts('layer_7,head', 2)


# ---- encoding and data files
# -----------------------------------------------------------------------

@pytest.mark.fast
def test_truncation_drops_from_the_longer_text_and_is_counted():
  a, b, cut = encode_lib.truncate_pair(list(range(10)), list(range(100, 104)), 8)
  assert (a, b, cut) == ([0, 1, 2, 3], [100, 101, 102, 103], True)
  a, b, cut = encode_lib.truncate_pair([1, 2], [3], 8)
  assert (a, b, cut) == ([1, 2], [3], False)
  assert encode_lib.truncate_pair(list(range(9)), None, 5)[0] == [0, 1, 2, 3, 4]


class _Tokenizer:
  """One id per word: 10 + its length."""
  special = SPECIAL

  def encode_batch(self, texts):
    return [[10 + len(w) for w in t.split()] for t in texts]


@pytest.mark.fast
def test_encode_lays_out_cls_a_sep_b_sep_and_doubles_swapped_pairs():
  tok = _Tokenizer()
  task = tasks_lib.Task('t', 'classification', ('no', 'yes'), ('accuracy',), swap_pairs=True)
  examples = [tasks_lib.Example('a bb', 'ccc', 'yes'), tasks_lib.Example('dddd ' * 9, None, 'no')]
  out = registry.get('classification').encode(task, examples, tok, 8, train=True)
  assert len(out) == 3 and out.truncated == 1
  np.testing.assert_array_equal(out.input_ids[0], [2, 11, 12, 3, 13, 3, 0, 0])
  np.testing.assert_array_equal(out.segment_ids[0], [0, 0, 0, 0, 1, 1, 0, 0])
  np.testing.assert_array_equal(out.input_mask[0], [1, 1, 1, 1, 1, 1, 0, 0])
  np.testing.assert_array_equal(out.input_ids[1], [2, 14, 14, 14, 14, 14, 14, 3])
  np.testing.assert_array_equal(out.input_ids[2], [2, 13, 3, 11, 12, 3, 0, 0])  # swapped
  np.testing.assert_array_equal(out.labels, [1, 0, 1])


def _write(path, rows, columns):
  if str(path).endswith('.jsonl'):
    with open(path, 'w') as f:
      for r in rows:
        f.write(json.dumps(dict(zip(columns, r))) + '\n')
  else:
    with open(path, 'w', newline='') as f:
      w = csv.writer(f, delimiter='\t' if str(path).endswith('.tsv') else ',')
      w.writerow(columns)
      w.writerows(rows)
  return str(path)


@pytest.mark.fast
@pytest.mark.parametrize('ext', ['csv', 'tsv', 'jsonl'])
def test_own_files_become_a_task(tmp_path, ext):
  train = _write(tmp_path / f'train.{ext}', [('good film', 'x', 'pos'), ('bad', 'y', 'neg')],
                 ['review', 'other', 'stars'])
  cfg = config_lib.default_config().task
  cfg.update(name='own', train=train, text_a='review', label='stars')
  task, splits = registry.load(cfg)
  assert task.labels == ('neg', 'pos') and task.metrics == ('accuracy', 'f1')
  assert splits['train'][0] == tasks_lib.Example('good film', None, 'pos')


@pytest.mark.fast
def test_files_without_a_header_take_columns_by_position_and_tasks_are_named_by_folder(tmp_path):
  folder = tmp_path / 'news_topics'
  folder.mkdir()
  rows = [('3', 'Markets fell', 'Stocks dropped today'), ('1', 'Team wins', 'A late goal')] * 5
  with open(folder / 'train.csv', 'w', newline='') as f:
    csv.writer(f).writerows(rows)  # no header row, as many public copies are
  cfg = config_lib.default_config().task
  cfg.update(name='own', train=str(folder / 'train.csv'))
  # The default header=True reads the first data row as column names: the error says so.
  with pytest.raises(ValueError, match=r"no column 'text': its first row \(3, Markets fell, Stocks "
                     r"dropped today\) names the columns; .*set task.header=False"):
    registry.load(cfg)
  cfg.update(header=False)
  with pytest.raises(ValueError, match=r"task.header is False, so task.text_a must be a column "
                     r"position \(0, 1, ... of the 3 in"):
    registry.load(cfg)
  cfg.update(text_a='1', text_b='2', label='0')
  task, splits = registry.load(cfg)
  assert task.name == 'news_topics' and task.labels == ('1', '3')
  assert splits['train'][:2] == [tasks_lib.Example('Markets fell', 'Stocks dropped today', '3'),
                                 tasks_lib.Example('Team wins', 'A late goal', '1')]
  cfg.update(label='7')
  with pytest.raises(ValueError, match=r"has no column 7 \(its number of fields: 3\)"):
    registry.load(cfg)
  cfg.update(label='label', train=_write(tmp_path / 'reviews.tsv', [('a', 'pos'), ('b', 'neg')],
                                     ['text', 'label']), header=True, text_a='text', text_b='')
  assert registry.load(cfg)[0].name == 'reviews'


@pytest.mark.fast
def test_a_labelled_test_file_is_scored_and_max_train_examples_keeps_a_fixed_subset(tmp_path):
  cols = ['text', 'label']
  rows = [(f'text {i}', 'pos' if i % 2 else 'neg') for i in range(10)]
  cfg = config_lib.default_config().task
  cfg.update(name='own', train=_write(tmp_path / 'train.csv', rows, cols),
             test=_write(tmp_path / 'test.csv', rows[:4], cols), max_train_examples=6)
  lines = []
  task, splits = registry.load(cfg, log=lines.append)
  assert task.test_splits == ('test',) and [e.label for e in splits['test']] == [
      'neg', 'pos', 'neg', 'pos']
  assert lines == ['train: 6 of 10 examples used (task.max_train_examples)']
  kept = [int(e.text_a.split()[1]) for e in splits['train']]
  assert len(kept) == 6 and kept == sorted(kept)  # the file's order
  assert [e.text_a for e in registry.load(cfg, log=_quiet)[1]['train']] == [
      e.text_a for e in splits['train']]  # the same subset every time
  cfg.update(test=_write(tmp_path / 'unlabelled.csv', [('x',), ('y',)], ['text']))
  task, splits = registry.load(cfg, log=_quiet)
  assert task.test_splits == () and splits['test'][0].label is None


@pytest.mark.fast
def test_labels_are_read_as_meant(tmp_path):
  """Whitespace and a byte-order mark read away, numbers compared as numbers, classes differing in
  case named, an unlabelled test file predicted (its label column empty), and every row without a
  usable label named with its file."""
  cfg = config_lib.default_config().task
  train = tmp_path / 'train.csv'
  train.write_bytes('\ufefftext,label\na, pos\nb,pos \nc,POS\nd,neg\n'.encode('utf-8'))
  (tmp_path / 'test.csv').write_text('text,label\nx,\ny, \n')  # the column kept, empty
  cfg.update(name='own', train=str(train), test=str(tmp_path / 'test.csv'))
  lines = []
  task, splits = registry.load(cfg, log=lines.append)
  assert task.labels == ('POS', 'neg', 'pos') and task.test_splits == ()
  assert [e.label for e in splits['test']] == [None, None]
  assert lines == [f"warning: {train}: labels that differ only in case are different classes: "
                   "'POS' / 'pos'; write them alike if they mean the same"]
  jsonl = tmp_path / 'numbers.jsonl'
  jsonl.write_text('{"text": "a", "label": 1}\n{"text": "b", "label": "1"}\n'
                   '{"text": "c", "label": 1.0}\n{"text": "d", "label": " 2 "}\n')
  cfg.update(train=str(jsonl), test='')
  task, splits = registry.load(cfg, log=lines.append)
  assert task.labels == ('1', '2') and [e.label for e in splits['train']] == ['1', '1', '1', '2']
  cases = [  # (file, its text, kind, test split?, the error)
      ('empty.csv', 'text,label\na,pos\nb,\nc,neg\nd, \n', 'classification', False,
       r"data rows 2, 4 of .*empty.csv have no label \(2 of 4 rows\); fill the label in"),
      ('short.csv', 'text,label\na,pos\nb\n', 'classification', False,
       r"data row 2 of .*short.csv has no label"),
      ('part.csv', 'text,label\na,pos\nb,\n', 'classification', True,
       r"data row 2 of .*part.csv has no label .*; fill those labels in, or empty every label "
       r"cell"),
      ('nan.csv', 'text,label\na,1.5\nb,nan\nc,inf\n', 'regression', False,
       r"data rows 2 \('nan'\), 3 \('inf'\) of .*nan.csv have labels that are not a finite "
       "number"),
      ('tabs.csv', 'text\tlabel\na\tpos\n', 'classification', False,
       r"tabs.csv looks tab-separated \(its first row holds tabs\) but is named .csv; name it "
       r".tsv"),
      ('lines.jsonl', '{"text": "a", "label": "x"}\n\n{"text": "b", "label": null}\n',
       'classification', False, r"line 3 of .*lines.jsonl has no label"),
  ]
  for name, text, kind, test, error in cases:
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=error):
      files.read_table(str(tmp_path / name), 'text', '', 'label',
                           numeric=kind == 'regression',
                           labelled=None if test else True)


@pytest.mark.fast
@pytest.mark.parametrize('case, message', [
    ('missing_column', r"has no column 'review': its first row \(text, label\) names the columns"),
    ('empty', 'holds no rows'),
    ('unseen', r"the dev data has label\(s\) \['maybe'\] never seen in the train data"),
    ('one_label', 'has 1 distinct label'),
    ('not_numeric', r"data rows 1 \('pos'\), 2 \('neg'\) of .* have labels that are not a finite "
                    "number; a regression task needs"),
    ('bad_json', 'line 2 of .* is not JSON'),
    ('extension', 'is not .csv, .tsv or .jsonl'),
    ('missing_file', 'does not exist'),
])
def test_bad_task_data_is_one_sentence(tmp_path, case, message):
  rows, cols = [('a', 'pos'), ('b', 'neg')], ['text', 'label']
  cfg = config_lib.default_config().task
  cfg.update(name='own', train=_write(tmp_path / 'train.csv', rows, cols))
  if case == 'missing_column':
    cfg.text_a = 'review'
  elif case == 'empty':
    cfg.train = _write(tmp_path / 'empty.csv', [], cols)
  elif case == 'unseen':
    cfg.dev = _write(tmp_path / 'dev.csv', [('c', 'maybe')], cols)
  elif case == 'one_label':
    cfg.train = _write(tmp_path / 'one.csv', [('a', 'pos')] * 3, cols)
  elif case == 'not_numeric':
    cfg.kind = 'regression'
  elif case == 'bad_json':
    (tmp_path / 'bad.jsonl').write_text('{"text": "a", "label": 1}\n{"text": \n')
    cfg.train = str(tmp_path / 'bad.jsonl')
  elif case == 'extension':
    cfg.train = _write(tmp_path / 'train.xlsx', rows, cols)
  elif case == 'missing_file':
    cfg.train = str(tmp_path / 'nope.csv')
  with pytest.raises((ValueError, FileNotFoundError), match=message):
    registry.load(cfg)


@pytest.mark.fast
def test_glue_loads_through_tfds_with_labels_names_and_unlabelled_test():
  import tensorflow_datasets as tfds
  with tfds.testing.mock_data(num_examples=6, policy=tfds.testing.MockPolicy.USE_CODE):
    mnli = tasks_lib.load_glue('mnli')
    stsb = tasks_lib.load_glue('stsb')
  assert sorted(mnli) == ['dev_matched', 'dev_mismatched', 'test_matched', 'test_mismatched',
                          'train']
  assert all(e.label in tasks_lib.GLUE['mnli'].labels for e in mnli['train'])
  assert all(e.label is None for e in mnli['test_matched'])
  assert all(isinstance(e.text_a, str) and isinstance(e.text_b, str) for e in mnli['train'])
  assert all(isinstance(e.label, float) for e in stsb['dev'])
  task = tasks_lib.glue_task('stsb')
  assert (task.kind, task.label_scale, task.epochs, task.swap_pairs) == ('regression', 5.0, 10.0,
                                                                         True)
  assert tasks_lib.glue_task('mnli').dev_splits == ('dev_matched', 'dev_mismatched')


# ---- end to end
# -----------------------------------------------------------------------------------

def _synthetic(path, n, kind, seed):
  """Texts of corpus words; the label says how often the word 'cat' occurs (0-2): 'yes' for 1-2
  (two thirds of the rows, the majority baseline), 'no' for 0; or 100,000 + 400,000 x the count
  (regression)."""
  rng = random.Random(seed)
  others = [w for w in WORDS if w != 'cat']
  rows = []
  for _ in range(n):
    count = rng.randint(0, 2)
    words = [rng.choice(others) for _ in range(rng.randint(4, 10))] + ['cat'] * count
    rng.shuffle(words)
    # regression: targets in large units (not scaled by the file), learned as scaled to [0, 1]
    label = str(100_000 + 400_000 * count) if kind == 'regression' else ('yes' if count else 'no')
    rows.append((' '.join(words), label))
  return _write(path, rows, ['text', 'label'])


@pytest.mark.parametrize('kind, metric, floor, pooling', [
    ('classification', 'accuracy', 0.85, 'mean'),  # (the own-data recipe's head)
    ('regression', 'spearman', 0.7, 'cls')])
def test_finetuning_learns_a_synthetic_task_far_above_chance(tmp_path, pretrained, kind, metric,
                                                             floor, pooling, monkeypatch):
  assert 'cat' in WORDS
  cfg = config_lib.default_config()
  cfg.update(init=pretrained, batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=6.0,
             log_every=20, num_seeds=2, dropout_rate=0.0, pooling=pooling)
  cfg.task.update(name='own', kind=kind, train=_synthetic(tmp_path / 'train.csv', 480, kind, 0),
                  dev=_synthetic(tmp_path / 'dev.csv', 160, kind, 1),
                  test=_synthetic(tmp_path / 'test.csv', 40, kind, 2))
  cfg.optimizer.learning_rate = 2e-3
  lines = []
  summary = run.finetune(cfg, str(tmp_path / 'ft'), log=lines.append)
  assert [s['seed'] for s in summary['seeds']] == [0, 1]
  values = [s['dev'][metric] for s in summary['seeds']]
  assert summary['median'][f'dev/{metric}'] == pytest.approx(float(np.median(values)))
  assert min(values) > floor, (values, lines[-10:])
  # The labelled test file is scored too, reported apart from dev.
  tests = [s['test'][metric] for s in summary['seeds']]
  assert summary['median'][f'test/{metric}'] == pytest.approx(float(np.median(tests)))
  assert list(summary['median'])[0] == f'dev/{metric}'
  assert f'| dev {metric} |' in (tmp_path / 'ft' / 'results.md').read_text()
  assert f'| test {metric} |' in (tmp_path / 'ft' / 'results.md').read_text()
  assert any(f'scored by {metric}' in l and ' on dev, test | ' in l for l in lines), lines[:3]
  assert any(re.match(r'^\d\d:\d\d:\d\d seed 1 \| step 180/180 ', l) for l in lines), lines
  # The saved fine-tunings score the same again, and predict the test file.
  workdir = str(tmp_path / 'ft')
  if kind == 'classification':  # the same command again: scored again, one record per step
    calls = _counted(monkeypatch, (config_lib, 'optimizer_config'), (optim, 'make_optimizer'),
                     (fields_lib, 'same_run_diffs'))
    assert run.finetune(cfg, workdir, log=_quiet)['median'] == pytest.approx(summary['median'])
    # derived once per run, an optimizer per seed, the saved config compared once
    assert calls['optimizer_config'] == 1 and calls['same_run_diffs'] == 1, calls
    assert len([c for c in calls['make_optimizer_calls'] if c.get('lr_factors')]) == 2, calls
    for seed in (0, 1):
      path = os.path.join(workdir, f'seed_{seed}', 'metrics.jsonl')
      records = [json.loads(l) for l in open(path)]
      assert [r['step'] for r in records if r['split'] == 'eval'] == [180]
      every = min(20, 180 // 10)  # (log_every, or ten lines a seed where that is fewer)
      assert [r['step'] for r in records if r['split'] == 'train'] == list(
          range(every, 181, every))[:-1] + [180]
      events = _events(os.path.join(workdir, f'seed_{seed}', 'tensorboard'))
      assert sorted(step for tag, step in events if tag == 'eval/accuracy') == [180]
  again = run.finetune(config_lib.saved_config(workdir, 'eval'), workdir, log=_quiet, mode='eval')
  for before, after in zip(summary['seeds'], again['seeds']):
    assert after['dev'] == pytest.approx(before['dev'])
  out = run.finetune(config_lib.saved_config(workdir, 'predict'), workdir, log=_quiet,
                     mode='predict')
  assert len(out['predictions']) == 2
  with open(out['predictions'][0]) as f:
    rows = list(csv.reader(f, delimiter='\t'))
  assert rows[0] == ['index', 'prediction', 'text_a', 'text_b'] and len(rows) == 41
  if kind == 'classification':
    assert {r[1] for r in rows[1:]} <= {'no', 'yes'}
  else:
    predicted = [float(r[1]) for r in rows[1:]]  # in the file's units
    assert all(-200_000 < p < 1_200_000 for p in predicted) and max(predicted) > 500_000
  _predicts_new_files(workdir, tmp_path, kind, summary)
  _exports_to_hf_with_our_logits(workdir, pretrained, tmp_path, kind)
  if kind == 'classification':
    _old_workdirs_continue(cfg, workdir, tmp_path)


@pytest.mark.fast
def test_a_new_file_is_read_by_the_fine_tunings_columns_or_a_glue_tasks_feature_names():
  own = config_lib.TaskConfig(name='own', train='t.csv', text_a='review', label='stars')
  assert predict_lib.file_columns(own) is own
  for name, a, b in (('sst2', 'sentence', ''), ('mnli', 'premise', 'hypothesis'),
                     ('qqp', 'question1', 'question2')):
    task = config_lib.TaskConfig(name=name, glue_dir='/glue', text_a='review', label='stars')
    t = predict_lib.file_columns(task)
    assert (t.text_a, t.text_b, t.label, t.header) == (a, b, 'label', True)
    assert (task.text_a, task.label) == ('review', 'stars')  # (a copy)


def _predicts_new_files(workdir, tmp_path, kind, summary):
  """launch/predict.py's job from the workdir alone: the dev file's predictions score what the
  chosen seed scored on dev, in the file's order, with probabilities; other seeds on request;
  an earlier output kept; a file without labels predicted, one with an unseen label refused."""
  dev = str(tmp_path / 'dev.csv')
  done = predict_lib.predict(workdir, dev, log=_quiet)
  (seed,) = done['seeds']
  scores = {s['seed']: s['dev'] for s in summary['seeds']}
  ranked = sorted(scores, key=lambda k: list(scores[k].values())[0])
  assert seed == ranked[0]  # the median of two seeds: the lower one
  assert done['scores'][seed] == pytest.approx(scores[seed], abs=1e-6)
  path = done['outputs'][0]
  assert path == os.path.join(workdir, 'predictions', 'dev.csv')
  rows = list(csv.DictReader(open(path)))
  given = list(csv.DictReader(open(dev)))
  assert [r['text'] for r in rows] == [r['text'] for r in given] and len(rows) == 160
  if kind == 'classification':
    for r in rows:
      p = {c: float(r[f'p({c})']) for c in ('no', 'yes')}
      assert sum(p.values()) == pytest.approx(1, abs=1e-5) and r['prediction'] == max(p, key=p.get)
  else:
    assert all(-200_000 < float(r['prediction']) < 1_200_000 for r in rows)
  with pytest.raises(UserError, match=r'dev.csv exists \(earlier predictions\?\); give another '
                     r'--output, or --overwrite to replace it'):
    predict_lib.predict(workdir, dev, log=_quiet)
  # the workdir alone: moved elsewhere, its pre-training gone (config.json's init points nowhere)
  moved = str(tmp_path / 'moved')
  shutil.copytree(workdir, moved)
  saved = json.load(open(os.path.join(moved, 'config.json')))
  with open(os.path.join(moved, 'config.json'), 'w') as f:
    json.dump({**saved, 'init': str(tmp_path / 'gone')}, f)
  again = predict_lib.predict(moved, dev, overwrite=True, log=_quiet)
  assert again['scores'] == done['scores']
  assert open(again['outputs'][0]).read() == open(path).read()
  _outputs_never_replace_inputs_or_each_other(workdir, tmp_path, given)
  unlabelled = tmp_path / 'new.tsv'
  unlabelled.write_text('text\n' + ''.join(r['text'] + '\n' for r in given[:7]))
  each = predict_lib.predict(workdir, str(unlabelled), seed='all', log=_quiet)
  assert each['seeds'] == [0, 1] and not each['scores']
  assert [os.path.basename(p) for p in each['outputs']] == ['new.seed_0.tsv', 'new.seed_1.tsv']
  assert len(open(each['outputs'][1]).readlines()) == 8
  if kind == 'classification':
    wrong = tmp_path / 'wrong.csv'
    wrong.write_text('text,label\ncat cat,maybe\n')
    with pytest.raises(UserError, match=r"wrong.csv has the label\(s\) \['maybe'\] in its column "
                       r"'label', which the fine-tuning never saw "
                       r"\(its labels are \['no', 'yes'\]\)"):
      predict_lib.predict(workdir, str(wrong), log=_quiet)
    assert not os.path.exists(os.path.join(workdir, 'predictions', 'wrong.csv'))
    wrong.write_text('review,label\ncat cat,yes\n')
    with pytest.raises(UserError, match=r"wrong.csv has no column 'text', which the fine-tuning "
                       r"read its text_a from \(the file's columns: review, label\); name the "
                       r"columns as in its training files: text \(text_a\), label \(label, where "
                       r"known\)$"):
      predict_lib.predict(workdir, str(wrong), log=_quiet)


def _outputs_never_replace_inputs_or_each_other(workdir, tmp_path, given):
  """The input's other columns kept (one named as a prediction's column given as input.<name>);
  an output that is the input refused even with --overwrite; an output made by another command
  while this one predicted is kept (the write is an exclusive create); a folder that cannot hold
  the output named before the work."""
  mine = tmp_path / 'mine.csv'
  with open(mine, 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['id', 'text', 'prediction'])
    writer.writerows([f'row-{i}', r['text'], 'mine'] for i, r in enumerate(given[:5]))
  before = mine.read_bytes()
  for output in (str(mine), str(tmp_path / '.' / 'mine.csv')):
    with pytest.raises(UserError, match=r'mine.csv is the input file, and its predictions would '
                       r'replace it; give another --output$'):
      predict_lib.predict(workdir, str(mine), output=output, overwrite=True, log=_quiet)
  assert mine.read_bytes() == before
  done = predict_lib.predict(workdir, str(mine), output=str(tmp_path / 'kept.csv'), log=_quiet)
  rows = list(csv.DictReader(open(done['outputs'][0])))
  assert list(rows[0])[:4] == ['index', 'id', 'text', 'input.prediction'], list(rows[0])
  assert [r['id'] for r in rows] == [f'row-{i}' for i in range(5)]
  assert {r['input.prediction'] for r in rows} == {'mine'} and rows[0]['prediction'] != 'mine'
  race = tmp_path / 'race.csv'

  def another_command_writes(line):
    if not race.exists():
      race.write_text('theirs\n')

  with pytest.raises(UserError, match=r'race.csv was made by another command while these '
                     r'predictions were computed, and is kept; give another --output'):
    predict_lib.predict(workdir, str(mine), output=str(race), log=another_command_writes)
  assert race.read_text() == 'theirs\n' and not [n for n in os.listdir(tmp_path) if '.tmp-' in n]
  with pytest.raises(UserError, match=r'mine.csv is a file, not a folder; give an output in a '
                     r'folder'):
    predict_lib.predict(workdir, str(mine), output=str(mine / 'sub' / 'p.csv'), log=_quiet)


def _counted(monkeypatch, *targets) -> dict:
  """{name: calls so far} of each (module, function name) of `targets`, patched to count (and
  `<name>_calls`: each call's keyword arguments)."""
  calls: dict = {}
  for module, name in targets:
    real = getattr(module, name)
    calls[name], calls[f'{name}_calls'] = 0, []

    def counting(*args, real=real, name=name, **kwargs):
      calls[name] += 1
      calls[f'{name}_calls'].append(kwargs)
      return real(*args, **kwargs)
    monkeypatch.setattr(module, name, counting)
  return calls


def _events(folder) -> list[tuple[str, int]]:
  """(tag, step) of every scalar of the event files in `folder`, read by TensorFlow."""
  tf = tf_import.tensorflow()
  return [(v.tag, event.step) for path in tf.io.gfile.glob(os.path.join(folder, '*tfevents*'))
          for event in tf.compat.v1.train.summary_iterator(path) for v in event.summary.value]


def _old_workdirs_continue(cfg, workdir, tmp_path):
  path = os.path.join(workdir, 'config.json')
  saved = json.load(open(path))
  del saved['pooling'], saved['task']['header']  # as written before these fields existed
  json.dump(saved, open(path, 'w'))
  cfg.pooling = 'cls'  # (the default then)
  as_json = lambda c: json.loads(c.to_json())
  assert config_lib.check_same_finetuning(as_json(cfg), workdir) == saved  # the one compared
  cfg.pooling = 'mean'
  with pytest.raises(UserError, match=r"different config \(pooling 'cls' -> 'mean'\)"):
    config_lib.check_same_finetuning(as_json(cfg), workdir)
  cfg.pooling = 'max'
  with pytest.raises(UserError, match="pooling is 'max'; use one of 'cls', 'mean'"):
    run.finetune(cfg, str(tmp_path / 'ft_max'), log=_quiet)


def _exports_to_hf_with_our_logits(workdir, pretrained, tmp_path, kind):
  """The best seed exports as the class users load (HF's, or the mean-pooled class the folder
  ships), whose logits are ours (< 1e-4); what launch/export.py --check runs agrees, and its run
  of the dev file through pipeline('text-classification') gives our label (number) on every row."""
  if not HAS_HF:  # the test extra is not installed: the fine-tuning was checked above
    return
  import torch
  import transformers
  out = str(tmp_path / 'hf')
  done = export_lib.export(workdir, out, log=_quiet, onnx=HAS_ONNX)
  seeds = json.load(open(os.path.join(workdir, 'results.json')))['seeds']
  best = max(seeds, key=lambda s: next(iter(s['dev'].values())))['seed']
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, f'seed_{best}', 'checkpoints'))
  state, meta = ckpt.restore_arrays(ckpt.latest_step())
  ckpt.close()
  params, labels = state['params'], meta['labels']
  assert meta['kind'] == kind and (labels == ['no', 'yes'] or kind != 'classification')
  cfg = pretrained_lib.load(pretrained, from_scratch=True, log=_quiet).model_cfg
  outputs = 1 if kind == 'regression' else len(labels)
  pooling = json.load(open(os.path.join(workdir, 'config.json')))['pooling']
  model = heads.Classifier(cfg, outputs, per_token=kind == 'tagging', pooling=pooling)
  tok = transformers.AutoTokenizer.from_pretrained(out)
  texts = [' '.join(WORDS[i:i + 3 + 2 * i]) for i in range(4)]
  batch = tok(texts, padding=True, truncation=True, max_length=32, return_tensors='np')
  ours = np.asarray(model.apply({'params': params}, batch['input_ids'], batch['token_type_ids'],
                                batch['attention_mask']))
  hf_model = export_lib.hf_model(transformers, out).eval()
  expected = ('ElectraForTokenClassification' if kind == 'tagging' else
              'ElectraMeanPooledForSequenceClassification' if pooling == 'mean' else
              'ElectraForSequenceClassification')
  assert type(hf_model).__name__ == expected
  with torch.no_grad():
    theirs = hf_model(**{k: torch.from_numpy(v).long() for k, v in batch.items()}).logits.numpy()
  real = batch['attention_mask'] > 0 if kind == 'tagging' else slice(None)
  if kind == 'regression':  # exported in the labels' units: compared in the model's own
    assert (meta['label_scale'], meta['label_offset']) == (800_000, 100_000)
    theirs = (theirs - meta['label_offset']) / meta['label_scale']
  np.testing.assert_allclose(ours[real], theirs[real], atol=1e-4, rtol=1e-5)
  assert np.abs(ours).max() > 0.1
  if kind != 'tagging':
    checked = export_lib.verify(done, log=_quiet)['hf']
    assert checked['max_abs_diff'] < 1e-4 and checked['dev']['agrees'], checked
    assert checked['dev']['rows'] == checked['dev']['same'] == 160, checked
    if HAS_ONNX:  # --onnx: the mean-pooled class, the regression in its units, in ONNX Runtime
      assert_onnx_agrees(checked)
      _predicts_from_the_onnx_folder_alone(workdir, out, tmp_path, kind)


def _predicts_from_the_onnx_folder_alone(workdir, folder, tmp_path, kind):
  """launch/predict_onnx.py, in a child that imports none of JAX, PyTorch and TensorFlow, writes
  the dev file's predictions with launch/predict.py's columns: the same prediction on every row,
  each probability within 1e-4 of predict.py's from the workdir (a regression's number within
  1e-4 in the model's units: the labels' span, 800,000, times that)."""
  dev, mine, theirs = str(tmp_path / 'dev.csv'), tmp_path / 'jax.csv', tmp_path / 'onnx.csv'
  predict_lib.predict(workdir, dev, str(mine), seed='best', log=_quiet)  # (the exported one)
  code = ('import json, runpy, sys\n'
          f'sys.argv = ["predict_onnx.py", "--model={folder}", "--input={dev}", '
          f'"--output={theirs}", "--batch_size=7"]\n'
          'try:\n'
          f'  runpy.run_path({os.path.join(ROOT, "launch", "predict_onnx.py")!r}, '
          'run_name="__main__")\n'
          'except SystemExit as e:\n'
          '  code = e.code\n'
          'print(json.dumps({"code": code, "imported": sorted(m for m in ("jax", "torch", '
          '"tensorflow", "flax", "transformers") if m in sys.modules)}))\n')
  done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=ROOT,
                        env=CHILD_ENV, timeout=300, check=False)
  assert json.loads(done.stdout.strip().splitlines()[-1]) == {'code': 0, 'imported': []}, (
      done.stdout[-2000:], done.stderr[-2000:])
  ours, onnx = (list(csv.reader(open(p))) for p in (mine, theirs))
  assert ours[0] == onnx[0] and len(ours) == len(onnx) == 161, (ours[0], onnx[0])
  numbers = [i for i, c in enumerate(ours[0]) if c.startswith('p(')]
  if kind == 'regression':
    numbers = [ours[0].index('prediction')]
  for a, b in zip(ours[1:], onnx[1:]):
    assert [x for i, x in enumerate(a) if i not in numbers] == [
        x for i, x in enumerate(b) if i not in numbers], (a, b)
    np.testing.assert_allclose([float(a[i]) for i in numbers], [float(b[i]) for i in numbers],
                               atol=1e-4 * (800_000 if kind == 'regression' else 1), rtol=0)


HEADS = [('classification', 'cls', 'AutoModelForSequenceClassification'),
         ('classification', 'mean', 'AutoModelForSequenceClassification'),
         ('regression', 'mean', 'AutoModelForSequenceClassification'),
         ('multiple_choice', 'cls', 'AutoModelForMultipleChoice'),
         ('multiple_choice', 'mean', 'AutoModelForMultipleChoice'),
         ('tagging', 'cls', 'AutoModelForTokenClassification')]


@needs_hf
@pytest.mark.parametrize('backbone', ['bert', 'modern'])
@pytest.mark.parametrize('kind, pooling, auto', HEADS)
def test_every_head_exports_to_the_class_users_load_with_our_logits(tmp_path, kind, pooling, auto,
                                                                    backbone):
  """Random weights of each head, exported as the export writes them, loaded by the Auto class a
  user loads (trust_remote_code for the mean-pooled classes the folder ships; the modern
  backbone: HF's ModernBertFor* class of the kind, with either pooling): our logits to 1e-4, on
  rows of different lengths (the mean reads the real tokens alone), in the labels' units for
  regression."""
  import torch
  import transformers
  from electra_jax.convert import hf_code
  modern = backbone == 'modern'
  cfg = model_lib.ModelConfig.from_config(test_config(**(MODERN if modern else {})).model)
  k = registry.get(kind)
  labels = {'classification': ['neg', 'pos', 'mixed'], 'regression': ['score'],
            'multiple_choice': [], 'tagging': ['O', 'B-X', 'E-X', 'S-X']}[kind]
  outputs = len(labels) or 1
  model = k.check_model(cfg, outputs, pooling)
  params = heads.init_params(model, jax.random.key(3), shape=k.init_shape)
  if modern:  # a head whose LayerNorm is not the identity's
    params['head']['LayerNorm']['scale'] = 1.0 + jax.random.normal(jax.random.key(4),
                                                                    (cfg.hidden_size,))
  state, fields = k.to_hf(params, cfg, labels, 0.1, pooling)
  meta = {'label_scale': 4.0, 'label_offset': 1.0}
  state = k.in_units(state, meta)
  folder = str(tmp_path / 'hf')
  os.makedirs(folder)
  hf_lib.save_folder(folder, state, {**hf_lib.hf_config(cfg, 'discriminator'), **fields,
                                     'pad_token_id': 0})
  if 'auto_map' in fields:
    hf_code.write(folder)
    assert list(fields['auto_map']) == [auto]
  assert ('auto_map' not in fields) if modern else True  # (HF's own classes)
  theirs_model = getattr(transformers, auto).from_pretrained(
      folder, trust_remote_code=True).eval()
  if modern:
    assert type(theirs_model).__name__ == hf_lib.MODERN_CLASSES[k.hf_class]
  rng = np.random.default_rng(0)
  shape = (3, 2, 12) if kind == 'multiple_choice' else (3, 12)
  ids = rng.integers(5, cfg.vocab_size, shape)
  mask = (np.arange(12) < rng.integers(4, 13, shape[:-1])[..., None]).astype(np.int64)
  segments = (np.arange(12) >= 6).astype(np.int64) * mask
  ours = np.asarray(model.apply({'params': params}, ids, segments, mask))
  inputs = {'input_ids': ids, 'attention_mask': mask, 'token_type_ids': segments}
  with torch.no_grad():
    theirs = theirs_model(**{name: torch.from_numpy(inputs[name]) for name in inputs
                             if name != 'token_type_ids' or not modern}).logits.numpy()
  if kind == 'regression':
    theirs = (theirs - meta['label_offset']) / meta['label_scale']
  real = mask > 0 if kind == 'tagging' else slice(None)
  np.testing.assert_allclose(ours[real], theirs[real], atol=1e-4, rtol=1e-5)
  if labels and kind != 'regression':
    assert theirs_model.config.id2label == dict(enumerate(labels))
  if HAS_ONNX and kind == 'tagging':  # (the other heads: their fine-tunings' exports, --onnx)
    from electra_jax.apps import onnx_export
    names = [n for n in inputs if n != 'token_type_ids' or not modern]
    onnx_export.write(theirs_model, folder, names, {n: v[:2, :8] for n, v in inputs.items()},
                      log=_quiet)
    graph = onnx_export.outputs(onnx_export.session(folder), inputs).logits.numpy()
    np.testing.assert_allclose(ours[real], graph[real], atol=1e-4, rtol=1e-5)


def _quiet(*_):
  pass


@pytest.mark.fast
def test_glue_tsv_folders_are_read_with_their_quirks(tmp_path):
  cola = tmp_path / 'CoLA'
  cola.mkdir()
  (cola / 'train.tsv').write_text('gj04\t1\t\tThe cat sat.\ngj04\t0\t*\tCat the sat "on.\n')
  (cola / 'dev.tsv').write_text('gj04\t1\t\tA dog ran.\n')
  (cola / 'test.tsv').write_text('index\tsentence\n7\tBirds sang.\n')
  splits = tasks_lib.load_glue_tsv(str(tmp_path), 'cola', log=_quiet)
  assert splits['train'] == [tasks_lib.Example('The cat sat.', None, '1', 0),
                             tasks_lib.Example('Cat the sat "on.', None, '0', 1)]
  assert splits['test'] == [tasks_lib.Example('Birds sang.', None, None, 7)]
  # Public copies with a labelled test split (in the train file's layout) are read and scored.
  (cola / 'test.tsv').write_text('gj04\t0\t*\tSang birds the.\n')
  assert tasks_lib.load_glue_tsv(str(tmp_path), 'cola', log=_quiet)['test'] == [
      tasks_lib.Example('Sang birds the.', None, '0', 0)]
  sst = tmp_path / 'SST-2'
  sst.mkdir()
  for name in ('train', 'dev', 'test'):
    (sst / f'{name}.tsv').write_text('sentence\tlabel\nit is good .\t1\nit is bad .\t0\n')
  cfg = config_lib.default_config().task
  cfg.update(name='sst2', glue_dir=str(tmp_path))
  task, splits = registry.load(cfg, log=_quiet)
  assert task.test_splits == ('test',) and task.dev_splits == ('dev',)
  assert splits['test'] == [tasks_lib.Example('it is good .', None, '1', 0),
                            tasks_lib.Example('it is bad .', None, '0', 1)]
  mnli = tmp_path / 'MNLI'
  mnli.mkdir()
  head = 'index\tpromptID\tsentence1\tsentence2\tgold_label\n'
  for name in ('train', 'dev_matched', 'dev_mismatched'):
    (mnli / f'{name}.tsv').write_text(head + '0\t5\tA man.\tA person.\tentailment\n1\t6\tshort\n')
  (mnli / 'test_matched.tsv').write_text('index\tpromptID\tsentence1\tsentence2\n3\t9\tX.\tY.\n')
  lines = []
  splits = tasks_lib.load_glue_tsv(str(tmp_path), 'mnli', log=lines.append)
  assert sorted(splits) == ['dev_matched', 'dev_mismatched', 'test_matched', 'train']
  assert splits['dev_matched'] == [tasks_lib.Example('A man.', 'A person.', 'entailment', 0)]
  assert splits['test_matched'] == [tasks_lib.Example('X.', 'Y.', None, 3)]
  assert len(lines) == 3 and '1 row(s) with too few columns skipped' in lines[0]
  (mnli / 'train.tsv').write_text(head + '0\t5\tA.\tB.\tmaybe\n')
  with pytest.raises(ValueError, match="has the label 'maybe', not one of"):
    tasks_lib.load_glue_tsv(str(tmp_path), 'mnli', log=_quiet)
  with pytest.raises(FileNotFoundError, match='RTE/train.tsv does not exist'):
    tasks_lib.load_glue_tsv(str(tmp_path), 'rte', log=_quiet)


@pytest.mark.fast
def test_glue_test_predictions_are_leaderboard_files(tmp_path):
  task = tasks_lib.glue_task('mnli')
  examples = [tasks_lib.Example('a', 'b', None, 12), tasks_lib.Example('c', 'd', None, 13)]
  logits = np.array([[0.0, 0.0, 5.0], [9.0, 0.0, 0.0]])
  path = registry.get('classification').write_predictions(task, 'test_mismatched', logits, examples,
                                                       str(tmp_path))
  assert os.path.basename(path) == 'MNLI-mm.tsv'
  assert open(path).read() == 'index\tprediction\n12\tcontradiction\n13\tentailment\n'
  path = registry.get('regression').write_predictions(tasks_lib.glue_task('stsb'), 'test',
                                                   np.array([[0.5]]), examples[:1], str(tmp_path))
  assert open(path).read() == 'index\tprediction\n12\t2.500\n'


def test_finetuning_bad_init_and_too_little_data_are_refused(tmp_path, pretrained):
  cfg = config_lib.default_config()
  cfg.task.update(name='own', train=_synthetic(tmp_path / 'train.csv', 8, 'classification', 0))
  cfg.init = str(tmp_path)
  with pytest.raises(UserError, match='holds no model: it is neither an HF transformers folder'):
    run.finetune(cfg, str(tmp_path / 'ft'), log=lambda *_: None)
  cfg.update(init=pretrained, max_seq_length=32)
  with pytest.raises(UserError, match='fewer than one batch of 32'):
    run.finetune(cfg, str(tmp_path / 'ft'), log=lambda *_: None)
  cfg.update(batch_size=12)
  with pytest.raises(UserError, match='batch_size=12 does not divide among 8 devices'):
    run.finetune(cfg, str(tmp_path / 'ft'), log=lambda *_: None)
  cfg.update(batch_size=16, reinit='layer_7')
  with pytest.raises(UserError, match="reinit names 'layer_7', which this model does not have"):
    run.finetune(cfg, str(tmp_path / 'ft'), log=lambda *_: None)
  cfg.update(reinit='', init_step='best')
  with pytest.raises(UserError, match=r'init_step=best, but the pre-training in .* kept no best '
                     r'checkpoint \(it ran without --config.keep_best'):
    run.finetune(cfg, str(tmp_path / 'ft'), log=lambda *_: None)
  cfg.update(init_step='last')
  with pytest.raises(UserError, match="init_step is 'last'; give 'latest', 'best' or a step"):
    run.finetune(cfg, str(tmp_path / 'ft'), log=lambda *_: None)
  cfg.update(init_step='latest')
  assert not os.path.exists(tmp_path / 'ft')
  cfg.update(reinit='')
  with pytest.raises(UserError, match='holds no fine-tuning'):
    run.finetune(cfg, str(tmp_path / 'ft'), log=_quiet, mode='eval')


def test_a_search_fine_tunes_each_recipe_apart_and_keeps_the_best_dev_median(tmp_path, pretrained):
  cfg = config_lib.default_config()
  cfg.update(init=pretrained, batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=3.0,
             num_seeds=1, dropout_rate=0.0, search='optimizer.learning_rate=1e-7,2e-3')
  cfg.task.update(name='own', train=_synthetic(tmp_path / 'train.csv', 240, 'classification', 0),
                  dev=_synthetic(tmp_path / 'dev.csv', 96, 'classification', 1),
                  test=_synthetic(tmp_path / 'test.csv', 32, 'classification', 2))
  workdir = tmp_path / 'search'
  lines = []
  summary = search.finetune(cfg, str(workdir), log=lines.append)
  names = ['optimizer.learning_rate=1e-7', 'optimizer.learning_rate=2e-3']
  alone = {}  # each recipe's folder: a fine-tuning as launch/finetune.py makes it, with its rate
  for name, rate in zip(names, (1e-7, 2e-3)):
    saved = json.load(open(workdir / name / 'config.json'))
    assert saved['optimizer']['learning_rate'] == rate and saved['search'] == ''
    alone[name] = json.load(open(workdir / name / 'results.json'))
  assert [r['recipe'] for r in summary['recipes']] == names
  dev = {n: r['median']['dev/accuracy'] for n, r in alone.items()}
  assert dev[names[1]] > dev[names[0]] + 0.05, dev  # a rate of 1e-7 does not learn in 45 steps
  assert summary['chosen'] == names[1] and summary['median'] == alone[names[1]]['median']
  assert summary['seeds'] == alone[names[1]]['seeds'] and 'baseline' in summary
  assert 'baseline' in alone[names[0]] and 'baseline' not in alone[names[1]]  # scored once
  table = (workdir / 'results.md').read_text()
  assert f'| {names[1]} (chosen) | **{100 * dev[names[1]]:.2f}** |' in table
  assert f'| {names[0]} | {100 * dev[names[0]]:.2f} |' in table and '| TF-IDF baseline |' in table
  assert f'chosen on dev/accuracy: {names[1]}' in lines
  assert any(l.startswith('== recipe 2 of 2: optimizer.learning_rate=2e-3') for l in lines)
  # --mode=eval (the config as saved) scores the chosen recipe's fine-tunings again.
  again = search.finetune(config_lib.saved_config(str(workdir), 'eval'), str(workdir), log=_quiet,
                       mode='eval')
  assert again['seeds'][0]['dev'] == pytest.approx(alone[names[1]]['seeds'][0]['dev'])
  # Another list of recipes in the same workdir: said, and its results are this list's.
  cfg.search, lines = 'optimizer.learning_rate=2e-3', []
  assert [r['recipe'] for r in search.finetune(cfg, str(workdir), log=lines.append)['recipes']] == [
      names[1]]
  assert (f'note: the search in {workdir} listed other recipes ({", ".join(names)}); its results '
          f'are written again for these ({names[1]}), and the fine-tunings of {names[0]} stay in '
          'their folders') in lines, lines[:5]


@pytest.mark.fast
@pytest.mark.parametrize('spec, message', [
    ('learning_rate=1e-4', r'learning_rate is not a recipe field; did you mean '
                           r'optimizer.learning_rate\?'),
    ('seed=1,2', r'seed is not a recipe field; search the recipe.s fields, e.g. '),
    ('optimizer.learning_rate', r"'optimizer.learning_rate' is not 'field=value,value'"),
    ('optimizer.learning_rate=1e-4,', r"is not 'field=value,value'"),
    ('optimizer.learning_rate=fast', r'optimizer.learning_rate=fast is not a number'),
    ('epochs=3; epochs=10', r'names epochs twice'),
    ('pooling=mean,mean', r'gives a value twice'),
    ('task.train=a.csv,b.csv', r'task.train is not a recipe field'),
    ('num_seeds=1,3', r'num_seeds is not a recipe field'),
    ('batch_size=16.5', r'batch_size=16.5 is not an integer'),
    ('pooling=max', r"pooling is 'max'; use one of 'cls', 'mean'"),
    ('baseline=yes', r'baseline takes True or False'),
])
def test_a_bad_search_is_refused_in_one_sentence_before_anything_runs(tmp_path, spec, message):
  cfg = config_lib.default_config()
  cfg.update(init=str(tmp_path / 'nowhere'), search=spec)
  cfg.task.update(name='own', train='train.csv', dev='dev.csv')
  with pytest.raises(UserError, match=message):
    search.finetune(cfg, str(tmp_path / 'ft'), log=_quiet)
  assert not os.path.exists(tmp_path / 'ft')


@pytest.mark.fast
def test_a_search_chooses_on_dev_only_and_the_first_recipe_wins_a_tie(tmp_path):
  done = [(n, {'task': 't', 'init': 'x', 'seeds': [], 'median': {'dev/accuracy': d,
                                                                 'test/accuracy': t}})
          for n, d, t in (('a', 0.8, 0.1), ('b', 0.9, 0.0), ('c', 0.9, 1.0))]
  assert search.choose(done) == 1
  lines = []
  write = search._write
  summary = write(config_lib.parse(config_lib.default_config()), done, str(tmp_path),
                  lines.append)
  assert summary['chosen'] == 'b' and summary['median']['test/accuracy'] == 0.0
  assert ('chosen on dev/accuracy: b (level on dev/accuracy with c; the first given is kept)'
          in lines)
  assert '| b (chosen) | **90.00** | **0.00** |' in (tmp_path / 'results.md').read_text()
  with pytest.raises(UserError, match='chooses on a dev split, and the task has none'):
    search.choose([('a', {'median': {'test/accuracy': 0.5}})])
  cfg = config_lib.default_config()
  cfg.search = 'optimizer.learning_rate=1e-4,3e-4 epochs=3;pooling=cls,mean'
  grid = search.recipes(cfg)
  assert [name for name, _ in grid] == [
      f'optimizer.learning_rate={r},epochs=3,pooling={p}' for r in ('1e-4', '3e-4')
      for p in ('cls', 'mean')]
  assert grid[1][1] == {'optimizer.learning_rate': 1e-4, 'epochs': 3.0, 'pooling': 'mean'}
  # The library fine-tunes one recipe; a search is the command's (apps/search.py).
  with pytest.raises(UserError, match=r'run it with launch/finetune.py .electra_jax/apps/search'):
    run.finetune(cfg, str(tmp_path / 'ft'), log=_quiet)
  assert not os.path.exists(tmp_path / 'ft')


@pytest.mark.fast
def test_the_builtin_task_evaluates_only_on_documents_pretraining_held_out():
  from electra_jax.data import corpus
  from electra_jax.data import records
  splits = tasks_lib.load_builtin(seed=0, eval_fraction=0.05, max_train=1000)
  docs = corpus.builtin_documents()
  held = [d for k, d in enumerate(docs) if records.held_out(0, k, 0.05)]
  held_sentences = {s for d in held for s in d}
  followers = {(d[j], d[j + 1]) for d in docs for j in range(len(d) - 1)}
  assert len(splits['train']) == 1000 and min(len(splits['dev']), len(splits['test'])) > 200
  for split in ('dev', 'test'):
    assert all(e.text_a in held_sentences and e.text_b in held_sentences for e in splits[split])
  for split, examples in splits.items():
    nexts = [e for e in examples if e.label == 'next']
    assert 0.4 < len(nexts) / len(examples) < 0.6, split
    assert all((e.text_a, e.text_b) in followers for e in nexts)
  again = tasks_lib.load_builtin(seed=0, eval_fraction=0.05, max_train=1000)
  assert again == splits


@pytest.mark.fast
def test_the_builtin_topic_task_is_balanced_disjoint_and_labelled_by_its_module():
  from electra_jax.data import corpus
  splits = tasks_lib.load_builtin_topic(seed=0)
  area = {m: label for label, modules in tasks_lib.TOPICS.items() for m in modules}
  passages = {}  # passage -> the areas whose documentation holds it
  for module, sentences in corpus.builtin_module_documents():
    for j in range(len(sentences) - 1):
      passages.setdefault(' '.join(sentences[j:j + 2]), set()).add(area.get(module))
  texts = {split: [e.text_a for e in examples] for split, examples in splits.items()}
  assert not set(texts['train']) & set(texts['dev']) and not set(texts['dev']) & set(texts['test'])
  assert not set(texts['train']) & set(texts['test'])
  for split, examples in splits.items():
    assert all(e.label in passages[e.text_a] for e in examples), split
    counts = [sum(e.label == label for e in examples) for label in tasks_lib.TOPICS]
    assert min(counts) > 0.4 * max(counts), (split, counts)  # no class dominates
    assert max(counts) / len(examples) < 0.15, split  # the majority baseline stays near 1/9
  assert len(splits['train']) > 2000 and min(len(splits['dev']), len(splits['test'])) > 400
  assert tasks_lib.load_builtin_topic(seed=0) == splits
  assert tasks_lib.load_builtin_topic(seed=1)['dev'] != splits['dev']
  cfg = config_lib.default_config().task
  cfg.update(name='builtin_topic', max_train_examples=500)
  task, again = registry.load(cfg, log=_quiet)
  assert task.labels == tuple(tasks_lib.TOPICS) and task.test_splits == ('test',)
  assert again['train'] == splits['train'][:500] and again['dev'] == splits['dev']


# ---- tagging
# --------------------------------------------------------------------------------------

@pytest.mark.fast
def test_chunks_are_read_as_conlleval_reads_them_and_written_as_bioes():
  from electra_jax.finetune.kinds import tagging
  iob1 = ['I-PER', 'I-PER', 'O', 'I-LOC', 'B-LOC', 'I-ORG', 'O', 'B-MISC']
  assert tagging.chunks(iob1) == [(0, 1, 'PER'), (3, 3, 'LOC'), (4, 4, 'LOC'), (5, 5, 'ORG'),
                                  (7, 7, 'MISC')]
  assert tagging.to_bioes(iob1) == ('B-PER', 'E-PER', 'O', 'S-LOC', 'S-LOC', 'S-ORG', 'O',
                                    'S-MISC')
  iob2 = ['B-NP', 'I-NP', 'I-NP', 'B-VP', 'B-NP', 'O']
  assert tagging.to_bioes(iob2) == ('B-NP', 'I-NP', 'E-NP', 'S-VP', 'S-NP', 'O')
  bioes = tagging.to_bioes(iob2)
  assert tagging.to_bioes(bioes) == bioes and tagging.chunks(bioes) == tagging.chunks(iob2)
  gold = [('B-PER', 'E-PER', 'O', 'S-LOC'), ('S-ORG', 'O')]
  pred = [('B-PER', 'E-PER', 'O', 'S-ORG'), ('S-ORG', 'S-LOC')]  # 2 right of 4 found, 3 wanted
  s = tagging.entity_scores(gold, pred)
  assert (s['precision'], s['recall']) == (0.5, pytest.approx(2 / 3))
  assert s['f1'] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
  assert tagging.entity_scores(gold, [('O',) * 4, ('O', 'O')])['f1'] == 0.0


def _write_conll(path, sentences):
  with open(path, 'w') as f:
    f.write('-DOCSTART- -X- O O\n\n')
    for words, tags in sentences:
      f.write(''.join(f'{w} XX {t}\n' for w, t in zip(words, tags)) + '\n')
  return str(path)


def _tagged(n, seed):
  """Sentences of corpus words where 'cat', 'dogs' and 'birds' are ANIMAL chunks and 'old stone
  walls' a PLACE chunk, tagged in IOB2."""
  rng = random.Random(seed)
  plain = [w for w in WORDS if w not in ('cat', 'dogs', 'birds', 'old', 'stone', 'walls')]
  out = []
  for _ in range(n):
    words, tags = [], []
    for _ in range(rng.randint(3, 8)):
      r = rng.random()
      if r < 0.2:
        words.append(rng.choice(['cat', 'dogs', 'birds']))
        tags.append('B-ANIMAL')
      elif r < 0.3:
        words += ['old', 'stone', 'walls']
        tags += ['B-PLACE', 'I-PLACE', 'I-PLACE']
      else:
        words.append(rng.choice(plain))
        tags.append('O')
    out.append((words, tags))
  return out


@pytest.mark.fast
def test_conll_files_become_a_bioes_task_and_bad_files_are_refused(tmp_path):
  from electra_jax.finetune.kinds import tagging
  path = _write_conll(tmp_path / 'train.txt', [(['old', 'stone', 'walls', 'sat'],
                                                ['B-PLACE', 'I-PLACE', 'I-PLACE', 'O'])])
  assert tagging.read_conll(path) == [(('old', 'stone', 'walls', 'sat'),
                                       ('B-PLACE', 'I-PLACE', 'I-PLACE', 'O'))]
  with pytest.raises(ValueError, match=r"line 3 of .* has the tag 'XX'; a tag is O or a chunk "
                                       'tag'):  # (not read as O)
    tagging.read_conll(path, column=1)
  cfg = config_lib.default_config().task
  cfg.update(name='own', kind='tagging', train=path)
  task, splits = registry.load(cfg)
  assert task.labels == ('O', 'B-PLACE', 'E-PLACE', 'I-PLACE') and task.kind == 'tagging'
  assert splits['train'][0].label == ('B-PLACE', 'I-PLACE', 'E-PLACE', 'O')
  (tmp_path / 'bad.txt').write_text('word\n')
  with pytest.raises(ValueError, match='line 1 of .* has no tag column'):
    tagging.read_conll(str(tmp_path / 'bad.txt'))
  (tmp_path / 'bad.txt').write_text('EU B-ORG\nrejects O\n\nNew York B-LOC\n')
  with pytest.raises(ValueError, match=r"line 4 of .* has 3 columns where line 1 has 2 \('New "):
    tagging.read_conll(str(tmp_path / 'bad.txt'))
  cfg.dev = _write_conll(tmp_path / 'dev.txt',
                         [(['cat'], ['O']), (['big', 'cat'], ['O', 'B-ANIMAL'])])
  with pytest.raises(ValueError, match=r"^line 6 of .*dev.txt has the tag 'B-ANIMAL', of a type "
                                       r'\(ANIMAL\) the train data never tags; fix the tag or '):
    registry.load(cfg)  # named as the file writes it, with its line
  cfg.dev = _write_conll(tmp_path / 'dev.txt', [(['Rome'], ['B-PLACE'])])  # S-PLACE, unseen: kept
  task, splits = registry.load(cfg)
  assert splits['dev'][0].label == ('S-PLACE',) and task.tag_scheme == 'IOB2'
  cfg.tag_column = 5
  with pytest.raises(ValueError, match=r'^task.tag_column=5, and line 3 of .*train.txt has 3 '
                                       r'columns; give a column from 0 to 2 \(-1: the last\)$'):
    registry.load(cfg)


@pytest.mark.fast
def test_predictions_and_exported_labels_speak_the_train_files_scheme():
  from electra_jax.finetune.kinds import tagging
  iob1 = ('I-PER', 'I-PER', 'B-PER', 'O', 'I-LOC', 'I-ORG')
  iob2 = ('B-PER', 'I-PER', 'B-PER', 'O', 'B-LOC', 'B-ORG')
  bioes = ('B-PER', 'E-PER', 'S-PER', 'O', 'S-LOC', 'S-ORG')
  assert [tagging.scheme_of([t]) for t in (iob1, iob2, bioes)] == ['IOB1', 'IOB2', 'BIOES']
  assert tagging.scheme_of([('O', 'B-X'), ('I-X', 'O')]) == 'IOB1'  # any sentence decides
  for written, scheme in ((iob1, 'IOB1'), (iob2, 'IOB2'), (bioes, 'BIOES')):
    for tags in (iob1, iob2, bioes):  # the same chunks, whatever the scheme read
      assert tagging.in_scheme(tagging.to_bioes(tags), scheme) == written
  labels = ('O', 'B-PER', 'E-PER', 'I-PER', 'S-PER')
  assert tagging.output_names(labels, 'IOB2') == ['O', 'B-PER', 'I-PER', 'I-PER', 'B-PER']
  assert tagging.output_names(labels, 'BIOES') == list(labels)
  assert tagging.KIND.exported_labels({'labels': labels}) == list(labels)  # an older checkpoint
  fields = hf_lib.labelled(tagging.KIND.exported_labels({'labels': labels, 'tag_scheme': 'IOB1'}))
  assert fields['id2label'][4] == 'B-PER' and fields['label2id'] == {'O': 0, 'B-PER': 1, 'I-PER': 2}


@pytest.mark.fast
def test_encode_tagged_puts_each_tag_on_the_first_sub_token_and_cuts_long_sentences():
  from electra_jax.finetune.kinds import tagging
  tok = _Tokenizer()
  tok.encode_batch = lambda words: [[10 + i for i in range(len(w) // 3)] for w in words]
  task = tasks_lib.Task('t', 'tagging', ('O', 'S-X'), ('f1',))
  examples = [tasks_lib.Example(('abcdef', 'ab', 'abc'), None, ('S-X', 'O', 'S-X')),
              tasks_lib.Example(('abcdefghi',) * 3, None, ('O', 'S-X', 'O'))]
  out = encode_lib.encode_tagged(examples, task, tok, 8)
  # 'abcdef' -> 2 pieces, 'ab' -> none ([UNK]), 'abc' -> 1
  np.testing.assert_array_equal(out.input_ids[0], [2, 10, 11, 1, 10, 3, 0, 0])
  np.testing.assert_array_equal(out.labels[0], [-1, 1, -1, 0, 1, -1, -1, -1])
  np.testing.assert_array_equal(out.word_positions[0], [1, 3, 4])
  assert out.truncated == 1 and list(out.word_positions[1]) == [1, 4]  # the third word is cut
  logits = np.zeros((2, 8, 2))
  logits[1, 4, 1] = 1.0
  assert tagging.word_tags(task, logits, out, examples)[1] == ('O', 'S-X', 'O')


def test_finetuning_learns_a_synthetic_tagging_task(tmp_path, pretrained):
  cfg = config_lib.default_config()
  cfg.update(init=pretrained, batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=6.0,
             log_every=50, dropout_rate=0.0)
  cfg.task.update(name='own', kind='tagging',
                  train=_write_conll(tmp_path / 'train.txt', _tagged(320, 0)),
                  dev=_write_conll(tmp_path / 'dev.txt', _tagged(96, 1)),
                  test=_write_conll(tmp_path / 'test.txt', _tagged(8, 2)))
  cfg.optimizer.learning_rate = 2e-3
  summary = run.finetune(cfg, str(tmp_path / 'ft'), log=_quiet)
  assert summary['seeds'][0]['dev']['f1'] > 0.7, summary['seeds']  # tagging all O scores 0
  out = run.finetune(config_lib.saved_config(str(tmp_path / 'ft'), 'predict'), str(tmp_path / 'ft'),
                     log=_quiet, mode='predict')
  lines = open(out['predictions'][0]).read().split('\n\n')
  assert len([l for l in lines if l.strip()]) == 8
  predicted = {l.split()[-1] for l in open(out['predictions'][0]) if l.strip()}
  assert 'B-PLACE' in predicted and predicted <= {'O', 'B-PLACE', 'I-PLACE', 'B-ANIMAL', 'I-ANIMAL'}
  # launch/predict.py: the tagged dev file scores the dev F1 again; a word per line is tagged too,
  # each word with its tag (IOB2, as the train file) and the tag's probability
  ft = str(tmp_path / 'ft')
  done = predict_lib.predict(ft, str(tmp_path / 'dev.txt'), log=_quiet)
  assert done['scores'][0] == pytest.approx(summary['seeds'][0]['dev'], abs=1e-6)
  words = tmp_path / 'words.txt'
  sentences = _tagged(5, 3)
  words.write_text(''.join(''.join(w + '\n' for w in ws) + '\n' for ws, _ in sentences))
  done = predict_lib.predict(ft, str(words), log=_quiet)
  assert not done['scores']
  assert done['outputs'][0].endswith(os.path.join('predictions', 'words.txt'))
  tagged = [block.split('\n') for block in open(done['outputs'][0]).read().strip().split('\n\n')]
  assert ([tuple(l.split()[0] for l in block) for block in tagged]
          == [tuple(ws) for ws, _ in sentences])
  for block in tagged:
    for line in block:
      _, tag, p = line.split()  # ('-': a word max_seq_length cut, tagged O)
      assert tag in {'O', 'B-PLACE', 'I-PLACE', 'B-ANIMAL', 'I-ANIMAL'}
      assert (p == '-' and tag == 'O') or 0 < float(p) <= 1, line
  done = export_lib.export(str(tmp_path / 'ft'), str(tmp_path / 'hf'), log=_quiet)  # IOB2
  names = json.load(open(tmp_path / 'hf' / 'config.json'))['id2label']
  assert sorted(set(names.values())) == ['B-ANIMAL', 'B-PLACE', 'I-PLACE', 'O'], names
  if HAS_HF:  # --check: the dev sentences through pipeline('token-classification'), word by word
    dev = export_lib.verify(done, log=_quiet)['hf']['dev']
    assert dev['agrees'] and dev['same'] == dev['rows'] > 300, dev


def _finetune_config_file(tmp_path, pretrained, **fields):
  """A config file for launch/finetune.py: the synthetic task on the test model, with dropout (a
  resumed run must continue its random stream too)."""
  train = _synthetic(tmp_path / 'train.csv', 480, 'classification', 0)
  dev = _synthetic(tmp_path / 'dev.csv', 160, 'classification', 1)
  path = tmp_path / 'finetune_config.py'
  path.write_text(
      'from electra_jax.finetune.config import default_config\n'
      'def get_config():\n'
      '  c = default_config()\n'
      f'  c.update(init={pretrained!r}, batch_size=16, eval_batch_size=16, max_seq_length=32,\n'
      '           epochs=2.0, log_every=5, num_seeds=1, dropout_rate=0.1)\n'
      f'  c.update(**{fields!r})\n'
      f'  c.task.update(name="own", kind="classification", train={train!r}, dev={dev!r})\n'
      '  c.optimizer.learning_rate = 2e-3\n'
      '  return c\n')
  return path


def _finetune_command(config_file, workdir):
  from conftest import ROOT
  return [sys.executable, os.path.join(ROOT, 'launch', 'finetune.py'), f'--config={config_file}',
          f'--workdir={workdir}']


def _until(proc, text):
  seen = []
  for line in proc.stdout:
    seen.append(line)
    if text in line:
      return seen
  raise AssertionError(''.join(seen[-20:]))


def test_finetuning_survives_sigkill_and_sigterm_and_keeps_its_best_checkpoint(tmp_path,
                                                                               pretrained):
  """The fine-tuning loop is the pre-training loop: killed (SIGKILL) and stopped (SIGTERM), then
  re-run, it ends bit-identical to an uninterrupted run; dev scores every eval_every steps, the
  best checkpoint kept, TensorBoard events and curves.png per seed."""
  import signal
  import subprocess
  from conftest import CHILD_ENV
  config_file = _finetune_config_file(tmp_path, pretrained, eval_every=20, save_every=10)
  straight, stopped = tmp_path / 'straight', tmp_path / 'stopped'
  # a compilation cache of their own: the straight run compiles the programs (one that JAX's
  # cache, shared with the other tests, held would be taken from there and not kept)
  env = {**CHILD_ENV, 'JAX_COMPILATION_CACHE_DIR': str(tmp_path / 'cache')}
  out = subprocess.run(_finetune_command(config_file, straight), capture_output=True, text=True,
                       env=env, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  seed_dir = straight / 'seed_0'
  evals = [json.loads(l) for l in open(seed_dir / 'metrics.jsonl') if '"split": "eval"' in l]
  assert [r['step'] for r in evals] == [20, 40, 60] and all('accuracy' in r for r in evals)
  best = json.load(open(straight / 'results.json'))['seeds'][0]['best_step']
  top = max(r['accuracy'] for r in evals)
  assert best in {r['step'] for r in evals if r['accuracy'] == top}
  assert os.path.isdir(seed_dir / 'checkpoints' / str(best))  # kept beside the latest
  assert os.path.getsize(seed_dir / 'curves.png') > 10_000
  assert os.listdir(seed_dir / 'tensorboard')
  assert re.search(r'^\d\d:\d\d:\d\d seed 0 \| eval step 20 \| accuracy ', out.stdout, re.M)

  proc = subprocess.Popen(_finetune_command(config_file, stopped), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env)
  _until(proc, ' step 25/60 ')
  proc.kill()  # SIGKILL: resumed from checkpoint 20 (or 10 while 20 was being written)
  proc.wait()
  proc = subprocess.Popen(_finetune_command(config_file, stopped), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env)
  seen = _until(proc, ' step 35/60 ')
  assert any('seed 0: resumed from' in l for l in seen), ''.join(seen[-20:])
  proc.send_signal(signal.SIGTERM)
  rest, _ = proc.communicate(timeout=120)
  assert proc.returncode == 143 and 'stopped by SIGTERM at step ' in rest, rest[-3000:]
  out = subprocess.run(_finetune_command(config_file, stopped), capture_output=True, text=True,
                       env=env, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  # its programs from JAX's compilation cache, as an earlier run compiled them (and below, the
  # same numbers to the bit as the run that compiled them)
  assert re.search(r'seed 0: its programs compiled \((\d+) of \1 programs from the compilation '
                   r'cache\)', out.stdout), out.stdout[-3000:]
  a, b = (json.load(open(w / 'results.json'))['seeds'][0] for w in (straight, stopped))
  assert a['dev'] == b['dev'] and a['best_step'] == b['best_step']
  arrays = []
  for workdir in (straight, stopped):
    ckpt = checkpoint_lib.Checkpointer(str(workdir / 'seed_0' / 'checkpoints'))
    arrays.append(jax.tree.leaves(ckpt.restore_arrays(60)[0]))
    ckpt.close()
  for x, y in zip(*arrays, strict=True):
    np.testing.assert_array_equal(x, y)


@pytest.mark.fast
def test_the_tfidf_baseline_learns_what_the_words_say_and_is_scored_like_the_task(tmp_path):
  """On a task decided by one word in each text, the bag-of-words baseline (cross-validated on
  train alone) is near perfect, on regression too; QA and tagging have none."""
  from electra_jax.finetune import baseline
  rng = np.random.default_rng(0)
  filler = 'the a film story plot actor scene music time day'.split()
  def examples(n, kind):
    out = []
    for i in range(n):
      k = int(rng.integers(3))
      text = ' '.join(rng.choice(filler, 6)) + f' {("goal", "stocks", "painting")[k]} ' + ' '.join(
          rng.choice(filler, 3))
      label = ('sport', 'money', 'art')[k] if kind == 'classification' else float(k) + 0.5
      out.append(tasks_lib.Example(text, None, label))
    return out
  cls = tasks_lib.Task('t', 'classification', ('art', 'money', 'sport'), ('accuracy',),
                       ('dev',), test_splits=('test',))
  splits = {'train': examples(90, 'classification'), 'dev': examples(30, 'classification'),
            'test': examples(30, 'classification')}
  scores = baseline.tfidf(cls, registry.get('classification'), splits)
  assert set(scores) == {'dev', 'test'} and scores['dev']['accuracy'] >= 0.95
  reg = tasks_lib.Task('r', 'regression', (), ('spearman', 'pearson'), ('dev',))
  scores = baseline.tfidf(reg, registry.get('regression'), {'train': examples(90, 'regression'),
                                                             'dev': examples(30, 'regression')})
  assert scores['dev']['pearson'] >= 0.9
  assert baseline.tfidf(tasks_lib.Task('q', 'qa', (), ('f1',), ('dev',)), registry.get('qa'),
                        splits) is None
  assert baseline.verdict('dev', 'accuracy', 0.8, 0.85) == (
      'dev accuracy: fine-tuned median 80.00 is behind the TF-IDF baseline 85.00 (-5.00 points)')


# ---- the head from a linear probe (head_init='probe')
# ---------------------------------------------

@pytest.mark.fast
@pytest.mark.parametrize('classes', [2, 4, 0])
def test_a_probe_heads_weights_give_the_fitted_linear_models_predictions(classes):
  """The head's kernel and bias, the features' centring and scale folded in, give the logistic
  regression's class probabilities (binary: its one logit split in two) or the ridge regression's
  predictions; a class the train split lacks is never predicted."""
  from electra_jax.finetune import baseline
  from electra_jax.finetune import probe
  rng = np.random.default_rng(classes)
  x = rng.normal(size=(300, 12)) * rng.uniform(0.1, 5, 12) + rng.normal(size=12) * 3
  signal = x @ rng.normal(size=(12, max(classes - 1, 1)))
  numbers = classes == 0
  y = signal[:, 0] if numbers else np.argmax(np.concatenate(
      [signal, np.zeros((300, 1))], 1) + rng.gumbel(size=(300, classes)), 1)
  outputs = 1 if numbers else classes + 1  # one class more than the data has
  model = baseline.linear_model(numbers, None if numbers else y)
  kernel, bias, strength = probe.head_weights(model, x, y, outputs, numbers)
  assert kernel.shape == (12, outputs) and bias.shape == (outputs,)
  assert strength in ((1 / c for c in (0.3, 1.0, 3.0, 10.0, 30.0)) if numbers
                      else (0.3, 1.0, 3.0, 10.0, 30.0))
  standard = (x - x.mean(0)) / np.sqrt(np.mean(np.square(x)))
  ours = x @ kernel + bias
  if numbers:
    np.testing.assert_allclose(ours[:, 0], model.predict(standard), rtol=1e-4, atol=1e-4)
    return
  probabilities = np.exp(ours - ours.max(1, keepdims=True))
  probabilities /= probabilities.sum(1, keepdims=True)
  np.testing.assert_allclose(probabilities[:, :classes], model.predict_proba(standard), atol=1e-4)
  assert probabilities[:, classes].max() < 1e-3
  assert (np.argmax(ours, 1) == model.predict(standard)).all()
  assert np.mean(model.predict(standard) == y) > 0.6  # the features say something


def test_a_probe_head_starts_the_fine_tuning_where_the_linear_model_ends(tmp_path, pretrained):
  """head_init='probe': the encoder as pre-trained, the head the linear model fitted on its
  frozen features, whose dev score the log gives; then every parameter trains. Tagging has no
  such head and is refused before anything runs."""
  from electra_jax.train import partitioning
  from electra_jax.train import step as step_lib
  from electra_jax.data import tokenizer as tokenizer_lib
  from electra_jax.finetune import batches
  from electra_jax.finetune import probe
  cfg = config_lib.default_config()
  cfg.update(init=pretrained, batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=2.0,
             log_every=100, dropout_rate=0.0, head_init='probe', baseline=False, num_seeds=2)
  cfg.task.update(name='own', kind='classification',
                  train=_synthetic(tmp_path / 'train.csv', 320, 'classification', 0),
                  dev=_synthetic(tmp_path / 'dev.csv', 96, 'classification', 1))
  lines = []
  summary = run.finetune(cfg, str(tmp_path / 'ft'), log=lines.append)
  assert any(l.startswith('recipe: ') and 'the head from a linear probe' in l for l in lines)
  logged = [l for l in lines if 'head from a linear probe of the frozen encoder' in l]
  assert [l.split(':')[0] for l in logged] == ['seed 0', 'seed 1'], lines
  probe_dev = float(re.search(r'dev accuracy (\d+\.\d\d)', logged[0]).group(1))
  assert logged[0].split('): ')[1] == logged[1].split('): ')[1]  # one start, one probe for both
  assert summary['median']['dev/accuracy'] > 0.5, lines
  # The same start, in pieces: the head placed in the model gives the linear model's logits.
  pre = pretrained_lib.for_finetuning(cfg, 'train', _quiet)
  task, splits = registry.load(cfg.task, pre.config, _quiet)
  kind = registry.get(task.kind)
  tokenizer = tokenizer_lib.load_tokenizer(pre.vocab, lower_case=pre.lower_case)
  data = {s: kind.encode(task, e, tokenizer, 32, s == 'train', cfg) for s, e in splits.items()}
  mesh = partitioning.make_mesh()
  resolved = config_lib.resolve(cfg, task, pre.model_cfg, 40,
                                config_lib.check_for_model(cfg, pre.model_cfg))
  setup = run.make_setup(cfg, resolved, pre, task, kind, 0)
  state = step_lib.compile_steps(setup, mesh)[0]()
  head = probe.fit(cfg, task, kind, setup.model, state.params, data, splits, mesh, _quiet)
  started = probe.with_head(state, head)
  features = batches.predict(setup.model, state.params, data['dev'], 16, mesh, method='features')
  logits = batches.predict(setup.model, started.params, data['dev'], 16, mesh)
  np.testing.assert_allclose(logits, features @ head['kernel'] + head['bias'], atol=2e-4)
  accuracy = 100 * np.mean(np.argmax(logits, 1) == data['dev'].labels)
  assert accuracy == pytest.approx(probe_dev, abs=0.006)
  assert accuracy > 100 * np.mean(data['dev'].labels == 1) - 5  # not worse than the majority
  for part in ('embeddings', 'discriminator'):
    jax.tree.map(np.testing.assert_array_equal, started.params[part], state.params[part])
  cfg.task.update(kind='tagging', train=str(tmp_path / 'train.conll'), dev='')
  (tmp_path / 'train.conll').write_text('cat B-X\ndog O\n\n' * 40)
  with pytest.raises(UserError, match="head_init='probe' fits a linear model .* a tagging head "
                     'has none; use --config.head_init=random'):
    run.finetune(cfg, str(tmp_path / 'ft_tagging'), log=_quiet)
  assert not os.path.exists(tmp_path / 'ft_tagging')


def test_a_task_kind_added_to_the_registry_fine_tunes(tmp_path, pretrained, monkeypatch):
  """A kind of task is one module's KIND and one entry of finetune/kinds/registry.py: here, declared
  in this test, texts classed by their length (no label column), which the config takes as
  task.kind, the loader reads, and a fine-tuning trains and scores end to end."""
  from electra_jax.finetune.kinds import classification
  from electra_jax.finetune.inputs import files

  class ByLength(classification.Classification):
    name = 'by_length'
    own_data = 'a text per row, classed by its number of words'

    def load(self, cfg, log=print):
      splits = {s: [tasks_lib.Example(e.text_a, None, 'long' if len(e.text_a.split()) > 6
                                      else 'short')
                    for e in files.read_table(getattr(cfg, s), cfg.text_a, '', '',
                                              labelled=False)]
                for s in ('train', 'dev') if getattr(cfg, s)}
      return tasks_lib.Task(tasks_lib.task_name(cfg), self.name, ('long', 'short'),
                            ('accuracy',), ('dev',)), splits

  monkeypatch.setitem(registry.KINDS, 'by_length', ByLength())
  rows = [(' '.join(WORDS[i:i + 3 + i % 8]),) for i in range(64)]
  cfg = config_lib.default_config()
  cfg.update(init=pretrained, batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=1.0,
             baseline=False)
  cfg.task.update(name='own', kind='by_length',
                  train=_write(tmp_path / 'train.csv', rows, ['text']),
                  dev=_write(tmp_path / 'dev.csv', rows[:32], ['text']))
  lines = []
  summary = run.finetune(cfg, str(tmp_path / 'ft'), log=lines.append)
  assert summary['seeds'][0]['steps'] == 4 and 0 <= summary['median']['dev/accuracy'] <= 1
  assert any(': by_length, 2 classes, scored by accuracy' in l for l in lines), lines


def test_below_its_edge_a_finetuning_reads_the_typed_config_alone(tmp_path, pretrained,
                                                                  monkeypatch):
  """Every read of an untyped fine-tuning config (an ml_collections config of its fields, or one
  of its sections) by a function of the package, in a fine-tuning, its scoring again and its
  predictions: none after `config_lib.parse` returns (the task read, encoded, trained, scored,
  saved, restored: the typed config alone), and before it only the edge's few."""
  ours = [set(config_lib.CONFIG.fields)] + [set(s.fields) for s in (
      config_lib.TASK, config_lib.PROMPT, config_lib.QA, config_lib.OPTIMIZER)]
  readers = record_config_reads(  # (a fine-tuning config, or one of its sections)
      monkeypatch, config_lib, 'parse',
      lambda config: set(object.__getattribute__(config, '_fields')) in ours)
  cfg = config_lib.default_config()
  cfg.update(init=pretrained, batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=1.0,
             num_seeds=2)
  cfg.task.update(name='own', train=_synthetic(tmp_path / 'train.csv', 64, 'classification', 0),
                  dev=_synthetic(tmp_path / 'dev.csv', 32, 'classification', 1),
                  test=_synthetic(tmp_path / 'test.csv', 16, 'classification', 2))
  workdir = str(tmp_path / 'ft')
  summary = run.finetune(cfg, workdir, log=_quiet)
  assert [s['steps'] for s in summary['seeds']] == [4, 4]
  for mode in ('eval', 'predict'):
    run.finetune(config_lib.saved_config(workdir, mode), workdir, log=_quiet, mode=mode)
  assert predict_lib.predict(workdir, str(tmp_path / 'dev.csv'), log=_quiet)['examples'] == 32
  assert readers['below'] == set(), readers['below']
  assert 'finetune/config.py:parse' in readers['edge'], readers['edge']
  assert len(readers['edge']) <= 5, sorted(readers['edge'])


def test_an_unfinished_or_running_finetuning_is_named_and_refused_by_predict_and_export(
    tmp_path, pretrained):
  """A fine-tuning stopped at step 4 of 12 of its first seed, its second never started: predict
  and export name it so and refuse it unless --allow_unfinished; while a run holds the workdir,
  both refuse it whatever the flags."""
  from electra_jax.apps import export as export_lib
  from electra_jax.train import workdir as workdir_lib
  cfg = config_lib.default_config()
  cfg.update(init=pretrained, batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=2.0,
             log_every=1, save_every=2, num_seeds=2)
  cfg.task.update(name='own', kind='classification',
                  train=_synthetic(tmp_path / 'train.csv', 96, 'classification', 0),
                  dev=_synthetic(tmp_path / 'dev.csv', 32, 'classification', 1))
  workdir = str(tmp_path / 'ft')

  def killed_at_step_4(line):
    if re.search(r'seed 0 \| step 4/12 ', line):
      raise KeyboardInterrupt

  with pytest.raises(KeyboardInterrupt):
    run.finetune(cfg, workdir, log=killed_at_step_4)
  dev = str(tmp_path / 'dev.csv')
  said = (rf'^{re.escape(workdir)} holds an unfinished fine-tuning \(seed 0 at step 4 of 12, '
          rf'seed 1 never started\); finish it \(its launch/finetune.py command again, with '
          rf'--workdir={re.escape(workdir)}, resumes it\), or add --allow_unfinished to ')
  with pytest.raises(UserError, match=said + 'predict with what it holds$'):
    predict_lib.predict(workdir, dev, log=_quiet)
  with pytest.raises(UserError, match=said + 'export with what it holds$'):
    export_lib.export(workdir, str(tmp_path / 'hf'), log=_quiet)
  assert not os.path.exists(os.path.join(workdir, 'predictions')) and not os.path.exists(
      tmp_path / 'hf')
  done = subprocess.run([*script('predict.py'), f'--workdir={workdir}', f'--input={dev}',
                         '--allow_unfinished'], capture_output=True, text=True, cwd=ROOT,
                        env=CHILD_ENV, timeout=300, check=False)
  assert done.returncode == 0 and 'seed 0: 32 predictions' in done.stdout, done.stderr[-2000:]
  assert export_lib.export(workdir, str(tmp_path / 'hf'), log=_quiet,
                           allow_unfinished=True).meta['step'] == 4
  held = workdir_lib.acquire(workdir, 'fine-tuning')
  try:
    for use in (lambda: predict_lib.predict(workdir, dev, output=str(tmp_path / 'p.csv'),
                                            log=_quiet, allow_unfinished=True),
                lambda: export_lib.export(workdir, str(tmp_path / 'hf2'), log=_quiet,
                                          allow_unfinished=True)):
      with pytest.raises(workdir_lib.Busy, match=r'is in use by a fine-tuning run'):
        use()
  finally:
    held.release()
  assert not os.path.exists(tmp_path / 'p.csv') and not os.path.exists(tmp_path / 'hf2')
  # the workdir's copy of its vocabulary gone, or damaged: named, not a pre-training's field
  vocab = next(os.path.join(workdir, n) for n in os.listdir(workdir) if n.startswith('vocab'))
  os.rename(vocab, tmp_path / 'kept_vocab')
  predict_here = lambda: predict_lib.predict(workdir, dev, output=str(tmp_path / 'p.csv'),
                                             log=_quiet, allow_unfinished=True)
  with pytest.raises(UserError, match=rf"^{re.escape(vocab)}, the fine-tuning's copy of its "
                     r'vocabulary, is missing; put it back .*or fine-tune again to rewrite it$'):
    predict_here()
  with open(vocab, 'w') as f:
    f.write('not a vocabulary\n')
  with pytest.raises(UserError, match=rf'^{re.escape(vocab)} is not a SentencePiece model file'):
    predict_here()
