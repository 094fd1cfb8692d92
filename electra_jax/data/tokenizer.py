"""One tokenizer interface over SentencePiece and WordPiece, with the special-token ids the code
uses.

- A SentencePiece `.model` (what electra_jax trains) has the five special tokens at fixed ids:
  [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4. They are control symbols, so text that spells "[MASK]"
  is never encoded as the special token.
- A BERT-style WordPiece `vocab.txt` (one token per line, e.g. the 30,522-entry uncased vocabulary
  of the released ELECTRA checkpoints) is read by HF `tokenizers` (BERT normalizer and
  pre-tokenizer, greedy longest-match-first WordPiece); its special ids are wherever the file has
  them ([PAD]=0 [UNK]=100 [CLS]=101 [SEP]=102 [MASK]=103 in BERT's).

- An HF `tokenizers` file, `tokenizer.json` (a released model's own, e.g. ModernBERT's byte-level
  BPE), is used as it is (its normalizer, pre-tokenizer and model); its special tokens are its
  [PAD] [UNK] [CLS] [SEP] [MASK], wherever it has them.

`load_tokenizer(path)` picks by the file name: `.txt` is WordPiece, `.json` an HF tokenizers file,
anything else SentencePiece.
"""

import dataclasses
import functools
import hashlib
import io
import multiprocessing
import os
import re
import signal
import time
from typing import Any, Iterable, Iterator, Sequence

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers.implementations import BertWordPieceTokenizer
import sentencepiece as spm

from electra_jax.storage import fs

SPECIAL_TOKENS = ('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]')


@dataclasses.dataclass(frozen=True)
class SpecialIds:
  pad: int
  unk: int
  cls: int
  sep: int
  mask: int

  def as_dict(self):
    return dataclasses.asdict(self)


SPECIAL = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)  # of every SentencePiece model made here


def file_fingerprint(path: str) -> str:
  return hashlib.sha256(fs.read_bytes(path)).hexdigest()[:16]


# The fields of SentencePiece's ModelProto (sentencepiece_model.proto, proto2) this module reads,
# described here for protobuf's runtime: sentencepiece's own generated module pins the protobuf
# runtime it loads with (7.36 for sentencepiece 0.2.3), which other libraries (Apache Beam) cap
# below; the wire format and these field numbers are the model file's, stable since 2018.
_UNIGRAM, _NORMAL, _USER_DEFINED = 1, 1, 4  # TrainerSpec.ModelType, SentencePiece.Type's values
_MODEL_FIELDS = {  # message: ((field, number, type, default or None, repeated message or ''), ...)
    'SentencePiece': (('piece', 1, 'string', None, ''), ('score', 2, 'float', None, ''),
                      ('type', 3, 'int32', '1', '')),
    'TrainerSpec': (('model_type', 3, 'int32', '1', ''), ('unk_id', 40, 'int32', '0', '')),
    'NormalizerSpec': (('precompiled_charsmap', 2, 'bytes', None, ''),
                       ('add_dummy_prefix', 3, 'bool', 'true', ''),
                       ('remove_extra_whitespaces', 4, 'bool', 'true', '')),
    'ModelProto': (('pieces', 1, 'message', None, 'SentencePiece'),
                   ('trainer_spec', 2, 'message', None, 'TrainerSpec'),
                   ('normalizer_spec', 3, 'message', None, 'NormalizerSpec')),
}


@functools.lru_cache(maxsize=1)
def _model_proto():
  """The ModelProto message class of `_MODEL_FIELDS` (unknown fields of a model file are kept)."""
  F = descriptor_pb2.FieldDescriptorProto
  kinds = {'string': F.TYPE_STRING, 'float': F.TYPE_FLOAT, 'int32': F.TYPE_INT32,
           'bytes': F.TYPE_BYTES, 'bool': F.TYPE_BOOL, 'message': F.TYPE_MESSAGE}
  file = descriptor_pb2.FileDescriptorProto(name='electra_jax/sentencepiece_model.proto',
                                            package='electra_jax_sentencepiece', syntax='proto2')
  for message, fields in _MODEL_FIELDS.items():
    described = file.message_type.add(name=message)
    for name, number, kind, default, of in fields:
      field = described.field.add(name=name, number=number, type=kinds[kind],
                                  label=F.LABEL_REPEATED if name == 'pieces' else F.LABEL_OPTIONAL)
      if default is not None:
        field.default_value = default
      if of:
        field.type_name = f'.electra_jax_sentencepiece.{of}'
  pool = descriptor_pool.DescriptorPool()
  pool.Add(file)
  return message_factory.GetMessageClass(
      pool.FindMessageTypeByName('electra_jax_sentencepiece.ModelProto'))


