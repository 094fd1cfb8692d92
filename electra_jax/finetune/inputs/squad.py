"""SQuAD 1.1 / 2.0: questions, sliding-window features, span decoding and the official EM / F1.

    questions (TFDS squad/v1.1, squad/v2.0, or the official JSON files)
    -> words of each context (whitespace split, with their character offsets)
    -> sub-tokens of each word; windows of the context: [CLS] question [SEP] window [SEP],
       question <= 64 tokens, windows `stride` tokens apart, each token scored in the window where
       it has the most context on both sides
    -> model: start logits, end logits conditioned on the start, an answerability logit (2.0)
    -> n-best spans (<= 30 tokens) mapped back to the context's own characters -> EM / F1
"""

import collections
import dataclasses
import json
import re
import string

import numpy as np

from electra_jax import UserError
from electra_jax.storage import fs
from electra_jax.data import tfds as tfds_lib
from electra_jax.storage import tf_import


@dataclasses.dataclass(frozen=True)
class Question:
  qid: str
  question: str
  context: str
  answers: tuple  # answer texts (several annotators in dev); () when it has no answer
  starts: tuple  # their character offsets in `context`


def load_tfds(version: str, split: str, data_dir: str | None = None) -> list[Question]:
  """`squad/v1.1` or `squad/v2.0` from TFDS; split 'train' or 'validation'."""
  tfds = tf_import.datasets()
  out = []
  dataset = tfds_lib.load(f'squad/{version}', split, data_dir,
                               'point --config.task.tfds_data_dir at it')
  for row in tfds.as_numpy(dataset):
    answers = row['answers']
    impossible = bool(row.get('is_impossible', False))
    texts = () if impossible else tuple(t.decode('utf-8') for t in answers['text'])
    starts = () if impossible else tuple(int(s) for s in answers['answer_start'])
    out.append(Question(row['id'].decode('utf-8'), row['question'].decode('utf-8'),
                        row['context'].decode('utf-8'), texts, starts))
  return out


def read_json(path: str, version: str = '', questions_only: bool = False) -> list[Question]:
  """The official SQuAD JSON file (data -> paragraphs -> qas), read strictly: a problem is one
  sentence naming the article, paragraph or question and the fix. `version` 'v1.1' refuses
  unanswerable questions (SQuAD 2.0's), which 1.1 can neither learn nor score; 'v2.0' needs each
  question with no answers marked `"is_impossible": true`. `questions_only`: questions without
  "answers" are read too (new questions to answer), with none."""
  if not fs.isfile(path):
    raise FileNotFoundError(f'the SQuAD file {path} '
                            f'{"is a folder" if fs.isdir(path) else "does not exist"}; give '
                            'train-v1.1.json, dev-v2.0.json or another file of that format')
  text = fs.read_user_text(path)
  try:
    top = json.loads(text)
  except json.JSONDecodeError as e:
    why = 'is empty' if not text.strip() else (
        f'is not JSON ({e.msg} at line {e.lineno}, column {e.colno}'
        + (': the file ends there, cut short?' if e.pos >= len(text.rstrip()) else '') + ')')
    raise ValueError(f'{path} {why}; give the SQuAD JSON file whole') from None
  form = ('{"data": [{"title": ..., "paragraphs": [{"context": ..., "qas": [{"id": ..., '
          '"question": ..., "answers": [{"text": ..., "answer_start": ...}]}]}]}]}')
  if not isinstance(top, dict) or not isinstance(top.get('data'), list):
    raise ValueError(f'{path} is not a SQuAD JSON file: it has no "data" list of articles '
                     f'(the format: {form})')
  out: list = []
  seen: dict = {}
  for a, article in enumerate(top['data']):
    where_a = f'article {a}' + (f' ({article["title"]!r})' if isinstance(article, dict) and
                                isinstance(article.get('title'), str) else '') + f' of {path}'
    paragraphs = article.get('paragraphs') if isinstance(article, dict) else None
    if not isinstance(paragraphs, list):
      raise ValueError(f'{where_a} has no "paragraphs" list (the format: {form})')
    for p, paragraph in enumerate(paragraphs):
      where_p = f'paragraph {p} of {where_a}'
      if not isinstance(paragraph, dict):
        raise ValueError(f'{where_p} is not an object with "context" and "qas" (the format: '
                         f'{form})')
      context = paragraph.get('context')
      if not isinstance(context, str) or not context.strip():
        raise ValueError(f'{where_p} has {_what(context, "context")}; give each paragraph its '
                         'text')
      if not isinstance(paragraph.get('qas'), list):
        raise ValueError(f'{where_p} has {_what(paragraph.get("qas"), "qas", "list")} of '
                         f'questions (the format: {form})')
      for n, qa in enumerate(paragraph['qas']):
        q = _question(qa, f'question {n} of {where_p}', context, version, questions_only)
        if q.qid in seen:
          raise ValueError(f'the question id {q.qid!r} is given twice in {path} ({seen[q.qid]} '
                           f'and question {n} of {where_p}): answers are kept and scored by id; '
                           'give each question its own id')
        seen[q.qid] = f'question {n} of {where_p}'
        out.append(q)
  if not out:
    raise ValueError(f'{path} holds no questions; give a SQuAD file with its questions')
  return out


