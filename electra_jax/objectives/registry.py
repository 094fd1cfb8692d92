"""Pre-training objectives: pure functions (params, batch, rng) -> (loss, metrics). No I/O.

Metrics are returned as sums (numerator and denominator per name, plus score histograms) so they
add up across steps and devices and become ratios only when they are read (`metrics.summarize`).
"""

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from electra_jax.config import fields as fields_lib
from electra_jax.config import pretraining as config_lib
from electra_jax.data.tokenizer import SpecialIds
from electra_jax.model import attention as attention_lib
from electra_jax.model import electra as model_lib
from electra_jax.objectives import masking
from electra_jax.objectives.metrics import ratio

AUC_BINS = 4096  # histogram bins of discriminator logits in [-AUC_RANGE, AUC_RANGE]
AUC_RANGE = 16.0


class _ObjectiveConfigBase:
  """The objective's view of `config.objective` (electra_jax/config/pretraining.py declares each field), plus
  `sampler`, the generator's draw: 'cdf' (masking.sample_with) on CPUs, 'gumbel'
  (masking.sample_gumbel) on GPUs and TPUs: the same distribution, each the faster there."""

  @classmethod
  def from_config(cls, objective_cfg, platform: str = ''):
    """The objective's view of `config.objective` for a run on `platform` ('' : JAX's default
    backend), which picks the sampler; ValueError for an unknown field or a value outside its
    range."""
    values = dict(objective_cfg.items())
    fields_lib.check(config_lib.OBJECTIVE, values, 'objective', prefix='objective.')
    accelerator = (platform or jax.default_backend()) in attention_lib.ACCELERATORS
    return cls(**values, sampler='gumbel' if accelerator else 'cdf')


ObjectiveConfig = dataclasses.make_dataclass(
    'ObjectiveConfig', fields_lib.view_fields(config_lib.CONFIG, 'objective')
    + [('sampler', str, dataclasses.field(default='cdf'))],
    bases=(_ObjectiveConfigBase,), frozen=True)
ObjectiveConfig.__module__ = __name__


def logit_histograms(logits, labels, weights):
  """Counts of positive and negative tokens per logit bin (for AUC at read time)."""
  scaled = (jnp.clip(logits, -AUC_RANGE, AUC_RANGE) + AUC_RANGE) / (2 * AUC_RANGE)
  bins = jnp.clip((scaled * AUC_BINS).astype(jnp.int32), 0, AUC_BINS - 1).reshape(-1)
  w, y = weights.reshape(-1), labels.reshape(-1)
  pos = jnp.zeros(AUC_BINS, jnp.float32).at[bins].add(w * y)
  neg = jnp.zeros(AUC_BINS, jnp.float32).at[bins].add(w * (1 - y))
  return jnp.stack([pos, neg])


class Draws(NamedTuple):
  """A step's random choices that do not depend on the parameters, and the loss normalizers.

  Drawn once for the whole global batch, so that a step split into microbatches (gradient
  accumulation) masks, samples and normalizes exactly as the whole batch would."""
  masked: masking.Masked  # [B, ..] the selected slots and the generator's input
  sample_uniform: jax.Array | None  # [B, N] one number in [0, 1) per slot: the generator's draw
  #   by the inverted CDF (sampler 'cdf'; else None)
  sample_seeds: jax.Array | None  # [B, N, 2] uint32 per slot: its seeds (sampler 'gumbel'; else None)
  counts: dict  # {name: scalar}: denominators of the loss terms over the GLOBAL batch
  rows: jax.Array | None = None  # [V] bool: the vocabulary's tokens present in the global batch


def candidates(batch, special: SpecialIds) -> jax.Array:
  """[B, L] bool: real tokens other than [PAD], [CLS], [SEP]."""
  ids, keep = batch['input_ids'], batch['input_mask'] > 0
  for i in (special.pad, special.cls, special.sep):
    keep &= ids != i
  return keep


