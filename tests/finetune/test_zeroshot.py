"""The discriminator as a zero-shot classifier: prompts, their tokens, and the class whose label
word looks least replaced (apps/zeroshot.py)."""

import dataclasses
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import ROOT, test_config
from conftest import topic_dev_examples
from electra_jax import UserError
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.finetune import config as config_lib
from electra_jax.apps import zeroshot
from electra_jax.finetune.inputs import prompts
from electra_jax.finetune.inputs import tasks
from electra_jax.model import networks as model_lib

WORDS = ['it', 'was', 'great', 'terri', '##ble', '.', 'the', 'movie', 'film', 'a', 'good', 'plot',
         'so', '-', 'fine']


def words_tokenizer(folder):
  """A WordPiece tokenizer of WORDS and fillers (96 ids), its vocabulary written in `folder`."""
  path = folder / 'vocab.txt'
  tokens = list(tokenizer_lib.SPECIAL_TOKENS) + WORDS
  path.write_text('\n'.join(tokens + [f'w{i}' for i in range(96 - len(tokens))]) + '\n')
  return tokenizer_lib.WordPieceTokenizer(str(path))


@pytest.fixture()
def tokenizer(tmp_path):
  return words_tokenizer(tmp_path)


def _id(tokenizer, piece):
  return tokenizer.encode(piece)[0] if not piece.startswith('##') else tokenizer.encode(
      'terrible')[1]


@pytest.mark.fast
def test_a_prompt_is_parsed_in_the_tasks_order_and_a_bad_one_is_one_sentence():
  p = prompts.Prompt.parse('It was {label}.', 'pos=great, neg=terrible', labels=('neg', 'pos'))
  assert p.label_words == {'neg': 'terrible', 'pos': 'great'}  # the task's order
  for template, words, labels, sentence in [
      ('It was great.', 'pos=great,neg=bad', (), 'must hold {label} exactly once'),
      ('{label} or {label}', 'pos=great,neg=bad', (), 'must hold {label} exactly once'),
      ('It was {label}.', 'pos=great,neg', (), "'neg' is not class=word"),
      ('It was {label}.', 'pos=great,pos=good', (), "names class 'pos' twice"),
      ('It was {label}.', 'pos=great', (), 'fewer than two classes'),
      ('It was {label}.', 'pos=great,bad=awful', ('neg', 'pos'),
       "names 'bad' and leaves out 'neg'; the task's classes are neg, pos")]:
    with pytest.raises(ValueError, match=sentence.replace('{', r'\{').replace('}', r'\}')):
      prompts.Prompt.parse(template, words, labels)


@pytest.mark.fast
def test_the_label_words_tokens_are_marked_after_the_text_whatever_its_length(tokenizer):
  special = tokenizer.special
  prompt = prompts.Prompt.parse('It was {label}.', 'pos=great,neg=terrible,meh=so-so')
  texts = ['the movie', 'the film ' * 40]  # the second is cut so that the template fits
  x = prompts.encode(tokenizer, special, [(t, None) for t in texts], prompt, max_length=24).arrays()
  assert x['input_ids'].shape == (2, 3, 24)
  for j, word in enumerate(['great', 'terrible', 'so-so']):
    words = tokenizer.encode(word)
    template = tokenizer.encode(f'it was {word}.')
    for i in range(2):
      ids = x['input_ids'][i, j][x['input_mask'][i, j] == 1].tolist()
      assert ids[0] == special.cls and ids[-1] == special.sep
      assert ids[-len(template) - 1:-1] == template  # the whole template, last, in segment 1
      assert ids[-len(template) - 2] == special.sep
      assert x['segment_ids'][i, j].sum() == len(template) + 1
      assert x['input_ids'][i, j][x['word_mask'][i, j] == 1].tolist() == words
  assert len(tokenizer.encode('terrible')) == 2 and len(tokenizer.encode('so-so')) == 3
  assert x['input_mask'][1].all()  # the long text fills the row
  with pytest.raises(ValueError, match='takes 6 tokens, and max_seq_length=8 leaves 5'):
    prompts.encode(tokenizer, special, [(t, None) for t in texts], prompt, max_length=8).arrays()


