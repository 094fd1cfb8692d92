"""Your own labelled data: a classification or regression task by flags alone.

    python launch/finetune.py --config=configs/finetune/own.py --init=$PRETRAINED \
        --workdir=$WORKDIR --config.task.train=train.csv --config.task.dev=dev.csv \
        --config.task.text_a=review --config.task.label=stars [--config.task.kind=regression]

Files are .csv or .tsv with a header row, or .jsonl; `task.text_b` names a second text column for
pair tasks. Class names are those of the train split; a dev label never seen in train is refused.
"""

from electra_jax.finetune.config import default_config


def get_config():
  c = default_config()
  c.task.name = 'own'
  return c
