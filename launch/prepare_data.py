r"""Corpus -> vocabulary -> packed examples -> sharded records folder, in parallel worker processes.

    python launch/prepare_data.py --corpus="$HOME/corpus/*.txt" --output=$HOME/records/mine \
        --vocab_size=30522 --max_seq_length=128 --num_workers=8
    python launch/prepare_data.py --tfds=wikipedia/20230601.en:train --tfds_field=text \
        --output=$HOME/records/wiki --vocab=$HOME/uncased/vocab.txt

    python launch/prepare_data.py --corpus="$HOME/corpus/*.txt" --output=$HOME/records/mine \
        --vocab_size=30522 --runner=DirectRunner --direct_num_workers=4 \
        --direct_running_mode=multi_processing   # Apache Beam (pip install -e ".[beam]")

Then train with --config.data.records=<output> (and --config.model.vocab_size to match). The
records are the same bytes for a seed whatever --num_workers is, and on Beam (--runner and Beam's
own pipeline options, a corpus of files: electra_jax/data/on_beam.py). An interrupted run leaves
only complete shards; the same command run again writes just the missing ones.
"""

import os

from absl import flags

from electra_jax import cli
from electra_jax.data import on_beam, prepare, records
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.storage import fs

_CORPUS = flags.DEFINE_string('corpus', None, "a file, folder or glob of .txt/.gz/.jsonl[.gz] "
                              "files, or 'builtin'")
_TFDS = flags.DEFINE_string('tfds', None, 'a TFDS text dataset as NAME[:SPLIT], instead of '
                            '--corpus (TFDS_DATA_DIR says where TFDS keeps it)')
_TFDS_FIELD = flags.DEFINE_string('tfds_field', 'text', 'the feature of the TFDS examples that '
                                  'holds the text')
_OUTPUT = flags.DEFINE_string('output', None, 'the records folder to write (or to finish)')
# The records' settings as declared (the pre-training config, data/records.py), but more shard
# files than a pre-training builds for itself: a corpus worth this command is larger, and a
# training's input readers (data.readers) take at most one per shard file.
_SETTINGS = cli.declared_flags(records.declarations(), num_shards=64, num_eval_shards=4)
_NUM_WORKERS = flags.DEFINE_integer('num_workers', os.cpu_count() or 1, 'worker processes')
_RUNNER = flags.DEFINE_string('runner', '', "an Apache Beam runner (DirectRunner, DataflowRunner, "
                              "...) to build the records on, its pipeline options as further "
                              "flags; '': --num_workers processes here")
flags.mark_flags_as_required(['output'])
cli.pass_on_unknown_flags()  # (Beam's pipeline options, with --runner)


def main(argv):
  beam_args = argv[1:] if _RUNNER.value else []  # (Beam's options: --name=value or --name value)
  unknown = [a for a in argv[1:] if a.startswith('-')]
  if unknown and not _RUNNER.value:
    raise cli.UserError(f'{unknown[0].split("=")[0]} is not a flag of this command (Apache Beam\'s '
                        'pipeline options go with --runner); see --help')
  if len(argv) > 1 and not _RUNNER.value:
    raise cli.UserError(f'unexpected arguments {argv[1:]}; pass settings as --flag=value')
  for flag, example in ((_CORPUS, "files, a folder, a glob or 'builtin'"),
                        (_TFDS, 'a dataset name such as wikipedia/20230601.en:train')):
    if flag.value is not None and not flag.value.strip():
      raise cli.UserError(f'--{flag.name} is empty; give {example}')
  if (_CORPUS.value is None) == (_TFDS.value is None):
    raise cli.UserError('give exactly one source: --corpus=<files or builtin> or '
                        '--tfds=<name>[:<split>]')
  given = {name: flag.value for name, flag in _SETTINGS.items()}
  vocab = given['vocab']
  cli.check_paths(_OUTPUT.value, _CORPUS.value, vocab)
  source = f'tfds:{_TFDS.value}' if _TFDS.value else _CORPUS.value
  if vocab and not fs.isfile(vocab):
    raise cli.UserError(f'--vocab {vocab} is not a file; give a SentencePiece .model or a '
                        'WordPiece vocab.txt, or leave it empty to train one')
  if vocab and flags.FLAGS['vocab_size'].present:  # (a given vocabulary's size is its own)
    try:
      size = tokenizer_lib.load_tokenizer(vocab, lower_case=given['lower_case']).vocab_size
    except (ValueError, FileNotFoundError) as e:
      raise cli.UserError(str(e)) from None
    if size != given['vocab_size']:
      raise cli.UserError(f'--vocab_size={given["vocab_size"]} contradicts --vocab {vocab}, which '
                          f'has {size:,} entries; leave --vocab_size out (a given vocabulary\'s '
                          f'size is its own) or give --vocab_size={size}')
  settings = records.Settings(source=source, **{
      **given, 'vocab': fs.abspath(vocab) if vocab else '',
      'text_field': _TFDS_FIELD.value if _TFDS.value else given['text_field']})
  try:
    writer = on_beam.writer(_RUNNER.value, beam_args) if _RUNNER.value else None
    prepare.records_folder(settings, _OUTPUT.value, num_workers=_NUM_WORKERS.value,
                           log=lambda line: print(line, flush=True), writer=writer)
  except (ValueError, FileNotFoundError, OSError) as e:
    raise cli.UserError(str(e)) from None


if __name__ == '__main__':
  cli.run(main)
