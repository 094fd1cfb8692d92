"""Statistics of a pre-training's discriminator, per layer, at each kept checkpoint and at its
random initial weights: what a short pre-training has done to the representations fine-tuning
starts from.

    python launch/diagnose.py --workdir=/tmp/electra_demo
-> one table per checkpoint (step 0: the random initial weights), /tmp/electra_demo/diagnose.json

Per layer (emb: the embeddings' output): the mean norm of the real tokens' vectors, their
anisotropy (mean cosine between different vectors; near 1: every vector alike) and effective rank
(directions they spread over), the same two for the [CLS] vectors, the attention entropy as a share
of its maximum (1: uniform attention), and the norm of the layer's weight matrices. Keep more
checkpoints (--config.save_every, --config.keep_checkpoints) to see a run's course.

    python launch/diagnose.py --workdir=/tmp/electra_demo --probe=builtin_topic
        -> also a linear probe per layer on a classification task's frozen features (dev accuracy)
    python launch/diagnose.py --workdir=/tmp/electra_demo --probe=/tmp/electra_suite/man_section
        -> the same on a folder's train.csv and dev.csv (text, label)
"""

from absl import flags

from electra_jax import cli
from electra_jax.apps import diagnose

_WORKDIR = flags.DEFINE_string('workdir', None, 'the --workdir of launch/train.py')
_BATCHES = flags.DEFINE_integer('batches', 4, 'held-out batches measured')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 32, 'examples per batch')
_PROBE = flags.DEFINE_string('probe', '', 'a classification task (builtin, builtin_topic, a GLUE '
                             'task, or a folder holding train.csv and dev.csv with text and label '
                             'columns) on whose frozen features a linear probe per layer is scored')
flags.mark_flags_as_required(['workdir'])


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}')
  if _BATCHES.value < 1 or _BATCH_SIZE.value < 2:
    raise cli.UserError('--batches must be at least 1 and --batch_size at least 2')
  cli.check_paths(_WORKDIR.value)
  diagnose.diagnose(_WORKDIR.value, _BATCHES.value, _BATCH_SIZE.value,
                    log=lambda line: print(line, flush=True), probe=_PROBE.value)


if __name__ == '__main__':
  cli.run(main)
