"""Self-attention with dropout on the probabilities: its paths, and the choice among them.

Every path computes, per batch row b and head h,

    context = dropout(softmax(q k^T / sqrt(d) + mask)) v,   mask: 0 where allowed, -10000 elsewhere

with the same dropout mask (attention_masks.py: a hash of the key and the four indices, so the
backward pass regenerates it), where the mask lets a query see the keys of its own sequence: a row
may pack several examples (its key mask numbers them), each attending to itself alone. The paths, in
`PATHS` (name, what it runs, whether it draws dropout, the shapes it takes, its start-up check):

- `explicit`: einsums and a softmax in float32; XLA materializes the [B, H, L, L] probabilities.
  Every platform, every shape.
- `pallas`: the flash kernels of flash.py (Triton on GPUs, Mosaic on TPUs, Pallas' interpreter
  elsewhere): the probabilities never reach memory. It takes the shapes its blocks divide, and a
  run uses it only after it matched the explicit path on the device (`kernel_check`).
- `splash`: JAX's splash attention kernel for TPUs (splash.py), without dropout: it streams key
  blocks, so it takes sequences the flash kernels' TPU programs cannot hold (flash.TPU_LONGEST).
- `fused`: `jax.nn.dot_product_attention`, without dropout: XLA's product on every platform (JAX
  runs cuDNN's kernel only when asked, `implementation='cudnn'`, and cuDNN's sliding window is
  one-sided, a causal mask's: a local layer's two-sided window is a mask to it).

`model.attention='auto'` is decided once per run, before it compiles (`resolve`), by the registry:
the first path of `PATHS` that may run on the platform, takes the shape and passes its check (the
kernel on GPUs and TPUs, else the fused path for 16-bit activations, without dropout, else the
explicit softmax; CPUs run the explicit path). A layer asks for its path in one call (`attend`).
The padding mask is additive (-10000) as in the original, so fully masked rows (padding queries)
give the same values on every path.
"""

import concurrent.futures
import dataclasses
import functools
import itertools
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from electra_jax.model import flash as flash_lib
from electra_jax.model import splash as splash_lib
from electra_jax.platform import backends
from electra_jax.model.attention_masks import (MASK_VALUE, allowed_mask, keep_bits, probs_keep,
                                               row_seeds, seed_words, threshold, visible)



def explicit(q, k, v, key_mask, *, direction: str = '', dropout_rate: float = 0.0, words=None,
             window: int = 0):
  """q, k, v: [B, L, H, D]; key_mask: [B, L], each position's sequence (masks.allowed_mask); words:
  the dropout's two key words (`layers.dropout_words`, or `seed_words` of a key; None: no
  dropout); window: a local layer's (masks.allowed_mask; 0: every key). Returns [B, L, H, D] in
  v's dtype. A window much shorter than the sequence runs `banded`: the same values, at the cost
  of the window; a sequence longer than `LONG` without one runs `chunked`: the same values in the
  memory of QUERY_CHUNK queries."""
  length = q.shape[1]
  run = (banded if window and 3 * band_block(window) < length else
         chunked if length > LONG else dense)
  return run(q, k, v, key_mask, direction=direction, dropout_rate=dropout_rate, words=words,
             window=window)


def dense(q, k, v, key_mask, *, direction: str = '', dropout_rate: float = 0.0, words=None,
          window: int = 0):
  """`explicit` over every (query, key) pair: the [B, H, L, L] scores, masked."""
  scale = 1.0 / math.sqrt(q.shape[-1])
  scores = jnp.einsum('bqhd,bkhd->bhqk', q, k, preferred_element_type=jnp.float32)
  allowed = allowed_mask(key_mask, q.shape[1], direction, window)
  scores = scores * scale + jnp.where(allowed, 0.0, MASK_VALUE)
  probs = jax.nn.softmax(scores, axis=-1)
  if dropout_rate > 0 and words is not None:
    keep = probs_keep(words, probs.shape) >= jnp.uint32(threshold(dropout_rate))
    probs = jnp.where(keep, probs / (1.0 - dropout_rate), 0.0)
  return jnp.einsum('bhqk,bkhd->bqhd', probs.astype(v.dtype), v,
                    preferred_element_type=jnp.float32).astype(v.dtype)

