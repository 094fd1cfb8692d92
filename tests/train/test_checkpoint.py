"""Checkpoint rotation (the latest K plus the best by a metric) and refusals of other shapes."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train.step import TrainState


def _state(step, width=4):
  zero = jnp.zeros((), jnp.int32)
  params = {'encoder': {'kernel': jnp.full((3, width), float(step)), 'bias': jnp.zeros(width)}}
  return TrainState(jnp.asarray(step, jnp.int32), params, {'mu': params}, zero, zero - 1)


@pytest.mark.fast
@pytest.mark.parametrize('metric, mode, values, best', [
    ('disc_auc', 'max', [0.60, 0.90, 0.70, 0.65, 0.80, 0.75], 20),
    ('mlm_loss', 'min', [3.0, 2.0, 1.5, 2.5, 1.8, 1.9], 30),
])
def test_keeps_the_latest_k_plus_the_best_and_still_does_after_reopening(
    tmp_path, metric, mode, values, best):
  directory = str(tmp_path / 'c')
  ckpt = checkpoint_lib.Checkpointer(directory, keep=2, best_metric=metric, best_mode=mode)
  for i, value in enumerate(values[:3], start=1):
    ckpt.save(10 * i, _state(i), {'step': 10 * i}, metrics={metric: value, 'other': float('nan')})
    ckpt.save(10 * i + 5, _state(i), {'step': 10 * i + 5})  # no metrics: never the best
  ckpt.close()
  ckpt = checkpoint_lib.Checkpointer(directory, keep=2, best_metric=metric, best_mode=mode)
  for i, value in enumerate(values[3:], start=4):  # a resumed run goes on rotating
    ckpt.save(10 * i, _state(i), {'step': 10 * i}, metrics={metric: value})
  assert ckpt.best_step() == best
  assert sorted(ckpt.all_steps()) == sorted({best, 50, 60})
  step, state, meta = ckpt.restore_latest(_state(0))
  ckpt.close()
  assert step == 60 and meta == {'step': 60}
  np.testing.assert_array_equal(state.params['encoder']['kernel'], np.full((3, 4), 6.0))


@pytest.mark.fast
def test_a_read_of_some_parameters_reads_those_alone(tmp_path):
  """`only` reads the named parts of the parameters (a fine-tuning's start: the discriminator, not
  the generator or the optimizer's moments): their saved values, and every other field left as
  the target's shapes."""
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'c'))
  state = _state(3)
  state = state.replace(params={**state.params, 'generator': {'kernel': jnp.ones((5, 2))}})
  ckpt.save(3, state, {'step': 3})
  ckpt.wait()
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  empty = _state(0).replace(params={**_state(0).params, 'generator': {'kernel': jnp.zeros((5, 2))}})
  target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device), empty)
  step, read, meta = ckpt.restore_latest(target, log=pytest.fail, only=('encoder',))
  ckpt.close()
  assert step == 3 and meta == {'step': 3} and list(read.params) == ['encoder']
  np.testing.assert_array_equal(read.params['encoder']['kernel'], np.full((3, 4), 3.0))
  assert isinstance(read.params['encoder']['kernel'], jax.Array)
  assert all(isinstance(x, jax.ShapeDtypeStruct)
             for x in jax.tree.leaves((read.step, read.opt_state)))


@pytest.mark.fast
def test_without_a_best_metric_only_the_latest_k_stay(tmp_path):
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'c'), keep=3)
  for step in range(1, 7):
    ckpt.save(step, _state(step), {}, metrics={'disc_auc': 1.0 / step})
  assert ckpt.best_step() is None
  ckpt.close()
  assert sorted(int(p) for p in os.listdir(tmp_path / 'c')) == [4, 5, 6]


@pytest.mark.fast
def test_a_model_of_other_shapes_is_refused_naming_the_parameters(tmp_path):
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'c'))
  ckpt.save(1, _state(1, width=4), {})
  ckpt.save(2, _state(2, width=4), {})
  ckpt.close()
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'c'))
  with pytest.raises(checkpoint_lib.ShapeMismatch) as e:
    ckpt.restore_latest(_state(0, width=8), log=pytest.fail)  # no "damaged" fallback
  ckpt.close()
  assert str(e.value).startswith(f'the checkpoint {tmp_path}/c/2 holds a model of other shapes')
  assert 'encoder/bias (4,) in the checkpoint, (8,) in this config; encoder/kernel (3, 4)' in str(
      e.value)


@pytest.mark.fast
def test_describe_mismatch_names_missing_extra_and_counts_the_rest():
  saved = {'a': (1,), 'b': (2,), 'c': (3,), 'd': (4,), 'e': (5,)}
  wanted = {'a': (1,), 'b': (3,), 'c': (4,), 'd': (5,), 'x': (1,)}
  assert checkpoint_lib.describe_mismatch(saved, wanted) == (
      'b (2,) in the checkpoint, (3,) in this config; c (3,) in the checkpoint, (4,) in this '
      'config; d (4,) in the checkpoint, (5,) in this config and 2 more')
  assert checkpoint_lib.describe_mismatch({'a': (1,)}, {'b': (1,)}) == (
      'a only in the checkpoint; b not in the checkpoint')


@pytest.mark.fast
def test_a_replicated_state_is_saved_in_slices_only_where_arrays_are_large(tmp_path):
  """Small replicated arrays are written whole by one replica: Orbax's replica-parallel slicing
  (one compiled slice per array and device) is kept for arrays of 1 MiB slices and more."""
  import jax
  from jax.sharding import NamedSharding, PartitionSpec
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ('data',))
  replicated = NamedSharding(mesh, PartitionSpec())
  # shapes no other test saves (so nothing is compiled already), with a width the 8 replicas
  # divide: by default each small array would be saved in 8 slices of 3 values
  small = _state(7, width=24)
  large = {'table': jnp.arange(8 * 2 ** 18, dtype=jnp.float32).reshape(8, 2 ** 18)}  # 8 MiB
  state = jax.device_put(small.replace(opt_state=large), replicated)
  assert len(jax.devices()) == 8 and state.params['encoder']['kernel'].sharding.is_fully_replicated
  events = []
  jax.monitoring.register_event_duration_secs_listener(
      lambda name, *_, **__: events.append(name) if name.startswith('/jax/') else None)
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'c'))
  ckpt.save(7, state, {'step': 7})
  ckpt.wait()
  lowered = [e for e in events if 'jaxpr_to_mlir_module' in e]
  ckpt.close()
  # the 8 MiB table is sliced (8 slices of 1 MiB, a program each), the small arrays are not
  # (2 x 8 more programs)
  assert 1 <= len(lowered) <= 8, lowered
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'c'))
  restored, meta = ckpt.restore(7, state)
  ckpt.close()
  assert meta == {'step': 7}
  for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
    assert a.sharding.is_fully_replicated
    np.testing.assert_array_equal(a, b)
