"""Each accelerator chip's datasheet values, in one table that MFU (hardware/peak.py), Cloud TPU
slices (hardware/topology.py), the compiler's cost estimate (hardware/hlo_cost.py) and the model's
recompute choice read.
A new chip is a line of `CHIPS`.
"""

import dataclasses

GiB = 2 ** 30


@dataclasses.dataclass(frozen=True)
class Chip:
  name: str  # as people write it: 'TPU v5e', 'NVIDIA H100'
  peak_flops: float  # dense bf16 FLOP/s
  hbm_bytes_per_s: float
  hbm_bytes: int = 0  # memory per chip
  device_kinds: tuple = ()  # JAX's `device_kind` of its devices ('TPU v5 lite', ...), as prefixes
  clock_hz: float = 0.0  # the TensorCore clock, which the TPU compiler's cycles count
  ici_bytes_per_s: float = 0.0  # inter-chip interconnect, per chip
  dcn_bytes_per_s: float = 25e9  # data-center network per chip's share of its host (multislice)
  # Cloud TPU slices (TPUs only)
  slice_names: tuple = ()  # gcloud's accelerator-type prefixes: 'v5litepod' for 'v5litepod-8'
  topology_prefix: str = ''  # libtpu's: 'v5e' in 'v5e:2x4'
  cores_per_chip: int = 1  # gcloud counts TensorCores for v4 / v5p (one JAX device per chip)
  torus: int = 2  # 3: v4 / v5p slices are 3-D tori; 2: v5e / v6e slices are 2-D
  # The forward pass writes GELU's derivative and the dropout masks for the backward (True) or the
  # backward recomputes them beside its matmuls (False): by XLA's TPU cost model for Base, on v6e,
  # whose matrix units are 4.7x v5e's and whose vector units are not, recomputing is what the
  # matmuls wait for; on v4 / v5 it hides under them (docs/measured.md). GPUs recompute.
  writes_for_backward: bool = False

  @property
  def family(self) -> str:
    return self.slice_names[-1] if self.slice_names else self.name


CHIPS = (
    Chip('TPU v4', 275e12, 1228e9, 32 * GiB, ('TPU v4',), clock_hz=1.05e9, ici_bytes_per_s=300e9,
         slice_names=('v4',), topology_prefix='v4', cores_per_chip=2, torus=3),
    Chip('TPU v5p', 459e12, 2765e9, 95 * GiB, ('TPU v5p', 'TPU v5'), clock_hz=1.75e9,
         ici_bytes_per_s=600e9, slice_names=('v5p',), topology_prefix='v5', cores_per_chip=2,
         torus=3),
    Chip('TPU v5e', 197e12, 819e9, 16 * GiB, ('TPU v5 lite', 'TPU v5e'), clock_hz=1.5e9,
         ici_bytes_per_s=200e9, slice_names=('v5litepod', 'v5e'), topology_prefix='v5e'),
    Chip('TPU v6e', 918e12, 1640e9, 32 * GiB, ('TPU v6 lite', 'TPU v6e'), clock_hz=1.75e9,
         ici_bytes_per_s=448e9, slice_names=('v6e',), topology_prefix='v6e',
         writes_for_backward=True),
    Chip('NVIDIA A100', 312e12, 2039e9, 80 * GiB, ('NVIDIA A100',)),
    Chip('NVIDIA H100', 989e12, 3350e9, 80 * GiB, ('NVIDIA H100',)),
    Chip('NVIDIA H200', 989e12, 4800e9, 141 * GiB, ('NVIDIA H200',)),
)


def of_device_kind(kind: str) -> Chip | None:
  """The chip whose devices JAX names `kind` ('TPU v5 lite', 'NVIDIA H100 80GB HBM3'); None for
  one not in the table (a CPU)."""
  matches = [(len(k), c) for c in CHIPS for k in c.device_kinds
             if kind.startswith(k) or k in kind]
  return max(matches, key=lambda m: m[0])[1] if matches else None


def of_slice_name(prefix: str) -> Chip | None:
  """The TPU chip of gcloud's accelerator-type prefix ('v4', 'v5litepod', 'v5e', ...)."""
  return next((c for c in CHIPS if prefix in c.slice_names), None)


def slice_names() -> list[str]:
  """gcloud's accelerator-type prefixes of the TPU chips, as help texts list them."""
  return [n for c in CHIPS for n in c.slice_names]


def writes_for_backward(platform: str, device_kind: str) -> bool:
  """The model's recompute choice on a device (see `Chip.writes_for_backward`): CPUs write (a Small
  step about 8% faster), chips as the table says."""
  if platform == 'cpu':
    return True
  chip = of_device_kind(device_kind)
  return bool(chip and chip.writes_for_backward)
