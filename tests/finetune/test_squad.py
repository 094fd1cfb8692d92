"""SQuAD: the official scoring, sliding windows, span decoding, loading, learning end to end."""

import collections
import dataclasses
import json
import os
import random

import numpy as np
import pytest

from conftest import HAS_HF, HAS_ONNX, WORDS, assert_onnx_agrees
from electra_jax import UserError
from electra_jax.data.tokenizer import SPECIAL
from electra_jax.apps import search
from electra_jax.finetune import config as config_lib
from electra_jax.finetune import run
from electra_jax.finetune.inputs import squad


@pytest.mark.fast
def test_official_normalization_and_scores():
  assert squad.normalize_answer('The  Eiffel Tower!') == 'eiffel tower'
  assert squad.exact('the Eiffel tower.', 'Eiffel Tower') == 1.0
  assert squad.f1('Eiffel Tower in Paris', 'the Eiffel Tower') == pytest.approx(2 * 0.5 / 1.5)
  assert squad.f1('', '') == 1.0 and squad.f1('Paris', '') == 0.0 and squad.f1('a', 'b') == 0.0
  questions = [squad.Question('q1', '?', 'c', ('Paris', 'the city of Paris'), (0, 0)),
               squad.Question('q2', '?', 'c', (), ())]
  s = squad.scores(questions, {'q1': 'city of Paris', 'q2': ''})
  assert s['exact'] == 1.0 and s['f1'] == 1.0
  s = squad.scores(questions, {'q1': 'Paris France', 'q2': 'Paris'})
  assert s['exact'] == 0.0 and s['f1'] == pytest.approx((2 * 0.5 / 1.5 + 0) / 2)
  assert s['has_answer_f1'] == pytest.approx(2 / 3) and s['no_answer_exact'] == 0.0


def _official(version, answers: dict, predictions: dict) -> dict:
  """EM and F1 as SQuAD's official evaluate-v1.1.py and evaluate-v2.0.py compute them (their
  rules, written out here to compare with): {qid: gold texts}, {qid: prediction}."""
  def tokens(s):
    return squad.normalize_answer(s).split()

  def f1(pred, gold):
    p, g = tokens(pred), tokens(gold)
    if version == 'v2.0' and (not p or not g):
      return float(p == g)
    same = sum((collections.Counter(p) & collections.Counter(g)).values())
    return 0.0 if same == 0 else 2 * same / (len(p) + len(g))

  em = f = 0.0
  for qid, golds in answers.items():
    if version == 'v2.0':
      golds = [a for a in golds if squad.normalize_answer(a)] or ['']
    pred = predictions[qid]
    em += max(float(squad.normalize_answer(pred) == squad.normalize_answer(g)) for g in golds)
    f += max(f1(pred, g) for g in golds)
  return {'exact': em / len(answers), 'f1': f / len(answers)}


