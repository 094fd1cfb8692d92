"""The Pallas flash-attention kernels (forward; backward as dK/dV and dQ): attention with dropout
that never writes the probabilities to memory. Each kernel works on [queries, keys] tiles, reads
the softmax statistics as columns and computes the backward's rowsum(dO * O) itself. They read
q, k, v as the projections write them, [B, L, heads * head]: one head per program on GPUs, on TPUs
a group of heads filling the 128 lanes (two of 64), so no transposes and no half-empty lane tiles.
Triton on GPUs, Mosaic on TPUs; `interpret=True` runs them on any backend (the CPU tests).
`flash_sharded` runs them per device under a 'data' mesh axis with the rows' global indices, so
the dropout mask (attention_masks.keep_bits, the explicit path's) does not depend on the devices.
"""

import dataclasses
import functools
import math
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plgpu
from jax.sharding import PartitionSpec as P

from electra_jax.model.attention_masks import MASK_VALUE, keep_bits, row_seed, threshold, visible


@dataclasses.dataclass(frozen=True)
class FlashOptions:
  """Static settings of the kernels (hashable: they key the compiled programs)."""
  dropout_rate: float = 0.0
  direction: str = ''
  window: int = 0  # a local layer's: a query sees the keys within window // 2 (0: every key)
  block_q: int = 128  # forward: queries per program
  block_k: int = 64  # forward: keys per inner step
  block_k_dkv: int = 128  # dK/dV: keys per program
  block_q_dkv: int = 32  # dK/dV: queries per inner step
  block_q_dq: int = 128  # dQ: queries per program
  block_k_dq: int = 32  # dQ: keys per inner step
  backend: str = 'gpu'  # 'gpu' (Triton; [B, L, H, D] blocks) or 'tpu' (Mosaic; [B, H, L, D])
  interpret: bool = False  # run the kernels with Pallas' interpreter (any backend, for tests)
  num_warps: int = 4  # Triton only
  num_stages: int = 2  # Triton only


# The longest sequence the TPU kernels take: a dK/dV program holds the whole sequence's Q, dO and O
# (bf16, 128 lanes), its statistics and mask (a lane each, padded to 128) twice (double
# buffering), about 5.4 KB a token: 44.25 MiB at 8,192 (Mosaic's count for v5e), over the 16 MiB
# of scoped VMEM; 11 MiB at 2,048.
TPU_LONGEST = 2048


def _fit(block: int, length: int) -> int:
  return min(block, length)


def group_size(o: FlashOptions, heads: int, head_dim: int) -> int:
  """Heads per kernel program. On TPUs a block's last dimension is a multiple of the 128 lanes (or
  the whole width): with heads of 64, two heads side by side fill them, read from the projections'
  [B, L, heads * head] output as it is (no transpose, no half-empty lanes). 0 when no grouping
  fits. Triton (GPUs) takes one head per program."""
  if o.backend != 'tpu':
    return 1
  if heads * head_dim <= 128:
    return heads
  if head_dim % 128 == 0:
    return 1
  group = 128 // head_dim
  return group if 128 % head_dim == 0 and heads % group == 0 else 0


def unsupported(o: FlashOptions, length: int, head_dim: int, heads: int = 1) -> str:
  """'' when the kernels take this shape, else why not (the caller then uses another path)."""
  blocks = {_fit(b, length) for b in (o.block_q, o.block_k, o.block_k_dkv, o.block_q_dkv,
                                      o.block_q_dq, o.block_k_dq)}
  if any(length % b for b in blocks):
    return f'blocks {sorted(blocks)} do not divide the sequence length {length}'
  if not group_size(o, heads, head_dim):
    return (f'{heads} heads of {head_dim} do not group into blocks of 128 lanes (a head size that '
            'divides 128 and a head count its groups divide, or a multiple of 128)')
  if o.interpret:  # Pallas' interpreter takes any blocks that divide the sequence
    return ''
  if o.backend == 'tpu':
    if any(b % 8 for b in blocks) or any(b % 128 and b != length for b in blocks):
      return f'blocks {sorted(blocks)} are not multiples of 128 (or the whole sequence of {length})'
    if length > TPU_LONGEST:
      return (f'{length} tokens are more than the {TPU_LONGEST} whose whole K and V (forward), Q, '
              "dO, O and statistics (dK/dV) a program holds in a core's 16 MiB of scoped VMEM")
    return ''
  if any(b < 16 or b & (b - 1) for b in blocks):
    return f'blocks {sorted(blocks)} are not powers of two >= 16'
  if head_dim < 16 or head_dim & (head_dim - 1):
    return f'head size {head_dim} is not a power of two >= 16'
  return ''


