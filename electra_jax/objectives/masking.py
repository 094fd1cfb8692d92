"""Dynamic masking, sampling from the generator and token replacement: pure jnp, on device.

Faithful to the original `pretrain_helpers.py`:
- N = max_predictions slots per sequence; the first clip(round(mask_prob * real_tokens), 1, N)
  slots carry weight 1 (the count includes [CLS]/[SEP]), the rest weight 0 and position 0;
- slot positions are drawn uniformly over candidates ([PAD], [CLS], [SEP], [MASK] and padding
  excluded) WITH replacement, so a position can be drawn twice (drawing without replacement is a
  switch);
- a selected position shows [MASK] when any slot that drew it chose [MASK] (probability
  `mask_token_prob` per slot) and otherwise keeps its token; the original has no random-token
  replacements (`random_token_prob` > 0 adds BERT's: such a slot shows a token drawn uniformly from
  the vocabulary, so 0.8 / 0.1 is BERT's 80/10/10);
- replacement writes the generator's samples into the ORIGINAL sequence; where two slots drew the
  same position the original wrote the integer mean of their samples (its scatter divides the sum by
  the count), which is reproduced here; a position is labelled replaced only if its token changed.
"""

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp

from electra_jax.model.attention_masks import keyed_hash


class Masked(NamedTuple):
  input_ids: jax.Array  # [B, L] the generator's input: selected tokens -> [MASK] (mostly)
  positions: jax.Array  # [B, N] int32 selected positions (0 for unused slots)
  target_ids: jax.Array  # [B, N] int32 original tokens at the positions (0 for unused slots)
  weights: jax.Array  # [B, N] float32 1 for used slots


def _scatter_add(length: int, positions: jax.Array, values: jax.Array) -> jax.Array:
  """Per row: zeros[length].at[positions].add(values)."""
  return jax.vmap(lambda p, v: jnp.zeros((length,), v.dtype).at[p].add(v))(positions, values)


def mask_tokens(rng: jax.Array, input_ids: jax.Array, input_mask: jax.Array, *,
                mask_prob: float, max_predictions: int, mask_id: int,
                special_ids: Sequence[int], mask_token_prob: float = 0.85,
                with_replacement: bool = True, random_token_prob: float = 0.0,
                vocab_size: int = 0) -> Masked:
  """Selects positions to predict and hides most of them behind [MASK]."""
  batch, length = input_ids.shape
  n = max_predictions
  candidates = input_mask.astype(bool)
  for i in set(special_ids) | {mask_id}:
    candidates &= input_ids != i
  num_tokens = (input_mask > 0).sum(-1).astype(jnp.float32)
  num_to_predict = jnp.clip(jnp.round(num_tokens * mask_prob).astype(jnp.int32), 1, n)
  has_candidate = candidates.any(-1, keepdims=True)
  weights = (jnp.arange(n)[None, :] < num_to_predict[:, None]) & has_candidate

  pos_rng, mask_rng = jax.random.split(rng)
  logits = jnp.where(candidates, 0.0, -jnp.inf)
  if with_replacement:
    positions = jax.random.categorical(pos_rng, logits[:, None, :], shape=(batch, n))
  else:  # Gumbel top-k: N distinct positions (slots beyond the candidate count get weight 0)
    scores = logits + jax.random.gumbel(pos_rng, logits.shape)
    top, positions = jax.lax.top_k(scores, n)
    weights &= top > -jnp.inf
  positions = jnp.where(weights, positions, 0).astype(jnp.int32)
  target_ids = jnp.where(weights, jnp.take_along_axis(input_ids, positions, axis=1), 0)

  draw = jax.random.uniform(mask_rng, (batch, n))
  show_mask = weights & (draw < mask_token_prob)
  hidden = _scatter_add(length, positions, show_mask.astype(jnp.int32)) > 0
  masked_ids = jnp.where(hidden, mask_id, input_ids)
  if random_token_prob > 0:
    show_random = weights & (draw >= mask_token_prob) & (draw < mask_token_prob + random_token_prob)
    randomized = (_scatter_add(length, positions, show_random.astype(jnp.int32)) > 0) & ~hidden
    random_ids = jax.random.randint(jax.random.fold_in(rng, 1), (batch, length), 0, vocab_size,
                                    jnp.int32)
    masked_ids = jnp.where(randomized, random_ids, masked_ids)
  return Masked(masked_ids, positions, target_ids.astype(jnp.int32), weights.astype(jnp.float32))


def _first_above(cumulative: jax.Array, value: jax.Array, mass: jax.Array) -> jax.Array:
  """Per row, the first index whose cumulative mass exceeds `value`; where rounding leaves none,
  the last index with positive mass (an index with zero mass is never returned)."""
  count = jnp.sum(cumulative <= value[..., None], -1)
  index = jnp.arange(mass.shape[-1])
  last_positive = jnp.max(jnp.where(mass > 0, index, 0), -1)
  return jnp.minimum(count, last_positive)


def sample(rng: jax.Array, logits: jax.Array, *, temperature: float = 1.0,
           disallow: jax.Array | None = None, block: int = 128) -> jax.Array:
  """One draw from softmax(logits / T) per row (see `sample_with`)."""
  return sample_with(jax.random.uniform(rng, logits.shape[:-1], jnp.float32), logits,
                     temperature=temperature, disallow=disallow, block=block)