def draw(rng, batch, cfg: ObjectiveConfig, special: SpecialIds, vocab_size: int) -> Draws:
  """Masking (reference section 2), the sampling numbers and the loss denominators."""
  mask_rng, sample_rng, _, _ = jax.random.split(rng, 4)
  masked = masking.mask_tokens(
      mask_rng, batch['input_ids'], batch['input_mask'], mask_prob=cfg.mask_prob,
      max_predictions=cfg.max_predictions, mask_id=special.mask,
      special_ids=(special.pad, special.cls, special.sep), mask_token_prob=cfg.mask_token_prob,
      with_replacement=not cfg.sample_without_replacement,
      random_token_prob=cfg.random_token_prob, vocab_size=vocab_size)
  tokens = batch['input_mask'].astype(jnp.float32)
  counts = {'slots': jnp.sum(masked.weights), 'tokens': jnp.sum(tokens),
            'selected': jnp.sum(tokens * masking.selected(masked, tokens.shape[1])),
            'candidates': jnp.sum(candidates(batch, special).astype(jnp.float32))}
  uniform = seeds = None  # the sampler's numbers only
  if cfg.sampler == 'gumbel':
    seeds = jax.random.bits(jax.random.fold_in(sample_rng, 1), masked.weights.shape + (2,),
                            jnp.uint32)
  else:
    uniform = jax.random.uniform(sample_rng, masked.weights.shape, jnp.float32)
  rows = jnp.zeros((vocab_size,), jnp.bool_).at[batch['input_ids'].reshape(-1)].set(True)
  return Draws(masked, uniform, seeds, counts, rows)


def _network_rngs(rng):
  """The dropout keys of the generator's and the discriminator's passes."""
  return jax.random.split(rng, 4)[2:]


def _apply(model, params, deterministic):
  return lambda method, r, *args, **kw: model.apply({'params': params}, *args, deterministic,
                                                    method=method, rngs={'dropout': r}, **kw)


def _rows(model, draws: Draws):
  """The word-table rows the generator's decoder updates: all (None), or with
  model.decoder_rows='batch' those of the global batch's tokens."""
  return draws.rows if model.cfg.decoder_rows == 'batch' else None


def _mlm_terms(logits, targets, weights, count, prefix='mlm'):
  """Cross-entropy (its sum over the slots divided by `count`, the global number of used slots)
  and argmax accuracy at the prediction slots, as metric sums."""
  # The target's logit by selection (no gather, and in the backward no scatter: on TPUs each
  # cost a pass over the logits), shared by the cross-entropy and the accuracy.
  is_target = jnp.arange(logits.shape[-1]) == targets[..., None]
  target_logit = jnp.sum(jnp.where(is_target, logits, 0.0), -1)
  nll = jax.nn.logsumexp(logits, -1) - target_logit
  loss = jnp.sum(nll * weights) / (count + 1e-6)
  # argmax accuracy without a (slow) argmax over the vocabulary: the target is strictly the top
  correct = (target_logit > jnp.where(is_target, -jnp.inf, logits).max(-1)).astype(jnp.float32)
  return loss, {f'{prefix}_loss': ratio(nll * weights, weights),
                f'{prefix}_accuracy': ratio(correct * weights, weights)}


def _sample(draws: Draws, logits, cfg: ObjectiveConfig, targets):
  """The generator's draw at every slot, by the run's sampler."""
  disallow = targets if cfg.disallow_correct else None
  if cfg.sampler == 'gumbel':
    return masking.sample_gumbel(draws.sample_seeds, logits, temperature=cfg.temperature,
                                 disallow=disallow)
  return masking.sample_with(draws.sample_uniform, logits, temperature=cfg.temperature,
                             disallow=disallow)


def _generate(apply, rng, batch, draws: Draws, cfg: ObjectiveConfig, rows=None):
  """The generator's MLM at the masked positions, and its samples written into the original."""
  masked = draws.masked
  gen_logits = apply(model_lib.Electra.generator_logits, rng, masked.input_ids,
                     batch['segment_ids'], batch['input_mask'], masked.positions, rows=rows)
  mlm_loss, metrics = _mlm_terms(gen_logits, masked.target_ids, masked.weights,
                                 draws.counts['slots'])
  # Sample replacements (no gradient flows through the sample) and write them into the original.
  sampled = _sample(draws, gen_logits, cfg, masked.target_ids)
  metrics['sampled_mlm_accuracy'] = ratio((sampled == masked.target_ids) * masked.weights,
                                          masked.weights)
  disc_ids, is_replaced = masking.replace_tokens(batch['input_ids'], masked.positions,
                                                 masked.weights, sampled)
  return mlm_loss, metrics, disc_ids, is_replaced