def _masks(o: FlashOptions, seeds_ref, b, h, heads, q0, k0, shape, key_mask, query_mask,
           key_len):
  """(additive score mask, dropout multiplier or None) of a [queries, keys] tile whose first query
  is q0 and first key k0; a query sees the keys of its own sequence (`key_mask` [1, keys] and
  `query_mask` [queries, 1]: the row's mask at them, masks.allowed_mask)."""
  query = lax.broadcasted_iota(jnp.int32, shape, 0) + q0
  key = lax.broadcasted_iota(jnp.int32, shape, 1) + k0
  allowed = visible(key_mask == query_mask, query, key, o.direction, o.window)
  additive = jnp.where(allowed, 0.0, MASK_VALUE)
  if o.dropout_rate <= 0:
    return additive, None
  row = (b + seeds_ref[2]) * jnp.uint32(heads) + h
  seed = row_seed((seeds_ref[0], seeds_ref[1]), row)
  keep = keep_bits(seed, query, key, key_len) >= jnp.uint32(threshold(o.dropout_rate))
  return additive, jnp.where(keep, 1.0 / (1.0 - o.dropout_rate), 0.0)


def _span(o: FlashOptions, first, count: int, block: int, length: int):
  """The blocks [lo, hi) of `block` positions (of `length`) that hold a position within a local
  layer's window of the `count` positions from `first`: an inner loop visits those alone (a
  block outside the window would add exp(-10000 ...) = 0 to every sum); all without a window."""
  if not o.window:
    return 0, length // block
  reach = o.window // 2
  # (lax.div of non-negative numbers: `//` lowers through sign(), which Mosaic lowers only for a
  # known TPU)
  div = lambda x: lax.div(jnp.asarray(x, jnp.int32), jnp.int32(block))
  lo = div(jnp.maximum(first - reach, 0))
  hi = jnp.minimum(div(first + count - 1 + reach) + 1, length // block)
  return lo, hi


def _heads(group: int, head_dim: int):
  """(index in the group, the head's global index, its lanes) of each head of this program."""
  b = pl.program_id(0).astype(jnp.uint32)
  first = pl.program_id(1).astype(jnp.uint32) * jnp.uint32(group)
  return b, [(g, first + jnp.uint32(g), pl.ds(g * head_dim, head_dim)) for g in range(group)]


def _nt(a, b):
  """a @ b^T with float32 accumulation."""
  return lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)


def _nn(a, b):
  return lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)