def sample_gumbel(seeds: jax.Array, logits: jax.Array, *, temperature: float = 1.0,
                  disallow: jax.Array | None = None) -> jax.Array:
  """One draw from softmax(logits / T) per row by the Gumbel-max trick, as the original: the
  argmax of logits / T plus Gumbel noise, whose value at entry v of a row is a counter-based hash
  of v and the row's two seed words (`seeds`: [.., 2] uint32, drawn per slot).

  One fused pass over the logits and one reduction: on TPUs far cheaper than `sample_with`, whose
  pad to whole blocks, relayout and block sums each cost more than a pass (XLA's cost model;
  docs/measured.md); on CPUs its two logarithms per entry make it slower than `sample_with`, so
  CPUs invert the CDF. Float32 under stop_gradient;
  `disallow` removes one token per row; an entry of probability zero is never drawn.
  """
  logits = jax.lax.stop_gradient(logits).astype(jnp.float32) / temperature
  vocab = logits.shape[-1]
  if disallow is not None:
    logits = jnp.where(jnp.arange(vocab) == disallow[..., None], -jnp.inf, logits)
  return jnp.argmax(logits + gumbel_noise(seeds, vocab), -1).astype(jnp.int32)


def gumbel_noise(seeds: jax.Array, vocab: int) -> jax.Array:
  """[.., vocab] float32 standard Gumbel noise, entry v of a row a counter-based hash of v and the
  row's two seed words (`seeds`: [.., 2] uint32)."""
  seeds = seeds.astype(jnp.uint32)
  index = jax.lax.broadcasted_iota(jnp.uint32, seeds.shape[:-1] + (vocab,), seeds.ndim - 1)
  bits = keyed_hash((seeds[..., 0:1], seeds[..., 1:2]), index)
  # 23 bits in (0, 1), both ends excluded in float32 (2^-24 ... 1 - 2^-24): the noise stays finite
  uniform = (bits >> 9).astype(jnp.float32) * 2.0 ** -23 + 2.0 ** -24
  return -jnp.log(-jnp.log(uniform))


def sample_with(uniform: jax.Array, logits: jax.Array, *, temperature: float = 1.0,
                disallow: jax.Array | None = None, block: int = 128) -> jax.Array:
  """One draw from softmax(logits / T) per row, by inverting its cumulative distribution at
  `uniform` ([..] numbers in [0, 1), one per row).

  The original draws with the Gumbel-max trick, which needs a uniform number per vocabulary entry
  (31K per slot): on the CPU backend generating them cost more than the generator's forward pass.
  Inverting the CDF draws from the same distribution with one uniform number per row, in two
  levels (blocks of `block` entries, then the entry inside the chosen block) so the cumulative sums
  stay short. Runs in float32 under stop_gradient; `disallow` ([..] int ids) removes one token per
  row; an entry of probability zero is never drawn.
  """
  logits = jax.lax.stop_gradient(logits).astype(jnp.float32) / temperature
  vocab = logits.shape[-1]
  if disallow is not None:
    logits = jnp.where(jnp.arange(vocab) == disallow[..., None], -jnp.inf, logits)
  weights = jnp.exp(logits - jnp.max(logits, -1, keepdims=True))  # unnormalized probabilities
  padded = -(-vocab // block) * block
  weights = jnp.pad(weights, [(0, 0)] * (weights.ndim - 1) + [(0, padded - vocab)])
  blocks = weights.reshape(weights.shape[:-1] + (padded // block, block))
  block_mass = jnp.sum(blocks, -1)
  block_cdf = jnp.cumsum(block_mass, -1)
  u = uniform * block_cdf[..., -1]
  b = _first_above(block_cdf, u, block_mass)
  before = jnp.where(b > 0, jnp.take_along_axis(block_cdf, jnp.maximum(b - 1, 0)[..., None],
                                                -1)[..., 0], 0.0)
  inner = jnp.take_along_axis(blocks, b[..., None, None], -2)[..., 0, :]
  j = _first_above(jnp.cumsum(inner, -1), u - before, inner)
  return (b * block + j).astype(jnp.int32)


def replace_tokens(input_ids: jax.Array, positions: jax.Array, weights: jax.Array,
                   sampled_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Writes samples into the original sequence -> (discriminator input, is_replaced labels)."""
  length = input_ids.shape[1]
  used = weights > 0
  count = _scatter_add(length, positions, used.astype(jnp.int32))
  total = _scatter_add(length, positions, jnp.where(used, sampled_ids, 0))
  written = count > 0
  new_ids = jnp.where(written, total // jnp.maximum(count, 1), input_ids)
  return new_ids, (written & (new_ids != input_ids))


def slot_shares(masked: Masked, length: int) -> jax.Array:
  """[B, N] float32: each used slot's share of its position, 1 / the used slots that drew it (a
  position drawn twice shows the integer mean of its samples: `replace_tokens`); 0 elsewhere."""
  count = _scatter_add(length, masked.positions, masked.weights)
  return masked.weights / jnp.maximum(jnp.take_along_axis(count, masked.positions, axis=1), 1.0)


def selected(masked: Masked, length: int) -> jax.Array:
  """[B, L] float32: 1 at every position some used slot selected."""
  return (_scatter_add(length, masked.positions, masked.weights) > 0).astype(jnp.float32)