@pytest.mark.fast
def test_each_version_is_scored_by_its_own_official_rules():
  """Gold answers that normalize to nothing ('the', '.') and empty predictions: v1.1 keeps every
  gold answer and gives F1 0 without a shared word; v2.0 drops such answers and gives an empty
  prediction F1 1 against an empty gold answer. Ordinary answers score the same by both."""
  q = lambda qid, *answers: squad.Question(qid, '?', 'c', answers, (0,) * len(answers))
  odd = [q('q1', 'the'), q('q2', '.', 'Paris'), q('q3', 'The')]
  predictions = {'q1': 'the', 'q2': '', 'q3': 'Paris'}
  v1 = squad.scores(odd, predictions, 'v1.1')
  v2 = squad.scores(odd, predictions, 'v2.0')
  # v1.1: q1 EM 1 ('' == ''), F1 0; q2 EM 1 (against '.'), F1 0; q3 0, 0
  assert v1 == {'exact': pytest.approx(2 / 3), 'f1': 0.0}
  # v2.0: q1 gold [''] -> EM 1, F1 1; q2 gold ['Paris'] -> 0, 0; q3 gold [''] -> 0, 0
  assert v2 == {'exact': pytest.approx(1 / 3), 'f1': pytest.approx(1 / 3)}
  rng = random.Random(0)
  pieces = ['the', 'a', '.', 'Paris', 'Eiffel Tower', 'tower', 'of', 'France', '', ' , ']
  questions = [q(f'r{i}', *(' '.join(rng.choice(pieces) for _ in range(rng.randint(1, 3)))
                            for _ in range(rng.randint(1, 3)))) for i in range(300)]
  predictions = {x.qid: ' '.join(rng.choice(pieces) for _ in range(rng.randint(0, 3)))
                 for x in questions}
  answers = {x.qid: list(x.answers) for x in questions}
  for version in ('v1.1', 'v2.0'):
    ours = squad.scores(questions, predictions, version)
    assert ours == pytest.approx(_official(version, answers, predictions)), version
  assert squad.scores(questions, predictions, 'v1.1') != squad.scores(questions, predictions,
                                                                      'v2.0')
  ordinary = [x for x in questions if all(squad.normalize_answer(a) for a in x.answers)
              and squad.normalize_answer(predictions[x.qid])]
  assert len(ordinary) > 50
  assert squad.scores(ordinary, predictions, 'v1.1') == squad.scores(ordinary, predictions, 'v2.0')


class _Tokenizer:
  """Words of the test corpus are one token each (id = 5 + index), others two."""
  special = SPECIAL
  vocab = {w: 5 + i for i, w in enumerate(dict.fromkeys(WORDS))}

  def encode_batch(self, texts):
    out = []
    for t in texts:
      ids = []
      for w in t.lower().strip('.,?').split():
        ids += [self.vocab[w]] if w in self.vocab else [90, 91]
      out.append(ids)
    return out


def _question(n_words, answer_at, seed=0, qid='q'):
  rng = random.Random(seed)
  words = [rng.choice(WORDS) for _ in range(n_words)]
  words[answer_at:answer_at + 2] = ['Zanzibar,', 'island']  # Zanzibar: two tokens
  context = ' '.join(words)
  start = context.index('Zanzibar')
  return squad.Question(qid, 'where is the cat?', context, ('Zanzibar, island',), (start,))


@pytest.mark.fast
def test_windows_cover_the_context_and_label_the_answer_in_each_window_that_holds_it():
  q = _question(60, 40)
  f = squad.make_features([q], _Tokenizer(), max_len=32, stride=8, max_query=4)
  offset = 4 + 2  # [CLS] + 4 question tokens + [SEP]
  budget = 32 - 4 - 3
  words, _ = squad.words_of(q.context)
  assert len(f) == 6 and (f.input_ids[:, 1:5] == f.input_ids[0, 1:5]).all()  # 5 + the last
  seen = set()
  for i in range(len(f)):
    covered = f.token_word[i][f.token_word[i] >= 0]
    seen |= set(covered.tolist())
    if f.impossible[i] == 0:
      s, e = f.start_positions[i], f.end_positions[i]
      assert (words[f.token_word[i, s]], words[f.token_word[i, e]]) == ('Zanzibar,', 'island')
      assert f.token_word[i, s - 1] != f.token_word[i, s]  # the answer's first token
    else:
      assert f.start_positions[i] == f.end_positions[i] == 0
    assert (f.segment_ids[i, offset:offset + budget] == 1).all()
  assert seen == set(range(len(words)))
  # Every context token is "max context" in exactly one window.
  doc_tokens = sum(len(p) or 1 for p in _Tokenizer().encode_batch(words))
  assert f.max_context.sum() == doc_tokens
  assert f.impossible.min() == 0  # at least one window holds the answer


