"""Predict with a fine-tuned model on a new file.

    python launch/predict.py --workdir=/tmp/mine --input=new.csv
        -> /tmp/mine/predictions/new.csv: index, the input's columns, prediction, p(<each class>)

--workdir is a fine-tuning's (launch/finetune.py): its saved config says how to read the file
(task.text_a, task.text_b, task.label, task.header; CoNLL for tagging, SQuAD's JSON for SQuAD),
its checkpoints give the model, its --init the vocabulary. The file is read as training reads its
files; where every row has a label, the predictions are scored too. --seed picks the fine-tuning:
median (the seed whose first dev score is the median, the default), best, all (a file each) or a
seed's number. Rows stay in the input's order, with every column of the input; an existing output
is kept unless --overwrite, and the input is never replaced. A fine-tuning that has not finished
is refused unless --allow_unfinished, and one still running in any case.
"""

from absl import flags

from electra_jax import cli
from electra_jax.apps import predict

_WORKDIR = flags.DEFINE_string('workdir', None,
                               'the --workdir of a fine-tuning (launch/finetune.py)')
_INPUT = flags.DEFINE_string('input', None, 'the file to predict on (.csv, .tsv, .jsonl; CoNLL '
                             'for tagging; SQuAD JSON for SQuAD)')
_OUTPUT = flags.DEFINE_string('output', None, 'the predictions file (default: <workdir>/'
                              'predictions/<the input\'s name>; .tsv, .csv or .jsonl)')
_SEED = flags.DEFINE_string('seed', 'median', 'median, best, all, or a seed\'s number')
_OVERWRITE = flags.DEFINE_bool('overwrite', False, 'replace an existing --output (never the '
                               '--input)')
_UNFINISHED = flags.DEFINE_bool('allow_unfinished', False, 'predict with a fine-tuning whose seeds '
                                'have not all finished (refused otherwise)')
flags.mark_flags_as_required(['workdir', 'input'])


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}')
  cli.check_paths(_WORKDIR.value, _INPUT.value, _OUTPUT.value)
  predict.predict(_WORKDIR.value, _INPUT.value, _OUTPUT.value, _SEED.value, _OVERWRITE.value,
                  log=lambda line: print(line, flush=True), allow_unfinished=_UNFINISHED.value)


if __name__ == '__main__':
  cli.run(main)
