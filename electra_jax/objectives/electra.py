"""ELECTRA's replaced token detection (reference section 2): mask -> generator -> sample ->
replace -> discriminator; and ELECTRA 15%, whose discriminator counts only the masked
positions (the paper's Table 5)."""


from electra_jax.data.tokenizer import SpecialIds
from electra_jax.model import networks as model_lib
from electra_jax.objectives import common
from electra_jax.objectives import masking
from electra_jax.objectives.common import Draws, ObjectiveConfig, Objective
from electra_jax.train.metrics import ratio


def electra_loss(params, batch, rng, *, model: model_lib.Electra, cfg: ObjectiveConfig,
                 special: SpecialIds, deterministic: bool = False, draws: Draws | None = None,
                 only_masked: bool = False):
  """Replaced token detection: mask -> generator -> sample -> replace -> discriminator.

  `only_masked` (ELECTRA 15%, the paper's Table 5): the discriminator's loss counts only the
  positions that were masked, not every token.

  Every objective takes `draws` (`draw` on the global batch, sliced to this one) when the step is
  split into microbatches, and draws them from `rng` otherwise.
  """
  draws = draws or common.draw(rng, batch, cfg, special, model.cfg.vocab_size)
  step_keys = common.keys(rng)
  gen_rng, disc_rng = step_keys.generator, step_keys.discriminator
  apply = common.applier(model, params, deterministic)
  mlm_loss, metrics, disc_ids, is_replaced = common.generate(
      apply, gen_rng, batch, draws, cfg, common.decoder_rows(model, draws))
  disc_logits = apply(model_lib.Electra.discriminator_logits, disc_rng, disc_ids,
                      batch['segment_ids'], batch['input_mask'])
  tokens = common.real_tokens(batch['input_mask'])
  if only_masked:
    tokens = tokens * masking.selected(draws.masked, tokens.shape[1])
  count = draws.counts['selected' if only_masked else 'tokens']
  disc_loss, disc_metrics = common.detection(disc_logits, is_replaced, tokens, count)
  loss = cfg.gen_weight * mlm_loss + cfg.disc_weight * disc_loss
  return loss, {'loss': ratio(loss, 1.0), **metrics, **disc_metrics}


def electra_15_loss(params, batch, rng, **kwargs):
  return electra_loss(params, batch, rng, only_masked=True, **kwargs)


OBJECTIVES = (
    Objective('electra', electra_loss, variants={
        'electra_gdes': {'model.gdes': True},
        'electra_nes': {'model.untied_generator_embeddings': True}}),
    Objective('electra_15', electra_15_loss),
)
