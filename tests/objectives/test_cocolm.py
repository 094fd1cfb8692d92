"""COCO-LM: the copy mechanism, the crop, the contrastive loss over the global batch, where each
loss's gradient flows, the auxiliary network's depth, its FLOPs and a run end to end."""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import (ROOT, assert_same_states, load_config, objective_config, squared_norm,
                      test_config)
from electra_jax.config import files as config_files
from electra_jax.data.synthetic import synthetic_batch
from electra_jax.data.tokenizer import SPECIAL
from electra_jax.model import flops as flops_lib
from electra_jax.model import networks as model_lib
from electra_jax.objectives import cocolm
from electra_jax.objectives import common as objective_common
from electra_jax.objectives import registry as objectives
from electra_jax.apps import export as export_lib
from electra_jax.finetune import pretrained as pretrained_lib
from electra_jax.pretraining import run as pretrain
from electra_jax.pretraining import step_flops as step_flops_lib
from electra_jax.train import partitioning


_norm = squared_norm


@pytest.mark.fast
def test_the_copy_mixture_is_a_distribution_over_the_vocabulary_at_every_masked_slot():
  k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
  logits = 3 * jax.random.normal(k1, (4, 5, 50))
  copy = 4 * jax.random.normal(k2, (4, 5))
  shown = jax.random.randint(k3, (4, 5), 0, 50)
  log_p = np.asarray(cocolm.corrective_log_probs(logits, copy, shown), np.float64)
  np.testing.assert_allclose(np.exp(log_p).sum(-1), 1.0, atol=1e-5)
  p_copy = 1 / (1 + np.exp(np.asarray(copy, np.float64)))  # "replaced" is the logit's class
  softmax = np.asarray(jax.nn.softmax(logits), np.float64)
  at_shown = np.take_along_axis(np.exp(log_p), np.asarray(shown)[..., None], -1)[..., 0]
  expected = p_copy + (1 - p_copy) * np.take_along_axis(softmax, np.asarray(shown)[..., None],
                                                        -1)[..., 0]
  np.testing.assert_allclose(at_shown, expected, rtol=1e-5)
  other = (np.asarray(shown) + 1) % 50  # any other word: generated only
  np.testing.assert_allclose(
      np.take_along_axis(np.exp(log_p), other[..., None], -1)[..., 0],
      (1 - p_copy) * np.take_along_axis(softmax, other[..., None], -1)[..., 0], rtol=1e-5)


@pytest.mark.fast
def test_equal_sequence_embeddings_give_log_of_the_negatives_plus_one():
  b = 6
  same = jnp.ones((b, 8))
  loss, m = cocolm.contrastive_terms(same, same, jnp.ones(b), b, 0.5)
  assert float(loss) == pytest.approx(np.log(2 * b - 2 + 1), rel=1e-6)  # N = 2B - 2 negatives
  assert float(m['scl_loss'][0] / m['scl_loss'][1]) == pytest.approx(np.log(2 * b - 1), rel=1e-6)
  real = jnp.array([1, 1, 1, 1, 0, 0.0])  # empty rows are no one's negatives
  loss, _ = cocolm.contrastive_terms(same, same, real, 4, 0.5)
  assert float(loss) == pytest.approx(np.log(2 * 4 - 1), rel=1e-6)
  # apart, each view finds its partner: the loss falls towards 0 as the temperature does
  apart = jnp.eye(b, 8)
  loss, m = cocolm.contrastive_terms(apart, apart, jnp.ones(b), b, 0.05)
  assert float(loss) < 1e-6 and float(m['scl_accuracy'][0]) == 2 * b


