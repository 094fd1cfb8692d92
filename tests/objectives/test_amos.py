"""AMOS: the straight-through sample, the gradient reversal, the exits trained apart, the
generator's exits per size, its FLOPs and a run end to end."""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import (ROOT, assert_same_states, load_config, objective_config, squared_norm,
                      test_config, topic_dev_examples)
from electra_jax.config import files as config_files
from electra_jax.data.synthetic import synthetic_batch
from electra_jax.data.tokenizer import SPECIAL
from electra_jax.model import flops as flops_lib
from electra_jax.model import networks as model_lib
from electra_jax.objectives import amos
from electra_jax.objectives import common as objective_common
from electra_jax.objectives import registry as objectives
from electra_jax.apps import export as export_lib
from electra_jax.finetune import pretrained as pretrained_lib
from electra_jax.apps import zeroshot
from electra_jax.pretraining import run as pretrain
from electra_jax.pretraining import step_flops as step_flops_lib


_norm = squared_norm


@pytest.mark.fast
def test_the_sample_is_one_hot_and_its_straight_through_gradient_the_softmaxs():
  k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
  logits = 2 * jax.random.normal(k1, (3, 4, 40))
  noise = jax.random.gumbel(k2, logits.shape)
  weights = jax.random.normal(k3, logits.shape)  # any function of the sample
  index, one_hot = amos.straight_through(logits, noise, 0.3, reversal=1.0)
  values = np.asarray(one_hot)
  assert set(np.unique(values)) <= {0.0, 1.0} and (values.sum(-1) == 1).all()
  np.testing.assert_array_equal(values.argmax(-1), np.asarray(jnp.argmax(logits + noise, -1)))
  np.testing.assert_array_equal(np.asarray(index), values.argmax(-1))
  through = jax.grad(lambda x: jnp.sum(amos.straight_through(x, noise, 0.3, 1.0)[1] * weights))
  softmax = jax.grad(lambda x: jnp.sum(jax.nn.softmax((x + noise) / 0.3) * weights))
  np.testing.assert_allclose(through(logits), softmax(logits), rtol=1e-5, atol=1e-7)
  reversed_ = jax.grad(lambda x: jnp.sum(amos.straight_through(x, noise, 0.3)[1] * weights))
  np.testing.assert_allclose(reversed_(logits), -softmax(logits), rtol=1e-5, atol=1e-7)
  np.testing.assert_array_equal(amos.straight_through(logits, noise, 0.3)[1], values)


@pytest.mark.fast
def test_the_generator_is_full_width_with_the_papers_exits_for_base():
  for preset, exits in (('base', (4, 6, 8)), ('large', (8, 12, 16)), ('small', (4, 6, 8)),
                        ('tiny', (1, 2))):
    c = load_config(f'{ROOT}/configs/{preset}.py')
    c.objective.name = 'amos'
    c = objectives.fit_model_config(c, lambda *_: None)
    cfg = model_lib.ModelConfig.from_config(c.model)
    assert cfg.generator_exits == exits, preset
    assert cfg.generator_num_layers == exits[-1] and cfg.generator_hidden_size == cfg.hidden_size
    assert cfg.amos_exits and not cfg.untied_generator_embeddings
  for preset in ('small', 'base', 'large'):
    assert config_files.config_from(f'{ROOT}/configs/{preset}.py:amos')[0].objective.name == 'amos'
  assert not objectives.fit_model_config(test_config(**{'model.amos_exits': True}),
                                         lambda *_: None).model.amos_exits
  with pytest.raises(ValueError, match='model.amos_exits reads exits.*set it to separate'):
    model_lib.ModelConfig.from_config({'amos_exits': True, 'generator': 'tied'})


def _setup(**model):
  c = objective_config('amos')
  for k, v in model.items():
    c.model[k] = v
  c = objectives.fit_model_config(c, lambda *_: None)  # the generator's depth for these layers
  cfg = model_lib.ModelConfig.from_config(c.model)
  model_ = model_lib.Electra(cfg)
  params = model_lib.init_params(cfg, jax.random.key(0))
  # a mixture that is not near uniform, so that its gradient is not tiny
  mixture = params['generator_mixture']
  mixture['kernel'] = 3 * jax.random.normal(jax.random.key(5), mixture['kernel'].shape)
  batch = {k: jnp.asarray(v) for k, v in synthetic_batch(16, 32, cfg.vocab_size).items()}
  return cfg, model_, params, batch, objective_common.ObjectiveConfig.from_config(c.objective)


def test_the_mixture_learns_to_raise_the_discriminators_loss():
  cfg, model, params, batch, ocfg = _setup(num_layers=2)

  def term(p, name, reversal):
    m = amos.amos_loss(p, batch, jax.random.key(1), model=model, cfg=ocfg, special=SPECIAL,
                       reversal=reversal)
    return m[0] if name == 'loss' else m[1][name][0] / m[1][name][1]
  grad = lambda name, reversal: jax.device_get(jax.jit(jax.grad(
      lambda p: term(p, name, reversal)))(params))
  lowering = grad('disc_loss', 1.0)  # the gradient that would lower the RTD loss
  adversarial = grad('disc_loss', -1.0)
  assert _norm(lowering['generator_mixture']) > 0
  np.testing.assert_allclose(adversarial['generator_mixture']['kernel'],
                             -lowering['generator_mixture']['kernel'],
                             rtol=1e-5, atol=1e-9)
  for layer in lowering['generator']:  # through the mixture, the generator's features too
    assert _norm(lowering['generator'][layer]) > 0, layer
    np.testing.assert_allclose(
        jax.tree.leaves(adversarial['generator'][layer])[0],
        -np.asarray(jax.tree.leaves(lowering['generator'][layer])[0]), rtol=1e-4, atol=1e-9)
  # the MLM losses never reach the mixture: the total's gradient there is the reversed RTD one
  total = grad('loss', -1.0)
  np.testing.assert_allclose(total['generator_mixture']['kernel'],
                             -ocfg.disc_weight * lowering['generator_mixture']['kernel'], rtol=1e-4,
                             atol=1e-8)
  # the discriminator's own gradient is the same either way
  for a, b in zip(jax.tree.leaves(adversarial['discriminator']),
                  jax.tree.leaves(lowering['discriminator'])):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-12)