def _forward_kernel(seeds_ref, q_ref, k_ref, v_ref, mask_ref, qmask_ref, o_ref, m_ref, l_ref, *,
                    o: FlashOptions, heads: int, head_dim: int, scale: float):
  group = m_ref.shape[0]
  b, members = _heads(group, head_dim)
  i = pl.program_id(2)
  bq, bk = q_ref.shape[0], _fit(o.block_k, k_ref.shape[0])
  key_len = k_ref.shape[0]
  for g, h, lanes in members:
    q = q_ref[:, lanes]

    def body(j, carry, h=h, lanes=lanes, q=q):
      acc, m, l = carry
      keys = pl.ds(pl.multiple_of(j * bk, bk), bk)
      s = _nt(q, k_ref[keys, lanes]) * scale
      additive, keep = _masks(o, seeds_ref, b, h, heads, i * bq, j * bk, s.shape,
                              mask_ref[:, keys], qmask_ref[...], key_len)
      s = s + additive
      m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
      p = jnp.exp(s - m_new)
      correction = jnp.exp(m - m_new)
      l = correction * l + jnp.sum(p, axis=1, keepdims=True)
      if keep is not None:
        p = p * keep
      acc = correction * acc + _nn(p.astype(v_ref.dtype), v_ref[keys, lanes])
      return acc, m_new, l

    init = (jnp.zeros(q.shape, jnp.float32), jnp.full((bq, 1), -jnp.inf, jnp.float32),
            jnp.zeros((bq, 1), jnp.float32))
    lo, hi = _span(o, i * bq, bq, bk, key_len)
    acc, m, l = lax.fori_loop(lo, hi, body, init)
    o_ref[:, lanes] = (acc / l).astype(o_ref.dtype)
    # the softmax's statistics, kept apart: m + log(l) would round at the magnitude of the mask
    m_ref[g] = m
    l_ref[g] = l


def _tn(a, b):
  """a^T @ b with float32 accumulation (a transposed in the kernel, as the MXU takes it)."""
  return _nn(a.T, b)


def _delta(do, out):
  """rowsum(dO * O) of a block of queries: the softmax backward's correction, [queries, 1].
  (= rowsum(dP_dropped * P_dropped); computed where it is used instead of in HBM.)"""
  return jnp.sum(do.astype(jnp.float32) * out.astype(jnp.float32), axis=1, keepdims=True)


def _dkv_kernel(seeds_ref, q_ref, k_ref, v_ref, mask_ref, qmask_ref, do_ref, o_ref, m_ref, l_ref,
                dk_ref, dv_ref, *, o: FlashOptions, heads: int, head_dim: int, scale: float):
  """dK and dV of one block of keys, looping over the queries; tiles are [queries, keys], and
  the products with the keys' side take the tile transposed."""
  group = m_ref.shape[0]
  b, members = _heads(group, head_dim)
  j = pl.program_id(2)
  bk, bq = k_ref.shape[0], _fit(o.block_q_dkv, q_ref.shape[0])
  key_len = q_ref.shape[0]
  key_mask = mask_ref[...]  # [1, keys]
  for g, h, lanes in members:
    k, v = k_ref[:, lanes], v_ref[:, lanes]

    def body(i, carry, g=g, h=h, lanes=lanes, k=k, v=v):
      dk, dv = carry
      queries = pl.ds(pl.multiple_of(i * bq, bq), bq)
      q, do = q_ref[queries, lanes], do_ref[queries, lanes]
      s = _nt(q, k) * scale
      additive, keep = _masks(o, seeds_ref, b, h, heads, i * bq, j * bk, s.shape, key_mask,
                              qmask_ref[queries, :], key_len)
      p = jnp.exp(s + additive - m_ref[g, queries, :]) / l_ref[g, queries, :]  # [queries, keys]
      dp = _nt(do, v)  # the gradient of the dropped probabilities
      if keep is not None:
        dv = dv + _tn((p * keep).astype(do.dtype), do)
        dp = dp * keep
      else:
        dv = dv + _tn(p.astype(do.dtype), do)
      ds = p * (dp - _delta(do, o_ref[queries, lanes]))
      dk = dk + _tn(ds.astype(q.dtype), q)
      return dk, dv

    zeros = jnp.zeros(k.shape, jnp.float32)
    lo, hi = _span(o, j * bk, bk, bq, key_len)
    dk, dv = lax.fori_loop(lo, hi, body, (zeros, zeros))
    dk_ref[:, lanes] = (dk * scale).astype(dk_ref.dtype)
    dv_ref[:, lanes] = dv.astype(dv_ref.dtype)