@pytest.mark.fast
def test_label_words_that_cannot_tell_the_classes_apart_are_one_sentence(tmp_path, tokenizer):
  """The same word twice, two words a lower-cased vocabulary makes one, a word of [UNK] tokens
  only: every text went to the first class, with exit 0. After the text or around it."""
  special = tokenizer.special
  texts = [('the movie', None), ('a plot', None)]
  for template, words, sentence in [
      ('It was {label}.', 'pos=good,neg=good', "the label words 'good' (class 'pos') and 'good' "
       "(class 'neg') are the same tokens in this vocabulary"),
      ('It was {label}.', 'pos=Good,neg=good', "the label words 'Good' (class 'pos') and 'good' "
       "(class 'neg') are the same tokens"),
      ('{a}, {label}', 'pos=great,neg=Good,meh=good', "'Good' (class 'neg') and 'good' "
       "(class 'meh') are the same tokens"),
      ('It was {label}.', 'pos=great,neg=zzyzx', "the label word 'zzyzx' (class 'neg') is "
       'unknown to this vocabulary (its tokens are all [UNK])')]:
    prompt = prompts.Prompt.parse(template, words)
    with pytest.raises(ValueError, match=re.escape(sentence)):
      prompts.encode(tokenizer, special, texts, prompt, max_length=24)
  prompt = prompts.Prompt.parse('It was {label}.', 'pos=great,neg=terrible')  # (apart: fine)
  assert prompts.encode(tokenizer, special, texts, prompt, 24).input_ids.shape == (2, 2, 24)


@pytest.mark.fast
def test_a_batch_larger_than_the_texts_is_one_batch_of_them_all():
  """--batch_size=100000000 padded the last batch to that size (a 95 GiB allocation)."""
  cfg = model_lib.ModelConfig.from_config(test_config().model)
  params = model_lib.init_params(cfg, jax.random.key(0))
  rng = np.random.default_rng(0)
  inputs = {'input_ids': rng.integers(5, cfg.vocab_size, (3, 2, 16)).astype(np.int32),
            'segment_ids': np.zeros((3, 2, 16), np.int32),
            'input_mask': np.ones((3, 2, 16), np.int32),
            'word_mask': np.zeros((3, 2, 16), np.int32)}
  inputs['word_mask'][:, :, 5] = 1
  huge = zeroshot.predict(cfg, params, inputs, batch_size=100_000_000)
  np.testing.assert_allclose(huge, zeroshot.predict(cfg, params, inputs, batch_size=2), atol=1e-5)
  assert huge.shape == (3, 2)


