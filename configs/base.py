"""ELECTRA-Base (Clark et al. 2020, Table 6), which is also the released ELECTRA-Base++.

    python launch/train.py --config=configs/base.py --workdir=$WORKDIR
    python launch/train.py --config=configs/base.py:cocolm --workdir=$WORKDIR   # COCO-LM
    python launch/train.py --config=configs/base.py:amos --workdir=$WORKDIR   # AMOS

The original code applied only Small's defaults automatically; this preset carries Base's whole
column. `configs/base.py:plus` names the released checkpoint's settings, which are the same.
"""

from electra_jax.config.pretraining import default_config, modern_backbone


def get_config(variant=None):
  c = default_config()
  c.model.update(embedding_size=768, hidden_size=768, num_layers=12)  # 12 heads, FFN 3072
  c.model.generator_hidden_fraction = 1 / 3  # generator hidden 256, 4 heads, FFN 1024
  c.objective.mask_prob = 0.15  # -> 79 predictions per 512-token sequence
  c.optimizer.learning_rate = 2e-4
  c.optimizer.warmup_steps = 10_000
  c.data.batch_size = 256
  c.data.max_seq_length = 512
  c.train_steps = 766_000
  if variant == 'cocolm':
    c.objective.name = 'cocolm'  # its auxiliary MLM: full width, 4 layers (objectives/cocolm.py)
  elif variant == 'amos':
    c.objective.name = 'amos'  # full-width generator, exits after layers 4, 6, 8 (amos.py)
  elif variant == 'modern':  # ModernBERT-base's shape: 22 layers, 12 heads, GeGLU 2 x 1,152
    modern_backbone(c, layers=22, heads=12, inner=1152)
  elif variant not in (None, '', 'plus'):
    raise ValueError(f"unknown variant {variant!r} of configs/base.py; use 'plus', 'cocolm', "
                     "'amos', 'modern' or none")
  return c
