"""The model's building blocks: its initializer, matmul, dense layer, LayerNorm, GELU and dropout.

Each is written for speed with the values of the plain form: a bfloat16 matmul whose backward also
takes bfloat16 inputs, LayerNorm's own backward, GELU and dropout that may write what the backward
pass reads (`model.ModelConfig.writes_for_backward`), counter-based dropout bits.
"""

import functools
import hashlib
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from electra_jax.model import attention_masks


def truncated_normal(stddev: float):
  """TF1's truncated_normal_initializer: N(0, stddev) cut at two standard deviations."""
  def init(key, shape, dtype=jnp.float32):
    return (jax.random.truncated_normal(key, -2.0, 2.0, shape, jnp.float32) * stddev).astype(dtype)
  return init


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def low_precision_matmul(x, w, write_cotangent: bool = False):
  """x @ w for bfloat16 x and w, float32 result; the backward matmuls also take bfloat16 inputs.

  Plain autodiff would multiply the float32 cotangent with the bfloat16 operands in float32;
  rounding the cotangent to bfloat16 first (standard mixed precision) keeps every matmul fast.
  `write_cotangent` writes the rounded cotangent once for both backward matmuls; otherwise XLA
  computes it inside each of them (right for a layer's cheap cotangents, but the vocabulary
  logits' softmax gradient is an exp per entry, a pass over the largest tensor of the step).
  """
  del write_cotangent
  return jnp.dot(x, w, preferred_element_type=jnp.float32)


def _lpm_fwd(x, w, write_cotangent):
  return low_precision_matmul(x, w, write_cotangent), (x, w)


def _lpm_bwd(write_cotangent, residuals, g):
  x, w = residuals
  g = g.astype(x.dtype)
  if write_cotangent:
    g = jax.lax.optimization_barrier(g)
  dx = jnp.dot(g, w.T, preferred_element_type=jnp.float32).astype(x.dtype)
  dw = jnp.dot(x.reshape(-1, x.shape[-1]).T, g.reshape(-1, g.shape[-1]),
               preferred_element_type=jnp.float32).astype(w.dtype)
  return dx, dw


low_precision_matmul.defvjp(_lpm_fwd, _lpm_bwd)


@jax.custom_vjp
def low_precision_dense(x, w, bias):
  """x @ w + bias as `low_precision_matmul` (bfloat16 x and w, float32 result), the bias's
  gradient summed over the tokens on the matrix unit from the same bfloat16 cotangent the backward
  matmuls take: row 0 of ones[8, T] @ g, float32 accumulation. For TPUs: XLA's cost model puts
  the plain gradient (a reduction over a Base batch's 16,384 tokens a chip) at 117 us on v5e and
  this at 6 us (estimates; a ones vector is rewritten back into the reduction, 8 rows are not).
  The products are exact: the sum is the plain one up to the order of its additions."""
  return jnp.dot(x, w, preferred_element_type=jnp.float32) + bias


def _lpd_fwd(x, w, bias):
  return low_precision_dense(x, w, bias), (x, w)


def _lpd_bwd(residuals, g):
  x, w = residuals
  dx, dw = _lpm_bwd(False, residuals, g)
  rows = g.astype(x.dtype).reshape(-1, g.shape[-1])
  ones = jnp.ones((8, rows.shape[0]), x.dtype)
  return dx, dw, jnp.dot(ones, rows, preferred_element_type=jnp.float32)[0]


low_precision_dense.defvjp(_lpd_fwd, _lpd_bwd)


def dropout_words(module: nn.Module) -> jax.Array:
  """The two uint32 key words of one dropout mask drawn by `module`: the 'dropout' key given to
  `apply`, hashed (`masks.keyed_hash`) with a number fixed by the module's path and its count of
  draws. It stands for Flax's `make_rng('dropout')`, which derives a key from the same path and
  count with a threefry fold_in: about 120 scalar operations a mask, left unfused on TPUs
  (9,226 of a Base step's 11,510 kernels on v5e-8, docs/measured.md), where this is one
  elementwise pass over two words. The draw counts as Flax's do (a later `make_rng` of the
  module takes the next number)."""
  scope = module.scope
  assert scope is not None, 'a bound module (inside apply) draws masks'
  if not scope.has_rng('dropout'):
    raise ValueError(f'{module.name} draws a dropout mask: give apply rngs={{"dropout": key}}')
  lazy = scope.rngs['dropout']  # flax.core.scope.LazyRng: a key and the static path to fold in
  scope.rng_counters['dropout'] += 1
  site = hashlib.sha1(repr((lazy.suffix, scope.rng_counters['dropout'])).encode()).digest()
  return attention_masks.keyed_hash(attention_masks.seed_words(lazy.rng),
                                    jnp.array(np.frombuffer(site[:8], '>u4'), jnp.uint32))


