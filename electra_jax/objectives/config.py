"""The objective's typed config: replaced token detection and its relatives.

`ObjectiveConfig` is a frozen dataclass whose fields are declared here once; the pre-training
config's `objective` section is made from it (`OBJECTIVE`), and a config checks itself once, when
constructed. Besides the declared fields, `sampler`, the generator's draw: 'cdf'
(masking.sample_with) on CPUs, 'gumbel' (masking.sample_gumbel) on GPUs and TPUs: the same
distribution, each the faster there.
"""

import dataclasses

import jax

from electra_jax import fields
from electra_jax.fields import AT_LEAST_0, FRACTION, declare, inside, one_of, positive
from electra_jax.platform import backends


@dataclasses.dataclass(frozen=True)
class ObjectiveConfig:
  name: str = declare('electra', 'electra | electra_15 | mlm | replace_mlm | all_tokens_mlm | '
                      "electric | cocolm | amos: a name in objectives/registry.py's table "
                      '(objectives.get refuses others, naming them)')
  mask_prob: float = declare(0.15, 'fraction of real tokens selected per example',
                             inside(0, 1, False, True))
  mask_token_prob: float = declare(0.85, 'a selected slot shows [MASK] with this probability, '
                                   'else its token', FRACTION)
  random_token_prob: float = declare(0.0, '... or a random token with this one (BERT: 0.8 / 0.1 '
                                     '= 80/10/10)', FRACTION)
  sample_without_replacement: bool = declare(False, 'False: positions drawn with replacement '
                                             '(the original)', one_of(False, True))
  gen_weight: float = declare(1.0, "weight of the generator's MLM loss", AT_LEAST_0)
  disc_weight: float = declare(50.0, "weight of the discriminator's replaced-token loss",
                               AT_LEAST_0)
  temperature: float = declare(1.0, 'generator sampling temperature', positive)
  disallow_correct: bool = declare(False, 'True: the sample can never be the original token',
                                   one_of(False, True))
  max_predictions: int = declare(
      19, 'N: prediction slots per sequence, int((mask_prob + 0.005) * max_seq_length) as the '
      'original', derived=lambda c: ((c.objective.get_ref('mask_prob') + 0.005)
                                     * c.data.get_ref('max_seq_length')).to_int())
  contrast_crop: float = declare(0.9, "COCO-LM: the crop's share of a sequence's tokens after "
                                 '[CLS], the positive view of its sequence contrastive loss (the '
                                 "paper's 90%)", inside(0, 1, False, True))
  contrast_temperature: float = declare(1.0, "COCO-LM: the contrastive loss's temperature (the "
                                        "released code's default)", positive)
  contrast_weight: float = declare(1.0, "COCO-LM: the contrastive loss's weight", AT_LEAST_0)
  mixture_temperature: float = declare(0.3, "AMOS: the straight-through Gumbel-softmax's "
                                       "temperature over the exits' mixture (the paper's 0.3)",
                                       positive)
  sampler: str = 'cdf'

  def __post_init__(self):
    fields.check_typed(self, OBJECTIVE, 'objective.')
    if self.mask_token_prob + self.random_token_prob > 1:
      raise ValueError(f'objective.mask_token_prob + random_token_prob is '
                       f'{self.mask_token_prob + self.random_token_prob}; they must add up to at '
                       'most 1')

  @classmethod
  def from_config(cls, objective_cfg, platform: str = ''):
    """The objective's config from `config.objective` for a run on `platform` ('' : JAX's
    default backend), which picks the sampler; ValueError for an unknown field or a value outside
    its range."""
    accelerator = backends.is_accelerator(platform or jax.default_backend())
    return fields.typed(cls, objective_cfg, OBJECTIVE, 'objective.',
                        sampler='gumbel' if accelerator else 'cdf')


OBJECTIVE = fields.section_of(ObjectiveConfig, doc='the pre-training objective')