def _what(value, key: str, kind: str = 'text') -> str:
  """'no "qas" list', 'an empty "context"', '"qas" 12, not a list': how a field fails to be a `kind`
  ('text' or 'list')."""
  if value is None:
    return f'no "{key}" list' if kind == 'list' else f'no "{key}" (or null)'
  if isinstance(value, str) and kind == 'text':
    return f'an empty "{key}"'
  return f'"{key}" {json.dumps(value)[:40]}, not {"a list" if kind == "list" else "text"}'


def _question(entry, where: str, context: str, version: str,
              questions_only: bool = False) -> Question:
  """One entry of a paragraph's "qas", checked."""
  if not isinstance(entry, dict):
    raise ValueError(f'{where} is not an object with "id", "question" and "answers"')
  qid = entry.get('id')
  if isinstance(qid, int) and not isinstance(qid, bool):
    qid = str(qid)
  if not isinstance(qid, str) or not qid:
    raise ValueError(f'{where} has {_what(qid, "id")}; give each question an id of its own')
  where = f'{where} (id {qid!r})'
  question = entry.get('question')
  if not isinstance(question, str) or not question.strip():
    raise ValueError(f'{where} has {_what(question, "question")}; give the question\'s text')
  impossible = entry.get('is_impossible', False)
  if not isinstance(impossible, bool):
    raise ValueError(f'{where} has "is_impossible" {json.dumps(impossible)[:20]}; give true or '
                     'false')
  answers = entry.get('answers')
  if answers is None and (impossible or questions_only):
    answers, version = [], ('' if questions_only else version)
  if not isinstance(answers, list):
    raise ValueError(f'{where} has {_what(answers, "answers", "list")}; give its answers as '
                     '[{"text": ..., "answer_start": ...}], or [] with "is_impossible": true '
                     '(SQuAD 2.0)')
  if impossible and answers:
    raise ValueError(f'{where} is marked "is_impossible": true and gives answers; keep one of '
                     'the two (SQuAD 2.0 keeps an unanswerable question\'s guesses in '
                     '"plausible_answers")')
  texts, starts = [], []
  for k, answer in enumerate(answers):
    text = answer.get('text') if isinstance(answer, dict) else None
    start = answer.get('answer_start') if isinstance(answer, dict) else None
    if isinstance(start, str) and start.strip().isdigit():
      start = int(start)  # "12": the writer's 12
    if isinstance(start, float) and start.is_integer():
      start = int(start)
    if not isinstance(text, str) or not text.strip():
      raise ValueError(f'answer {k} of {where} has {_what(text, "text")}; give the answer as '
                       'it stands in the context')
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
      raise ValueError(f'answer {k} of {where} has "answer_start" '
                       f'{json.dumps(start)[:20]}: give the character offset (0 first) where '
                       'the answer starts in the context')
    texts.append(text)
    starts.append(start)
  if not texts and version == 'v1.1':
    raise ValueError(f'{where} has no answer ({"is_impossible" if impossible else "no answers"}'
                     '), which SQuAD 1.1 can neither learn nor score: the file is SQuAD 2.0\'s; '
                     'fine-tune it with --config=configs/finetune/squad.py:v2.0 (task.name=squad2)')
  if not texts and not impossible and version == 'v2.0':
    raise ValueError(f'{where} has no answers and is not marked "is_impossible": true; mark it '
                     'so if it has none, or give its answers')
  return Question(qid, question, context, tuple(texts), tuple(starts))


