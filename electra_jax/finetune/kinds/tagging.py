"""Token tagging: CoNLL files, BIOES tags, a tag per word from its first sub-token, and
entity-level precision / recall / F1; exported as HF's ElectraForTokenClassification.

A chunk (an entity, a phrase) is read from tags the way conlleval reads them: B-X or S-X starts one,
I-X or E-X continues one of type X (an I-X after O or after another type starts one, as IOB1 files
have it), E-X and S-X end one. Files in IOB1, IOB2 or BIOES all become BIOES for the model (the
original's encoding); predictions and an export's labels speak the train file's own scheme.
"""

import re

import jax.numpy as jnp
import numpy as np

from electra_jax.convert import hf
from electra_jax.finetune.inputs import encode as encode_lib
from electra_jax.finetune.inputs import tasks as tasks_lib
from electra_jax.finetune.kinds import classification
from electra_jax.finetune.kinds import heads
from electra_jax.finetune.kinds import interface as kinds
from electra_jax.storage import fs


def read_conll(path: str, column: int = -1, lines: list | None = None,
               untagged: bool = False) -> list[tuple[tuple, tuple | None]]:
  """(words, tags) per sentence of a CoNLL file: one token per line, its tag in `column`, a blank
  line between sentences, -DOCSTART- lines skipped. `lines`, when given, receives each sentence's
  line numbers. `untagged`: a file whose lines are one word each is read too, its tags None."""
  if not fs.isfile(path):
    raise FileNotFoundError(f'the data file {path} '
                            f'{"is a folder" if fs.isdir(path) else "does not exist"}; give a '
                            'CoNLL file (one token and its tag per line, a blank line between '
                            'sentences)')
  sentences: list = []
  words: list[str] = []
  tags: list[str] = []
  numbers: list[int] = []
  width = None  # the columns of the file's first token line
  for n, line in enumerate(fs.read_user_text(path).split('\n'), start=1):
    parts = line.split()
    if not parts or parts[0] == '-DOCSTART-':
      if words:
        sentences.append((tuple(words), tuple(tags) if tags else None))
        if lines is not None:
          lines.append(tuple(numbers))
        words, tags, numbers = [], [], []
      continue
    if untagged and len(parts) == 1 and (width is None or width[0] == 1):  # a word alone
      width = width or (1, n)
      words.append(parts[0])
      numbers.append(n)
      continue
    if len(parts) < 2:
      raise ValueError(f'line {n} of {path} has no tag column ({line.strip()!r}); a CoNLL line '
                       'is a token and its tag, separated by spaces')
    if width is None:
      width = (len(parts), n)
      if not -len(parts) <= column < len(parts):
        raise ValueError(f'task.tag_column={column}, and line {n} of {path} has {len(parts)} '
                         f'columns; give a column from 0 to {len(parts) - 1} (-1: the last)')
    elif len(parts) != width[0]:
      raise ValueError(f'line {n} of {path} has {len(parts)} columns where line {width[1]} has '
                       f'{width[0]} ({line.strip()[:80]!r}); a token holding a space cannot be '
                       'written in CoNLL: fix the line')
    tag = parts[column]
    if tag != 'O' and not re.fullmatch(r'[BIES]-\S+', tag):
      raise ValueError(f'line {n} of {path} has the tag {tag!r}; a tag is O or a chunk tag such '
                       'as B-PER, I-PER (IOB) or S-, E- (BIOES)')
    words.append(parts[0])
    tags.append(tag)
    numbers.append(n)
  if words:
    sentences.append((tuple(words), tuple(tags) if tags else None))
    if lines is not None:
      lines.append(tuple(numbers))
  if not sentences:
    raise ValueError(f'the data file {path} holds no sentences')
  return sentences


def _split(tag: str) -> tuple[str, str]:
  if tag == 'O' or '-' not in tag:
    return 'O', ''
  prefix, kind = tag.split('-', 1)
  return prefix, kind


def chunks(tags) -> list[tuple[int, int, str]]:
  """(start, end inclusive, type) of every chunk in a tag sequence (IOB1, IOB2 or BIOES)."""
  out: list = []
  start = kind = None
  for i, tag in enumerate(list(tags) + ['O']):
    prefix, t = _split(tag)
    continues = prefix in ('I', 'E') and start is not None and t == kind
    if start is not None and not continues:
      out.append((start, i - 1, kind))
      start = kind = None
    if prefix in ('B', 'S') or (prefix in ('I', 'E') and start is None):
      start, kind = i, t
    if prefix in ('E', 'S') and start is not None:
      out.append((start, i, kind))
      start = kind = None
  return out


def to_bioes(tags) -> tuple:
  """The same chunks written as S-X (one token) or B-X I-X ... E-X; O elsewhere."""
  out = ['O'] * len(tags)
  for start, end, kind in chunks(tags):
    if start == end:
      out[start] = f'S-{kind}'
    else:
      out[start], out[end] = f'B-{kind}', f'E-{kind}'
      for i in range(start + 1, end):
        out[i] = f'I-{kind}'
  return tuple(out)