@pytest.mark.fast
def test_the_crop_is_contiguous_inside_the_sequence_and_of_the_declared_fraction():
  raw = synthetic_batch(64, 32, 96, seed=3)
  lengths = 2 + np.arange(64) % 31  # every length from 2 to 32 (the first token [CLS])
  mask = (np.arange(32)[None] < lengths[:, None]).astype(np.int32)
  ids = np.where(mask > 0, raw['input_ids'], SPECIAL.pad)
  batch = {'input_ids': jnp.asarray(ids), 'input_mask': jnp.asarray(mask),
           'segment_ids': jnp.asarray(np.where(mask > 0, raw['segment_ids'], 0))}
  for fraction in (0.9, 0.5):
    for uniform in (jnp.zeros(64), jnp.full(64, 0.9999), jax.random.uniform(jax.random.key(1),
                                                                            (64,))):
      view = {k: np.asarray(v) for k, v in cocolm.crop(batch, uniform, fraction, SPECIAL).items()}
      assert view['input_ids'].shape == (64, cocolm.crop_length(32, fraction))
      for row in range(64):
        n = int(lengths[row])
        m = max(1, int(np.floor(fraction * (n - 1) + 1e-9)))
        got = view['input_ids'][row]
        assert view['input_mask'][row].tolist() == [1] * (m + 1) + [0] * (len(got) - m - 1)
        assert got[0] == SPECIAL.cls and (got[m + 1:] == SPECIAL.pad).all()
        starts = [s for s in range(1, n - m + 1) if (ids[row, s:s + m] == got[1:m + 1]).all()]
        assert starts, (row, n, m)  # a contiguous run of the original's tokens after [CLS]
        if float(uniform[row]) == 0:
          assert starts[0] == 1
        if float(uniform[row]) > 0.999:
          assert starts[-1] == n - m  # the crop may end at the last real token
        segments = np.asarray(batch['segment_ids'])[row]
        np.testing.assert_array_equal(view['segment_ids'][row, 1:m + 1],
                                      segments[starts[0]:starts[0] + m])


@pytest.mark.fast
def test_the_auxiliary_network_is_full_width_and_as_deep_as_the_papers():
  for preset, layers in (('small', 2), ('base', 4), ('large', 4), ('tiny', 1)):
    c = load_config(f'{ROOT}/configs/{preset}.py')
    c.objective.name = 'cocolm'
    c = objectives.fit_model_config(c, lambda *_: None)
    cfg = model_lib.ModelConfig.from_config(c.model)
    assert cfg.generator_num_layers == layers, preset
    assert cfg.generator_hidden_size == cfg.hidden_size, preset
    assert cfg.cocolm_heads and not cfg.untied_generator_embeddings
  for preset in ('small', 'base', 'large'):  # the presets' variant
    assert config_files.config_from(f'{ROOT}/configs/{preset}.py:cocolm')[0].objective.name == (
        'cocolm')
  # back to ELECTRA: the heads COCO-LM trains are dropped
  again = objectives.fit_model_config(test_config(**{'model.cocolm_heads': True}), print)
  assert not again.model.cocolm_heads


def _jacobian(terms, **overrides):
  c = objective_config('cocolm')
  for k, v in overrides.items():
    c.model[k] = v
  cfg = model_lib.ModelConfig.from_config(c.model)
  model = model_lib.Electra(cfg)
  params = model_lib.init_params(cfg, jax.random.key(0))
  batch = {k: jnp.asarray(v) for k, v in synthetic_batch(16, 32, cfg.vocab_size).items()}
  ocfg = objective_common.ObjectiveConfig.from_config(c.objective)

  def losses(p):
    m = cocolm.cocolm_loss(p, batch, jax.random.key(1), model=model, cfg=ocfg, special=SPECIAL)[1]
    return jnp.stack([m[t][0] / m[t][1] for t in terms])
  jac = jax.device_get(jax.jit(jax.jacrev(losses))(params))
  return [jax.tree.map(lambda x, i=i: x[i], jac) for i in range(len(terms))]


