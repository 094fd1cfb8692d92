"""Cloud TPU slices by the names gcloud gives them, as compile-only devices on any machine.

    slice('v5e-8') -> Slice(chip 'TPU v5 lite', 8 chips on 1 host, topology 'v5e:2x4')
    slice('v4-32').devices() -> 16 compile-only TPU v4 devices (4 hosts), for `jax.jit(...).lower(
        ...).compile()` with `jax[tpu]` installed: XLA's TPU compiler runs here, no TPU needed.

Names as `gcloud compute tpus tpu-vm create --accelerator-type` writes them: v4-N and v5p-N count
TensorCores (two per chip, one JAX device per chip: megacore), v5litepod-N (also v5e-N) and v6e-N
count chips. Chip values are datasheet numbers.
"""

import dataclasses
import importlib.util
import os
import re
import sys

from jax.experimental import topologies

from electra_jax.platform import chips as chips_lib

GiB = chips_lib.GiB

# chips -> (3-D torus shape of v4 / v5p slices)
_CUBES = {4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4), 64: (4, 4, 4),
          128: (4, 4, 8), 256: (4, 8, 8), 512: (8, 8, 8), 1024: (8, 8, 16), 2048: (8, 16, 16)}
# chips -> 2-D shape of v5e / v6e slices
_PLANES = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8), 128: (8, 16),
           256: (16, 16)}


@dataclasses.dataclass(frozen=True)
class Slice:
  name: str  # as given, e.g. 'v5litepod-8'
  family: str  # the chip's shortest gcloud name: 'v4', 'v5p', 'v5e', 'v6e'
  chips: int
  hosts: int
  topology: str  # as libtpu names it, e.g. 'v5e:2x4'
  num_slices: int = 1

  @property
  def chip(self) -> chips_lib.Chip:
    return _chip(self.family)

  @property
  def device_kind(self) -> str:
    return self.chip.device_kinds[0]

  @property
  def hbm_bytes(self) -> int:
    return self.chip.hbm_bytes

  @property
  def label(self) -> str:
    return f'{self.num_slices} x {self.name}' if self.num_slices > 1 else self.name

  def describe(self) -> str:
    slices = f'{self.num_slices} slices of ' if self.num_slices > 1 else ''
    hosts = self.hosts * self.num_slices
    return (f'{slices}{self.name}: {self.chips} x {self.device_kind} ({self.topology}), '
            f'{hosts} host{"s" if hosts > 1 else ""}, {self.hbm_bytes / GiB:.0f} GiB HBM per chip')

  def devices(self) -> list:
    """The compile-only devices of the slice(s), in the order the mesh takes them."""
    # Before libtpu loads: no metadata server to ask (else it prints a page of warnings), and no
    # machine-wide lock (/tmp/libtpu_lockfile), which would keep two compiling processes apart.
    for key, value in (('TPU_SKIP_MDS_QUERY', '1'), ('ALLOW_MULTIPLE_LIBTPU_LOAD', '1'),
                       ('TPU_ACCELERATOR_TYPE', self.name), ('TPU_WORKER_HOSTNAMES', 'localhost')):
      os.environ.setdefault(key, value)
    try:
      three_d = self.chip.torus == 3
      per_host = (2, 2, 1) if self.hosts > 1 or self.chips == 4 else (
          (1, 1, 1) if self.chips == 1 else (2, 4, 1))
      topo = topologies.get_topology_desc(
          topology_name=self.topology, platform='tpu',
          chip_config_name='megacore' if three_d else 'default', chips_per_host_bounds=per_host,
          num_slices=self.num_slices, wrap=(False, False, False))
    except Exception as e:
      first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise ValueError(f'cannot make the compile-only devices of {self.name} ({first}); install '
                       'the TPU compiler with pip install -e ".[tpu]"') from None
    return sorted(topo.devices, key=lambda d: (getattr(d, 'slice_index', 0), d.id))


def _chip(prefix: str) -> chips_lib.Chip:
  """The chip of a slice name's prefix, one that chips.slice_names lists."""
  chip = chips_lib.of_slice_name(prefix)
  assert chip is not None, f'{prefix} is not a slice name of chips.py'
  return chip


def for_compiling(name: str, num_slices: int = 1) -> Slice:
  """The slice `name` to compile for on this machine (--topology): JAX kept on the CPU when it has
  not started yet (no accelerator here is touched), libtpu's metadata query skipped; ValueError
  (one sentence) for a name that is no slice, or without the TPU compiler (libtpu)."""
  if 'jax' not in sys.modules:
    os.environ.setdefault('JAX_PLATFORMS', 'cpu')
  os.environ.setdefault('TPU_SKIP_MDS_QUERY', '1')
  slice_ = parse(name, num_slices)
  if importlib.util.find_spec('libtpu') is None:
    raise ValueError('--topology compiles with the TPU compiler, which is not installed; '
                     'pip install -e ".[tpu]" (jax[tpu] brings libtpu)')
  return slice_


def parse(name: str, num_slices: int = 1, flag: str = '--topology') -> Slice:
  """The slice `name` ('v4-8', 'v5litepod-16', 'v5e-8', 'v5p-8', 'v6e-8', 'v4-32', ...); `flag`:
  the flag that gave it, in the error's sentence."""
  names = sorted(chips_lib.slice_names(), key=len, reverse=True)
  m = re.fullmatch(rf'({"|".join(names)})-(\d+)', name.strip().lower())
  if not m:
    raise ValueError(f'{flag}={name!r} is not a Cloud TPU accelerator type; use one such as '
                     f'{", ".join(f"{n}-8" for n in chips_lib.slice_names())} or a larger slice '
                     '(v4-32, v5e-32)')
  chip, count = _chip(m.group(1)), int(m.group(2))
  family = chip.family
  if num_slices < 1:
    raise ValueError(f'--num_slices={num_slices}; give 1 or more slices')
  if chip.torus == 3:
    chips = count // chip.cores_per_chip
    if count % chip.cores_per_chip or chips not in _CUBES:
      sizes = ', '.join(f'{family}-{chip.cores_per_chip * c}' for c in sorted(_CUBES))
      raise ValueError(f'{name} is not a {family} slice this tool knows; use one of {sizes}')
    shape: tuple[int, ...] = _CUBES[chips]
    hosts = max(1, chips // 4)
  else:
    chips = count
    if chips not in _PLANES:
      sizes = ', '.join(f'{family}-{c}' for c in sorted(_PLANES))
      raise ValueError(f'{name} is not a {family} slice this tool knows; use one of {sizes}')
    shape = _PLANES[chips]
    hosts = 1 if chips <= 8 else chips // 4
  topology = f'{chip.topology_prefix}:{"x".join(str(s) for s in shape)}'
  return Slice(name, family, chips, hosts, topology, num_slices)