@pytest.mark.fast
def test_a_mismatched_answer_is_skipped_in_training_and_counted():
  q = _question(20, 5)
  bad = squad.Question('b', q.question, q.context, ('nowhere',), (3,))
  f = squad.make_features([q, bad], _Tokenizer(), max_len=64, train=True)
  assert f.skipped == 1 and set(f.question_index.tolist()) == {0}
  f = squad.make_features([q, bad], _Tokenizer(), max_len=64, train=False)
  assert f.skipped == 0 and f.impossible[f.question_index == 1].all()


@pytest.mark.fast
def test_decode_maps_the_best_span_back_to_the_contexts_own_characters():
  questions = [_question(20, 7, qid='a'), _question(20, 3, seed=1, qid='b')]
  f = squad.make_features(questions, _Tokenizer(), max_len=40)
  n, length = len(f), f.input_ids.shape[1]
  start = np.full((n, length), -5.0)
  end = np.full((n, 1, length), -5.0)
  for i in range(n):
    s, e = f.start_positions[i], f.end_positions[i]
    start[i, s], end[i, 0, e] = 3.0, 3.0
  top = f.start_positions[:, None]
  answers = squad.decode(questions, f, start, top, end)
  assert answers == {'a': 'Zanzibar, island', 'b': 'Zanzibar, island'}
  null = np.array([-5.0, 0.0])  # question b's window is confident there is no answer
  answers = squad.decode(questions, f, start, top, end, null)
  assert answers == {'a': 'Zanzibar, island', 'b': ''}


@pytest.mark.fast
def test_squad_loads_from_json_and_from_tfds(tmp_path):
  data = {'data': [{'title': 't', 'paragraphs': [{'context': 'The cat sat.', 'qas': [
      {'id': '1', 'question': 'Who sat?', 'answers': [{'text': 'cat', 'answer_start': 4}]},
      {'id': '2', 'question': 'Who ran?', 'answers': [], 'is_impossible': True}]}]}]}
  path = tmp_path / 'dev.json'
  path.write_text(json.dumps(data))
  assert squad.read_json(str(path)) == [
      squad.Question('1', 'Who sat?', 'The cat sat.', ('cat',), (4,)),
      squad.Question('2', 'Who ran?', 'The cat sat.', (), ())]
  (tmp_path / 'bad.json').write_text('[1, 2]')
  with pytest.raises(ValueError, match='is not a SQuAD JSON file'):
    squad.read_json(str(tmp_path / 'bad.json'))
  assert squad.read_json(str(path), 'v2.0')[1].answers == ()
  with pytest.raises(ValueError, match=r"question 1 of paragraph 0 of article 0 \('t'\) of .*dev"
                                       r".json \(id '2'\) has no answer \(is_impossible\), which "
                                       r'SQuAD 1.1 can neither learn nor score: .*squad.py:v2.0'):
    squad.read_json(str(path), 'v1.1')
  import tensorflow_datasets as tfds
  with tfds.testing.mock_data(num_examples=4, policy=tfds.testing.MockPolicy.USE_CODE):
    questions = squad.load_tfds('v2.0', 'validation')
  assert len(questions) == 4 and all(isinstance(q.context, str) for q in questions)
  # mock answers are random text, none at its offset: refused as offsets that are not characters
  with pytest.raises(UserError, match='^none of the .* answered training questions has its answer '
                                      'text at its answer_start'):
    squad.make_features(questions, _Tokenizer(), max_len=64, train=True)
  assert squad.make_features(questions, _Tokenizer(), max_len=64).skipped == 0


def _squad_file(tmp_path, edit):
  """A small valid SQuAD 2.0 file after `edit(data)` (which changes it in place), written."""
  data = {'version': 'v2.0', 'data': [{'title': 'Cats', 'paragraphs': [
      {'context': 'The cat sat on the mat.', 'qas': [
          {'id': 'a1', 'question': 'Who sat?', 'answers': [{'text': 'cat', 'answer_start': 4}],
           'is_impossible': False},
          {'id': 'a2', 'question': 'Who ran?', 'answers': [], 'is_impossible': True}]},
      {'context': 'A dog ran home.', 'qas': [
          {'id': 'b1', 'question': 'What ran?', 'answers': [{'text': 'dog', 'answer_start': 2}],
           'is_impossible': False}]}]}]}
  edit(data)
  path = tmp_path / 'file.json'
  path.write_text(json.dumps(data))
  return str(path)


