"""The device mesh and shardings: data parallelism over every device of every process, optionally
with fully sharded parameters (FSDP).

`jax.jit` over a `Mesh` with `NamedSharding` is JAX's successor of `pmap`: the batch is split along
the 'data' axis and XLA inserts the collectives. By default parameters and optimizer state are
replicated (data parallelism: one gradient all-reduce per step). With `config.fsdp` each parameter
and its Adam moments are split along one dimension over the same 'data' axis (ZeRO-3 / FSDP): a
device holds 1/N of the state, XLA all-gathers a layer's weights where they are used and
reduce-scatters the gradients. The same step, the same numbers; only the memory and the traffic
differ. `config.fsdp=None` (the default) splits the state on TPU slices of several chips, where
each chip then updates only its share (replicated, each chip's pass over the whole optimizer state
is a sizable part of the step: docs/measured.md), and replicates it on CPUs and GPUs.
"""

import re

from jax.experimental import mesh_utils
import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

DATA = 'data'

# FSDP rules: the first regex that matches a parameter's path ('discriminator/layer_0/attention/
# query/kernel') gives the dimensions to try, in order; the first one the device count divides is
# sharded. Small vectors stay replicated: splitting them saves nothing and costs a collective each.
FSDP_RULES = (
    (r'(LayerNorm|layer_norm|norm)[^/]*/(scale|bias)$', ()),
    (r'bias$', ()),
    (r'embedding$', (0, -1)),  # [rows, width]: the vocabulary (or position) rows first
    (r'kernel$', (0, -1)),  # [in, out]: the input features first, so that a share keeps whole
    #   rows: its minor dimension (768 in Base) stays a multiple of the TPU's 128 lanes, where a
    #   share of the outputs (768 / 8 = 96) made XLA lay every share out again before and after
    #   the update
    (r'.*', (0, -1)),
)


def make_mesh(devices=None) -> Mesh:
  """A 1-D 'data' mesh of `devices` (default: every device of every process). On several TPU
  slices (multislice) the devices of one slice are neighbours on the axis, the slices one after
  another, so that XLA's collectives run within slices over ICI and across them over the network."""
  devices = jax.devices() if devices is None else list(devices)
  slices = sorted({getattr(d, 'slice_index', 0) for d in devices})
  if len(slices) > 1:
    ordered = mesh_utils.create_hybrid_device_mesh((len(devices) // len(slices),), (len(slices),),
                                                   devices)
    return Mesh(ordered.reshape(-1), (DATA,), axis_types=(AxisType.Auto,))
  return jax.make_mesh((len(devices),), (DATA,), axis_types=(AxisType.Auto,), devices=devices)


def on_mesh(fn, mesh: Mesh):
  """`fn`, traced with `mesh` as the mesh in context: code that must know the mesh while it is
  traced (the attention kernels run per device under `shard_map`) finds it there."""
  def traced(*args, **kwargs):
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
      return fn(*args, **kwargs)
  return traced


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(DATA))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def _path(keys) -> str:
  names = []
  for key in keys:
    for attr in ('key', 'name', 'idx'):
      if hasattr(key, attr):
        names.append(str(getattr(key, attr)))
        break
    else:
      names.append(str(key))
  return '/'.join(names)


def leaf_spec(path: str, shape: tuple, devices: int, rules=FSDP_RULES) -> P:
  """The PartitionSpec of one state leaf under FSDP: one dimension over 'data', or replicated."""
  for pattern, dims in rules:
    if re.search(pattern, path):
      for dim in dims:
        if len(shape) >= 1 and -len(shape) <= dim < len(shape) and shape[dim] % devices == 0:
          spec: list[str | None] = [None] * len(shape)
          spec[dim] = DATA
          return P(*spec)
      return P()
  return P()


def state_shardings(state, mesh: Mesh, fsdp: bool):
  """A sharding per leaf of `state` (arrays or ShapeDtypeStructs): replicated, or FSDP's split.

  Optimizer moments have their parameter's path as a suffix and its shape, so they are split like
  it; scalars (step, counts) are replicated.
  """
  n = mesh.devices.size
  def sharding(keys, leaf):
    shape = tuple(getattr(leaf, 'shape', ()))
    if not fsdp or not shape or n == 1:
      return replicated(mesh)
    return NamedSharding(mesh, leaf_spec(_path(keys), shape, n))
  return jax.tree_util.tree_map_with_path(sharding, state)


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
