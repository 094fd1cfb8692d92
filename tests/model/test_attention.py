"""The Pallas flash-attention kernels against the explicit path (Pallas' interpreter on the CPU),
their dropout mask's statistics, sharding, the model's choice of path, and lowering for GPU and TPU.

Interpret mode runs the kernels' own code (tiles, loops, online softmax, the regenerated dropout
mask, the two backward kernels) but not the Triton or Mosaic compilers: `test_kernels_lower_*`
checks that JAX lowers them for both (Triton IR, Mosaic MLIR); only a GPU or TPU can compile them.
"""

import contextlib
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from conftest import test_config
from electra_jax.config.pretraining import parse
from electra_jax.model import attention
from electra_jax.model import networks as model_lib
from electra_jax.model import flash
from electra_jax.model import splash
from electra_jax.model import attention_masks
from electra_jax.data.synthetic import synthetic_batch
from electra_jax.data.tokenizer import SPECIAL
from electra_jax.train import partitioning
from electra_jax.pretraining import setup as pretrain_setup
from electra_jax.train import step as step_lib

# small tiles, so every loop of every kernel runs several steps
SMALL = dict(block_q=32, block_k=16, block_k_dkv=32, block_q_dkv=16, block_q_dq=16, block_k_dq=32)


def _problem(dtype, length=64, batch=2, heads=2, head_dim=16, seed=0):
  keys = jax.random.split(jax.random.key(seed), 4)
  shape = (batch, length, heads, head_dim)
  q, k, v, do = (jax.random.normal(key, shape, jnp.float32).astype(dtype) for key in keys)
  lengths = np.array([length, length // 2 + 5] + [length - 3] * (batch - 2))
  key_mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
  key_mask[1, length // 4:length // 2 + 5] = 2  # row 1 packs two sequences, then padding
  return q, k, v, do, jnp.asarray(key_mask)


def _value_and_grads(fn, q, k, v, do):
  out, vjp = jax.vjp(fn, q, k, v)
  return (out,) + vjp(do)


def _kernels_and(reference, options, key_mask, common, q, k, v, do):
  """(the kernels', `reference`'s) output, dq, dk, dv with the same arguments `common`."""
  run = lambda fn: jax.jit(lambda *a: _value_and_grads(
      lambda q, k, v: fn(q, k, v, key_mask, **common), *a))(q, k, v, do)
  return run(functools.partial(flash.flash, options=options)), run(reference)


@pytest.mark.parametrize('backend, dtype, rate, direction, heads, head_dim', [
    ('gpu', jnp.float32, 0.1, '', 2, 16),
    ('gpu', jnp.float32, 0.1, 'ltr', 2, 16),
    ('gpu', jnp.float32, 0.0, '', 2, 16),
    ('tpu', jnp.float32, 0.1, 'rtl', 2, 16),  # both heads in one program (32 lanes: the width)
    ('gpu', jnp.bfloat16, 0.1, '', 2, 16),
    ('tpu', jnp.bfloat16, 0.1, 'ltr', 2, 16),
    ('tpu', jnp.float32, 0.1, '', 6, 64),  # three programs of two heads each (128 lanes)
])
def test_kernels_equal_the_explicit_path(backend, dtype, rate, direction, heads, head_dim):
  """Output and dQ, dK, dV of the kernels equal the explicit einsum + softmax + the same hashed
  dropout mask: float32 to 1e-5, bfloat16 to bfloat16's rounding of the operands.

  Row 1 packs two sequences and padding: each query sees the keys of its own sequence (padding
  the padding), so no query is left with no key to attend to."""
  q, k, v, do, key_mask = _problem(dtype, heads=heads, head_dim=head_dim)
  assert bool(attention_masks.allowed_mask(key_mask, q.shape[1], direction).any(-1).all())
  words = attention_masks.seed_words(jax.random.key(3))
  options = flash.FlashOptions(backend=backend, interpret=True, **SMALL)
  if backend == 'gpu':  # (TPU tiles are 128 rows; the interpreter takes these small ones)
    compiled = dataclasses.replace(options, interpret=False)
    assert not flash.unsupported(compiled, q.shape[1], q.shape[-1])
  common = dict(direction=direction, dropout_rate=rate, words=words)
  got, want = _kernels_and(attention.explicit, options, key_mask, common, q, k, v, do)
  for name, a, b in zip(('output', 'dq', 'dk', 'dv'), got, want):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    assert a.dtype == b.dtype and a.shape == b.shape
    scale = np.abs(b).max()
    tolerance = 1e-5 if dtype == jnp.float32 else 2e-2
    assert np.abs(a - b).max() <= tolerance * scale, name
  if rate:  # the mask is really applied: without dropout the output differs
    plain = attention.explicit(q, k, v, key_mask, direction=direction)
    assert np.abs(np.asarray(plain, np.float32) - np.asarray(got[0], np.float32)).max() > 0.05


@pytest.mark.fast
@pytest.mark.parametrize('backend, direction', [('gpu', ''), ('tpu', 'ltr')])
def test_kernels_with_a_window_visit_its_blocks_alone_and_equal_the_explicit_path(backend,
                                                                                   direction):
  """A local layer's window of 16 over 64 tokens in blocks of 16 and 32: the inner loops visit
  the blocks within the window alone (`_span`), and the output and gradients equal the explicit
  path's with the band masked, dropout on."""
  q, k, v, do, key_mask = _problem(jnp.float32)
  options = flash.FlashOptions(backend=backend, interpret=True, window=16, **SMALL)
  assert tuple(int(x) for x in flash._span(options, 32, 16, 16, 64)) == (1, 4)  # of 4 blocks
  assert tuple(int(x) for x in flash._span(options, 0, 32, 16, 64)) == (0, 3)
  common = dict(direction=direction, dropout_rate=0.1, words=attention_masks.seed_words(
      jax.random.key(3)), window=16)
  got, want = _kernels_and(attention.dense, options, key_mask, common, q, k, v, do)
  for name, a, b in zip(('output', 'dq', 'dk', 'dv'), got, want):
    assert np.abs(np.asarray(a) - np.asarray(b)).max() <= 1e-5 * np.abs(np.asarray(b)).max(), name
  wide = attention.dense(q, k, v, key_mask, **{**common, 'window': 0})
  assert np.abs(np.asarray(wide) - np.asarray(got[0])).max() > 0.05  # the window acts


@pytest.mark.fast
@pytest.mark.parametrize('path', ['explicit', 'kernel'])
@pytest.mark.parametrize('direction', ['', 'ltr', 'rtl'])
def test_sequences_packed_in_a_row_attend_as_in_rows_of_their_own(path, direction):
  """Two sequences packed in one row (the key mask numbering them) give each of their tokens the
  output and the gradients they get in rows of their own, padded: the packing of fine-tuning."""
  length, heads, head_dim = 32, 2, 16
  keys = jax.random.split(jax.random.key(5), 4)
  q, k, v, do = (jax.random.normal(key, (3, length, heads, head_dim)) for key in keys)
  a, b = 11, 14  # the two sequences' lengths
  own = np.zeros((3, length), np.int32)
  own[0, :a], own[1, :b] = 1, 1
  own[2, :a], own[2, a:a + b] = 1, 2  # row 2: both, then padding
  # row 2 holds row 0's first a positions, then row 1's first b
  pack = lambda x: x.at[2, :a].set(x[0, :a]).at[2, a:a + b].set(x[1, :b])
  q, k, v, do = map(pack, (q, k, v, do))
  options = flash.FlashOptions(backend='gpu', interpret=True, **SMALL)
  fn = (functools.partial(flash.flash, options=options) if path == 'kernel' else
        attention.explicit)
  out = jax.jit(lambda *x: _value_and_grads(
      lambda q, k, v: fn(q, k, v, jnp.asarray(own), direction=direction), *x))(q, k, v, do)
  for name, x in zip(('output', 'dq', 'dk', 'dv'), out):
    x = np.asarray(x)
    np.testing.assert_allclose(x[2, :a], x[0, :a], atol=1e-5, err_msg=name)
    np.testing.assert_allclose(x[2, a:a + b], x[1, :b], atol=1e-5, err_msg=name)


@pytest.mark.fast
def test_dropout_mask_statistics():
  """Keep rate 1 - p to within sampling error; neighbouring queries, keys, heads and batch rows
  and another key's mask are uncorrelated."""
  words = attention_masks.seed_words(jax.random.key(0))
  shape = (8, 4, 128, 128)
  keep = np.asarray(attention_masks.probs_keep(words, shape) >= attention_masks.threshold(0.1))
  n = keep.size
  assert abs(keep.mean() - 0.9) < 4 * np.sqrt(0.09 / n)
  k = keep.astype(np.float64)
  for axis in range(4):
    a, b = np.moveaxis(k, axis, 0)[1:], np.moveaxis(k, axis, 0)[:-1]
    assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 0.01, axis
  probs = attention_masks.probs_keep(attention_masks.seed_words(jax.random.key(1)), shape)
  other = np.asarray(probs >= attention_masks.threshold(0.1)).astype(np.float64)
  assert abs(np.corrcoef(k.ravel(), other.ravel())[0, 1]) < 0.01
  # rows of a batch split over devices get their global indices: row 3 of the whole = row 1 of
  # the part starting at row 2
  part = np.asarray(attention_masks.probs_keep(words, (2, 4, 128, 128), batch_offset=2))
  np.testing.assert_array_equal(part[1], np.asarray(attention_masks.probs_keep(words, shape))[3])


def test_sharded_kernels_equal_one_device():
  """Under the 8-device mesh the kernels run per device (shard_map) with global row indices:
  values and gradients equal the unsharded kernels and the explicit path."""
  mesh = partitioning.make_mesh()
  q, k, v, do, key_mask = _problem(jnp.float32, length=32, batch=8)
  words = attention_masks.seed_words(jax.random.key(5))
  options = flash.FlashOptions(backend='gpu', interpret=True, **SMALL)

  def run(fn, *args):
    return _value_and_grads(lambda q, k, v: fn(q, k, v, key_mask, dropout_rate=0.1, words=words),
                            *args)

  data = partitioning.batch_sharding(mesh)
  sharded = jax.jit(partitioning.on_mesh(
      lambda *a: run(functools.partial(flash.flash_sharded, options=options), *a), mesh),
      in_shardings=(data,) * 4, out_shardings=data)
  jaxpr = jax.make_jaxpr(partitioning.on_mesh(
      lambda *a: run(functools.partial(flash.flash_sharded, options=options), *a), mesh))(
          q, k, v, do)
  assert 'shard_map' in str(jaxpr)
  got = sharded(q, k, v, do)
  whole = jax.jit(lambda *a: run(functools.partial(flash.flash, options=options), *a))(
      q, k, v, do)
  want = jax.jit(lambda *a: run(attention.explicit, *a))(q, k, v, do)
  for a, b, c in zip(got, whole, want):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
    np.testing.assert_allclose(np.asarray(a), np.asarray(c), atol=1e-5)


def _tpu_layout(monkeypatch):
  """The TPU kernels' path on this CPU: heads grouped into lane blocks, the kernels in Pallas'
  interpreter."""
  tpu = flash.FlashOptions(backend='tpu', interpret=True)
  monkeypatch.setattr(attention, 'default_options', lambda backend: tpu)


@pytest.mark.parametrize('generator, layout', [('separate', 'gpu'), ('two_tower', 'gpu'),
                                               ('separate', 'tpu'), ('two_tower', 'tpu'),
                                               ('modern', 'gpu'), ('modern', 'tpu')])
def test_model_with_the_kernels_trains_as_the_explicit_path(generator, layout, monkeypatch):
  """model.attention='pallas' (interpreted here) gives the explicit path's logits and parameter
  gradients in training mode, attention and hidden dropout on, padding and ELECTRIC's towers, and
  the modern backbone's global and local layers (a window of 8); in the GPU kernels' layout and
  in the TPU kernels' (both heads in one program)."""
  if layout == 'tpu':
    _tpu_layout(monkeypatch)
  base = dict(vocab_size=64, embedding_size=16, hidden_size=32, num_layers=2, num_heads=2,
              intermediate_size=64, max_position_embeddings=32, generator=generator,
              generator_hidden_fraction=1.0, dropout_rate=0.1, attention_dropout_rate=0.1)
  if generator == 'modern':  # layer 0 global, layer 1 local
    base.update(generator='separate', backbone='modern', embedding_size=32, local_window=8,
                layer_norm_eps=1e-5)
  batch = synthetic_batch(4, 32, 64, seed=3)
  batch['input_mask'][1, 10:] = 0
  positions = np.tile(np.arange(5)[None] * 3, (4, 1))
  params = model_lib.init_params(model_lib.ModelConfig(**base), jax.random.key(0))

  def loss(params, impl):
    model = model_lib.Electra(model_lib.ModelConfig(**base, attention=impl))
    gen, disc = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                            batch['input_mask'], positions, False,
                            rngs={'dropout': jax.random.key(9)})
    return jnp.sum(gen[..., :3] ** 2) + jnp.sum(disc * jnp.arange(32)), (gen, disc)

  grads = {impl: jax.jit(jax.grad(functools.partial(loss, impl=impl), has_aux=True))(params)
           for impl in ('explicit', 'pallas')}
  for a, b in zip(jax.tree.leaves(grads['pallas']), jax.tree.leaves(grads['explicit'])):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=1e-4)
  for a, b in zip(jax.tree.leaves(grads['pallas']), jax.tree.leaves(grads['explicit'])):
    assert np.abs(np.asarray(a)).max() > 0 or np.abs(np.asarray(b)).max() == 0
  model = lambda impl: model_lib.Electra(model_lib.ModelConfig(**base, attention=impl))
  evaluated = {impl: jax.jit(model(impl).apply)(
      {'params': params}, batch['input_ids'], batch['segment_ids'], batch['input_mask'],
      positions) for impl in ('explicit', 'pallas')}  # without dropout
  for a, b in zip(evaluated['pallas'], evaluated['explicit']):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5)


