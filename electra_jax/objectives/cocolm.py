"""COCO-LM (Meng et al. 2021, "COCO-LM: Correcting and Contrasting Text Sequences for Language
Model Pretraining"): a shallow full-width auxiliary MLM corrupts the input, and the main network
corrects it (corrective language modelling: a copy head and a correction head joined by the copy
mechanism) and contrasts it with a crop of the original (sequence contrastive learning).

    L = L_MLM(auxiliary) + disc_weight * L_copy + L_LM + contrast_weight * L_SCL

What the code chooses where neither the paper nor the released model files settle it
(docs/objectives.md lists them with their sources):
  - the copy head is ELECTRA's detection head (dense -> GELU -> dense(1)) with "replaced" its
    positive class, p_copy = sigmoid(-logit), where the released model has one Linear(H, 1): the
    checkpoint stays an ELECTRA discriminator (HF export, fine-tuning, zero-shot prompting);
  - the crop: [CLS], then m = floor(contrast_crop * (n - 1)) consecutive tokens of the n - 1 after
    [CLS], from a start drawn uniformly, as a sequence of its own (positions from 0);
  - the contrastive loss is SimCLR's over the 2B views of the batch (each X^MLM and its crop): a
    view's positive is its partner, its negatives the 2B - 2 other views; cosine similarity over
    `contrast_temperature`, averaged over the 2B views. Under jit on a mesh the batch is the
    GLOBAL batch (the similarity matrix spans every device); a step split into microbatches
    contrasts within each microbatch.
"""

import jax
import jax.numpy as jnp

from electra_jax.data.tokenizer import SpecialIds
from electra_jax.model import flash
from electra_jax.model import networks as model_lib
from electra_jax.objectives import common
from electra_jax.objectives import masking
from electra_jax.objectives.common import Draws, ObjectiveConfig, Objective
from electra_jax.train.metrics import Metric, ratio

_EPSILON = 1e-4  # floor(fraction * n) exact where the product is whole (float32's rounding)


BLOCK = flash.FlashOptions().block_q  # the flash kernel's query block (128): a crop batch as long
#   as a multiple of it runs the kernel, where another length falls back to the explicit einsum


