"""A tiny ELECTRA for CPUs: the quick-start demo and smoke tests, on the built-in corpus.

    python launch/train.py --config=configs/tiny.py --workdir=/tmp/electra_demo
    python launch/train.py --config=configs/tiny.py:modern --workdir=/tmp/electra_demo_modern

Small's recipe scaled down: 2 layers of width 128 (2 heads), embeddings 128, a generator of a
quarter width, a 4,096-entry SentencePiece vocabulary trained on Python's own documentation,
sequences of 64 tokens, 3,500 steps of 32 sequences, no dropout (a short run over 0.4M tokens gains
more from the 20% faster step than it loses to overfitting).

One departure from the paper's recipe for short runs: the discriminator's replaced-token logit
starts at the log-odds of the masked share (log(0.15 / 0.85) = -1.73) instead of 0. From 0, Adam
moves that one bias by about the learning rate per step, so the network reaches the ~12% prior by
turning every token's vector towards one direction, and its detection stalls there for the first
thousands of steps; started at the prior it learns to detect from the first steps (held-out AUC
0.677 instead of 0.599 after the demo's 3,500 steps; docs/short_pretraining.md).
"""

import math

from electra_jax.config.pretraining import default_config, modern_backbone


def get_config(variant=None):
  if variant not in (None, '', 'modern'):
    raise ValueError(f"configs/tiny.py has no variant {variant!r}; use configs/tiny.py or "
                     "configs/tiny.py:modern")
  c = default_config()
  c.model.update(vocab_size=4096, embedding_size=128, hidden_size=128, num_layers=2)
  c.model.num_heads = 2
  c.model.generator_hidden_fraction = 0.25
  c.model.max_position_embeddings = 128
  c.model.dropout_rate = 0.0
  c.model.attention_dropout_rate = 0.0
  c.objective.mask_prob = 0.15
  c.model.disc_bias_init = math.log(0.15 / 0.85)  # the replaced share's prior; the paper: 0
  c.optimizer.learning_rate = 5e-4
  c.optimizer.warmup_steps = 200
  c.data.batch_size = 32
  c.data.max_seq_length = 64
  c.data.eval_fraction = 0.05
  c.train_steps = 3500
  c.log_every = 200
  c.eval_every = 1000
  c.eval_batches = 16  # at most; the held-out split gives 10 batches of 32 (340 examples from
  #                      Python 3.11's documentation; the built-in corpus is the running Python's)
  if variant == 'modern':  # ModernBERT's block: 3 layers (global, local, local), GeGLU 2 x 192,
    modern_backbone(c, layers=3, heads=2, inner=192, window=32)  # a window of half a sequence
    c.model.max_position_embeddings = 128
  return c
