"""The private parts of JAX and Orbax this package reaches, all of them, each with why no public API
serves. Tested with jax 0.10.2 and 0.12.0.1, orbax-checkpoint 0.12.8 (`tests/test_structure.py`
imports each on every run); where another version moves one, it is None here and its user keeps
the library's default behaviour.

    hardware_utils        JAX's probes of the machine's TPU chips and GPUs, which run without
                          starting a backend. Public `jax.devices()` starts the backend, and the
                          choices made before it (glibc's allocator for a CPU run, libtpu's
                          environment on a machine without TPU chips) can no longer be made.
    coordination_client() jax.distributed's client of the coordination service: a barrier with a
                          timeout of our choosing and a key-value vote, with no device program
                          compiled. JAX's public `multihost_utils.sync_global_devices` is a device
                          collective, which on CPUs (gloo) gives a late process 30 s to join;
                          train/distributed.py falls back to it (and to `process_allgather` for
                          the vote) where this is None.
    array_metadata_store() Orbax's default store of array metadata, which its public
                          ArrayHandler needs as an argument when one is made with another slice
                          size (train/checkpoint.py: small replicated arrays written whole);
                          imported when asked for, so that commands that write no checkpoint
                          (prepare_data.py, build_vocab.py) do not load Orbax.
"""

try:
  from jax._src import hardware_utils
except ImportError:
  hardware_utils = None  # type: ignore[assignment]

try:
  from jax._src import distributed as _jax_distributed
except ImportError:
  _jax_distributed = None  # type: ignore[assignment]



def coordination_client():
  """The coordination service's client of this process (jax.distributed.initialize's), or None
  where there is none or this JAX keeps it elsewhere."""
  state = getattr(_jax_distributed, 'global_state', None)
  return getattr(state, 'client', None)


def array_metadata_store():
  """Orbax's module of its default array metadata store, or None where this Orbax keeps it
  elsewhere."""
  try:
    from orbax.checkpoint._src.metadata import array_metadata_store as store
  except ImportError:
    return None
  return store
