"""The networks: exact parameter counts, sharing, generator variants, dtypes, loss at init."""

import functools
import math
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import base, large, small, tiny
from conftest import test_config
from electra_jax.model import attention
from electra_jax.model import networks as model_lib
from electra_jax.model import layers
from electra_jax.model import attention_masks
from electra_jax.objectives import common as objective_common
from electra_jax.objectives import electra as electra_objective
from electra_jax.platform import chips
from electra_jax.data.synthetic import synthetic_batch
from electra_jax.data.tokenizer import SPECIAL


def _count(tree):
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))


def _shapes(model_cfg):
  cfg = model_lib.ModelConfig.from_config(model_cfg)
  return jax.eval_shape(lambda k: model_lib.init_params(cfg, k), jax.random.key(0))


@pytest.mark.fast
@pytest.mark.parametrize('preset, encoder, with_head', [
    (small, 13_483_008, 13_549_057),
    (base, 108_891_648, 109_483_009),
    (large, 334_092_288, 335_142_913),
])
def test_discriminator_parameter_counts(preset, encoder, with_head):
  p = _shapes(preset.get_config().model)
  assert _count(p['embeddings']) + _count(p['discriminator']) == encoder
  assert (_count(p['embeddings']) + _count(p['discriminator']) +
          _count(p['discriminator_predictions'])) == with_head


