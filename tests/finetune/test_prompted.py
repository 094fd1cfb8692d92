"""The prompted kind (Xia et al.: the pre-trained detection head fine-tuned at each class's label
word) and few-shot fine-tuning (task.shots: each seed its own draw of K examples per class)."""

import dataclasses
import json
import os
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import HAS_HF, HAS_ONNX, WORDS, assert_onnx_agrees, test_config
from electra_jax import UserError
from electra_jax.finetune import baseline as baseline_lib
from electra_jax.finetune import batches
from electra_jax.finetune import config as config_lib
from electra_jax.apps import predict as predict_lib
from electra_jax.finetune import run
from electra_jax.apps import zeroshot
from electra_jax.finetune.inputs import prompts
from electra_jax.finetune.inputs import tasks
from electra_jax.finetune.inputs.encode import Encoded
from electra_jax.finetune.kinds import heads
from electra_jax.finetune.kinds import prompted
from electra_jax.finetune.kinds import registry
from electra_jax.model import networks as model_lib
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import partitioning
from test_finetune import _write
from test_zeroshot import words_tokenizer


def _model_cfg():
  cfg = model_lib.ModelConfig.from_config(test_config().model)
  return dataclasses.replace(cfg, dropout_rate=0.0, attention_dropout_rate=0.0)


@pytest.mark.fast
def test_the_prompted_model_is_the_pretrained_discriminator_and_its_head_and_nothing_more():
  """Its parameters are pre-training's embeddings, discriminator and detection head (names and
  shapes), which a fine-tuning copies in whole; its loss is the head's binary cross-entropy at
  the words, by hand; its gradient reaches the head and the encoder."""
  cfg = _model_cfg()
  pretrained = model_lib.init_params(cfg, jax.random.key(0))
  model = prompted.PromptScorer(cfg)
  kept = {k: pretrained[k] for k in ('embeddings', 'discriminator', 'discriminator_predictions')}
  params = heads.init_params(model, jax.random.key(1), pretrained=kept, shape=(1, 3, 8))
  assert jax.tree.structure(params) == jax.tree.structure(kept)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(kept)):
    np.testing.assert_array_equal(a, b)
  scores = jnp.asarray([[2.0, -1.0, 0.0], [0.5, 0.5, 3.0], [9.0, 9.0, 9.0]])
  labels = jnp.asarray([0, 2, -1])  # (the third: no example)
  loss, metrics = prompted.prompt_loss(scores, labels)
  softplus = lambda x: np.log1p(np.exp(x))  # -log sigmoid(-x): the BCE of target 0
  by_hand = np.mean([(softplus(-2.0) + softplus(-1.0) + softplus(0.0)) / 3,
                     (softplus(0.5) + softplus(0.5) + softplus(-3.0)) / 3])
  assert float(loss) == pytest.approx(by_hand, rel=1e-6)
  assert float(metrics['accuracy'][0]) == 2 and float(metrics['accuracy'][1]) == 2
  rng = np.random.default_rng(0)
  ids = jnp.asarray(rng.integers(5, cfg.vocab_size, (4, 3, 12)))
  mask = jnp.ones_like(ids)
  word = jnp.zeros_like(ids).at[..., 8:10].set(1)
  grads = jax.grad(lambda p: prompted.prompt_loss(model.apply(
      {'params': p}, ids, jnp.zeros_like(ids), mask, word_mask=word), jnp.asarray([0, 1, 2, 1]))[0]
                   )(params)
  for name in ('embeddings', 'discriminator', 'discriminator_predictions'):
    assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads[name])) > 0, name


@pytest.mark.fast
def test_before_any_step_a_prompted_model_predicts_what_zero_shot_prompting_does(tmp_path):
  """On the same weights, the prompted kind's scores of packed rows (and of a row each) are the
  zero-shot command's per-class "replaced" logits, negated; the same class wins."""
  tokenizer = words_tokenizer(tmp_path)
  cfg = _model_cfg()
  params = model_lib.init_params(cfg, jax.random.key(4))
  params = {k: params[k] for k in ('embeddings', 'discriminator', 'discriminator_predictions')}
  prompt = prompts.Prompt.parse('it was {label}.', 'pos=great,neg=terrible,meh=so-so')
  pairs = [(' '.join(random.Random(i).choices(['the', 'movie', 'a', 'good', 'plot', 'film'],
                                              k=i % 9 + 1)), None) for i in range(21)]
  rows = prompts.encode(tokenizer, tokenizer.special, pairs, prompt, 24)
  zero_shot = zeroshot.predict(cfg, params, rows.arrays(), batch_size=8)
  data = Encoded(rows.input_ids, rows.segment_ids, rows.input_mask, np.zeros(21, np.int32), 0,
                 token_inputs={'word_mask': rows.word_mask})
  mesh = partitioning.make_mesh()
  for pack in (True, False):
    ours = batches.predict(prompted.PromptScorer(cfg), params, data, 24, mesh, pack=pack)
    np.testing.assert_allclose(-ours, zero_shot, rtol=1e-5, atol=1e-5)
    assert (ours.argmax(-1) == zeroshot.choose(zero_shot)).all()
  assert len(packing_calls := batches.packing.prediction_calls(data, 24, True)) < len(
      batches.packing.prediction_calls(data, 24, False)), packing_calls  # really packed


