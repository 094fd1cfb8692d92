"""Several processes, one program: JAX's multi-controller runtime (`jax.distributed`).

One process per host (or per group of devices); they meet at a coordinator, see one global list of
devices and run the same compiled step on one global mesh, each feeding its rows of every batch.
On Cloud TPU pod slices, SLURM jobs and Open MPI launches JAX finds the coordinator, the process
count and this process's index itself; elsewhere they are given as three flags. Must run before
anything touches a JAX device.

CPU processes exchange arrays over gloo. Orbax's checkpoint barriers go through the coordination
service (not through a device collective), so a save waits for slow processes as long as it must.
"""

import importlib
import os

import jax
from jax.experimental import multihost_utils
import numpy as np
from absl import flags

from electra_jax.platform import private


def detected_cluster() -> str | None:
  """The name of the multi-process launcher this process runs under, or None."""
  env = os.environ
  if ',' in env.get('TPU_WORKER_HOSTNAMES', ''):
    return 'Cloud TPU pod slice'
  if int(env.get('SLURM_NTASKS', '1') or 1) > 1 and 'SLURM_STEP_ID' in env:
    return 'SLURM'
  if int(env.get('OMPI_COMM_WORLD_SIZE', '1') or 1) > 1:
    return 'Open MPI'
  return None


HEARTBEAT_TIMEOUT_S = 90


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None,
               heartbeat_timeout_s: int = HEARTBEAT_TIMEOUT_S) -> str | None:
  """Joins the run's other processes; returns how (None: a single-process run, nothing done).

  A process that dies is noticed by the others within `heartbeat_timeout_s` (they then fail
  instead of waiting forever in a collective). Shorter timeouts notice sooner; longer ones leave
  room for a host that stalls (swapping, a slow disk).
  """
  if heartbeat_timeout_s < 5:
    raise ValueError(f'--heartbeat_timeout_s={heartbeat_timeout_s} is too short to tell a slow '
                     'process from a dead one; give at least 5 (default 90)')
  given = [v is not None for v in (coordinator_address, num_processes, process_id)]
  if any(given) and not all(given):
    raise ValueError('--coordinator_address, --num_processes and --process_id go together; give '
                     'all three (or none, on a TPU pod slice or under SLURM)')
  how = 'flags' if all(given) else detected_cluster()
  if how is None:
    return None
  if num_processes is not None and process_id is not None:  # (all three given)
    if num_processes < 1 or not 0 <= process_id < num_processes:
      raise ValueError(f'--process_id={process_id} is not one of 0..{num_processes - 1} '
                       f'(--num_processes={num_processes})')
    if num_processes == 1:
      return None
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  importlib.import_module('orbax.checkpoint')  # defines the flag set below
  if 'experimental_orbax_use_distributed_barrier' in flags.FLAGS:
    if not flags.FLAGS.is_parsed():  # a library caller, not a launch script
      flags.FLAGS.mark_as_parsed()
    setattr(flags.FLAGS, 'experimental_orbax_use_distributed_barrier', True)
  jax.distributed.initialize(coordinator_address, num_processes, process_id,
                             heartbeat_timeout_seconds=heartbeat_timeout_s)
  return how


BARRIER_TIMEOUT_S = 3600
_barriers: dict[str, int] = {}


def barrier(name: str, timeout_s: int = BARRIER_TIMEOUT_S):
  """Waits until every process gets here, through the coordination service (no-op for one process).

  Device collectives on CPU (gloo) give a process 30 s to join the first exchange of a group of
  devices: on a loaded host one process can finish compiling or restoring a minute after the other,
  and the run aborted (`Gloo context initialization failed: DEADLINE_EXCEEDED`). A barrier here
  waits as long as `timeout_s`; a process that died is still noticed within the heartbeat timeout.
  Where this JAX keeps its client elsewhere (platform/private.py), JAX's public
  `multihost_utils.sync_global_devices` meets instead (a device collective: gloo's 30 s on CPUs).
  """
  if jax.process_count() == 1:
    return
  _barriers[name] = _barriers.get(name, 0) + 1  # each use of a barrier gets its own id
  client = private.coordination_client()
  if client is None:
    multihost_utils.sync_global_devices(f'electra_{name}_{_barriers[name]}')
    return
  client.wait_at_barrier(f'electra_{name}_{_barriers[name]}', timeout_in_ms=timeout_s * 1000)


def is_main() -> bool:
  """True in the process that logs and writes files (process 0)."""
  return jax.process_index() == 0


def all_agree(ok: bool, name: str) -> bool:
  """True when `ok` is True in every process (one verdict for all, e.g. whether the attention
  kernel passed its check, so that every host compiles the same program). Through the
  coordination service's key-value store: no device program is compiled for it; where this JAX
  keeps its client elsewhere, through JAX's public `multihost_utils.process_allgather`."""
  if jax.process_count() == 1:
    return ok
  client = private.coordination_client()
  if client is None:
    return bool(np.all(multihost_utils.process_allgather(np.asarray(ok, np.int32))))
  _barriers[name] = _barriers.get(name, 0) + 1
  key = f'electra_agree_{name}_{_barriers[name]}'
  client.key_value_set(f'{key}/{jax.process_index()}', '1' if ok else '0')
  votes = [client.blocking_key_value_get(f'{key}/{p}', BARRIER_TIMEOUT_S * 1000)
           for p in range(jax.process_count())]
  return all(v == '1' for v in votes)
