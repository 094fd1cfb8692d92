"""A records folder: what it holds, its settings, and reading it back (prepare.py builds one).

A records folder holds:
    prepare.json                        the settings it is built with (written first)
    vocab.model | vocab.txt             the vocabulary the examples are tokenized with
    train-XXXXX-of-YYYYY.tfrecord       packed examples (input_ids, input_mask, segment_ids), or
                                        rows of documents (pack_documents; input_mask numbers them)
    train-XXXXX-of-YYYYY.json           that shard's counts; written last, it marks the shard done
    eval-...                            the held-out split, the same way
    .part-XXXXXX.eval.tfrecord | .json  while a corpus of files is built: each part's held-out
                                        examples, joined into the eval shards, then removed
    metadata.json                       written once every shard is done: the folder is complete
"""

import dataclasses
import hashlib
import json

from electra_jax import fields
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.data.config import DATA, VOCAB_SIZE
from electra_jax.storage import fs

FORMAT = 2
METADATA = 'metadata.json'
PLAN = 'prepare.json'
SOURCE = 'source.json'  # the corpus files as they were when the build began (corpus.Source.state)
VOCAB = 'vocab.model'
FEATURES = ('input_ids', 'input_mask', 'segment_ids')
SPLITS = ('train', 'eval')


def shard_name(split: str, index: int, count: int) -> str:
  return f'{split}-{index:05d}-of-{count:05d}.tfrecord'


# Where each setting of a records folder but its source is declared: a field of the pre-training
# config (its path there), or one of the vocabulary trainer's, declared here.
_CONFIG_PATHS = {'max_seq_length': 'data.max_seq_length', 'seed': 'seed',
                 'eval_fraction': 'data.eval_fraction', 'num_shards': 'data.num_shards',
                 'num_eval_shards': 'data.num_eval_shards', 'text_field': 'data.text_field',
                 'lower_case': 'data.lower_case', 'vocab': 'data.vocab',
                 'vocab_size': 'model.vocab_size', 'pack_documents': 'data.pack_documents'}
VOCAB_TRAINER = {
    'character_coverage': fields.Field(tokenizer_lib.CHARACTER_COVERAGE,
                                       'share of characters a trained vocabulary covers'),
    'max_sentences': fields.Field(tokenizer_lib.MAX_SENTENCES,
                                  'sentences sampled to train a vocabulary'),
}


def declarations() -> dict[str, fields.Field]:
  """{setting: its declaration (default, meaning)}: every field of `Settings` but its source.
  launch/prepare_data.py and launch/build_vocab.py take their flags from here."""
  declared = {**{f'data.{name}': f for name, f in DATA.fields.items()}, 'seed': fields.SEED,
              'model.vocab_size': VOCAB_SIZE}
  return {**{name: declared[path] for name, path in _CONFIG_PATHS.items()}, **VOCAB_TRAINER}


_DECLARED = declarations()


def _at(config, path: str):
  """The value at a dotted path of a config ('data.num_shards')."""
  for key in path.split('.'):
    config = getattr(config, key)
  return config