def _dq_kernel(seeds_ref, q_ref, k_ref, v_ref, mask_ref, qmask_ref, do_ref, o_ref, m_ref, l_ref,
               dq_ref, *, o: FlashOptions, heads: int, head_dim: int, scale: float):
  """dQ of one block of queries, looping over the keys."""
  group = m_ref.shape[0]
  b, members = _heads(group, head_dim)
  i = pl.program_id(2)
  bq, bk = q_ref.shape[0], _fit(o.block_k_dq, k_ref.shape[0])
  key_len = k_ref.shape[0]
  for g, h, lanes in members:
    q, do, m, l = q_ref[:, lanes], do_ref[:, lanes], m_ref[g], l_ref[g]
    delta = _delta(do, o_ref[:, lanes])

    def body(j, dq, h=h, lanes=lanes, q=q, do=do, m=m, l=l, delta=delta):
      keys = pl.ds(pl.multiple_of(j * bk, bk), bk)
      s = _nt(q, k_ref[keys, lanes]) * scale
      additive, keep = _masks(o, seeds_ref, b, h, heads, i * bq, j * bk, s.shape,
                              mask_ref[:, keys], qmask_ref[...], key_len)
      p = jnp.exp(s + additive - m) / l
      dp = _nt(do, v_ref[keys, lanes])
      if keep is not None:
        dp = dp * keep
      ds = p * (dp - delta)
      return dq + _nn(ds.astype(k_ref.dtype), k_ref[keys, lanes])

    lo, hi = _span(o, i * bq, bq, bk, key_len)
    dq = lax.fori_loop(lo, hi, body, jnp.zeros(q.shape, jnp.float32))
    dq_ref[:, lanes] = (dq * scale).astype(dq_ref.dtype)


def _compiler_params(o: FlashOptions, grid_rank: int):
  if o.backend == 'tpu':
    parallel: Literal['parallel'] = 'parallel'
    semantics = (parallel,) * grid_rank
    return pltpu.CompilerParams(dimension_semantics=semantics)
  return plgpu.CompilerParams(num_warps=o.num_warps, num_stages=o.num_stages)


def _seed_spec(o: FlashOptions):
  if o.backend == 'tpu':
    return pl.BlockSpec(memory_space=pltpu.SMEM)
  return pl.BlockSpec((4,), lambda *_: (0,))


@dataclasses.dataclass(frozen=True)
class _Shape:
  """The kernels' view of q: [batch, length, heads * head], `group` heads per program."""
  batch: int
  length: int
  heads: int
  head_dim: int
  group: int

  def grid(self, block):
    return self.batch, self.heads // self.group, self.length // block

  def blocked(self, block):
    """Blocks of `block` positions x the group's lanes of a q-like [B, L, heads * head] tensor."""
    return pl.BlockSpec((None, block, self.group * self.head_dim), lambda b, g, i: (b, i, g))

  def whole(self):
    return pl.BlockSpec((None, self.length, self.group * self.head_dim), lambda b, g, i: (b, 0, g))

  def stat_blocked(self, block):
    """Columns [group, block, 1] of a [B, heads, L, 1] statistic."""
    return pl.BlockSpec((None, self.group, block, 1), lambda b, g, i: (b, g, i, 0))

  def stat_whole(self):
    return pl.BlockSpec((None, self.group, self.length, 1), lambda b, g, i: (b, g, 0, 0))

  def cost(self, matmuls: int, exps: int, tensors_read: int, tensors_written: int, itemsize: int):
    """The declared cost of a kernel: `matmuls` [L, L, D] products per (row, head), `exps`
    exponentials per score, and whole q-sized tensors read and written once each (a
    whole-sequence block is fetched once per (row, head group): the pipeline skips unchanged
    blocks)."""
    scores = self.batch * self.heads * self.length * self.length
    size = self.batch * self.length * self.heads * self.head_dim * itemsize
    return pl.CostEstimate(flops=int(2 * matmuls * scores * self.head_dim),
                           transcendentals=int(exps * scores),
                           bytes_accessed=int((tensors_read + tensors_written) * size))


def _row_mask_spec(length):
  """The key mask as a row [1, L] of a [B, 1, L] array."""
  return pl.BlockSpec((None, 1, length), lambda b, g, i: (b, 0, 0))


