"""Masked language modelling, the comparisons of the paper's Table 5: BERT's MLM (the
discriminator-size network with the MLM head: the generator *is* the discriminator), Replace
MLM and All-Tokens MLM (the generator's samples in place of [MASK], the discriminator-size
network predicting the tokens with its own MLM head)."""

import jax
import jax.numpy as jnp

from electra_jax.data.tokenizer import SpecialIds
from electra_jax.model import networks as model_lib
from electra_jax.objectives import common
from electra_jax.objectives.common import Draws, ObjectiveConfig, Objective
from electra_jax.train.metrics import Metric, ratio


def mlm_loss(params, batch, rng, *, model: model_lib.Electra, cfg: ObjectiveConfig,
             special: SpecialIds, deterministic: bool = False, draws: Draws | None = None):
  """BERT's masked language modelling: the discriminator-size network (model.generator='tied')
  with the MLM head predicts the masked tokens. No generator, no detection."""
  draws = draws or common.draw(rng, batch, cfg, special, model.cfg.vocab_size)
  masked = draws.masked
  logits = common.applier(model, params, deterministic)(
      model_lib.Electra.generator_logits, common.keys(rng).generator, masked.input_ids,
      batch['segment_ids'], batch['input_mask'], masked.positions,
      rows=common.decoder_rows(model, draws))
  loss, metrics = common.mlm_terms(logits, masked.target_ids, masked.weights, draws.counts['slots'])
  return loss, {'loss': ratio(loss, 1.0), **metrics}


def replace_mlm_loss(params, batch, rng, *, model: model_lib.Electra, cfg: ObjectiveConfig,
                     special: SpecialIds, deterministic: bool = False,
                     draws: Draws | None = None):
  """Replace MLM (Table 5): masked positions show the generator's samples instead of [MASK], and
  the discriminator-size network predicts the original tokens there with its own MLM head."""
  draws = draws or common.draw(rng, batch, cfg, special, model.cfg.vocab_size)
  step_keys = common.keys(rng)
  gen_rng, main_rng = step_keys.generator, step_keys.discriminator
  masked = draws.masked
  apply = common.applier(model, params, deterministic)
  gen_loss, metrics, main_ids, _ = common.generate(apply, gen_rng, batch, draws, cfg,
                                                   common.decoder_rows(model, draws))
  logits, _ = apply(model_lib.Electra.discriminator_mlm_logits, main_rng, main_ids,
                    batch['segment_ids'], batch['input_mask'], masked.positions)
  main_loss, main_metrics = common.mlm_terms(logits, masked.target_ids, masked.weights,
                                             draws.counts['slots'], 'main_mlm')
  loss = cfg.gen_weight * gen_loss + main_loss
  return loss, {'loss': ratio(loss, 1.0), **metrics, **main_metrics}


def all_tokens_mlm_loss(params, batch, rng, *, model: model_lib.Electra, cfg: ObjectiveConfig,
                        special: SpecialIds, deterministic: bool = False,
                        draws: Draws | None = None):
  """All-Tokens MLM (Table 5): Replace MLM predicting every token, with the copy mechanism

      p(x_t) = D_t [x_t == input_t] + (1 - D_t) softmax(h_t)[x_t],   D_t = sigmoid(-detection logit)

  where D_t, the probability of copying the input token, comes from the detection head."""
  draws = draws or common.draw(rng, batch, cfg, special, model.cfg.vocab_size)
  step_keys = common.keys(rng)
  gen_rng, main_rng = step_keys.generator, step_keys.discriminator
  apply = common.applier(model, params, deterministic)
  gen_loss, metrics, main_ids, is_replaced = common.generate(
      apply, gen_rng, batch, draws, cfg, common.decoder_rows(model, draws))
  ids = batch['input_ids']
  every = jnp.broadcast_to(jnp.arange(ids.shape[1], dtype=jnp.int32), ids.shape)
  logits, detect = apply(model_lib.Electra.discriminator_mlm_logits, main_rng, main_ids,
                         batch['segment_ids'], batch['input_mask'], every)
  log_softmax = jax.nn.log_softmax(logits)
  log_p_target = jnp.take_along_axis(log_softmax, ids[..., None], -1)[..., 0]
  copy = main_ids == ids  # the input shows the right token: copying it is correct
  log_copy = jax.nn.log_sigmoid(-detect)  # log D
  log_generate = jax.nn.log_sigmoid(detect)  # log (1 - D)
  log_p = jnp.where(copy, jnp.logaddexp(log_copy, log_generate + log_p_target),
                    log_generate + log_p_target)
  tokens = common.real_tokens(batch['input_mask'])
  main_loss = -jnp.sum(log_p * tokens) / (draws.counts['tokens'] + 1e-6)
  replaced = is_replaced.astype(jnp.float32) * tokens
  loss = cfg.gen_weight * gen_loss + main_loss
  return loss, {'loss': ratio(loss, 1.0), **metrics,
                'all_tokens_loss': ratio(-log_p * tokens, tokens),
                'all_tokens_replaced_loss': ratio(-log_p * replaced, replaced),
                'copy_probability': ratio(jnp.exp(log_copy) * tokens, tokens)}