# ================================================================================================
# The official scoring (normalization of case, punctuation, articles and whitespace), each version
# by its own script's rules. v1.1 (evaluate-v1.1.py) keeps every gold answer, and F1 is 0 where
# no word is shared, so an answer that normalizes to nothing ('the', '.') has EM 1 and F1 0 against
# another such. v2.0 (evaluate-v2.0.py) drops gold answers that normalize to nothing (a question
# left without any has the gold answer ''), and an empty prediction or gold answer has F1 1 when
# both are empty, 0 otherwise.
# ================================================================================================

def normalize_answer(s: str) -> str:
  s = s.lower()
  s = ''.join(ch for ch in s if ch not in set(string.punctuation))
  s = re.sub(r'\b(a|an|the)\b', ' ', s)
  return ' '.join(s.split())


def exact(prediction: str, gold: str) -> float:
  return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str, version: str = 'v2.0') -> float:
  p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
  if version == 'v2.0' and (not p or not g):  # a no-answer scores 1 only against a no-answer
    return float(p == g)
  common = sum((collections.Counter(p) & collections.Counter(g)).values())
  if common == 0:
    return 0.0
  precision, recall = common / len(p), common / len(g)
  return 2 * precision * recall / (precision + recall)


def scores(questions: list[Question], predictions: dict[str, str],
           version: str = 'v2.0') -> dict[str, float]:
  """EM and F1 by `version`'s official rules (each the best over the gold answers), in [0, 1],
  plus both over answerable and unanswerable questions when there are both."""
  if version not in ('v1.1', 'v2.0'):
    raise ValueError(f'SQuAD has versions v1.1 and v2.0, not {version!r}')
  rows = []
  for q in questions:
    golds = (list(q.answers) if version == 'v1.1' else
             [a for a in q.answers if normalize_answer(a)] or [''])
    pred = predictions.get(q.qid, '')
    rows.append((bool(q.answers), max(exact(pred, g) for g in golds),
                 max(f1(pred, g, version) for g in golds)))
  out = {'exact': float(np.mean([r[1] for r in rows])), 'f1': float(np.mean([r[2] for r in rows]))}
  has = [r for r in rows if r[0]]
  if has and len(has) < len(rows):
    no = [r for r in rows if not r[0]]
    out.update(has_answer_f1=float(np.mean([r[2] for r in has])),
               no_answer_exact=float(np.mean([r[1] for r in no])))
  return out


# ================================================================================================
# Features: sliding windows over the context
# ================================================================================================

def words_of(context: str) -> tuple[list[str], list[int]]:
  """Whitespace-separated words and the character offset where each starts."""
  words, starts = [], []
  for m in re.finditer(r'\S+', context):
    words.append(m.group())
    starts.append(m.start())
  return words, starts


@dataclasses.dataclass
class Features:
  """Arrays for the model ([F, L]) and what decoding needs to map tokens back to text."""
  input_ids: np.ndarray
  segment_ids: np.ndarray
  input_mask: np.ndarray
  start_positions: np.ndarray  # [F] token of the answer's start; 0 ([CLS]) when not in the window
  end_positions: np.ndarray
  impossible: np.ndarray  # [F] float32 1 when the window holds no answer
  question_index: np.ndarray  # [F] which question the window belongs to
  token_word: np.ndarray  # [F, L] the context word of each token; -1 outside the context
  max_context: np.ndarray  # [F, L] whether this window is the token's best-centred one
  skipped: int = 0  # training questions dropped: the answer text is not at its offset

  def __len__(self):
    return len(self.question_index)

  def arrays(self) -> dict[str, np.ndarray]:
    return {'input_ids': self.input_ids, 'segment_ids': self.segment_ids,
            'input_mask': self.input_mask, 'start_positions': self.start_positions,
            'end_positions': self.end_positions, 'impossible': self.impossible}