def _set(*keys, value=None, drop=False):
  """An edit of `_squad_file` that sets (or drops) data[k0][k1]..."""
  def edit(data):
    node = data
    for k in keys[:-1]:
      node = node[k]
    if drop:
      del node[keys[-1]]
    else:
      node[keys[-1]] = value
  return edit


QA = ('data', 0, 'paragraphs', 0, 'qas', 0)


@pytest.mark.fast
@pytest.mark.parametrize('edit, error', [
    (_set('data', value={'title': 'x'}), r'is not a SQuAD JSON file: it has no "data" list of '
                                         r'articles \(the format: \{"data": '),
    (_set('data', 0, 'paragraphs', drop=True), r"^article 0 \('Cats'\) of .*file.json has no "
                                                r'"paragraphs" list'),
    (_set('data', 0, 'paragraphs', 1, 'qas', drop=True),
     r"^paragraph 1 of article 0 \('Cats'\) of .*file.json has no \"qas\" list of questions"),
    (_set('data', 0, 'paragraphs', 0, 'context', value=None),
     r'^paragraph 0 of article 0 .* has no "context" \(or null\); give each paragraph its text$'),
    (_set(*QA, 'answers', drop=True),
     r"^question 0 of paragraph 0 of article 0 \('Cats'\) of .*file.json \(id 'a1'\) has no "
     r'"answers" list; give its answers as \[\{"text": ..., "answer_start": ...\}\], or \[\] with '
     r'"is_impossible": true \(SQuAD 2.0\)$'),
    (_set(*QA, 'answers', 0, 'answer_start', value='four'),
     r'^answer 0 of question 0 .*\(id \'a1\'\) has "answer_start" "four": give the character '
     r'offset \(0 first\)'),
    (_set(*QA, 'answers', 0, 'text', value=''), r'^answer 0 of question 0 .* has an empty "text"'),
    (_set(*QA, 'question', value=7), r'^question 0 .* has "question" 7, not text'),
    (_set(*QA, 'id', value=None), r'^question 0 of paragraph 0 .* has no "id" \(or null\); give '
                                  r'each question an id of its own$'),
    (_set('data', 0, 'paragraphs', 1, 'qas', 0, 'id', value='a1'),
     r"^the question id 'a1' is given twice in .*file.json \(question 0 of paragraph 0 of article "
     r"0 \('Cats'\) of .*file.json and question 0 of paragraph 1 .*\): answers are kept and "
     r'scored by id; give each question its own id$'),
    (_set(*QA, 'is_impossible', value=True), r"^question 0 .*\(id 'a1'\) is marked "
                                             r'"is_impossible": true and gives answers'),
    (_set(*QA, 'is_impossible', value='no'), r'has "is_impossible" "no"; give true or false$'),
    (_set('data', 0, 'paragraphs', 0, 'qas', 1, 'is_impossible', drop=True),
     r"^question 1 .*\(id 'a2'\) has no answers and is not marked \"is_impossible\": true"),
    (_set('data', value=[]), r'holds no questions'),
])
def test_a_squad_file_is_read_strictly_each_problem_one_sentence(tmp_path, edit, error):
  with pytest.raises(ValueError, match=error):
    squad.read_json(_squad_file(tmp_path, edit), 'v2.0')


