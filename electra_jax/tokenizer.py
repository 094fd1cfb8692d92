"""One tokenizer interface over SentencePiece, with the special-token ids the rest of the code uses.

A vocabulary trained here has the five special tokens at fixed ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3
[MASK]=4. They are SentencePiece control symbols, so text that spells "[MASK]" is never encoded as
the special token.
"""

import dataclasses
import hashlib
import io
import os
from typing import Iterable, Sequence

import sentencepiece as spm

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


def file_fingerprint(path: str) -> str:
  with open(path, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()[:16]


class SentencePieceTokenizer:
  """Encodes text to ids with a SentencePiece model file."""

  def __init__(self, model_path: str):
    if not os.path.isfile(model_path):
      raise FileNotFoundError(f'vocabulary file {model_path} does not exist; give the path of a '
                              'SentencePiece .model file, or leave data.vocab empty to train one')
    self.path = model_path
    self._sp = spm.SentencePieceProcessor(model_file=model_path)
    ids = [self._sp.piece_to_id(t) for t in SPECIAL_TOKENS]
    unk = self._sp.unk_id()
    missing = [t for t, i in zip(SPECIAL_TOKENS, ids) if i == unk and t != '[UNK]']
    if missing or self._sp.id_to_piece(unk) != '[UNK]':
      raise ValueError(f'vocabulary {model_path} lacks the special tokens {missing or ["[UNK]"]}; '
                       'train it with launch/train.py (or tokenizer.train_sentencepiece)')
    self.special = SpecialIds(*ids)
    self.fingerprint = file_fingerprint(model_path)

  @property
  def vocab_size(self) -> int:
    return self._sp.get_piece_size()

  def encode(self, text: str) -> list[int]:
    return self._sp.encode(text)

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    return self._sp.encode(list(texts))

  def decode(self, ids: Iterable[int]) -> str:
    return self._sp.decode([int(i) for i in ids])

  def id_to_piece(self, i: int) -> str:
    return self._sp.id_to_piece(int(i))


def train_sentencepiece(lines: Iterable[str], model_path: str, vocab_size: int, *,
                        lower_case: bool = True, seed: int = 0,
                        max_sentences: int = 2_000_000) -> SentencePieceTokenizer:
  """Trains a unigram SentencePiece model on `lines` and writes it to `model_path` atomically."""
  buf = io.BytesIO()
  spm.set_random_generator_seed(seed)
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=(line for line in lines if line.strip()),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type='unigram',
        character_coverage=0.9995,
        normalization_rule_name='nmt_nfkc_cf' if lower_case else 'nmt_nfkc',
        pad_id=0, pad_piece='[PAD]', unk_id=1, unk_piece='[UNK]', bos_id=-1, eos_id=-1,
        control_symbols=['[CLS]', '[SEP]', '[MASK]'],
        input_sentence_size=max_sentences, shuffle_input_sentence=True,
        num_threads=os.cpu_count() or 1, minloglevel=2)
  except RuntimeError as e:
    if 'Vocabulary size too high' in str(e):
      raise ValueError(f'the corpus is too small for a vocabulary of {vocab_size} entries; lower '
                       f'--config.model.vocab_size or use a larger corpus ({e})') from None
    raise
  tmp = model_path + '.tmp'
  with open(tmp, 'wb') as f:
    f.write(buf.getvalue())
  os.replace(tmp, model_path)
  return SentencePieceTokenizer(model_path)
