"""The step's programs (train/step.py's compile_steps): the seed is their argument."""

import dataclasses
import functools

import jax
import numpy as np

from conftest import test_config
from electra_jax.config.pretraining import parse
from electra_jax.pretraining import setup as pretrain_setup
from electra_jax.data.synthetic import synthetic_batch
from electra_jax.data.tokenizer import SPECIAL
from electra_jax.train import partitioning
from electra_jax.train import step as step_lib


def test_every_seed_runs_one_program_and_gets_the_numbers_of_its_seed_compiled_in():
  """Two seeds lower to the same init and train programs (a fine-tuning's seeds are traced,
  compiled and kept once), and each gives the state and metrics of the step with its seed a
  constant of the program, as the step was compiled before: the same random draws (the initial
  state to the bit), the step's floats to their rounding (XLA fuses the two programs apart: one
  element in 32 of a bias 1 ulp off). The seeds' numbers differ."""
  config = test_config()  # dropout on: the train key is used
  mesh = partitioning.make_mesh(jax.devices()[:1])
  batch = {k: jax.device_put(v, partitioning.batch_sharding(mesh)) for k, v in synthetic_batch(
      config.data.batch_size, 32, config.model.vocab_size).items()}
  first = pretrain_setup.build_setup(parse(config), SPECIAL)
  runs = []
  for setup in (first, dataclasses.replace(first, seed=first.seed + 1)):
    init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
    texts = (init_fn.lower().as_text(), train_fn.lower(init_fn(), batch).as_text())
    start = init_fn()
    constant = jax.jit(functools.partial(step_lib.init_state, setup))()
    for a, b in zip(jax.tree.leaves(start), jax.tree.leaves(constant), strict=True):
      np.testing.assert_array_equal(a, b)
    got = train_fn(start, batch)
    want = jax.jit(functools.partial(step_lib.train_step, setup))(constant, batch)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)
    runs.append((texts, got))
  (texts_a, a), (texts_b, b) = runs
  assert texts_a == texts_b  # one program for both seeds
  assert any(not np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_the_init_programs_shapes_are_known_without_tracing_it_and_are_its_own():
  """compile_steps' init program gives its outputs' shapes, dtypes and shardings from the state's
  shapes it already has (a Base pre-training's start traced its initializers once more for them):
  those a trace of the program gives, replicated, under FSDP over 8 devices, and with weights
  given as arguments."""
  setup = pretrain_setup.build_setup(parse(test_config()), SPECIAL)
  given = setup.init_params(jax.random.key(9))
  for devices, variant in ((1, {}), (8, {'fsdp': True}),
                           (8, {'init_params': lambda key, p: p, 'init_args': (given,)})):
    mesh = partitioning.make_mesh(jax.devices()[:devices])
    init_fn = step_lib.compile_steps(dataclasses.replace(setup, **variant), mesh)[0]
    known, traced = init_fn.eval_shape(), init_fn.fn.eval_shape(*init_fn.args)
    assert jax.tree.structure(known) == jax.tree.structure(traced)
    for a, b in zip(jax.tree.leaves(known), jax.tree.leaves(traced), strict=True):
      assert (a.shape, a.dtype, a.sharding) == (b.shape, b.dtype, b.sharding), (a, b)
  assert any(len(x.sharding.device_set) == 8 and not x.sharding.is_fully_replicated
             for x in jax.tree.leaves(step_lib.compile_steps(dataclasses.replace(
                 setup, fsdp=True), partitioning.make_mesh())[0].eval_shape()))