def test_each_loss_reaches_its_own_parts_and_the_lm_term_not_the_copy_head():
  mlm, copy, lm, scl = _jacobian(['mlm_loss', 'disc_loss', 'clm_loss', 'scl_loss'])
  for name in ('generator', 'generator_predictions'):  # the samples carry no gradient
    assert _norm(mlm[name]) > 0 and _norm(copy[name]) == _norm(lm[name]) == _norm(scl[name]) == 0
  assert _norm(lm['discriminator_predictions']) == 0  # p_copy under a stop-gradient
  assert _norm(lm['correction_head']) > 0 and _norm(lm['discriminator']) > 0
  assert _norm(copy['discriminator_predictions']) > 0
  assert _norm(copy['correction_head']) == _norm(copy['sequence_head']) == 0
  assert _norm(scl['sequence_head']) > 0 and _norm(scl['discriminator']) > 0
  assert _norm(scl['correction_head']) == _norm(scl['discriminator_predictions']) == 0
  assert _norm(mlm['discriminator']) == 0 and _norm(mlm['embeddings']) > 0  # shared embeddings
  assert _norm(lm['embeddings']) > 0  # the correction head's tied word table


def test_global_negatives_on_8_devices_equal_the_single_devices():
  c = objective_config('cocolm')
  cfg = model_lib.ModelConfig.from_config(c.model)
  model = model_lib.Electra(cfg)
  params = model_lib.init_params(cfg, jax.random.key(0))
  ocfg = objective_common.ObjectiveConfig.from_config(c.objective)
  batch = {k: jnp.asarray(v) for k, v in synthetic_batch(32, 32, cfg.vocab_size).items()}
  loss = jax.jit(lambda p, b: cocolm.cocolm_loss(p, b, jax.random.key(2), model=model, cfg=ocfg,
                                                 special=SPECIAL)[1])
  one = jax.device_get(loss(params, batch))
  mesh = partitioning.make_mesh(jax.devices())
  assert mesh.devices.size == 8
  eight = jax.device_get(loss(params, jax.device_put(batch, partitioning.batch_sharding(mesh))))
  for k in ('scl_loss', 'clm_loss', 'disc_loss', 'loss'):
    np.testing.assert_allclose(eight[k], one[k], rtol=1e-5, err_msg=k)
  # the accuracy counts every view; whether a partner beats the nearest other view is left to
  # the test below, on views that are not tied (at initialization they tie to rounding, which the
  # order of the sums and the host's arithmetic decide)
  assert eight['scl_accuracy'][1] == one['scl_accuracy'][1] == 64
  assert float(one['scl_loss'][1]) == 2 * 32  # each view's negatives: all 62 others, not 6
  # against the per-device loss (negatives within each device's 4 rows): a different number
  local = [jax.device_get(loss(params, {k: v[i:i + 4] for k, v in batch.items()}))['scl_loss']
           for i in range(0, 32, 4)]
  assert abs(sum(l[0] for l in local) - float(one['scl_loss'][0])) > 1.0


def test_the_contrastive_accuracy_of_views_that_are_not_tied_is_the_same_on_8_devices():
  """Each view's partner is its anchor plus noise; the margins to the nearest other view are far
  above float32 rounding, so the accuracy is a property of the views, not of the sums' order."""
  k1, k2 = jax.random.split(jax.random.key(3))
  anchor = jax.random.normal(k1, (32, 16))
  noise = jax.random.normal(k2, (32, 16))
  positive = anchor + jnp.where(jnp.arange(32)[:, None] % 4 == 0, 3.0, 0.3) * noise
  weights = jnp.ones((32,)).at[-2:].set(0.0)
  terms = jax.jit(lambda a, p, w: cocolm.contrastive_terms(a, p, w, 30, 0.5))
  one_loss, one = jax.device_get(terms(anchor, positive, weights))
  views = np.concatenate([anchor, positive])
  views /= np.linalg.norm(views, axis=-1, keepdims=True)
  similarity = views @ views.T
  real = np.concatenate([weights, weights]) > 0
  partner = (np.arange(64) + 32) % 64
  margins, expected = [], 0
  for i in np.flatnonzero(real):
    others = real & (np.arange(64) != i) & (np.arange(64) != partner[i])
    margin = similarity[i, partner[i]] - similarity[i, others].max()
    margins.append(abs(margin))
    expected += margin > 0
  assert min(margins) > 1e-4 and 0 < expected < 60  # no ties, and some views miss their partner
  assert float(one['scl_accuracy'][0]) == expected and float(one['scl_accuracy'][1]) == 60
  mesh = partitioning.make_mesh(jax.devices())
  sharding = partitioning.batch_sharding(mesh)
  eight_loss, eight = jax.device_get(terms(*jax.device_put((anchor, positive, weights), sharding)))
  assert float(eight['scl_accuracy'][0]) == expected
  np.testing.assert_allclose(eight_loss, one_loss, rtol=1e-5)


