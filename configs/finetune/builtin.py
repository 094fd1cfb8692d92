"""The built-in task: sentence coherence on the built-in corpus, nothing to download.

    python launch/finetune.py --config=configs/finetune/builtin.py --init=/tmp/electra_demo \
        --workdir=/tmp/electra_builtin --num_seeds=3
    # the same model from random weights, for comparison:
    python launch/finetune.py --config=configs/finetune/builtin.py --init=/tmp/electra_demo \
        --workdir=/tmp/electra_builtin_scratch --num_seeds=3 --config.from_scratch=True

Does sentence b follow sentence a in its document, or come from another document? Dev and test pairs
come only from documents the pre-training held out. Sized for the demo model on a CPU: 4,000 train
pairs of at most 64 tokens, 3 epochs.
"""

from electra_jax.finetune.config import default_config


def get_config():
  c = default_config()
  c.task.name = 'builtin'
  c.max_seq_length = 64
  c.log_every = 100
  return c