def _column_mask_spec(block):
  """The mask at a block of queries as a column [block, 1] of a [B, L, 1] array."""
  return pl.BlockSpec((None, block, 1), lambda b, g, i: (b, i, 0))


def _forward(seeds, q, k, v, key_mask, o: FlashOptions, shape: _Shape):
  bq = _fit(o.block_q, shape.length)
  kernel = functools.partial(_forward_kernel, o=o, heads=shape.heads, head_dim=shape.head_dim,
                             scale=1.0 / math.sqrt(shape.head_dim))
  stat = jax.ShapeDtypeStruct((shape.batch, shape.heads, shape.length, 1), jnp.float32)
  out, m, l = pl.pallas_call(
      kernel, grid=shape.grid(bq),
      in_specs=[_seed_spec(o), shape.blocked(bq), shape.whole(), shape.whole(),
                _row_mask_spec(shape.length), _column_mask_spec(bq)],
      out_specs=[shape.blocked(bq), shape.stat_blocked(bq), shape.stat_blocked(bq)],
      out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype), stat, stat],
      compiler_params=_compiler_params(o, 3), interpret=o.interpret,
      cost_estimate=shape.cost(2, 1, 3, 1, q.dtype.itemsize), name='electra_flash_forward')(
          seeds, q, k, v, key_mask[:, None, :], key_mask[:, :, None])
  return out, (m, l)


def _backward(seeds, q, k, v, key_mask, out, stats, do, o: FlashOptions, shape: _Shape):
  scale = 1.0 / math.sqrt(shape.head_dim)
  m, l = stats  # [B, H, L, 1] columns, read as [queries, 1] blocks by both kernels
  kw: dict[str, Any] = dict(o=o, heads=shape.heads, head_dim=shape.head_dim, scale=scale)
  bk = _fit(o.block_k_dkv, shape.length)
  key_block_mask = pl.BlockSpec((None, 1, bk), lambda b, g, j: (b, 0, j))
  whole, stat_whole = shape.whole(), shape.stat_whole()
  dk, dv = pl.pallas_call(
      functools.partial(_dkv_kernel, **kw), grid=shape.grid(bk),
      in_specs=[_seed_spec(o), whole, shape.blocked(bk), shape.blocked(bk), key_block_mask,
                pl.BlockSpec((None, shape.length, 1), lambda b, g, j: (b, 0, 0)), whole, whole,
                stat_whole, stat_whole],
      out_specs=[shape.blocked(bk), shape.blocked(bk)],
      out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
      compiler_params=_compiler_params(o, 3), interpret=o.interpret,
      cost_estimate=shape.cost(4, 1, 5, 2, q.dtype.itemsize), name='electra_flash_dkv')(
          seeds, q, k, v, key_mask[:, None, :], key_mask[:, :, None], do, out, m, l)

  bq = _fit(o.block_q_dq, shape.length)
  blocked = shape.blocked(bq)
  dq = pl.pallas_call(
      functools.partial(_dq_kernel, **kw), grid=shape.grid(bq),
      in_specs=[_seed_spec(o), blocked, whole, whole, _row_mask_spec(shape.length),
                _column_mask_spec(bq), blocked, blocked, shape.stat_blocked(bq),
                shape.stat_blocked(bq)],
      out_specs=blocked,
      out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
      compiler_params=_compiler_params(o, 3), interpret=o.interpret,
      cost_estimate=shape.cost(3, 1, 5, 1, q.dtype.itemsize), name='electra_flash_dq')(
          seeds, q, k, v, key_mask[:, None, :], key_mask[:, :, None], do, out, m, l)
  return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _flash(seeds, q, k, v, key_mask, o: FlashOptions, shape: _Shape):
  return _forward(seeds, q, k, v, key_mask, o, shape)[0]


def _flash_fwd(seeds, q, k, v, key_mask, o, shape):
  out, stats = _forward(seeds, q, k, v, key_mask, o, shape)
  return out, (seeds, q, k, v, key_mask, out, stats)


