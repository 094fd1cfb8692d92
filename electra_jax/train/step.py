"""The step: TrainState, the one `train_step` of every objective and of fine-tuning, `eval_step`,
and their compilation over a mesh.

    global batch -> loss_fn(params, batch, rng) -> gradients -> NaN/Inf guard -> optimizer
    -> new state + metric sums (summed on the device; the loop reads them at log intervals)

Every random choice of step t comes from fold_in(key(seed), t): a run is reproducible and a resumed
run continues exactly. The bits do not depend on how arrays are sharded because JAX's threefry is
partitionable (`jax_threefry_partitionable`, JAX's default since 0.5;
tests/pretraining/test_train.py checks that eight devices step as one).
"""

import dataclasses
import functools
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

from electra_jax.model import networks as model_lib
from electra_jax.train import metrics as metrics_lib
from electra_jax.train import partitioning


# ================================================================================================
# State and steps
# ================================================================================================

@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any
  nonfinite_steps: jax.Array  # steps whose loss or gradient norm was NaN/Inf (not applied)
  first_nonfinite: jax.Array  # the first such step, -1 if none


@dataclasses.dataclass(frozen=True)
class Setup:
  """Everything static a run needs, built once from the config and the vocabulary's ids.

  Pre-training and fine-tuning differ only here: their models, losses and initial parameters
  (pre-training's adds its objective: pretraining/setup.py).
  """
  model_cfg: model_lib.ModelConfig
  model: Any
  tx: optax.GradientTransformation
  schedule: Callable
  loss_fn: Callable  # (params, batch, rng, deterministic) -> (loss, metric sums)
  seed: int
  init_params: Callable  # key -> parameters
  draw: Callable | None = None  # (rng, global batch) -> what the loss draws once for the whole
  #   batch (pre-training's masking, sampling numbers and loss normalizers), given to each
  #   microbatch's loss as `draws=`: its `rowwise()` arrays split by rows with the batch and put
  #   back by `with_rowwise(parts)`
  microbatches: int = 1  # gradient accumulation: sequential parts of the global batch per step
  fsdp: bool | None = False  # parameters and optimizer state split over the devices
  #   (partitioning.py); None: decided for the mesh (`uses_fsdp`)
  param_shardings: Any = None  # set by compile_steps: gradients are kept in the parameters' layout
  check_update: bool = True  # the NaN guard also computes the update's norm (False where
  #   `optim.bounds_updates`: a finite gradient norm already makes every update finite)
  param_shapes: Any = None  # what `init_params` returns, as shapes, where already known
  init_args: tuple = ()  # arrays `init_params` takes after the key (a fine-tuning's pre-trained
  #   parameters): arguments of the init program, not constants compiled into it (which would
  #   make its cached program as large as the model and its key the weights')


def _keys(seed: int):
  init_key, train_key, eval_key = jax.random.split(jax.random.key(seed), 3)
  return init_key, train_key, eval_key


def init_state(setup: Setup, *init_args) -> TrainState:
  return _state_of(setup.tx, setup.init_params(_keys(setup.seed)[0], *init_args))


def _state_of(tx: optax.GradientTransformation, params) -> TrainState:
  zero = jnp.zeros((), jnp.int32)
  return TrainState(zero, params, tx.init(params), zero, zero - 1)


def state_shapes(setup: Setup) -> TrainState:
  """`init_state`'s shapes, from `setup.param_shapes` where known (no trace of the model's
  initializers)."""
  if setup.param_shapes is None:
    return jax.eval_shape(functools.partial(init_state, setup), *setup.init_args)
  return shapes_of_state(setup.tx, setup.param_shapes)


def shapes_of_state(tx: optax.GradientTransformation, param_shapes) -> TrainState:
  """The shapes of the state that `tx` trains parameters of `param_shapes` with (a saved run's
  layout, read without its setup)."""
  return jax.eval_shape(functools.partial(_state_of, tx), param_shapes)


