"""The host's freed memory kept for the next step, on runs on the CPU.

XLA's CPU runtime allocates a program's temporaries at each run and frees them after it. glibc's
malloc gives a worker thread's allocation above its mmap threshold (32 MB at most) a mapping of its
own, returned at the free, and the kernel zero-fills every page of the next one at its first touch:
a tiny pre-training step's 70 MB of temporaries cost about 17,000 page faults, a Base fine-tuning
step's about 180,000, on every step (docs/speed.md has the numbers). `keep_freed` has glibc serve
every thread from the one heap and keep what is freed there (mallopt: one arena, no mappings of
their own, up to 2 GB kept free at the heap's top), so a step reuses the last step's pages. The
cost: the process holds its peak of host memory instead of giving it back between steps.

Only where JAX will run on the CPU (JAX_PLATFORMS names it first, or JAX's own probes of the machine
find no TPU chip and no NVIDIA or AMD GPU): an accelerator's temporaries are in its own memory, and
a TPU host's many input threads keep their arenas. Where glibc's malloc was configured in the
environment (MALLOC_* or a glibc.malloc tunable in GLIBC_TUNABLES), that is left as it is; without
glibc, nothing is done. Processes this one starts inherit the same settings (the same variables,
which glibc reads at start), so a peer compared in a child process runs with the same allocator.
"""

import ctypes
import os
import platform

# (hardware_utils is None in another JAX: glibc is left as it is)
from electra_jax.platform.private import hardware_utils

_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8  # glibc's malloc.h
_KEEP = ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1))
# The same for a child process, as glibc reads them from its environment at start.
ENVIRONMENT = {'MALLOC_ARENA_MAX': '1', 'MALLOC_MMAP_MAX_': '0',
               'MALLOC_TRIM_THRESHOLD_': str(2**31 - 1)}


def cpu_run() -> bool:
  """Whether JAX will run this process's programs on the CPU."""
  platforms = os.environ.get('JAX_PLATFORMS', '').strip()
  if platforms:
    return platforms.split(',')[0].strip() == 'cpu'
  try:
    return not (hardware_utils.num_available_tpu_chips_and_device_id()[0]
                or hardware_utils.has_visible_nvidia_gpu()
                or hardware_utils.num_available_amd_gpus(stop_at=1))
  except (AttributeError, OSError, TypeError):  # (probes moved or changed: unknown, left alone)
    return False


def configured() -> bool:
  """Whether glibc's malloc was configured in the environment (this process's or its parent's)."""
  return (any(k.startswith('MALLOC_') for k in os.environ)
          or 'glibc.malloc.' in os.environ.get('GLIBC_TUNABLES', ''))


def keep_freed() -> bool:
  """Has glibc keep freed memory for reuse (the module's note) where this process runs on the
  CPU; returns whether it does now. Call it before JAX starts its backend: a thread that already
  has an arena of its own keeps it."""
  if configured():
    return all(os.environ.get(k) == v for k, v in ENVIRONMENT.items())
  if platform.libc_ver()[0] != 'glibc' or not cpu_run():
    return False
  try:
    mallopt = ctypes.CDLL(None).mallopt
  except (OSError, AttributeError):
    return False
  if not all(mallopt(option, value) == 1 for option, value in _KEEP):
    return False
  os.environ.update(ENVIRONMENT)
  return True
