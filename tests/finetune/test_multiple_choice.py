"""Multiple choice (finetune/kinds/multiple_choice.py): the candidates' layout, a scorer that treats
each candidate alike, a synthetic task learnt far above chance, saved fine-tunings scored and
predicted again, and the export as HF's ElectraForMultipleChoice with our logits."""

import csv
import os
import random

import jax
import numpy as np
import pytest

from conftest import HAS_ONNX, WORDS, assert_onnx_agrees
from electra_jax import UserError
from electra_jax.data.tokenizer import SPECIAL
from electra_jax.finetune import config as config_lib
from electra_jax.finetune.kinds import heads
from electra_jax.finetune.kinds import multiple_choice
from electra_jax.finetune import pretrained as pretrained_lib
from electra_jax.finetune.kinds import registry
from electra_jax.finetune import run
from electra_jax.finetune.inputs import tasks as tasks_lib
from electra_jax.apps import export as export_lib
from electra_jax.train import checkpoint as checkpoint_lib

CHOICES = ('ending0', 'ending1', 'ending2')


def _quiet(*_):
  pass


class _Tokenizer:
  """One id per word: 10 + its length."""
  special = SPECIAL

  def encode_batch(self, texts):
    return [[10 + len(w) for w in t.split()] for t in texts]


@pytest.mark.fast
def test_each_candidate_is_encoded_as_a_pair_with_the_context():
  task = tasks_lib.Task('t', 'multiple_choice', ('0', '1'), ('accuracy',))
  examples = [tasks_lib.Example('a bb', ('ccc', 'dddd eeeee'), '1'),
              tasks_lib.Example('ffffff', ('g', 'hh'), None)]
  out = registry.get('multiple_choice').encode(task, examples, _Tokenizer(), 8, train=True)
  assert out.input_ids.shape == (2, 2, 8) and len(out) == 2
  np.testing.assert_array_equal(out.input_ids[0, 0], [2, 11, 12, 3, 13, 3, 0, 0])
  np.testing.assert_array_equal(out.input_ids[0, 1], [2, 11, 12, 3, 14, 15, 3, 0])
  np.testing.assert_array_equal(out.segment_ids[0, 1], [0, 0, 0, 0, 1, 1, 1, 0])
  np.testing.assert_array_equal(out.input_ids[1, 1], [2, 16, 3, 12, 3, 0, 0, 0])
  np.testing.assert_array_equal(out.labels, [1, -1])


def test_the_scorer_scores_each_candidate_alone():
  """Scores of candidates in another order are the same scores in that order, and each equals
  the one-output Classifier's on that candidate alone."""
  from conftest import test_config
  from electra_jax.model import networks as model_lib
  cfg = model_lib.ModelConfig.from_config(test_config().model)
  model = multiple_choice.ChoiceScorer(cfg, 1)
  params = heads.init_params(model, jax.random.key(0), shape=(1, 2, 8))
  rng = np.random.default_rng(0)
  ids = rng.integers(5, cfg.vocab_size, (3, 4, 8)).astype(np.int32)
  segments = np.broadcast_to((np.arange(8) >= 4).astype(np.int32), ids.shape)
  mask = np.ones_like(ids)
  mask[:, :, 6:] = 0
  scores = np.asarray(model.apply({'params': params}, ids, segments, mask))
  assert scores.shape == (3, 4)
  order = np.array([2, 0, 3, 1])
  again = np.asarray(model.apply({'params': params}, ids[:, order], segments[:, order],
                                 mask[:, order]))
  np.testing.assert_allclose(again, scores[:, order], rtol=1e-5, atol=1e-6)
  alone = heads.Classifier(cfg, 1).apply({'params': params}, ids[:, 2], segments[:, 2],
                                          mask[:, 2])
  np.testing.assert_allclose(np.asarray(alone)[:, 0], scores[:, 2], rtol=1e-5, atol=1e-6)
  assert np.std(scores) > 0


