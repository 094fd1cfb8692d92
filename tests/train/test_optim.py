"""The original AdamW, its schedule, its decay mask, its clipping."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.traverse_util import flatten_dict

from configs import small
from electra_jax.model import networks as model_lib
from electra_jax.train import optim
from electra_jax.train.config import OptimizerConfig


@pytest.mark.fast
def test_schedule_multiplies_warmup_and_decay():
  peak, warm, total = 5e-4, 100, 1000
  lr = optim.learning_rate_schedule(peak, warm, total)
  assert float(lr(0)) == 0.0
  assert float(lr(50)) == pytest.approx(peak * (1 - 50 / total) * 0.5)
  assert float(lr(100)) == pytest.approx(peak * (1 - 100 / total))  # top is peak * (1 - W/T)
  assert float(lr(400)) == pytest.approx(peak * 0.6)
  assert float(lr(1000)) == 0.0 and float(lr(5000)) == 0.0
  sq = optim.learning_rate_schedule(peak, warm, total, power=2.0)
  assert float(sq(400)) == pytest.approx(peak * 0.36)


@pytest.mark.fast
def test_warmup_then_decay_switch_reaches_the_peak():
  lr = optim.learning_rate_schedule(1.0, 100, 1100, kind='warmup_then_decay')
  assert float(lr(50)) == pytest.approx(0.5)
  assert float(lr(100)) == pytest.approx(1.0)
  assert float(lr(600)) == pytest.approx(0.5)
  assert float(lr(1100)) == 0.0
  with pytest.raises(ValueError, match='optimizer.schedule'):
    optim.learning_rate_schedule(1.0, 1, 10, kind='cosine')


@pytest.mark.fast
def test_a_schedule_that_cannot_train_as_meant_is_said():
  """Steps past decay_steps run at learning rate 0; under the original schedule a warm-up over the
  whole run reaches a quarter of the peak (t/T * (1 - t/T) at t = T/2), over half of it a half."""
  from electra_jax.config.pretraining import default_config
  o = default_config().optimizer
  o.update(learning_rate=1e-4, warmup_steps=100, decay_steps=1000)
  assert optim.schedule_warnings(o, 1000, 'w', 'fix') == []
  assert optim.highest_rate(o, 1000) == pytest.approx(0.9)
  late = optim.schedule_warnings(o, 1500, 'w', 'fix')
  assert late == ['optimizer.decay_steps=1000 is below the 1500 training steps: the learning rate '
                  'is 0 from step 1001 on, so the last 500 steps change nothing; set decay_steps '
                  'to the training steps (its default) or train fewer steps']
  lr = optim.learning_rate_schedule(1e-4, 100, 1000)
  assert float(lr(999)) > 0 and float(lr(1000)) == 0.0  # the 1001st update
  o.warmup_steps = 1000
  assert optim.highest_rate(o, 1000) == pytest.approx(0.25, abs=1e-6)
  assert optim.schedule_warnings(o, 1000, 'optimizer.warmup_fraction=1', 'fix it') == [
      'the learning rate never rises above 25% of its peak 0.0001: optimizer.warmup_fraction=1 '
      "warms up over 1000 of 1000 steps, and the schedule 'original' multiplies the warm-up by "
      'the decay; fix it']
  o.warmup_steps = 500  # a half: not said
  assert optim.highest_rate(o, 1000) == pytest.approx(0.5) and not optim.schedule_warnings(
      o, 1000, 'w', 'fix')
  o.update(warmup_steps=1000, schedule='warmup_then_decay')
  assert optim.highest_rate(o, 1000) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.fast
def test_weight_decay_skips_layer_norm_and_biases_but_not_embeddings():
  cfg = model_lib.ModelConfig.from_config(small.get_config().model)
  shapes = jax.eval_shape(lambda k: model_lib.init_params(cfg, k), jax.random.key(0))
  mask = optim.weight_decay_mask(shapes)
  assert mask['embeddings']['word_embeddings'] and mask['embeddings']['position_embeddings']
  assert not mask['embeddings']['LayerNorm']['scale']
  assert not mask['embeddings']['LayerNorm']['bias']
  layer = mask['discriminator']['layer_3']
  assert layer['query']['kernel'] and not layer['query']['bias']
  assert not layer['attention_LayerNorm']['scale'] and not layer['output_LayerNorm']['bias']
  assert not mask['generator_predictions']['output_bias']
  assert not mask['generator_predictions']['LayerNorm']['scale']


@pytest.mark.fast
def test_adam_without_bias_correction_matches_the_original_update():
  c = small.get_config().optimizer
  c.update(learning_rate=0.1, warmup_steps=0, decay_steps=10**9, grad_clip_norm=0.0)
  tx, _ = optim.make_optimizer(OptimizerConfig.from_config(c))
  params = {'dense': {'kernel': jnp.array([1.0, -2.0]), 'bias': jnp.array([0.5])}}
  grads_seq = [{'dense': {'kernel': jnp.array([0.3, -0.1]), 'bias': jnp.array([0.2])}},
               {'dense': {'kernel': jnp.array([-0.2, 0.4]), 'bias': jnp.array([0.1])}}]
  state = tx.init(params)
  m = {k: np.zeros_like(v) for k, v in params['dense'].items()}
  v = {k: np.zeros_like(x) for k, x in params['dense'].items()}
  expected = {k: np.asarray(x, np.float64) for k, x in params['dense'].items()}
  for grads in grads_seq:
    updates, state = tx.update(grads, state, params)
    params = optax.apply_updates(params, updates)
    for k in expected:
      g = np.asarray(grads['dense'][k])
      m[k] = 0.9 * m[k] + 0.1 * g
      v[k] = 0.999 * v[k] + 0.001 * g * g
      step = m[k] / (np.sqrt(v[k]) + 1e-6)
      if k == 'kernel':
        step = step + 0.01 * expected[k]
      expected[k] = expected[k] - 0.1 * step
  for k in expected:
    np.testing.assert_allclose(params['dense'][k], expected[k], rtol=1e-5)


@pytest.mark.fast
def test_bias_correction_switch_and_clipping():
  c = small.get_config().optimizer
  c.update(learning_rate=1.0, warmup_steps=0, decay_steps=10**9, weight_decay=0.0,
           bias_correction=True, grad_clip_norm=1.0)
  tx, _ = optim.make_optimizer(OptimizerConfig.from_config(c))
  params = {'w': jnp.zeros(4)}
  updates, _ = tx.update({'w': jnp.array([300.0, 0.0, 0.0, 400.0])}, tx.init(params), params)
  # first bias-corrected Adam step is -lr * sign(g) (up to eps), whatever the clip did
  np.testing.assert_allclose(updates['w'], [-1.0, 0.0, 0.0, -1.0], atol=1e-4)
  clip = optax.clip_by_global_norm(1.0)
  clipped, _ = clip.update({'w': jnp.array([300.0, 0.0, 0.0, 400.0])}, clip.init(params))
  assert float(optax.global_norm(clipped)) == pytest.approx(1.0)


@pytest.mark.fast
def test_clipping_takes_the_callers_norm_and_equals_optax():
  """optim.clip_by_global_norm is optax's arithmetic bit for bit, with the norm computed or given
  (the train step gives the one it has); a given norm is the one used."""
  grads = {'a': jax.random.normal(jax.random.key(0), (5, 3)) * 3.0,
           'b': jax.random.normal(jax.random.key(1), (7,))}
  norm = optax.tree.norm(grads)
  for max_norm in (1.0, 100.0):  # clipped, and left alone
    want, _ = optax.clip_by_global_norm(max_norm).update(grads, optax.EmptyState())
    clip = optim.clip_by_global_norm(max_norm)
    for got, _ in (clip.update(grads, clip.init(grads)),
                   clip.update(grads, clip.init(grads), global_norm=norm)):
      for k in grads:
        np.testing.assert_array_equal(got[k], want[k])
  scaled, _ = optim.clip_by_global_norm(1.0).update(grads, optax.EmptyState(), global_norm=2 * norm)
  assert float(optax.tree.norm(scaled)) == pytest.approx(0.5)  # divided by the given norm


def test_the_word_table_learns_faster_by_its_factor_and_nothing_else_does():
  """Fine-tuning's optimizer.word_table_lr: the word embeddings move that many times as far in a
  step (weight decay included); the position and token-type tables, the LayerNorm and every other
  parameter move as before."""
  from conftest import test_config
  cfg = model_lib.ModelConfig.from_config(test_config().model)
  params = model_lib.init_params(cfg, jax.random.key(0))
  factors = optim.layerwise_multipliers(params, cfg.num_layers, 0.8)
  grads = jax.tree.map(lambda p: jax.random.normal(jax.random.key(p.size), p.shape), params)
  opt = OptimizerConfig(learning_rate=1e-3, warmup_steps=0, decay_steps=10, weight_decay=0.01,
                        grad_clip_norm=1.0)

  def update(lr_factors):
    tx, _ = optim.make_optimizer(opt, lr_factors=lr_factors)
    return flatten_dict(jax.jit(lambda: tx.update(grads, tx.init(params), params)[0])(), sep='/')

  before = update(factors)
  after = update(optim.with_word_table_factor(factors, 10.0))
  assert {'embeddings/word_embeddings', 'embeddings/position_embeddings'} <= set(before)
  for name, u in before.items():
    np.testing.assert_allclose(after[name], u * (10.0 if name == 'embeddings/word_embeddings'
                                                 else 1.0), rtol=1e-6, err_msg=name)


def test_the_trapezoid_schedule_warms_up_holds_and_cools_down():
  lr = optim.learning_rate_schedule(2.0, 100, 1000, kind='trapezoid', cooldown_fraction=0.2)
  values = np.asarray(lr(np.arange(1001)))
  np.testing.assert_allclose(values[[0, 50, 100]], [0.0, 1.0, 2.0], atol=1e-6)
  assert np.all(values[100:801] == 2.0)  # the stable phase, to the start of the last 200 steps
  np.testing.assert_allclose(values[[900, 1000]], [1.0, 0.0], atol=1e-6)
  assert np.all(np.diff(values[800:]) < 0)