@pytest.mark.parametrize('layout', ['gpu', 'tpu'])
def test_train_step_with_the_kernels_on_8_devices_equals_the_explicit_path(layout, monkeypatch):
  """The whole train step (masking, generator, sampling, discriminator, AdamW) with the kernels
  under the 8-device mesh ends at the explicit path's parameters (dropout on), in either layout."""
  if layout == 'tpu':
    _tpu_layout(monkeypatch)
  config = test_config(**{'model.attention_dropout_rate': 0.1, 'model.dropout_rate': 0.1})
  mesh = partitioning.make_mesh()
  batch = synthetic_batch(16, 32, 96, seed=1)
  results = {}
  for impl in ('explicit', 'pallas'):
    config.model.attention = impl
    setup = pretrain_setup.build_setup(parse(config), SPECIAL)
    init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
    state = init_fn()
    for _ in range(2):
      state, metrics = train_fn(state, jax.device_put(batch, partitioning.batch_sharding(mesh)))
    results[impl] = (jax.device_get(state.params), float(metrics['loss'][0]))
  assert results['pallas'][1] == pytest.approx(results['explicit'][1], rel=1e-5)
  for a, b in zip(jax.tree.leaves(results['pallas'][0]), jax.tree.leaves(results['explicit'][0])):
    np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.fast