def read_model_proto(data: bytes):
  """A SentencePiece model file's ModelProto: its pieces, trainer and normalizer specs."""
  return _model_proto().FromString(data)


def unigram_tokenizer(proto, path: str = ''):
  """A `tokenizers.Tokenizer` of a SentencePiece model (a ModelProto): the same pieces and scores
  as a Unigram model, SentencePiece's own precompiled normalization table (NFKC, and case folding
  for a lower-cased vocabulary), the collapse of repeated spaces and the `▁` word-boundary
  prefix. It is what electra_jax encodes with and what an export writes as tokenizer.json, so HF
  transformers gives our ids; it splits text as SentencePiece's own encoder does but for ties
  between segmentations of equal score (runs of '=', '_'), which the two order differently."""
  if proto.trainer_spec.model_type != _UNIGRAM:
    raise ValueError(f'{path} is not a unigram SentencePiece model; only unigram vocabularies '
                     '(what electra_jax trains) are read')
  norm = proto.normalizer_spec
  normal = (_NORMAL, _USER_DEFINED)
  # control symbols ([CLS], [MASK], ...) and [UNK] are never read from text, as in SentencePiece
  pieces = [(p.piece, p.score if p.type in normal else -1e9) for p in proto.pieces]
  tok = Tokenizer(models.Unigram(pieces, unk_id=proto.trainer_spec.unk_id, byte_fallback=False))
  steps: list = ([normalizers.Precompiled(norm.precompiled_charsmap)] if norm.precompiled_charsmap
                 else [])
  if norm.remove_extra_whitespaces:
    steps += [normalizers.Strip(), normalizers.Replace(Regex(' {2,}'), ' ')]
  tok.normalizer = normalizers.Sequence(steps)
  scheme = 'always' if norm.add_dummy_prefix else 'never'
  tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement='▁', prepend_scheme=scheme)
  tok.decoder = decoders.Metaspace(replacement='▁', prepend_scheme=scheme)
  return tok


class SentencePieceTokenizer:
  """Encodes text to ids with a SentencePiece model file, through `unigram_tokenizer`."""
  file_name = 'vocab.model'  # its name inside a records folder

  def __init__(self, model_path: str):
    if not fs.isfile(model_path):
      raise FileNotFoundError(f'vocabulary file {model_path} does not exist; give the path of a '
                              'SentencePiece .model file, or leave data.vocab empty to train one')
    self.path = model_path
    data = fs.read_bytes(model_path)
    try:
      self._sp = spm.SentencePieceProcessor(model_proto=data)
    except RuntimeError:
      raise ValueError(f'{model_path} is not a SentencePiece model file; give a .model file '
                       'or a WordPiece vocab.txt') from None
    ids = [self._sp.piece_to_id(t) for t in SPECIAL_TOKENS]
    unk = self._sp.unk_id()
    missing = [t for t, i in zip(SPECIAL_TOKENS, ids) if i == unk and t != '[UNK]']
    if missing or self._sp.id_to_piece(unk) != '[UNK]':
      raise ValueError(f'vocabulary {model_path} lacks the special tokens {missing or ["[UNK]"]}; '
                       'train it with launch/train.py (or tokenizer.train_sentencepiece)')
    self.special = SpecialIds(*ids)
    self.fingerprint = hashlib.sha256(data).hexdigest()[:16]
    self.unigram = unigram_tokenizer(read_model_proto(data), model_path)
    self._batch = getattr(self.unigram, 'encode_batch_fast', self.unigram.encode_batch)

  @property
  def vocab_size(self) -> int:
    return self._sp.get_piece_size()

  def encode(self, text: str) -> list[int]:
    return self.unigram.encode(text, add_special_tokens=False).ids

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    return [e.ids for e in self._batch(list(texts), add_special_tokens=False)]

  def decode(self, ids: Iterable[int]) -> str:
    return self._sp.decode([int(i) for i in ids])

  def id_to_piece(self, i: int) -> str:
    return self._sp.id_to_piece(int(i))


MAX_SENTENCE_BYTES = 4000  # SentencePiece's trainer skips longer sentences (its limit is 4,192)