def _detection(disc_logits, is_replaced, tokens, count):
  """Replaced-token-detection loss over the positions weighted by `tokens` (`count` of them in
  the global batch), and its metrics."""
  labels = is_replaced.astype(jnp.float32)
  losses = optax.sigmoid_binary_cross_entropy(disc_logits, labels)
  loss = jnp.sum(losses * tokens) / (count + 1e-6)
  preds = (disc_logits > 0).astype(jnp.float32)
  correct = (preds == labels).astype(jnp.float32)
  return loss, {
      'disc_loss': ratio(losses * tokens, tokens),
      'disc_accuracy': ratio(correct * tokens, tokens),
      'disc_precision': ratio(correct * preds * tokens, preds * tokens),
      'disc_recall': ratio(correct * labels * tokens, labels * tokens),
      'replaced_fraction': ratio(labels * tokens, tokens),
      'auc_histogram': logit_histograms(disc_logits, labels, tokens),
  }


def electra_loss(params, batch, rng, *, model: model_lib.Electra, cfg: ObjectiveConfig,
                 special: SpecialIds, deterministic: bool = False, draws: Draws | None = None,
                 only_masked: bool = False):
  """Replaced token detection: mask -> generator -> sample -> replace -> discriminator.

  `only_masked` (ELECTRA 15%, the paper's Table 5): the discriminator's loss counts only the
  positions that were masked, not every token.

  Every objective takes `draws` (`draw` on the global batch, sliced to this one) when the step is
  split into microbatches, and draws them from `rng` otherwise.
  """
  draws = draws or draw(rng, batch, cfg, special, model.cfg.vocab_size)
  gen_rng, disc_rng = _network_rngs(rng)
  apply = _apply(model, params, deterministic)
  mlm_loss, metrics, disc_ids, is_replaced = _generate(apply, gen_rng, batch, draws, cfg,
                                                       _rows(model, draws))
  disc_logits = apply(model_lib.Electra.discriminator_logits, disc_rng, disc_ids,
                      batch['segment_ids'], batch['input_mask'])
  tokens = batch['input_mask'].astype(jnp.float32)
  if only_masked:
    tokens = tokens * masking.selected(draws.masked, tokens.shape[1])
  count = draws.counts['selected' if only_masked else 'tokens']
  disc_loss, disc_metrics = _detection(disc_logits, is_replaced, tokens, count)
  loss = cfg.gen_weight * mlm_loss + cfg.disc_weight * disc_loss
  return loss, {'loss': ratio(loss, 1.0), **metrics, **disc_metrics}


def electra_15_loss(params, batch, rng, **kwargs):
  return electra_loss(params, batch, rng, only_masked=True, **kwargs)


def mlm_loss(params, batch, rng, *, model: model_lib.Electra, cfg: ObjectiveConfig,
             special: SpecialIds, deterministic: bool = False, draws: Draws | None = None):
  """BERT's masked language modelling: the discriminator-size network (model.generator='tied')
  with the MLM head predicts the masked tokens. No generator, no detection."""
  draws = draws or draw(rng, batch, cfg, special, model.cfg.vocab_size)
  masked = draws.masked
  logits = _apply(model, params, deterministic)(
      model_lib.Electra.generator_logits, _network_rngs(rng)[0], masked.input_ids,
      batch['segment_ids'], batch['input_mask'], masked.positions, rows=_rows(model, draws))
  loss, metrics = _mlm_terms(logits, masked.target_ids, masked.weights, draws.counts['slots'])
  return loss, {'loss': ratio(loss, 1.0), **metrics}


