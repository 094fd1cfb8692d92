r"""Fine-tune a pre-trained discriminator on a task.

    python launch/finetune.py --config=configs/finetune/glue.py:sst2 --init=/tmp/electra_demo \
        --workdir=/tmp/electra_sst2
    python launch/finetune.py --config=configs/finetune/own.py --init=/tmp/electra_demo \
        --workdir=/tmp/electra_mine --config.task.train=train.csv --config.task.dev=dev.csv \
        --config.task.text_a=review --config.task.label=stars

    python launch/finetune.py --workdir=/tmp/electra_sst2 --mode=eval      # dev scores again
    python launch/finetune.py --workdir=/tmp/electra_sst2 --mode=predict   # test predictions

With --topology=<accelerator type> (v4-8, v5e-8, v5p-8, v6e-8, ...) the same command compiles the
fine-tuning's programs for that Cloud TPU slice here instead (no TPU; only --init's config is read)
and prints their memory per chip and the estimated step time.

--init is the --workdir of a pre-training run (launch/train.py): its latest checkpoint, its
vocabulary and its model config are used. Results (each seed and the median) are written to
<workdir>/results.md and results.json. --mode=eval and --mode=predict use the fine-tunings saved
in --workdir, with the config they were trained with unless --config is given (e.g. to name
another test file); predictions go to <workdir>/seed_<k>/predictions/ (GLUE's test splits as the
leaderboard's <Task>.tsv files).
"""

from absl import flags

from electra_jax import cli
from electra_jax.config import files as config_files
from electra_jax.finetune import compiling as finetune_compiling
from electra_jax.finetune import config as config_lib
from electra_jax.apps import search
from electra_jax.hardware import topology

_CONFIG = cli.define_config_file('config', None, 'a configs/finetune/*.py file[:task]',
                                 'fine-tuning')
_INIT = flags.DEFINE_string('init', None, 'the --workdir of a pre-training run')
_WORKDIR = flags.DEFINE_string('workdir', None, 'folder for checkpoints, logs and results')
_MODE = flags.DEFINE_enum('mode', 'train', ['train', 'eval', 'predict'],
                          'train (and score on dev); eval: score the saved fine-tunings on dev '
                          'again; predict: write their test-set predictions')
_SEEDS = flags.DEFINE_integer('num_seeds', None, 'fine-tunings from the same checkpoint '
                              '(overrides --config.num_seeds)')
_TOPOLOGY = flags.DEFINE_string('topology', None, 'compile the fine-tuning for this Cloud TPU '
                                'slice here and report (v4-8, v5e-8, v5p-8, v6e-8, ...); nothing '
                                'runs')
_NUM_SLICES = flags.DEFINE_integer('num_slices', 1, 'with --topology: slices of a multislice run')
flags.mark_flags_as_required(['workdir'])


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}; pass settings as --config.<field>=...')
  config = _CONFIG.value
  config_files.require_config(config, 'fine-tuning')
  if _TOPOLOGY.value:
    if config is None or _INIT.value is None:
      raise cli.UserError('--topology compiles a fine-tuning for a slice: give its --config and '
                          'the --init whose model it fine-tunes')
    config.init = _INIT.value
    try:
      slice_ = topology.for_compiling(_TOPOLOGY.value, _NUM_SLICES.value)
      return finetune_compiling.compile_for_topology(config, slice_,
                                                    lambda line: print(line, flush=True))
    except ValueError as e:
      raise cli.UserError(str(e)) from None
  cli.check_paths(_WORKDIR.value, _INIT.value)
  if config is None:  # eval / predict: the config the workdir was fine-tuned with
    config = config_lib.saved_config(_WORKDIR.value, _MODE.value)
  if _INIT.value is not None:
    config.init = _INIT.value
  if _SEEDS.value is not None:
    config.num_seeds = _SEEDS.value
  cli.check_paths(_WORKDIR.value, config)
  search.finetune(config, _WORKDIR.value, log=lambda line: print(line, flush=True),
                  mode=_MODE.value)


if __name__ == '__main__':
  cli.run(main)