def make_features(questions: list[Question], tokenizer, max_len: int = 512, stride: int = 128,
                  max_query: int = 64, train: bool = False) -> Features:
  """Every question's windows. In training, a question whose answer text does not match the
  context at its offset is skipped and counted (`skipped`); when none matches, the offsets are
  not the context's characters, said in one sentence. Windows start at most their own length
  apart (the original's min(length, stride)), so no context token falls between two."""
  special = tokenizer.special
  queries = [ids[:max_query] for ids in tokenizer.encode_batch([q.question for q in questions])]
  longest = max(range(len(queries)), key=lambda i: len(queries[i]), default=None)
  if longest is not None and max_len - len(queries[longest]) - 3 < 1:
    raise UserError(window_room(max_len, max_query, questions[longest].qid, len(queries[longest])))
  rows: dict[str, list] = collections.defaultdict(list)
  skipped, first_skipped = 0, None  # (the first question whose answer is not at its start)
  words_cache = {}
  for qi, q in enumerate(questions):
    if q.context not in words_cache:
      words, starts = words_of(q.context)
      pieces = tokenizer.encode_batch(words) if words else []
      tokens: list[int] = []
      token_word: list[int] = []
      for w, p in enumerate(pieces):
        p = p or [special.unk]
        tokens += p
        token_word += [w] * len(p)
      words_cache[q.context] = (starts, tokens, token_word)
    starts, doc, doc_word = words_cache[q.context]
    answer = None  # (first token, last token) of the first answer in the context
    if q.answers:
      text, start = q.answers[0], q.starts[0]
      if q.context[start:start + len(text)] != text or not text.strip():
        if train:
          skipped += 1
          first_skipped = first_skipped or q
          continue
      else:
        first_word = int(np.searchsorted(starts, start, side='right')) - 1
        last_word = int(np.searchsorted(starts, start + len(text.rstrip()) - 1, side='right')) - 1
        first = doc_word.index(first_word)
        last = len(doc_word) - 1 - doc_word[::-1].index(last_word)
        answer = (first, last)
    query = queries[qi]
    budget = max_len - len(query) - 3
    offset = len(query) + 2
    windows = list(range(0, max(len(doc) - budget, 0) + 1, min(stride, budget)))
    if windows[-1] + budget < len(doc):
      windows.append(len(doc) - budget)
    for w0 in windows:
      span = doc[w0:w0 + budget]
      ids = [special.cls] + query + [special.sep] + span + [special.sep]
      segments = [0] * offset + [1] * (len(span) + 1)
      window_word = np.full(max_len, -1, np.int32)
      window_word[offset:offset + len(span)] = doc_word[w0:w0 + len(span)]
      best = np.zeros(max_len, bool)
      for i in range(len(span)):
        best[offset + i] = _best_window(windows, budget, len(doc), w0 + i) == w0
      if answer and w0 <= answer[0] and answer[1] < w0 + len(span):
        s, e, impossible = answer[0] - w0 + offset, answer[1] - w0 + offset, 0.0
      else:
        s, e, impossible = 0, 0, 1.0
      for name, value in (('ids', ids), ('segments', segments), ('start', s), ('end', e),
                          ('impossible', impossible), ('question', qi), ('word', window_word),
                          ('best', best)):
        rows[name].append(value)
  if skipped and skipped == sum(1 for q in questions if q.answers):
    shown = first_skipped
    assert shown is not None
    raise UserError(
        f'none of the {skipped} answered training questions has its answer text at its '
        f'answer_start in its context (question {shown.qid!r}: {shown.answers[0][:40]!r} is not '
        f'at character {shown.starts[0]}); give answer_start as the character offset (0 first) '
        'of the answer in the context, as SQuAD does')
  n = len(rows['ids'])
  pad = lambda seqs, value: np.array([list(x) + [value] * (max_len - len(x)) for x in seqs],
                                     np.int32).reshape(n, max_len)
  return Features(pad(rows['ids'], special.pad), pad(rows['segments'], 0),
                  pad([[1] * len(x) for x in rows['ids']], 0),
                  np.array(rows['start'], np.int32), np.array(rows['end'], np.int32),
                  np.array(rows['impossible'], np.float32), np.array(rows['question'], np.int32),
                  np.array(rows['word'], np.int32).reshape(n, max_len),
                  np.array(rows['best'], bool).reshape(n, max_len), skipped)