def replace_mlm_loss(params, batch, rng, *, model: model_lib.Electra, cfg: ObjectiveConfig,
                     special: SpecialIds, deterministic: bool = False,
                     draws: Draws | None = None):
  """Replace MLM (Table 5): masked positions show the generator's samples instead of [MASK], and
  the discriminator-size network predicts the original tokens there with its own MLM head."""
  draws = draws or draw(rng, batch, cfg, special, model.cfg.vocab_size)
  gen_rng, main_rng = _network_rngs(rng)
  masked = draws.masked
  apply = _apply(model, params, deterministic)
  gen_loss, metrics, main_ids, _ = _generate(apply, gen_rng, batch, draws, cfg,
                                             _rows(model, draws))
  logits, _ = apply(model_lib.Electra.discriminator_mlm_logits, main_rng, main_ids,
                    batch['segment_ids'], batch['input_mask'], masked.positions)
  main_loss, main_metrics = _mlm_terms(logits, masked.target_ids, masked.weights,
                                       draws.counts['slots'], 'main_mlm')
  loss = cfg.gen_weight * gen_loss + main_loss
  return loss, {'loss': ratio(loss, 1.0), **metrics, **main_metrics}


def all_tokens_mlm_loss(params, batch, rng, *, model: model_lib.Electra, cfg: ObjectiveConfig,
                        special: SpecialIds, deterministic: bool = False,
                        draws: Draws | None = None):
  """All-Tokens MLM (Table 5): Replace MLM predicting every token, with the copy mechanism

      p(x_t) = D_t [x_t == input_t] + (1 - D_t) softmax(h_t)[x_t],   D_t = sigmoid(-detection logit)

  where D_t, the probability of copying the input token, comes from the detection head."""
  draws = draws or draw(rng, batch, cfg, special, model.cfg.vocab_size)
  gen_rng, main_rng = _network_rngs(rng)
  apply = _apply(model, params, deterministic)
  gen_loss, metrics, main_ids, is_replaced = _generate(apply, gen_rng, batch, draws, cfg,
                                                       _rows(model, draws))
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
  tokens = batch['input_mask'].astype(jnp.float32)
  main_loss = -jnp.sum(log_p * tokens) / (draws.counts['tokens'] + 1e-6)
  replaced = is_replaced.astype(jnp.float32) * tokens
  loss = cfg.gen_weight * gen_loss + main_loss
  return loss, {'loss': ratio(loss, 1.0), **metrics,
                'all_tokens_loss': ratio(-log_p * tokens, tokens),
                'all_tokens_replaced_loss': ratio(-log_p * replaced, replaced),
                'copy_probability': ratio(jnp.exp(log_copy) * tokens, tokens)}


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
  draws = draws or draw(rng, batch, cfg, special, model.cfg.vocab_size)
  gen_rng, disc_rng = _network_rngs(rng)
  masked = draws.masked
  apply = _apply(model, params, deterministic)
  ids, segments, input_mask = batch['input_ids'], batch['segment_ids'], batch['input_mask']
  length = ids.shape[1]
  every = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), ids.shape)
  logits = apply(model_lib.Electra.generator_logits, gen_rng, ids, segments, input_mask, every,
                 rows=_rows(model, draws))
  cloze_loss, metrics = _mlm_terms(logits, ids, candidates(batch, special).astype(jnp.float32),
                                   draws.counts['candidates'])

  chosen = jnp.take_along_axis(logits, masked.positions[..., None], axis=1)
  sampled = _sample(draws, chosen, cfg, masked.target_ids)
  metrics['sampled_mlm_accuracy'] = ratio((sampled == masked.target_ids) * masked.weights,
                                          masked.weights)
  disc_ids, _ = masking.replace_tokens(ids, masked.positions, masked.weights, sampled)
  is_fake = masking.selected(masked, length)  # every sampled position, changed or not

  scores = apply(model_lib.Electra.discriminator_logits, disc_rng, disc_ids, segments, input_mask)
  log_q = jnp.take_along_axis(jax.nn.log_softmax(jax.lax.stop_gradient(logits)),
                              disc_ids[..., None], -1)[..., 0]
  corrected = scores + log_q + jnp.log(cfg.mask_prob / (1 - cfg.mask_prob))
  disc_loss, disc_metrics = _detection(corrected, is_fake, input_mask.astype(jnp.float32),
                                       draws.counts['tokens'])
  loss = cfg.gen_weight * cloze_loss + cfg.disc_weight * disc_loss
  return loss, {'loss': ratio(loss, 1.0), **metrics, **disc_metrics}