def test_auto_falls_back_when_the_kernels_fail_their_check(monkeypatch):
  """On a device where the kernels do not compile or disagree with the explicit path, 'auto' keeps
  the explicit softmax (and the fused path where no dropout is active) and says why."""
  cfg = model_lib.ModelConfig(hidden_size=128, num_heads=2)
  assert attention.note(cfg, 128) == ''  # a CPU: the explicit path, nothing to say
  ok, why = attention.kernel_check('tpu')  # Mosaic kernels cannot run on the CPU backend
  assert not ok and why
  monkeypatch.setattr(jax, 'default_backend', lambda: 'tpu')
  assert attention.path_name(cfg, jnp.bfloat16, False, 128, 64) == 'explicit'
  assert attention.path_name(cfg, jnp.bfloat16, True, 128, 64) == 'fused'
  assert attention.note(cfg, 128).startswith(
      'warning: the Pallas flash kernel failed its check on this tpu (')
  monkeypatch.setattr(attention, 'kernel_check', lambda backend, *args: (True, ''))
  assert attention.path_name(cfg, jnp.bfloat16, False, 128, 64) == 'pallas'
  assert attention.path_name(cfg, jnp.bfloat16, False, 100, 64) == 'explicit'  # shape
  assert attention.note(cfg, 128).startswith('attention: Pallas flash kernel on tpu')


