"""The highest MFU XLA's TPU cost model allows an ELECTRA train step: its matmuls, each compiled
alone for the chip, and nothing else.

The step's estimate (train/aot.py, hardware/hlo_cost.py) sums the compiler's cost of every
operation. How much of the gap to the chip's peak is the matmuls' own? Each matmul the step does
(the encoder's and the generator's projections, the heads, the vocabulary projection, forward, input
gradient and weight gradient, as `step_flops.step_matmul_flops` counts them) is compiled by itself
for one chip of the slice at the step's shapes per chip, and the compiler's estimates are summed;
attention's score and context products run in the flash kernel and count at the chip's peak. A step
doing these matmuls is estimated no faster than that sum, so the sum bounds the step's estimated
MFU: a bound for this arrangement of the matmuls (Q, K and V counted as one matmul, the cheaper
way), not for every rewrite of them. It is an estimate of an estimate: nothing runs on a TPU.

    python -m benchmarks.matmul_ceiling --config=configs/base.py --topology=v6e-8
"""

import dataclasses

import jax
import jax.numpy as jnp

from electra_jax.hardware import compile_cache, hlo_cost
from electra_jax.platform import chips as chips_lib
from electra_jax.pretraining import step_flops as step_flops_lib


@dataclasses.dataclass(frozen=True)
class Matmul:
  what: str  # e.g. 'discriminator FFN in'
  m: int  # rows (tokens per chip)
  k: int  # contracted
  n: int  # columns
  count: int  # times per step

  @property
  def flops(self) -> float:
    return 2.0 * self.m * self.k * self.n


def _projections(name, layers, width, inter, tokens):
  # Q, K and V as one matmul of three times the width, the cheaper of the two alone; inside the
  # step the copies around it cost more (docs/measured.md), so the model does three: the bound is
  # the lower for it
  return [Matmul(f'{name} Q, K, V (as one)', tokens, width, 3 * width, layers),
          Matmul(f'{name} attention output', tokens, width, width, layers),
          Matmul(f'{name} FFN in', tokens, width, inter, layers),
          Matmul(f'{name} FFN out', tokens, inter, width, layers)]


def forward_matmuls(cfg, seq_len: int, rows: int, predictions: int) -> tuple[list, float]:
  """([Matmul] of one forward pass of the ELECTRA step over `rows` examples, the forward FLOPs of
  attention's score and context products): the shapes behind `step_flops.step_matmul_flops`."""
  h, e, v, s = cfg.hidden_size, cfg.embedding_size, cfg.vocab_size, seq_len
  t, p = rows * s, rows * predictions
  out = _projections('discriminator', cfg.num_layers, h, cfg.intermediate_size, t)
  attention = cfg.num_layers * 2 * 2 * h * s * t
  if e != h:
    out.append(Matmul('discriminator embedding projection', t, e, h, 1))
  out += [Matmul('detection head dense', t, h, h, 1), Matmul('detection head logit', t, h, 1, 1)]
  hg = cfg.generator_hidden_size
  eg = cfg.generator_shape.embedding_width(cfg)
  inter = cfg.generator_intermediate_size
  out += _projections('generator', cfg.generator_num_layers, hg, inter, t)
  attention += cfg.generator_num_layers * 2 * 2 * hg * s * t
  if eg != hg:
    out.append(Matmul('generator embedding projection', t, eg, hg, 1))
  out += [Matmul('MLM head dense', p, hg, eg, 1), Matmul('MLM decoder (vocabulary)', p, eg, v, 1)]
  return out, float(attention)


def _lone_seconds(device, chip: chips_lib.Chip, kind: str, m: int, k: int, n: int) -> float:
  """The compiler's estimate for one matmul alone on `device`: 'forward' x[m,k] @ w[k,n] -> bf16,
  'input grad' g[m,n] @ w[k,n]^T -> bf16, 'weight grad' x[m,k]^T @ g[m,n] -> float32."""
  bf16, f32 = jnp.bfloat16, jnp.float32
  fn, shapes = {
      'forward': (lambda x, w: x @ w, [(m, k), (k, n)]),
      'input grad': (lambda g, w: g @ w.T, [(m, n), (k, n)]),
      'weight grad': (lambda x, g: jnp.dot(x.T, g, preferred_element_type=f32), [(m, k), (m, n)]),
  }[kind]
  sharding = jax.sharding.SingleDeviceSharding(device)
  args = [jax.ShapeDtypeStruct(shape, bf16, sharding=sharding) for shape in shapes]
  return hlo_cost.estimate(jax.jit(fn).lower(*args).compile().as_text(), chip, 1).seconds


def ceiling(cfg, seq_len: int, batch_size: int, predictions: int, microbatches: int,
            slice_) -> dict:
  """The matmul-only estimate of one ELECTRA step of the global batch on `slice_` (topology.Slice):
  rows per chip and microbatch as the data-parallel step splits them. Times are per step (every
  microbatch); `lines`: (Matmul, its seconds per step)."""
  chip, device = slice_.chip, slice_.devices()[0]
  chips = slice_.chips * slice_.num_slices
  parts = max(microbatches, 1)
  rows = batch_size // chips // parts
  matmuls, attention = forward_matmuls(cfg, seq_len, rows, predictions)
  cache, lines, total = {}, [], 0.0
  with compile_cache.off():
    for mm in matmuls:
      seconds = 0.0
      for kind in ('forward', 'input grad', 'weight grad'):
        key = (kind, mm.m, mm.k, mm.n)
        if key not in cache:
          cache[key] = _lone_seconds(device, chip, kind, mm.m, mm.k, mm.n)
        seconds += cache[key]
      lines.append((mm, seconds * mm.count * parts))
      total += seconds * mm.count * parts
  attention_seconds = 3 * attention / chip.peak_flops * parts
  per_step = total + attention_seconds
  model_flops = step_flops_lib.step_matmul_flops(cfg, seq_len, batch_size, predictions)
  return dict(seconds=per_step, matmul_seconds=total, attention_seconds=attention_seconds,
              rows=rows, parts=parts, mfu=model_flops / (chips * chip.peak_flops * per_step),
              model_flops=model_flops, ideal_seconds=model_flops / (chips * chip.peak_flops),
              lines=lines)