def window_room(max_len: int, max_query: int, qid: str, tokens: int) -> str:
  """The sentence refusing a `max_len` that leaves the windows of question `qid` (`tokens` long
  after the cut to `max_query`) no room for the context beside [CLS] and two [SEP]."""
  return (f'max_seq_length {max_len} leaves no room for the context beside question {qid!r} '
          f'({tokens} tokens after the cut to max_query_length {max_query}) and [CLS] and two '
          f'[SEP]; raise --config.max_seq_length above {tokens + 3}, or lower '
          f'--config.qa.max_query_length below {max_len - 3}')


def _best_window(windows: list[int], budget: int, doc_len: int, token: int) -> int:
  """The window start in which `token` has the most context: min(left, right) + 0.01 x length."""
  best, best_score = None, -1.0
  for w0 in windows:
    length = min(budget, doc_len - w0)
    if w0 <= token < w0 + length:
      score = min(token - w0, w0 + length - 1 - token) + 0.01 * length
      if score > best_score:
        best, best_score = w0, score
  assert best is not None, f'token {token} is in no window'
  return best


# ================================================================================================
# Decoding
# ================================================================================================

def decode(questions: list[Question], feats: Features, start_logits: np.ndarray,
           start_top: np.ndarray, end_logits: np.ndarray, null_logits: np.ndarray | None = None,
           *, n_best: int = 20, max_answer_tokens: int = 30, null_threshold: float = -2.75,
           scored: bool = False) -> dict:
  """Best answer text per question id.

  start_logits [F, L]; start_top [F, K] the K best start tokens; end_logits [F, K, L] the end
  logits given each of those starts; null_logits [F] the log-odds that the window holds no answer
  (SQuAD 2.0): a question whose smallest null log-odds exceeds `null_threshold` gets ''.
  `scored`: {'answer': text, 'probability': the answer's share of the softmax over the n best
  spans (the original's n-best probability; None for ''), 'null_log_odds' (SQuAD 2.0)} per id.
  """
  candidates = collections.defaultdict(list)
  null: dict = {}
  for f in range(len(feats)):
    qi = int(feats.question_index[f])
    if null_logits is not None:
      null[qi] = min(null.get(qi, np.inf), float(null_logits[f]))
    words, best = feats.token_word[f], feats.max_context[f]
    for k, s in enumerate(start_top[f]):
      if words[s] < 0 or not best[s]:
        continue
      ends = np.argsort(-end_logits[f, k])[:n_best]
      for e in ends:
        if words[e] < 0 or e < s or e - s + 1 > max_answer_tokens:
          continue
        candidates[qi].append((start_logits[f, s] + end_logits[f, k, e], words[s], words[e]))
  out = {}
  for qi, q in enumerate(questions):
    found = sorted(candidates.get(qi, []), key=lambda c: -c[0])[:n_best]
    answer, probability = '', None
    if found and not (null_logits is not None and null.get(qi, np.inf) > null_threshold):
      _, first, last = found[0]
      words, starts = words_of(q.context)
      answer = q.context[starts[first]:starts[last] + len(words[last])]
      logits = np.asarray([c[0] for c in found], np.float64)
      probability = float(1 / np.exp(logits - logits[0]).sum())
    out[q.qid] = answer if not scored else {
        'answer': answer, 'probability': probability,
        **({'null_log_odds': float(null[qi])} if qi in null else {})}
  return out
