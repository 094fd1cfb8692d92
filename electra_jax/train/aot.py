"""Ahead-of-time compilation of a run's programs: their memory per device, the fewest microbatches
whose step fits, and, for a TPU slice compiled from another machine, the compiler's estimate of
the step's time.

    python launch/train.py --config=configs/base.py --workdir=$W --topology=v5e-8
        -> compiling.compile_for_topology -> report(...) below: per program, compiled or the
           compiler's error, HBM per chip against the chip's, the largest batch that fits, and the
           estimated step time, tokens/s, MFU and costliest operations (hlo_cost.py)

The same `fit_microbatches` picks `microbatches=0` (auto) on real GPUs and TPUs before a run.
"""

import dataclasses
import math
import re
import time
from typing import Callable

import jax
import numpy as np

from electra_jax.hardware import hlo_cost
from electra_jax.platform import chips as chips_lib

MARGIN = 0.95  # a step fits when its memory is at most this share of the device's
GiB = 2 ** 30


@dataclasses.dataclass
class Memory:
  """One device's bytes for a compiled program, from XLA's buffer assignment."""
  state: int  # parameters and optimizer state (its share under FSDP)
  batch: int  # the batch's rows on this device
  temporaries: int  # activations kept for the backward pass, gradients, workspace
  code: int  # the program itself
  outputs: int  # outputs not written in place of a donated argument

  @property
  def total(self) -> int:
    return self.state + self.batch + self.temporaries + self.code + self.outputs

  def describe(self, capacity: float | None = None) -> str:
    gib = lambda n: f'{n / GiB:.2f}'
    parts = (f'state {gib(self.state)} + batch {gib(self.batch)} + temporaries '
             f'{gib(self.temporaries)} + code {gib(self.code)}'
             + (f' + outputs {gib(self.outputs)}' if self.outputs else ''))
    total = f'{gib(self.total)} GiB'
    if capacity:
      total += f' of {capacity / GiB:.0f} GiB ({100 * self.total / capacity:.0f}%)'
    return f'{total} = {parts}'


def shard_bytes(tree) -> int:
  """Bytes of one device's piece of every leaf (ShapeDtypeStructs or arrays with shardings)."""
  total = 0
  for leaf in jax.tree.leaves(tree):
    shape = leaf.sharding.shard_shape(leaf.shape) if getattr(leaf, 'sharding', None) else leaf.shape
    total += int(np.prod(shape)) * leaf.dtype.itemsize
  return total


def memory(compiled, state=None, batch=None) -> Memory | None:
  """`compiled`'s memory on one device (None where the backend keeps no statistics). `state` and
  `batch` are its arguments (abstract or real) by role; what remains of the arguments is batch."""
  try:
    a = compiled.memory_analysis()
  except Exception:
    a = None
  if a is None:
    return None
  state_bytes = shard_bytes(state) if state is not None else 0
  batch_bytes = max(0, a.argument_size_in_bytes - state_bytes)
  return Memory(state=state_bytes, batch=batch_bytes, temporaries=a.temp_size_in_bytes,
                code=a.generated_code_size_in_bytes,
                outputs=max(0, a.output_size_in_bytes - a.alias_size_in_bytes))


def device_memory_limit(device=None) -> int | None:
  """The allocator's limit on a GPU or TPU in bytes; on CPUs the host's memory available now
  (Linux's MemAvailable) shared by this process's CPU devices; None where unknown."""
  device = device or jax.devices()[0]
  if device.platform == 'cpu':
    available = host_available_bytes()
    return available // max(1, jax.local_device_count()) if available else None
  try:
    stats = device.memory_stats() or {}
  except Exception:
    stats = {}
  return stats.get('bytes_limit')


def host_available_bytes() -> int | None:
  """The memory the host can give this process now without swapping (Linux's MemAvailable, and a
  cgroup's limit less its use where lower), or None where unknown."""
  try:
    with open('/proc/meminfo') as f:
      available = next(int(l.split()[1]) * 1024 for l in f if l.startswith('MemAvailable:'))
  except (OSError, StopIteration, ValueError, IndexError):
    return None
  try:  # (a container's limit: cgroup v2)
    with open('/sys/fs/cgroup/memory.max') as f:
      limit = f.read().strip()
    with open('/sys/fs/cgroup/memory.current') as f:
      used = int(f.read().strip())
    if limit.isdigit():
      available = min(available, int(limit) - used)
  except (OSError, ValueError):
    pass
  return max(available, 0)


class DoesNotFit(ValueError):
  """The step does not fit the device by microbatches alone; the message names what would."""