def test_each_exits_mlm_loss_trains_only_the_layers_since_the_previous_exit():
  cfg, model, params, batch, _ = _setup(num_layers=12, hidden_size=64, num_heads=1,
                                        intermediate_size=128, embedding_size=64)
  assert cfg.generator_exits == (4, 6, 8)
  masked = objective_common.draw(jax.random.key(1), batch, objective_common.ObjectiveConfig(),
                                 SPECIAL, cfg.vocab_size).masked

  def exit_losses(p):
    logits, _ = model.apply({'params': p}, masked.input_ids, batch['segment_ids'],
                            batch['input_mask'], masked.positions, True,
                            method=model_lib.Electra.generator_exit_logits)
    return jnp.stack([objective_common.mlm_terms(x, masked.target_ids, masked.weights, 1.0)[0]
                      for x in logits])
  jac = jax.device_get(jax.jit(jax.jacrev(exit_losses))(params))
  for k, (first, last) in enumerate(((0, 4), (4, 6), (6, 8))):
    for i in range(8):
      reached = _norm(jax.tree.map(lambda x, k=k: x[k], jac['generator'][f'layer_{i}'])) > 0
      assert reached == (first <= i < last), (k, i)
    head = jax.tree.map(lambda x, k=k: x[k], jac['generator_predictions'])
    assert _norm(head) > 0  # one head, shared by every exit
  assert _norm(jax.tree.map(lambda x: x[2], jac['embeddings']['word_embeddings'])) > 0  # tied
  assert _norm(jac['generator_mixture']) == 0


def test_the_flops_count_the_exits_heads_and_the_one_hot_products():
  c = objective_config('amos')
  c = objectives.fit_model_config(c, lambda *_: None)
  cfg = model_lib.ModelConfig.from_config(c.model)
  s, n = 32, c.objective.max_predictions
  h, e, v = cfg.hidden_size, cfg.embedding_size, cfg.vocab_size
  count = step_flops_lib.step_matmul_flops(cfg, s, 1, n, 'amos')
  main = flops_lib.encoder_matmuls(h, cfg.num_layers, cfg.intermediate_size, e, s)
  main += objective_common.detection_head_flops(h, e, v, s, n)
  generator = cfg.generator_shape.forward_flops(cfg, s, n, flops_lib.encoder_matmuls)
  head = n * (2 * h * e + 2 * e * v)
  exits = len(cfg.generator_exits)
  assert exits == 2
  # (the one-hot products: backward only, their forward value is the lookup's)
  assert count == pytest.approx(3 * (main + generator + (exits - 1) * head) + 2 * n * v * e)


def test_an_amos_run_trains_resumes_exactly_exports_and_is_prompted(tmp_path, records_dir):
  workdir = str(tmp_path / 'amos')
  lines = []
  config = lambda steps: test_config(**{'data.records': records_dir, 'objective.name': 'amos',
                                        'train_steps': steps, 'eval_every': 4, 'save_every': 2})
  summary = pretrain.train_and_evaluate(config(4), workdir, log=lines.append)
  held_out = summary['eval']
  assert {'shallow_mlm_loss', 'mixture_depth', 'disc_auc', 'mlm_loss'} <= set(held_out)
  assert 1 <= held_out['mixture_depth'] <= 2
  assert any(l.startswith('summary (held-out') and 'mixture depth' in l for l in lines)
  progress = [l for l in lines if re.match(r'^\d\d:\d\d:\d\d (eval )?step ', l)]
  assert len(progress) == 4 and all('| mixture_depth ' in l for l in progress), progress
  hf = str(tmp_path / 'hf')
  export_lib.export(workdir, hf, log=lambda *_: None)
  assert os.path.exists(os.path.join(hf, 'discriminator', 'config.json'))
  # the discriminator with its head, as fine-tuning and prompting read it, from either source
  ours = pretrained_lib.load(workdir, head=True, log=lambda *_: None)
  theirs = pretrained_lib.load(os.path.join(hf, 'discriminator'), head=True, log=lambda *_: None)
  assert ours.model_cfg.amos_exits and 'generator_mixture' not in ours.params
  for a, b in zip(jax.tree.leaves(ours.params['discriminator_predictions']),
                  jax.tree.leaves(theirs.params['discriminator_predictions'])):
    np.testing.assert_allclose(a, b, rtol=1e-6)
  cfg = config_files.load_config_file(f'{ROOT}/configs/finetune/builtin.py:topic')
  cfg.max_seq_length = 32
  assert zeroshot.evaluate(cfg, workdir, batch_size=64, log=lambda *_: None)['examples'] == (
      topic_dev_examples())
  # resumed at step 4 to step 6, bit-identical to a run of 6 steps (dropout on)
  straight = str(tmp_path / 'straight')
  for w in (workdir, straight):
    pretrain.train_and_evaluate(config(6), w, log=lambda *_: None)
  assert_same_states(objectives.fit_model_config(config(6), lambda *_: None),
                     (workdir, straight), 6)
