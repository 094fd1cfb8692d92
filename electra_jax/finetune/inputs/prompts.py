"""Prompts for the discriminator (Ni and Kao 2022, Xia et al. 2022): each class's label word filled
into a template, one sequence per class, and where the word's tokens are in it. The zero-shot
command (apps/zeroshot.py) scores these sequences with the pre-trained detection head, and the
`prompted` kind (finetune/kinds/prompted.py) fine-tunes that head on them.

A template holds `{label}` once, where each class's word goes, and the texts in one of two ways:

    after the text  'It was {label}.'       [CLS] text [SEP] It was great. [SEP]   (segments 0, 1;
                                             a pair's two texts joined by a space: Ni and Kao)
    around them     '{a}? {label}, {b}'     [CLS] premise? yes, hypothesis [SEP]  (one segment;
                                             the texts where {a} and {b} stand: Xia et al.'s
                                             templates of the pair tasks)

Around the texts, a text followed at once by a punctuation mark of the template loses its own
final punctuation ('The cat sat.' + '? yes, ...' -> 'The cat sat? yes, ...'), as Xia et al.'s
templates strip it. Each row is cut to fit `max_length` from the end of its text (of the longer
text of a pair first, the original's rule), so the template and its word always fit.
"""

import dataclasses
import re
from typing import Sequence

import numpy as np

from electra_jax.finetune.inputs import encode as encode_lib

SLOT = '{label}'
TEXTS = ('{a}', '{b}')
_PLACES = re.compile(r'\{[^{}]*\}')
_PUNCTUATION = '.?!,;:'

# The prompts a task gets when none is given: {task name: (template, label words)}. SST-2's is Ni
# and Kao's; the pair tasks' template is Xia et al.'s for NLI (their PET-style one), with their
# words for MNLI and RTE; QNLI's, MRPC's, QQP's, CoLA's and the built-in tasks' words are this
# package's choice (the topic task's: its classes' names, or the word its passages use most for
# one).
_PAIR = '{a}? {label}, {b}'
DEFAULTS = {
    'sst2': ('This movie is {label}!', '0=terrible,1=great'),
    'cola': ('This sentence is {label}.', '0=wrong,1=correct'),
    'mnli': (_PAIR, 'entailment=yes,neutral=maybe,contradiction=no'),
    'rte': (_PAIR, 'entailment=yes,not_entailment=no'),
    'qnli': (_PAIR, 'entailment=yes,not_entailment=no'),
    'mrpc': (_PAIR, '0=no,1=yes'),
    'qqp': (_PAIR, '0=no,1=yes'),
    'builtin': ('{label}.', 'next=yes,random=no'),
    'builtin_topic': ('This is about {label}.', 'asyncio=asyncio,concurrency=threads,email=email,'
                      'importing=import,logging=logging,numbers=numbers,testing=tests,web=web,'
                      'xml=xml'),
}


@dataclasses.dataclass(frozen=True)
class Prompt:
  template: str  # a sentence holding '{label}' once, e.g. 'It was {label}.' or '{a}? {label}, {b}'
  label_words: dict  # {class name: its label word (one or more tokens)}, in the task's order

  @property
  def around(self) -> bool:
    """The texts stand in the template ({a}, {b}) rather than before it."""
    return TEXTS[0] in self.template

  @classmethod
  def parse(cls, template: str, label_words: str, labels: Sequence[str] = ()) -> 'Prompt':
    """A prompt from the command line's `--template` and `--label_words=pos=great,neg=terrible`,
    its words in the order of `labels` (the task's classes, each given a word) when given;
    ValueError (one sentence) for a template without one '{label}', with another place than {a}
    and {b} or one of them twice, an entry that is not `class=word`, a class named twice,
    missing or not among `labels`."""
    if template.count(SLOT) != 1:
      raise ValueError(f'--template={template!r} must hold {SLOT} exactly once, where each '
                       "class's label word goes, e.g. --template='It was {label}.'")
    unknown = sorted(set(_PLACES.findall(template)) - {SLOT, *TEXTS})
    twice = [t for t in TEXTS if template.count(t) > 1]
    if unknown or twice:
      raise ValueError(f'--template={template!r} holds {", ".join(unknown + twice)}'
                       f'{" twice" if twice and not unknown else ""}; a template holds {SLOT} '
                       "once and may hold the texts once each, {a} and {b}, e.g. "
                       "--template='{a}? {label}, {b}'")
    if TEXTS[1] in template and TEXTS[0] not in template:
      raise ValueError(f'--template={template!r} holds {{b}} without {{a}}; place the first text '
                       'too, e.g. --template=\'{a}? {label}, {b}\'')
    words: dict = {}
    for entry in filter(None, (e.strip() for e in label_words.split(','))):
      label, _, word = entry.partition('=')
      label, word = label.strip(), word.strip()
      if not label or not word:
        raise ValueError(f'--label_words: {entry!r} is not class=word; give each class its word, '
                         'e.g. --label_words=pos=great,neg=terrible')
      if label in words:
        raise ValueError(f'--label_words names class {label!r} twice; give each class one word')
      words[label] = word
    if len(words) < 2:
      raise ValueError('--label_words gives fewer than two classes; give each class its word, '
                       'e.g. --label_words=pos=great,neg=terrible')
    if labels:
      unknown = [l for l in words if l not in labels]
      missing = [l for l in labels if l not in words]
      if unknown or missing:
        raise ValueError(
            f'--label_words names {", ".join(map(repr, unknown)) or "no unknown class"} and '
            f'leaves out {", ".join(map(repr, missing)) or "no class"}; the task\'s classes are '
            f'{", ".join(map(str, labels))}: give each its word')
      words = {l: words[l] for l in labels}
    return cls(template, words)


