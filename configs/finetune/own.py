"""Your own labelled data: a classification or regression task by flags alone.

    python launch/finetune.py --config=configs/finetune/own.py --init=$PRETRAINED \
        --workdir=$WORKDIR --config.task.train=train.csv --config.task.dev=dev.csv \
        --config.task.text_a=review --config.task.label=stars [--config.task.kind=regression]

Files are .csv or .tsv with a header row, or .jsonl; `task.text_b` names a second text column for
pair tasks. Without a header row: --config.task.header=False --config.task.text_a=1
--config.task.label=0 (columns by position). Class names are those of the train split; a dev label
never seen in train is refused. A test file with labels is scored beside dev.

Multiple choice: --config.task.kind=multiple_choice --config.task.text_a=context
--config.task.choices=ending0,ending1,ending2,ending3 --config.task.label=label (the right
candidate's index, 0 first).
"""

from electra_jax.finetune.config import default_config


def get_config():
  c = default_config()
  c.task.name = 'own'
  return c