@pytest.mark.fast
def test_a_template_around_the_texts_places_them_and_the_word_and_cuts_the_longer_text(
    tokenizer):
  """'{a}. it was {label} - {b}': one segment, [CLS] a. it was word - b [SEP]; a text followed
  by the template's punctuation loses its own; the longer text is cut first; {b} may come
  first."""
  special = tokenizer.special
  enc = tokenizer.encode
  prompt = prompts.Prompt.parse('{a}. it was {label} - {b}', 'pos=great,neg=terrible')
  assert prompt.around
  pairs = [('the movie.', 'a good plot'), ('the film ' * 20, 'so fine')]
  x = prompts.encode(tokenizer, special, pairs, prompt, max_length=24)
  assert x.truncated == 1 and x.input_ids.shape == (2, 2, 24)
  for j, word in enumerate(['great', 'terrible']):
    want = [special.cls, *enc('the movie'), *enc('. it was'), *enc(word), *enc('-'),
            *enc('a good plot'), special.sep]
    row = x.input_ids[0, j][x.input_mask[0, j] == 1].tolist()
    assert row == want  # (the text's own '.' gone before the template's)
    assert x.input_ids[0, j][x.word_mask[0, j] == 1].tolist() == enc(word)
    assert x.segment_ids[:, j].sum() == 0  # one segment
    long = x.input_ids[1, j][x.input_mask[1, j] == 1].tolist()
    assert len(long) == 24 and long[-3:] == [*enc('so fine'), special.sep]  # a was cut, b kept
    assert x.input_ids[1, j][x.word_mask[1, j] == 1].tolist() == enc(word)
  flipped = prompts.encode(tokenizer, special, pairs[:1],
                           prompts.Prompt.parse('{b} - {label} - {a}', 'pos=great,neg=fine'), 24)
  assert flipped.input_ids[0, 0][flipped.input_mask[0, 0] == 1].tolist() == [
      special.cls, *enc('a good plot - great -'), *enc('the movie.'), special.sep]
  single = prompts.Prompt.parse('{a} - {label}', 'pos=great,neg=fine')
  with pytest.raises(ValueError, match=r'places one text \({a}\), and the task\'s examples are '
                     'pairs of texts; place the second with {b}'):
    prompts.encode(tokenizer, special, pairs, single, 24)
  with pytest.raises(ValueError, match=r'places a second text \({b}\), and the task\'s examples '
                     'are single texts'):
    prompts.encode(tokenizer, special, [('the movie', None)], prompt, 24)
  with pytest.raises(ValueError, match='takes 6 tokens, and max_seq_length=7 leaves 5'):
    prompts.encode(tokenizer, special, pairs, prompt, 7)
  for template, sentence in [('{a} {label} {c}', 'holds {c}; a template holds {label} once'),
                             ('{a} {a} {label}', 'holds {a} twice'),
                             ('{b} {label}', 'holds {b} without {a}')]:
    with pytest.raises(ValueError, match=re.escape(sentence)):
      prompts.Prompt.parse(template, 'pos=great,neg=fine')


@pytest.mark.fast
def test_every_default_prompt_parses_and_the_pair_tasks_place_both_texts():
  pairs = {name for name, glue in tasks.GLUE.items() if len(glue.fields) == 2}
  for name, (template, words) in prompts.DEFAULTS.items():
    labels = tasks.named_task(_task_config(name)).labels
    prompt = prompts.Prompt.parse(template, words, labels)  # (every class given a word)
    assert ('{b}' in prompt.template) == (name in pairs), name
  assert {'mnli', 'rte', 'qnli', 'mrpc', 'qqp', 'sst2', 'cola'} <= set(prompts.DEFAULTS)


def _task_config(name: str):
  cfg = config_lib.default_config().task
  cfg.name = name
  return cfg


def _hand_set(tokenizer, sign: float):
  """A discriminator whose detection logit at a token is fixed by the token alone: no attention
  or feed-forward output (each layer passes its input through), no position or segment
  embedding; 'great' and '##ble' point one way, 'terri' the other, and the head reads that one
  direction: logit = -sign * gelu(h_0), about -sign * 5.6 for 'great' and '##ble' and 0 for
  'terri'."""
  cfg = model_lib.ModelConfig.from_config(test_config().model)
  cfg = dataclasses.replace(cfg, dropout_rate=0.0, attention_dropout_rate=0.0)
  params = jax.tree.map(np.array, model_lib.init_params(cfg, jax.random.key(0)))
  for layer in params['discriminator'].values():
    if 'attention_output' in layer:
      for name in ('attention_output', 'output'):
        layer[name]['kernel'][:] = 0
        layer[name]['bias'][:] = 0
  emb = params['embeddings']
  emb['position_embeddings'][:] = 0
  emb['token_type_embeddings'][:] = 0
  z = np.zeros(cfg.embedding_size, np.float32)
  z[:2] = 1, -1
  for piece, direction in (('great', 1), ('##ble', 1), ('terri', -1)):
    emb['word_embeddings'][_id(tokenizer, piece)] = direction * z
  project = params['discriminator']['embeddings_project']
  project['kernel'][:] = 0
  project['kernel'][0, 0] = 1
  project['bias'][:] = 0
  head = params['discriminator_predictions']
  head['dense']['kernel'][:] = np.eye(cfg.hidden_size)
  head['dense']['bias'][:] = 0
  head['dense_prediction']['kernel'][:] = 0
  head['dense_prediction']['kernel'][0, 0] = -sign
  head['dense_prediction']['bias'][:] = 0
  return cfg, params


