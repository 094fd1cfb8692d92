"""What every attention path shares: the additive padding mask and which keys a query may see,
and the counter-based random bits of the dropout masks.

The keep bit of probability (b, h, i, j) is a hash of the dropout key and those four indices
(`keep_bits`), so any implementation, and the backward pass, regenerate the mask instead of
storing it. The hidden-state dropout and the generator's Gumbel noise draw from the same hash
(`keyed_hash`).
"""

import jax
import jax.numpy as jnp
from jax import lax

MASK_VALUE = -10000.0  # added to the scores of keys a query may not attend to, as the original


def mix32(x):
  """A 32-bit integer finalizer (xorshift-multiply): a bijection whose output bits all depend on
  every input bit."""
  x = (x ^ (x >> 16)) * jnp.uint32(0x7FEB352D)
  x = (x ^ (x >> 15)) * jnp.uint32(0x846CA68B)
  return x ^ (x >> 16)


def seed_words(key) -> jax.Array:
  """The two uint32 words of a JAX key (threefry's key data), as the hashes use them."""
  words = jax.random.key_data(key).reshape(-1).astype(jnp.uint32)
  return jnp.stack([words[0], words[-1]])


def threshold(rate: float) -> int:
  """Bits below this value drop an element: P(drop) = rate to within 2^-32."""
  return min(round(rate * 2.0 ** 32), 2 ** 32 - 1)


def keyed_hash(words, x):
  """uint32 bits of `x` (uint32) under the two key words: two rounds of `mix32`, each keyed by
  one word, so that the streams of different keys are unrelated. The hidden-state dropout, the
  attention rows' seeds and the generator's Gumbel noise all draw from it."""
  return mix32(mix32(x ^ words[0]) + words[1])


def row_seed(words, row):
  """The seed of one (batch row, head) pair: row = b * heads + h (uint32)."""
  return keyed_hash(words, row)


def keep_bits(seed, query, key, key_len: int):
  """uint32 bits of probability (query, key) of one (batch row, head) seeded by `row_seed`."""
  return mix32((query * key_len + key).astype(jnp.uint32) ^ seed)


def row_seeds(words, batch: int, heads: int, ndim: int = 4, batch_offset=0) -> jax.Array:
  """The seeds (`row_seed`) of every (batch row, head) pair, [B, H, 1, ...] (`ndim` axes)."""
  shape = (batch, heads) + (1,) * (ndim - 2)
  rows = ((lax.broadcasted_iota(jnp.uint32, shape, 0) + jnp.uint32(batch_offset)) * heads
          + lax.broadcasted_iota(jnp.uint32, shape, 1))
  return row_seed(words, rows)


def probs_keep(words, shape, batch_offset=0) -> jax.Array:
  """The keep bits of a whole [B, H, Lq, Lk] probability tensor (the explicit path's mask)."""
  b, h, lq, lk = shape
  query = lax.broadcasted_iota(jnp.int32, (1, 1, lq, lk), 2)
  key = lax.broadcasted_iota(jnp.int32, (1, 1, lq, lk), 3)
  return keep_bits(row_seeds(words, b, h, batch_offset=batch_offset), query, key, lk)


def sequence_positions(key_mask) -> jax.Array:
  """[B, L] int32: each token's position in its own sequence, counted from the sequence's first
  token, for a mask numbered as `allowed_mask`'s (a sequence: a run of equal values). A row of one
  sequence and padding gives 0, 1, ... on its tokens."""
  index = lax.broadcasted_iota(jnp.int32, key_mask.shape, 1)
  starts = jnp.concatenate([jnp.ones_like(key_mask[:, :1], bool),
                            key_mask[:, 1:] != key_mask[:, :-1]], axis=1)
  return index - lax.cummax(jnp.where(starts, index, 0), axis=1)


def allowed_mask(key_mask, length: int, direction: str = '', window: int = 0):
  """[B, 1, L, L] bool: which keys each query may attend to: those of its own sequence, the keys
  whose `key_mask` value is the query's. A row's mask is 1 on its tokens and 0 on padding, or (a
  row packing several examples) each example's number 1, 2, ... on its tokens: a token sees its
  example alone, and a padding position the padding (never nothing). `direction` 'ltr' lets a
  position see itself and its left, 'rtl' itself and its right (ELECTRIC's towers). `window`
  (a modern local layer's; 0: none): a query sees only the keys within window // 2 positions of
  it, on each side (HF's ModernBert: |q - k| <= local_attention // 2)."""
  same = key_mask[:, None, None, :] == key_mask[:, None, :, None]
  return visible(same, jnp.arange(length)[:, None], jnp.arange(length)[None, :], direction,
                 window)


def visible(same, query_at, key_at, direction: str = '', window: int = 0):
  """`same` (a query and a key of one sequence) where the key is also in the query's direction
  and window (`allowed_mask`'s rules), for queries at positions `query_at` and keys at `key_at`
  (broadcast against `same`): every path's masks, whatever tiles it scores."""
  if direction:
    same = same & ((key_at <= query_at) if direction == 'ltr' else (key_at >= query_at))
  if window:
    same = same & (jnp.abs(key_at - query_at) <= window // 2)
  return same