def _write(path, n, seed):
  """Contexts of corpus words and three candidate endings; the right one is the only one holding
  the word 'cat' (its index is the label)."""
  rng = random.Random(seed)
  others = [w for w in WORDS if w != 'cat']
  with open(path, 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(('context',) + CHOICES + ('label',))
    for _ in range(n):
      right = rng.randrange(len(CHOICES))
      endings = []
      for k in range(len(CHOICES)):
        words = [rng.choice(others) for _ in range(rng.randint(2, 5))]
        if k == right:
          words.insert(rng.randrange(len(words) + 1), 'cat')
        endings.append(' '.join(words))
      writer.writerow([' '.join(rng.choice(others) for _ in range(6))] + endings + [right])
  return str(path)


def _config(pretrained, tmp_path):
  cfg = config_lib.default_config()
  cfg.update(init=pretrained, batch_size=16, eval_batch_size=16, max_seq_length=24, epochs=4.0,
             log_every=50, num_seeds=1, dropout_rate=0.0)
  cfg.task.update(name='own', kind='multiple_choice', text_a='context', choices=','.join(CHOICES),
                  train=_write(tmp_path / 'train.csv', 320, 0),
                  dev=_write(tmp_path / 'dev.csv', 96, 1), test=_write(tmp_path / 'test.csv', 8, 2))
  cfg.optimizer.learning_rate = 2e-3
  return cfg


def test_multiple_choice_learns_predicts_and_exports_with_our_logits(tmp_path, pretrained):
  cfg = _config(pretrained, tmp_path)
  workdir = str(tmp_path / 'ft')
  lines = []
  summary = run.finetune(cfg, workdir, log=lines.append)
  accuracy = summary['seeds'][0]['dev']['accuracy']
  assert accuracy > 0.8, (accuracy, lines[-8:])  # chance: 1/3
  assert summary['seeds'][0]['test']['accuracy'] >= 0  # the labelled test file is scored
  assert any('multiple_choice, one of 3 candidates' in l for l in lines), lines[:3]
  again = run.finetune(config_lib.saved_config(workdir, 'eval'), workdir, log=_quiet, mode='eval')
  assert again['seeds'][0]['dev'] == pytest.approx(summary['seeds'][0]['dev'])
  out = run.finetune(config_lib.saved_config(workdir, 'predict'), workdir, log=_quiet,
                     mode='predict')
  with open(out['predictions'][0]) as f:
    rows = list(csv.reader(f, delimiter='\t'))
  assert rows[0] == ['index', 'prediction', 'context', 'choice'] and len(rows) == 9
  assert all('cat' in r[3].split() for r in rows[1:]) or accuracy < 1
  _exports_with_our_logits(workdir, pretrained, tmp_path)


def _exports_with_our_logits(workdir, pretrained, tmp_path):
  try:
    import torch
    import transformers
  except ImportError:  # the test extra is not installed: the fine-tuning was checked above
    return
  out = str(tmp_path / 'hf')
  done = export_lib.export(workdir, out, log=_quiet, onnx=HAS_ONNX)
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'seed_0', 'checkpoints'))
  state, meta = ckpt.restore_arrays(ckpt.latest_step())
  ckpt.close()
  assert meta['kind'] == 'multiple_choice'
  cfg = pretrained_lib.load(pretrained, from_scratch=True, log=_quiet).model_cfg
  tok = transformers.AutoTokenizer.from_pretrained(out)
  contexts = [' '.join(WORDS[i:i + 4]) for i in range(3)]
  endings = [' '.join(WORDS[i + k:i + k + 2 + k]) for i in range(3) for k in range(4)]
  batch = tok([c for c in contexts for _ in range(4)], endings, padding=True, return_tensors='np')
  grouped = {k: v.reshape(3, 4, -1) for k, v in batch.items()}
  ours = np.asarray(multiple_choice.ChoiceScorer(cfg, 1).apply(
      {'params': state['params']}, grouped['input_ids'], grouped['token_type_ids'],
      grouped['attention_mask']))
  hf_model = transformers.ElectraForMultipleChoice.from_pretrained(out).eval()
  with torch.no_grad():
    theirs = hf_model(**{k: torch.from_numpy(v).long() for k, v in grouped.items()}).logits.numpy()
  assert theirs.shape == (3, 4)
  np.testing.assert_allclose(ours, theirs, atol=1e-4)
  assert np.abs(ours).max() > 0.1
  checked = export_lib.verify(done, log=_quiet)['hf']  # what launch/export.py --check runs
  assert checked['max_abs_diff'] < 1e-4 and checked['max_abs_logit'] > 0.1, checked
  if HAS_ONNX:  # --onnx: its graph in ONNX Runtime, pairs, and the task's 4 candidates
    assert_onnx_agrees(checked)
    from electra_jax.apps import onnx_export
    graph = onnx_export.outputs(onnx_export.session(out), grouped).logits.numpy()
    np.testing.assert_allclose(ours, graph, atol=1e-4)