def _bounded(lines: Iterable[str], stats: dict) -> Iterator[str]:
  """Non-empty lines, each cut at spaces (or anywhere, failing those) into pieces the trainer
  takes whole; stats['lines_cut'] counts the lines cut."""
  for line in lines:
    if not line.strip():
      continue
    data = line.encode('utf-8')
    if len(data) <= MAX_SENTENCE_BYTES:
      yield line
      continue
    stats['lines_cut'] = stats.get('lines_cut', 0) + 1
    while data:
      cut = len(data) if len(data) <= MAX_SENTENCE_BYTES else (
          data.rfind(b' ', 0, MAX_SENTENCE_BYTES) if data.rfind(b' ', 0, MAX_SENTENCE_BYTES) > 0
          else MAX_SENTENCE_BYTES)
      piece, data = data[:cut], data[cut:].lstrip(b' ')
      yield piece.decode('utf-8', errors='ignore')


class VocabTooLarge(ValueError):
  """The corpus cannot fill a vocabulary of the size asked; `most` is the trainer's largest."""

  def __init__(self, message: str, most: int | None):
    super().__init__(message)
    self.most = most


# The vocabulary trainer's defaults (data/records.py declares them as fields of a records folder).
CHARACTER_COVERAGE = 0.9995  # the share of characters a trained vocabulary covers
MAX_SENTENCES = 2_000_000  # sentences sampled to train it


def train_sentencepiece(lines: Iterable[str], model_path: str, vocab_size: int, *,
                        lower_case: bool = True, seed: int = 0,
                        character_coverage: float = CHARACTER_COVERAGE,
                        max_sentences: int = MAX_SENTENCES, size_flag: str = '--vocab_size',
                        stats: dict | None = None, log=None,
                        fraction_read=None) -> SentencePieceTokenizer:
  """Trains a unigram SentencePiece model on `lines` and writes it to `model_path` atomically.

  Lines longer than the trainer takes are cut into pieces, counted in stats['lines_cut'];
  `size_flag` is how the caller's user sets the vocabulary size (named in errors); `log` hears
  progress while the corpus is read (with the ETA where `fraction_read()` gives the share read)
  and while the trainer works on it."""
  stats = {} if stats is None else stats
  if not 0 < character_coverage <= 1:
    raise ValueError(f'the character coverage is {character_coverage}; give a fraction in (0, 1], '
                     'e.g. 0.9995')
  if vocab_size < len(SPECIAL_TOKENS) + 1:
    raise ValueError(f'a vocabulary of {vocab_size} entries leaves no room beside the '
                     f'{len(SPECIAL_TOKENS)} special tokens; give a larger {size_flag}')
  options = dict(
      vocab_size=vocab_size, model_type='unigram', character_coverage=character_coverage,
      normalization_rule_name='nmt_nfkc_cf' if lower_case else 'nmt_nfkc',
      pad_id=0, pad_piece='[PAD]', unk_id=1, unk_piece='[UNK]', bos_id=-1, eos_id=-1,
      control_symbols=['[CLS]', '[SEP]', '[MASK]'],
      input_sentence_size=max_sentences, shuffle_input_sentence=True,
      num_threads=os.cpu_count() or 1, minloglevel=2)
  try:
    model = _train_apart(_bounded(lines, stats), options, seed, log or (lambda line: None),
                         fraction_read or (lambda: None))
  except RuntimeError as e:
    message = ' '.join(str(e).split())
    if 'Vocabulary size too high' in message:
      most = re.search(r'value <= (\d+)', message)
      raise VocabTooLarge(f'the corpus is too small for a vocabulary of {vocab_size} entries; '
                          f'lower {size_flag}' + (f' to at most {most.group(1)}' if most else '')
                          + ' or use a larger corpus',
                          int(most.group(1)) if most else None) from None
    chars = re.search(r'smaller than required_chars\. \d+ vs (\d+)', message)
    if chars:
      raise ValueError(f'a vocabulary of {vocab_size} entries cannot hold the {chars.group(1)} '
                       f'characters the corpus needs; give {size_flag} of at least '
                       f'{int(chars.group(1)) + 10} or lower the character coverage') from None
    if 'sentences_.empty()' in message:
      raise ValueError('the corpus gave the vocabulary trainer no text; give a corpus with '
                       'non-empty lines') from None
    raise
  fs.write_atomic(model_path, model)
  return SentencePieceTokenizer(model_path)


