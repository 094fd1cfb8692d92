"""The modern backbone (model.backbone='modern'): rotary positions, local layers, and the whole
discriminator and generator against HF transformers' ModernBert classes on the same weights."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from electra_jax.convert import hf
from electra_jax.model import attention as attention_lib
from electra_jax.model import attention_masks
from electra_jax.model import modern
from electra_jax.model import networks as model_lib

VOCAB = 96


def _cfg(**changes):
  """A small modern model: 4 layers (global, local, local, global), a window of 8 tokens."""
  fields = dict(backbone='modern', vocab_size=VOCAB, embedding_size=64, hidden_size=64,
                num_layers=4, num_heads=2, intermediate_size=96, local_window=8,
                dropout_rate=0.0, attention_dropout_rate=0.0, layer_norm_eps=1e-5,
                generator_hidden_fraction=0.5, untied_generator_embeddings=True,
                max_position_embeddings=64)
  return model_lib.ModelConfig(**{**fields, **changes})


def _params(cfg, seed=1):
  """Fresh parameters with every LayerNorm scale and the biases moved off their initial values
  (so that a parameter mapped to the wrong place shows), and queries and keys 10x larger (so that
  the scores, and with them positions and windows, decide the attention)."""
  params = model_lib.init_params(cfg, jax.random.key(seed), 16)
  leaves, tree = jax.tree_util.tree_flatten_with_path(params)
  keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
  def move(path, v, key):
    if str(path[-1].key) in ('scale', 'bias', 'output_bias'):
      return v + 0.1 * jax.random.normal(key, v.shape)
    if 'Wqkv' in jax.tree_util.keystr(path):
      return v.at[:, :2 * v.shape[0]].multiply(10.0)
    return v
  moved = [move(path, v, k) for (path, v), k in zip(leaves, keys)]
  return jax.tree_util.tree_unflatten(tree, moved)


def _batch(seed=3, length=32):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, VOCAB, (3, length)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 20:] = 0
  ids[1, 20:] = 0
  return ids, np.zeros_like(ids), mask


@pytest.mark.fast
def test_a_bert_layer_keeps_its_parameters_and_the_modern_one_has_no_bias():
  bert = jax.eval_shape(lambda k: model_lib.init_params(
      dataclasses.replace(_cfg(), backbone='bert', generator='separate'), k), jax.random.key(0))
  assert 'position_embeddings' in bert['embeddings']
  assert set(bert['discriminator']['layer_0']) == {
      'query', 'key', 'value', 'attention_output', 'attention_LayerNorm', 'intermediate',
      'output', 'output_LayerNorm'}
  params = jax.eval_shape(lambda k: model_lib.init_params(_cfg(), k), jax.random.key(0))
  assert set(params['embeddings']) == {'word_embeddings', 'LayerNorm'}
  assert set(params['discriminator']['layer_0']) == {'Wqkv', 'Wo', 'mlp_norm', 'Wi', 'mlp_Wo'}
  assert 'attn_norm' in params['discriminator']['layer_1']
  biases = [p for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]
            if str(p[-1].key) == 'bias']
  assert [jax.tree_util.keystr(p) for p in biases] == [
      "['discriminator_predictions']['dense_prediction']['bias']"]
  assert params['discriminator']['layer_1']['Wi']['kernel'].shape == (64, 2 * 96)
  assert params['generator']['layer_1']['Wi']['kernel'].shape == (32, 2 * 48)


@pytest.mark.fast
def test_modern_fields_that_do_not_fit_are_one_sentence():
  with pytest.raises(ValueError, match='embedding_size to model.hidden_size'):
    _cfg(embedding_size=32)
  shared = _cfg(untied_generator_embeddings=False)  # narrower: a projection, no HF class
  assert 'untied_generator_embeddings=True' in hf.generator_problem(shared)
  assert hf.generator_problem(_cfg()) == ''
  assert _cfg(untied_generator_embeddings=False, generator='tied').generator_hidden_size == 64
  with pytest.raises(ValueError, match='backbone'):
    _cfg(backbone='neo')


@pytest.mark.fast
def test_the_layer_pattern_and_the_generator_size_follow_the_fields():
  cfg = _cfg(num_layers=7)
  assert [cfg.is_global(i) for i in range(7)] == [True, False, False, True, False, False, True]
  assert not any(_cfg(global_every=0).is_global(i) for i in range(4))
  assert cfg.generator_intermediate_size == 48


def _band_reference(q, k, v, key_mask, window):
  """Dense attention with the band written out by hand, in numpy."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  length = q.shape[1]
  scores = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(q.shape[-1])
  i, j = np.arange(length)[:, None], np.arange(length)[None]
  same = np.asarray(key_mask)[:, None, :, None] == np.asarray(key_mask)[:, None, None, :]
  allowed = same & (np.abs(i - j) <= window // 2)
  scores = np.where(allowed, scores, -np.inf)
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  return np.einsum('bhqk,bkhd->bqhd', probs, v)


@pytest.mark.fast
def test_a_local_layer_is_dense_attention_with_the_band_and_blind_outside_it():
  keys = jax.random.split(jax.random.key(0), 3)
  q, k, v = (jax.random.normal(key, (2, 40, 2, 16)) for key in keys)
  key_mask = np.ones((2, 40), np.int32)
  key_mask[1, 25:] = 2  # a second sequence packed in row 1
  got = attention_lib.explicit(q, k, v, key_mask, window=8)
  np.testing.assert_allclose(np.asarray(got), _band_reference(q, k, v, key_mask, 8), atol=2e-5)
  # a query at 10 sees keys 6..14: keys and values elsewhere do not move it
  far = np.r_[0:6, 15:40]
  k2, v2 = k.at[:, far].set(7.0), v.at[:, far].set(-3.0)
  moved = attention_lib.explicit(q, k2, v2, key_mask, window=8)
  np.testing.assert_array_equal(np.asarray(moved)[:, 10], np.asarray(got)[:, 10])
  assert not np.allclose(np.asarray(moved)[:, 20], np.asarray(got)[:, 20])


@pytest.mark.fast
def test_a_modern_encoders_token_does_not_see_past_its_layers_windows():
  """Two local layers of window 8 reach 8 positions each way; a token 9 away changes nothing."""
  cfg = _cfg(global_every=0, num_layers=2)
  params = _params(cfg)
  ids, segments, mask = _batch()
  run = lambda ids: np.asarray(model_lib.Electra(cfg).apply(
      {'params': params}, ids, segments, mask, method=model_lib.Electra.discriminator_hidden))
  base = run(ids)
  changed = ids.copy()
  changed[0, 19] = (ids[0, 19] + 1) % VOCAB
  after = run(changed)
  np.testing.assert_array_equal(after[0, :11], base[0, :11])
  assert not np.allclose(after[0, 11:19], base[0, 11:19])
  global_cfg = _cfg(num_layers=2)  # layer 0 global: every token sees the change
  run_global = lambda ids: np.asarray(model_lib.Electra(global_cfg).apply(
      {'params': params}, ids, segments, mask, method=model_lib.Electra.discriminator_hidden))
  assert not np.allclose(run_global(changed)[0, :11], run_global(ids)[0, :11])


@pytest.mark.fast
def test_positions_count_from_each_sequences_first_token():
  mask = np.array([[1, 1, 1, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0], [1] * 8])
  want = np.array([[0, 1, 2, 0, 1, 0, 0, 1], [0, 1, 2, 3, 4, 5, 0, 1], list(range(8))])
  np.testing.assert_array_equal(np.asarray(attention_masks.sequence_positions(jnp.asarray(mask))),
                                want)


def test_a_packed_rows_documents_are_the_documents_alone_and_blind_to_each_other():
  """Two documents in one row (numbered 1 and 2) give each document's outputs alone (its positions
  from its own first token, global and local layers); changing the second changes neither the
  first's outputs nor the gradient of a loss on them."""
  cfg = _cfg()
  params = _params(cfg)
  rng = np.random.default_rng(5)
  first, second = rng.integers(5, VOCAB, 13), rng.integers(5, VOCAB, 15)
  row = lambda a, b: (np.r_[a, b, 0, 0, 0, 0][None].astype(np.int32),
                      np.r_[[1] * 13, [2] * 15, [0] * 4][None].astype(np.int32))
  hidden = lambda params, ids, mask: model_lib.Electra(cfg).apply(
      {'params': params}, ids, np.zeros_like(ids), mask,
      method=model_lib.Electra.discriminator_hidden)
  ids, mask = row(first, second)
  packed = np.asarray(hidden(params, ids, mask))
  for doc, where in ((first, slice(0, 13)), (second, slice(13, 28))):
    alone = np.asarray(hidden(params, doc[None].astype(np.int32), np.ones((1, len(doc)), np.int32)))
    np.testing.assert_allclose(packed[0, where], alone[0], atol=2e-5, rtol=2e-5)
  weights = jax.random.normal(jax.random.key(9), packed.shape)
  def loss(params, ids):
    return jnp.sum(hidden(params, ids, mask)[:, :13] * weights[:, :13])
  other = second.copy()
  other[[0, 7, 14]] = (other[[0, 7, 14]] + 11) % VOCAB
  ids2, _ = row(first, other)
  changed = np.asarray(hidden(params, ids2, mask))
  np.testing.assert_array_equal(changed[0, :13], packed[0, :13])
  assert not np.allclose(changed[0, 13:28], packed[0, 13:28])
  grads = [jax.grad(loss)(params, x) for x in (ids, ids2)]
  jax.tree.map(np.testing.assert_array_equal, *grads)


@pytest.mark.fast
def test_rotary_positions_make_scores_depend_on_the_distance_alone():
  q = jax.random.normal(jax.random.key(0), (1, 1, 1, 16))
  k = jax.random.normal(jax.random.key(1), (1, 1, 1, 16))
  score = lambda i, j: float(jnp.sum(modern.rotary(q, jnp.array([[i]]), 1e4)
                                     * modern.rotary(k, jnp.array([[j]]), 1e4)))
  assert score(3, 7) == pytest.approx(score(103, 107), rel=1e-4)
  assert score(3, 7) != pytest.approx(score(3, 9), rel=1e-3)
  np.testing.assert_allclose(np.asarray(modern.rotary(q, jnp.array([[0]]), 1e4)), np.asarray(q))


# ------------------------------------------------------------------------------------------------
# HF transformers' ModernBert (the test extra)
# ------------------------------------------------------------------------------------------------

def _hf():
  torch = pytest.importorskip('torch', reason='parity tests need the test extra: '
                              'pip install -e ".[test]"')
  transformers = pytest.importorskip('transformers', reason='parity tests need the test extra')
  return torch, transformers


def _special():
  return type('Special', (), {'pad': 0, 'cls': 2, 'sep': 3})()


def _hf_model(cfg, params, network):
  torch, transformers = _hf()
  fields = {**hf.hf_config(cfg, network), **hf.special_ids(cfg, _special())}
  config = transformers.ModernBertConfig(**{k: v for k, v in fields.items()
                                            if k not in ('model_type', 'architectures')})
  config._attn_implementation = 'eager'
  cls = getattr(transformers, fields['architectures'][0])
  model = cls(config).eval()
  state = {k: torch.from_numpy(np.array(v)) for k, v in hf.to_hf(params, cfg, network).items()}
  missing, unexpected = model.load_state_dict(state, strict=False)
  assert not unexpected and not missing, (missing, unexpected)
  return torch, model


@pytest.mark.parametrize('length', [32, 12])
def test_rotary_equals_hf_modernberts(length):
  torch, transformers = _hf()
  from transformers.models.modernbert import modeling_modernbert as mb
  config = transformers.ModernBertConfig(hidden_size=64, num_attention_heads=2, vocab_size=VOCAB,
                                         pad_token_id=0, cls_token_id=2, sep_token_id=3,
                                         bos_token_id=2, eos_token_id=3)
  rope = mb.ModernBertRotaryEmbedding(config)
  x = np.random.default_rng(0).normal(size=(2, length, 2, 32)).astype(np.float32)
  positions = np.stack([np.arange(length), np.r_[np.arange(length // 2), np.arange(length -
                                                                           length // 2)]])
  for kind, theta in (('full_attention', 160_000.0), ('sliding_attention', 10_000.0)):
    cos, sin = rope(torch.zeros(1), torch.from_numpy(positions), kind)
    theirs, _ = mb.apply_rotary_pos_emb(torch.from_numpy(x).transpose(1, 2),
                                        torch.from_numpy(x).transpose(1, 2), cos, sin)
    ours = modern.rotary(jnp.asarray(x), jnp.asarray(positions), theta)
    np.testing.assert_allclose(np.asarray(ours), theirs.transpose(1, 2).numpy(), atol=2e-5)


@pytest.mark.parametrize('changes', [{}, {'generator': 'tied', 'untied_generator_embeddings':
                                          False, 'global_every': 2}])
def test_discriminator_and_generator_equal_hf_modernbert(changes):
  """On random weights (norm scales moved): the detection logits equal
  ModernBertForTokenClassification's one label, the generator's vocabulary logits
  ModernBertForMaskedLM's, at every real token, within 1e-4."""
  cfg = _cfg(**changes)
  params = _params(cfg)
  ids, segments, mask = _batch()
  positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
  gen, disc = model_lib.Electra(cfg).apply({'params': params}, ids, segments, mask, positions)
  real = mask > 0
  for network, ours in (('discriminator', np.asarray(disc)), ('generator', np.asarray(gen))):
    torch, model = _hf_model(cfg, params, network)
    with torch.no_grad():
      logits = model(input_ids=torch.from_numpy(ids).long(),
                     attention_mask=torch.from_numpy(mask).long()).logits.numpy()
    theirs = logits[..., 0] if network == 'discriminator' else logits
    assert np.max(np.abs(ours[real] - theirs[real])) < 1e-4, network


@pytest.mark.fast
def test_modern_ours_to_hf_to_ours_is_exact():
  cfg = _cfg()
  params = _params(cfg)
  states = {n: hf.to_hf(params, cfg, n) for n in ('discriminator', 'generator')}
  assert 'decoder.weight' in states['generator'] and 'model.layers.0.attn_norm.weight' not in (
      states['discriminator'])
  back = hf.from_hf(states, cfg)
  for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(back)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.fast
def test_modern_flops_count_its_kernels_and_each_layers_keys():
  """The counter's matmuls are 2 x the encoder's kernel entries a token, plus 4 h per key a
  query sees: all of them in global layers, local_window + 1 in local ones."""
  from electra_jax.model import flops
  cfg = _cfg(num_layers=5)
  params = jax.eval_shape(lambda k: model_lib.init_params(cfg, k), jax.random.key(0))
  kernels = sum(int(np.prod(leaf.shape)) for path, leaf in jax.tree_util.tree_flatten_with_path(
      params['discriminator'])[0] if str(path[-1].key) == 'kernel')
  s = 40
  keys = 2 * s + 3 * (cfg.local_window + 1)  # layers 0 and 3 global; 1, 2, 4 local
  want = (2 * kernels + 4 * cfg.hidden_size * keys) * s
  assert flops.encoder_forward_flops(cfg, s) == want
  short = flops.encoder_forward_flops(cfg, 6)  # shorter than the window: every layer sees all
  assert short == (2 * kernels + 4 * cfg.hidden_size * 5 * 6) * 6


def _against_dense(path, direction: str, window: int, seed: int = 0):
  """(the path's, the dense path's) outputs and q, k, v gradients at the real queries of a batch
  of 70 tokens (two packed sequences and padding), dropout 0.2 on, and the dense outputs without
  dropout."""
  keys = jax.random.split(jax.random.key(seed), 4)
  q, k, v, g = (jax.random.normal(key, (2, 70, 2, 16)) for key in keys)
  key_mask = np.ones((2, 70), np.int32)
  key_mask[1, 30:] = 2
  key_mask[1, 61:] = 0
  real = key_mask > 0
  words = jax.random.bits(jax.random.key(5), (2,), jnp.uint32)
  def run(fn, rate=0.2):
    f = lambda q, k, v: fn(q, k, v, key_mask, direction=direction, dropout_rate=rate,
                           words=words, window=window)
    out, vjp = jax.vjp(f, q, k, v)
    return (out,) + vjp(jnp.where(real[..., None, None], g, 0.0))
  at_real = lambda xs: [np.asarray(x)[real] for x in xs]
  return (at_real(jax.jit(lambda: run(path))()),
          at_real(jax.jit(lambda: run(attention_lib.dense))()),
          at_real(run(attention_lib.dense, 0.0))[0])


@pytest.mark.fast
@pytest.mark.parametrize('direction', ['', 'ltr'])
def test_the_banded_path_gives_the_dense_paths_values_gradients_and_dropout(direction):
  """At 70 tokens (not a multiple of the blocks), two packed sequences and padding, dropout on:
  the banded product equals the dense one at every real query, in value and gradient."""
  assert 3 * attention_lib.band_block(16) < 70  # what `explicit` would run: the band
  got, want, undropped = _against_dense(attention_lib.banded, direction, 16)
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, atol=1e-5)
  assert not np.allclose(undropped, want[0])  # dropout acts


@pytest.mark.fast
@pytest.mark.parametrize('direction,window', [('', 0), ('rtl', 0), ('', 16)])
def test_the_chunked_path_gives_the_dense_paths_values_gradients_and_dropout(direction, window):
  """Queries 16 at a time over 70 tokens (not a multiple), two packed sequences and padding,
  dropout on: the chunked product equals the dense one at every real query, in value and
  gradient; a long sequence without a window takes it."""
  chunked = lambda *a, **kw: attention_lib.chunked(*a, **kw, chunk=16)
  got, want, undropped = _against_dense(chunked, direction, window, seed=1)
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, atol=1e-5)
  assert not np.allclose(undropped, want[0])
  long = jax.make_jaxpr(lambda q: attention_lib.explicit(q, q, q, jnp.ones((1, 4096), jnp.int32)))
  assert 'scan' in str(long(jnp.zeros((1, 4096, 1, 8)))) and attention_lib.LONG < 4096