def for_task(task_name: str, template: str, label_words: str, labels: Sequence[str]) -> Prompt:
  """The prompt given (`template` and `label_words`), or, where neither is, `task_name`'s default;
  ValueError (one sentence) for one without the other, or neither for a task without a default."""
  if bool(template) != bool(label_words):
    raise ValueError('a template and label words go together (--template and --label_words, or '
                     'prompt.template and prompt.label_words): give both, or neither for a task '
                     f'that has a default prompt ({", ".join(DEFAULTS)})')
  if not template:
    if task_name not in DEFAULTS:
      raise ValueError(f'task {task_name} has no default prompt; give a template (a sentence with '
                       "{label}, e.g. 'It was {label}.') and label words (class=word for each of "
                       f'{", ".join(map(str, labels))})')
    template, label_words = DEFAULTS[task_name]
  return Prompt.parse(template, label_words, labels)


def _find(ids: list, word: list) -> int:
  """The start of the last occurrence of `word` in `ids`, or -1."""
  for start in range(len(ids) - len(word), -1, -1):
    if ids[start:start + len(word)] == word:
      return start
  return -1


def _filled(tokenizer, piece: str, word: str) -> tuple[list, int, int]:
  """(the ids of `piece` with {label} filled by `word`, where the word's tokens start, how many).

  The piece is tokenized whole, as the model reads it; where the word's own tokens do not appear
  in it (a tokenizer that joins the word with what follows), its three parts are tokenized apart
  and joined."""
  own = tokenizer.encode(word)
  if not own:
    raise ValueError(f'the label word {word!r} has no tokens in this vocabulary; choose another')
  before, after = piece.split(SLOT)
  ids = tokenizer.encode(before + word + after)
  start = _find(ids, own)
  if start < 0:
    head = tokenizer.encode(before) if before.strip() else []
    ids, start = head + own + (tokenizer.encode(after) if after.strip() else []), len(head)
  return ids, start, len(own)


def template_ids(tokenizer, prompt: Prompt) -> list[tuple[list, int, int]]:
  """Per class, the template after the text: (its ids with the class's word, where the word's
  tokens start, how many)."""
  filled = [_filled(tokenizer, prompt.template, word) for word in prompt.label_words.values()]
  check_words(prompt, [ids[start:start + length] for ids, start, length in filled],
              tokenizer.special.unk)
  return filled


def check_words(prompt: Prompt, word_ids: list[list], unk: int):
  """ValueError (one sentence) where the classes' words cannot tell the classes apart in this
  vocabulary: a word all of whose tokens are unknown ([UNK]), or two words of the same tokens (the
  same word, or two a lower-cased vocabulary makes one); every text would go to one class."""
  words = list(prompt.label_words.items())
  for (label, word), ids in zip(words, word_ids):
    if all(i == unk for i in ids):
      raise ValueError(f'the label word {word!r} (class {label!r}) is unknown to this vocabulary '
                       '(its tokens are all [UNK]), so it cannot stand for its class; choose a '
                       'word the vocabulary knows')
  seen: dict[tuple, tuple] = {}
  for (label, word), ids in zip(words, word_ids):
    other = seen.setdefault(tuple(ids), (label, word))
    if other != (label, word):
      raise ValueError(f'the label words {other[1]!r} (class {other[0]!r}) and {word!r} (class '
                       f'{label!r}) are the same tokens in this vocabulary, so the prompt cannot '
                       'tell the two classes apart; give each class a word of its own')


def _strip_before(text: str, following: str) -> str:
  """`text` without its final punctuation where the template's next character is punctuation."""
  if following[:1] in _PUNCTUATION and following[:1]:
    return text.rstrip().rstrip(_PUNCTUATION + "'")
  return text


@dataclasses.dataclass
class Rows:
  """Every text's sequence per class: [N, C, L] int32 each; `truncated` texts were cut to fit."""
  input_ids: np.ndarray
  segment_ids: np.ndarray
  input_mask: np.ndarray  # 1 at the real tokens
  word_mask: np.ndarray  # 1 at the label word's tokens
  truncated: int

  def arrays(self) -> dict:
    return {'input_ids': self.input_ids, 'segment_ids': self.segment_ids,
            'input_mask': self.input_mask, 'word_mask': self.word_mask}

  @classmethod
  def zeros(cls, n: int, c: int, length: int) -> 'Rows':
    z = lambda: np.zeros((n, c, length), np.int32)
    return cls(z(), z(), z(), z(), truncated=0)