@pytest.mark.fast
def test_a_hand_set_discriminator_scores_the_classes_as_designed(tokenizer):
  prompt = prompts.Prompt.parse('It was {label}.', 'pos=great,neg=terrible')
  texts = ['the movie', 'a good plot', 'the film was fine']
  x = prompts.encode(tokenizer, tokenizer.special, [(t, None) for t in texts], prompt,
                         max_length=16).arrays()
  cfg, params = _hand_set(tokenizer, sign=1.0)
  scores = zeroshot.predict(cfg, params, x, batch_size=2)  # a padded last batch
  assert scores.shape == (3, 2)
  # 'great' looks original (about -5.6); 'terrible' is the mean of 'terri' (0) and '##ble' (-5.6)
  token = jax.jit(lambda ids: model_lib.Electra(cfg).apply(
      {'params': params}, ids, jnp.zeros_like(ids), jnp.ones_like(ids),
      method=model_lib.Electra.discriminator_logits))
  great, terri, ble = np.asarray(token(jnp.asarray([[
      _id(tokenizer, 'great'), _id(tokenizer, 'terri'), _id(tokenizer, '##ble')]])))[0]
  assert great < -5 and abs(terri) < 0.1 and abs(ble - great) < 1e-4
  np.testing.assert_allclose(scores[:, 0], great, atol=1e-4)
  np.testing.assert_allclose(scores[:, 1], (terri + ble) / 2, atol=1e-4)
  assert (zeroshot.choose(scores) == 0).all()  # every text: pos
  # the head read the other way round: 'great' looks replaced, every text is neg
  cfg, flipped = _hand_set(tokenizer, sign=-1.0)
  assert (zeroshot.choose(zeroshot.predict(cfg, flipped, x, batch_size=2)) == 1).all()


@pytest.mark.fast
def test_the_class_logit_is_the_mean_over_the_words_tokens_only():
  logits = np.array([[[1.0, 2.0, 3.0, 4.0], [-1.0, -2.0, 5.0, 9.0]]])
  mask = np.array([[[0, 1, 1, 0], [1, 0, 0, 0]]])
  np.testing.assert_allclose(zeroshot.class_logits(jnp.asarray(logits), jnp.asarray(mask)),
                             [[2.5, -1.0]])


def test_a_pretraining_and_its_hf_export_prompted_give_the_same_answers(pretrained, tmp_path):
  """The command's rule on a pre-training workdir (its latest checkpoint, the head read with the
  discriminator) and on the HF folder launch/export.py makes of it: the same scores."""
  from electra_jax.apps import export
  from electra_jax.config import files as config_files
  cfg = config_files.load_config_file(f'{ROOT}/configs/finetune/builtin.py:topic')
  cfg.max_seq_length = 32  # the test model's positions
  template, words = 'This is about {label}.', ','.join(f'{t}={t}' for t in tasks.TOPICS)
  lines: list = []
  ours = zeroshot.evaluate(cfg, pretrained, template, words, batch_size=64, log=lines.append)
  assert ours['examples'] == topic_dev_examples() == sum(ours['predicted'].values())
  assert any(l.startswith('zero-shot builtin_topic dev: accuracy ') for l in lines), lines
  folder = next(f for f in export.export(pretrained, str(tmp_path / 'hf'), log=lines.append).folders
                if 'discriminator' in os.path.basename(f))
  theirs = zeroshot.evaluate(cfg, folder, template, words, batch_size=64, log=lines.append)
  assert theirs == ours
  lines.clear()  # the task's default prompt: its own words
  default = zeroshot.evaluate(cfg, pretrained, batch_size=64, log=lines.append)
  assert default['examples'] == topic_dev_examples()
  assert any("template 'This is about {label}.'" in l and "concurrency='threads'" in l
             for l in lines), lines
  with pytest.raises(UserError, match='a template and label words go together'):
    zeroshot.evaluate(cfg, pretrained, template, log=lines.append)
  with pytest.raises(UserError, match="names class 'asyncio' twice"):
    zeroshot.evaluate(cfg, pretrained, template, words + ',asyncio=loop', log=lines.append)
  cfg.task.name = 'builtin'
  with pytest.raises(UserError, match="leaves out 'random', 'next'; the task's classes are "
                     'random, next'):  # the coherence task's classes
    zeroshot.evaluate(cfg, pretrained, template, words, log=lines.append)
  # your own dev file, with no train file (zero-shot trains nothing): its labels are the classes
  dev = tmp_path / 'dev.csv'
  dev.write_text('text,label\n' + ''.join(f'the value {i} returns,{["pos", "neg"][i % 3 == 0]}\n'
                                          for i in range(30)))
  own = config_files.load_config_file(f'{ROOT}/configs/finetune/own.py')
  own.max_seq_length = 32
  own.task.update(dev=str(dev))
  lines.clear()
  done = zeroshot.evaluate(own, pretrained, 'It was {label}.', 'pos=good,neg=bad',
                           log=lines.append)
  assert done['examples'] == 30 and done['majority_class'] == 'pos', done
  assert done['majority_accuracy'] == pytest.approx(20 / 30)
  assert f'no train file: the classes and the majority class are those of the dev file {dev}' in (
      lines), lines