@dataclasses.dataclass(frozen=True)
class Settings:
  """Everything the bytes of a records folder depend on: the data fields of the pre-training config
  (`of_config`) and two of the vocabulary trainer, each default its declaration's."""
  source: str  # data.corpus: 'builtin', 'tfds:NAME[:SPLIT]', or a file, folder or glob
  max_seq_length: int = _DECLARED['max_seq_length'].default
  seed: int = _DECLARED['seed'].default
  eval_fraction: float = _DECLARED['eval_fraction'].default
  num_shards: int = _DECLARED['num_shards'].default
  num_eval_shards: int = _DECLARED['num_eval_shards'].default
  text_field: str = _DECLARED['text_field'].default
  lower_case: bool = _DECLARED['lower_case'].default
  vocab: str = _DECLARED['vocab'].default  # a given vocabulary file; '' trains a SentencePiece one
  vocab_size: int = _DECLARED['vocab_size'].default  # entries of a trained vocabulary
  character_coverage: float = _DECLARED['character_coverage'].default
  max_sentences: int = _DECLARED['max_sentences'].default
  pack_documents: bool = _DECLARED['pack_documents'].default

  @classmethod
  def of_config(cls, config) -> 'Settings':
    """The records a pre-training config (typed, or as config.json holds it) reads (built under its
    workdir when data.records is '')."""
    return cls(source=config.data.corpus,
               **{name: _at(config, path) for name, path in _CONFIG_PATHS.items()})

  def shards(self) -> list[tuple[str, int]]:
    return ([('train', i) for i in range(self.num_shards)] +
            [('eval', i) for i in range(self.num_eval_shards)])

  def count(self, split: str) -> int:
    return self.num_shards if split == 'train' else self.num_eval_shards

  def file(self, split: str, index: int) -> str:
    return shard_name(split, index, self.count(split))

  def check(self):
    if self.num_shards < 1 or self.num_eval_shards < 1:
      raise ValueError(f'num_shards={self.num_shards} and num_eval_shards={self.num_eval_shards} '
                       'must both be at least 1')
    if not 0 < self.eval_fraction < 1:
      raise ValueError(f'eval_fraction={self.eval_fraction} must lie strictly between 0 and 1')
    if self.max_seq_length < 5:
      raise ValueError(f'max_seq_length must be at least 5, not {self.max_seq_length}')
    if not self.vocab and not 0 < self.character_coverage <= 1:
      raise ValueError(f'character_coverage={self.character_coverage} must lie in (0, 1], e.g. '
                       '0.9995')
    if not self.vocab and self.vocab_size < 6:
      raise ValueError(f'vocab_size={self.vocab_size} leaves no room beside the five special '
                       'tokens; give a larger vocabulary (BERT\'s has 30522 entries)')


def held_out(seed: int, k: int, eval_fraction: float) -> bool:
  """Whether the k-th document goes to the held-out split: a hash of (seed, k), no shared state."""
  return _below(f'{seed}:{k}', eval_fraction)


def held_out_at(seed: int, file: int, offset: int, eval_fraction: float) -> bool:
  """Whether the document that starts at byte `offset` of the corpus's file `file` goes to the
  held-out split (the parts rule): a hash of (seed, file, offset), what any reader knows."""
  return _below(f'{seed}:{file}:{offset}', eval_fraction)


def _below(key: str, fraction: float) -> bool:
  digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
  return int.from_bytes(digest, 'little') < fraction * 2.0**64


# How a records folder's documents were given to its splits and shards (metadata.json's `rule`;
# folders without it were built by 'documents').
RULES = {
    'documents': 'one read of the whole corpus in order: the k-th document held out by a hash of '
                 '(seed, k), the j-th of a split in its shard j mod shards; every worker reads '
                 'every document (the built-in corpus, TFDS datasets)',
    'parts': "the corpus's files in parts of about the same bytes (corpus.Source.parts): part p's "
             'documents in train shard p mod num_shards, its held-out ones (a hash of the seed, '
             'the file and where the document starts) in eval shard (p mod num_shards) mod '
             'num_eval_shards, each part through a builder of its own; a worker reads only its '
             "shards' parts (files of a corpus)",
}


def rule_of(source: str) -> str:
  """The rule a records folder of `source` is built by now."""
  return 'documents' if source == 'builtin' or source.startswith('tfds:') else 'parts'


def read_plan(path: str) -> tuple[Settings, str]:
  """(the settings, the rule) a records folder's plan (prepare.json) records; plans written before
  the rule was recorded are 'documents'."""
  plan = read_json(path)
  rule = plan.pop('rule', 'documents')
  return Settings(**plan), rule


def write_json(path: str, value):
  """Writes JSON atomically (fs.write_atomic)."""
  fs.write_atomic(path, json.dumps(value, indent=1))


def read_json(path: str):
  return fs.read_json(path, f'delete the records folder {fs.dirname(path)} and build it again '
                            '(the run that made it, or launch/prepare_data.py)', want=dict)


def counts_path(out_dir: str, shard_file: str) -> str:
  return fs.join(out_dir, shard_file[:-len('.tfrecord')] + '.json')


def vocab_file(settings: Settings) -> str:
  return tokenizer_lib.kind_of(settings.vocab).file_name  # ('': the SentencePiece one trained)


def done_shards(out_dir: str, settings: Settings) -> set:
  """Shards whose counts file exists and whose file has the size it """
  done = set()
  for split, i in settings.shards():
    name = settings.file(split, i)
    counts, path = counts_path(out_dir, name), fs.join(out_dir, name)
    try:
      if fs.getsize(path) == read_json(counts)['bytes']:
        done.add((split, i))
    except (OSError, ValueError, KeyError):
      pass
  return done


