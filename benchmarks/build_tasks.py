r"""Build the real-text task suite from text this system's packages ship (no download).

    python -m benchmarks.build_tasks --out=/tmp/electra_suite
    python launch/finetune.py --config=configs/finetune/own.py --init=/tmp/electra_demo \
        --workdir=/tmp/ft_debian --config.task.train=/tmp/electra_suite/debian_section/train.csv \
        --config.task.dev=/tmp/electra_suite/debian_section/dev.csv \
        --config.task.test=/tmp/electra_suite/debian_section/test.csv

Four classification tasks (benchmarks/suite.py): Debian package descriptions by archive section
(topic) and by role (kind of software), manual pages by section (genre) and translated manual pages
by language. Each gets fixed train/dev/test CSV files and `corpus.txt`, its train texts unlabelled
(a pre-training corpus: --config.data.corpus=<out>/<task>/corpus.txt), and <out>/suite.json.
"""

import os

from absl import flags

from benchmarks import suite
from electra_jax import cli
from electra_jax.storage import fs

_OUT = flags.DEFINE_string('out', None, 'the folder to write the tasks to')
_PACKAGES = flags.DEFINE_string('packages', '/var/lib/apt/lists/*_Packages*',
                                "apt's package index files (a glob; plain, .gz, .xz or .lz4)")
_MAN = flags.DEFINE_string('man', '/usr/share/man', 'the folder of the manual pages')
_PER_CLASS = flags.DEFINE_integer('per_class', 600, 'train examples per class at most (dev and '
                                  'test: an eighth of it each)')
flags.mark_flags_as_required(['out'])


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}; pass settings as --flag=value')
  if _PER_CLASS.value < 8:
    raise cli.UserError(f'--per_class={_PER_CLASS.value}: give at least 8')
  cli.check_paths(_OUT.value)
  made = not fs.exists(_OUT.value)
  cli.out_folder(_OUT.value)
  try:
    suite.build(_OUT.value, suite.Sources(packages=_PACKAGES.value, man=_MAN.value,
                                          per_class=_PER_CLASS.value),
                log=lambda line: print(line, flush=True))
  except ValueError as e:
    if made and not fs.listdir(_OUT.value):  # refused before a file was written
      fs.rmdir(_OUT.value)
    raise cli.UserError(str(e)) from None
  print(f'the suite: {os.path.join(_OUT.value, "suite.json")}')


if __name__ == '__main__':
  cli.run(main)
