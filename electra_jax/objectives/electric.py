"""ELECTRIC (Clark et al. 2020, \"Pre-Training Transformers as Energy-Based Cloze Models\"):
the discriminator's logit corrected by a two-tower cloze generator's (model/generators.py:
TwoTower) log-probability, as in noise-contrastive estimation."""

import jax
import jax.numpy as jnp

from electra_jax.data.tokenizer import SpecialIds
from electra_jax.model import networks as model_lib
from electra_jax.objectives import common
from electra_jax.objectives import masking
from electra_jax.objectives.common import Draws, ObjectiveConfig, Objective
from electra_jax.train.metrics import ratio


def electric_loss(params, batch, rng, *, model: model_lib.Electra, cfg: ObjectiveConfig,
                  special: SpecialIds, deterministic: bool = False, draws: Draws | None = None):
  """ELECTRIC (Clark et al. 2020, "Pre-Training Transformers as Energy-Based Cloze Models").

  The generator is a two-tower cloze model q(x_t | x_not_t) run on the unmasked input and trained
  on every candidate position; the selected positions are filled with its samples; the
  discriminator's logit at every token is corrected by the noise term, as in noise-contrastive
  estimation: s_t + stop_gradient(log q(input_t)) + log(p / (1 - p)), p = mask_prob; and every
  sampled position counts as fake (also where the sample equals the original).

  Metrics: `mlm_loss` / `mlm_accuracy` are the cloze model's, over every candidate position.
  """
  draws = draws or common.draw(rng, batch, cfg, special, model.cfg.vocab_size)
  step_keys = common.keys(rng)
  gen_rng, disc_rng = step_keys.generator, step_keys.discriminator
  masked = draws.masked
  apply = common.applier(model, params, deterministic)
  ids, segments, input_mask = batch['input_ids'], batch['segment_ids'], batch['input_mask']
  length = ids.shape[1]
  every = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), ids.shape)
  logits = apply(model_lib.Electra.generator_logits, gen_rng, ids, segments, input_mask, every,
                 rows=common.decoder_rows(model, draws))
  cloze_loss, metrics = common.mlm_terms(
      logits, ids, common.candidates(batch, special).astype(jnp.float32),
      draws.counts['candidates'])

  chosen = jnp.take_along_axis(logits, masked.positions[..., None], axis=1)
  sampled = common.sample(draws, chosen, cfg, masked.target_ids)
  metrics['sampled_mlm_accuracy'] = ratio((sampled == masked.target_ids) * masked.weights,
                                          masked.weights)
  disc_ids, _ = masking.replace_tokens(ids, masked.positions, masked.weights, sampled)
  is_fake = masking.selected(masked, length)  # every sampled position, changed or not

  scores = apply(model_lib.Electra.discriminator_logits, disc_rng, disc_ids, segments, input_mask)
  log_q = jnp.take_along_axis(jax.nn.log_softmax(jax.lax.stop_gradient(logits)),
                              disc_ids[..., None], -1)[..., 0]
  corrected = scores + log_q + jnp.log(cfg.mask_prob / (1 - cfg.mask_prob))
  disc_loss, disc_metrics = common.detection(corrected, is_fake, common.real_tokens(input_mask),
                                             draws.counts['tokens'])
  loss = cfg.gen_weight * cloze_loss + cfg.disc_weight * disc_loss
  return loss, {'loss': ratio(loss, 1.0), **metrics, **disc_metrics}


OBJECTIVES = (
    Objective('electric', electric_loss, {'generator': 'two_tower',
                                          'untied_generator_embeddings': False}),
)
