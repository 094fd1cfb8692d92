"""Pre-training objectives: pure functions (params, batch, rng) -> (loss, metrics). No I/O.

Metrics are returned as sums (numerator and denominator per name, plus score histograms) so they
add up across steps and devices and become ratios only when they are read (`metrics.summarize`).
"""

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import optax

from electra_jax import masking
from electra_jax import model as model_lib
from electra_jax.tokenizer import SpecialIds

AUC_BINS = 4096  # histogram bins of discriminator logits in [-AUC_RANGE, AUC_RANGE]
AUC_RANGE = 16.0


@dataclasses.dataclass(frozen=True)
class ObjectiveConfig:
  mask_prob: float = 0.15
  max_predictions: int = 19
  mask_token_prob: float = 0.85
  sample_without_replacement: bool = False
  gen_weight: float = 1.0
  disc_weight: float = 50.0
  temperature: float = 1.0
  disallow_correct: bool = False

  @classmethod
  def from_config(cls, objective_cfg) -> 'ObjectiveConfig':
    fields = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in objective_cfg.items() if k in fields})


def ratio(numerator, denominator):
  return jnp.stack([jnp.sum(numerator), jnp.sum(denominator)]).astype(jnp.float32)


def logit_histograms(logits, labels, weights):
  """Counts of positive and negative tokens per logit bin (for AUC at read time)."""
  scaled = (jnp.clip(logits, -AUC_RANGE, AUC_RANGE) + AUC_RANGE) / (2 * AUC_RANGE)
  bins = jnp.clip((scaled * AUC_BINS).astype(jnp.int32), 0, AUC_BINS - 1).reshape(-1)
  w, y = weights.reshape(-1), labels.reshape(-1)
  pos = jnp.zeros(AUC_BINS, jnp.float32).at[bins].add(w * y)
  neg = jnp.zeros(AUC_BINS, jnp.float32).at[bins].add(w * (1 - y))
  return jnp.stack([pos, neg])


def electra_loss(params, batch, rng, *, model: model_lib.Electra, cfg: ObjectiveConfig,
                 special: SpecialIds, deterministic: bool = False):
  """Replaced token detection: mask -> generator -> sample -> replace -> discriminator."""
  mask_rng, sample_rng, gen_rng, disc_rng = jax.random.split(rng, 4)
  ids, segments, input_mask = batch['input_ids'], batch['segment_ids'], batch['input_mask']
  masked = masking.mask_tokens(
      mask_rng, ids, input_mask, mask_prob=cfg.mask_prob, max_predictions=cfg.max_predictions,
      mask_id=special.mask, special_ids=(special.pad, special.cls, special.sep),
      mask_token_prob=cfg.mask_token_prob, with_replacement=not cfg.sample_without_replacement)
  apply = lambda method, r, *args: model.apply({'params': params}, *args, deterministic,
                                               method=method, rngs={'dropout': r})

  # Generator: MLM at the masked positions only.
  gen_logits = apply(model_lib.Electra.generator_logits, gen_rng, masked.input_ids, segments,
                     input_mask, masked.positions)
  nll = optax.softmax_cross_entropy_with_integer_labels(gen_logits, masked.target_ids)
  w = masked.weights
  mlm_loss = jnp.sum(nll * w) / (jnp.sum(w) + 1e-6)

  # Sample replacements (no gradient flows through the sample) and write them into the original.
  sampled = masking.gumbel_sample(
      sample_rng, gen_logits, temperature=cfg.temperature,
      disallow=masked.target_ids if cfg.disallow_correct else None)
  disc_ids, is_replaced = masking.replace_tokens(ids, masked.positions, w, sampled)

  # Discriminator: is each real token original or replaced?
  disc_logits = apply(model_lib.Electra.discriminator_logits, disc_rng, disc_ids, segments,
                      input_mask)
  labels = is_replaced.astype(jnp.float32)
  tokens = input_mask.astype(jnp.float32)
  disc_losses = optax.sigmoid_binary_cross_entropy(disc_logits, labels)
  disc_loss = jnp.sum(disc_losses * tokens) / (jnp.sum(tokens) + 1e-6)

  loss = cfg.gen_weight * mlm_loss + cfg.disc_weight * disc_loss

  # argmax accuracy without a (slow) argmax over the vocabulary: the target is strictly the top
  is_target = jnp.arange(gen_logits.shape[-1]) == masked.target_ids[..., None]
  target_logit = jnp.sum(jnp.where(is_target, gen_logits, 0.0), -1)
  mlm_correct = (target_logit > jnp.where(is_target, -jnp.inf, gen_logits).max(-1))
  mlm_correct = mlm_correct.astype(jnp.float32)
  preds = (disc_logits > 0).astype(jnp.float32)
  correct = (preds == labels).astype(jnp.float32)
  metrics = {
      'loss': ratio(loss, 1.0),
      'mlm_loss': ratio(nll * w, w),
      'mlm_accuracy': ratio(mlm_correct * w, w),
      'sampled_mlm_accuracy': ratio((sampled == masked.target_ids) * w, w),
      'disc_loss': ratio(disc_losses * tokens, tokens),
      'disc_accuracy': ratio(correct * tokens, tokens),
      'disc_precision': ratio(correct * preds * tokens, preds * tokens),
      'disc_recall': ratio(correct * labels * tokens, labels * tokens),
      'replaced_fraction': ratio(labels * tokens, tokens),
      'auc_histogram': logit_histograms(disc_logits, labels, tokens),
  }
  return loss, metrics


def get_objective(name: str) -> Callable:
  objectives = {'electra': electra_loss}
  if name not in objectives:
    raise ValueError(f'objective.name is {name!r}; available: {", ".join(sorted(objectives))}')
  return objectives[name]