# Seconds between the vocabulary's progress lines while the corpus is read, and while the
# trainer works (it says nothing itself until it ends).
READ_LINE_EVERY_S, TRAIN_LINE_EVERY_S = 10.0, 30.0


def _train_apart(sentences: Iterator[str], options: dict, seed: int, log,
                 fraction_read=lambda: None) -> bytes:
  """The model SentencePiece's trainer makes of `sentences`, trained in a process of its own fed
  through a pipe: the trainer's C++ holds its thread for minutes on a large corpus, where a
  signal's handler could not run, so here SIGTERM and Ctrl-C stop it at once (the process is
  killed; nothing is written). Reading the corpus happens here, its errors raised as themselves;
  the trainer's errors come back as RuntimeError with its message."""
  context = multiprocessing.get_context('spawn')
  ours, theirs = context.Pipe()
  trainer = context.Process(target=_trainer, args=(theirs, options, seed), daemon=True)
  trainer.start()
  theirs.close()
  try:
    try:
      count = chars = 0
      start = last = time.monotonic()
      for batch in _batches(sentences, 4096):
        ours.send(batch)
        count += len(batch)
        chars += sum(map(len, batch))
        if time.monotonic() - last >= READ_LINE_EVERY_S:
          last = time.monotonic()
          log(f'vocabulary: {_read_line(count, chars, last - start, fraction_read())}')
      ours.send(None)
      log(f'read {count:,} lines; the trainer samples up to {options["input_sentence_size"]:,} '
          f'and builds {options["vocab_size"]:,} entries')
      start = last = time.monotonic()
      while not ours.poll(0.25):  # (signals are handled between polls)
        if not trainer.is_alive():
          break
        if time.monotonic() - last >= TRAIN_LINE_EVERY_S:
          last = time.monotonic()
          log(f'vocabulary: the trainer has worked {fs.duration_text(last - start)} on '
              f'{min(count, options["input_sentence_size"]):,} lines (it tells nothing more '
              'until it ends)')
      kind, value = ours.recv()
    except (BrokenPipeError, EOFError, ConnectionResetError):
      raise RuntimeError(f'the vocabulary trainer stopped without a result (exit code '
                         f'{trainer.exitcode}; out of memory?)') from None
    if kind == 'error':
      raise RuntimeError(value)
    return value
  finally:
    if trainer.is_alive():
      trainer.kill()
    trainer.join()
    ours.close()


def _read_line(lines: int, chars: int, seconds: float, fraction: float | None) -> str:
  """'read 1,234,567 lines, 80.1 M characters, 5.2 M/s, 40%, ETA 0m15s' (the share and ETA where
  the corpus's size is known)."""
  line = (f'read {lines:,} lines, {chars / 1e6:,.1f} M characters, '
          f'{chars / 1e6 / max(seconds, 1e-9):.1f} M/s')
  if fraction:
    eta = fs.duration_text(seconds * (1 - fraction) / fraction)
    line += f', {100 * fraction:.0f}%, ETA {eta}'
  return line


def _batches(items: Iterator[str], n: int) -> Iterator[list[str]]:
  batch = []
  for item in items:
    batch.append(item)
    if len(batch) == n:
      yield batch
      batch = []
  if batch:
    yield batch


