"""ELECTRA-Large (Clark et al. 2020, Table 6): 400K steps; `:plus` is the 1.75M-step long run.

    python launch/train.py --config=configs/large.py --workdir=$WORKDIR
    python launch/train.py --config=configs/large.py:cocolm --workdir=$WORKDIR   # COCO-LM
    python launch/train.py --config=configs/large.py:amos --workdir=$WORKDIR   # AMOS
    python launch/train.py --config=configs/large.py:plus --workdir=$WORKDIR   # Large++ (1.75M)
"""

from electra_jax.config.pretraining import default_config, modern_backbone


def get_config(variant=None):
  c = default_config()
  c.model.update(embedding_size=1024, hidden_size=1024, num_layers=24)  # 16 heads, FFN 4096
  c.model.generator_hidden_fraction = 0.25  # generator hidden 256, 4 heads, FFN 1024
  c.objective.mask_prob = 0.25  # -> 130 predictions per 512-token sequence
  c.optimizer.learning_rate = 2e-4
  c.optimizer.warmup_steps = 10_000
  c.data.batch_size = 2048
  c.data.max_seq_length = 512
  c.train_steps = 400_000
  if variant == 'plus':
    c.train_steps = 1_750_000
  elif variant == 'cocolm':
    c.objective.name = 'cocolm'  # its auxiliary MLM: full width, 4 layers (objectives/cocolm.py)
    c.objective.mask_prob = 0.15  # COCO-LM masks 15% at every size
  elif variant == 'amos':
    c.objective.name = 'amos'  # full-width generator, exits after layers 8, 12, 16 (amos.py)
    c.objective.mask_prob = 0.15  # AMOS masks 15% at every size
  elif variant == 'modern':  # ModernBERT-large's shape: 28 layers, 16 heads, GeGLU 2 x 2,624
    modern_backbone(c, layers=28, heads=16, inner=2624)
  elif variant:
    raise ValueError(f"unknown variant {variant!r} of configs/large.py; use 'plus', 'cocolm', "
                     "'amos', 'modern' or none")
  return c
