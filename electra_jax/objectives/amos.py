"""AMOS (Meng et al. 2022, "Pretraining Text Encoders with Adversarial Mixture of Training Signal
Generators"): one generator at the main width with several exits trains the discriminator on a
mixture of their replacements, the mixture learning to make them harder.

    L = sum over exits of L_MLM(exit) + disc_weight * L_RTD

At each masked slot the exits' logits (one shared MLM head) are mixed by the softmax of a logit
per exit, sample_logits = sum_k stop_gradient(logits_k) mix_k; a straight-through Gumbel-softmax
draws a one-hot sample of it (hard, `mixture_temperature` 0.3); the discriminator reads the
sample as one-hot @ word table at the slot, and the sample's gradient is reversed (x -1) on its
way back, so the mixture (and the generator's features under it) learns to RAISE the
discriminator's loss. Each exit's MLM loss trains only the layers since the previous exit.

What the code chooses where the released model file leaves it open (docs/objectives.md):
  - the exits: after round(G / 2), round(3 G / 4) and G of the generator's G = round(2 L / 3)
    layers (at least 2) of the main network's L: Base (12) 4, 6, 8 as the paper; Large 8, 12,
    16; the generator at the main width and without dropout, sharing the token embeddings;
  - the exits' MLM losses summed, each with gen_weight (1);
  - `mlm_loss` / `mlm_accuracy` are the last exit's (the generator an HF export holds),
    `shallow_mlm_loss` the first's, `mixture_depth` the mixture's mean exit depth in layers;
  - a position drawn by two slots (masking with replacement) shows the integer mean of their
    samples, as every objective here; each slot's gradient is scaled by its share of it.
"""

import jax
import jax.numpy as jnp

from electra_jax.data.tokenizer import SpecialIds
from electra_jax.model import networks as model_lib
from electra_jax.objectives import common
from electra_jax.objectives import masking
from electra_jax.objectives.common import Draws, ObjectiveConfig, Objective
from electra_jax.train.metrics import Metric, ratio


def straight_through(logits, noise, temperature: float, reversal: float = -1.0):
  """The straight-through Gumbel-softmax: (the sample [..] int32, argmax of logits + noise; its
  one-hot [.., V] whose gradient is `reversal` x that of softmax((logits + noise) / T))."""
  perturbed = logits + noise
  soft = jax.nn.softmax(perturbed / temperature, axis=-1)
  index = jnp.argmax(perturbed, -1).astype(jnp.int32)
  hard = (jnp.arange(logits.shape[-1]) == index[..., None]).astype(soft.dtype)
  one_hot = hard + (soft - jax.lax.stop_gradient(soft))  # the value: exactly the one-hot
  return index, reversal * one_hot + (1.0 - reversal) * jax.lax.stop_gradient(one_hot)


def generator_depth(num_layers: int) -> int:
  """The generator's depth for a main network of `num_layers`: two thirds (Base's 8 of 12), at
  least 2 (two exits)."""
  return max(2, round(2 * num_layers / 3))


