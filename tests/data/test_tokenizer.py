"""Vocabularies: WordPiece vocab.txt through HF tokenizers, SentencePiece built by
launch/build_vocab.py."""

import json
import os
import re
import subprocess
import sys

import pytest
import sentencepiece as spm

from conftest import ROOT, WORDS, write_corpus
from electra_jax.data import prepare as prepare_lib
from electra_jax.data import records
from electra_jax.data import tokenizer as tokenizer_lib

SPECIALS_BERT = ['[PAD]', '[unused0]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']


def write_wordpiece_vocab(path, words=WORDS):
  digits = [str(i) for i in range(10)]
  tokens = SPECIALS_BERT + ['.', ','] + sorted(set(words)) + digits + ['##' + d for d in digits]
  tokens += ['un', '##aff', '##able', 'runn', '##ing']
  with open(path, 'w', encoding='utf-8') as f:
    f.write('\n'.join(tokens) + '\n')
  return tokens


@pytest.mark.fast
def test_wordpiece_vocab_txt_splits_like_bert(tmp_path):
  path = str(tmp_path / 'vocab.txt')
  tokens = write_wordpiece_vocab(path)
  tok = tokenizer_lib.load_tokenizer(path)
  assert isinstance(tok, tokenizer_lib.WordPieceTokenizer)
  assert tok.vocab_size == len(tokens)
  # special ids are where the file has them, not fixed
  assert tok.special == tokenizer_lib.SpecialIds(pad=0, unk=2, cls=3, sep=4, mask=5)
  ids = tok.encode('UNaffable running, the Cat 42. Zebra [MASK]')
  pieces = [tokens[i] for i in ids]
  # lower-cased, greedy longest match with ## continuations, punctuation split off, unknown ->
  # [UNK]; text that spells [MASK] is the special token, as in BERT's own tokenizer
  assert pieces == ['un', '##aff', '##able', 'runn', '##ing', ',', 'the', 'cat', '4', '##2', '.',
                    '[UNK]', '[MASK]']
  assert tok.encode_batch(['the cat', 'sat']) == [tok.encode('the cat'), tok.encode('sat')]
  cased = tokenizer_lib.load_tokenizer(path, lower_case=False)
  assert [tokens[i] for i in cased.encode('The cat')] == ['[UNK]', 'cat']


@pytest.mark.fast
def test_wordpiece_vocab_without_special_tokens_is_refused(tmp_path):
  path = tmp_path / 'vocab.txt'
  path.write_text('[PAD]\n[UNK]\nthe\n')
  with pytest.raises(ValueError,
                     match=r"lacks the special tokens \['\[CLS\]', '\[SEP\]', '\[MASK\]'\]"):
    tokenizer_lib.load_tokenizer(str(path))


@pytest.mark.fast
def test_wordpiece_vocab_listing_a_token_twice_is_refused(tmp_path):
  """HF tokenizers would keep one of the two ids, and read the vocabulary wrongly after it."""
  path = tmp_path / 'vocab.txt'
  tokens = write_wordpiece_vocab(path)
  path.write_text('\n'.join(tokens[:9] + ['cat'] + tokens[9:]) + '\n')
  line = tokens.index('cat') + 2  # (one line later: the inserted one)
  with pytest.raises(ValueError, match=rf"^lines 10 and {line} of the vocabulary .*vocab.txt both "
                                       r"hold 'cat'; a vocab.txt lists each token once \(its line "
                                       r'is its id\): remove one$'):
    tokenizer_lib.load_tokenizer(str(path))
  path.write_text('\n'.join(tokens[:7] + ['', ''] + tokens[7:]) + '\n')
  with pytest.raises(ValueError, match=r'^lines 8 and 9 of .* both hold an empty line'):
    tokenizer_lib.load_tokenizer(str(path))


@pytest.mark.fast
def test_records_built_with_a_wordpiece_vocab(tmp_path):
  corpus = write_corpus(str(tmp_path / 'corpus.txt'), num_docs=20)
  vocab = str(tmp_path / 'vocab.txt')
  tokens = write_wordpiece_vocab(vocab)
  out = str(tmp_path / 'data')
  meta = prepare_lib.records_folder(records.Settings(source=corpus, max_seq_length=32,
                                                     eval_fraction=0.2,
                                          vocab=vocab, vocab_size=len(tokens)), out,
                         log=lambda *_: None)
  assert meta['vocab_file'] == 'vocab.txt' and meta['vocab_size'] == len(tokens)
  assert meta['special_ids'] == {'pad': 0, 'unk': 2, 'cls': 3, 'sep': 4, 'mask': 5}
  assert meta['vocab_fingerprint'] == tokenizer_lib.file_fingerprint(vocab)
  assert os.path.isfile(os.path.join(out, 'vocab.txt'))
  assert meta['splits']['train']['examples'] > 0
  with open(os.path.join(out, records.METADATA)) as f:
    assert json.load(f) == meta