@pytest.mark.fast
def test_generator_sizes_follow_the_fractions():
  for preset, hidden in ((small, 64), (base, 256), (large, 256)):
    cfg = model_lib.ModelConfig.from_config(preset.get_config().model)
    assert cfg.generator_hidden_size == hidden
    assert cfg.generator_num_heads == max(1, hidden // 64)
    assert cfg.generator_num_layers == cfg.num_layers
  plus = model_lib.ModelConfig.from_config(small.get_config('plus').model)
  assert plus.generator_hidden_size == 256  # Small++ has a full-width generator
  p = _shapes(small.get_config().model)
  assert p['generator']['layer_0']['intermediate']['kernel'].shape == (64, 256)
  assert p['generator']['embeddings_project']['kernel'].shape == (128, 64)
  assert p['generator_predictions']['dense']['kernel'].shape == (64, 128)  # back to E
  assert p['generator_predictions']['output_bias'].shape == (30522,)


@pytest.mark.fast
def test_presets_carry_their_whole_column():
  rows = {  # layers, hidden, ffn, heads, E, gen hidden, mask_prob, N, lr, batch, seq, steps
      small: (12, 256, 1024, 4, 128, 64, 0.15, 19, 5e-4, 128, 128, 1_000_000),
      base: (12, 768, 3072, 12, 768, 256, 0.15, 79, 2e-4, 256, 512, 766_000),
      large: (24, 1024, 4096, 16, 1024, 256, 0.25, 130, 2e-4, 2048, 512, 400_000),
  }
  for preset, row in rows.items():
    c = preset.get_config()
    m = model_lib.ModelConfig.from_config(c.model)
    got = (m.num_layers, m.hidden_size, m.intermediate_size, m.num_heads, m.embedding_size,
           m.generator_hidden_size, c.objective.mask_prob, c.objective.max_predictions,
           c.optimizer.learning_rate, c.data.batch_size, c.data.max_seq_length, c.train_steps)
    assert got == row, preset.__name__
    assert c.optimizer.warmup_steps == 10_000 and c.objective.disc_weight == 50.0
  assert large.get_config('plus').train_steps == 1_750_000
  assert small.get_config('plus').data.max_seq_length == 512
  with pytest.raises(ValueError, match='unknown variant'):
    small.get_config('huge')
  assert tiny.get_config().model.vocab_size > 0


@pytest.mark.fast
def test_one_embedding_module_is_shared():
  p = _shapes(small.get_config().model)
  assert set(p) == {'embeddings', 'discriminator', 'discriminator_predictions', 'generator',
                    'generator_predictions'}
  assert set(p['embeddings']) == {'word_embeddings', 'position_embeddings',
                                  'token_type_embeddings', 'LayerNorm'}
  assert 'embeddings_project' in p['discriminator']  # E=128 != H=256
  assert 'embeddings_project' not in _shapes(base.get_config().model)['discriminator']


@pytest.mark.fast
def test_generator_switches():
  c = small.get_config()
  c.model.untied_generator_embeddings = True
  p = _shapes(c.model)
  assert p['generator_embeddings']['word_embeddings'].shape == (30522, 64)
  assert 'embeddings_project' not in p['generator']
  c = small.get_config()
  c.model.generator = 'tied'
  p = _shapes(c.model)
  assert 'generator' not in p and 'generator_predictions' in p
  c.model.generator = 'uniform'
  p = _shapes(c.model)
  assert 'generator' not in p and 'generator_predictions' not in p
  c.model.generator = 'huge'
  with pytest.raises(ValueError, match="model.generator"):
    model_lib.ModelConfig.from_config(c.model)


def test_initialization_is_truncated_normal_002():
  # (the small config's table, 30522 x 128, took 13 s to compile: 262,144 draws measure the std)
  cfg = model_lib.ModelConfig.from_config(test_config(**{'model.vocab_size': 4096,
                                                         'model.embedding_size': 64}).model)
  assert cfg.initializer_range == small.get_config().model.initializer_range == 0.02
  p = model_lib.init_params(cfg, jax.random.key(0))
  table = np.asarray(p['embeddings']['word_embeddings'])
  assert abs(table.std() - 0.02 * 0.8796) < 5e-4  # std of N(0, .02) cut at 2 sigma
  assert np.abs(table).max() <= 0.04 + 1e-7
  layer = p['discriminator']['layer_0']
  assert (np.asarray(layer['query']['bias']) == 0).all()
  assert (np.asarray(layer['output_LayerNorm']['scale']) == 1).all()
  assert (np.asarray(p['generator_predictions']['output_bias']) == 0).all()


def _loss_and_metrics(c, params=None, seed=0, deterministic=True):
  cfg = model_lib.ModelConfig.from_config(c.model)
  model = model_lib.Electra(cfg)
  params = params or model_lib.init_params(cfg, jax.random.key(seed))
  ocfg = objective_common.ObjectiveConfig.from_config(c.objective)
  b = {k: jnp.asarray(v) for k, v in synthetic_batch(
      c.data.batch_size, c.data.max_seq_length, cfg.vocab_size).items()}
  loss = functools.partial(electra_objective.electra_loss, model=model, cfg=ocfg, special=SPECIAL,
                           deterministic=deterministic)
  return jax.jit(loss)(params, b, jax.random.key(seed))  # one program, not an eager op at a time


def test_mlm_loss_at_initialization_is_close_to_log_vocab():
  c = test_config(**{'model.vocab_size': 2000, 'data.batch_size': 32})
  _, m = _loss_and_metrics(c)
  mlm = float(m['mlm_loss'][0] / m['mlm_loss'][1])
  assert abs(mlm - math.log(2000)) < 0.05, mlm
  # the discriminator starts near chance too
  assert abs(float(m['disc_loss'][0] / m['disc_loss'][1]) - math.log(2)) < 0.05
  # ... or, with disc_bias_init = log-odds of p, at the loss of predicting p for every token
  p = 0.15
  c.model.disc_bias_init = math.log(p / (1 - p))
  params = model_lib.init_params(model_lib.ModelConfig.from_config(c.model), jax.random.key(0))
  assert float(params['discriminator_predictions']['dense_prediction']['bias'][0]) == pytest.approx(
      c.model.disc_bias_init)
  _, m = _loss_and_metrics(c, params)
  replaced = float(m['replaced_fraction'][0] / m['replaced_fraction'][1])
  prior = -(replaced * math.log(p) + (1 - replaced) * math.log(1 - p))
  assert abs(float(m['disc_loss'][0] / m['disc_loss'][1]) - prior) < 0.05, (replaced, prior)


def test_bfloat16_compute_keeps_float32_params_and_logits():
  c = test_config()
  cfg32 = model_lib.ModelConfig.from_config(c.model)
  params = model_lib.init_params(cfg32, jax.random.key(0))
  c.model.dtype = 'bfloat16'
  cfg16 = model_lib.ModelConfig.from_config(c.model)
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(
      model_lib.init_params(cfg16, jax.random.key(0))))
  b = synthetic_batch(4, 32, cfg32.vocab_size)
  args = (jnp.asarray(b['input_ids']), jnp.asarray(b['segment_ids']), jnp.asarray(b['input_mask']))
  pos = jnp.ones((4, 3), jnp.int32)
  run = lambda cfg, method, *extra: jax.jit(functools.partial(
      model_lib.Electra(cfg).apply, method=method))({'params': params}, *args, *extra)
  d32 = run(cfg32, model_lib.Electra.discriminator_logits)
  d16 = run(cfg16, model_lib.Electra.discriminator_logits)
  g16 = run(cfg16, model_lib.Electra.generator_logits, pos)
  assert d16.dtype == jnp.float32 and g16.dtype == jnp.float32
  assert g16.shape == (4, 3, cfg32.vocab_size)
  np.testing.assert_allclose(d16, d32, atol=0.1)
  _, m16 = _loss_and_metrics(test_config(**{'model.dtype': 'bfloat16'}), params)
  assert all(v.dtype == jnp.float32 for v in jax.tree.leaves(m16))


