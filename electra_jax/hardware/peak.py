"""The peak FLOP/s of a mesh, the denominator of MFU: a chip's datasheet peak (platform/chips.py),
or on a CPU a matmul measured once per process.
"""

import functools
import time

import jax
import jax.numpy as jnp

from electra_jax.platform import chips


def peak_flops(device) -> float | None:
  """Peak dense bf16 FLOP/s of a device, by its kind (chips.py); None when unknown (a CPU)."""
  chip = chips.of_device_kind(getattr(device, 'device_kind', str(device)))
  return chip.peak_flops if chip else None


@functools.cache
def measure_matmul_peak(dtype: str = 'float32', n: int = 2048, repeats: int = 8) -> float:
  """Best FLOP/s of a square matmul in `dtype` with float32 accumulation on the default device
  (the peak of a CPU, for MFU); about a second, measured once per process and dtype."""
  a = jnp.ones((n, n), dtype)
  f = jax.jit(lambda x: jnp.matmul(x, x, preferred_element_type=jnp.float32))
  f(a).block_until_ready()
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    f(a).block_until_ready()
    times.append(time.perf_counter() - t)
  return 2 * n ** 3 / min(times)


def mesh_peak(devices, dtype: str) -> tuple[float, str]:
  """(peak FLOP/s of the whole mesh, where it comes from) for MFU.

  TPUs and GPUs: the datasheet's bf16 peak per chip times the chips. CPUs: a matmul measured in the
  run's dtype, times the processes (a host's CPU devices share its cores: one matmul uses them all).
  """
  devices = list(devices)
  peak = peak_flops(devices[0])
  if peak is not None:
    return peak * len(devices), f'bf16 datasheet peak x {len(devices)} devices'
  hosts = len({d.process_index for d in devices})
  return (measure_matmul_peak(str(jnp.dtype(dtype))) * hosts,
          f'measured {jnp.dtype(dtype)} 2048^3 matmul' + (f' x {hosts} hosts' if hosts > 1 else ''))
