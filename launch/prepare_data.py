"""Corpus -> vocabulary -> packed examples -> sharded records folder, in parallel worker processes.

    python launch/prepare_data.py --corpus="$HOME/corpus/*.txt" --output=$HOME/records/mine \
        --vocab_size=30522 --max_seq_length=128 --num_workers=8
    python launch/prepare_data.py --tfds=wikipedia/20230601.en:train --tfds_field=text \
        --output=$HOME/records/wiki --vocab=$HOME/uncased/vocab.txt

Then train with --config.data.records=<output> (and --config.model.vocab_size to match). The
records are the same bytes for a seed whatever --num_workers is. An interrupted run leaves only
complete shards; the same command run again writes just the missing ones.
"""

import os


from absl import flags

from electra_jax import cli

_CORPUS = flags.DEFINE_string('corpus', None, "a file, folder or glob of .txt/.gz/.jsonl[.gz] "
                              "files, or 'builtin'")
_TEXT_FIELD = flags.DEFINE_string('text_field', 'text', 'the field of .jsonl objects holding text')
_TFDS = flags.DEFINE_string('tfds', None, 'a TFDS text dataset as NAME[:SPLIT], instead of --corpus '
                            '(TFDS_DATA_DIR says where TFDS keeps it)')
_TFDS_FIELD = flags.DEFINE_string('tfds_field', 'text', 'the feature of the TFDS examples that '
                                  'holds the text')
_OUTPUT = flags.DEFINE_string('output', None, 'the records folder to write (or to finish)')
_VOCAB = flags.DEFINE_string('vocab', '', 'a SentencePiece .model or WordPiece vocab.txt; empty: '
                             'train a SentencePiece vocabulary on the corpus')
_VOCAB_SIZE = flags.DEFINE_integer('vocab_size', 30522, 'entries of a trained vocabulary')
_LOWER_CASE = flags.DEFINE_bool('lower_case', True, 'lower-case text in the tokenizer')
_COVERAGE = flags.DEFINE_float('character_coverage', 0.9995, 'share of characters a trained '
                               'vocabulary covers')
_MAX_SENTENCES = flags.DEFINE_integer('max_sentences', 2_000_000, 'sentences sampled to train a '
                                      'vocabulary')
_MAX_SEQ_LENGTH = flags.DEFINE_integer('max_seq_length', 128, 'tokens per example')
_SEED = flags.DEFINE_integer('seed', 0, 'seed of the held-out split and of the example builder')
_EVAL_FRACTION = flags.DEFINE_float('eval_fraction', 0.02, 'share of documents held out')
_NUM_SHARDS = flags.DEFINE_integer('num_shards', 64, 'train shard files: at least the input '
                                   'readers of training (data.readers), which the processes share')
_NUM_EVAL_SHARDS = flags.DEFINE_integer('num_eval_shards', 4, 'held-out shard files')
_NUM_WORKERS = flags.DEFINE_integer('num_workers', os.cpu_count() or 1, 'worker processes')
flags.mark_flags_as_required(['output'])


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}; pass settings as --flag=value')
  if (_CORPUS.value is None) == (_TFDS.value is None):
    raise cli.UserError('give exactly one source: --corpus=<files or builtin> or '
                        '--tfds=<name>[:<split>]')
  from electra_jax.storage import fs  # pylint: disable=import-outside-toplevel
  from electra_jax.data import prepare  # pylint: disable=import-outside-toplevel
  from electra_jax.data import records  # pylint: disable=import-outside-toplevel
  cli.check_paths(_OUTPUT.value, _CORPUS.value, _VOCAB.value)
  source = f'tfds:{_TFDS.value}' if _TFDS.value else _CORPUS.value
  if _VOCAB.value and not fs.isfile(_VOCAB.value):
    raise cli.UserError(f'--vocab {_VOCAB.value} is not a file; give a SentencePiece .model or a '
                        'WordPiece vocab.txt, or leave it empty to train one')
  settings = records.Settings(
      source=source, max_seq_length=_MAX_SEQ_LENGTH.value, seed=_SEED.value,
      eval_fraction=_EVAL_FRACTION.value, num_shards=_NUM_SHARDS.value,
      num_eval_shards=_NUM_EVAL_SHARDS.value,
      text_field=_TFDS_FIELD.value if _TFDS.value else _TEXT_FIELD.value,
      lower_case=_LOWER_CASE.value, vocab=fs.abspath(_VOCAB.value) if _VOCAB.value else '',
      vocab_size=_VOCAB_SIZE.value, character_coverage=_COVERAGE.value,
      max_sentences=_MAX_SENTENCES.value)
  try:
    prepare.records_folder(settings, _OUTPUT.value, num_workers=_NUM_WORKERS.value,
                           log=lambda line: print(line, flush=True))
  except (ValueError, FileNotFoundError, OSError) as e:
    raise cli.UserError(str(e)) from None


if __name__ == '__main__':
  cli.run(main)