@pytest.mark.fast
def test_squad_files_read_as_meant_and_damaged_ones_named(tmp_path):
  path = _squad_file(tmp_path, _set(*QA, 'answers', 0, 'answer_start', value='4'))
  assert squad.read_json(path, 'v2.0')[0].starts == (4,)  # "4": its writer's 4
  path = _squad_file(tmp_path, _set(*QA, 'id', value=17))
  assert squad.read_json(path, 'v2.0')[0].qid == '17'
  text = open(path).read()
  (tmp_path / 'cut.json').write_text(text[:len(text) // 2])
  with pytest.raises(ValueError, match=r'cut.json is not JSON \(.* at line 1, column \d+: the '
                                       r'file ends there, cut short\?\); give the SQuAD JSON file '
                                       r'whole$'):
    squad.read_json(str(tmp_path / 'cut.json'))
  (tmp_path / 'latin1.json').write_bytes(text.replace('cat', 'chat\xe9').encode('latin-1'))
  with pytest.raises(ValueError, match=r'line 1 of .*latin1.json is not UTF-8 \(byte 0xe9\); '
                                       r'save the file as UTF-8$'):
    squad.read_json(str(tmp_path / 'latin1.json'))


@pytest.mark.fast
def test_windows_need_room_for_the_context_and_offsets_that_are_characters():
  long_question = squad.Question('long', ' '.join(['cat'] * 300), 'the cat sat', ('cat',), (4,))
  with pytest.raises(UserError, match=r"^max_seq_length 64 leaves no room for the context beside "
                                      r"question 'long' \(64 tokens after the cut to "
                                      r'max_query_length 64\) and \[CLS\] and two \[SEP\]; raise '
                                      r'--config.max_seq_length above 67, or lower '
                                      r'--config.qa.max_query_length below 61$'):
    squad.make_features([long_question], _Tokenizer(), max_len=64, max_query=64)
  assert len(squad.make_features([long_question], _Tokenizer(), max_len=64, max_query=32)) == 1
  q = _question(20, 5)  # offsets counted in words, not characters: none matches
  words = [dataclasses.replace(q, qid=str(i), starts=(5 + i,)) for i in range(3)]
  with pytest.raises(UserError, match=r"^none of the 3 answered training questions has its answer "
                                      r"text at its answer_start in its context \(question '0': "
                                      r"'Zanzibar, island' is not at character 5\); give "):
    squad.make_features(words, _Tokenizer(), max_len=64, train=True)


@pytest.mark.fast
def test_windows_start_at_most_their_length_apart():
  """A stride beyond a window's room (max_seq_length 32 and the default stride 128) leaves no
  context token outside every window: windows move by min(room, stride), as the original's."""
  q = _question(80, 60)
  f = squad.make_features([q], _Tokenizer(), max_len=32, stride=128, max_query=4)
  covered = set(f.token_word[f.token_word >= 0].tolist())
  assert covered == set(range(len(squad.words_of(q.context)[0])))
  assert (f.impossible == 0).any()


def _synthetic_squad(path, n, seed, unanswerable=0.0):
  """Contexts of 4 corpus words and one animal at a random place: the animal is the answer. A
  share `unanswerable` of the contexts has no animal (SQuAD 2.0's questions without an answer)."""
  rng = random.Random(seed)
  animals = ('cat', 'dogs', 'birds')
  vocab = sorted(set(WORDS) - set(animals))
  data = []
  for i in range(n):
    words = rng.sample(vocab, 4)  # short enough for one 32-token window
    if rng.random() < unanswerable:
      qa = {'id': str(i), 'question': 'which animal?', 'answers': [], 'is_impossible': True}
    else:
      animal = rng.choice(animals)
      words.insert(rng.randrange(5), animal)
      start = len(' '.join(words[:words.index(animal)] + ['']))
      qa = {'id': str(i), 'question': 'which animal?',
            'answers': [{'text': animal, 'answer_start': start}]}
    data.append({'context': ' '.join(words), 'qas': [qa]})
  path.write_text(json.dumps({'data': [{'title': 't', 'paragraphs': data}]}))
  return str(path)


@pytest.mark.parametrize('name, unanswerable', [('squad1', 0.0), ('squad2', 0.4)])
def test_finetuning_learns_a_synthetic_squad(tmp_path, pretrained, name, unanswerable):
  cfg = config_lib.default_config()
  cfg.update(init=pretrained, batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=10.0,
             log_every=50, dropout_rate=0.0)
  cfg.task.update(name=name,
                  train=_synthetic_squad(tmp_path / 'train.json', 320, 0, unanswerable),
                  dev=_synthetic_squad(tmp_path / 'dev.json', 64, 1, unanswerable))
  cfg.optimizer.learning_rate = 2e-3
  cfg.qa.null_threshold = 0.0  # even odds: -2.75 suits converged models (it predicts '' here)
  summary = run.finetune(cfg, str(tmp_path / 'ft'), log=lambda *_: None)
  dev = summary['seeds'][0]['dev']
  assert dev['exact'] > 0.6, dev  # a uniform guess among the 5 words scores 0.2
  if unanswerable:  # (both well above a uniform guess's)
    assert dev['no_answer_exact'] > 0.6 and dev['has_answer_f1'] > 0.5, dev
  out = run.finetune(config_lib.saved_config(str(tmp_path / 'ft'), 'predict'), str(tmp_path / 'ft'),
                     log=lambda *_: None, mode='predict')
  answers = json.load(open(out['predictions'][0]))
  assert len(answers) == 64
  # launch/predict.py on the dev file: the seed's dev scores again, each answer with its
  # probability (None where it says there is none); questions alone (no answers) predicted too
  from electra_jax.apps import predict
  done = predict.predict(str(tmp_path / 'ft'), str(tmp_path / 'dev.json'), log=lambda *_: None)
  assert done['scores'][0] == pytest.approx(dev, abs=1e-6)
  scored = json.load(open(done['outputs'][0]))
  assert {k: v['prediction'] for k, v in scored.items()} == answers
  assert all((v['probability'] is None) == (v['prediction'] == '') for v in scored.values())
  assert all(0 < v['probability'] <= 1 for v in scored.values() if v['prediction'])
  assert ('null_log_odds' in next(iter(scored.values()))) == (name == 'squad2')
  data = json.load(open(tmp_path / 'dev.json'))
  for paragraph in data['data'][0]['paragraphs']:
    for qa in paragraph['qas']:
      qa.pop('answers', None), qa.pop('is_impossible', None)
  (tmp_path / 'new.json').write_text(json.dumps(data))
  new = predict.predict(str(tmp_path / 'ft'), str(tmp_path / 'new.json'), log=lambda *_: None)
  assert not new['scores']
  assert json.load(open(new['outputs'][0])) == scored
  if HAS_HF:  # the export: ELECTRA's SQuAD head as the class its folder ships, our logits there
    from electra_jax.apps import export as export_lib
    done = export_lib.export(str(tmp_path / 'ft'), str(tmp_path / 'hf'), log=lambda *_: None,
                             onnx=HAS_ONNX and name == 'squad2')  # (its null logit too)
    config = json.load(open(tmp_path / 'hf' / 'config.json'))
    assert config['architectures'] == ['ElectraSquadForQuestionAnswering']
    assert config['answerable'] == (name == 'squad2') and config['start_top'] == 5
    checked = export_lib.verify(done, log=lambda *_: None)['hf']
    assert checked['max_abs_diff'] < 1e-4 and checked['max_abs_logit'] > 0.1, checked
    if HAS_ONNX and name == 'squad2':  # start, top ends and null logits in ONNX Runtime
      assert_onnx_agrees(checked)


def test_a_refused_squad_fine_tuning_leaves_its_workdir_free(tmp_path, pretrained):
  """Duplicate dev ids (which would score every answer against the last question of its id), a
  question too long for max_seq_length: one sentence each, before the workdir is claimed, so a
  pre-training may use the folder after."""
  from electra_jax.train import workdir as workdir_lib
  cfg = config_lib.default_config()
  cfg.update(init=pretrained, batch_size=16, eval_batch_size=16, max_seq_length=32)
  train = _synthetic_squad(tmp_path / 'train.json', 32, 0)
  data = json.load(open(train))
  data['data'][0]['paragraphs'][5]['qas'][0]['id'] = '3'
  (tmp_path / 'dev.json').write_text(json.dumps(data))
  cfg.task.update(name='squad1', train=train, dev=str(tmp_path / 'dev.json'))
  workdir = tmp_path / 'ft'
  with pytest.raises(UserError, match=r"^the question id '3' is given twice in .*dev.json "):
    run.finetune(cfg, str(workdir), log=lambda *_: None)
  assert not workdir.exists()
  cfg.search = 'optimizer.learning_rate=1e-4,3e-4'  # a search: neither its config nor its claim
  with pytest.raises(UserError, match=r"^the question id '3' is given twice in .*dev.json "):
    search.finetune(cfg, str(workdir), log=lambda *_: None)
  assert not workdir.exists()
  cfg.search = ''
  cfg.task.dev = ''
  cfg.max_seq_length, cfg.qa.max_query_length = 4, 2
  workdir.mkdir()
  with pytest.raises(UserError, match=r'^max_seq_length 4 leaves no room for the context'):
    run.finetune(cfg, str(workdir), log=lambda *_: None)
  assert os.listdir(workdir) == [] and workdir_lib.kind_of(str(workdir)) is None


@pytest.mark.skipif(not HAS_HF, reason='needs the test extra')
@pytest.mark.parametrize('backbone', ['bert', 'modern'])
@pytest.mark.parametrize('name', ['squad', 'squad2'])
def test_the_squad_head_exports_as_the_class_its_folder_ships_with_our_logits(tmp_path, backbone,
                                                                              name):
  """Random weights of the SQuAD head on either backbone, exported as the export writes them and
  loaded by AutoModelForQuestionAnswering with trust_remote_code (ModernBERT's encoder takes no
  token types; the head reads them): every output within 1e-4 of ours, on rows of different
  lengths."""
  import jax
  import torch
  import transformers
  from conftest import MODERN, test_config
  from electra_jax.convert import hf as hf_lib
  from electra_jax.convert import hf_code
  from electra_jax.finetune.kinds import heads, registry
  from electra_jax.model import networks as model_lib
  modern = backbone == 'modern'
  cfg = model_lib.ModelConfig.from_config(test_config(**(MODERN if modern else {})).model)
  ft = config_lib.default_config()
  ft.task.name = name
  kind = registry.get('qa')
  model = kind.check_model(cfg, 1, cfg=ft)
  params = heads.init_params(model, jax.random.key(7), shape=(2, 12))
  state, fields = kind.to_hf(params, cfg, [], 0.0, cfg=ft)
  assert fields['architectures'] == ['ModernBertSquadForQuestionAnswering' if modern else
                                     'ElectraSquadForQuestionAnswering']
  folder = str(tmp_path / 'hf')
  os.makedirs(folder)
  hf_lib.save_folder(folder, state, {**hf_lib.hf_config(cfg, 'discriminator'), **fields,
                                     'pad_token_id': 0})
  hf_code.write(folder)
  theirs_model = transformers.AutoModelForQuestionAnswering.from_pretrained(
      folder, trust_remote_code=True).eval()
  rng = np.random.default_rng(0)
  ids = rng.integers(5, cfg.vocab_size, (3, 12))
  # (each row with more places to start than the 5 best starts: no tie among refused places)
  mask = (np.arange(12) < np.array([[12], [10], [9]])).astype(np.int64)
  segments = (np.arange(12) >= 4).astype(np.int64) * mask
  ours = kind.our_array(model.apply({'params': params}, ids, segments, mask))
  with torch.no_grad():
    theirs = kind.hf_array(theirs_model(input_ids=torch.from_numpy(ids),
                                        attention_mask=torch.from_numpy(mask),
                                        token_type_ids=torch.from_numpy(segments)))
  np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-5)
  assert np.abs(ours).max() > 0.01
