"""The device mesh and shardings: data parallelism over every device of every process.

`jax.jit` over a `Mesh` with `NamedSharding` is JAX's successor of `pmap`: the batch is split along
the 'data' axis, parameters and optimizer state are replicated, and XLA inserts the gradient
all-reduce.
"""

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

DATA = 'data'


def make_mesh(devices=None) -> Mesh:
  devices = jax.devices() if devices is None else list(devices)
  return jax.make_mesh((len(devices),), (DATA,), axis_types=(AxisType.Auto,), devices=devices)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(DATA))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def check_batch_size(batch_size: int, mesh: Mesh, what: str = 'data.batch_size',
                     microbatches: int = 1):
  n = mesh.devices.size
  if microbatches > 1 and batch_size % (n * microbatches):
    k = n * microbatches
    raise ValueError(f'{what}={batch_size} does not split into microbatches={microbatches} equal '
                     f'parts on {n} devices; use a multiple of {k} (e.g. '
                     f'{max(k, batch_size // k * k)}) or fewer microbatches')
  if batch_size % n:
    raise ValueError(f'{what}={batch_size} does not divide among {n} devices; use a multiple of '
                     f'{n} (e.g. {max(n, batch_size // n * n)})')
