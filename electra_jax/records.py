"""Corpus -> tokenizer -> examples -> sharded TFRecord files plus `metadata.json`, written atomically.

A records folder holds `train-XXXXX-of-YYYYY.tfrecord`, `eval-...` shards, the vocabulary it was
tokenized with (`vocab.model` or `vocab.txt`) and `metadata.json` (sequence length, vocabulary fingerprint and
special ids, example and token counts, source, seed, and the unigram cross-entropy of the held-out
tokens under the training unigram distribution, the baseline a generator has to beat). The folder is
built under a temporary name and renamed when complete, so a killed run never leaves a folder that
looks usable.
"""

import json
import math
import os
import random
import shutil
import tempfile
from typing import Iterable, Iterator

import numpy as np

from electra_jax import corpus as corpus_lib
from electra_jax import examples as examples_lib
from electra_jax import tokenizer as tokenizer_lib

METADATA = 'metadata.json'
VOCAB = 'vocab.model'
FEATURES = ('input_ids', 'input_mask', 'segment_ids')


def shard_name(split: str, index: int, count: int) -> str:
  return f'{split}-{index:05d}-of-{count:05d}.tfrecord'


def tensorflow():
  """TensorFlow, imported on first use and quietly: it only reads and writes data here."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '0')
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  tf.config.set_visible_devices([], 'GPU')  # the accelerators belong to JAX
  return tf


def _serialize(example: examples_lib.Example) -> bytes:
  tf = tensorflow()
  feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=getattr(example, k)))
             for k in FEATURES}
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _tokenized_documents(lines: Iterable[str], tokenizer, is_eval) -> Iterator[tuple[bool, list]]:
  """Groups lines into documents and tokenizes each in one call: yields (is_eval, sentences)."""
  doc = []
  for line in lines:
    if line:
      doc.append(line)
    elif doc:
      yield is_eval(), tokenizer.encode_batch(doc)
      doc = []
  if doc:
    yield is_eval(), tokenizer.encode_batch(doc)


def write_records(lines: Iterable[str], tokenizer, out_dir: str, *, max_seq_length: int,
                  seed: int = 0, eval_fraction: float = 0.02, num_shards: int = 4,
                  source: str = '') -> dict:
  """Builds a complete records folder at `out_dir` (which must not exist yet)."""
  if os.path.exists(out_dir):
    raise FileExistsError(f'{out_dir} exists already; remove it or choose another folder')
  tf = tensorflow()
  parent = os.path.dirname(os.path.abspath(out_dir))
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix='.records-', dir=parent)
  try:
    special = tokenizer.special
    split_rng = random.Random(f'split-{seed}')
    builders = {'train': examples_lib.ExampleBuilder(max_seq_length, special.cls, special.sep, seed),
                'eval': examples_lib.ExampleBuilder(max_seq_length, special.cls, special.sep,
                                                    seed + 1)}
    shards = {'train': num_shards, 'eval': 1}
    writers = {s: [tf.io.TFRecordWriter(os.path.join(tmp, shard_name(s, i, n))) for i in range(n)]
               for s, n in shards.items()}
    stats = {s: dict(examples=0, tokens=0, documents=0) for s in shards}
    counts = {s: np.zeros(tokenizer.vocab_size, np.int64) for s in shards}

    def emit(split, example):
      if example is None:
        return
      st = stats[split]
      writers[split][st['examples'] % shards[split]].write(_serialize(example))
      st['examples'] += 1
      n = int(example.input_mask.sum())
      st['tokens'] += n
      np.add.at(counts[split], example.input_ids[:n], 1)

    docs = _tokenized_documents(lines, tokenizer, lambda: split_rng.random() < eval_fraction)
    for is_eval, sentences in docs:
      split = 'eval' if is_eval else 'train'
      stats[split]['documents'] += 1
      for ids in sentences:
        emit(split, builders[split].add_sentence(ids))
      emit(split, builders[split].end_document())
    for ws in writers.values():
      for w in ws:
        w.close()
    if stats['train']['examples'] == 0:
      raise ValueError(f'the corpus {source!r} holds no text; give a corpus with at least one '
                       'non-empty line')
    if stats['eval']['examples'] == 0:
      raise ValueError(f'no document of the corpus {source!r} went to the held-out split; raise '
                       '--config.data.eval_fraction or use a corpus with more documents')
    shutil.copyfile(tokenizer.path, os.path.join(tmp, tokenizer.file_name))
    metadata = dict(
        format=1, source=source, seed=seed, max_seq_length=max_seq_length,
        vocab_file=tokenizer.file_name, vocab_size=tokenizer.vocab_size,
        vocab_fingerprint=tokenizer.fingerprint,
        special_ids=special.as_dict(),
        splits={s: dict(files=[shard_name(s, i, n) for i in range(n)], **stats[s])
                for s, n in shards.items()},
        unigram_xent=unigram_cross_entropy(counts['train'], counts['eval'], special))
    with open(os.path.join(tmp, METADATA), 'w') as f:
      json.dump(metadata, f, indent=2)
    os.rename(tmp, out_dir)
    return metadata
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def unigram_cross_entropy(train_counts, eval_counts, special) -> float:
  """Mean -log p_unigram(token) over held-out maskable tokens (add-one smoothed train counts)."""
  drop = [special.pad, special.cls, special.sep, special.mask]
  train = train_counts.astype(np.float64) + 1.0
  train[drop] = 0.0
  ev = eval_counts.astype(np.float64)
  ev[drop] = 0.0
  logp = np.log(np.where(train > 0, train / train.sum(), 1.0))
  return float(-(ev * logp).sum() / max(ev.sum(), 1.0))


def read_metadata(records_dir: str) -> dict:
  path = os.path.join(records_dir, METADATA)
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{records_dir} is not a records folder (no {METADATA}); build one by '
                            'leaving data.records empty, or point data.records at a complete one')
  with open(path) as f:
    return json.load(f)


def prepare(corpus: str, out_dir: str, *, vocab: str, vocab_size: int, lower_case: bool,
            max_seq_length: int, seed: int, eval_fraction: float, text_field: str = 'text',
            log=print) -> dict:
  """Corpus -> (trained or given) vocabulary -> records folder at `out_dir`."""
  report = corpus_lib.ReadReport()
  lines = list(corpus_lib.corpus_lines(corpus, report, text_field))
  for warning in report.warnings():
    log(f'warning: corpus {corpus}: {warning}')
  if not any(lines):
    raise ValueError(f'the corpus {corpus!r} holds no text; give a corpus with at least one '
                     'non-empty line')
  log(f'corpus {corpus}: {sum(len(l) + 1 for l in lines) / 1e6:.1f} MB, '
      f'{sum(1 for l in lines if not l)} documents')
  os.makedirs(os.path.dirname(os.path.abspath(out_dir)), exist_ok=True)
  with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(out_dir))) as tmp:
    if vocab:
      tokenizer = tokenizer_lib.load_tokenizer(vocab, lower_case=lower_case)
    else:
      log(f'training a SentencePiece vocabulary of {vocab_size} entries')
      tokenizer = tokenizer_lib.train_sentencepiece(
          lines, os.path.join(tmp, VOCAB), vocab_size, lower_case=lower_case, seed=seed)
    meta = write_records(lines, tokenizer, out_dir, max_seq_length=max_seq_length, seed=seed,
                         eval_fraction=eval_fraction, source=corpus)
  splits = meta['splits']
  log(f'records {out_dir}: {splits["train"]["examples"]} train / {splits["eval"]["examples"]} '
      f'held-out examples of {max_seq_length} tokens, unigram baseline '
      f'{meta["unigram_xent"]:.3f} nats ({math.exp(meta["unigram_xent"]):.0f} perplexity)')
  return meta