# Sequences longer than LONG run `chunked` (queries QUERY_CHUNK at a time; on a CPU 1.2x faster
# than `dense` at 2,048 tokens, as fast at 512, measured in the layer's gradient): a dense product
# of 8,192 tokens holds [B, H, 8192, 8192] float32 scores, probabilities and their gradients at
# once (more than a 24 GB host for 6 layers of 2 heads and one row).
LONG, QUERY_CHUNK = 1024, 256


def chunked(q, k, v, key_mask, *, direction: str = '', dropout_rate: float = 0.0, words=None,
            window: int = 0, chunk: int = QUERY_CHUNK):
  """`dense` a block of `chunk` queries at a time (the sequence padded to a multiple), each
  block's scores against every key, recomputed in the backward pass (`jax.checkpoint`): the same
  values, masks and dropout bits, with the [B, H, chunk, L] scores of one block in memory instead
  of the [B, H, L, L] of all."""
  batch, length, heads, depth = q.shape
  blocks = -(-length // chunk)
  padded = blocks * chunk
  ids = key_mask.astype(jnp.int32)
  # padded queries: a sequence number no key has (they see nothing, and are dropped)
  query_ids = jnp.pad(ids, [(0, 0), (0, padded - length)],
                      constant_values=jnp.iinfo(jnp.int32).min)
  # heads before positions ([B, H, L, D]: 1.2x faster products on a CPU than [B, L, H, D])
  qb = jnp.pad(q, [(0, 0), (0, padded - length), (0, 0), (0, 0)]).transpose(0, 2, 1, 3)
  qb = qb.reshape(batch, heads, blocks, chunk, depth).transpose(2, 0, 1, 3, 4)
  kh, vh = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
  query_ids = query_ids.reshape(batch, blocks, chunk).swapaxes(0, 1)
  key_at = jnp.arange(length)[None, :]
  scale = 1.0 / math.sqrt(depth)

  @jax.checkpoint
  def block(args):
    qc, q_ids, start = args  # [B, H, chunk, D], [B, chunk], the block's first query
    query_at = start + jnp.arange(chunk)[:, None]
    allowed = visible(q_ids[:, :, None] == ids[:, None, :], query_at, key_at, direction,
                      window)  # [B, chunk, L]
    scores = jnp.einsum('bhqd,bhkd->bhqk', qc, kh, preferred_element_type=jnp.float32)
    scores = scores * scale + jnp.where(allowed[:, None], 0.0, MASK_VALUE)
    probs = jax.nn.softmax(scores, axis=-1)
    if dropout_rate > 0 and words is not None:
      bits = keep_bits(row_seeds(words, batch, heads), query_at[None, None], key_at[None, None],
                       length)
      probs = jnp.where(bits >= jnp.uint32(threshold(dropout_rate)),
                        probs / (1.0 - dropout_rate), 0.0)
    return jnp.einsum('bhqk,bhkd->bhqd', probs.astype(v.dtype), vh,
                      preferred_element_type=jnp.float32).astype(v.dtype)

  out = jax.lax.map(block, (qb, query_ids, jnp.arange(blocks) * chunk))  # [n, B, H, chunk, D]
  out = out.transpose(1, 0, 3, 2, 4)  # [B, n, chunk, H, D]
  return out.reshape(batch, padded, heads, depth)[:, :length]


def band_block(window: int) -> int:
  """The query block of `banded`: half the window (at least 8), so that a block's keys are the
  block and its two neighbours."""
  return max(8, window // 2)


def banded(q, k, v, key_mask, *, direction: str = '', dropout_rate: float = 0.0, words=None,
           window: int = 0):
  """`explicit` for a local layer at the cost of its window: the queries in blocks of
  `band_block(window)` (the sequence padded to a multiple), each block's scores against the keys
  of the block and its two neighbours alone (3 blocks, which hold every key within window // 2 of
  its queries), masked as `explicit` masks them (masks.allowed_mask's rules on the keys' own
  positions; dropout's bits of the same (row, head, query, key)). Scores and softmax in float32
  as `explicit`: the same values, where a dense product costs the length for every query."""
  batch, length, heads, depth = q.shape
  block = band_block(window)
  blocks = -(-length // block)
  padded = blocks * block
  pad = lambda x, value=0: jnp.pad(x, [(0, 0), (0, padded - length)] + [(0, 0)] * (x.ndim - 2),
                                   constant_values=value)
  # padded positions: a sequence number no real token has, so no real query sees them
  ids = pad(key_mask.astype(jnp.int32), jnp.iinfo(jnp.int32).min)

  def neighbours(x):  # [B, P, ...] -> [B, n, 3 * block, ...]: each block's previous, own, next
    x = x.reshape((batch, blocks, block) + x.shape[2:])
    edge = jnp.zeros_like(x[:, :1])
    before = jnp.concatenate([edge, x[:, :-1]], 1)
    after = jnp.concatenate([x[:, 1:], edge], 1)
    return jnp.concatenate([before, x, after], 2)

  qb = pad(q).reshape(batch, blocks, block, heads, depth)
  kb, vb = neighbours(pad(k)), neighbours(pad(v))
  query_at = jnp.arange(padded).reshape(blocks, block)  # [n, block]
  key_at = (jnp.arange(blocks)[:, None] - 1) * block + jnp.arange(3 * block)[None]  # [n, 3 block]
  key_ids = neighbours(jnp.where(
      jnp.arange(padded)[None] < length, ids, jnp.iinfo(jnp.int32).min))
  # the first block's "previous" and the last's "next" lie outside the sequence: no query sees
  key_ids = jnp.where((key_at >= 0) & (key_at < length), key_ids, jnp.iinfo(jnp.int32).min)
  query_ids = ids.reshape(batch, blocks, block)
  allowed = visible(query_ids[:, :, :, None] == key_ids[:, :, None, :],  # [B, n, block, 3 block]
                    query_at[None, :, :, None], key_at[None, :, None, :], direction, window)
  scale = 1.0 / math.sqrt(depth)
  scores = jnp.einsum('bnqhd,bnkhd->bhnqk', qb, kb, preferred_element_type=jnp.float32)
  scores = scores * scale + jnp.where(allowed[:, None], 0.0, MASK_VALUE)
  probs = jax.nn.softmax(scores, axis=-1)
  if dropout_rate > 0 and words is not None:
    bits = keep_bits(row_seeds(words, batch, heads, 5), query_at[None, None, :, :, None],
                     jnp.clip(key_at, 0, length - 1)[None, None, :, None, :], length)
    keep = bits >= jnp.uint32(threshold(dropout_rate))
    probs = jnp.where(keep, probs / (1.0 - dropout_rate), 0.0)
  out = jnp.einsum('bhnqk,bnkhd->bnqhd', probs.astype(v.dtype), vb,
                   preferred_element_type=jnp.float32).astype(v.dtype)
  return out.reshape(batch, padded, heads, depth)[:, :length]


def fused(q, k, v, key_mask, *, direction: str = '', dropout_rate: float = 0.0, words=None,
          window: int = 0):
  """`jax.nn.dot_product_attention` (XLA's product: JAX takes cuDNN's only when asked); it has no
  dropout."""
  del dropout_rate, words
  return jax.nn.dot_product_attention(q, k, v, mask=allowed_mask(key_mask, q.shape[1], direction,
                                                                 window))


def default_options(backend: str) -> flash_lib.FlashOptions:
  """The kernels' settings on `backend` (platform/backends.py's tiles)."""
  return flash_lib.FlashOptions(**backends.kernel_tiles(backend))


def _kernel(q, k, v, key_mask, *, direction='', dropout_rate=0.0, words=None, platform='',
            window: int = 0):
  return flash_lib.flash_sharded(q, k, v, key_mask, direction=direction, dropout_rate=dropout_rate,
                                 words=words, options=default_options(platform), window=window)


def _kernel_problem(platform: str, length: int, head_dim: int, heads: int) -> str:
  return flash_lib.unsupported(default_options(platform), length, head_dim, heads)


def check(options: flash_lib.FlashOptions | None, dtype=jnp.bfloat16, length: int = 128,
          dropout_rate: float = 0.1, directions=('', 'ltr'), head_dim: int = 64,
          windows=(0,), kernel: Callable | None = None) -> str:
  """'' when the kernels, compiled for `options` on the default device (or `kernel`, a path's
  function), give the explicit path's values and gradients at a run's sequence length, dtype,
  dropout, directions and local layers' windows (two rows, one of them packing two sequences and
  padding, two heads); else what went wrong."""
  kernel = kernel or functools.partial(flash_lib.flash, options=options)
  shape = (2, length, 2, head_dim)
  keys = jax.random.split(jax.random.key(0), 4)
  q, k, v, do = (jax.random.normal(key, shape, jnp.float32).astype(dtype) for key in keys)
  # one row whole, one packing two sequences and padding (masks.allowed_mask)
  positions = jnp.arange(length)[None]
  key_mask = jnp.stack([jnp.ones(length, jnp.int32), jnp.where(
      positions[0] < length // 4, 1, jnp.where(positions[0] < length // 2 + 3, 2, 0))])
  words = seed_words(jax.random.key(1)) if dropout_rate > 0 else None
  tolerance = 1e-4 if jnp.dtype(dtype) == jnp.float32 else 5e-2
  for direction, window in itertools.product(directions, windows):
    def run(fn):
      f = lambda q, k, v: fn(q, k, v, key_mask, direction=direction, dropout_rate=dropout_rate,
                             words=words, window=window).astype(jnp.float32)
      out, vjp = jax.vjp(f, q, k, v)
      return (out,) + vjp(do.astype(jnp.float32))
    got = jax.jit(lambda: run(kernel))()
    want = jax.jit(lambda: run(explicit))()
    for name, a, b in zip(('output', 'dq', 'dk', 'dv'), got, want):
      a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
      err = float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-6))
      if not np.isfinite(err) or err > tolerance:
        return (f'{name} differs from the explicit path by {err:.2g} (relative, '
                f'{direction or "both directions"}, length {length}'
                + (f', window {window})' if window else ')'))
  return ''


@functools.cache
def kernel_check(backend: str, length: int = 128, dtype: str = 'bfloat16',
                 dropout_rate: float = 0.1, directions=('', 'ltr'),
                 head_dim: int = 64, windows=(0,)) -> tuple[bool, str]:
  """(whether the kernels work on this backend at a run's shape, why not), checked once per
  process and shape. Safe to call while a step is being traced: the check runs in a thread of its
  own, outside the trace (JAX's tracing state is per thread)."""
  options = default_options(backend)
  return _in_thread(lambda: check(options, jnp.dtype(dtype), length, dropout_rate,
                                  tuple(directions), head_dim, tuple(windows)))


@functools.cache
def splash_check(backend: str, length: int = 128, dtype: str = 'bfloat16',
                 dropout_rate: float = 0.0, directions=('',), head_dim: int = 64,
                 windows=(0,)) -> tuple[bool, str]:
  """`kernel_check` of JAX's splash kernel (splash.py), without dropout (it has none)."""
  kernel = functools.partial(splash_lib.splash_sharded, platform=backend)
  return _in_thread(lambda: check(None, jnp.dtype(dtype), length, 0.0, tuple(directions),
                                  head_dim, tuple(windows), kernel=kernel))


def _in_thread(run_check) -> tuple[bool, str]:
  """(passed, why not) of `run_check()` ('' : passed), run in a thread of its own (outside any
  trace); an exception is a failure, named."""
  def run():
    try:
      return run_check()
    except Exception as e:
      return f'{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ""}'

  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    problem = pool.submit(run).result()
  return not problem, problem


@dataclasses.dataclass(frozen=True)
class Path:
  """One way to compute attention, and what the choice of `model.attention='auto'` asks of it."""
  name: str
  run: Callable  # (q, k, v, key_mask, *, direction, dropout_rate, words, platform) -> context
  dropout: bool  # it draws attention dropout (a path without runs the explicit one where needed)
  title: str = ''  # in the run's log: 'Pallas flash kernel'
  auto: Callable = lambda backend, dtype: False  # whether 'auto' may take it on this backend for
  #   activations of this dtype ('auto' takes the first of `PATHS` that may, takes the shape and
  #   passes its check)
  problem: Callable = lambda platform, length, head_dim, heads: ''  # why it does not take a shape
  check: Callable | None = None  # (platform, length, dtype, dropout rate, directions, head size,
  #   local layers' windows)
  #   -> (whether it matched the explicit path on the device, why not); None: nothing to check
  fallback: str = ''  # the path a step compiles with when the compiler rejects this one
  window: bool = True  # it takes a local layer's window (a path without runs the explicit one
  #   in local layers)


def _fused_problem(platform: str, length: int, head_dim: int, heads: int) -> str:
  """Beyond LONG tokens `jax.nn.dot_product_attention`, XLA's dense product on every platform,
  scores all keys at once: the explicit path's chunked and banded products serve instead."""
  if length <= LONG:
    return ''
  return (f'{length} tokens: on {platform} it is XLA\'s dense product, all [B, H, L, L] scores '
          f'at once, where the explicit path takes {QUERY_CHUNK} queries at a time')


def _splash_problem(platform: str, length: int, head_dim: int, heads: int) -> str:
  if platform == 'gpu':
    return 'it is a TPU (Mosaic) kernel; on GPUs the Pallas kernel takes long sequences'
  return splash_lib.unsupported(length)


def _anywhere(fn):
  """A path that runs the same on every platform."""
  return lambda q, k, v, key_mask, platform='', **kw: fn(q, k, v, key_mask, **kw)


# In the order 'auto' prefers them.
PATHS = {
    'pallas': Path('pallas', _kernel, dropout=True, title='Pallas flash kernel',
                   auto=lambda backend, dtype: backends.is_accelerator(backend),
                   problem=_kernel_problem,
                   check=lambda *a: kernel_check(*a),  # (looked up when called)
                   fallback='explicit'),
    'splash': Path('splash', splash_lib.splash_sharded, dropout=False,
                   title="JAX's splash attention kernel",
                   auto=lambda backend, dtype: backend == 'tpu', problem=_splash_problem,
                   check=lambda *a: splash_check(*a), fallback='explicit'),
    'fused': Path('fused', _anywhere(fused), dropout=False, title='jax.nn.dot_product_attention',
                  auto=lambda backend, dtype: (backends.is_accelerator(backend)
                                               and jnp.dtype(dtype).itemsize == 2),
                  problem=_fused_problem),
    'explicit': Path('explicit', _anywhere(explicit), dropout=True, title='explicit softmax',
                     auto=lambda backend, dtype: True),
}


def choices() -> tuple:
  """The values of model.attention: 'auto' and the registered paths."""
  return ('auto',) + tuple(PATHS)


def path_name(cfg, dtype, deterministic: bool, length: int = 0, head_dim: int = 64,
              heads: int = 1, window: int = 0) -> str:
  """The name of the path (`PATHS`) a layer runs.

  A run decides `model.attention='auto'` once, before it compiles (`resolve`); a model
  used outside a run (conversion, tests) decides it here the same way, checking the paths on the
  default device. A path without dropout ('fused') runs the explicit path where attention dropout
  is active, and so does a path that does not take the layer's shape ('pallas' on TPUs: heads of
  64 in an odd number). 'pallas' on a CPU runs the kernels in Pallas' interpreter (slow; tests).
  """
  active_dropout = not deterministic and cfg.attention_dropout_rate > 0
  impl = cfg.attention
  if impl == 'auto':
    impl = _auto(cfg, jnp.dtype(dtype).name, length, head_dim, heads=heads)[0]
  path = PATHS[impl]
  if (active_dropout and not path.dropout) or (window and not path.window):
    return 'explicit'
  if length and path.problem(cfg.platform or jax.default_backend(), length, head_dim, heads):
    return 'explicit'
  return impl


def _auto(cfg, dtype: str, length: int, head_dim: int, check=None,
          heads: int = 0) -> tuple[str, list]:
  """(the path model.attention='auto' takes on cfg's platform, [(a path passed over, why)]).

  The first of `PATHS` that `auto` allows on the platform for `dtype` activations, takes the
  shape and passes its check (`check(path)`; default: the path's own check on the default device
  at this shape). On CPUs only the explicit path is allowed: XLA's einsums there are faster than
  the kernel's interpreter.
  """
  backend = cfg.platform or jax.default_backend()
  if check is None:
    check = lambda path: path.check(backend, length, dtype, cfg.attention_dropout_rate,
                                    _directions(cfg), head_dim, _windows(cfg))
  passed = []
  for path in PATHS.values():
    if not path.auto(backend, dtype):
      continue
    problem = path.problem(backend, length, head_dim, heads or cfg.num_heads)
    if problem:
      passed.append((path, f'the {path.title} does not take this shape: {problem}'))
      continue
    ok, why = check(path) if path.check is not None else (True, '')
    if ok:
      return path.name, passed
    passed.append((path, why))
  return 'explicit', passed


def _directions(cfg) -> tuple:
  return cfg.generator_shape.directions


def _windows(cfg) -> tuple:
  """The windows the run's layers attend over (0: global)."""
  return tuple(sorted({0 if cfg.is_global(i) else cfg.local_window
                       for i in range(cfg.num_layers)})) if cfg.modern else (0,)


def resolve(cfg, length: int, checked=True, agree=lambda ok: ok) -> tuple:
  """(cfg with `attention` the path the run takes, the line a run logs about it ('' if none)).

  'auto' on a GPU or TPU checks each path it considers against the explicit path at the run's
  sequence length, dtype, dropout and directions on the device (`checked`), or takes it unchecked
  when the devices are not here (compiling for a TPU slice from another machine); `agree(ok)`
  returns the verdict every process takes (all must have passed), so that all hosts compile one
  program. A path forced with model.attention must take the shape.
  """
  head = cfg.hidden_size // cfg.num_heads
  backend = cfg.platform or jax.default_backend()
  if cfg.attention != 'auto':
    path = PATHS[cfg.attention]
    problem = path.problem(backend, length, head, cfg.num_heads)
    if problem:
      raise ValueError(f'model.attention={path.name}: the {path.title} does not take '
                       f'{length}-token '
                       f'sequences with heads of {head} on {backend} ({problem}); use '
                       'model.attention=auto or explicit, or a sequence length the blocks divide')
    return cfg, f'attention: {cfg.attention} (model.attention)'
  checks = []

  def check(path):
    if not checked:
      return True, ''
    ok, why = path.check(backend, length, cfg.dtype, cfg.attention_dropout_rate,
                         _directions(cfg), head, _windows(cfg))
    agreed = agree(ok)
    if ok and not agreed:
      why = 'it failed on another process'
    checks.append(path)
    return agreed, why

  impl, passed = _auto(cfg, cfg.dtype, length, head, check)
  cfg = dataclasses.replace(cfg, attention=impl)
  chosen = PATHS[impl]
  if not backends.is_accelerator(backend) and not passed:
    return cfg, ''
  if chosen.check is not None:
    how = ('matched the explicit path at this shape in its start-up check' if checked else
           f'compiled for the slice; its start-up check runs on the {backend.upper()} itself')
    return cfg, f'attention: {chosen.title} on {backend} ({how})'
  runs = chosen.title + ('' if chosen.dropout else
                         ' (the explicit softmax where attention dropout is active)')
  failed = [(path, why) for path, why in passed if path in checks]
  if failed:
    path, why = failed[0]
    return cfg, (f'warning: the {path.title} failed its check on this {backend} ({why}); '
                 f'attention runs the {runs}')
  return cfg, f'attention: {runs}' + (f' ({passed[0][1]})' if passed else '')


def note(cfg, length: int) -> str:
  """The line a run logs about its attention path ('' on a CPU with model.attention=auto)."""
  return resolve(cfg, length)[1]


def attend(cfg, q, k, v, key_mask, *, direction: str = '', deterministic: bool = True, words=None,
           initializing: bool = False, window: int = 0):
  """The layer's attention on the path `cfg` gives for this shape: q, k, v [B, L, H, D], key_mask
  [B, L]; dropout at cfg.attention_dropout_rate unless `deterministic` (its mask drawn from
  `words`); `window`: a local layer's (0: every key). While parameters are created
  (`initializing`, a few tokens) any path makes the same ones: the explicit one runs."""
  length, heads, head_dim = q.shape[1:]
  name = ('explicit' if initializing else
          path_name(cfg, jnp.dtype(cfg.dtype), deterministic, length, head_dim, heads, window))
  rate = 0.0 if deterministic else cfg.attention_dropout_rate
  extra = {'window': window} if window else {}
  return PATHS[name].run(q, k, v, key_mask, direction=direction, dropout_rate=rate, words=words,
                         platform=cfg.platform or jax.default_backend(), **extra)