_UNITS = {'': 1, 'K': 2 ** 10, 'M': 2 ** 20, 'G': 2 ** 30, 'T': 2 ** 40}


def out_of_memory(error: Exception) -> tuple | None:
  """(bytes required, bytes available) when `error` is the compiler refusing a program that does
  not fit the device's memory (XLA's TPU compiler checks at compile time), else None; also None
  for a kernel that outgrows a core's scoped VMEM (the kernel's limit, not the device's memory:
  its path's fallback serves)."""
  text = str(error)
  if 'RESOURCE_EXHAUSTED' not in text and 'Ran out of memory' not in text:
    return None
  if 'ScopedVmemOom' in text or 'memory space vmem' in text:
    return None
  size = lambda n, u: float(n) * _UNITS[u]
  used = re.search(r'Used ([\d.]+)([KMGT]?)i?B? of ([\d.]+)([KMGT]?)i?B? hbm', text)
  if used:  # "Ran out of memory in memory space hbm. Used 20.93G of 15.48G hbm."
    return size(*used.group(1, 2)), size(*used.group(3, 4))
  # "the total memory required for HLO temporaries (64.00G) exceeds available HBM (31.25G)"
  sizes = [size(n, u) for n, u in re.findall(r'\(([\d.]+)([KMGT]?)i?B?\)', text)]
  return (sizes[0], sizes[1]) if len(sizes) >= 2 else (float('inf'), float('nan'))


