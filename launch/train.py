"""Pre-train ELECTRA.

    python launch/train.py --config=configs/tiny.py --workdir=/tmp/electra_demo
    python launch/train.py --config=configs/base.py --workdir=gs://... --config.objective.disc_weight=50

Re-running the same command with the same --workdir resumes from its latest checkpoint.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import flags  # pylint: disable=wrong-import-position
from ml_collections import config_flags  # pylint: disable=wrong-import-position

from electra_jax import cli  # pylint: disable=wrong-import-position

_CONFIG = config_flags.DEFINE_config_file('config', None, 'a configs/*.py file[:variant]')
_WORKDIR = flags.DEFINE_string('workdir', None, 'folder for data, checkpoints, logs and plots')
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}; pass settings as --config.<field>=...')
  from electra_jax import train  # pylint: disable=import-outside-toplevel
  # flushed lines: progress shows at once also when the output goes to a file or a pipe
  train.train_and_evaluate(_CONFIG.value, _WORKDIR.value, log=lambda line: print(line, flush=True))


if __name__ == '__main__':
  cli.run(main)
