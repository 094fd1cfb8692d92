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

from electra_jax.storage import fs
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
  dataset = tf_import.tfds_load(f'squad/{version}', split, data_dir,
                               'point --config.task.tfds_data_dir at it')
  for row in tfds.as_numpy(dataset):
    answers = row['answers']
    impossible = bool(row.get('is_impossible', False))
    texts = () if impossible else tuple(t.decode('utf-8') for t in answers['text'])
    starts = () if impossible else tuple(int(s) for s in answers['answer_start'])
    out.append(Question(row['id'].decode('utf-8'), row['question'].decode('utf-8'),
                        row['context'].decode('utf-8'), texts, starts))
  return out


def read_json(path: str) -> list[Question]:
  """The official SQuAD JSON file (data -> paragraphs -> qas)."""
  if not fs.isfile(path):
    raise FileNotFoundError(f'the SQuAD file {path} does not exist; give train-v1.1.json, '
                            'dev-v2.0.json or another file of that format')
  with fs.open(path, encoding='utf-8') as f:
    try:
      data = json.load(f)['data']
    except (json.JSONDecodeError, KeyError, TypeError):
      raise ValueError(f'{path} is not a SQuAD JSON file (no "data" list of articles)') from None
  out = []
  for article in data:
    for paragraph in article['paragraphs']:
      for qa in paragraph['qas']:
        answers = [] if qa.get('is_impossible') else qa['answers']
        out.append(Question(qa['id'], qa['question'], paragraph['context'],
                            tuple(a['text'] for a in answers),
                            tuple(a['answer_start'] for a in answers)))
  return out


# ================================================================================================
# The official scoring (normalization of case, punctuation, articles and whitespace)
# ================================================================================================

def normalize_answer(s: str) -> str:
  s = s.lower()
  s = ''.join(ch for ch in s if ch not in set(string.punctuation))
  s = re.sub(r'\b(a|an|the)\b', ' ', s)
  return ' '.join(s.split())


def exact(prediction: str, gold: str) -> float:
  return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
  p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
  if not p or not g:  # a no-answer scores 1 only against a no-answer
    return float(p == g)
  common = sum((collections.Counter(p) & collections.Counter(g)).values())
  if common == 0:
    return 0.0
  precision, recall = common / len(p), common / len(g)
  return 2 * precision * recall / (precision + recall)


def scores(questions: list[Question], predictions: dict[str, str]) -> dict[str, float]:
  """EM and F1 (each the best over the gold answers; a question without answers has the gold
  answer ''), in [0, 1], plus both over answerable and unanswerable questions when there are both."""
  rows = []
  for q in questions:
    golds = [a for a in q.answers if normalize_answer(a)] or ['']
    pred = predictions.get(q.qid, '')
    rows.append((bool(q.answers), max(exact(pred, g) for g in golds),
                 max(f1(pred, g) for g in golds)))
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
  context at its offset is skipped and counted (`skipped`)."""
  special = tokenizer.special
  rows = collections.defaultdict(list)
  skipped = 0
  words_cache = {}
  for qi, q in enumerate(questions):
    if q.context not in words_cache:
      words, starts = words_of(q.context)
      pieces = tokenizer.encode_batch(words) if words else []
      tokens, token_word = [], []
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
          continue
      else:
        first_word = int(np.searchsorted(starts, start, side='right')) - 1
        last_word = int(np.searchsorted(starts, start + len(text.rstrip()) - 1, side='right')) - 1
        first = doc_word.index(first_word)
        last = len(doc_word) - 1 - doc_word[::-1].index(last_word)
        answer = (first, last)
    query = tokenizer.encode_batch([q.question])[0][:max_query]
    budget = max_len - len(query) - 3
    offset = len(query) + 2
    windows = list(range(0, max(len(doc) - budget, 0) + 1, stride))
    if windows[-1] + budget < len(doc):
      windows.append(len(doc) - budget)
    for w0 in windows:
      span = doc[w0:w0 + budget]
      ids = [special.cls] + query + [special.sep] + span + [special.sep]
      segments = [0] * offset + [1] * (len(span) + 1)
      token_word = np.full(max_len, -1, np.int32)
      token_word[offset:offset + len(span)] = doc_word[w0:w0 + len(span)]
      best = np.zeros(max_len, bool)
      for i in range(len(span)):
        best[offset + i] = _best_window(windows, budget, len(doc), w0 + i) == w0
      if answer and w0 <= answer[0] and answer[1] < w0 + len(span):
        s, e, impossible = answer[0] - w0 + offset, answer[1] - w0 + offset, 0.0
      else:
        s, e, impossible = 0, 0, 1.0
      for name, value in (('ids', ids), ('segments', segments), ('start', s), ('end', e),
                          ('impossible', impossible), ('question', qi), ('word', token_word),
                          ('best', best)):
        rows[name].append(value)
  n = len(rows['ids'])
  pad = lambda seqs, value: np.array([list(x) + [value] * (max_len - len(x)) for x in seqs],
                                     np.int32).reshape(n, max_len)
  return Features(pad(rows['ids'], special.pad), pad(rows['segments'], 0),
                  pad([[1] * len(x) for x in rows['ids']], 0),
                  np.array(rows['start'], np.int32), np.array(rows['end'], np.int32),
                  np.array(rows['impossible'], np.float32), np.array(rows['question'], np.int32),
                  np.array(rows['word'], np.int32).reshape(n, max_len),
                  np.array(rows['best'], bool).reshape(n, max_len), skipped)


def _best_window(windows: list[int], budget: int, doc_len: int, token: int) -> int:
  """The window start in which `token` has the most context: min(left, right) + 0.01 x length."""
  best, best_score = None, -1.0
  for w0 in windows:
    length = min(budget, doc_len - w0)
    if w0 <= token < w0 + length:
      score = min(token - w0, w0 + length - 1 - token) + 0.01 * length
      if score > best_score:
        best, best_score = w0, score
  return best


# ================================================================================================
# Decoding
# ================================================================================================

def decode(questions: list[Question], feats: Features, start_logits: np.ndarray,
           start_top: np.ndarray, end_logits: np.ndarray, null_logits: np.ndarray | None = None,
           *, n_best: int = 20, max_answer_tokens: int = 30, null_threshold: float = -2.75
           ) -> dict[str, str]:
  """Best answer text per question id.

  start_logits [F, L]; start_top [F, K] the K best start tokens; end_logits [F, K, L] the end
  logits given each of those starts; null_logits [F] the log-odds that the window holds no answer
  (SQuAD 2.0): a question whose smallest null log-odds exceeds `null_threshold` gets ''.
  """
  candidates = collections.defaultdict(list)
  null = {}
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
    if null_logits is not None and null.get(qi, np.inf) > null_threshold:
      out[q.qid] = ''
      continue
    found = sorted(candidates.get(qi, []), key=lambda c: -c[0])[:n_best]
    if not found:
      out[q.qid] = ''
      continue
    _, first, last = found[0]
    words, starts = words_of(q.context)
    out[q.qid] = q.context[starts[first]:starts[last] + len(words[last])]
  return out