@pytest.mark.fast
def test_padding_does_not_change_real_token_outputs():
  c = test_config(**{'model.dropout_rate': 0.0})
  cfg = model_lib.ModelConfig.from_config(c.model)
  params = model_lib.init_params(cfg, jax.random.key(0))
  ids = jnp.array([[2, 10, 11, 12, 3, 0, 0, 0]])
  other = ids.at[0, 5:].set(jnp.array([40, 41, 42]))  # different junk under the padding
  mask = jnp.array([[1, 1, 1, 1, 1, 0, 0, 0]])
  f = lambda x: model_lib.Electra(cfg).apply({'params': params}, x, jnp.zeros_like(x), mask,
                                             method=model_lib.Electra.discriminator_logits)
  np.testing.assert_allclose(f(ids)[0, :5], f(other)[0, :5], atol=1e-5)


def test_the_key_bias_changes_no_output_and_gets_a_zero_gradient():
  """The key's bias adds q . b to every score of a query, which the softmax removes (under the
  padding mask, a direction and dropout too): the layers leave it out, so its gradient is zero,
  while the query's and value's biases learn."""
  from electra_jax.model import attention
  q, k, v = jax.random.normal(jax.random.key(0), (3, 2, 16, 2, 8))
  b = jax.random.normal(jax.random.key(1), (2, 8)) * 3
  key_mask = jnp.arange(16)[None] < jnp.array([[16], [9]])
  for direction in ('', 'ltr'):
    common = dict(direction=direction, dropout_rate=0.1,
                  words=attention_masks.seed_words(jax.random.key(2)))
    np.testing.assert_allclose(attention.explicit(q, k + b, v, key_mask, **common),
                               attention.explicit(q, k, v, key_mask, **common), atol=2e-5)
  c = test_config()
  cfg = model_lib.ModelConfig.from_config(c.model)
  params = model_lib.init_params(cfg, jax.random.key(0))
  batch = synthetic_batch(2, 16, cfg.vocab_size)
  def loss(p):
    out = model_lib.Electra(cfg).apply({'params': p}, batch['input_ids'], batch['segment_ids'],
                                       batch['input_mask'],
                                       method=model_lib.Electra.discriminator_logits,
                                       rngs={'dropout': jax.random.key(3)})
    return jnp.sum(out * jnp.arange(16))
  grads = jax.grad(loss)(params)
  flat = {'/'.join(str(getattr(k, 'key', k)) for k in path): g
          for path, g in jax.tree_util.tree_leaves_with_path(grads)}
  disc = {n: g for n, g in flat.items() if n.startswith('discriminator/')}
  keys = [n for n in disc if n.endswith('key/bias')]
  assert keys and all(not np.asarray(disc[n]).any() for n in keys)
  for name in ('query/bias', 'value/bias', 'key/kernel'):
    learning = [np.abs(np.asarray(disc[n])).max() > 0 for n in disc if n.endswith(name)]
    assert learning and all(learning), name


def test_token_types_by_selection_equal_a_gather_in_value_and_gradient():
  """The embeddings look token types up by selection (no scatter in the backward): the same
  vectors as a gather and the same table gradient."""
  table = jax.random.normal(jax.random.key(0), (2, 8))
  ids = jax.random.randint(jax.random.key(1), (3, 16), 0, 2)
  cot = jax.random.normal(jax.random.key(2), (3, 16, 8))
  np.testing.assert_array_equal(layers.small_table_lookup(table, ids), table[ids])
  mine = jax.grad(lambda t: jnp.sum(layers.small_table_lookup(t, ids) * cot))(table)
  gathered = jax.grad(lambda t: jnp.sum(jnp.take(t, ids, axis=0) * cot))(table)
  np.testing.assert_allclose(mine, gathered, rtol=1e-5, atol=1e-6)


