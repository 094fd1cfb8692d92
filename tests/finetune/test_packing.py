"""Packing fine-tuning's examples into rows: each example's logits and the loss's gradient are the
padded layout's (float32 tolerance), for every kind of task and both attention paths; rows fill
as they should; predictions come back in order; a packed fine-tuning learns as a padded one."""

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import TEST_MODEL, needs_hf
from electra_jax.finetune import batches
from electra_jax.finetune.kinds import classification
from electra_jax.finetune.kinds import heads
from electra_jax.finetune.kinds import multiple_choice
from electra_jax.finetune.kinds import prompted
from electra_jax.finetune.inputs import packing
from electra_jax.finetune.kinds import registry
from electra_jax.finetune.inputs import tasks as tasks_lib
from electra_jax.finetune.inputs.encode import Encoded
from electra_jax.model import networks as model_lib
from electra_jax.train import partitioning

LENGTH = 32


def _sequences(rng, n: int, pairs: bool = True) -> dict:
  """n encoded sequences of random lengths: [CLS] a [SEP] (b [SEP]) padded to LENGTH."""
  ids = np.zeros((n, LENGTH), np.int32)
  segments, mask = np.zeros_like(ids), np.zeros_like(ids)
  for i in range(n):
    a = int(rng.integers(1, 12))
    b = int(rng.integers(1, 8)) if pairs and rng.random() < 0.5 else 0
    tokens = [2] + list(rng.integers(5, 96, a)) + [3]
    types = [0] * len(tokens)
    if b:
      tokens += list(rng.integers(5, 96, b)) + [3]
      types += [1] * (b + 1)
    ids[i, :len(tokens)], segments[i, :len(tokens)], mask[i, :len(tokens)] = tokens, types, 1
  return {'input_ids': ids, 'segment_ids': segments, 'input_mask': mask}


def _data(kind: str, n: int, seed: int = 0) -> tuple:
  """(task, Encoded, model) of a kind, random."""
  rng = np.random.default_rng(seed)
  if kind in ('multiple_choice', 'prompted'):
    flat = _sequences(rng, n * 3)
    grouped = {k: v.reshape(n, 3, LENGTH) for k, v in flat.items()}
    labels = rng.integers(0, 3, n).astype(np.int32)
    task = tasks_lib.Task('mc', kind, ('0', '1', '2'), ('accuracy',))
    extra = {}
    if kind == 'prompted':  # a word of 1 to 3 tokens before each sequence's last [SEP]
      ends = grouped['input_mask'].sum(-1)
      words = np.arange(LENGTH) >= (ends - rng.integers(1, 4, ends.shape) - 1)[..., None]
      extra = {'word_mask': (words & (np.arange(LENGTH) < (ends - 1)[..., None])
                             & (np.arange(LENGTH) > 0)).astype(np.int32)}
    return task, Encoded(**grouped, labels=labels, truncated=0, token_inputs=extra)
  seqs = _sequences(rng, n, pairs=kind != 'tagging')
  if kind == 'tagging':
    labels = np.where(seqs['input_mask'] * (rng.random((n, LENGTH)) < 0.6) > 0,
                      rng.integers(0, 3, (n, LENGTH)), -1).astype(np.int32)
    labels[:, 0] = -1
    task = tasks_lib.Task('tags', kind, ('O', 'B-X', 'I-X'), ('f1',))
  elif kind == 'regression':
    labels = rng.random(n).astype(np.float32)
    task = tasks_lib.Task('reg', kind, (), ('spearman',))
  else:
    labels = rng.integers(0, 3, n).astype(np.int32)
    task = tasks_lib.Task('cls', 'classification', ('a', 'b', 'c'), ('accuracy',))
  return task, Encoded(**seqs, labels=labels, truncated=0)


def _model(kind: str, pooling: str, attention: str):
  """The test model with `attention` ('explicit', 'pallas'; 'modern': the modern backbone, its
  second layer local with a window of 8, on the explicit path)."""
  modern = {'backbone': 'modern', 'embedding_size': 32, 'num_layers': 2, 'local_window': 8,
            'attention': 'explicit'} if attention == 'modern' else {'attention': attention}
  cfg = model_lib.ModelConfig(**{**TEST_MODEL['model'], 'dropout_rate': 0.0,
                                 'attention_dropout_rate': 0.0, 'dtype': 'float32', **modern})
  if kind == 'multiple_choice':
    return multiple_choice.ChoiceScorer(cfg, 1, 0.0, pooling=pooling), (1, 3, 8)
  if kind == 'prompted':
    return prompted.PromptScorer(cfg), (1, 3, 8)
  if kind == 'tagging':
    return heads.Classifier(cfg, 3, 0.0, per_token=True), (1, 8)
  return heads.Classifier(cfg, 1 if kind == 'regression' else 3, 0.0, pooling=pooling), (1, 8)