def random_bits(words, shape) -> jax.Array:
  """uint32 bits for `shape` from a counter-based hash of (key words, element index).

  One fused elementwise pass: on the CPU backend about 13x faster than threefry's bits, which
  cost a fifth of a Small train step as dropout masks. Two rounds of the finalizer, each keyed by
  one word of the key, make the streams of different keys unrelated; tests check the rate, the
  independence of neighbours and of keys.
  """
  index = jax.lax.iota(jnp.uint32, math.prod(shape)).reshape(shape)
  return attention_masks.keyed_hash(words, index)


def gelu(x):
  """Exact GELU in the original's (and HF's) form, 0.5 x (1 + erf(x / sqrt 2)). XLA evaluates erf
  with a polynomial; jax.nn.gelu's erfc form costs an extra exp on the CPU backend."""
  return 0.5 * x * (1.0 + jax.lax.erf(x * (2.0 ** -0.5)))


def _gelu_and_slope(x):
  """GELU(x) = x Phi(x) and its derivative Phi(x) + x phi(x), in float32, returned in x's dtype."""
  xf = x.astype(jnp.float32)
  cdf = 0.5 * (1.0 + jax.lax.erf(xf * (2.0 ** -0.5)))
  slope = cdf + xf * jnp.exp(-0.5 * xf * xf) * (2.0 * math.pi) ** -0.5
  return (xf * cdf).astype(x.dtype), slope.astype(x.dtype)


@jax.custom_vjp
def gelu_writing_slope(x):
  """`gelu` computed in float32, whose backward pass multiplies by the derivative written by the
  forward pass (in x's dtype, in place of x). The optimization barrier makes the forward pass
  write GELU and its derivative once: otherwise XLA recomputes erf in each of the three matmuls
  that read them (the output dense forward, its kernel's gradient and the input's gradient).
  See `ModelConfig.writes_for_backward` for where that pays."""
  return _gelu_and_slope(x)[0]


gelu_writing_slope.defvjp(lambda x: jax.lax.optimization_barrier(_gelu_and_slope(x)),
                          lambda slope, g: (g * slope,))


def gelu_for(cfg):
  """The GELU the model's layers use: `gelu_writing_slope` where the forward pass writes for the
  backward (`ModelConfig.writes_for_backward`), else `gelu`: the same values either way."""
  return gelu_writing_slope if cfg.writes_for_backward else gelu


class Dropout(nn.Module):
  """Inverted dropout, keep probability 1 - rate, masks from `random_bits` of `dropout_words`.
  `write_mask`: the mask is written once (one byte per entry) and read by the backward pass;
  otherwise XLA recomputes the hash there (which chips prefer: platform/chips.py)."""
  rate: float
  write_mask: bool = False

  @nn.compact
  def __call__(self, x, deterministic: bool):
    if deterministic or self.rate == 0.0:
      return x
    threshold = jnp.uint32(attention_masks.threshold(self.rate))
    keep = random_bits(dropout_words(self), x.shape) >= threshold
    if self.write_mask:
      keep = jax.lax.optimization_barrier(keep)
    return jnp.where(keep, x / jnp.asarray(1.0 - self.rate, x.dtype), jnp.zeros_like(x))


def _norm_stats(x, eps):
  """Per-row mean and 1 / sqrt(variance + eps) in float32, the variance as E[x^2] - E[x]^2 clipped
  at zero (Flax's LayerNorm's statistics)."""
  xf = x.astype(jnp.float32)
  mean = jnp.mean(xf, -1, keepdims=True)
  var = jnp.maximum(0.0, jnp.mean(xf * xf, -1, keepdims=True) - mean * mean)
  return mean, jax.lax.rsqrt(var + eps)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def layer_norm(x, scale, bias, eps):
  """(x - mean) / sqrt(var + eps) * scale + bias over the last axis, in float32: Flax's LayerNorm
  operation for operation, so the same values.

  The backward pass recomputes the normalized input from x (saved in its own dtype) and the two
  statistics; left to autodiff, the compiler kept a float32 copy of x and reduced the
  statistics' gradients in more passes (docs/measured.md)."""
  return _layer_norm_forward(x, scale, bias, eps)[0]


def _layer_norm_forward(x, scale, bias, eps):
  mean, rstd = _norm_stats(x, eps)
  return (x - mean) * (rstd * scale) + bias, (x, scale, mean, rstd)


