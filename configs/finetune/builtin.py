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
Sized for the demo model on a CPU: at most 64 tokens, 3 epochs. Departures from the paper's
fine-tuning recipe, each measured on the demo model (docs/short_pretraining.md):
both tasks' heads read the mean of the token vectors instead of [CLS]'s alone (a short
pre-training leaves the [CLS] vectors spanning ~10 directions). Coherence has no layer-wise
learning-rate decay (a 2-layer model has no deep stack to protect). Topic, a task of vocabulary,
lets the lower layers learn faster than the head instead (layer-wise factor 1.5: embeddings 3.4x,
layer_0 2.25x, layer_1 1.5x) and the word table 10x faster still: pre-training leaves its rows
larger than at initialization, and Adam turns a row by the learning rate whatever its size. On the
demo checkpoint that took topic from 80.88 / 81.95 (dev / test, median of 3 seeds) to 86.19 /
85.49; random weights went from 85.66 / 86.73 to 84.42 / 85.49 (with the word table's factor alone
they reach 86.37 / 86.73). The same settings on coherence undo the pre-training (49.80 / 51.47).
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
  if task == 'topic':
    c.optimizer.layerwise_decay = 1.5  # > 1: each layer below the head learns 1.5x faster
    c.optimizer.word_table_lr = 10.0
  return c
