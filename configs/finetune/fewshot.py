"""Few-shot fine-tuning through the discriminator's detection head (Xia et al. 2022, "Prompting
ELECTRA"): each seed trains on its own draw of 16 train examples per class, every example read
once per class with the class's label word in the task's prompt, and the head trained at the word.

    python launch/finetune.py --config=configs/finetune/fewshot.py:topic --init=/tmp/electra_demo \
        --workdir=/tmp/electra_fewshot --num_seeds=5
    python launch/finetune.py --config=configs/finetune/fewshot.py:sst2 --init=$PRETRAINED \
        --workdir=$WORKDIR --num_seeds=5
    python launch/finetune.py --config=configs/finetune/fewshot.py:own --init=$PRETRAINED \
        --workdir=$WORKDIR --config.task.train=train.csv --config.task.dev=dev.csv \
        --config.prompt.template='It was {label}.' \
        --config.prompt.label_words=pos=great,neg=terrible

The variant is the task: `topic` and `coherence` (the built-in tasks), a GLUE classification task
by name (its default prompt: electra_jax/finetune/inputs/prompts.py), or `own` (your files and
your prompt). Standard few-shot fine-tuning, a new head on the same draws, for comparison:
--config.task.kind=classification.

The recipe: K = 16 examples per class (LM-BFF's and Xia et al.'s), batch 8 (Xia et al. searched 2,
4 and 8), 20 epochs of the draw (Xia et al.'s num_train_epochs, under a cap of 1,000 steps: 20
epochs of SST-2's 32 examples are 80 steps, of the topic task's 144, 360), the rest the own-data
recipe for models from a short pre-training (`short_pretraining_recipe` in
electra_jax/finetune/config.py). How it fared: docs/measured.md, "Few-shot".
"""

from electra_jax.finetune.config import default_config, short_pretraining_recipe
from electra_jax.finetune.inputs import tasks

BUILTIN = {'topic': 'builtin_topic', 'coherence': 'builtin'}


def get_config(task='topic'):
  if task not in BUILTIN and task != 'own' and task not in tasks.GLUE:
    raise ValueError(f'{task!r} is not a task of this config; use topic, coherence, own or a GLUE '
                     f'task ({", ".join(tasks.GLUE)})')
  c = short_pretraining_recipe(default_config())
  c.task.name = BUILTIN.get(task, task)
  c.task.kind = 'prompted'
  c.task.shots = 16
  c.batch_size = 8
  c.epochs = 20.0
  if task in BUILTIN:
    c.max_seq_length = 64  # (the built-in tasks' length: configs/finetune/builtin.py)
  return c
