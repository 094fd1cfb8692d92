"""Where gradients flow in replaced token detection, and what the loss is made of."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import test_config
from electra_jax import model as model_lib
from electra_jax import objectives
from electra_jax.benchmark import SPECIAL, synthetic_batch


def _setup(**overrides):
  c = test_config(**overrides)
  cfg = model_lib.ModelConfig.from_config(c.model)
  model = model_lib.Electra(cfg)
  params = model_lib.init_params(cfg, jax.random.key(0))
  batch = {k: jnp.asarray(v) for k, v in synthetic_batch(16, 32, cfg.vocab_size).items()}
  return c, model, params, batch


def _loss(c, model, params, batch):
  ocfg = objectives.ObjectiveConfig.from_config(c.objective)
  return jax.jit(lambda p: objectives.electra_loss(p, batch, jax.random.key(1), model=model,
                                                   cfg=ocfg, special=SPECIAL))(params)


_CACHE = {}


def _split_grads(**overrides):
  """Gradients of the MLM loss and of the discriminator loss, separately (one compile per model)."""
  key = tuple(sorted(overrides.items()))
  if key not in _CACHE:
    c, model, params, batch = _setup(**overrides)
    ocfg = objectives.ObjectiveConfig.from_config(c.objective)

    def losses(p):
      _, m = objectives.electra_loss(p, batch, jax.random.key(1), model=model, cfg=ocfg,
                                     special=SPECIAL)
      return jnp.stack([m['mlm_loss'][0] / m['mlm_loss'][1],
                        m['disc_loss'][0] / m['disc_loss'][1]])

    jac = jax.jit(jax.jacrev(losses))(params)
    _CACHE[key] = (jax.tree.map(lambda x: x[0], jac), jax.tree.map(lambda x: x[1], jac))
  return _CACHE[key]


def _norm(tree):
  return float(sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree)))


def test_discriminator_loss_gives_exactly_zero_gradient_to_the_generator():
  _, g = _split_grads()
  for name in ('generator', 'generator_predictions'):
    assert all((np.asarray(x) == 0).all() for x in jax.tree.leaves(g[name])), name
  assert _norm(g['discriminator']) > 0 and _norm(g['discriminator_predictions']) > 0


def test_generator_loss_gives_zero_gradient_to_the_discriminator():
  g, _ = _split_grads()
  for name in ('discriminator', 'discriminator_predictions'):
    assert all((np.asarray(x) == 0).all() for x in jax.tree.leaves(g[name])), name
  assert _norm(g['generator']) > 0


def test_shared_embeddings_receive_gradient_from_both_losses():
  from_gen, from_disc = (g['embeddings'] for g in _split_grads())
  for name in ('word_embeddings', 'position_embeddings', 'token_type_embeddings', 'LayerNorm'):
    assert _norm(from_gen[name]) > 0 and _norm(from_disc[name]) > 0, name


def test_untied_generator_embeddings_get_no_discriminator_gradient():
  from_gen, from_disc = _split_grads(**{'model.untied_generator_embeddings': True})
  assert _norm(from_disc['generator_embeddings']) == 0
  assert _norm(from_gen['embeddings']) == 0 and _norm(from_gen['generator_embeddings']) > 0


def test_tied_generator_shares_the_discriminator_encoder():
  g, _ = _split_grads(**{'model.generator': 'tied'})
  assert _norm(g['discriminator']) > 0  # the MLM loss trains the shared encoder
  assert _norm(g['discriminator_predictions']) == 0


def test_uniform_generator_has_constant_mlm_loss():
  c, model, params, batch = _setup(**{'model.generator': 'uniform'})
  _, m = _loss(c, model, params, batch)
  assert abs(float(m['mlm_loss'][0] / m['mlm_loss'][1]) - np.log(c.model.vocab_size)) < 1e-4
  assert 'generator' not in params


def test_total_loss_is_weighted_sum_and_metrics_are_consistent():
  c, model, params, batch = _setup()
  loss, m = _loss(c, model, params, batch)
  r = {k: float(v[0] / v[1]) for k, v in m.items() if k != 'auc_histogram'}
  assert loss == pytest.approx(r['mlm_loss'] + 50.0 * r['disc_loss'], rel=1e-4)
  # every real token is counted once in the AUC histograms, labels match the replaced share
  hist = np.asarray(m['auc_histogram'])
  assert hist.sum() == pytest.approx(float(batch['input_mask'].sum()))
  assert hist[0].sum() / hist.sum() == pytest.approx(r['replaced_fraction'], rel=1e-5)
  assert 0 < r['replaced_fraction'] < 0.2
  assert 0 <= r['disc_accuracy'] <= 1


def test_disallow_correct_makes_every_used_slot_a_replacement():
  c, model, params, batch = _setup(**{'objective.disallow_correct': True,
                                      'objective.sample_without_replacement': True})
  _, m = _loss(c, model, params, batch)
  replaced = float(m['replaced_fraction'][0])
  slots = float(m['mlm_loss'][1])
  assert replaced == slots  # no duplicates, no correct samples: each slot replaces one token
  assert float(m['sampled_mlm_accuracy'][0]) == 0