def test_the_flops_count_the_crop_and_the_sampling_pass():
  c = objective_config('cocolm')
  cfg = model_lib.ModelConfig.from_config(c.model)
  ocfg = objective_common.ObjectiveConfig.from_config(c.objective)
  s, n = 32, c.objective.max_predictions
  count = lambda o=ocfg: step_flops_lib.step_matmul_flops(cfg, s, 1, n, 'cocolm', o)
  half = objective_common.ObjectiveConfig.from_config({**c.objective, 'contrast_crop': 0.5})
  encoder = lambda length: flops_lib.encoder_matmuls(cfg.hidden_size, cfg.num_layers,
                                                     cfg.intermediate_size, cfg.embedding_size,
                                                     length)
  assert cocolm.crop_length(s, 0.9) == 28 and cocolm.crop_length(s, 0.5) == 16
  assert cocolm.crop_length(512, 0.9) == 512 and cocolm.crop_length(512, 0.2) == 128  # blocks
  assert count() - count(half) == pytest.approx(3 * (encoder(28) - encoder(16)))
  electra_heads = step_flops_lib.step_matmul_flops(cfg, s, 1, n, 'electra')
  generator = cfg.generator_shape.forward_flops(cfg, s, n, flops_lib.encoder_matmuls)
  h, e, v = cfg.hidden_size, cfg.embedding_size, cfg.vocab_size
  heads = 3 * (n * 2 * e * v + (2 * h * e if h != e else 0) * n + 2 * h * h)
  assert count() == pytest.approx(electra_heads + heads + 3 * (encoder(28) + 2 * h * h)
                                  + generator)


def test_a_cocolm_run_trains_resumes_exactly_exports_and_is_prompted(tmp_path, records_dir):
  workdir = str(tmp_path / 'cocolm')
  lines = []
  config = lambda steps: test_config(**{'data.records': records_dir, 'objective.name': 'cocolm',
                                        'train_steps': steps, 'eval_every': 4, 'save_every': 2})
  summary = pretrain.train_and_evaluate(config(4), workdir, log=lines.append)
  held_out = summary['eval']
  assert {'clm_loss', 'scl_loss', 'disc_auc', 'mlm_loss'} <= set(held_out)
  assert 0 <= held_out['disc_auc'] <= 1 and held_out['scl_loss'] > 0
  assert any(l.startswith('summary (held-out') and 'corrective LM loss' in l for l in lines)
  progress = [l for l in lines if re.match(r'^\d\d:\d\d:\d\d (eval )?step ', l)]
  assert len(progress) == 4 and all('| clm_loss ' in l and '| scl_loss ' in l
                                    for l in progress), progress
  hf = str(tmp_path / 'hf')
  export_lib.export(workdir, hf, log=lambda *_: None)
  assert os.path.exists(os.path.join(hf, 'discriminator', 'config.json'))
  # the copy head is the detection head: a zero-shot prompt reads it from either source
  ours = pretrained_lib.load(workdir, head=True, log=lambda *_: None)
  theirs = pretrained_lib.load(os.path.join(hf, 'discriminator'), head=True, log=lambda *_: None)
  for a, b in zip(jax.tree.leaves(ours.params['discriminator_predictions']),
                  jax.tree.leaves(theirs.params['discriminator_predictions'])):
    np.testing.assert_allclose(a, b, rtol=1e-6)
  # resumed at step 4 to step 6, bit-identical to a run of 6 steps (dropout on, crops drawn)
  straight = str(tmp_path / 'straight')
  for w in (workdir, straight):
    pretrain.train_and_evaluate(config(6), w, log=lambda *_: None)
  assert_same_states(objectives.fit_model_config(config(6), lambda *_: None),
                     (workdir, straight), 6)
