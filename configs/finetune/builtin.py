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
Sized for the demo model on a CPU: at most 64 tokens, 3 epochs. Two departures from the paper's
fine-tuning recipe, both measured on the demo model (README, "What a short pre-training does"): the
head reads the mean of the token vectors instead of [CLS]'s alone (a short pre-training leaves the
[CLS] vectors spanning ~10 directions), and no layer-wise learning-rate decay (a 2-layer model has
no deep stack to protect).
"""

from electra_jax.finetune.config import default_config

TASKS = {'coherence': 'builtin', 'topic': 'builtin_topic'}


def get_config(task='coherence'):
  if task not in TASKS:
    raise ValueError(f'{task!r} is not a built-in task; use one of {", ".join(TASKS)}')
  c = default_config()
  c.task.name = TASKS[task]
  c.max_seq_length = 64
  c.log_every = 100
  c.pooling = 'mean'
  c.optimizer.layerwise_decay = 1.0
  return c