def test_a_path_registered_in_attention_runs_in_every_layer(monkeypatch):
  """A path added to attention.PATHS alone (here the explicit softmax, counted) is a value of
  model.attention: each layer's attention runs on it, with the same outputs as the explicit
  path; allowed for 'auto' and first, 'auto' takes it for a train step; one that draws no dropout
  gives way to the explicit path where dropout is active."""
  calls = []

  def counted(q, k, v, key_mask, platform='', **kw):
    calls.append(q.shape)
    return attention.explicit(q, k, v, key_mask, **kw)

  monkeypatch.setitem(attention.PATHS, 'counted', attention.Path('counted', counted, dropout=True))
  config = test_config()
  batch = synthetic_batch(4, config.data.max_seq_length, config.model.vocab_size)
  args = (batch['input_ids'], batch['segment_ids'], batch['input_mask'],
          np.broadcast_to(np.arange(config.data.max_seq_length), batch['input_ids'].shape))
  base = model_lib.ModelConfig.from_config(config.model)
  params = model_lib.init_params(base, jax.random.key(0))
  out = {a: model_lib.Electra(dataclasses.replace(base, attention=a)).apply({'params': params},
                                                                            *args)
         for a in ('explicit', 'counted')}
  layers = base.num_layers + base.generator_num_layers  # the discriminator's and the generator's
  assert len(calls) == layers, (len(calls), layers)
  for a, b in zip(out['explicit'], out['counted']):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # Allowed for 'auto' and first in the registry: 'auto' takes it, and a whole train step (the
  # first step of a run, dropout on) runs on it in every layer, with the explicit path's loss.
  first = attention.Path('counted', counted, dropout=True, title='counted softmax',
                         auto=lambda backend, dtype: True)
  others = {k: v for k, v in attention.PATHS.items() if k != 'counted'}
  monkeypatch.setattr(attention, 'PATHS', {'counted': first, **others})
  assert attention.resolve(base, config.data.max_seq_length)[0].attention == 'counted'
  mesh = partitioning.make_mesh()
  losses = {}
  for impl in ('explicit', 'auto'):
    calls.clear()
    config.model.attention = impl
    setup = pretrain_setup.build_setup(parse(config), SPECIAL)
    init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
    step_batch = synthetic_batch(16, config.data.max_seq_length, config.model.vocab_size)
    _, metrics = train_fn(init_fn(), jax.device_put(step_batch, partitioning.batch_sharding(mesh)))
    losses[impl] = (float(metrics['loss'][0]), len(calls))
  assert losses['auto'][0] == pytest.approx(losses['explicit'][0], rel=1e-6)
  assert losses['explicit'][1] == 0 and losses['auto'][1] >= layers  # traced in each layer
  monkeypatch.setitem(attention.PATHS, 'counted', attention.Path('counted', counted, dropout=False))
  assert attention.path_name(dataclasses.replace(base, attention='counted'), jnp.float32,
                             deterministic=False) == 'explicit'
  with pytest.raises(ValueError, match="model.attention is 'nowhere'; use one of 'auto', "
                     "'counted', 'pallas', 'splash', 'fused', 'explicit'"):
    dataclasses.replace(base, attention='nowhere').validate()