def _cat_or_not(path, n: int, seed: int):
  """Short texts of corpus words; 'yes' where the word 'cat' is among them, else 'no'."""
  rng = random.Random(seed)
  others = [w for w in WORDS if w != 'cat']
  rows = []
  for _ in range(n):
    cat = rng.random() < 0.5
    words = [rng.choice(others) for _ in range(rng.randint(1, 3))] + ['cat'] * cat
    rng.shuffle(words)
    rows.append((' '.join(words), 'yes' if cat else 'no'))
  return _write(path, rows, ['text', 'label'])


def test_a_prompted_fine_tuning_learns_predicts_and_exports_a_model_hf_prompts_alike(
    tmp_path, pretrained):
  """Your own files fine-tuned through the detection head ('It has cat.' / 'It has dog.'): far
  above chance; launch/predict.py's rule on a new file; exported as ElectraForPreTraining whose
  logits are ours, and whose prompt (in its config) makes the zero-shot command on the export
  answer as the fine-tuning does."""
  cfg = config_lib.default_config()
  cfg.update(init=pretrained, batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=12.0,
             log_every=40, num_seeds=1, dropout_rate=0.0)
  cfg.task.update(name='own', kind='prompted', train=_cat_or_not(tmp_path / 'train.csv', 480, 0),
                  dev=_cat_or_not(tmp_path / 'dev.csv', 160, 1))
  cfg.prompt.update(template='It has {label}.', label_words='yes=cat,no=dog')
  cfg.optimizer.learning_rate = 2e-3  # (8 seeds: 92.5-98.1% on dev)
  lines: list = []
  workdir = str(tmp_path / 'ft')
  summary = run.finetune(cfg, workdir, log=lines.append)
  assert any(': prompted, 2 classes, scored by accuracy, f1 on dev' in l for l in lines), lines
  assert any("prompt 'It has {label}.' with yes=cat,no=dog" in l for l in lines), lines
  accuracies = [s['dev']['accuracy'] for s in summary['seeds']]
  assert min(accuracies) > 0.85, (accuracies, lines[-12:])
  new = _cat_or_not(tmp_path / 'new.csv', 40, 7)
  out = predict_lib.predict(workdir, new, str(tmp_path / 'new_predictions.tsv'), seed='0',
                            log=lambda *_: None)
  with open(out['outputs'][0]) as f:
    header, *rows = [l.rstrip('\n').split('\t') for l in f]
  assert len(rows) == 40 and header[:4] == ['index', 'text', 'label', 'prediction'], header
  assert {r[3] for r in rows} <= {'yes', 'no'} and out['scores'][0]['accuracy'] > 0.85, out
  if not HAS_HF:
    return
  from electra_jax.apps import export
  folder = str(tmp_path / 'hf')
  done = export.export(workdir, folder, seed=0, log=lambda *_: None, onnx=HAS_ONNX)
  checked = export.verify(done, log=lambda *_: None)['hf']
  assert checked['max_abs_diff'] < 1e-4, checked
  if HAS_ONNX:
    assert_onnx_agrees(checked)
  with open(os.path.join(folder, 'config.json')) as f:
    config = json.load(f)
  assert config['architectures'] == ['ElectraForPreTraining']
  assert config['electra_jax_prompt'] == {'template': 'It has {label}.',
                                          'label_words': {'no': 'dog', 'yes': 'cat'}}
  cfg.prompt.update(template='', label_words='')  # (the prompt the export carries)
  again = zeroshot.evaluate(cfg, folder, log=lambda *_: None)
  assert again['accuracy'] == pytest.approx(summary['seeds'][0]['dev']['accuracy'], abs=1e-9)


