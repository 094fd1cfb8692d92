"""ELECTRA-Small (Clark et al. 2020, Table 6) and the released ELECTRA-Small++.

    python launch/train.py --config=configs/small.py --workdir=$WORKDIR
    python launch/train.py --config=configs/small.py:cocolm --workdir=$WORKDIR   # COCO-LM
    python launch/train.py --config=configs/small.py:amos --workdir=$WORKDIR   # AMOS
    python launch/train.py --config=configs/small.py:plus --workdir=$WORKDIR   # Small++

Small++ is the released checkpoint: a full-width generator (hidden 256), sequences of 512 and
4M steps; everything else as Small.
"""

from electra_jax.config.pretraining import default_config, modern_backbone


def get_config(variant=None):
  c = default_config()
  c.model.update(embedding_size=128, hidden_size=256, num_layers=12)  # 4 heads, FFN 1024
  c.model.generator_hidden_fraction = 0.25  # generator hidden 64, 1 head, FFN 256
  c.objective.mask_prob = 0.15  # -> 19 predictions per 128-token sequence
  c.optimizer.learning_rate = 5e-4
  c.optimizer.warmup_steps = 10_000
  c.data.batch_size = 128
  c.data.max_seq_length = 128
  c.train_steps = 1_000_000
  if variant == 'plus':
    c.model.generator_hidden_fraction = 1.0
    c.data.max_seq_length = 512  # -> 79 predictions per sequence
    c.train_steps = 4_000_000
  elif variant == 'cocolm':
    c.objective.name = 'cocolm'  # its auxiliary MLM: full width, 2 layers (objectives/cocolm.py)
  elif variant == 'amos':
    c.objective.name = 'amos'  # full-width generator, exits after layers 4, 6, 8 (amos.py)
  elif variant == 'modern':  # ModernBERT's block at Small's width and depth: GeGLU 2 x 384
    modern_backbone(c, layers=12, heads=4, inner=384)
  elif variant:
    raise ValueError(f"unknown variant {variant!r} of configs/small.py; use 'plus', 'cocolm', "
                     "'amos', 'modern' or none")
  return c