def crop_length(seq_len: int, fraction: float) -> int:
  """The crops' static length: [CLS] and the longest crop of a full sequence, rounded up to a
  multiple of BLOCK where the sequences are at least that long (the rest is padding: at Base's
  512, 460 -> 512, which the estimate for v5e-8 finds 1.9x faster than the explicit attention of
  460 tokens; docs/objectives.md)."""
  length = 1 + int(fraction * (seq_len - 1) + _EPSILON)
  return min(seq_len, -(-length // BLOCK) * BLOCK) if seq_len >= BLOCK else length


def crop(batch, uniform, fraction: float, special: SpecialIds) -> dict:
  """A contiguous crop of each sequence as a batch of its own ([B, crop_length]): [CLS], then
  m = max(1, floor(fraction * (n - 1))) consecutive tokens of the n - 1 real tokens after [CLS],
  starting at 1 + floor(u * (n - m)) for the row's u of `uniform` ([B] in [0, 1)); padding
  after. A row with no real token stays empty."""
  ids, segments, mask = batch['input_ids'], batch['segment_ids'], batch['input_mask']
  length = ids.shape[1]
  n = jnp.sum(mask > 0, axis=1).astype(jnp.int32)
  after = jnp.maximum(n - 1, 1)  # the tokens after [CLS]
  m = jnp.clip(jnp.floor(fraction * after.astype(jnp.float32) + _EPSILON).astype(jnp.int32),
               1, after)
  start = 1 + jnp.minimum(jnp.floor(uniform * (after - m + 1)).astype(jnp.int32), after - m)
  j = jnp.arange(crop_length(length, fraction), dtype=jnp.int32)[None]
  source = jnp.clip(jnp.where(j == 0, 0, start[:, None] + j - 1), 0, length - 1)
  keep = (j <= m[:, None]) & (n[:, None] > 0)
  take = lambda x: jnp.take_along_axis(x, source, axis=1)
  return {'input_ids': jnp.where(keep, take(ids), special.pad),
          'segment_ids': jnp.where(keep, take(segments), 0),
          'input_mask': jnp.where(keep, take(mask), 0)}  # (a packed row's numbering kept)


def contrastive_terms(anchor, positive, weights, count, temperature: float):
  """SimCLR's loss over the 2B views (`anchor` [B, D] and `positive` [B, D]; `weights` [B]: 1 for
  a real sequence): each view's positive is its partner, its negatives every other real view;
  cosine similarity over `temperature`. The loss is the sum over the views divided by 2 x `count`
  (the global number of sequences); metrics: the loss and whether the partner is the nearest."""
  views = jnp.concatenate([anchor, positive]).astype(jnp.float32)
  views = views / jnp.maximum(jnp.linalg.norm(views, axis=-1, keepdims=True), 1e-6)
  similarity = views @ views.T / temperature
  size = views.shape[0]
  w = jnp.concatenate([weights, weights]).astype(jnp.float32)
  index = jnp.arange(size)
  partner = (index + size // 2) % size
  others = (w[None, :] > 0) & (index[:, None] != index[None, :])
  logits = jnp.where(others, similarity, -jnp.inf)
  positive_logit = similarity[index, partner]
  nll = jax.nn.logsumexp(logits, axis=-1) - positive_logit
  nearest = jnp.where(index[None, :] == partner[:, None], -jnp.inf, logits).max(-1)
  correct = (positive_logit > nearest).astype(jnp.float32)
  loss = jnp.sum(nll * w) / (2 * count + 1e-6)
  return loss, {'scl_loss': ratio(nll * w, w), 'scl_accuracy': ratio(correct * w, w)}


def corrective_log_probs(correction_logits, copy_logits, shown):
  """log p_CLM [B, N, V] at the masked slots: p(x) = 1[x = shown] p_copy + (1 - p_copy)
  softmax(correction logits)[x], with p_copy = sigmoid(-copy logit) under a stop-gradient (the
  copy head learns from L_copy alone). A distribution over the vocabulary at every slot."""
  copy_logits = jax.lax.stop_gradient(copy_logits)
  log_copy, log_generate = jax.nn.log_sigmoid(-copy_logits), jax.nn.log_sigmoid(copy_logits)
  generated = jax.nn.log_softmax(correction_logits) + log_generate[..., None]
  is_shown = jnp.arange(correction_logits.shape[-1]) == shown[..., None]
  return jnp.where(is_shown, jnp.logaddexp(generated, log_copy[..., None]), generated)


def cocolm_loss(params, batch, rng, *, model: model_lib.Electra, cfg: ObjectiveConfig,
                special: SpecialIds, deterministic: bool = False, draws: Draws | None = None):
  """COCO-LM: the auxiliary MLM (the generator: full width, shallow, sharing the embeddings)
  trained at the masked slots; replacements sampled from its pass without dropout and without
  gradient; the main network's copy loss at every real token, its corrective LM loss at the
  masked slots and the contrastive loss of each corrupted sequence with a crop of its original."""
  draws = draws or common.draw(rng, batch, cfg, special, model.cfg.vocab_size)
  step_keys = common.keys(rng)
  gen_rng, main_rng = step_keys.generator, step_keys.discriminator
  masked = draws.masked
  apply = common.applier(model, params, deterministic)
  ids, segments, input_mask = batch['input_ids'], batch['segment_ids'], batch['input_mask']
  rows = common.decoder_rows(model, draws)
  gen_args = (masked.input_ids, segments, input_mask, masked.positions)
  gen_logits = apply(model_lib.Electra.generator_logits, gen_rng, *gen_args, rows=rows)
  mlm_loss, metrics = common.mlm_terms(gen_logits, masked.target_ids, masked.weights,
                                       draws.counts['slots'])
  if not deterministic:  # the sampling pass: no dropout, no gradient
    gen_logits = common.applier(model, params, True)(model_lib.Electra.generator_logits,
                                                     gen_rng, *gen_args, rows=rows)
  sampled = common.sample(draws, jax.lax.stop_gradient(gen_logits), cfg, masked.target_ids)
  metrics['sampled_mlm_accuracy'] = ratio((sampled == masked.target_ids) * masked.weights,
                                          masked.weights)
  main_ids, is_replaced = masking.replace_tokens(ids, masked.positions, masked.weights, sampled)

  main_key, crop_key = jax.random.split(main_rng)
  copy_logits, correction_logits, anchor = apply(
      model_lib.Electra.corrective_outputs, main_key, main_ids, segments, input_mask,
      masked.positions)
  copy_loss, copy_metrics = common.detection(copy_logits, is_replaced,
                                             common.real_tokens(input_mask),
                                             draws.counts['tokens'])
  shown = jnp.take_along_axis(main_ids, masked.positions, axis=1)
  at_slots = jnp.take_along_axis(copy_logits, masked.positions, axis=1)
  lm_loss, lm_metrics = common.mlm_terms(  # log p_CLM is normalized: its cross-entropy is its NLL
      corrective_log_probs(correction_logits, at_slots, shown), masked.target_ids,
      masked.weights, draws.counts['slots'], 'clm')
  p_copy = jax.nn.sigmoid(-at_slots)
  lm_metrics['slot_copy_probability'] = ratio(p_copy * masked.weights, masked.weights)

  assert draws.crop_uniform is not None, 'common.draw draws where the crops start'
  view = crop(batch, draws.crop_uniform, cfg.contrast_crop, special)
  positive = apply(model_lib.Electra.sequence_embedding, crop_key, view['input_ids'],
                   view['segment_ids'], view['input_mask'])
  real = (input_mask[:, 0] > 0).astype(jnp.float32)
  scl_loss, scl_metrics = contrastive_terms(anchor, positive, real, draws.counts['sequences'],
                                            cfg.contrast_temperature)
  loss = (cfg.gen_weight * mlm_loss + cfg.disc_weight * copy_loss + lm_loss
          + cfg.contrast_weight * scl_loss)
  return loss, {'loss': ratio(loss, 1.0), **metrics, **copy_metrics, **lm_metrics, **scl_metrics}


def auxiliary_layers(num_layers: int, hidden_size: int) -> int:
  """The auxiliary MLM's depth: COCO-LM's 4 layers for Base (12) and Large (24), 2 for Small (12
  layers of 256): a third of the main depth at most 4 from width 768 up, a sixth below; at least
  one."""
  share = 3 if hidden_size >= 768 else 6
  return max(1, min(4, round(num_layers / share)))


def _heads_flops(h, e, v, s, n):
  """The copy head at every token, the correction head at the slots, the sequence head once."""
  correction = n * (2 * e * v + (2 * h * e if h != e else 0))
  return common.detection_head_flops(h, e, v, s, n) + correction + 2 * h * h


def _extra_flops(cfg, objective_cfg, s, n, encoder_flops):
  """The crop's pass through the main network and its sequence head (forward and backward), and
  the generator's sampling pass without dropout (forward only)."""
  crop = crop_length(s, objective_cfg.contrast_crop)
  main = encoder_flops(cfg.hidden_size, cfg.num_layers, cfg.intermediate_size,
                       cfg.embedding_size, crop) + 2 * cfg.hidden_size ** 2
  return 3 * main + cfg.generator_shape.forward_flops(cfg, s, n, encoder_flops)


CLM_LOSS = Metric('clm_loss', 'min', 'corrective LM loss (nats)', baseline=True,
                  column='corrective LM loss')
CLM_ACCURACY = Metric('clm_accuracy', 'max', 'corrective LM accuracy')
SCL_LOSS = Metric('scl_loss', 'min', 'sequence contrastive loss', column='contrastive loss')
SCL_ACCURACY = Metric('scl_accuracy', 'max', 'contrastive accuracy')
SLOT_COPY = Metric('slot_copy_probability', title='copy probability at the masked slots')

OBJECTIVES = (
    Objective('cocolm', cocolm_loss,
              {'generator': 'separate', 'generator_hidden_fraction': 1.0,
               'generator_layers_fraction': lambda m: auxiliary_layers(
                   m.num_layers, m.hidden_size) / m.num_layers,
               'untied_generator_embeddings': False, 'cocolm_heads': True},
              head_flops=_heads_flops, extra_flops=_extra_flops,
              metrics=(common.LOSS, common.MLM_LOSS, common.DISC_LOSS, CLM_LOSS, SCL_LOSS,
                       common.DISC_AUC, common.MLM_ACCURACY, CLM_ACCURACY, SCL_ACCURACY,
                       SLOT_COPY, common.REPLACED, common.SAMPLED_ACCURACY,
                       *common.DISC_COUNTS),
              shown=('loss', 'mlm_loss', 'disc_loss', 'clm_loss', 'scl_loss', 'disc_auc'),
              summary=(common.DETECTION_SUMMARY, common.GENERATOR_SUMMARY,
                       'corrective LM loss {clm_loss:.3f} nats, contrastive accuracy '
                       '{scl_accuracy:.3f}')),
)