@pytest.mark.fast
@pytest.mark.parametrize('window', [0, 128])
@pytest.mark.parametrize('platform, backend', [('cuda', 'gpu'), ('tpu', 'tpu')])
def test_kernels_lower_for_gpu_and_tpu(platform, backend, window):
  """JAX lowers the forward and both backward kernels of ELECTRA-Base's attention (batch 8 x 512,
  12 heads of 64, bfloat16, dropout; and a local layer's window of 128, whose loops' bounds are
  the program's) to Triton (GPU) and Mosaic (TPU) from this CPU machine.
  Triton's lowering asks the device which GPU it is for: from jax 0.12 on, with no GPU here, an
  abstract mesh names one (an H100; jax 0.10 took none)."""
  options = attention.default_options(backend)

  def loss(q, k, v, key_mask, words):
    out = flash.flash(q, k, v, key_mask, dropout_rate=0.1, words=words, options=options,
                      window=window)
    return jnp.sum(out.astype(jnp.float32))

  target = {'gpu': '__gpu$xla.gpu.triton', 'tpu': 'tpu_custom_call'}[backend]
  shape = jax.ShapeDtypeStruct((8, 512, 12, 64), jnp.bfloat16)
  gpu = jax.sharding.AbstractDevice(device_kind='NVIDIA H100 80GB HBM3', num_cores=None,
                                    platform='gpu')
  with (jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ('x',), abstract_device=gpu))
        if backend == 'gpu' else contextlib.nullcontext()):
    exported = export.export(
        jax.jit(jax.grad(loss, argnums=(0, 1, 2))), platforms=[platform],
        disabled_checks=[export.DisabledSafetyCheck.custom_call(target)])(
            shape, shape, shape, jax.ShapeDtypeStruct((8, 512), jnp.int32),
            jax.ShapeDtypeStruct((2,), jnp.uint32))
  text = exported.mlir_module()
  assert text.count(f'@{target}') == 3  # forward, dK/dV, dQ
  for name in ('electra_flash_forward', 'electra_flash_dkv', 'electra_flash_dq'):
    assert name in text


