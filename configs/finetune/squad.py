"""SQuAD 1.1 or 2.0 from TFDS (or the official JSON files), the paper's recipe for the size.

    python launch/finetune.py --config=configs/finetune/squad.py:v2.0 --init=$PRETRAINED \
        --workdir=$WORKDIR
    # the official files instead of TFDS:
    ... --config.task.train=train-v2.0.json --config.task.dev=dev-v2.0.json

Sequences of 512 tokens (windows 128 apart, questions <= 64 tokens), 2 epochs; answers <= 30
tokens from the 20 best spans; for 2.0 no answer where the null log-odds exceed -2.75.
"""

from electra_jax.finetune.config import default_config


def get_config(version='v1.1'):
  versions = {'v1.1': 'squad1', 'v2.0': 'squad2'}
  if version not in versions:
    raise ValueError(f'{version!r} is not a SQuAD version; use v1.1 or v2.0')
  c = default_config()
  c.task.name = versions[version]
  c.max_seq_length = 512
  return c