def encode(tokenizer, special, pairs: Sequence[tuple], prompt: Prompt, max_length: int) -> Rows:
  """The discriminator's inputs for every text (pair) and class: `pairs` of (text a, text b or
  None). After the text, a pair's texts are joined by a space; around them, a pair needs {b} in
  the template and a single text none. ValueError (one sentence) where the template and its
  longest word leave no room."""
  if prompt.around:
    return _encode_around(tokenizer, special, pairs, prompt, max_length)
  filled = template_ids(tokenizer, prompt)
  longest = max(len(ids) for ids, _, _ in filled)
  if longest + 3 > max_length:
    raise ValueError(f'the template with its longest label word takes {longest} tokens, and '
                     f'max_seq_length={max_length} leaves {max_length - 3} beside [CLS] and two '
                     '[SEP]; give a longer max_seq_length or a shorter template')
  n, c = len(pairs), len(filled)
  out = Rows.zeros(n, c, max_length)
  texts = [a if b is None else f'{a} {b}' for a, b in pairs]
  for i, text_ids in enumerate(tokenizer.encode_batch(texts)):
    out.truncated += len(text_ids) > max_length - 3 - longest
    for j, (ids, start, length) in enumerate(filled):
      text_ids_j = text_ids[:max_length - 3 - len(ids)]
      row = [special.cls, *text_ids_j, special.sep, *ids, special.sep]
      first = len(text_ids_j) + 2  # where the template starts
      out.input_ids[i, j, :len(row)] = row
      out.segment_ids[i, j, first:len(row)] = 1
      out.input_mask[i, j, :len(row)] = 1
      out.word_mask[i, j, first + start:first + start + length] = 1
  return out


def _encode_around(tokenizer, special, pairs: Sequence[tuple], prompt: Prompt,
                   max_length: int) -> Rows:
  pieces = re.split(r'(\{a\}|\{b\})', prompt.template)  # literal, {a}, literal[, {b}, literal]
  pair_template = TEXTS[1] in pieces
  if pairs and pair_template != any(b is not None for _, b in pairs):
    raise ValueError(f'the template {prompt.template!r} ' + (
        'places a second text ({b}), and the task\'s examples are single texts; leave {b} out'
        if pair_template else 'places one text ({a}), and the task\'s examples are pairs of '
        "texts; place the second with {b}, e.g. '{a}? {label}, {b}'"))
  literals = pieces[0::2]
  at = next(k for k, p in enumerate(literals) if SLOT in p)
  plain = [tokenizer.encode(p) if p.strip() else [] for p in literals]
  per_class = []  # (each literal's ids, the word's start in the literal `at`, its length)
  for word in prompt.label_words.values():
    ids, start, length = _filled(tokenizer, literals[at], word)
    per_class.append(([ids if k == at else plain[k] for k in range(len(literals))], start, length))
  check_words(prompt, [parts[at][start:start + length] for parts, start, length in per_class],
              special.unk)
  longest = max(sum(map(len, parts)) for parts, _, _ in per_class)
  if longest + 2 + len(pieces) // 2 > max_length:
    raise ValueError(f'the template with its longest label word takes {longest} tokens, and '
                     f'max_seq_length={max_length} leaves {max_length - 2} beside [CLS] and '
                     '[SEP], with a token for each text; give a longer max_seq_length or a '
                     'shorter template')
  slots = pieces[1::2]  # the texts in the template's order
  following = {slot: literals[k + 1] for k, slot in enumerate(slots)}
  text_ids = {slot: tokenizer.encode_batch([
      _strip_before(pair[TEXTS.index(slot)] or '', following[slot]) for pair in pairs])
      for slot in slots}
  n, c = len(pairs), len(per_class)
  out = Rows.zeros(n, c, max_length)
  for i in range(n):
    cut_any = False
    for j, (parts, start, length) in enumerate(per_class):
      a, b, cut = encode_lib.truncate_pair(
          text_ids[TEXTS[0]][i], text_ids[TEXTS[1]][i] if pair_template else None,
          max_length - 2 - sum(map(len, parts)))
      cut_any |= cut
      text = {TEXTS[0]: a, TEXTS[1]: b}
      row, word_at = [special.cls], 0
      for k, part in enumerate(parts):
        if k == at:
          word_at = len(row) + start
        row += part
        if k < len(slots):
          row += text[slots[k]] or []
      row.append(special.sep)
      out.input_ids[i, j, :len(row)] = row
      out.input_mask[i, j, :len(row)] = 1
      out.word_mask[i, j, word_at:word_at + length] = 1
    out.truncated += cut_any
  return out