def test_a_pretraining_prompts_its_discriminator_at_every_evaluation_and_keeps_the_best(
    tmp_path, records_dir):
  """config.zeroshot_task: the accuracy at each held-out evaluation is the command's on the
  checkpoint of that step; keep_best ranks by it; a task without a prompt is one sentence."""
  from electra_jax.config import files as config_files
  from electra_jax.pretraining import run as pretrain
  from electra_jax.train import logs as logs_lib
  workdir = str(tmp_path / 'run')
  config = lambda **kw: test_config(**{'data.records': records_dir, 'train_steps': 4,
                                       'eval_every': 2, 'zeroshot_task': 'builtin_topic', **kw})
  with pytest.raises(UserError, match='zeroshot_task=.* pass probe=electra_jax.apps.zeroshot'):
    pretrain.train_and_evaluate(config(), workdir, log=lambda *_: None)
  with pytest.raises(UserError, match="zeroshot_task is 'sst5', which has no default prompt"):
    pretrain.train_and_evaluate(config(zeroshot_task='sst5'), str(tmp_path / 'bad'),
                                log=lambda *_: None, probe=zeroshot.probe)
  with pytest.raises(UserError, match="zeroshot_task prompts the discriminator's detection head, "
                     'and objective mlm never trains it'):
    pretrain.train_and_evaluate(config(**{'objective.name': 'mlm'}), str(tmp_path / 'bad'),
                                log=lambda *_: None, probe=zeroshot.probe)
  lines: list = []
  summary = pretrain.train_and_evaluate(config(keep_best='zeroshot_accuracy', save_every=2),
                                        workdir, log=lines.append, probe=zeroshot.probe)
  held_out = [r for r in logs_lib.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
              if r.get('split') == 'eval']
  assert [r['step'] for r in held_out] == [2, 4]
  assert summary['eval']['zeroshot_accuracy'] == held_out[-1]['zeroshot_accuracy']
  assert any('| zeroshot_accuracy ' in l for l in lines if ' eval step ' in l), lines
  cfg = config_files.load_config_file(f'{ROOT}/configs/finetune/builtin.py:topic')
  cfg.max_seq_length = 32  # the run's sequence length, at which the probe encodes
  for record in held_out:  # the command on that step's checkpoint: the same accuracy
    cfg.init_step = str(record['step'])
    command = zeroshot.evaluate(cfg, workdir, batch_size=64, log=lambda *_: None)
    assert command['accuracy'] == pytest.approx(record['zeroshot_accuracy'], abs=1e-9)
  best = int(summary['best_checkpoint'].rsplit('/', 1)[1])  # (of equal ones, either)
  assert {r['step']: r['zeroshot_accuracy'] for r in held_out}[best] == max(
      r['zeroshot_accuracy'] for r in held_out)
