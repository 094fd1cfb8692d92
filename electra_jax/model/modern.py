"""The modern backbone's block (`model.backbone='modern'`): ModernBERT's layer, as HF transformers'
`ModernBertEncoderLayer` computes it.

    x = x + Wo(attention(rotary(Wqkv(attn_norm(x)))))     attn_norm: none in layer 0
    x = x + mlp_Wo(GELU(a) * b),  [a, b] = Wi(mlp_norm(x))   (GeGLU)

with LayerNorms and linear layers without biases. Layer i attends over the whole sequence where
i % `global_every` == 0 (rotary base `rope_theta_global`) and over a window of `local_window`
tokens otherwise (keys within local_window // 2 positions on each side; base `rope_theta_local`).
The encoder adds a final LayerNorm after the last layer (networks.Encoder); the embeddings are the
word table followed by a LayerNorm, with no position table and no token types
(networks.Embeddings).

Parameter names: layer_<i>/{attn_norm (not in layer 0), Wqkv, Wo, mlp_norm, Wi, mlp_Wo}, the
names of HF's `layers.<i>.{attn_norm, attn.Wqkv, attn.Wo, mlp_norm, mlp.Wi, mlp.Wo}`.
"""

import flax.linen as nn
import jax.numpy as jnp

from electra_jax.model import attention as attention_lib
from electra_jax.model.config import ModelConfig
from electra_jax.model.layers import Dense, Dropout, LayerNorm, dropout_words, gelu_for


def rotary(x, positions, theta: float):
  """Rotary position embedding of x [B, L, N, D] at `positions` ([B, L] int; None: 0, 1, ... in
  every row) with base `theta`, computed in float32 and returned in x's dtype: feature i < D / 2
  pairs with i + D / 2 (HF's `rotate_half` layout), rotated by position * theta^(-2i / D)."""
  depth = x.shape[-1]
  if positions is None:
    positions = jnp.arange(x.shape[1])[None]
  inverse = 1.0 / (theta ** (jnp.arange(0, depth, 2, dtype=jnp.float32) / depth))
  angles = positions.astype(jnp.float32)[..., None] * inverse  # [B, L, D / 2]
  cos = jnp.cos(jnp.concatenate([angles, angles], -1))[:, :, None]
  sin = jnp.sin(jnp.concatenate([angles, angles], -1))[:, :, None]
  xf = x.astype(jnp.float32)
  half = depth // 2
  rotated = jnp.concatenate([-xf[..., half:], xf[..., :half]], -1)
  return (xf * cos + rotated * sin).astype(x.dtype)


class ModernLayer(nn.Module):
  """One ModernBERT layer (see the module's docstring) of a network `hidden_size` wide."""
  cfg: ModelConfig
  hidden_size: int
  num_heads: int
  intermediate_size: int
  index: int  # its place in the encoder: layer 0 has no attn_norm; global or local
  direction: str = ''  # '' every key, 'ltr' / 'rtl' keys up to / from the query (ELECTRIC)

  @nn.compact
  def __call__(self, x, input_mask, deterministic: bool, positions=None):
    """x: [B, L, H]; `input_mask`: [B, L] (attention.allowed_mask's numbering); `positions`:
    each token's position in its own sequence ([B, L]; None: 0, 1, ... in every row)."""
    cfg = self.cfg
    batch, length, _ = x.shape
    x = x.reshape(batch * length, x.shape[-1])
    dense = lambda n, name: Dense(n, cfg, name=name, use_bias=False)
    norm = lambda name: LayerNorm(epsilon=cfg.layer_norm_eps, dtype=cfg.dtype,
                                  param_dtype=cfg.param_dtype, use_bias=False, name=name)
    drop = lambda y, rate, name: Dropout(rate, bool(cfg.writes_for_backward), name=name)(
        y, deterministic=deterministic)
    head = self.hidden_size // self.num_heads
    is_global = cfg.is_global(self.index)
    theta = cfg.rope_theta_global if is_global else cfg.rope_theta_local
    h = x if self.index == 0 else norm('attn_norm')(x)
    qkv = dense(3 * self.hidden_size, 'Wqkv')(h).reshape(batch, length, 3, self.num_heads, head)
    q, k, v = (qkv[:, :, i] for i in range(3))
    q, k = rotary(q, positions, theta), rotary(k, positions, theta)
    rate = 0.0 if deterministic else cfg.attention_dropout_rate
    words = dropout_words(self) if rate > 0 else None
    context = attention_lib.attend(cfg, q, k, v, input_mask, direction=self.direction,
                                   deterministic=deterministic, words=words,
                                   initializing=self.is_initializing(),
                                   window=0 if is_global else cfg.local_window)
    attended = dense(self.hidden_size, 'Wo')(context.reshape(batch * length, -1))
    x = x + drop(attended, cfg.attention_dropout_rate, 'attention_dropout').astype(x.dtype)
    inner = dense(2 * self.intermediate_size, 'Wi')(norm('mlp_norm')(x))
    gated = gelu_for(cfg)(inner[:, :self.intermediate_size]) * inner[:, self.intermediate_size:]
    out = dense(self.hidden_size, 'mlp_Wo')(drop(gated, cfg.dropout_rate, 'mlp_dropout'))
    return (x + out.astype(x.dtype)).reshape(batch, length, -1)


def final_norm(cfg: ModelConfig, name: str = 'final_norm') -> nn.Module:
  """The LayerNorm after a modern encoder's last layer."""
  return LayerNorm(epsilon=cfg.layer_norm_eps, dtype=cfg.dtype, param_dtype=cfg.param_dtype,
                   use_bias=False, name=name)