def test_few_shot_seeds_each_draw_k_per_class_and_the_baseline_takes_their_median(
    tmp_path, pretrained):
  """task.shots=K: each seed trains on its own draw of K train examples of each class (its
  checkpoint records which), the TF-IDF baseline is the median over the same draws; shots on a
  task without classes is one sentence."""
  cfg = config_lib.default_config()
  cfg.update(init=pretrained, batch_size=8, eval_batch_size=32, max_seq_length=32, epochs=1.0,
             num_seeds=3, seed=5)
  cfg.task.update(name='own', kind='prompted', shots=4,
                  train=_cat_or_not(tmp_path / 'train.csv', 200, 0),
                  dev=_cat_or_not(tmp_path / 'dev.csv', 40, 1))
  cfg.prompt.update(template='It has {label}.', label_words='yes=cat,no=dog')
  lines: list = []
  summary = run.finetune(cfg, str(tmp_path / 'ft'), log=lines.append)
  assert any(l.startswith('few-shot: each seed trains on its own draw of 4 examples per class '
                          '(8 of 200 train examples)') for l in lines), lines[:3]
  task, splits = registry.load(cfg.task, None, lambda *_: None)
  draws = {}
  for seed in (5, 6, 7):
    draws[seed] = tasks.few_shot(splits['train'], task.labels, 4, seed)
    assert sorted(e.label for e in draws[seed]) == ['no'] * 4 + ['yes'] * 4
    assert all(e in splits['train'] for e in draws[seed])
    ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'ft' / f'seed_{seed}' / 'checkpoints'))
    assert ckpt.meta(ckpt.latest_step())['train_fingerprint'] == tasks.fingerprint(draws[seed])
    ckpt.close()
  assert len({tasks.fingerprint(d) for d in draws.values()}) == 3  # three draws
  each = [baseline_lib.tfidf(task, registry.get('classification'),
                             {**splits, 'train': d})['dev']['accuracy'] for d in draws.values()]
  assert summary['baseline']['dev']['accuracy'] == pytest.approx(float(np.median(each)))
  cfg.task.update(kind='regression', train=str(tmp_path / 'x.csv'), dev='')
  _write(tmp_path / 'x.csv', [('a b', '1.5'), ('c d', '2.5')], ['text', 'label'])
  with pytest.raises(UserError, match='task.shots=4 draws 4 train examples of each class, and '
                     'task x is regression; give a classification task'):
    run.finetune(cfg, str(tmp_path / 'bad'), log=lambda *_: None)
  assert not os.path.exists(tmp_path / 'bad')


def test_a_prompted_task_that_cannot_be_prompted_is_one_sentence(tmp_path, pretrained):
  cfg = config_lib.default_config()
  cfg.update(init=pretrained, max_seq_length=32)
  cfg.task.update(name='builtin', kind='prompted')  # coherence: pairs of sentences
  cfg.prompt.update(template='{a} is {label}.', label_words='next=yes,random=no')
  with pytest.raises(UserError, match=r"places one text \({a}\), and the task's examples are "
                     'pairs of texts'):
    run.finetune(cfg, str(tmp_path / 'a'), log=lambda *_: None)
  cfg.prompt.update(template='', label_words='', )
  cfg.head_init = 'probe'
  with pytest.raises(UserError, match="head_init='probe' fits a new head on the encoder's "
                     'features, and a prompted fine-tuning trains the pre-trained detection head'):
    run.finetune(cfg, str(tmp_path / 'b'), log=lambda *_: None)
  cfg.head_init = 'random'
  cfg.task.update(name='builtin_topic')  # a named classification: prompted as the config says
  assert registry.named(cfg.task).kind == 'prompted'
  cfg.task.update(name='squad1')
  with pytest.raises(ValueError, match='task.kind=prompted picks the class of each text by its '
                     'label word, and task squad1 is qa'):
    registry.named(cfg.task)
  assert not any(os.path.exists(tmp_path / n) for n in 'ab')


@pytest.mark.skipif(not HAS_HF, reason='needs the test extra')
def test_a_modern_prompted_head_exports_as_modernbert_token_classification(tmp_path):
  """The modern backbone's prompted fine-tuning leaves as ModernBertForTokenClassification with one
  label (the detection head as pre-training exports it, which our importer reads back as one; the
  classes live in the prompt): HF's per-token logits equal ours on rows of different lengths."""
  import torch
  import transformers
  from conftest import MODERN
  from electra_jax.convert import hf as hf_lib
  cfg = model_lib.ModelConfig.from_config(test_config(**MODERN).model)
  kind = registry.get('prompted')
  model = kind.check_model(cfg, 1)
  params = heads.init_params(model, jax.random.key(5))
  state, fields = kind.to_hf(params, cfg, ['no', 'yes'], 0.0)
  assert fields['architectures'] == ['ModernBertForTokenClassification']
  folder = str(tmp_path / 'hf')
  os.makedirs(folder)
  hf_lib.save_folder(folder, state, {**hf_lib.hf_config(cfg, 'discriminator'), **fields,
                                     'pad_token_id': 0})
  theirs_model = transformers.AutoModelForTokenClassification.from_pretrained(folder).eval()
  rng = np.random.default_rng(0)
  ids = rng.integers(5, cfg.vocab_size, (3, 12))
  mask = (np.arange(12) < np.array([[12], [7], [4]])).astype(np.int64)
  ours = np.asarray(model.apply({'params': params}, ids, np.zeros_like(ids), mask))
  with torch.no_grad():
    theirs = kind.hf_array(theirs_model(input_ids=torch.from_numpy(ids),
                                        attention_mask=torch.from_numpy(mask)))
  np.testing.assert_allclose(ours[mask > 0], theirs[mask > 0], atol=1e-4, rtol=1e-5)