def _trainer(connection, options: dict, seed: int):
  """The trainer's process: sentences from `connection` until None, then ('model', bytes) or
  ('error', message) back. Signals are its parent's to act on: it is killed when they arrive."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)

  def sentences():
    while (batch := connection.recv()) is not None:
      yield from batch

  spm.set_random_generator_seed(seed)
  model = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(sentence_iterator=sentences(), model_writer=model, **options)
  except Exception as e:
    connection.send(('error', str(e)))
    return
  connection.send(('model', model.getvalue()))


class _ThroughHf:
  """Encoding and decoding through an HF `tokenizers` object (`_tok`), without special tokens."""
  _tok: Any

  def encode(self, text: str) -> list[int]:
    return self._tok.encode(text, add_special_tokens=False).ids

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

  def decode(self, ids: Iterable[int]) -> str:
    return self._tok.decode([int(i) for i in ids])

  def id_to_piece(self, i: int) -> str | None:
    return self._tok.id_to_token(int(i))


class WordPieceTokenizer(_ThroughHf):
  """Encodes text to ids with a BERT WordPiece vocab.txt, through HF `tokenizers`."""
  file_name = 'vocab.txt'

  def __init__(self, vocab_path: str, lower_case: bool = True):
    if not fs.isfile(vocab_path):
      raise FileNotFoundError(f'vocabulary file {vocab_path} does not exist; give the path of a '
                              'WordPiece vocab.txt or a SentencePiece .model file')
    data = fs.read_bytes(vocab_path)
    vocab = [line.rstrip('\r') for line in data.decode('utf-8').split('\n')]
    if vocab and vocab[-1] == '':
      vocab.pop()
    index = {t: i for i, t in reversed(list(enumerate(vocab)))}
    if len(index) < len(vocab):  # (HF tokenizers would keep one of its ids: lines and ids disagree)
      twice = next(i for i, t in enumerate(vocab) if index[t] != i)
      token = f'{vocab[twice]!r}' if vocab[twice] else 'an empty line'
      raise ValueError(f'lines {index[vocab[twice]] + 1} and {twice + 1} of the vocabulary '
                       f'{vocab_path} both hold {token}; a vocab.txt lists each token once (its '
                       'line is its id): remove one')
    missing = [t for t in SPECIAL_TOKENS if t not in index]
    if missing:
      raise ValueError(f'vocabulary {vocab_path} lacks the special tokens {missing}; a BERT '
                       'vocab.txt has [PAD] [UNK] [CLS] [SEP] [MASK] as lines of their own')
    self.path = vocab_path
    self._tok = BertWordPieceTokenizer(index, lowercase=lower_case, strip_accents=None,
                                       clean_text=True, handle_chinese_chars=True)
    self._size = len(vocab)
    self.special = SpecialIds(*(index[t] for t in SPECIAL_TOKENS))
    self.fingerprint = hashlib.sha256(data).hexdigest()[:16]

  @property
  def vocab_size(self) -> int:
    return self._size


class JsonTokenizer(_ThroughHf):
  """Encodes text to ids with an HF `tokenizers` file (`tokenizer.json`) as it is; `lower_case`
  is the file's own normalizer's business."""
  file_name = 'tokenizer.json'

  def __init__(self, path: str):
    if not fs.isfile(path):
      raise FileNotFoundError(f'tokenizer file {path} does not exist; give the path of an HF '
                              'tokenizer.json, a WordPiece vocab.txt or a SentencePiece .model')
    data = fs.read_bytes(path)
    try:
      tok = Tokenizer.from_str(data.decode('utf-8'))
    except Exception as e:  # (tokenizers raises Exception itself)
      raise ValueError(f'{path} is not an HF tokenizers file ({" ".join(str(e).split())[:100]}); '
                       'give the tokenizer.json a model was saved with') from None
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    missing = [t for t, i in ids.items() if i is None]
    if missing:
      raise ValueError(f'the tokenizer {path} lacks the special tokens {missing}; the encoders '
                       'trained here read [PAD] [UNK] [CLS] [SEP] [MASK] (BERT\'s and '
                       'ModernBERT\'s tokenizers have them)')
    tok.no_padding()
    tok.no_truncation()
    self.path, self._tok = path, tok
    self.special = SpecialIds(*(int(ids[t] or 0) for t in SPECIAL_TOKENS))  # (none is None)
    self.fingerprint = hashlib.sha256(data).hexdigest()[:16]

  @property
  def vocab_size(self) -> int:
    return self._tok.get_vocab_size(with_added_tokens=True)


KINDS = (SentencePieceTokenizer, WordPieceTokenizer, JsonTokenizer)
FILE_NAMES = tuple(kind.file_name for kind in KINDS)  # their names inside a records folder


def kind_of(path: str) -> type[SentencePieceTokenizer | WordPieceTokenizer | JsonTokenizer]:
  """The tokenizer class that reads the vocabulary file `path`, by its name: `.txt` WordPiece,
  `.json` an HF tokenizers file, anything else SentencePiece."""
  return {'.txt': WordPieceTokenizer, '.json': JsonTokenizer}.get(
      path[path.rfind('.'):] if '.' in path else '', SentencePieceTokenizer)


def load_tokenizer(path: str, lower_case: bool = True):
  """The tokenizer of the vocabulary file `path` (`kind_of`)."""
  kind = kind_of(path)
  if kind is WordPieceTokenizer:
    return WordPieceTokenizer(path, lower_case=lower_case)
  return kind(path)
