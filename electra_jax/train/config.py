"""The optimizer's typed config: AdamW as in the original release and its schedule.

`OptimizerConfig` is a frozen dataclass whose fields are declared here once (default, meaning,
valid values); the pre-training config's `optimizer` section is made from it (`OPTIMIZER`), a
fine-tuning builds one from its own recipe (finetune/config.py's `optimizer_config`), and a config
checks itself once, when constructed: train/optim.py builds AdamW and its schedule from it. Every
field may change when a run resumes.
"""

import dataclasses

from electra_jax import fields
from electra_jax.fields import AT_LEAST_1, declare, one_of, rule


SCHEDULES = ('original', 'warmup_then_decay', 'trapezoid')


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  learning_rate: float = declare(5e-4, 'peak learning rate (NaN would turn every parameter into '
                                 'NaN at the first step while the loss and gradients stay finite; '
                                 'a negative one climbs the loss)',
                                 rule(lambda x: x > 0, 'a positive number, e.g. 5e-4'))
  warmup_steps: int = declare(10_000, 'linear warmup length',
                              rule(lambda x: x >= 0, '0 or more steps'))
  decay_power: float = declare(1.0, 'polynomial decay power (1.0: linear to 0 at train_steps)',
                               rule(lambda x: x >= 0, '0 (constant) or more, e.g. 1.0'))
  schedule: str = declare('original', "'original': peak*decay*warmup multiplied | "
                          "'warmup_then_decay' | 'trapezoid': up to the peak over the warm-up, "
                          'constant, then down to 0 over the last cooldown_fraction of '
                          "decay_steps (the modern recipe's warm-up, stable, decay)",
                          one_of(*SCHEDULES))
  cooldown_fraction: float = declare(0.1, "the trapezoid schedule's decay, as a share of "
                                     'decay_steps', rule(lambda x: 0 < x <= 1, 'in (0, 1], e.g. '
                                                         '0.1'))
  decay_steps: int = declare(1_000_000, 'steps over which the lr decays to 0', AT_LEAST_1,
                             derived=lambda c: c.get_ref('train_steps') + 0)
  b1: float = declare(0.9, 'Adam beta1', rule(lambda x: 0 <= x < 1, 'in [0, 1), e.g. 0.9'))
  b2: float = declare(0.999, 'Adam beta2', rule(lambda x: 0 <= x < 1, 'in [0, 1), e.g. 0.999'))
  eps: float = declare(1e-6, 'Adam epsilon', rule(lambda x: x > 0, 'a positive number, e.g. 1e-6'))
  bias_correction: bool = declare(False, 'the original Adam has no bias correction',
                                  one_of(False, True))
  weight_decay: float = declare(0.01, 'decoupled, multiplied by lr; not on LayerNorm parameters '
                                'and biases', rule(lambda x: x >= 0, '0 or more, e.g. 0.01'))
  grad_clip_norm: float = declare(1.0, 'global-norm clip over all parameters; 0 disables',
                                  rule(lambda x: x >= 0, '0 (no clipping) or more'))

  def __post_init__(self):
    fields.check_typed(self, OPTIMIZER, 'optimizer.')

  @classmethod
  def from_config(cls, optimizer_cfg):
    """The optimizer's config from `config.optimizer` (or a dict of some of its fields: the
    others at their defaults); ValueError (one sentence) for an unknown field or a value outside
    its range."""
    return fields.typed(cls, optimizer_cfg, OPTIMIZER, 'optimizer.')


OPTIMIZER = fields.section_of(OptimizerConfig, doc='AdamW and its schedule', resume='free')