def workdir_vocab(workdir: str, config) -> tuple[str, dict, str]:
  """(records folder, its metadata, vocabulary file) of the pre-training run in `workdir` whose
  config is `config`; FileNotFoundError (one sentence) when one of them is missing."""
  records_dir = config.data.records or fs.join(workdir, 'data')
  if not config.data.records and not fs.exists(records_dir):
    raise FileNotFoundError(f'{records_dir}, the records of the pre-training in {workdir}, is '
                            'missing: run its command again (the same --config and --workdir) '
                            'to build them again, then this one')
  meta = read_metadata(records_dir)
  vocab = next((fs.join(records_dir, n) for n in tokenizer_lib.FILE_NAMES
                if fs.isfile(fs.join(records_dir, n))), None)
  if vocab is None:
    raise FileNotFoundError(f'the records folder {records_dir} of {workdir} holds no vocabulary '
                            'file')
  return records_dir, meta, vocab


# What makes two records folders different data (besides their contents): named when a checkpoint
# of other records is resumed.
IDENTITY = ('source', 'seed', 'eval_fraction', 'max_seq_length', 'lower_case', 'pack_documents',
            'vocab_fingerprint')


def fingerprint(meta: dict) -> str:
  """The identity of a records folder: a hash of its metadata (settings, files, counts), the same
  for the same corpus built with the same settings, wherever the folder lies."""
  return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]


def read_metadata(records_dir: str) -> dict:
  """The metadata of a complete records folder, or one sentence saying what is wrong with it."""
  path = fs.join(records_dir, METADATA)
  if not fs.isfile(path):
    if fs.isfile(fs.join(records_dir, PLAN)):
      settings, _ = read_plan(fs.join(records_dir, PLAN))
      done = len(done_shards(records_dir, settings))
      raise FileNotFoundError(
          f'{records_dir} is an unfinished records folder ({done} of '
          f'{len(settings.shards())} shards written); run the same prepare command again to '
          'finish it')
    raise FileNotFoundError(f'{records_dir} is not a records folder (no {METADATA}); build one '
                            'with launch/prepare_data.py, or leave data.records empty')
  meta = read_json(path)
  if not isinstance(meta, dict) or any(
      not isinstance(meta.get('splits', {}).get(s), dict) for s in SPLITS):
    raise fs.DamagedFile(f'{path} lacks the description of its splits ({", ".join(SPLITS)}): the '
                         f'file is damaged; delete the records folder {records_dir} and build it '
                         'again')
  if meta.get('format') != FORMAT:
    raise FileNotFoundError(f'{records_dir} holds records of format {meta.get("format")}, this '
                            f'version reads format {FORMAT}; rebuild them with '
                            'launch/prepare_data.py')
  return meta


def verify(records_dir: str, meta: dict):
  """Every shard is present with the size it was written with, and the vocabulary is the one used.

  Catches a shard cut short (a copy interrupted, a disk filled) before training reads it.
  """
  for split in SPLITS:
    s = meta['splits'][split]
    for name, size in zip(s['files'], s['bytes_per_file']):
      path = fs.join(records_dir, name)
      actual = fs.getsize(path) if fs.exists(path) else None
      if actual != size:
        state = 'missing' if actual is None else f'{actual:,} bytes instead of {size:,}'
        raise ValueError(f'the shard {path} is {state}: the records folder is damaged; copy it '
                         'again or rebuild it with launch/prepare_data.py')
  vocab = fs.join(records_dir, meta['vocab_file'])
  if (not fs.exists(vocab) or
      tokenizer_lib.file_fingerprint(vocab) != meta['vocab_fingerprint']):
    raise ValueError(f'the vocabulary {vocab} is missing or differs from the one the records were '
                     'tokenized with; restore it or rebuild the records')
  tokenizer = tokenizer_lib.load_tokenizer(vocab, lower_case=meta.get('lower_case', True))
  for key, actual in (('vocab_size', tokenizer.vocab_size),
                      ('special_ids', tokenizer.special.as_dict())):
    if key in meta and meta[key] != actual:
      raise ValueError(f'{fs.join(records_dir, METADATA)} says {key} is {meta[key]!r}, and the '
                       f'vocabulary the records were tokenized with ({vocab}) gives {actual!r}: '
                       'the metadata was changed or comes from another folder; rebuild the '
                       'records with launch/prepare_data.py')
