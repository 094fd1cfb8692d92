"""The built-in tasks: drawn from the built-in corpus, nothing to download.

    python launch/finetune.py --config=configs/finetune/builtin.py --init=/tmp/electra_demo \
        --workdir=/tmp/electra_builtin --num_seeds=3
    python launch/finetune.py --config=configs/finetune/builtin.py:topic --init=/tmp/electra_demo \
        --workdir=/tmp/electra_topic --num_seeds=3
    # the same model from random weights, for comparison:
    python launch/finetune.py --config=configs/finetune/builtin.py --init=/tmp/electra_demo \
        --workdir=/tmp/electra_builtin_scratch --num_seeds=3 --config.from_scratch=True

coherence (the default): does sentence b follow sentence a in its document, or come from another
document? Dev and test pairs come only from documents the pre-training held out; 4,000 train pairs.
topic: which of 9 areas of the standard library (asyncio, email, testing, ...) a passage of two
sentences of its documentation comes from; 2,623 train, 565 dev and 565 test passages (Python 3.11).
Sized for the demo model on a CPU: at most 64 tokens. Both tasks fine-tune with the one recipe of
your own data, no per-task settings (configs/finetune/own.py: the mean of the token vectors, no
layer-wise decay, the word table 10x, 2 epochs; `short_pretraining_recipe` in
electra_jax/finetune/config.py). How each setting fared on these two tasks:
docs/short_pretraining.md and docs/measured.md.
"""

from electra_jax.finetune.config import default_config, short_pretraining_recipe

TASKS = {'coherence': 'builtin', 'topic': 'builtin_topic'}


def get_config(task='coherence'):
  if task not in TASKS:
    raise ValueError(f'{task!r} is not a built-in task; use one of {", ".join(TASKS)}')
  c = short_pretraining_recipe(default_config())
  c.task.name = TASKS[task]
  c.max_seq_length = 64
  c.log_every = 100
  return c