SCHEMES = ('IOB1', 'IOB2', 'BIOES')


def scheme_of(sentences: list) -> str:
  """The tag scheme of a file's tags (a list of tag sequences): BIOES where a tag is S- or E-,
  IOB1 where a chunk starts with I- (after O or a chunk of another type), else IOB2."""
  if any(_split(t)[0] in ('S', 'E') for tags in sentences for t in tags):
    return 'BIOES'
  for tags in sentences:
    before = ''  # the type of the chunk the previous tag is in
    for tag in tags:
      prefix, kind = _split(tag)
      if prefix == 'I' and kind != before:
        return 'IOB1'
      before = kind
  return 'IOB2'


def in_scheme(tags, scheme: str) -> tuple:
  """Tags (of any scheme) written in `scheme`, the same chunks: IOB2 starts each chunk with B-,
  IOB1 only a chunk that follows one of its own type, BIOES as to_bioes writes them."""
  if scheme == 'BIOES':
    return to_bioes(tags)
  out, previous = ['O'] * len(tags), None  # (end, type) of the last chunk
  for start, end, kind in chunks(tags):
    first = 'B' if scheme == 'IOB2' or previous == (start - 1, kind) else 'I'
    out[start] = f'{first}-{kind}'
    for i in range(start + 1, end + 1):
      out[i] = f'I-{kind}'
    previous = (end, kind)
  return tuple(out)


def output_names(labels, scheme: str) -> list[str]:
  """The names of the model's outputs (BIOES tags) as a file of `scheme` names them, one by one:
  IOB files' S-X is B-X and E-X is I-X (HF's token-classification pipeline groups B-/I- tags)."""
  if scheme == 'BIOES':
    return list(labels)
  rename = {'S': 'B', 'E': 'I'}
  return [t if t == 'O' else f'{rename.get(_split(t)[0], _split(t)[0])}-{_split(t)[1]}'
          for t in labels]


def entity_scores(gold: list, predicted: list) -> dict[str, float]:
  """Chunk-level precision, recall and F1 (micro, over all sentences), as conlleval counts them."""
  found = correct = wanted = 0
  for g, p in zip(gold, predicted):
    g, p = set(chunks(g)), set(chunks(p))
    found, wanted, correct = found + len(p), wanted + len(g), correct + len(g & p)
  precision = correct / found if found else 0.0
  recall = correct / wanted if wanted else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return {'precision': precision, 'recall': recall, 'f1': f1}


def load_tagging(cfg) -> tuple:
  """(task, {split: examples}) of CoNLL files (CoNLL-2000 chunking, CoNLL-2003 NER, ...) as a BIOES
  tagging task (the original's encoding); the train file's scheme (IOB1, IOB2 or BIOES) is kept
  for predictions and exports. A dev or test chunk type the train data never tags is refused
  naming the file, its line and the tag as written there."""
  splits, written = {}, {}
  for split in ('train', 'dev', 'test'):
    if getattr(cfg, split):
      lines: list = []
      sentences = read_conll(getattr(cfg, split), cfg.tag_column, lines)
      written[split] = (sentences, lines)
      splits[split] = [tasks_lib.Example(words, None, to_bioes(tags))  # a test file's tags: scored
                       for words, tags in sentences]
  tags = {t for e in splits['train'] for t in e.label} - {'O'}
  if not tags:
    raise ValueError(f'the train data {cfg.train} tags no chunk (every tag is O); check '
                     'task.tag_column')
  labels = ('O',) + tuple(sorted(tags))
  types = {_split(t)[1] for t in tags}
  for split, (sentences, lines) in written.items():
    unseen = _unseen_tag(sentences, lines, types)
    if unseen:
      tag, n = unseen
      raise ValueError(f'line {n} of {getattr(cfg, split)} has the tag {tag!r}, of a type '
                       f'({_split(tag)[1]}) the train data never tags; fix the tag or add '
                       'training sentences with it')
  scheme = scheme_of([tags for _, tags in written['train'][0]])
  return tasks_lib.Task(tasks_lib.task_name(cfg), 'tagging', labels, KIND.metrics(labels),
                        ('dev',) if 'dev' in splits else (), tag_scheme=scheme), splits


def _unseen_tag(sentences: list, lines: list, types: set) -> tuple[str, int] | None:
  """(the tag, its line) of the first chunk tag whose type is not among `types`; None if none."""
  for (_, tags), numbers in zip(sentences, lines):
    for tag, n in zip(tags, numbers):
      if tag != 'O' and _split(tag)[1] not in types:
        return tag, n
  return None


def word_tags(task, logits: np.ndarray, data: encode_lib.Encoded, examples: list) -> list[tuple]:
  """Each word's predicted tag (at its first token); 'O' for words cut by truncation."""
  ids, positions = logits.argmax(-1), data.word_positions
  assert positions is not None, 'a tagging encoding keeps its words\' positions'
  out = []
  for i, e in enumerate(examples):
    tags = [task.labels[t] for t in ids[i, positions[i]]]
    out.append(tuple(tags + ['O'] * (len(e.text_a) - len(tags))))
  return out