@pytest.mark.parametrize('attention', ['explicit', 'pallas', 'modern'])
@pytest.mark.parametrize('kind, pooling', [('classification', 'cls'), ('classification', 'mean'),
                                           ('regression', 'cls'), ('tagging', 'cls'),
                                           ('multiple_choice', 'cls'), ('prompted', 'cls')])
def test_a_packed_batch_gives_each_example_the_padded_logits_and_gradient(kind, pooling,
                                                                          attention):
  """Each example's outputs and the loss's gradient in a packed row are those of a row of its
  own: no token sees another example (on the modern backbone: its rotary positions start again
  at each example, and its windows stop at the example's edges)."""
  task, data = _data(kind, 12)
  model, shape = _model(kind, pooling, attention)
  params = heads.init_params(model, jax.random.key(0), shape=shape)
  examples = np.arange(12)
  k = packing.choices(data)
  padded = batches.assemble(data, examples, packing.Layout(12 * k, 1, 12, k, LENGTH), False)
  packed_layout = packing.shapes(data, [examples], True, devices=1).largest
  packed = batches.assemble(data, examples, packed_layout, True)
  assert packed_layout.rows < 12 * k / 2 and packed_layout.slots > 2  # really packed
  loss = functools.partial(registry.get(kind).loss, model=model, task=task, deterministic=True)
  out = {}
  for name, batch in (('padded', padded), ('packed', packed)):
    batch = {key: jnp.asarray(v) for key, v in batch.items()}
    logits = classification.logits_of(params, batch, jax.random.key(1), True, model)
    if kind == 'tagging':  # each example's tokens, from its row
      logits = _tokens(np.asarray(logits), batch, data, examples)
    else:
      logits = np.asarray(heads.per_example(logits, batch['slots']))
    (value, _), grads = jax.jit(jax.value_and_grad(
        lambda p, b: loss(p, b, jax.random.key(1)), has_aux=True))(params, batch)
    out[name] = (logits, float(value), grads)
  np.testing.assert_allclose(out['packed'][0], out['padded'][0], rtol=1e-5, atol=1e-5)
  assert out['packed'][1] == pytest.approx(out['padded'][1], rel=1e-5)
  for a, b in zip(jax.tree.leaves(out['packed'][2]), jax.tree.leaves(out['padded'][2])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(out['packed'][2])) > 0


def _tokens(logits, batch, data, examples):
  """[X, LENGTH, C] of per-token outputs [R, L, C], each example's tokens at 0, 1, ..."""
  slots = np.asarray(batch['slots'])[:, 0]
  starts = np.asarray(batch['starts'])
  sizes = packing.lengths(data)[:, 0]
  out = np.zeros((len(examples), LENGTH) + logits.shape[2:], logits.dtype)
  for x, slot in enumerate(slots):
    r, e = divmod(int(slot), starts.shape[1])
    n = sizes[examples[x]]
    out[x, :n] = logits[r, starts[r, e]:starts[r, e] + n]
  return out


@pytest.mark.fast
def test_rows_are_filled_first_fit_longest_first_and_the_layout_fits_every_batch():
  sizes = [30, 3, 20, 10, 9, 2, 31, 12]
  rows = packing.plan(sizes, 32, True)
  assert [sorted(sizes[i] for i in r) for r in rows] == [[31], [2, 30], [12, 20], [3, 9, 10]]
  assert packing.plan(sizes, 32, False) == [[i] for i in range(8)]
  task, data = _data('classification', 64, seed=3)
  del task
  steps = [np.arange(i, i + 16) for i in range(0, 64, 16)]
  layout = packing.shapes(data, steps, True, devices=8).largest
  assert layout.rows % 8 == 0 and layout.examples == 16
  # room for the most sequences a row holds, rounded up (seeds whose rows hold 10 or 11 share
  # one program)
  most = max(len(r) for step in steps for r in packing.place(data, step, True))
  assert layout.slots % packing.SLOTS_MULTIPLE == 0 and most <= layout.slots < most + 4
  for examples in steps:  # each batch fits, and its examples' tokens are all there
    batch = batches.assemble(data, examples, layout, True)
    real, total = batches.fill(batch)
    assert real == int(packing.lengths(data)[examples].sum()) and total == layout.rows * LENGTH
    assert sorted(np.asarray(batch['slots'])[:, 0].tolist()) == sorted(
        set(np.asarray(batch['slots'])[:, 0].tolist()))  # one slot each


