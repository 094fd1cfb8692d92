"""A GLUE task from TFDS (`glue/<task>`), the paper's recipe for the model's size.

    python launch/finetune.py --config=configs/finetune/glue.py:mnli --init=$PRETRAINED \
        --workdir=$WORKDIR --num_seeds=10

Tasks: cola sst2 mrpc qqp stsb mnli qnli rte wnli. Epochs: 3 (10 for RTE and STS-B); MRPC and
STS-B train on both orders of each pair; MNLI is scored on matched and mismatched dev.
"""

from electra_jax.finetune.config import default_config
from electra_jax.finetune.inputs.tasks import GLUE


def get_config(task='sst2'):
  if task not in GLUE:
    raise ValueError(f'{task!r} is not a GLUE task; use one of {", ".join(GLUE)}')
  c = default_config()
  c.task.name = task
  return c