def train_step(setup: Setup, state: TrainState, batch: dict) -> tuple[TrainState, dict]:
  """One optimizer step on one global batch: the same function for every objective and mesh."""
  rng = jax.random.fold_in(_keys(setup.seed)[1], state.step)
  (loss, metrics), grads = _gradients(setup, state.params, batch, rng)
  grads = _like_params(setup, grads)
  grad_norm = optax.tree.norm(grads)  # the clipping's norm too (optim.clip_by_global_norm)
  # NaN/Inf guard, without a host sync: a step whose loss, gradient norm or update is not finite
  # leaves parameters, optimizer state and metric sums as they were, and is counted; the loop reads
  # the count at log time. Clipped, a finite gradient norm makes every update finite
  # (`optim.bounds_updates`): the flag is known before the update, and a select of each new value
  # or the old one fuses into the update's own elementwise passes, in place on the donated state,
  # with no conditional in the program (which XLA's GPU command buffers would leave out, running
  # the update kernel by kernel). Unclipped, a finite gradient can still make a non-finite update
  # (through the learning rate or Adam's moments): its norm is needed before anything is written,
  # so the update is computed twice (its norm here, and again in a conditional branch that applies
  # it), and no second copy of the optimizer state is ever alive.
  update = functools.partial(setup.tx.update, global_norm=grad_norm)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)

  def apply(params, opt_state):
    updates, opt_state = update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  if setup.check_update:
    finite &= jnp.isfinite(optax.tree.norm(update(grads, state.opt_state, state.params)[0]))
    params, opt_state = jax.lax.cond(finite, apply, lambda p, o: (p, o), state.params,
                                     state.opt_state)
  else:
    params, opt_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old),
                                     apply(state.params, state.opt_state),
                                     (state.params, state.opt_state))
  metrics = jax.tree.map(lambda m: jnp.where(finite, m, jnp.zeros_like(m)), metrics)
  metrics['grad_norm'] = metrics_lib.ratio(jnp.where(finite, grad_norm, 0.0), finite)
  metrics['learning_rate'] = metrics_lib.ratio(setup.schedule(state.step), 1.0)
  bad = jnp.logical_not(finite).astype(jnp.int32)
  metrics['nonfinite_steps'] = metrics_lib.ratio(bad, 1.0)  # summed: a count per log interval
  first = jnp.where((state.first_nonfinite < 0) & (bad > 0), state.step + 1, state.first_nonfinite)
  return TrainState(state.step + 1, params, opt_state, state.nonfinite_steps + bad, first), metrics


def _gradients(setup: Setup, params, batch: dict, rng: jax.Array):
  """((loss, metric sums), gradients) of the global batch.

  With `setup.microbatches` = M > 1 the batch runs in M sequential parts (`lax.scan`) whose
  gradients and metric sums add up: activations of only B / M rows are alive at a time. Masking,
  the sampling numbers and every loss denominator are drawn once for the whole batch, so the sum is
  the whole batch's loss and gradient (up to float32 summation order); dropout masks are drawn per
  part. Part k takes rows k, k + M, k + 2M, ...: every device holds an equal share of each part.
  """
  grad_fn = jax.value_and_grad(lambda p, *a, **k: setup.loss_fn(_gathered(setup, p), *a, **k),
                               has_aux=True)
  m = setup.microbatches
  if m == 1:
    return grad_fn(params, batch, rng)
  assert setup.draw is not None, 'a setup of several microbatches draws once for the whole batch'
  draws = setup.draw(rng, batch)

  def split(x):  # [B, ..] -> [M, B / M, ..]
    return x.reshape((x.shape[0] // m, m) + x.shape[1:]).swapaxes(0, 1)

  def part(k, rows, rowwise):
    return grad_fn(params, rows, jax.random.fold_in(rng, k), draws=draws.with_rowwise(rowwise))

  def body(total, xs):
    (loss, metrics), grads = part(*xs)
    return jax.tree.map(jnp.add, total, ((loss, metrics), _like_params(setup, grads))), None

  xs = (jnp.arange(m), *jax.tree.map(split, (batch, draws.rowwise())))
  zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype),
                       jax.eval_shape(part, *jax.tree.map(lambda x: x[0], xs)))
  ((loss, metrics), grads), _ = jax.lax.scan(body, zeros, xs)
  metrics['loss'] = metrics_lib.ratio(loss, 1.0)  # a sum of parts, not a mean of M ratios
  return (loss, metrics), grads


def _gathered(setup: Setup, params):
  """Under FSDP, the whole parameters for the forward pass (all-gathered once per step; the
  gradient of the gather is a reduce-scatter). Left to itself, XLA may instead gather the batch's
  activations to meet the split weights, which costs far more memory."""
  if setup.param_shardings is None:
    return params
  whole = jax.tree.map(lambda s: NamedSharding(s.mesh, PartitionSpec()), setup.param_shardings)
  return jax.lax.with_sharding_constraint(params, whole)