@pytest.mark.fast
@pytest.mark.parametrize('kind', ['classification', 'tagging', 'multiple_choice', 'prompted'])
def test_packed_predictions_come_back_in_order_and_equal_the_padded_ones(kind):
  task, data = _data(kind, 37, seed=4)
  del task
  model, shape = _model(kind, 'mean', 'explicit')
  params = heads.init_params(model, jax.random.key(2), shape=shape)
  mesh = partitioning.make_mesh()
  padded = batches.predict(model, params, data, 8, mesh, pack=False)
  packed = batches.predict(model, params, data, 8, mesh, pack=True)
  assert padded.shape[0] == 37 and padded.shape == packed.shape
  np.testing.assert_allclose(packed, padded, rtol=1e-5, atol=1e-5)
  calls = packing.prediction_calls(data, 8, True)
  assert [i for examples, _ in calls for i in examples] == list(range(37))
  assert len(calls) < len(packing.prediction_calls(data, 8, False))


@pytest.mark.fast
def test_a_run_takes_the_few_row_counts_that_leave_the_fewest_rows_empty():
  _, data = _data('classification', 400, seed=7)
  steps = [np.arange(i, i + 16) for i in range(0, 400, 16)][:-1]
  needed = [len(packing.place(data, b, True)) for b in steps]
  assert len(set(needed)) >= 3  # the batches vary
  for most in (1, 2, 3, 8):
    shapes = packing.shapes(data, steps, True, devices=1, most=most)
    sizes = [l.rows for l in shapes.layouts]
    assert len(sizes) <= most and sizes == sorted(sizes) and sizes[-1] == max(needed)
    taken = [shapes.holding(n).rows for n in needed]
    assert shapes.counts == tuple(taken.count(r) for r in sizes)
    assert shapes.mean_rows == pytest.approx(np.mean(taken))
    # no other choice of as many sizes (the largest kept) leaves fewer rows empty
    best = min(sum(next(r for r in sorted(c) if r >= n) for n in needed)
               for c in itertools.combinations(sorted(set(needed)), min(most, len(set(needed))))
               if max(needed) in c)
    assert sum(taken) == best, (most, sizes)
  assert packing.shapes(data, steps, True, devices=1, most=8).mean_rows == np.mean(needed)
  on_8 = packing.shapes(data, steps, True, devices=8, most=3)
  assert all(l.rows % 8 == 0 for l in on_8.layouts)


