"""Where gradients flow in replaced token detection and the other objectives, and what each loss is
made of."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import MODERN, OBJECTIVE_RUN, objective_config, squared_norm, test_config
from electra_jax.config.pretraining import parse
from electra_jax.model import networks as model_lib
from electra_jax.objectives import common as objective_common
from electra_jax.objectives import electra as electra_objective
from electra_jax.objectives import registry as objectives
from electra_jax.data.synthetic import synthetic_batch
from electra_jax.data.tokenizer import SPECIAL


def _setup(**overrides):
  c = test_config(**overrides)
  cfg = model_lib.ModelConfig.from_config(c.model)
  model = model_lib.Electra(cfg)
  params = model_lib.init_params(cfg, jax.random.key(0))
  batch = {k: jnp.asarray(v) for k, v in synthetic_batch(16, 32, cfg.vocab_size).items()}
  return c, model, params, batch


def _loss(c, model, params, batch):
  ocfg = objective_common.ObjectiveConfig.from_config(c.objective)
  return jax.jit(lambda p: electra_objective.electra_loss(p, batch, jax.random.key(1), model=model,
                                                   cfg=ocfg, special=SPECIAL))(params)


_CACHE = {}


def _split_grads(**overrides):
  """Gradients of the MLM loss and of the discriminator loss, separately (one compile per model)."""
  key = tuple(sorted(overrides.items()))
  if key not in _CACHE:
    c, model, params, batch = _setup(**overrides)
    ocfg = objective_common.ObjectiveConfig.from_config(c.objective)

    def losses(p):
      _, m = electra_objective.electra_loss(p, batch, jax.random.key(1), model=model, cfg=ocfg,
                                     special=SPECIAL)
      return jnp.stack([m['mlm_loss'][0] / m['mlm_loss'][1],
                        m['disc_loss'][0] / m['disc_loss'][1]])

    jac = jax.jit(jax.jacrev(losses))(params)
    # split on the host: indexing each device array compiles once per shape
    jac = jax.device_get(jac)
    _CACHE[key] = (jax.tree.map(lambda x: x[0], jac), jax.tree.map(lambda x: x[1], jac))
  return _CACHE[key]


_norm = squared_norm


def test_discriminator_loss_gives_exactly_zero_gradient_to_the_generator():
  _, g = _split_grads()
  for name in ('generator', 'generator_predictions'):
    assert all((np.asarray(x) == 0).all() for x in jax.tree.leaves(g[name])), name
  assert _norm(g['discriminator']) > 0 and _norm(g['discriminator_predictions']) > 0


@pytest.mark.fast
def test_generator_loss_gives_zero_gradient_to_the_discriminator():
  g, _ = _split_grads()
  for name in ('discriminator', 'discriminator_predictions'):
    assert all((np.asarray(x) == 0).all() for x in jax.tree.leaves(g[name])), name
  assert _norm(g['generator']) > 0


@pytest.mark.fast
def test_shared_embeddings_receive_gradient_from_both_losses():
  from_gen, from_disc = (g['embeddings'] for g in _split_grads())
  for name in ('word_embeddings', 'position_embeddings', 'token_type_embeddings', 'LayerNorm'):
    assert _norm(from_gen[name]) > 0 and _norm(from_disc[name]) > 0, name


def test_untied_generator_embeddings_get_no_discriminator_gradient():
  from_gen, from_disc = _split_grads(**{'model.untied_generator_embeddings': True})
  assert _norm(from_disc['generator_embeddings']) == 0
  assert _norm(from_gen['embeddings']) == 0 and _norm(from_gen['generator_embeddings']) > 0


def test_decoder_rows_batch_updates_only_the_rows_of_the_batchs_tokens():
  """model.decoder_rows='batch': the generator's loss gives no gradient to the word-table rows of
  tokens absent from the global batch; the loss, the present rows' gradients and every other
  gradient are those of 'all'. In two microbatches whose tokens differ the gradient is still the
  whole batch's: the rows are the global batch's."""
  from electra_jax.train import step as step_lib
  batch = synthetic_batch(16, 32, 96)
  ids = batch['input_ids']
  words = ids >= 5  # microbatch k takes rows k, k + 2, ...: tokens 50-69 are in part 1 only
  keep = np.where(np.arange(16)[:, None] % 2 == 0, 45, 65)
  batch['input_ids'] = np.where(words, 5 + (ids - 5) % keep, ids)
  present = np.unique(batch['input_ids'])
  # [MASK] is the generator's input, so its row has an input gradient in either setting
  absent = np.setdiff1d(np.arange(96), np.append(present, SPECIAL.mask))
  assert set(range(70, 96)) <= set(absent) and set(range(50, 70)) & set(present)

  def gradients(rows, microbatches=1):
    """(loss, its gradient, the gradient of the generator's MLM loss alone)."""
    c = test_config(**{'model.decoder_rows': rows, 'model.dropout_rate': 0.0,
                       'model.attention_dropout_rate': 0.0, 'microbatches': microbatches})
    setup = pretrain_setup.build_setup(parse(c), SPECIAL)
    params = setup.init_params(jax.random.key(0))
    rng = jax.random.key(3)

    def generator_only(p):
      m = setup.loss_fn(p, batch, rng)[1]['mlm_loss']
      return m[0] / m[1]

    fn = jax.jit(lambda p: (step_lib._gradients(setup, p, batch, rng),
                            jax.grad(generator_only)(p)))
    ((loss, _), grads), gen = fn(params)
    return float(loss), grads, gen

  loss_all, g_all, gen_all = gradients('all')
  loss_batch, g_batch, gen_batch = gradients('batch')
  assert loss_batch == pytest.approx(loss_all, rel=1e-6)
  table = lambda g: np.asarray(g['embeddings']['word_embeddings'])
  assert (table(gen_batch)[absent] == 0).all() and (table(gen_all)[absent] != 0).all()
  np.testing.assert_allclose(table(g_batch)[present], table(g_all)[present], rtol=1e-5,
                             atol=1e-8)
  g_all['embeddings']['word_embeddings'] = g_batch['embeddings']['word_embeddings']
  for a, b in zip(jax.tree.leaves(g_batch), jax.tree.leaves(g_all)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8)
  _, g_parts, _ = gradients('batch', microbatches=2)
  for a, b in zip(jax.tree.leaves(g_parts), jax.tree.leaves(g_batch)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-6)


def test_tied_generator_shares_the_discriminator_encoder():
  g, _ = _split_grads(**{'model.generator': 'tied'})
  assert _norm(g['discriminator']) > 0  # the MLM loss trains the shared encoder
  assert _norm(g['discriminator_predictions']) == 0


def test_uniform_generator_has_constant_mlm_loss():
  c, model, params, batch = _setup(**{'model.generator': 'uniform'})
  _, m = _loss(c, model, params, batch)
  assert abs(float(m['mlm_loss'][0] / m['mlm_loss'][1]) - np.log(c.model.vocab_size)) < 1e-4
  assert 'generator' not in params


@pytest.mark.fast
def test_total_loss_is_weighted_sum_and_metrics_are_consistent():
  c, model, params, batch = _setup()
  loss, m = _loss(c, model, params, batch)
  r = {k: float(v[0] / v[1]) for k, v in m.items() if k != 'disc_auc_histograms'}
  assert loss == pytest.approx(r['mlm_loss'] + 50.0 * r['disc_loss'], rel=1e-4)
  # every real token is counted once in the AUC histograms, labels match the replaced share
  hist = np.asarray(m['disc_auc_histograms'])
  assert hist.sum() == pytest.approx(float(batch['input_mask'].sum()))
  assert hist[0].sum() / hist.sum() == pytest.approx(r['replaced_fraction'], rel=1e-5)
  assert 0 < r['replaced_fraction'] < 0.2
  assert 0 <= r['disc_accuracy'] <= 1


@pytest.mark.fast
def test_disallow_correct_makes_every_used_slot_a_replacement():
  c, model, params, batch = _setup(**{'objective.disallow_correct': True,
                                      'objective.sample_without_replacement': True})
  _, m = _loss(c, model, params, batch)
  replaced = float(m['replaced_fraction'][0])
  slots = float(m['mlm_loss'][1])
  assert replaced == slots  # no duplicates, no correct samples: each slot replaces one token
  assert float(m['sampled_mlm_accuracy'][0]) == 0


# ================================================================================================
# The other objectives (the paper's Table 5 and BERT): loss at initialization, where gradients go,
# learning, and the 8-device mesh
# ================================================================================================

from electra_jax.objectives import masking  # noqa: E402
from electra_jax.train import partitioning  # noqa: E402
from electra_jax.pretraining import run as pretrain  # noqa: E402
from electra_jax.pretraining import setup as pretrain_setup  # noqa: E402
from electra_jax.train import step as step_lib  # noqa: E402

_OBJ = {}


def _objective(name, **overrides):
  """(config, model, params, batch, loss_fn) of objective `name` on the test model."""
  key = (name,) + tuple(sorted(overrides.items()))
  if key not in _OBJ:
    c = test_config(**{'objective.name': name, **overrides})
    c = objectives.fit_model_config(c, lambda *_: None)
    cfg = model_lib.ModelConfig.from_config(c.model)
    model = model_lib.Electra(cfg)
    params = model_lib.init_params(cfg, jax.random.key(0))
    batch = {k: jnp.asarray(v) for k, v in synthetic_batch(16, 32, cfg.vocab_size).items()}
    ocfg = objective_common.ObjectiveConfig.from_config(c.objective)
    fn = objectives.get(name).loss
    loss_fn = lambda p, rng=jax.random.key(1): fn(p, batch, rng, model=model, cfg=ocfg,
                                                  special=SPECIAL)
    _OBJ[key] = (c, model, params, batch, loss_fn)
  return _OBJ[key]


def _ratios(metrics):
  return {k: float(v[0] / v[1]) for k, v in metrics.items() if k != 'disc_auc_histograms'}


def test_each_objective_starts_at_its_chance_loss():
  ln_v = np.log(96)
  r = _ratios(jax.jit(_objective('mlm')[4])(_objective('mlm')[2])[1])
  assert abs(r['mlm_loss'] - ln_v) < 0.05 and r['loss'] == pytest.approx(r['mlm_loss'], rel=1e-5)
  r = _ratios(jax.jit(_objective('electra_15')[4])(_objective('electra_15')[2])[1])
  assert abs(r['disc_loss'] - np.log(2)) < 0.01 and abs(r['mlm_loss'] - ln_v) < 0.05
  r = _ratios(jax.jit(_objective('replace_mlm')[4])(_objective('replace_mlm')[2])[1])
  assert abs(r['main_mlm_loss'] - ln_v) < 0.05 and abs(r['mlm_loss'] - ln_v) < 0.05
  assert r['loss'] == pytest.approx(r['mlm_loss'] + r['main_mlm_loss'], rel=1e-4)
  r = _ratios(jax.jit(_objective('all_tokens_mlm')[4])(_objective('all_tokens_mlm')[2])[1])
  # copy gate at 1/2: a token shown right costs -ln(1/2 + 1/2V), a replaced one ln(2V)
  assert abs(r['copy_probability'] - 0.5) < 0.01
  assert abs(r['all_tokens_replaced_loss'] - np.log(2 * 96)) < 0.05
  assert np.log(2) - 0.02 < r['all_tokens_loss'] < np.log(2 * 96)


@pytest.mark.fast
def test_electra_15_counts_the_masked_positions_only():
  c, model, params, batch, loss_fn = _objective('electra_15')
  _, m = jax.jit(loss_fn)(params)
  ocfg = objective_common.ObjectiveConfig.from_config(c.objective)
  selected = float(jax.jit(lambda key: masking.selected(  # the objective's own draws
      objective_common.draw(key, batch, ocfg, SPECIAL, 96).masked, 32).sum())(jax.random.key(1)))
  assert float(m['disc_loss'][1]) == selected < 0.25 * float(batch['input_mask'].sum())
  assert float(np.asarray(m['disc_auc_histograms']).sum()) == selected
  _, full = jax.jit(_objective('electra')[4])(params)
  assert float(full['disc_loss'][1]) == float(batch['input_mask'].sum())


def _jacobian(name, terms):
  _, _, params, _, loss_fn = _objective(name)
  def losses(p):
    m = loss_fn(p)[1]
    return jnp.stack([m[t][0] / m[t][1] for t in terms])
  jac = jax.device_get(jax.jit(jax.jacrev(losses))(params))
  return [jax.tree.map(lambda x, i=i: x[i], jac) for i in range(len(terms))]


def test_bert_mlm_trains_the_full_size_network_and_its_mlm_head_only():
  (g,) = _jacobian('mlm', ['mlm_loss'])
  assert 'generator' not in g  # the MLM network is the discriminator-size encoder
  assert _norm(g['discriminator']) > 0 and _norm(g['generator_predictions']) > 0
  assert _norm(g['embeddings']) > 0 and _norm(g['discriminator_predictions']) == 0


def test_replace_mlm_losses_reach_their_own_networks_only():
  gen, main = _jacobian('replace_mlm', ['mlm_loss', 'main_mlm_loss'])
  for name in ('generator', 'generator_predictions'):
    assert _norm(main[name]) == 0 and _norm(gen[name]) > 0, name  # samples carry no gradient
  for name in ('discriminator', 'discriminator_mlm'):
    assert _norm(gen[name]) == 0 and _norm(main[name]) > 0, name
  assert _norm(main['discriminator_predictions']) == 0
  assert _norm(gen['embeddings']) > 0 and _norm(main['embeddings']) > 0


def test_all_tokens_mlm_trains_the_copy_gate_and_not_the_generator():
  gen, main = _jacobian('all_tokens_mlm', ['mlm_loss', 'all_tokens_loss'])
  for name in ('generator', 'generator_predictions'):
    assert _norm(main[name]) == 0 and _norm(gen[name]) > 0, name
  for name in ('discriminator', 'discriminator_mlm', 'discriminator_predictions'):
    assert _norm(main[name]) > 0 and _norm(gen[name]) == 0, name


@pytest.mark.parametrize('name,backbone', [
    *((name, 'bert') for name in ('mlm', 'electra_15', 'replace_mlm', 'all_tokens_mlm',
                                  'electric', 'cocolm', 'amos')),
    *((name, 'modern') for name in ('electra', 'mlm', 'electra_15', 'replace_mlm',
                                    'all_tokens_mlm', 'electric', 'cocolm', 'amos')),
    ('electra', 'modern+gdes')])
def test_objective_learns_on_the_8_device_mesh(name, backbone):
  # the microbatching test's step; every objective composes with either backbone
  fields = {'bert': {}, 'modern': MODERN, 'modern+gdes': {**MODERN, 'model.gdes': True}}
  setup = pretrain_setup.build_setup(parse(objective_config(name, **fields[backbone])), SPECIAL)
  mesh = partitioning.make_mesh(jax.devices())
  assert mesh.devices.size == 8
  init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
  batch = jax.device_put({k: jnp.asarray(v) for k, v in synthetic_batch(32, 32, 96).items()},
                         partitioning.batch_sharding(mesh))
  state, losses = init_fn(), []
  for _ in range(50):
    state, m = train_fn(state, batch)
    losses.append(float(m['loss'][0] / m['loss'][1]))
  assert np.mean(losses[-5:]) < 0.95 * np.mean(losses[:5]), losses


def test_bert_mlm_and_all_tokens_runs_end_to_end(tmp_path, records_dir):
  import json
  import os
  from electra_jax.apps import export as export_lib
  from electra_jax.finetune import pretrained as finetune_pretrained
  lines = []
  workdir = str(tmp_path / 'mlm')
  summary = pretrain.train_and_evaluate(test_config(**{'data.records': records_dir,
                                                    'objective.name': 'mlm', **OBJECTIVE_RUN}),
                                     workdir, log=lines.append)
  assert "objective mlm: model.generator 'separate' -> 'tied'" in lines
  assert set(summary['eval']) >= {'mlm_loss', 'mlm_accuracy'} and 'disc_auc' not in summary['eval']
  assert any(l.startswith('summary (held-out') and 'MLM loss' in l for l in lines), lines
  assert os.path.isfile(os.path.join(workdir, 'curves.png'))
  # What a BERT run made fine-tunes and exports like any other (its MLM network is full size).
  assert finetune_pretrained.load(workdir, log=lambda *_: None).params is not None
  done = export_lib.export(workdir, str(tmp_path / 'hf'), log=lambda *_: None)
  with open(os.path.join(done.folders[1], 'config.json')) as f:
    assert json.load(f)['hidden_size'] == 32  # the generator folder holds the full-size MLM
  # A workdir written before a config field existed resumes when the field is at its default.
  path = os.path.join(workdir, 'config.json')
  with open(path) as f:
    saved = json.load(f)
  del saved['model']['discriminator_mlm'], saved['objective']['random_token_prob']
  with open(path, 'w') as f:
    json.dump(saved, f)
  again = pretrain.train_and_evaluate(test_config(**{'data.records': records_dir,
                                                  'objective.name': 'mlm', **OBJECTIVE_RUN,
                                                  'train_steps': 6}),
                                   workdir, log=lines.append)
  assert again['step'] == 6 and any(l.startswith('resumed from') for l in lines)

  lines = []
  summary = pretrain.train_and_evaluate(test_config(**{'data.records': records_dir,
                                                    'objective.name': 'all_tokens_mlm',
                                                    **OBJECTIVE_RUN}),
                                     str(tmp_path / 'all'), log=lines.append)
  assert {'all_tokens_loss', 'mlm_loss', 'copy_probability'} <= set(summary['eval'])
  assert any('all-tokens MLM loss' in l for l in lines), lines


def test_gdes_disentangles_the_embedding_gradients():
  from_gen, from_disc = _split_grads(**{'model.gdes': True})
  # The generator owns the word table; the discriminator updates only its residual.
  assert _norm(from_disc['embeddings']['word_embeddings']) == 0
  assert _norm(from_disc['embeddings_residual']) > 0
  assert _norm(from_gen['embeddings_residual']) == 0
  assert _norm(from_gen['embeddings']['word_embeddings']) > 0
  # positions, token types and the embedding LayerNorm stay shared by both losses
  assert _norm(from_disc['embeddings']['position_embeddings']) > 0
  assert _norm(from_gen['embeddings']['position_embeddings']) > 0
  # The residual starts at zero: the discriminator starts from the shared table exactly.
  c, model, params, batch = _setup(**{'model.gdes': True})
  assert not np.asarray(params['embeddings_residual']).any()
  plain = model_lib.Electra(model_lib.ModelConfig.from_config(test_config().model))
  args = (batch['input_ids'], batch['segment_ids'], batch['input_mask'])
  shared = {k: v for k, v in params.items() if k != 'embeddings_residual'}
  np.testing.assert_array_equal(
      model.apply({'params': params}, *args, method=model_lib.Electra.discriminator_logits),
      plain.apply({'params': shared}, *args, method=model_lib.Electra.discriminator_logits))
  with pytest.raises(ValueError, match='model.gdes .* needs model.generator=separate'):
    model_lib.ModelConfig.from_config(
        test_config(**{'model.gdes': True, 'model.untied_generator_embeddings': True}).model)


def test_gdes_run_fine_tunes_from_the_discriminators_table(tmp_path, records_dir):
  import os
  from electra_jax.train import checkpoint as checkpoint_lib
  from electra_jax.finetune import pretrained as finetune_pretrained
  workdir = str(tmp_path / 'gdes')
  pretrain.train_and_evaluate(test_config(**{'data.records': records_dir, 'model.gdes': True}),
                           workdir, log=lambda *_: None)
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'))
  params = ckpt.restore_arrays(ckpt.latest_step())[0]['params']
  ckpt.close()
  assert np.abs(np.asarray(params['embeddings_residual'])).max() > 0  # trained by detection
  loaded = finetune_pretrained.load(workdir, log=lambda *_: None).params
  np.testing.assert_allclose(
      loaded['embeddings']['word_embeddings'],
      np.asarray(params['embeddings']['word_embeddings']) + params['embeddings_residual'],
      rtol=0, atol=1e-7)


def test_electric_cloze_model_never_sees_the_token_it_predicts():
  c, model, params, batch, _ = _objective('electric')
  assert 'cloze_ltr' in params and 'cloze_rtl' in params and 'generator' not in params
  ids = batch['input_ids']
  every = jnp.broadcast_to(jnp.arange(32), ids.shape)
  logits = jax.jit(lambda i: model.apply({'params': params}, i, batch['segment_ids'],
                                         batch['input_mask'], every,
                                         method=model_lib.Electra.generator_logits))
  before, after = logits(ids), logits(ids.at[:, 10].set((ids[:, 10] + 7) % 96))
  np.testing.assert_allclose(before[:, 10], after[:, 10], atol=1e-6)  # blind to its own token
  assert float(jnp.abs(before[:, 9] - after[:, 9]).max()) > 1e-4  # its neighbours see it
  assert float(jnp.abs(before[:, 11] - after[:, 11]).max()) > 1e-4


def test_electric_noise_correction_and_labels():
  c, model, params, batch, loss_fn = _objective('electric')
  _, m = jax.jit(loss_fn)(params)
  r = _ratios(m)
  ocfg = objective_common.ObjectiveConfig.from_config(c.objective)
  masked = objective_common.draw(jax.random.key(1), batch, ocfg, SPECIAL, 96).masked
  # every sampled position is labelled fake, also where the sample equals the original
  assert float(m['replaced_fraction'][0]) == float(masking.selected(masked, 32).sum())
  # at initialization s ~ 0 and q ~ 1/V: the corrected logit is about -ln V + ln(p / (1 - p))
  shift = -np.log(96) + np.log(0.15 / 0.85)
  f = r['replaced_fraction']
  softplus = lambda x: np.log1p(np.exp(x))
  assert abs(r['disc_loss'] - (f * softplus(-shift) + (1 - f) * softplus(shift))) < 0.05
  assert abs(r['mlm_loss'] - np.log(96)) < 0.05
  cloze, detect = _jacobian('electric', ['mlm_loss', 'disc_loss'])
  for name in ('cloze_ltr', 'cloze_rtl', 'generator_predictions'):
    assert _norm(detect[name]) == 0 and _norm(cloze[name]) > 0, name  # log q: no gradient
  assert _norm(cloze['discriminator']) == 0 and _norm(detect['discriminator']) > 0


@pytest.mark.fast
def test_the_sampler_is_the_faster_one_on_each_platform():
  """The Gumbel-max sampler on GPUs and TPUs (one fused pass), the inverted CDF on CPUs (no
  logarithm per entry); both draw from the generator's softmax
  (tests/objectives/test_masking.py)."""
  o = test_config().objective
  assert objective_common.ObjectiveConfig.from_config(o, 'tpu').sampler == 'gumbel'
  assert objective_common.ObjectiveConfig.from_config(o, 'cuda').sampler == 'gumbel'
  assert objective_common.ObjectiveConfig.from_config(o, 'cpu').sampler == 'cdf'
  assert objective_common.ObjectiveConfig.from_config(o).sampler == 'cdf'  # this CPU


def test_mlm_cross_entropy_by_selection_equals_optax_in_value_and_gradient():
  """The MLM loss takes the target's logit by selection (no gather or scatter): the same loss and
  gradient as optax's integer-label cross-entropy."""
  import optax
  logits = jax.random.normal(jax.random.key(0), (4, 7, 50)) * 3
  targets = jax.random.randint(jax.random.key(1), (4, 7), 0, 50)
  weights = (jax.random.uniform(jax.random.key(2), (4, 7)) < 0.7).astype(jnp.float32)
  ours = lambda l: objective_common.mlm_terms(l, targets, weights, jnp.sum(weights))[0]
  theirs = lambda l: jnp.sum(optax.softmax_cross_entropy_with_integer_labels(l, targets)
                             * weights) / (jnp.sum(weights) + 1e-6)
  np.testing.assert_allclose(ours(logits), theirs(logits), rtol=1e-6)
  np.testing.assert_allclose(jax.grad(ours)(logits), jax.grad(theirs)(logits), atol=1e-7)


def test_an_objective_registered_in_this_file_alone_trains_counts_and_compares(
    tmp_path, records_dir, monkeypatch):
  """A new objective is one registry entry: here ELECTRA with its detection loss alone weighted
  (the generator still trains) and a metric of its own, declared in this test. It trains end to
  end; its metric is on its progress and evaluation lines, its curves, its summary, ranks its
  checkpoints the way it declares (lower is better) and has its column in the comparison; its
  FLOPs come from its entry, and the compare tool plans it and its variant at the same compute as
  the others."""
  from electra_jax.pretraining import step_flops as step_flops_lib
  from electra_jax.train.metrics import Metric
  from electra_jax.finetune import pretrained as pretrained_lib
  from electra_jax.apps import compare
  from electra_jax.train import logs as logs_lib

  def half_detection(params, batch, rng, **kwargs):
    cfg = kwargs.pop('cfg')
    loss, metrics = electra_objective.electra_loss(params, batch, rng, cfg=dataclasses.replace(
        cfg, disc_weight=cfg.disc_weight / 2), **kwargs)
    return loss, {**metrics, 'half_disc_loss': metrics['disc_loss'] * jnp.array([0.5, 1.0])}

  heads = lambda h, e, v, s, n: objective_common.detection_head_flops(h, e, v, s, n) + 1000.0
  half = Metric('half_disc_loss', 'min', 'half the detection loss', column='half detection')
  probe = objective_common.Objective(
      'half_detection', half_detection, head_flops=heads,
      variants={'half_detection_nes': {'model.untied_generator_embeddings': True}},
      metrics=objective_common.DETECTION_METRICS + (half,),
      shown=('loss', 'half_disc_loss'),
      summary=(objective_common.DETECTION_SUMMARY, 'half detection loss {half_disc_loss:.4f}'))
  monkeypatch.setitem(objectives.OBJECTIVES, probe.name, probe)
  drawn = []
  plot = logs_lib.plot_curves
  monkeypatch.setattr(logs_lib, 'plot_curves', lambda r, p, panels=None: (
      drawn.append(panels), plot(r, p, panels))[1])
  lines = []
  config = test_config(**{'data.records': records_dir, 'objective.name': 'half_detection',
                          **OBJECTIVE_RUN, 'train_steps': 6, 'eval_every': 2,
                          'keep_best': 'half_disc_loss', 'optimizer.learning_rate': 3e-2})
  workdir = str(tmp_path / 'w')
  summary = pretrain.train_and_evaluate(config, workdir, log=lines.append)
  assert {'disc_auc', 'mlm_loss', 'half_disc_loss'} <= set(summary['eval'])
  np.testing.assert_allclose(summary['eval']['half_disc_loss'], summary['eval']['disc_loss'] / 2,
                             rtol=1e-6)
  progress = [l for l in lines if '| step ' in l or ' eval step ' in l]
  assert progress and all('| loss ' in l and '| half_disc_loss ' in l and 'disc_auc' not in l
                          for l in progress), progress
  assert any(l.startswith('summary (held-out') and 'discriminator AUC' in l and
             f'half detection loss {summary["eval"]["half_disc_loss"]:.4f}' in l
             for l in lines), lines
  assert drawn and ('half_disc_loss', 'half the detection loss', False) in drawn[-1], drawn
  evals = {r['step']: r['half_disc_loss'] for r in logs_lib.read_jsonl(
      os.path.join(workdir, 'metrics.jsonl')) if r['split'] == 'eval'}
  assert sorted(evals) == [2, 4, 6] and len(set(evals.values())) == 3, evals
  best = min(evals, key=evals.get)  # a loss: lower is better, as its declaration says
  assert summary['best_checkpoint'] == os.path.join(workdir, 'checkpoints', str(best))
  # A fine-tuning from its best checkpoint takes the same one, reading the direction its
  # checkpoints record (a fine-tuning imports no objective).
  assert pretrained_lib.load(workdir, step='best', log=lambda *_: None).checkpoint == (
      summary['best_checkpoint'])
  compare._write([compare._row('half_detection', 'half_detection', 1.0, 6, summary['eval'], {})],
                 workdir, 6, lambda *_: None)
  with open(os.path.join(workdir, 'comparison.md')) as f:
    table = f.read().splitlines()
  assert '| half detection |' in table[2] and table[4].endswith(
      f'| {summary["eval"]["half_disc_loss"]:.3f} |'), table
  cfg = model_lib.ModelConfig.from_config(config.model)
  args = (cfg, config.data.max_seq_length, 8, config.objective.max_predictions)
  count = step_flops_lib.step_matmul_flops
  extra = count(*args, 'half_detection') - count(*args)
  assert extra == 3 * 8 * 1000.0  # its heads' forward FLOPs per example, x3 (with the backward)
  assert count(*args, 'mlm') < count(*args, 'half_detection')
  rows = {r['name']: r for r in compare.plan(test_config(), ['electra', 'half_detection',
                                                             'half_detection_nes'], 100)}
  assert rows['half_detection']['config'].objective.name == 'half_detection'
  assert rows['half_detection']['steps'] == rows['electra']['steps'] == 100
  assert rows['half_detection_nes']['config'].model.untied_generator_embeddings
  with pytest.raises(ValueError, match="objective.name is 'nowhere'; available: electra, .*, "
                     "half_detection"):
    objectives.get('nowhere')
