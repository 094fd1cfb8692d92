r"""Train a SentencePiece vocabulary on a corpus, with [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4.

    python launch/build_vocab.py --corpus="$HOME/corpus/*.txt" --output=$HOME/vocab.model \
        --vocab_size=30522

Use the result with --config.data.vocab=$HOME/vocab.model (and --config.model.vocab_size to match).
A BERT WordPiece vocab.txt needs no building: pass it as --config.data.vocab directly.
"""

import os

from absl import flags

from electra_jax import cli
from electra_jax.data import corpus, records, tokenizer
from electra_jax.storage import fs

_CORPUS = flags.DEFINE_string('corpus', 'builtin', "a file, folder or glob of text, or 'builtin'")
_TFDS = flags.DEFINE_string('tfds', None,
                            'a TFDS text dataset as NAME[:SPLIT], instead of --corpus')
_TFDS_FIELD = flags.DEFINE_string('tfds_field', 'text', 'the TFDS feature that holds the text')
_OUTPUT = flags.DEFINE_string('output', None, 'the .model file to write')
# The vocabulary's settings as the records declare them (the pre-training config, data/records.py)
_SETTINGS = cli.declared_flags(records.declarations(), only=(
    'text_field', 'vocab_size', 'lower_case', 'character_coverage', 'max_sentences', 'seed'))
flags.mark_flags_as_required(['output'])


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}; pass settings as --flag=value')
  output = _OUTPUT.value
  if not output.endswith('.model'):
    raise cli.UserError(f'--output {output} must end in .model (a SentencePiece model file)')
  cli.check_paths(output, _CORPUS.value)
  try:
    if fs.exists(output):
      raise cli.UserError(f'--output {output} exists; remove it or choose another path')
    folder = fs.dirname(fs.abspath(output))
    if not fs.remote(output) and (not os.path.isdir(folder) or not os.access(folder, os.W_OK)):
      raise cli.UserError(f'cannot write {output}: {folder} is not a writable folder')
  except OSError as e:
    raise cli.UserError(cli.storage_error(e, output)) from None
  given = {name: flag.value for name, flag in _SETTINGS.items()}
  try:
    if _TFDS.value:
      source = corpus.Source(f'tfds:{_TFDS.value}', _TFDS_FIELD.value)
    else:
      source = corpus.Source(_CORPUS.value, given['text_field'])
    source.require_text()
    stats = {}
    print(f'training a SentencePiece vocabulary of {given["vocab_size"]:,} entries on '
          f'{source.spec}', flush=True)
    tok = tokenizer.train_sentencepiece(  # streams the corpus; samples --max_sentences lines
        source.lines(), output, given['vocab_size'], lower_case=given['lower_case'],
        seed=given['seed'], character_coverage=given['character_coverage'],
        max_sentences=given['max_sentences'], stats=stats,
        log=lambda line: print(line, flush=True))
    if stats.get('lines_cut'):
      print(f'warning: corpus {source.spec}: {stats["lines_cut"]:,} sentence(s) longer than '
            f'{tokenizer.MAX_SENTENCE_BYTES:,} bytes were cut into pieces for the trainer, which '
            'would skip them', flush=True)
    for warning in source.report.warnings():
      print(f'warning: corpus {source.spec}: {warning}', flush=True)
  except (ValueError, FileNotFoundError) as e:
    raise cli.UserError(str(e)) from None
  except KeyboardInterrupt as e:  # (the trainer's process is stopped with this one)
    raise type(e)(f'the vocabulary was not finished, and nothing was written to {output}; run '
                  'the same command again to train it') from None
  print(f'{output}: {tok.vocab_size} entries, special ids {tok.special.as_dict()}, '
        f'fingerprint {tok.fingerprint}', flush=True)


if __name__ == '__main__':
  cli.run(main)