@pytest.mark.parametrize('kind', ['classification', 'multiple_choice', 'prompted'])
def test_a_packed_batch_over_8_devices_gives_the_loss_and_gradient_of_one_device(kind):
  """The train stream's packed batch, its rows split over 8 devices (each device's rows packed
  apart), gives the loss and gradient of the same examples packed for one device."""
  task, data = _data(kind, 64, seed=8)
  model, shape = _model(kind, 'mean', 'explicit')
  params = heads.init_params(model, jax.random.key(3), shape=shape)
  loss = functools.partial(registry.get(kind).loss, model=model, task=task, deterministic=True)
  grad = jax.jit(jax.value_and_grad(lambda p, b: loss(p, b, jax.random.key(1)), has_aux=True))
  out = {}
  for devices in (jax.devices()[:1], jax.devices()):
    mesh = partitioning.make_mesh(devices)
    shapes = batches.train_shapes(data, 16, 0, 4, True, mesh, most=2)
    batch = next(batches.train_batches(data, 16, 0, 0, partitioning.batch_sharding(mesh),
                                       shapes, True))
    assert batch['input_ids'].sharding.mesh.devices.size == len(devices)
    (value, _), grads = grad(params, batch)
    out[len(devices)] = float(value), jax.device_get(grads), batch['input_ids'].shape[0]
  assert out[8][2] % 8 == 0 and out[8][2] >= out[1][2]  # whole rows per device
  assert out[8][0] == pytest.approx(out[1][0], rel=1e-5)
  for a, b in zip(jax.tree.leaves(out[8][1]), jax.tree.leaves(out[1][1])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.fast
def test_packing_is_used_where_it_pays_and_texts_that_fill_their_rows_keep_a_row_each():
  from electra_jax.finetune import config as ft_config
  from electra_jax.finetune import run
  _, short = _data('classification', 64, seed=9)
  rng = np.random.default_rng(9)  # 17-32 tokens of 32: no two share a row
  sizes = rng.integers(17, LENGTH + 1, 64)
  mask = (np.arange(LENGTH)[None] < sizes[:, None]).astype(np.int32)
  long = Encoded(input_ids=mask * 7, segment_ids=np.zeros_like(mask), input_mask=mask,
                 labels=np.zeros(64, np.int32), truncated=0)
  assert packing.prediction_packing(short, 16, True) is True
  assert packing.prediction_packing(long, 16, True) is False
  assert packing.prediction_packing(short, 16, False) is False
  assert packing.prediction_packing(short, 16, None) is None  # a kind that does not pack
  cfg = ft_config.default_config()
  cfg.batch_size, cfg.max_seq_length = 16, LENGTH
  mesh = partitioning.make_mesh()
  lines = []
  shapes, pack = run._train_shapes(cfg, long, 0, 4, mesh, lines.append)
  assert not pack and shapes.largest.rows == 16 and len(shapes.layouts) == 1
  assert lines[0] == ('seed 0: packing would take 16.0 of 16 rows a step, and pays at 12 or '
                      'fewer: a row each')
  assert lines[1].startswith('seed 0: 16 rows of 32 tokens a step, ')
  assert 'packing=True' not in lines[1]
  shapes, pack = run._train_shapes(cfg, short, 0, 4, mesh, lines.append)
  assert pack and shapes.mean_rows <= 12 and ' packed in ' in lines[-1]
  cfg.packing = False
  shapes, pack = run._train_shapes(cfg, short, 0, 4, mesh, lines.append)
  assert not pack and lines[-1].endswith('(--config.packing=True packs the examples)')


@pytest.mark.fast
def test_a_layout_too_small_for_a_batch_is_an_error_not_a_dropped_example():
  _, data = _data('classification', 16, seed=5)
  small = dataclasses.replace(packing.shapes(data, [np.arange(16)], True, devices=1).largest,
                              rows=1)
  with pytest.raises(ValueError, match='rows'):
    batches.assemble(data, np.arange(16), small, True)


@pytest.mark.fast
def test_an_example_with_more_choices_than_a_prediction_call_has_rows_is_refused():
  _, data = _data('multiple_choice', 4, seed=6)
  with pytest.raises(ValueError, match='eval_batch_size to 3 or more'):
    packing.prediction_calls(data, 2, False)
  assert len(packing.prediction_calls(data, 3, False)) == 4


def _short_text_task(folder, n: int, seed: int) -> str:
  """A CSV of n short texts (1-3 words) labelled a, b or c."""
  rng = np.random.default_rng(seed)
  words = ('the', 'model', 'reads', 'short', 'texts', 'packed', 'into', 'rows', 'of', 'tokens')
  path = folder / f'{seed}.csv'
  with open(path, 'w') as f:
    f.write('text,label\n')
    for _ in range(n):
      f.write(' '.join(rng.choice(words, int(rng.integers(1, 4)))) + f',{"abc"[rng.integers(3)]}\n')
  return str(path)


@needs_hf
def test_the_finetune_benchmark_times_padded_packed_and_hf_trainer_on_the_same_examples(
    pretrained, tmp_path):
  from electra_jax.config import files as config_files
  from electra_jax.hardware import topology
  from benchmarks import finetune_benchmark
  cfg = config_files.load_config_file('configs/finetune/own.py')
  cfg.task.update(train=_short_text_task(tmp_path, 96, 0), dev=_short_text_task(tmp_path, 24, 1))
  cfg.update(init=pretrained, max_seq_length=32, batch_size=16, eval_batch_size=8)
  problem = finetune_benchmark.problem(cfg, log=lambda *_: None)
  result = finetune_benchmark.benchmark(problem, steps=2, repeats=2, peer='hf',
                                        log=lambda *_: None)
  assert result['hf_trainer']['trainer_steps'] == 2 + 2 * 2  # one Trainer, on through the runs
  assert result['padded']['rows'] == 16 and result['packed']['rows'] == 8  # (8 devices)
  assert result['packed']['real_tokens'] == 2 * result['padded']['real_tokens']
  for name in ('padded', 'packed', 'hf_trainer'):
    assert result[name]['train_examples_per_s'] > 0 and result[name]['predict_examples_per_s'] > 0
    # all start from random weights on 3 classes: a loss near ln 3 (the labels are the task's)
    assert abs(result[name]['first_loss'] - np.log(3)) < 0.25, (name, result[name]['first_loss'])
  lines = finetune_benchmark.report(result)
  assert [line.split()[0] for line in lines[2:5]] == ['padded', 'packed', 'hf_trainer']
  assert [line.split()[0] for line in lines[5:]] == ['padded:', 'padded', 'packed:', 'packed']
  # prediction with XLA's default CPU fusions timed beside ours (float32 on CPUs)
  assert len(result['padded']['predict_xla_defaults_runs']) == 2
  assert any(l.startswith("padded prediction compiled with XLA's default CPU fusions")
             for l in lines)
  # the loop beside its compiled step alone (batches already on the devices)
  assert len(result['packed']['step_alone_runs']) == 2
  assert result['packed']['step_alone_examples_per_s'] > 0
  assert any(l.startswith('packed: the loop ') for l in lines)
  estimate = finetune_benchmark.topology_estimate(problem, topology.for_compiling('v5e-8'),
                                                  log=lambda *_: None)
  assert estimate['packed']['rows'] < estimate['padded']['rows']
  assert estimate['packed_over_padded'] > 1  # fewer rows: a shorter step, by the cost model


@pytest.mark.fast
def test_this_xla_takes_the_option_that_prediction_is_compiled_with():
  """hardware/xla_options.py: an XLA that renamed the (experimental) option would leave prediction
  on its slower default fusions with a warning; here, that version is found out."""
  from electra_jax.hardware import xla_options
  assert xla_options.forward('float32') == {'xla_cpu_experimental_ynn_fusion_type': ''}
  assert xla_options.forward('bfloat16') is None


@pytest.mark.xla_defaults
def test_a_packed_fine_tuning_learns_as_a_padded_one(pretrained, tmp_path):
  """The same fine-tuning (seed, data, recipe) with examples packed into rows and padded a row
  each: its losses step by step and its dev scores agree (the same examples in each step; the
  rows differ only in float32 summation order), and both learn."""
  import json
  from electra_jax.finetune import config as config_lib
  from electra_jax.finetune import run
  from conftest import cat_texts as texts

  cfg = config_lib.default_config()
  cfg.update(init=pretrained, batch_size=16, eval_batch_size=16, max_seq_length=32, epochs=4.0,
             log_every=10, dropout_rate=0.0)
  cfg.task.update(name='own', train=texts(tmp_path / 'train.csv', 320, 0),
                  dev=texts(tmp_path / 'dev.csv', 160, 1))
  cfg.optimizer.learning_rate = 2e-3
  dev, losses = {}, {}
  for pack in (True, False):
    cfg.packing, lines = pack, []
    workdir = tmp_path / f'packed_{pack}'
    dev[pack] = run.finetune(cfg, str(workdir), log=lines.append)['seeds'][0]['dev']['accuracy']
    assert pack == any(' examples a step packed in ' in l for l in lines), lines[:6]
    losses[pack] = [r['loss'] for r in map(json.loads, open(workdir / 'seed_0' / 'metrics.jsonl'))
                    if r['split'] == 'train']
  assert len(losses[True]) == len(losses[False]) == 10  # (80 steps: a tenth of them apart)
  # the same to rounding at first; rounding's differences grow with the steps (chaos)
  np.testing.assert_allclose(losses[True][:4], losses[False][:4], rtol=2e-3)
  np.testing.assert_allclose(losses[True], losses[False], atol=5e-3)
  assert min(dev.values()) > 0.8 and abs(dev[True] - dev[False]) <= 0.02, dev