MAIN_MLM_LOSS = Metric('main_mlm_loss', 'min', 'main MLM loss (nats)', baseline=True,
                       column='main MLM / all-tokens loss')
MAIN_MLM_ACCURACY = Metric('main_mlm_accuracy', 'max', 'main MLM accuracy')
ALL_TOKENS_LOSS = Metric('all_tokens_loss', 'min', 'all-tokens MLM loss (nats)', baseline=True,
                         column='main MLM / all-tokens loss')
ALL_TOKENS_REPLACED_LOSS = Metric('all_tokens_replaced_loss', 'min')  # at the replaced tokens
COPY_PROBABILITY = Metric('copy_probability', title='copy probability')  # D_t, mean over tokens

OBJECTIVES = (
    Objective('mlm', mlm_loss, {'generator': 'tied', 'untied_generator_embeddings': False},
              head_flops=lambda h, e, v, s, n: common.mlm_head_flops(h, e, v, n),
              generator=False,
              metrics=(common.LOSS, common.MLM_LOSS, common.MLM_ACCURACY),
              shown=('loss', 'mlm_loss', 'mlm_accuracy'), summary=(common.GENERATOR_SUMMARY,),
              variants={'mlm_30': {'objective.mask_prob': 0.3}}),  # ModernBERT's masking rate
    Objective('replace_mlm', replace_mlm_loss, {'discriminator_mlm': True},
              head_flops=lambda h, e, v, s, n: common.mlm_head_flops(h, e, v, n),
              metrics=(common.LOSS, common.MLM_LOSS, MAIN_MLM_LOSS, common.MLM_ACCURACY,
                       MAIN_MLM_ACCURACY, common.SAMPLED_ACCURACY),
              shown=('loss', 'mlm_loss', 'main_mlm_loss', 'mlm_accuracy'),
              summary=(common.GENERATOR_SUMMARY,
                       'main MLM loss {main_mlm_loss:.3f} nats vs unigram baseline '
                       '{baseline:.3f}, accuracy {main_mlm_accuracy:.3f}')),
    Objective('all_tokens_mlm', all_tokens_mlm_loss, {'discriminator_mlm': True},
              head_flops=lambda h, e, v, s, n: (common.mlm_head_flops(h, e, v, s)
                                                + common.detection_head_flops(h, e, v, s, n)),
              metrics=(common.LOSS, common.MLM_LOSS, ALL_TOKENS_LOSS, common.MLM_ACCURACY,
                       COPY_PROBABILITY, common.SAMPLED_ACCURACY, ALL_TOKENS_REPLACED_LOSS),
              shown=('loss', 'mlm_loss', 'all_tokens_loss', 'mlm_accuracy'),
              summary=(common.GENERATOR_SUMMARY,
                       'all-tokens MLM loss {all_tokens_loss:.3f} nats')),
)
