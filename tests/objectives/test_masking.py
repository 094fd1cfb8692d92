"""Statistics of dynamic masking, Gumbel sampling and replacement (reference section 2 and 3)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from electra_jax.objectives import masking
from electra_jax.data.synthetic import synthetic_batch
from electra_jax.data.tokenizer import SPECIAL

PAD, CLS, SEP, MASK = SPECIAL.pad, SPECIAL.cls, SPECIAL.sep, SPECIAL.mask
# the sampler as the step runs it: one compiled program (run eagerly, each operation is one)
_sample = jax.jit(masking.sample, static_argnames=('temperature', 'block'))


@functools.partial(jax.jit, static_argnames=('temperature', 'block'))
def _gumbel(rng, logits, temperature=1.0, disallow=None, block=None):
  """The Gumbel-max sampler (GPUs and TPUs) with two seed words per row drawn from `rng`."""
  del block
  seeds = jax.random.bits(rng, logits.shape[:-1] + (2,), jnp.uint32)
  return masking.sample_gumbel(seeds, logits, temperature=temperature, disallow=disallow)


SAMPLERS = pytest.mark.parametrize('sampler', [_sample, _gumbel], ids=['cdf', 'gumbel'])


def _batch(batch_size=64, length=128, vocab=1000, seed=0):
  b = synthetic_batch(batch_size, length, vocab, seed)
  # a few rows that already hold [MASK] tokens, which must never be selected
  b['input_ids'][:4, 5:8] = MASK
  return {k: jnp.asarray(v) for k, v in b.items()}


def _mask(rng, b, mask_prob=0.15, n=19, **kw):
  return masking.mask_tokens(rng, b['input_ids'], b['input_mask'], mask_prob=mask_prob,
                             max_predictions=n, mask_id=MASK, special_ids=(PAD, CLS, SEP), **kw)


@pytest.fixture(scope='module')
def draws():
  """500 independent maskings of one batch of 64 x 128."""
  b = _batch()
  fn = jax.jit(jax.vmap(lambda k: _mask(k, b)))
  return b, jax.device_get(fn(jax.random.split(jax.random.key(0), 500)))


def test_count_per_example_is_clipped_rounded_share_of_real_tokens(draws):
  b, m = draws
  real = np.asarray(b['input_mask']).sum(-1)
  expected = np.clip(np.round(real.astype(np.float32) * np.float32(0.15)), 1, 19)
  assert (m.weights.sum(-1) == expected[None, :]).all()
  # the weighted slots come first; unused slots point at position 0 with target 0
  n_used = m.weights.sum(-1, keepdims=True)
  assert (m.weights == (np.arange(19) < n_used)).all()
  assert (m.positions[m.weights == 0] == 0).all() and (m.target_ids[m.weights == 0] == 0).all()


@pytest.mark.fast
def test_max_predictions_formula():
  from electra_jax.config.pretraining import default_config
  c = default_config()
  for p, length, n in ((0.15, 128, 19), (0.15, 512, 79), (0.25, 512, 130)):
    c.objective.mask_prob, c.data.max_seq_length = p, length
    assert c.objective.max_predictions == n


@pytest.mark.fast
def test_never_selects_special_tokens_or_padding(draws):
  b, m = draws
  ids, mask = np.asarray(b['input_ids']), np.asarray(b['input_mask'])
  rows = np.broadcast_to(np.arange(ids.shape[0])[None, :, None], m.positions.shape)
  chosen = ids[rows, m.positions][m.weights > 0]
  assert not np.isin(chosen, [PAD, CLS, SEP, MASK]).any()
  assert (mask[rows, m.positions][m.weights > 0] == 1).all()
  assert (m.target_ids[m.weights > 0] == chosen).all()


@pytest.mark.fast
def test_85_percent_mask_15_percent_kept_no_random_tokens(draws):
  b, m = draws
  ids = np.asarray(b['input_ids'])
  changed = m.input_ids != ids[None]
  assert (m.input_ids[changed] == MASK).all()  # the only change ever made is [MASK]
  # every changed position was selected
  sel = np.zeros_like(changed)
  d, r, _ = np.nonzero(m.weights > 0)
  sel[d, r, m.positions[m.weights > 0]] = True
  assert not (changed & ~sel).any()
  # slots whose position was drawn once show [MASK] 85% of the time
  counts = np.zeros(changed.shape, np.int32)
  np.add.at(counts, (d, r, m.positions[m.weights > 0]), 1)
  once = counts == 1
  share = changed[once].mean()
  n = once.sum()
  assert abs(share - 0.85) < 4 * np.sqrt(0.85 * 0.15 / n), share


@pytest.mark.fast
def test_positions_are_uniform_and_drawn_with_replacement(draws):
  b, m = draws
  row = 10  # a full-length row: 128 tokens, 3 special
  ids = np.asarray(b['input_ids'])[row]
  cand = np.nonzero(~np.isin(ids, [PAD, CLS, SEP, MASK]))[0]
  pos = m.positions[:, row][m.weights[:, row] > 0]
  freq = np.bincount(pos, minlength=len(ids))[cand]
  assert stats.chisquare(freq).pvalue > 1e-3
  # with replacement: expected distinct positions among k draws from c candidates
  k, c = int(m.weights[0, row].sum()), len(cand)
  distinct = np.mean([len(set(m.positions[i, row][:k])) for i in range(m.positions.shape[0])])
  expected = c * (1 - (1 - 1 / c) ** k)
  assert abs(distinct - expected) < 0.1, (distinct, expected)
  assert distinct < k - 0.5  # duplicates do happen (about 7% of slots at this length)


@pytest.mark.fast
def test_without_replacement_switch_draws_distinct_positions():
  b = _batch()
  m = jax.device_get(_mask(jax.random.key(3), b, with_replacement=False))
  for r in range(b['input_ids'].shape[0]):
    used = m.positions[r][m.weights[r] > 0]
    assert len(set(used.tolist())) == len(used)
  assert (m.weights.sum(-1) > 0).all()


@pytest.mark.fast
def test_row_without_candidates_gets_no_prediction():
  ids = jnp.array([[CLS, SEP, PAD, PAD], [CLS, 7, 8, SEP]])
  mask = jnp.array([[1, 1, 0, 0], [1, 1, 1, 1]])
  m = jax.jit(lambda key: masking.mask_tokens(key, ids, mask, mask_prob=0.5, max_predictions=2,
                                              mask_id=MASK, special_ids=(PAD, CLS, SEP)))(
                                                  jax.random.key(0))
  assert float(m.weights[0].sum()) == 0 and (m.input_ids[0] == ids[0]).all()
  assert float(m.weights[1].sum()) == 2


@pytest.mark.fast
@SAMPLERS
@pytest.mark.parametrize('temperature', [1.0, 2.0])
def test_sampler_matches_softmax(temperature, sampler):
  logits = jnp.array([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
  n = 40_000
  samples = sampler(jax.random.key(1), jnp.broadcast_to(logits, (n, 6)), temperature=temperature)
  freq = np.bincount(np.asarray(samples), minlength=6)
  probs = lambda t: np.asarray(jax.nn.softmax(logits / t), np.float64)
  expected = probs(temperature) / probs(temperature).sum() * n
  assert stats.chisquare(freq, expected).pvalue > 1e-3
  # and a wrong temperature is rejected by the same test
  wrong = probs(temperature * 1.5) / probs(temperature * 1.5).sum() * n
  assert stats.chisquare(freq, wrong).pvalue < 1e-6


@pytest.mark.fast
@SAMPLERS
def test_two_level_sampler_matches_softmax_across_blocks(sampler):
  """300 entries in blocks of 32 (the last one padded): frequencies follow the softmax (and the
  Gumbel sampler's hashed noise, entry by entry)."""
  logits = jax.random.normal(jax.random.key(3), (300,))
  n = 90_000
  samples = sampler(jax.random.key(4), jnp.broadcast_to(logits, (n, 300)), block=32)
  freq = np.bincount(np.asarray(samples), minlength=300)
  assert freq.shape == (300,)
  probs = np.asarray(jax.nn.softmax(logits), np.float64)
  assert stats.chisquare(freq, probs / probs.sum() * n).pvalue > 1e-3
  shifted = np.roll(probs, 1)  # the same probabilities one entry off: rejected
  assert stats.chisquare(freq, shifted / shifted.sum() * n).pvalue < 1e-6


@pytest.mark.fast
@SAMPLERS
def test_sampler_never_draws_an_impossible_entry(sampler):
  rng = np.random.default_rng(0)
  logits = np.where(rng.random((4000, 70)) < 0.9, -np.inf, rng.normal(0, 8, (4000, 70)))
  logits[:, 69] = np.where(np.isinf(logits).all(-1), 0.0, logits[:, 69])
  logits[:5] = -np.inf
  logits[0, 0] = logits[1, 69] = logits[2, 64] = logits[3, 63] = 0.0  # one possible entry
  logits[4, [3, 66]] = [50.0, -50.0]  # one entry of negligible but positive probability
  samples = np.asarray(sampler(jax.random.key(5), jnp.asarray(logits, jnp.float32), block=8))
  assert np.isfinite(logits[np.arange(4000), samples]).all()
  assert samples[:5].tolist() == [0, 69, 64, 63, 3]


@pytest.mark.fast
@SAMPLERS
def test_disallow_correct_never_returns_the_original(sampler):
  logits = jnp.zeros((2000, 5)).at[:, 2].set(20.0)  # the original token dominates
  targets = jnp.full((2000,), 2)
  s = sampler(jax.random.key(2), logits, disallow=targets)
  assert not (np.asarray(s) == 2).any()
  assert set(np.unique(np.asarray(s))) == {0, 1, 3, 4}


@pytest.mark.fast
def test_replacement_labels_only_changed_tokens():
  ids = jnp.array([[CLS, 10, 11, 12, 13, SEP]])
  positions = jnp.array([[1, 2, 3, 0]])
  weights = jnp.array([[1.0, 1.0, 1.0, 0.0]])
  sampled = jnp.array([[10, 20, 30, 99]])  # slot 0 samples the original token; slot 3 unused
  new, labels = masking.replace_tokens(ids, positions, weights, sampled)
  assert new.tolist() == [[CLS, 10, 20, 30, 13, SEP]]
  assert labels.tolist() == [[False, False, True, True, False, False]]


@pytest.mark.fast
def test_duplicate_positions_take_the_integer_mean_as_the_original():
  ids = jnp.array([[CLS, 10, 11, SEP]])
  positions = jnp.array([[1, 1, 2]])
  weights = jnp.ones((1, 3))
  new, labels = masking.replace_tokens(ids, positions, weights, jnp.array([[20, 25, 11]]))
  assert new.tolist() == [[CLS, 22, 11, SEP]]  # (20 + 25) // 2
  assert labels.tolist() == [[False, True, False, False]]


@pytest.mark.fast
def test_bert_80_10_10_switch_shows_mask_random_or_the_token():
  b = _batch()
  fn = jax.jit(jax.vmap(lambda k: _mask(k, b, mask_token_prob=0.8, random_token_prob=0.1,
                                        vocab_size=1000, with_replacement=False)))
  m = jax.device_get(fn(jax.random.split(jax.random.key(1), 200)))
  ids = np.asarray(b['input_ids'])
  d, r = np.nonzero(m.weights > 0)[:2]
  pos = m.positions[m.weights > 0]
  shown, original = m.input_ids[d, r, pos], ids[r, pos]
  n = len(shown)
  mask_share = (shown == MASK).mean()
  random_share = ((shown != MASK) & (shown != original)).mean()
  kept_share = (shown == original).mean()
  # a random token equals the original with probability 1/1000
  for share, p in ((mask_share, 0.8), (random_share, 0.1 * 0.999), (kept_share, 0.1 + 0.0001)):
    assert abs(share - p) < 4 * np.sqrt(p * (1 - p) / n), (share, p)
  random_ids = shown[(shown != MASK) & (shown != original)]
  assert stats.chisquare(np.bincount(random_ids // 100, minlength=10)).pvalue > 1e-3  # uniform
  # unselected positions never change
  changed = m.input_ids != ids[None]
  sel = np.zeros_like(changed)
  sel[np.nonzero(m.weights > 0)[0], r, pos] = True
  assert not (changed & ~sel).any()