def fit_microbatches(compile_step: Callable, batch_size: int, devices: int, limit: int | None,
                     state, log=print):
  """(microbatches, compiled step, its Memory) for `microbatches=0`: the fewest parts of the global
  batch whose compiled step fits `limit` bytes per device (1 without a limit).

  `compile_step(m)` compiles the step with m microbatches; `state` is its first argument (abstract
  or real). Temporaries shrink with the rows per part, except about two float32 copies of this
  device's parameters (gradients and their sum), so the first compile predicts the number; further
  compiles confirm it (or double it).
  """
  options = [m for m in range(1, batch_size // devices + 1) if batch_size % (devices * m) == 0]
  param_bytes = shard_bytes(state.params)
  state_bytes = shard_bytes(state)

  def attempt(m):  # (compiled or None, its memory): a program the compiler refused as too large
    try:  #           counts as its reported need
      compiled = compile_step(m)
    except Exception as e:
      need = out_of_memory(e)
      if need is None:
        raise
      return None, Memory(state_bytes, 0, int(min(need[0], 2 ** 62)) - state_bytes, 0, 0)
    return compiled, memory(compiled, state)

  compiled, used = attempt(1)
  if limit is None or used is None or (compiled is not None and used.total <= MARGIN * limit):
    return 1, compiled, used
  budget = MARGIN * limit
  fixed = used.state + used.code + used.outputs + min(used.temporaries, 2 * param_bytes)
  scaling = used.temporaries - min(used.temporaries, 2 * param_bytes) + used.batch
  if budget <= fixed:
    raise DoesNotFit(f'the parameters and optimizer state alone take {fixed / GiB:.1f} GiB of the '
                     f'{limit / GiB:.1f} GiB per device; set --config.fsdp=True to split them over '
                     'the devices')
  want = math.ceil(scaling / (budget - fixed))
  tried = {1: used}
  m = next((o for o in options if o >= want), options[-1])
  while True:
    log(f'microbatches=auto: {used.total / GiB:.1f} GiB per device with {max(tried)} part(s), '
        f'more than {budget / GiB:.1f}; compiling {m}')
    compiled, used = attempt(m)
    tried[m] = used
    if compiled is not None and used.total <= budget:
      return m, compiled, used
    larger = [o for o in options if o > m]
    if not larger:
      raise DoesNotFit(f'the step needs {used.total / GiB:.1f} GiB per device even in '
                       f'{m} microbatches of one row per device, more than {budget / GiB:.1f}; set '
                       '--config.model.remat=True, --config.fsdp=True or a smaller '
                       '--config.data.batch_size')
    m = next((o for o in larger if o >= 2 * m), larger[-1])


def largest_batch(used: Memory, rows_per_device: int, limit: float, microbatches: int = 1) -> int:
  """The largest rows per device that fit `limit`, supposing the batch and temporaries grow in
  proportion to the rows (an estimate from one compiled program; 0 when none fit): a multiple of
  8 rows per microbatch (a TPU tile's sublanes) where one fits, else of the microbatches (long
  sequences: a few rows a chip)."""
  fixed = used.state + used.code + used.outputs
  per_row = (used.batch + used.temporaries) / max(rows_per_device, 1)
  if per_row <= 0:
    return 0
  rows = max(0, int((MARGIN * limit - fixed) / per_row))
  step = 8 * microbatches if rows >= 8 * microbatches else microbatches
  return rows // step * step


def timed_compile(lower: Callable) -> tuple:
  """(compiled program or None, seconds, the compiler's error in one line or '')."""
  t = time.perf_counter()
  try:
    return lower().compile(), time.perf_counter() - t, ''
  except Exception as e:
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    first = next((l for l in lines if 'memory' in l.lower()), lines[0] if lines else '')
    return None, time.perf_counter() - t, f'{type(e).__name__}: {first}'[:400]


def report(name: str, compiled, seconds: float | None, error: str, args, capacity: float, log,
           problems: list, fix: str) -> Memory | None:
  """Logs one program compiled for a slice (its memory per chip against `capacity`, or why it did
  not compile) and adds to `problems` what stops the run on the slice (`fix`: what to change when
  it does not fit). The line every topology compile prints, pre-training and fine-tuning alike."""
  took = f' in {seconds:.0f} s' if seconds is not None else ''
  if compiled is None:
    log(f'{name}: does not compile{took}: {error}')
    problems.append(f'the {name} does not compile ({error})')
    return None
  used = memory(compiled, args)
  if used is None:  # (a backend that keeps no memory statistics)
    log(f'{name}: compiled{took} | HBM per chip: not reported by this backend')
    return None
  fits = used.total <= MARGIN * capacity
  log(f'{name}: compiled{took} | HBM per chip {used.describe(capacity)}'
      + ('' if fits else ' | does NOT fit'))
  if not fits:
    problems.append(f'the {name} needs {used.total / GiB:.1f} GiB per chip of '
                    f'{capacity / GiB:.0f}; {fix}')
  return used


def estimate_lines(compiled, chip: chips_lib.Chip, devices_per_slice: int, num_slices: int,
                   model_flops: float, tokens: int, chips: int, top: int = 10) -> tuple:
  """(lines describing the estimated step, the numbers as a dict) of a compiled TPU step."""
  est = hlo_cost.estimate(compiled.as_text(), chip, devices_per_slice, num_slices)
  ms = lambda s: f'{1e3 * s:.1f} ms'
  src = est.by_source
  mfu = model_flops / (est.seconds * chips * chip.peak_flops) if est.seconds else float('nan')
  lines = [
      f'estimated step (an estimate from XLA\'s TPU cost model, not a measurement): '
      f'{ms(est.seconds)} = operations the compiler estimated {ms(src.get("compiler", 0))} + '
      f'Pallas kernels {ms(src.get("kernel", 0))} (roofline of their declared FLOPs and bytes) + '
      f'collectives {ms(src.get("collective", 0))} (at link bandwidth, none overlapped) + '
      f'operations without an estimate {ms(src.get("roofline", 0))} (roofline of their FLOPs and '
      'bytes)'
      + (f'; {est.unknown_loops} loop(s) of unknown trip count counted once'
         if est.unknown_loops else ''),
      f'  -> {tokens / est.seconds:,.0f} tokens/s, MFU {100 * mfu:.1f}% (model FLOPs '
      f'{model_flops / 1e12:.2f} T per step over {chips} x {chip.peak_flops / 1e12:.0f} TFLOP/s '
      f'{chip.name} bf16 peak)' + (': above 100%, so the cost model missed part of the program; '
                                   'do not use this estimate' if mfu > 1 else ''),
      '  kernels per step: ' + kernel_counts(est.kernels()),
      f'  the {top} costliest operations (estimated ms per step, share, executions, how '
      'estimated, JAX operation):']
  for row in est.top(top):
    lines.append(f'    {1e3 * row["seconds"]:8.2f} {100 * row["seconds"] / est.seconds:5.1f}% '
                 f'{row["count"]:5.0f}x  {row["source"]:10s} {row["kind"]:12s} {row["what"]}')
  numbers = {'step_s': est.seconds, 'by_source_s': src, 'tokens_per_s': tokens / est.seconds,
             'mfu': mfu, 'model_flops': model_flops, 'top': est.top(top),
             'unknown_loops': est.unknown_loops, 'kernels': est.kernels()}
  return lines, numbers


def kernel_counts(kernels: dict) -> str:
  """'1,234 (fusions 1,000, Pallas kernels 48, collectives 2, matmuls 180, other 4)'."""
  names = {'fusions': 'fusions', 'pallas': 'Pallas kernels', 'collectives': 'collectives',
           'matmuls': 'matmuls', 'other': 'other'}
  return (f'{kernels["total"]:,} (' + ', '.join(f'{names[k]} {kernels[k]:,}' for k in names)
          + ')')