@pytest.mark.fast
def test_gelu_writing_its_slope_equals_autodiff_of_the_exact_formula():
  """GELU whose backward multiplies by the derivative written in the forward pass: the same values
  and gradients as autodiff of 0.5 x (1 + erf(x / sqrt 2)) in float32, and in bfloat16 within the
  roundings of the cotangent, the written derivative and their product (2^-9 each)."""
  x = jnp.linspace(-6.0, 6.0, 4001)
  exact = lambda x: 0.5 * x * (1.0 + jax.lax.erf(x * 2.0 ** -0.5))
  cot = jax.random.normal(jax.random.key(0), x.shape)
  writing = layers.gelu_writing_slope
  np.testing.assert_array_equal(writing(x), layers.gelu(x))
  np.testing.assert_allclose(writing(x), jax.nn.gelu(x, approximate=False), atol=1e-6)
  grad = lambda f, x: jax.grad(lambda x: jnp.sum(f(x).astype(jnp.float32) * cot))(x)
  np.testing.assert_allclose(grad(writing, x), grad(exact, x), rtol=1e-5, atol=1e-6)
  low = grad(writing, x.astype(jnp.bfloat16)).astype(jnp.float32)
  reference = grad(exact, x.astype(jnp.bfloat16).astype(jnp.float32))
  np.testing.assert_allclose(low, reference, rtol=2 ** -6, atol=1e-3)


@pytest.mark.fast
def test_writing_for_the_backward_pass_changes_no_value_and_follows_the_chip():
  """v6 TPUs and CPUs write GELU's slope and the dropout masks in the forward pass, other chips
  recompute them: the same outputs bit for bit and the same gradients either way."""
  assert chips.writes_for_backward('tpu', 'TPU v6 lite')  # the chip table's choice
  assert chips.writes_for_backward('cpu', 'cpu')
  for platform, chip in (('tpu', 'TPU v5 lite'), ('tpu', 'TPU v4'), ('gpu', 'NVIDIA H100')):
    assert not chips.writes_for_backward(platform, chip)
  assert model_lib.ModelConfig(platform='cpu').writes_for_backward  # unset: CPUs write
  assert not model_lib.ModelConfig(platform='gpu').writes_for_backward
  c = test_config()
  c.model.attention, c.model.dtype = 'explicit', 'float32'
  written = model_lib.ModelConfig.from_config(c.model, 'cpu', True)
  recomputed = model_lib.ModelConfig.from_config(c.model, 'gpu', False)
  assert written.dtype == recomputed.dtype == 'float32'
  params = model_lib.init_params(written, jax.random.key(0))
  batch = synthetic_batch(2, 16, written.vocab_size)
  def loss(p, cfg):
    out = model_lib.Electra(cfg).apply({'params': p}, batch['input_ids'], batch['segment_ids'],
                                       batch['input_mask'],
                                       method=model_lib.Electra.discriminator_logits,
                                       rngs={'dropout': jax.random.key(3)})
    return jnp.sum(out * jnp.arange(16)), out
  (_, a), grads_a = jax.value_and_grad(loss, has_aux=True)(params, written)
  (_, b), grads_b = jax.value_and_grad(loss, has_aux=True)(params, recomputed)
  np.testing.assert_array_equal(a, b)
  for x, y in zip(jax.tree.leaves(grads_a), jax.tree.leaves(grads_b)):
    np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)


@pytest.mark.fast
def test_the_bias_gradient_summed_by_a_matmul_equals_the_plain_dense():
  """`layers.low_precision_dense` (TPUs' bfloat16 dense layers) gives the plain layer's output
  and its x and kernel gradients bit for bit, and its bias gradient (row 0 of ones @ the
  cotangent) up to the order of float32 additions; Dense takes it where asked, for bfloat16 on
  TPUs only."""
  kx, kw, kb, kg = jax.random.split(jax.random.key(0), 4)
  x = jax.random.normal(kx, (4, 24, 16)).astype(jnp.bfloat16)
  w = jax.random.normal(kw, (16, 40)).astype(jnp.bfloat16)
  b = jax.random.normal(kb, (40,))
  g = jax.random.normal(kg, (4, 24, 40)).astype(jnp.bfloat16)  # (a bfloat16 output's cotangent)
  plain = lambda x, w, b: layers.low_precision_matmul(x, w) + b
  out, pull = jax.vjp(plain, x, w, b)
  out_mxu, pull_mxu = jax.vjp(layers.low_precision_dense, x, w, b)
  np.testing.assert_array_equal(out, out_mxu)
  (dx, dw, db), (dx_mxu, dw_mxu, db_mxu) = pull(g.astype(jnp.float32)), pull_mxu(
      g.astype(jnp.float32))
  np.testing.assert_array_equal(dx, dx_mxu)
  np.testing.assert_array_equal(dw, dw_mxu)
  np.testing.assert_allclose(db, db_mxu, rtol=1e-6, atol=1e-5)
  np.testing.assert_allclose(db, g.astype(jnp.float32).sum((0, 1)), rtol=1e-6, atol=1e-5)
  used, original = [], layers.low_precision_dense
  def spy(*args):
    used.append(1)
    return original(*args)
  for platform, dtype, asked, expected in (('tpu', 'bfloat16', True, 1),
                                           ('tpu', 'bfloat16', False, 0),
                                           ('gpu', 'bfloat16', True, 0),
                                           ('tpu', 'float32', True, 0)):
    used.clear()
    cfg = model_lib.ModelConfig(platform=platform, dtype=dtype)
    with pytest.MonkeyPatch.context() as patch:
      patch.setattr(layers, 'low_precision_dense', spy)
      layers.Dense(40, cfg, bias_by_matmul=asked).init(jax.random.key(1), x)
    assert len(used) == expected, (platform, dtype, asked)