def amos_loss(params, batch, rng, *, model: model_lib.Electra, cfg: ObjectiveConfig,
              special: SpecialIds, deterministic: bool = False, draws: Draws | None = None,
              reversal: float = -1.0):
  """AMOS: each exit's MLM loss at the masked slots; the mixture's straight-through sample
  written into the original; the discriminator's detection loss at every real token, its
  gradient reaching the mixture times `reversal` (-1: adversarial)."""
  draws = draws or common.draw(rng, batch, cfg, special, model.cfg.vocab_size)
  step_keys = common.keys(rng)
  masked = draws.masked
  ids, segments, input_mask = batch['input_ids'], batch['segment_ids'], batch['input_mask']
  generator = common.applier(model, params, True)  # the generator runs without dropout
  exit_logits, mixture_logits = generator(
      model_lib.Electra.generator_exit_logits, step_keys.generator, masked.input_ids, segments,
      input_mask, masked.positions, rows=common.decoder_rows(model, draws))
  mlm_loss, metrics = 0.0, {}
  for k, logits in enumerate(exit_logits):
    loss_k, metrics_k = common.mlm_terms(logits, masked.target_ids, masked.weights,
                                         draws.counts['slots'])
    mlm_loss += loss_k
    if k == 0:
      metrics['shallow_mlm_loss'] = metrics_k['mlm_loss']
  metrics.update(metrics_k)  # the last exit's
  mix = jax.nn.softmax(mixture_logits, axis=-1)
  sample_logits = jnp.einsum('kbnv,bnk->bnv', jax.lax.stop_gradient(exit_logits), mix)
  assert draws.sample_seeds is not None, 'common.draw draws the Gumbel noise seeds'
  noise = masking.gumbel_noise(draws.sample_seeds, sample_logits.shape[-1])
  sampled, one_hot = straight_through(sample_logits, noise, cfg.mixture_temperature, reversal)
  weights = masked.weights
  metrics['sampled_mlm_accuracy'] = ratio((sampled == masked.target_ids) * weights, weights)
  depths = jnp.asarray(model.cfg.generator_exits, jnp.float32)
  metrics['mixture_depth'] = ratio(jnp.sum(mix * depths, -1) * weights, weights)
  disc_ids, is_replaced = masking.replace_tokens(ids, masked.positions, weights, sampled)
  shares = masking.slot_shares(masked, ids.shape[1])
  soft = (masked.positions, one_hot * shares[..., None])
  disc_logits = common.applier(model, params, deterministic)(
      model_lib.Electra.discriminator_logits, step_keys.discriminator, disc_ids, segments,
      input_mask, soft=soft)
  disc_loss, disc_metrics = common.detection(disc_logits, is_replaced,
                                             common.real_tokens(input_mask),
                                             draws.counts['tokens'])
  loss = cfg.gen_weight * mlm_loss + cfg.disc_weight * disc_loss
  return loss, {'loss': ratio(loss, 1.0), **metrics, **disc_metrics}


def _extra_flops(cfg, objective_cfg, s, n, encoder_flops):
  """The MLM head at the exits before the last (forward and backward), and the one-hot samples'
  products with the word table in the backward pass to the samples (their forward value is the
  lookup's: model/layers.py `straight_through_rows`)."""
  e, v = cfg.embedding_size, cfg.vocab_size
  head = n * (2 * cfg.hidden_size * e + 2 * e * v)
  return 3 * (len(cfg.generator_exits) - 1) * head + 2 * n * v * e


SHALLOW_MLM_LOSS = Metric('shallow_mlm_loss', 'min', "first exit's MLM loss (nats)",
                          baseline=True)
MIXTURE_DEPTH = Metric('mixture_depth', title="mixture's mean exit depth (layers)")

OBJECTIVES = (
    Objective('amos', amos_loss,
              {'generator': 'separate', 'generator_hidden_fraction': 1.0,
               'generator_layers_fraction': lambda m: generator_depth(m.num_layers) / m.num_layers,
               'untied_generator_embeddings': False, 'amos_exits': True},
              extra_flops=_extra_flops,
              metrics=(common.LOSS, common.MLM_LOSS, common.DISC_LOSS, SHALLOW_MLM_LOSS,
                       MIXTURE_DEPTH, common.DISC_AUC, common.MLM_ACCURACY, common.REPLACED,
                       common.SAMPLED_ACCURACY, *common.DISC_COUNTS),
              shown=('loss', 'mlm_loss', 'shallow_mlm_loss', 'disc_loss', 'mixture_depth',
                     'disc_auc'),
              summary=(common.DETECTION_SUMMARY, common.GENERATOR_SUMMARY,
                       "first exit's loss {shallow_mlm_loss:.3f} nats, mixture depth "
                       '{mixture_depth:.2f} layers')),
)