@pytest.mark.fast
def test_tpu_paths_at_8192_tokens_hold_no_whole_score_matrix():
  """On TPUs the flash kernels take up to TPU_LONGEST tokens and XLA's dense product (the 'fused'
  path, on every platform) up to LONG: at 8,192 'auto' takes JAX's splash kernel, which streams
  key blocks; a GPU's flash kernel takes it; the kernel check hears the run's windows."""
  tpu = attention.default_options('tpu')
  assert not flash.unsupported(tpu, flash.TPU_LONGEST, 64, 12)
  assert 'scoped VMEM' in flash.unsupported(tpu, 2 * flash.TPU_LONGEST, 64, 12)
  assert not flash.unsupported(attention.default_options('gpu'), 8192, 64, 12)
  cfg = model_lib.ModelConfig(backbone='modern', hidden_size=768, embedding_size=768,
                              num_heads=12, dtype='bfloat16', platform='tpu',
                              attention_dropout_rate=0.0, dropout_rate=0.0, local_window=128)
  checked = []
  check = lambda path: checked.append(path.name) or (True, '')
  assert attention._auto(cfg, 'bfloat16', 8192, 64, check)[0] == 'splash'  # (no dropout)
  assert attention._auto(cfg, 'bfloat16', 1000, 64, check)[0] == 'fused'  # (not 128's multiple)
  assert attention._auto(cfg, 'bfloat16', 1024, 64, check)[0] == 'pallas'
  assert attention._auto(dataclasses.replace(cfg, platform='gpu'), 'bfloat16', 8192, 64,
                         check)[0] == 'pallas'
  fused = dataclasses.replace(cfg, platform='gpu', attention='fused')
  assert attention.path_name(fused, 'bfloat16', True, 8192, 64, 12) == 'explicit'
  assert attention.path_name(fused, 'bfloat16', True, 1024, 64, 12) == 'fused'
  assert attention._windows(cfg) == (0, 128)


@pytest.mark.fast
def test_options_reject_shapes_the_kernels_do_not_take():
  gpu = attention.default_options('gpu')
  assert not flash.unsupported(gpu, 512, 64)
  assert not flash.unsupported(gpu, 32, 16)
  assert 'power' in flash.unsupported(gpu, 48, 64) or 'divide' in flash.unsupported(
      gpu, 48, 64)
  assert 'head size' in flash.unsupported(gpu, 512, 48)
  tpu = attention.default_options('tpu')
  assert not flash.unsupported(tpu, 512, 64)
  assert flash.unsupported(tpu, 200, 64)
  # on TPUs heads go two by two into 128 lanes (or one program takes the whole width)
  assert flash.group_size(tpu, 12, 64) == 2 and flash.group_size(tpu, 4, 128) == 1
  assert flash.group_size(tpu, 1, 64) == 1 and flash.group_size(gpu, 12, 64) == 1
  assert not flash.unsupported(tpu, 512, 64, heads=1)
  assert 'lanes' in flash.unsupported(tpu, 512, 64, heads=3)
  assert 'lanes' in flash.unsupported(tpu, 512, 48, heads=4)


@pytest.mark.parametrize('window', [0, 64])
def test_the_splash_kernel_equals_the_explicit_path(window):
  """JAX's splash kernel (TPUs; Pallas' interpreter here) gives the explicit path's values and
  gradients on a row of one sequence and a row packing two and padding, in every direction, with
  and without a local layer's window; lengths that are not a multiple of 128 are refused, and so
  are GPUs."""
  ok, why = attention.splash_check('cpu', 256, 'float32', 0.0, ('', 'ltr', 'rtl'), 64, (window,))
  assert ok, why
  assert 'multiple of 128' in attention.PATHS['splash'].problem('tpu', 200, 64, 2)
  assert 'TPU' in attention.PATHS['splash'].problem('gpu', 256, 64, 2)
  assert splash.block(8192) == 512 and splash.block(384) == 384 and splash.block(640) == 128
