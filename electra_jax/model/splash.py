"""JAX's splash attention kernel for TPUs (`jax.experimental.pallas.ops.tpu.splash_attention`), the
attention of long sequences without dropout: its grid streams key and value blocks through the
core's memory, so a sequence of any length fits, and a block of queries visits only the key
blocks its mask reaches (a local layer's window, a direction) and, within them, its own sequence
(packed rows: the key mask's numbers are splash's segment ids; padding, numbered 0, sees padding).

The flash kernels (flash.py) hold a sequence's whole K and V (and, for dK/dV, Q) in a program's
scoped VMEM and so stop at flash.TPU_LONGEST tokens on TPUs; they draw the paper's dropout, which
splash has none of. Off TPUs it runs in Pallas' interpreter (tests).
"""

import functools

import jax
from jax.experimental.pallas.ops.tpu import splash_attention as splash_lib
import numpy as np

from electra_jax.model import flash as flash_lib

BLOCK = 512  # query and key block (the length's largest divisor up to it, a multiple of 128)


def block(length: int) -> int:
  """The kernel's block for `length` tokens: the largest multiple of 128 up to BLOCK that divides
  it (0: none)."""
  return next((b for b in range(BLOCK, 127, -128) if length % b == 0), 0)


def unsupported(length: int) -> str:
  """Why the kernel does not take `length`-token sequences ('' : it does)."""
  if not block(length):
    return f'{length} tokens are not a multiple of 128, the smallest block'
  return ''


@functools.lru_cache(maxsize=32)
def _kernel(length: int, heads: int, direction: str, window: int, interpret: bool):
  """The kernel for [heads, length, D] inputs whose mask allows each query the keys in its
  direction and window (masks.visible's rule: |q - k| <= window // 2)."""
  half = window // 2 if window else None
  sides = {'': (half, half), 'ltr': (half, 0), 'rtl': (0, half)}[direction]
  shape = (length, length)
  one = (splash_lib.FullMask(shape) if sides == (None, None) else
         splash_lib.LocalMask(shape, sides, 0))
  b = block(length)
  sizes = splash_lib.BlockSizes(block_q=b, block_kv=b, block_kv_compute=b, block_q_dkv=b,
                                block_kv_dkv=b, block_kv_dkv_compute=b, block_q_dq=b,
                                block_kv_dq=b)
  return splash_lib.make_splash_mha(splash_lib.MultiHeadMask([one] * heads), head_shards=1,
                                    q_seq_shards=1, block_sizes=sizes, interpret=interpret)


def splash(q, k, v, key_mask, *, direction: str = '', window: int = 0, interpret: bool = False):
  """q, k, v: [B, L, H, D] (one device's rows); key_mask: [B, L] (masks.allowed_mask's
  numbering). Returns [B, L, H, D] in v's dtype: softmax(q k^T / sqrt(D)) v over the keys each
  query may see."""
  batch, length, heads, depth = q.shape
  problem = unsupported(length)
  if problem:
    raise ValueError(f'the splash attention kernel does not take q of shape {q.shape}: {problem}')
  kernel = _kernel(length, heads, direction, window, interpret)
  scale = np.asarray(1.0 / np.sqrt(depth), q.dtype)
  heads_first = lambda x: x.transpose(1, 0, 2)

  def one(q, k, v, ids):
    segments = splash_lib.SegmentIds(q=ids, kv=ids)
    return heads_first(kernel(heads_first(q * scale), heads_first(k), heads_first(v),
                              segment_ids=segments))

  return jax.vmap(one)(q, k, v, key_mask.astype(np.int32)).astype(v.dtype)


def splash_sharded(q, k, v, key_mask, *, direction: str = '', dropout_rate: float = 0.0,
                   words=None, platform: str = '', window: int = 0):
  """`splash` on every device's rows (flash.on_each_device); no dropout (`dropout_rate` and
  `words` are the attention paths' common arguments: 0 and unused)."""
  del dropout_rate, words
  call = lambda q, k, v, key_mask, words, batch_offset: splash(
      q, k, v, key_mask, direction=direction, window=window, interpret=platform != 'tpu')
  return flash_lib.on_each_device(call, q, k, v, key_mask, None)