def _flash_bwd(o, shape, residuals, do):
  seeds, q, k, v, key_mask, out, stats = residuals
  dq, dk, dv = _backward(seeds, q, k, v, key_mask, out, stats, do, o, shape)
  return (np.zeros(seeds.shape, jax.dtypes.float0), dq, dk, dv,
          np.zeros(key_mask.shape, jax.dtypes.float0))


_flash.defvjp(_flash_fwd, _flash_bwd)


def flash(q, k, v, key_mask, *, direction: str = '', dropout_rate: float = 0.0, words=None,
          options: FlashOptions | None = None, batch_offset=0, window: int = 0):
  """The kernels on one device's rows. q, k, v: [B, L, H, D]; key_mask: [B, L]; `words` the
  layer's dropout key words (`layers.dropout_words`); `batch_offset` the global index of row 0;
  `window` a local layer's (0: every key; the inner loops visit the blocks within it alone).
  Returns [B, L, H, D].

  The kernels read q, k, v as [B, L, H * D] (a free reshape of the projections' output): a program
  takes a block of positions of one head on GPUs, of a group of heads filling the 128 lanes on
  TPUs (`group_size`)."""
  o = dataclasses.replace(options or FlashOptions(), direction=direction, window=window,
                          dropout_rate=dropout_rate if words is not None else 0.0)
  batch, length, heads, head_dim = q.shape
  problem = unsupported(o, length, head_dim, heads)
  if problem:  # the grid would skip the rows past the last whole block
    raise ValueError(f'the flash attention kernels do not take q of shape {q.shape}: {problem}')
  shape = _Shape(batch, length, heads, head_dim, group_size(o, heads, head_dim))
  if words is None:
    words = jnp.zeros((2,), jnp.uint32)
  seeds = jnp.concatenate([words.astype(jnp.uint32),
                           jnp.asarray(batch_offset, jnp.uint32)[None],
                           jnp.zeros((1,), jnp.uint32)])
  flat = lambda x: x.reshape(batch, length, heads * head_dim)
  out = _flash(seeds, flat(q), flat(k), flat(v), key_mask.astype(jnp.int32), o, shape)
  return out.reshape(q.shape)


def flash_sharded(q, k, v, key_mask, *, direction='', dropout_rate=0.0, words=None,
                  options: FlashOptions | None = None, axis: str = 'data', window: int = 0):
  """`flash` on every device's rows of a batch split over the mesh axis `axis` of the mesh in
  context (`on_each_device`)."""
  call = lambda q, k, v, key_mask, words, batch_offset: flash(
      q, k, v, key_mask, direction=direction, dropout_rate=dropout_rate, words=words,
      options=options, batch_offset=batch_offset, window=window)
  return on_each_device(call, q, k, v, key_mask, words, axis)


def on_each_device(call, q, k, v, key_mask, words, axis: str = 'data'):
  """`call(q, k, v, key_mask, words, batch_offset)` (a kernel) on every device's rows of a batch
  split over the mesh axis `axis` of the mesh in context (`jax.sharding.use_abstract_mesh`), its
  rows' global offset given; without such a mesh, on the whole batch."""
  mesh = jax.sharding.get_abstract_mesh()
  if (mesh.empty or axis not in mesh.axis_names or mesh.shape[axis] == 1
      or q.shape[0] % mesh.shape[axis]):  # (e.g. the one-row batch that creates the parameters)
    return call(q, k, v, key_mask, words, 0)
  has_words = words is not None

  def local(q, k, v, key_mask, words):
    offset = lax.axis_index(axis) * q.shape[0]
    return call(q, k, v, key_mask, words if has_words else None, offset)

  words = words if has_words else jnp.zeros((2,), jnp.uint32)
  return jax.shard_map(local, mesh=mesh, in_specs=(P(axis),) * 4 + (P(),), out_specs=P(axis),
                       check_vma=False)(q, k, v, key_mask, words)