def _build_vocab(*args):
  return subprocess.run([sys.executable, os.path.join(ROOT, 'launch', 'build_vocab.py'), *args],
                        capture_output=True, text=True, timeout=300)


@pytest.mark.fast
def test_build_vocab_cli_writes_a_sentencepiece_model_with_fixed_special_ids(tmp_path, corpus_file):
  out = str(tmp_path / 'v.model')
  r = _build_vocab(f'--corpus={corpus_file}', f'--output={out}', '--vocab_size=90')
  assert r.returncode == 0, r.stderr
  tok = tokenizer_lib.load_tokenizer(out)
  assert tok.vocab_size == 90
  assert tok.special == tokenizer_lib.SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
  text = 'The cat sat on a mat [MASK] number 12.'
  assert tok.encode(text) == spm.SentencePieceProcessor(model_file=out).encode(text)
  assert 4 not in tok.encode(text)  # text that spells [MASK] is not the control symbol
  r = _build_vocab(f'--corpus={corpus_file}', f'--output={out}', '--vocab_size=90')
  assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].endswith(
      'exists; remove it or choose another path')
  r = _build_vocab(f'--corpus={tmp_path}/none/*.txt', f'--output={tmp_path}/w.model')
  assert r.returncode == 2 and 'matches no file' in r.stderr.strip().splitlines()[-1]
  assert sorted(p.name for p in tmp_path.iterdir()) == ['v.model']


def test_a_vocabulary_reports_the_corpus_read_and_the_trainer_at_work(tmp_path, monkeypatch):
  """With the intervals at 0 s: a line per batch of lines read (characters, rate, share, ETA)
  and a line per poll while the trainer works."""
  from electra_jax.data import corpus as corpus_lib
  monkeypatch.setattr(tokenizer_lib, 'READ_LINE_EVERY_S', 0.0)
  monkeypatch.setattr(tokenizer_lib, 'TRAIN_LINE_EVERY_S', 0.0)
  import random
  rng = random.Random(0)
  words = [''.join(rng.choices('abcdefghijklmnopqrstuvwxyz', k=rng.randint(3, 9)))
           for _ in range(20_000)]
  corpus = tmp_path / 'corpus.txt'  # (enough for the trainer to work past its first poll)
  corpus.write_text(''.join(' '.join(rng.choices(words, k=12)) + '.\n' for _ in range(20_000)))
  source = corpus_lib.Source(str(corpus))
  lines = []
  tokenizer_lib.train_sentencepiece(source.lines(), str(tmp_path / 'v.model'), 4000,
                                    log=lines.append, fraction_read=source.fraction_read)
  read = [l for l in lines if l.startswith('vocabulary: read ')]
  assert read and re.fullmatch(r'vocabulary: read [\d,]+ lines, [\d.]+ M characters, [\d.]+ M/s, '
                               r'100%, ETA 0m00s', read[-1]), lines
  assert any(l.startswith('vocabulary: the trainer has worked 0m0') for l in lines), lines


def test_sigterm_while_a_vocabulary_trains_stops_it_and_says_nothing_was_written(tmp_path):
  """The trainer works in a process of its own, killed with the command: SIGTERM once the corpus is
  read (the trainer's C++ at work, where a handler in its process could not run) ends the command
  at once with 143, no file and no trainer left, and says what is true."""
  import random
  import signal
  import time
  from conftest import CHILD_ENV
  rng = random.Random(0)
  words = [''.join(rng.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(rng.randint(3, 9)))
           for _ in range(60_000)]
  corpus = tmp_path / 'corpus.txt'
  corpus.write_text(''.join(' '.join(rng.choices(words, k=15)) + '.\n' for _ in range(150_000)))
  output = tmp_path / 'vocab.model'
  proc = subprocess.Popen([sys.executable, os.path.join(ROOT, 'launch', 'build_vocab.py'),
                           f'--corpus={corpus}', f'--output={output}', '--vocab_size=30000'],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=CHILD_ENV)
  for line in proc.stdout:
    if line.startswith('read 150,000 lines'):
      break
  trainers = subprocess.run(['pgrep', '-P', str(proc.pid)], capture_output=True,
                            text=True).stdout.split()
  proc.send_signal(signal.SIGTERM)
  _, err = proc.communicate(timeout=60)
  assert proc.returncode == 143, err[-2000:]
  assert err.strip().splitlines()[-1] == (
      f'stopped by SIGTERM: the vocabulary was not finished, and nothing was written to {output}; '
      'run the same command again to train it'), err[-2000:]
  assert not output.exists() and trainers
  deadline = time.time() + 30
  while any(_running(pid) for pid in trainers) and time.time() < deadline:
    time.sleep(0.1)
  assert not any(_running(pid) for pid in trainers)


def _running(pid: str) -> bool:
  """Whether process `pid` runs (a zombie waiting to be reaped does not)."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
  except OSError:
    return False