class Tagging(kinds.Kind):
  name = 'tagging'
  own_data = 'CoNLL files (a word and its tag per line)'
  hf_class = 'ElectraForTokenClassification'
  hf_pipeline = 'token-classification'

  def load(self, cfg, log=print):
    return load_tagging(cfg)

  def model(self, model_cfg, task, cfg, rate: float):
    return heads.Classifier(model_cfg, len(task.labels), rate, per_token=True)

  def loss(self, params, batch, rng, deterministic=False, *, model, task):
    """Cross-entropy over the scored tokens (each word's first)."""
    return classification.class_loss(
        classification.logits_of(params, batch, rng, deterministic, model), batch['labels'])

  def label_shapes(self, task, layout) -> dict:
    return {'labels': ((layout.rows, layout.length), jnp.int32)}  # on each word's first token

  def encode(self, task, examples: list, tokenizer, max_len: int, train: bool, cfg=None):
    return encode_lib.encode_tagged(examples, task, tokenizer, max_len)

  def scores(self, task, outputs, data, examples: list, cfg=None) -> dict:
    return entity_scores([e.label for e in examples], word_tags(task, outputs, data, examples))

  def write_predictions(self, task, split: str, outputs, examples: list, folder: str, data=None,
                        cfg=None) -> str:
    """CoNLL lines: each word and its predicted tag in the train file's scheme, a blank line
    after each sentence."""
    fs.makedirs(folder, exist_ok=True)
    path = fs.join(folder, f'{split}_predictions.txt')
    scheme = task.tag_scheme or 'BIOES'
    fs.write_atomic(path, ''.join(
        ''.join(f'{w} {t}\n' for w, t in zip(e.text_a, in_scheme(tags, scheme))) + '\n'
        for e, tags in zip(examples, word_tags(task, outputs, data, examples))))
    return path

  prediction_format = 'conll'

  def shape_of_outputs(self, task) -> str:
    return f'{len(task.labels)} tags a word'

  def metrics(self, labels: tuple) -> tuple:
    return ('f1', 'precision', 'recall')

  def read_new(self, cfg, path: str, task, log=print) -> list:
    """A CoNLL file with tags (scored) or a word per line (not)."""
    lines: list = []
    sentences = read_conll(path, cfg.tag_column, lines, untagged=True)
    if sentences[0][1] is None:
      return [tasks_lib.Example(words, None, None) for words, _ in sentences]
    types = {_split(t)[1] for t in task.labels} - {''}
    unseen = _unseen_tag(sentences, lines, types)
    if unseen:
      raise ValueError(f'line {unseen[1]} of {path} has the tag {unseen[0]!r}, of a type the '
                       f'fine-tuning never saw ({", ".join(sorted(types))}); fix the tag, or give '
                       'the file without tags (a word per line) to predict without scoring')
    return [tasks_lib.Example(words, None, to_bioes(tags)) for words, tags in sentences]

  def predicted(self, task, outputs, data, examples: list, cfg=None) -> list[dict]:
    """Each word's tag (in the train file's scheme) and the probability of its output at the
    word's first token (None for a word cut by truncation: tagged O)."""
    z = classification.softmax(outputs)
    out = []
    for i, (e, tags) in enumerate(zip(examples, word_tags(task, outputs, data, examples))):
      at = z[i, data.word_positions[i]]
      p = [float(x) for x in at.max(-1)] if len(at) else []
      out.append({'words': list(e.text_a),
                  'prediction': list(in_scheme(tags, task.tag_scheme or 'BIOES')),
                  'probabilities': p + [None] * (len(e.text_a) - len(p))})
    return out

  def exported_labels(self, meta: dict) -> list[str]:
    """The outputs' names in the train file's scheme (checkpoints of earlier versions: BIOES)."""
    return output_names([str(x) for x in meta['labels']], meta.get('tag_scheme') or 'BIOES')

  def check_model(self, model_cfg, outputs: int, pooling: str = 'cls', cfg=None):
    return heads.Classifier(model_cfg, outputs, per_token=True)

  def to_hf(self, params, model_cfg, labels: list[str], dropout: float,
            pooling: str = 'cls', cfg=None) -> tuple[dict, dict]:
    """ElectraForTokenClassification: the same head as ours, one dense on every token (the
    modern backbone: ModernBertForTokenClassification, TaskHead and dense)."""
    if model_cfg.modern:
      return hf.modern_task_to_hf(params, model_cfg, self.hf_class, pooling, dropout,
                                  hf.labelled(labels))
    return hf.dense_head_to_hf(params, model_cfg), {
        **hf.labelled(labels), 'architectures': [self.hf_class], 'classifier_dropout': dropout}

  def compared(self, mask):
    return mask > 0  # the real tokens


KIND = Tagging()
