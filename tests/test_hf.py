"""Parity with HF transformers (PyTorch) on the same weights, and exact round trips."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import test_config
from electra_jax import model as model_lib
from electra_jax.benchmark import synthetic_batch
from electra_jax.convert import hf

torch = pytest.importorskip('torch', reason='parity tests need the test extra: pip install -e ".[test]"')
transformers = pytest.importorskip('transformers', reason='parity tests need the test extra')

LAYOUTS = {
    # Small's layout: embeddings narrower than the discriminator (embeddings_project), a generator
    # of a quarter width; Base's: embeddings as wide as the discriminator.
    'small': {'model.embedding_size': 16, 'model.hidden_size': 64,
              'model.generator_hidden_fraction': 0.25},
    'base': {'model.embedding_size': 64, 'model.hidden_size': 64,
             'model.generator_hidden_fraction': 1 / 2},
}


def _model(layout):
  cfg = model_lib.ModelConfig.from_config(test_config(**LAYOUTS[layout]).model)
  cfg = dataclasses.replace(cfg, num_heads=2, intermediate_size=4 * cfg.hidden_size)
  return cfg, model_lib.init_params(cfg, jax.random.key(1))


def _batch():
  b = synthetic_batch(4, 32, 96, seed=3)
  b['input_mask'][1, 20:] = 0  # padding in two rows, two segments everywhere
  b['input_mask'][3, 9:] = 0
  b['input_ids'] = np.where(b['input_mask'] > 0, b['input_ids'], 0)
  b['segment_ids'] = np.where(b['input_mask'] > 0, b['segment_ids'], 0)
  return b


def _hf_model(cfg, params, network):
  config = transformers.ElectraConfig(**{k: v for k, v in hf.hf_config(cfg, network).items()
                                         if k not in ('model_type', 'architectures')})
  cls = (transformers.ElectraForPreTraining if network == 'discriminator'
         else transformers.ElectraForMaskedLM)
  model = cls(config).eval()
  state = {k: torch.from_numpy(np.array(v)) for k, v in
           hf.to_hf(params, cfg, network).items()}
  missing, unexpected = model.load_state_dict(state, strict=False)
  assert not unexpected, unexpected
  assert set(missing) <= {'electra.embeddings.position_ids'}, missing
  return model


@pytest.mark.parametrize('layout', sorted(LAYOUTS))
def test_discriminator_and_generator_logits_equal_hf_transformers(layout):
  cfg, params = _model(layout)
  b = _batch()
  model = model_lib.Electra(cfg)
  positions = jnp.broadcast_to(jnp.arange(32), (4, 32))
  ours_gen, ours_disc = model.apply({'params': params}, b['input_ids'], b['segment_ids'],
                                    b['input_mask'], positions)
  inputs = {'input_ids': torch.from_numpy(b['input_ids']).long(),
            'attention_mask': torch.from_numpy(b['input_mask']).long(),
            'token_type_ids': torch.from_numpy(b['segment_ids']).long()}
  with torch.no_grad():
    theirs_disc = _hf_model(cfg, params, 'discriminator')(**inputs).logits.numpy()
    theirs_gen = _hf_model(cfg, params, 'generator')(**inputs).logits.numpy()
  real = b['input_mask'] > 0
  np.testing.assert_allclose(np.asarray(ours_disc)[real], theirs_disc[real], atol=1e-4)
  np.testing.assert_allclose(np.asarray(ours_gen)[real], theirs_gen[real], atol=1e-4)
  assert np.abs(theirs_gen).max() > 0.1  # not a comparison of zeros


@pytest.mark.parametrize('layout', sorted(LAYOUTS))
def test_ours_to_hf_to_ours_is_exact(layout):
  cfg, params = _model(layout)
  states = {n: hf.to_hf(params, cfg, n) for n in ('discriminator', 'generator')}
  back = hf.from_hf(states, cfg)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(back)):
    np.testing.assert_array_equal(np.asarray(a), b)
  assert jax.tree.structure(params) == jax.tree.structure(back)


def test_hf_weights_of_another_size_or_missing_are_named():
  cfg, params = _model('small')
  states = {n: hf.to_hf(params, cfg, n) for n in ('discriminator', 'generator')}
  wider = dataclasses.replace(cfg, hidden_size=128, intermediate_size=512)
  with pytest.raises(ValueError, match=r'electra.embeddings_project.weight has shape \(64, 16\), '
                     r'the config wants \(128, 16\)'):
    hf.from_hf(states, wider)
  del states['generator']['generator_lm_head.bias']
  with pytest.raises(ValueError, match='the HF generator has no parameter generator_lm_head.bias'):
    hf.from_hf(states, cfg)
  with pytest.raises(ValueError, match='not converted, e.g. generator'):
    hf.from_hf({'discriminator': states['discriminator']}, cfg)