@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
def test_layer_norm_equals_flax_in_value_and_gradient(dtype):
  """The LayerNorm with its own backward pass: Flax's LayerNorm's parameters (names, shapes,
  initial values), the same outputs bit for bit, the same gradients (float32: to rounding; bf16:
  the input's gradient to one bf16 rounding)."""
  import flax.linen as nn
  x = (jax.random.normal(jax.random.key(0), (4, 9, 48)) * 3 + 1).astype(dtype)
  ours, flax_norm = layers.LayerNorm(1e-12, dtype=dtype), nn.LayerNorm(1e-12, dtype=dtype)
  params = ours.init(jax.random.key(1), x)
  reference = flax_norm.init(jax.random.key(1), x)
  assert jax.tree.map(lambda a, b: bool((a == b).all()), params, reference) == {
      'params': {'scale': True, 'bias': True}}
  params = jax.tree.map(lambda t: t + jax.random.normal(jax.random.key(2), t.shape), params)
  np.testing.assert_array_equal(ours.apply(params, x), flax_norm.apply(params, x))
  cot = jax.random.normal(jax.random.key(3), x.shape)
  grads = lambda m: jax.grad(lambda p, x: jnp.sum(m.apply(p, x).astype(jnp.float32) * cot),
                             argnums=(0, 1))(params, x)
  (ours_p, ours_x), (flax_p, flax_x) = grads(ours), grads(flax_norm)
  for a, b in zip(jax.tree.leaves(ours_p), jax.tree.leaves(flax_p)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
  scale = float(jnp.abs(flax_x.astype(jnp.float32)).max())
  atol = 1e-5 * scale if dtype == jnp.float32 else 2 ** -7 * scale
  np.testing.assert_allclose(ours_x.astype(jnp.float32), flax_x.astype(jnp.float32), atol=atol)


@pytest.mark.fast
def test_dropout_rate_scale_and_independence():
  x = jnp.ones((64, 128, 256))
  drop = layers.Dropout(0.1)
  y = np.asarray(drop.apply({}, x, False, rngs={'dropout': jax.random.key(0)}))
  kept = y > 0
  assert abs(kept.mean() - 0.9) < 4 * np.sqrt(0.09 / kept.size)
  assert np.allclose(y[kept], 1 / 0.9)
  # neighbours (along every axis) and another key's mask are independent of this one
  k = kept.astype(np.float64)
  for a, b in [(k[:, :, 1:], k[:, :, :-1]), (k[:, 1:], k[:, :-1]), (k[1:], k[:-1])]:
    assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 0.005
  other = np.asarray(drop.apply({}, x, False, rngs={'dropout': jax.random.key(1)})) > 0
  assert abs(np.corrcoef(k.ravel(), other.ravel().astype(np.float64))[0, 1]) < 0.005
  assert not (other == kept).all()
  # deterministic: the identity
  assert (np.asarray(drop.apply({}, x, True)) == 1).all()


class _TwoDropouts(nn.Module):
  @nn.compact
  def __call__(self, x):
    return (layers.Dropout(0.5)(x, False), layers.Dropout(0.5)(x, False),
            layers.dropout_words(self), layers.dropout_words(self))


@pytest.mark.fast
def test_every_dropout_site_and_draw_has_its_own_mask_and_the_model_folds_no_key():
  """`layers.dropout_words` hashes the key given to apply with the drawing module's path and its
  count of draws: two Dropouts and two draws of one module differ, the same key repeats its masks,
  and a training forward pass of the model draws no threefry bits and folds no key (Flax's
  make_rng folds one in per mask)."""
  x = jnp.ones((256, 256))
  first, second, words, again = _TwoDropouts().apply({}, x, rngs={'dropout': jax.random.key(0)})
  repeat = _TwoDropouts().apply({}, x, rngs={'dropout': jax.random.key(0)})
  for a, b in zip((first, second, words, again), repeat):
    np.testing.assert_array_equal(a, b)
  kept = [np.asarray(m > 0, np.float64).ravel() for m in (first, second)]
  assert abs(kept[0].mean() - 0.5) < 0.01 and abs(np.corrcoef(*kept)[0, 1]) < 0.02
  assert not (np.asarray(words) == np.asarray(again)).any()
  cfg = model_lib.ModelConfig.from_config(test_config().model)
  params = model_lib.init_params(cfg, jax.random.key(0))
  batch = synthetic_batch(2, 16, cfg.vocab_size)
  positions = jnp.zeros((2, 3), jnp.int32)
  jaxpr = str(jax.make_jaxpr(lambda key: model_lib.Electra(cfg).apply(
      {'params': params}, batch['input_ids'], batch['segment_ids'], batch['input_mask'],
      positions, False, rngs={'dropout': key}))(jax.random.key(3)))
  assert 'random_unwrap' in jaxpr  # the key is read
  assert not re.search(r'random_fold_in|random_bits|threefry2x32', jaxpr)


@pytest.mark.parametrize('generator', ['separate', 'two_tower'])
def test_fused_attention_equals_the_explicit_softmax(generator):
  """jax.nn.dot_product_attention ('fused') computes what the explicit path does, padding and
  ELECTRIC's one-directional masks included; training with attention dropout never takes it."""
  base = dict(vocab_size=64, embedding_size=16, hidden_size=32, num_layers=2, num_heads=2,
              intermediate_size=64, max_position_embeddings=32, generator=generator,
              generator_hidden_fraction=2.0)
  batch = synthetic_batch(4, 24, 64, seed=3)
  batch['input_mask'][1, 10:] = 0
  args = (batch['input_ids'], batch['segment_ids'], batch['input_mask'],
          np.tile(np.arange(5)[None] * 3, (4, 1)))
  params = model_lib.init_params(model_lib.ModelConfig(**base), jax.random.key(0))
  out = {a: model_lib.Electra(model_lib.ModelConfig(**base, attention=a)).apply(
      {'params': params}, *args) for a in ('explicit', 'fused')}
  for explicit, fused in zip(out['explicit'], out['fused']):
    np.testing.assert_allclose(np.asarray(fused), np.asarray(explicit), atol=2e-5)
  impl = attention.path_name
  assert impl(model_lib.ModelConfig(**base, attention='fused'), jnp.bfloat16, False) == 'explicit'
  assert impl(model_lib.ModelConfig(**base, attention='fused', attention_dropout_rate=0.0),
              jnp.float32, deterministic=False) == 'fused'
  assert impl(model_lib.ModelConfig(**base), jnp.bfloat16, True) == 'explicit'  # auto on a CPU


@pytest.mark.fast
def test_straight_through_rows_are_zero_with_the_gradient_of_the_product_they_skip():
  """AMOS's one-hot samples @ the word table: zeros in the forward pass, and to the sample the
  gradient of (sample - its value) @ table; none to the table."""
  rng = np.random.default_rng(0)
  sample = jnp.asarray(rng.random((2, 3, 11)), jnp.float32)
  table = jnp.asarray(rng.normal(size=(11, 5)), jnp.float32)
  weights = jnp.asarray(rng.normal(size=(2, 3, 5)), jnp.float32)
  skipped = lambda s, t: jnp.sum(weights * ((s - jax.lax.stop_gradient(s)) @ t))
  ours = lambda s, t: jnp.sum(weights * layers.straight_through_rows(s, t))
  assert not np.asarray(layers.straight_through_rows(sample, table)).any()
  want = jax.grad(skipped, argnums=(0, 1))(sample, table)
  got = jax.grad(ours, argnums=(0, 1))(sample, table)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)
  assert float(jnp.abs(got[0]).max()) > 0.1 and not np.asarray(got[1]).any()
