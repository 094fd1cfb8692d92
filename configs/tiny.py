"""A tiny ELECTRA for CPUs: the quick-start demo and smoke tests, on the built-in corpus.

    python launch/train.py --config=configs/tiny.py --workdir=/tmp/electra_demo

Small's recipe scaled down: 4 layers of width 128 (2 heads), embeddings 128, a generator of a quarter
width, an 8,192-entry SentencePiece vocabulary trained on Python's own documentation.
"""

from electra_jax.config import default_config


def get_config(variant=None):
  del variant
  c = default_config()
  c.model.update(vocab_size=8192, embedding_size=128, hidden_size=128, num_layers=4)
  c.model.num_heads = 2
  c.model.generator_hidden_fraction = 0.25
  c.model.max_position_embeddings = 128
  c.objective.mask_prob = 0.15
  c.optimizer.learning_rate = 1e-3
  c.optimizer.warmup_steps = 100
  c.data.batch_size = 32
  c.data.max_seq_length = 128
  c.data.eval_fraction = 0.05
  c.train_steps = 1500
  c.log_every = 50
  c.eval_every = 500
  c.eval_batches = 10
  return c
