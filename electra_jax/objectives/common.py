"""What every pre-training objective shares: its view of `config.objective`, the draws of a
step (masking, the sampler's numbers, the loss denominators over the global batch), the MLM
and detection terms, the generator's pass and sample, and `Objective`, the entry of one in
registry.py's table. Pure functions (params, batch, rng) -> (loss, metric sums); no I/O.

Metrics are returned as sums (numerator and denominator per name, plus score histograms) so they
add up across steps and devices and become ratios only when they are read (`metrics.summarize`).
"""

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from electra_jax.data.tokenizer import SpecialIds
from electra_jax.model import networks as model_lib
from electra_jax.objectives.config import ObjectiveConfig
from electra_jax.objectives import masking
from electra_jax.train.metrics import HISTOGRAMS, Metric, ratio

AUC_BINS = 4096  # histogram bins of discriminator logits in [-AUC_RANGE, AUC_RANGE]
AUC_RANGE = 16.0


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
  # [B, N, 2] uint32 per slot: the seeds of its Gumbel noise (the sampler 'gumbel''s draw; AMOS's
  #   straight-through sample on every platform)
  sample_seeds: jax.Array | None
  counts: dict  # {name: scalar}: denominators of the loss terms over the GLOBAL batch
  rows: jax.Array | None = None  # [V] bool: the vocabulary's tokens present in the global batch
  crop_uniform: jax.Array | None = None  # [B] in [0, 1): where each sequence's crop starts
  #   (COCO-LM's contrastive view)

  def rowwise(self) -> tuple:
    """The arrays with a row per example, which a step split into microbatches splits too."""
    return self.masked, self.sample_uniform, self.sample_seeds, self.crop_uniform

  def with_rowwise(self, rowwise: tuple) -> 'Draws':
    """These draws with `rowwise()`'s arrays replaced (a microbatch's rows of them)."""
    masked, uniform, seeds, crop = rowwise
    return self._replace(masked=masked, sample_uniform=uniform, sample_seeds=seeds,
                         crop_uniform=crop)


def candidates(batch, special: SpecialIds) -> jax.Array:
  """[B, L] bool: real tokens other than [PAD], [CLS], [SEP]."""
  ids, keep = batch['input_ids'], batch['input_mask'] > 0
  for i in (special.pad, special.cls, special.sep):
    keep &= ids != i
  return keep


class Keys(NamedTuple):
  """A step's key split once, by purpose: masking, the sampler's numbers, and the generator's and
  the discriminator's dropout. Every draw of an objective takes its key from here, so none is
  tied to another's (and the order, which fixes every run's numbers, is written once)."""
  mask: jax.Array
  sample: jax.Array
  generator: jax.Array
  discriminator: jax.Array


def keys(rng) -> Keys:
  return Keys(*jax.random.split(rng, 4))


def real_tokens(input_mask) -> jax.Array:
  """[B, L] float32: 1 on the tokens of a row, 0 on its padding (a row's `input_mask` numbers its
  sequences 1, 2, ... where it packs several: data/examples.py's DocumentPacker)."""
  return (input_mask > 0).astype(jnp.float32)


def draw(rng, batch, cfg: ObjectiveConfig, special: SpecialIds, vocab_size: int) -> Draws:
  """Masking (reference section 2), the sampling numbers and the loss denominators."""
  step_keys = keys(rng)
  masked = masking.mask_tokens(
      step_keys.mask, batch['input_ids'], batch['input_mask'], mask_prob=cfg.mask_prob,
      max_predictions=cfg.max_predictions, mask_id=special.mask,
      special_ids=(special.pad, special.cls, special.sep), mask_token_prob=cfg.mask_token_prob,
      with_replacement=not cfg.sample_without_replacement,
      random_token_prob=cfg.random_token_prob, vocab_size=vocab_size)
  tokens = real_tokens(batch['input_mask'])
  counts = {'slots': jnp.sum(masked.weights), 'tokens': jnp.sum(tokens),
            'selected': jnp.sum(tokens * masking.selected(masked, tokens.shape[1])),
            'candidates': jnp.sum(candidates(batch, special).astype(jnp.float32)),
            'sequences': jnp.sum((tokens[:, 0] > 0).astype(jnp.float32))}
  seeds = jax.random.bits(jax.random.fold_in(step_keys.sample, 1), masked.weights.shape + (2,),
                          jnp.uint32)
  uniform = None  # the inverse-CDF sampler's numbers
  if cfg.sampler != 'gumbel':
    uniform = jax.random.uniform(step_keys.sample, masked.weights.shape, jnp.float32)
  rows = jnp.zeros((vocab_size,), jnp.bool_).at[batch['input_ids'].reshape(-1)].set(True)
  crop = jax.random.uniform(jax.random.fold_in(step_keys.sample, 2), tokens.shape[:1])
  return Draws(masked, uniform, seeds, counts, rows, crop)


def applier(model, params, deterministic):
  return lambda method, r, *args, **kw: model.apply({'params': params}, *args, deterministic,
                                                    method=method, rngs={'dropout': r}, **kw)


def decoder_rows(model, draws: Draws):
  """The word-table rows the generator's decoder updates: all (None), or with
  model.decoder_rows='batch' those of the global batch's tokens."""
  return draws.rows if model.cfg.decoder_rows == 'batch' else None


