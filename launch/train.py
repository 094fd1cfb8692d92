r"""Pre-train ELECTRA.

    python launch/train.py --config=configs/tiny.py --workdir=/tmp/electra_demo
    python launch/train.py --config=configs/base.py --workdir=gs://$BUCKET/runs/base \
        --config.data.records=gs://$BUCKET/records/wiki --config.disc_weight=50

Re-running the same command with the same --workdir resumes from its latest checkpoint.
--config.zeroshot_task=builtin_topic (or another task with a default prompt) scores the
discriminator prompted zero-shot at every held-out evaluation: logged, plotted, and
--config.keep_best=zeroshot_accuracy keeps the best checkpoint by it.

Before renting a slice, the same command with --topology=<accelerator type> (v4-8, v5e-8, v5p-8,
v6e-8, v4-32, ...; --num_slices for multislice) compiles the run's programs for it here, with no
TPU and no data (pip install -e ".[tpu]"), and prints each program's memory per chip, the largest
batch that fits and the compiler's estimate of the step's time; exit status 0 when all compile and
fit, 2 with the fix when not.

Several processes (hosts): on a Cloud TPU pod slice or under SLURM / Open MPI, run the same command
in every process and they find each other; elsewhere give each process --coordinator_address,
--num_processes and --process_id (launch/local_cluster.py does so for N processes on this machine).
"""

import time

from absl import flags
import jax

from electra_jax import cli
from electra_jax.apps import zeroshot
from electra_jax.config import files as config_files
from electra_jax.hardware import topology
from electra_jax.pretraining import compiling
from electra_jax.pretraining import run as pretrain
from electra_jax.train import distributed

_CONFIG = cli.define_config_file('config', None, 'a configs/*.py file[:variant]')
_WORKDIR = flags.DEFINE_string('workdir', None, 'folder for data, checkpoints, logs and plots')
_COORDINATOR = flags.DEFINE_string('coordinator_address', None,
                                   'host:port of process 0, for a multi-process run')
_NUM_PROCESSES = flags.DEFINE_integer('num_processes', None, 'processes of a multi-process run')
_PROCESS_ID = flags.DEFINE_integer('process_id', None, 'this process, 0 .. num_processes - 1')
_HEARTBEAT = flags.DEFINE_integer('heartbeat_timeout_s', 90, 'several processes: seconds without '
                                  'word from a process before the others stop (a lost host)')
_TOPOLOGY = flags.DEFINE_string('topology', None, 'compile the run for this Cloud TPU slice here '
                                '(v4-8, v5litepod-8, v5e-8, v5p-8, v6e-8, v4-32, ...) and report; '
                                'nothing is trained, read or written')
_NUM_SLICES = flags.DEFINE_integer('num_slices', 1, 'with --topology: slices of a multislice run')
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}; pass settings as --config.<field>=...')
  config_files.require_config(_CONFIG.value, 'pre-training')
  if _TOPOLOGY.value:  # compiled for the slice here, nothing trained
    try:
      slice_ = topology.for_compiling(_TOPOLOGY.value, _NUM_SLICES.value)
      return compiling.compile_for_topology(_CONFIG.value, slice_,
                                            lambda line: print(line, flush=True))
    except ValueError as e:
      raise cli.UserError(str(e)) from None
  print(time.strftime('%H:%M:%S ') + f'pre-training in {_WORKDIR.value}: starting JAX and '
        'reading the data', flush=True)
  try:
    how = distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
                                 _HEARTBEAT.value)
  except ValueError as e:
    raise cli.UserError(str(e)) from None
  cli.check_paths(_WORKDIR.value, _CONFIG.value)
  if how and distributed.is_main():
    print(f'{jax.process_count()} processes ({how}), {jax.device_count()} devices in all',
          flush=True)
  # flushed lines: progress shows at once also when the output goes to a file or a pipe
  pretrain.train_and_evaluate(_CONFIG.value, _WORKDIR.value,
                              log=lambda line: print(line, flush=True), probe=zeroshot.probe)


if __name__ == '__main__':
  cli.run(main)