def detection_head_flops(h: int, e: int, v: int, seq_len: int, predictions: int) -> float:
  """Forward matmul FLOPs per example of the detection head (dense H -> H, then H -> 1, at every
  position)."""
  return (2 * h * h + 2 * h) * seq_len


def mlm_head_flops(h: int, e: int, v: int, positions: int) -> float:
  """Forward matmul FLOPs per example of an MLM head (dense H -> E, then the tied E -> V decoder)
  at `positions` tokens."""
  return positions * (2 * h * e + 2 * e * v)


@dataclasses.dataclass(frozen=True)
class Objective:
  """One pre-training objective: all the rest of the code asks of it (the step its loss, the run
  its model fields, hardware/flops.py its heads' FLOPs, the compare tool its runs)."""
  name: str
  loss: Callable  # (params, batch, rng, *, model, cfg, special, deterministic, draws) ->
  #                 (loss, metric sums)
  model: dict = dataclasses.field(default_factory=dict)  # model fields it needs (fit_model_config)
  head_flops: Callable = detection_head_flops  # (H, E, V, seq_len, predictions) -> forward
  #   matmul FLOPs per example of its heads on the main network
  generator: bool = True  # a generator network runs beside the main one (BERT MLM: the main
  #   network is the generator)
  variants: dict = dataclasses.field(default_factory=dict)  # the compare tool's further runs:
  #   {run name: model overrides}


# BERT MLM is the discriminator-size network with the MLM head (the generator *is* the
# discriminator); Replace / All-Tokens MLM add an MLM head to it; ELECTRIC samples from a
# two-tower cloze generator.
OBJECTIVES = {o.name: o for o in (
    Objective('electra', electra_loss, variants={
        'electra_gdes': {'gdes': True}, 'electra_nes': {'untied_generator_embeddings': True}}),
    Objective('electra_15', electra_15_loss),
    Objective('mlm', mlm_loss, {'generator': 'tied', 'untied_generator_embeddings': False},
              head_flops=lambda h, e, v, s, n: mlm_head_flops(h, e, v, n), generator=False),
    Objective('replace_mlm', replace_mlm_loss, {'discriminator_mlm': True},
              head_flops=lambda h, e, v, s, n: mlm_head_flops(h, e, v, n)),
    Objective('all_tokens_mlm', all_tokens_mlm_loss, {'discriminator_mlm': True},
              head_flops=lambda h, e, v, s, n: (mlm_head_flops(h, e, v, s)
                                                + detection_head_flops(h, e, v, s, n))),
    Objective('electric', electric_loss, {'generator': 'two_tower',
                                          'untied_generator_embeddings': False}),
)}


def register(objective: Objective):
  """Adds `objective` (a value of objective.name from then on)."""
  OBJECTIVES[objective.name] = objective


def runs() -> dict[str, tuple[str, dict]]:
  """The compare tool's runs: {run name: (objective name, model overrides)}, each objective and
  its variants."""
  out = {name: (name, {}) for name in OBJECTIVES}
  for o in OBJECTIVES.values():
    out.update({run: (o.name, overrides) for run, overrides in o.variants.items()})
  return out


def fit_model_config(config, log=print):
  """A copy of `config` with the model fields `config.objective.name` needs (logged when they
  change)."""
  get(config.objective.name)
  config = config.copy_and_resolve_references()
  for key, value in OBJECTIVES[config.objective.name].model.items():
    if config.model[key] != value:
      log(f'objective {config.objective.name}: model.{key} {config.model[key]!r} -> {value!r}')
      config.model[key] = value
  needs_head = OBJECTIVES[config.objective.name].model.get('discriminator_mlm', False)
  if config.model.discriminator_mlm and not needs_head:
    log(f'objective {config.objective.name}: model.discriminator_mlm True -> False (unused)')
    config.model.discriminator_mlm = False
  return config


def get(name: str) -> Objective:
  """The objective registered as `name`; ValueError naming the others."""
  if name not in OBJECTIVES:
    raise ValueError(f'objective.name is {name!r}; available: {", ".join(OBJECTIVES)}')
  return OBJECTIVES[name]