@pytest.mark.fast
def test_an_empty_candidate_is_refused_and_an_empty_text_named(tmp_path):
  from electra_jax.finetune.inputs import files
  path = tmp_path / 'mc.csv'
  path.write_text('ctx,a,b,label\nx,y,z,0\n,p,q,1\nw,,q,1\nv,r, ,0\n')
  with pytest.raises(ValueError, match=r"^data row 3 of .*mc.csv has an empty candidate in the "
                                       r"column 'a'; fill it in, or remove the row$"):
    files.read_table(str(path), 'ctx', '', 'label', choices=('a', 'b'))
  path.write_text('ctx,a,b,label\nx,y,z,0\n,p,q,1\n  ,r,s,0\n')
  said = []
  examples = files.read_table(str(path), 'ctx', '', 'label', choices=('a', 'b'), log=said.append)
  assert [e.text_a for e in examples] == ['x', '', '  '] and said == [
      f"warning: data rows 2, 3 of {path} have no text in the column 'ctx' (2 of 3 rows); used as "
      'they are']


def test_multiple_choice_files_are_checked(tmp_path, pretrained):
  cfg = _config(pretrained, tmp_path)
  cfg.task.choices = 'ending0'
  with pytest.raises(UserError, match=r"task.choices is 'ending0'; name the columns of the "
                     r"candidates, at least two"):
    run.finetune(cfg, str(tmp_path / 'a'), log=_quiet)
  cfg.task.choices = 'ending0,ending1,ending0'
  with pytest.raises(UserError, match=r"task.choices names ending0 more than once"):
    run.finetune(cfg, str(tmp_path / 'a'), log=_quiet)
  cfg.task.choices = 'ending0,ending9'
  with pytest.raises(UserError, match=r"has no column 'ending9': .*; set task.text_a, "
                     r"task.text_b, task.choices and task.label"):
    run.finetune(cfg, str(tmp_path / 'b'), log=_quiet)
  cfg.task.choices = 'ending0,ending1'  # a label 2 names no candidate of two
  with pytest.raises(UserError, match=r"data row \d+ of .*train.csv \(and \d+ more\) has the "
                     r"label '2'; a label is the index of the right candidate among task.choices "
                     r"\(ending0, ending1\): 0 to 1"):
    run.finetune(cfg, str(tmp_path / 'c'), log=_quiet)
  cfg.task.kind = 'choice'
  with pytest.raises(UserError, match=r"task.kind is 'choice'; use 'classification', "
                     r"'regression', 'tagging', 'multiple_choice' or 'prompted'"):
    run.finetune(cfg, str(tmp_path / 'd'), log=_quiet)
  assert not any(os.path.exists(tmp_path / d / 'config.json') for d in 'abcd')