# The metrics of the terms below, and the summary line's parts that read them: each objective lists
# those it reports in its `Objective` entry (a metric of its own is declared in its module).
LOSS = Metric('loss', 'min', 'total loss')
MLM_LOSS = Metric('mlm_loss', 'min', 'generator MLM loss (nats)', baseline=True,
                  column='held-out MLM loss')
MLM_ACCURACY = Metric('mlm_accuracy', 'max', 'generator accuracy')
SAMPLED_ACCURACY = Metric('sampled_mlm_accuracy', 'max')  # the generator's sample is the original
DISC_LOSS = Metric('disc_loss', 'min', 'discriminator loss')
DISC_AUC = Metric('disc_auc', 'max', 'discriminator AUC', column='disc AUC')
DISC_COUNTS = (Metric('disc_accuracy', 'max'), Metric('disc_precision', 'max'),
               Metric('disc_recall', 'max'))
REPLACED = Metric('replaced_fraction', title='replaced tokens')
GENERATOR_SUMMARY = ('{generator} loss {mlm_loss:.3f} nats vs unigram baseline {baseline:.3f}, '
                     'accuracy {mlm_accuracy:.3f}')
DETECTION_SUMMARY = 'discriminator AUC {disc_auc:.3f} (chance 0.5), accuracy {disc_accuracy:.3f}'
# ELECTRA's: the generator's and the detection's, in the order of curves.png's panels
DETECTION_METRICS = (LOSS, MLM_LOSS, DISC_LOSS, DISC_AUC, MLM_ACCURACY, REPLACED, SAMPLED_ACCURACY,
                     *DISC_COUNTS)
DETECTION_SHOWN = ('loss', 'mlm_loss', 'disc_loss', 'mlm_accuracy', 'disc_auc')


def mlm_terms(logits, targets, weights, count, prefix='mlm'):
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


def sample(draws: Draws, logits, cfg: ObjectiveConfig, targets):
  """The generator's draw at every slot, by the run's sampler."""
  disallow = targets if cfg.disallow_correct else None
  if cfg.sampler == 'gumbel':
    assert draws.sample_seeds is not None, 'the gumbel sampler draws seeds (draw_inputs)'
    return masking.sample_gumbel(draws.sample_seeds, logits, temperature=cfg.temperature,
                                 disallow=disallow)
  assert draws.sample_uniform is not None, 'the inverse-CDF sampler draws numbers (draw_inputs)'
  return masking.sample_with(draws.sample_uniform, logits, temperature=cfg.temperature,
                             disallow=disallow)


def generate(apply, rng, batch, draws: Draws, cfg: ObjectiveConfig, rows=None):
  """The generator's MLM at the masked positions, and its samples written into the original."""
  masked = draws.masked
  gen_logits = apply(model_lib.Electra.generator_logits, rng, masked.input_ids,
                     batch['segment_ids'], batch['input_mask'], masked.positions, rows=rows)
  mlm_loss, metrics = mlm_terms(gen_logits, masked.target_ids, masked.weights,
                                 draws.counts['slots'])
  # Sample replacements (no gradient flows through the sample) and write them into the original.
  sampled = sample(draws, gen_logits, cfg, masked.target_ids)
  metrics['sampled_mlm_accuracy'] = ratio((sampled == masked.target_ids) * masked.weights,
                                          masked.weights)
  disc_ids, is_replaced = masking.replace_tokens(batch['input_ids'], masked.positions,
                                                 masked.weights, sampled)
  return mlm_loss, metrics, disc_ids, is_replaced


def detection(disc_logits, is_replaced, tokens, count):
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
      'disc_auc' + HISTOGRAMS: logit_histograms(disc_logits, labels, tokens),
  }


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
  its model fields, pretraining/step_flops.py its heads' FLOPs, the compare tool its runs, and
  the logs, keep_best, the summary and the comparison its metrics)."""
  name: str
  loss: Callable  # (params, batch, rng, *, model, cfg, special, deterministic, draws) ->
  #                 (loss, metric sums)
  model: dict = dataclasses.field(default_factory=dict)  # model fields it needs (fit_model_config)
  head_flops: Callable = detection_head_flops  # (H, E, V, seq_len, predictions) -> forward
  #   matmul FLOPs per example of its heads on the main network
  generator: bool = True  # a generator network runs beside the main one (BERT MLM: the main
  #   network is the generator)
  variants: dict = dataclasses.field(default_factory=dict)  # the compare tool's further runs:
  #   {run name: {'model.<field>' or 'objective.<field>': value}}
  metrics: tuple = DETECTION_METRICS  # what it reports (Metric), curves.png's panels in order
  shown: tuple = DETECTION_SHOWN  # the metrics on its progress and evaluation lines, in order
  summary: tuple = (DETECTION_SUMMARY, GENERATOR_SUMMARY)  # the summary line's parts: formats of
  #   the held-out values, `generator` (the generator's shape) and `baseline` (the unigram loss)
  extra_flops: Callable | None = None  # (model cfg, objective cfg, seq_len, predictions,
  #   encoder_flops) -> the matmul FLOPs per example its step adds to 3 x the forward passes
  #   above (further passes: COCO-LM's crop and its generator's pass without dropout)

  @property
  def detects(self) -> bool:
    """Its loss trains the discriminator's detection head (a detection loss among its metrics):
    what zero-shot prompting and the prompted kind read."""
    return any(m.name == 'disc_loss' for m in self.metrics)