def _like_params(setup: Setup, grads):
  """Gradients in the parameters' layout: under FSDP, XLA then reduce-scatters them and the
  optimizer updates each device's share only (unconstrained, it may keep whole copies)."""
  if setup.param_shardings is None:
    return grads
  return jax.lax.with_sharding_constraint(grads, setup.param_shardings)


def eval_step(setup: Setup, params, batch: dict, index: jax.Array) -> dict:
  """Held-out metrics without dropout; masking and sampling keys depend on the batch index only."""
  rng = jax.random.fold_in(_keys(setup.seed)[2], index)
  return setup.loss_fn(_gathered(setup, params), batch, rng, deterministic=True)[1]


@jax.jit
def accumulate(total, new):
  return jax.tree.map(jnp.add, total, new)


def uses_fsdp(setup: Setup, mesh) -> bool:
  """Whether the run splits its state over the mesh: config.fsdp, or where it is None (auto), on
  TPU slices of more than one chip."""
  if setup.fsdp is not None:
    return bool(setup.fsdp)
  return mesh.devices.size > 1 and mesh.devices.flat[0].platform == 'tpu'


def compile_steps(setup: Setup, mesh):
  """(init, train_step, eval_step) jitted over the mesh: batch split on 'data', state replicated
  (or split by FSDP's rules, `uses_fsdp`)."""
  data = partitioning.batch_sharding(mesh)
  repl = partitioning.replicated(mesh)
  setup = dataclasses.replace(setup, fsdp=uses_fsdp(setup, mesh))
  shapes = state_shapes(setup)
  state = partitioning.state_shardings(shapes, mesh, bool(setup.fsdp))
  if setup.fsdp:
    setup = dataclasses.replace(setup, param_shardings=state.params)
  # The seed is the programs' first argument, not a constant compiled into them: a fine-tuning's
  # seeds run one program (traced and compiled once), and the numbers are the same.
  on_mesh = lambda fn: partitioning.on_mesh(functools.partial(_seeded(fn), setup), mesh)
  seed = _seed_argument(setup.seed, repl)
  init = _Bound(jax.jit(on_mesh(init_state), out_shardings=state), (seed,) + jax.tree.map(
      # replicated over the mesh: every process passes its whole copy
      lambda a: jax.make_array_from_process_local_data(repl, np.asarray(a)),
      tuple(setup.init_args)), shapes=jax.tree.map(
          lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), shapes, state))
  train = jax.jit(on_mesh(train_step), in_shardings=(repl, state, data),
                  out_shardings=(state, repl), donate_argnums=(1,))
  evaluate = jax.jit(on_mesh(eval_step), in_shardings=(repl, state.params, data, repl),
                     out_shardings=repl)
  return init, _Bound(train, (seed,)), _Bound(evaluate, (seed,))


def _seeded(fn):
  """`fn(setup, ...)` as `fn(setup, seed, ...)`: the seed a traced argument in place of setup's."""
  return lambda setup, seed, *args: fn(dataclasses.replace(setup, seed=seed), *args)


def _seed_argument(seed: int, replicated):
  """The seed as the programs take it: an array on every device of the mesh, or its shape where
  the devices are not this machine's (a TPU slice compiled for here: lowered, never run)."""
  if not set(replicated.mesh.devices.flat) <= set(jax.devices()):
    return jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated)
  return jax.make_array_from_process_local_data(replicated, np.asarray(seed, np.int32))


class _Bound:
  """A program, jitted, lowered or compiled, with its first arguments bound (the seed; an init
  program's pre-trained weights): called, lowered and compiled with the others alone; the rest
  (memory and cost analyses, text) is the program's."""

  def __init__(self, fn, args: tuple, shapes=None):
    self.fn, self.args, self.shapes = fn, args, shapes  # (the outputs', where known)

  def __call__(self, *rest):
    return self.fn(*self.args, *rest)

  def lower(self, *rest):
    return _Bound(self.fn.lower(*self.args, *rest), self.args)

  def compile(self, *args, **kwargs):
    return _Bound(self.fn.compile(*args, **kwargs), self.args)

  def eval_shape(self, *rest):
    """The outputs' shapes, dtypes and shardings (`jax.eval_shape` of a bound program would
    leave out the shardings): an init program's known ones, not traced again."""
    if self.shapes is not None and not rest:
      return self.shapes
    return self.fn.eval_shape(*self.args, *rest)

  def __getattr__(self, name):
    if name in ('fn', 'args', 'shapes'):  # (not yet set: copied or unpickled)
      raise AttributeError(name)
    return getattr(self.fn, name)