def _layer_norm_backward(eps, saved, g):
  del eps
  x, scale, mean, rstd = saved
  g = g.astype(jnp.float32)
  normalized = (x.astype(jnp.float32) - mean) * rstd
  rows = tuple(range(g.ndim - 1))
  gs = g * scale
  dx = rstd * (gs - jnp.mean(gs, -1, keepdims=True)
               - normalized * jnp.mean(gs * normalized, -1, keepdims=True))
  return (dx.astype(x.dtype), jnp.sum(g * normalized, rows).astype(scale.dtype),
          jnp.sum(g, rows).astype(scale.dtype))


layer_norm.defvjp(_layer_norm_forward, _layer_norm_backward)


class LayerNorm(nn.Module):
  """LayerNorm over the last axis with parameters `scale` and `bias` (Flax's names and
  initializers; see `layer_norm`), the output in `dtype`."""
  epsilon: float
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  use_bias: bool = True  # False: no `bias` parameter (ModernBERT's norms)

  @nn.compact
  def __call__(self, x):
    features = (x.shape[-1],)
    scale = self.param('scale', nn.initializers.ones, features, self.param_dtype)
    bias = (self.param('bias', nn.initializers.zeros, features, self.param_dtype)
            if self.use_bias else jnp.zeros(features, jnp.float32))
    y = layer_norm(x, scale.astype(jnp.float32), bias.astype(jnp.float32), self.epsilon)
    return y.astype(self.dtype)


class Dense(nn.Module):
  """x @ kernel + bias with inputs in `dtype` and float32 accumulation; output in `dtype`.

  Accumulating in float32 is both more precise and, on CPUs, about twice as fast for bfloat16 inputs
  as a bfloat16-output matmul.
  """
  features: int
  cfg: Any  # model.ModelConfig
  bias_init: float = 0.0
  # the bias's gradient summed by a matmul on TPUs (`low_precision_dense`): where the cotangent
  # is a bfloat16 array written anyway (the attention kernel's outputs); where XLA would fuse its
  # sum into the cotangent's own pass (a LayerNorm's or GELU's backward), it costs more
  bias_by_matmul: bool = False
  use_bias: bool = True  # False: no `bias` parameter (ModernBERT's linear layers)

  @nn.compact
  def __call__(self, x, add_bias: bool = True):
    """`add_bias=False` keeps the bias as a parameter but leaves it out of the output (the
    attention keys': see TransformerLayer)."""
    cfg, dt = self.cfg, jnp.dtype(self.cfg.dtype)
    kernel = self.param('kernel', truncated_normal(cfg.initializer_range),
                        (x.shape[-1], self.features), jnp.dtype(cfg.param_dtype))
    if not self.use_bias:
      if dt == jnp.float32:
        return jnp.dot(x.astype(dt), kernel.astype(dt), preferred_element_type=jnp.float32)
      return low_precision_matmul(x.astype(dt), kernel.astype(dt)).astype(dt)
    bias = self.param('bias', nn.initializers.constant(self.bias_init), (self.features,),
                      jnp.dtype(cfg.param_dtype))
    if (self.bias_by_matmul and add_bias and dt != jnp.float32
        and (cfg.platform or jax.default_backend()) == 'tpu'):
      return low_precision_dense(x.astype(dt), kernel.astype(dt), bias.astype(jnp.float32)
                                 ).astype(dt)
    if dt == jnp.float32:
      y = jnp.dot(x.astype(dt), kernel.astype(dt), preferred_element_type=jnp.float32)
    else:
      y = low_precision_matmul(x.astype(dt), kernel.astype(dt))
    return (y + bias.astype(jnp.float32) if add_bias else y).astype(dt)


def small_table_lookup(table, ids):
  """table[ids] for a table of a few rows (token types) as a sum of selections: the same values for
  ids in range, and a gradient of one reduction per row instead of a scatter-add whose every token
  lands on one of two rows (on GPUs, contended atomics)."""
  if table.shape[0] > 8:
    return jnp.take(table, ids, axis=0)
  picks = [jnp.where((ids == t)[..., None], table[t], jnp.zeros((), table.dtype))
           for t in range(table.shape[0])]
  return functools.reduce(jnp.add, picks)


@jax.custom_vjp
def straight_through_rows(sample, table):
  """Zeros [..., E] (in `sample`'s dtype) whose gradient is that of (sample - its value) @ table:
  the cotangent @ table.T to `sample` [..., V], none to `table`. AMOS's one-hot samples read as
  sample @ table have the lookup's value; this gives them their gradient without the forward pass
  of a zero-valued product (2 V E FLOPs a slot)."""
  return jnp.zeros(sample.shape[:-1] + table.shape[-1:], sample.dtype)


def _str_fwd(sample, table):
  return straight_through_rows(sample, table), table


def _str_bwd(table, g):
  return jnp.einsum('...e,ve->...v', g, table.astype(g.dtype)), jnp.zeros_like(table)


straight_through_rows.defvjp(_str_fwd, _str_bwd)
