"""The train step across devices, the loop end to end, resume, configs and bad input."""

import dataclasses
import functools
import json
import os
import re
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from conftest import (CHILD_ENV, MODERN, ROOT, WORDS, cpu_burner, launch_command, load_config,
                      objective_config, poisoned_setup, record_config_reads, run_config_file,
                      test_config, write_corpus)
from electra_jax.config.pretraining import parse
from electra_jax import UserError
from electra_jax.config import files as config_files
from electra_jax.data import prepare as prepare_lib
from electra_jax.data import records as records_lib
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.objectives import common as objective_common
from electra_jax.objectives import registry as objectives
from electra_jax.storage import tf_import
from electra_jax.data.synthetic import synthetic_batch
from electra_jax.data.tokenizer import SPECIAL
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import logs as logs_lib
from electra_jax.train import partitioning
from electra_jax.pretraining import run as pretrain
from electra_jax.pretraining import setup as pretrain_setup
from electra_jax.train import step as step_lib


def _run_steps(config, devices, batches):
  mesh = partitioning.make_mesh(devices)
  setup = pretrain_setup.build_setup(parse(config), SPECIAL)
  init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
  state = init_fn()
  sharding = partitioning.batch_sharding(mesh)
  out = []
  for b in batches:
    state, m = train_fn(state, {k: jax.device_put(v, sharding) for k, v in b.items()})
    out.append(jax.device_get(m))
  return state, out  # on the devices, laid out as the step leaves it


@pytest.mark.parametrize('objective,backbone', [('electra', 'bert'), ('cocolm', 'bert'),
                                                ('amos', 'bert'), ('electra', 'modern')])
def test_step_on_eight_devices_equals_step_on_one(objective, backbone):
  # dropout on: its random bits must not depend on the sharding (COCO-LM: nor its crops', nor
  # its contrastive loss, whose negatives are the global batch's; AMOS: nor its Gumbel noise)
  modern = MODERN if backbone == 'modern' else {}
  config = objectives.fit_model_config(test_config(**{'objective.name': objective, **modern}),
                                       lambda *_: None)
  batches = [synthetic_batch(16, 32, config.model.vocab_size, seed=s) for s in range(3)]
  state8, m8 = _run_steps(config, jax.devices(), batches)
  state1, m1 = _run_steps(config, jax.devices()[:1], batches)
  assert int(state8.step) == int(state1.step) == 3
  for a, b in zip(jax.tree.leaves(state8.params), jax.tree.leaves(state1.params)):
    np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4)
  for a, b in zip(m8, m1):
    for k in a:
      np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-4, err_msg=k)


@pytest.mark.parametrize('objective',
                         ['electra', 'electra_15', 'mlm', 'all_tokens_mlm', 'electric', 'cocolm',
                          'amos'])
def test_microbatched_steps_equal_whole_batch_steps(objective, monkeypatch):
  """Gradient accumulation: 4 parts of 8 rows on 8 devices give the whole batch's steps (dropout
  off: it is the one random choice drawn per part). ELECTRA 15% draws with the Gumbel sampler of
  GPUs and TPUs (its per-slot seeds split into the parts like the rest), the others invert the CDF
  as CPUs do. COCO-LM's contrastive loss takes its negatives within each part: weighted 0 here,
  the rest of its step (the crops' draws too) is the whole batch's."""
  config = objective_config(objective)
  within_parts = ()
  if objective == 'cocolm':
    config.objective.contrast_weight = 0.0
    within_parts = ('scl_loss', 'scl_accuracy')
  if objective == 'electra_15':
    chosen = objective_common.ObjectiveConfig.from_config
    monkeypatch.setattr(objective_common.ObjectiveConfig, 'from_config', classmethod(
        lambda cls, c, platform='': dataclasses.replace(chosen(c, platform), sampler='gumbel')))
    assert pretrain_setup.build_setup(parse(config), SPECIAL).objective_cfg.sampler == 'gumbel'
  batches = [synthetic_batch(32, 32, config.model.vocab_size, seed=s) for s in range(2)]
  whole, m_whole = _run_steps(config, jax.devices(), batches)
  config.microbatches = 4
  parts, m_parts = _run_steps(config, jax.devices(), batches)
  for a, b in zip(jax.tree.leaves(parts), jax.tree.leaves(whole)):
    np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4)
  for a, b in zip(m_parts, m_whole):
    assert a.keys() == b.keys()
    for k in a:
      if k in within_parts:
        assert a[k][1] == b[k][1], k  # counted over the whole batch all the same
        continue
      np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-4, err_msg=k)
  # (with dropout the parts draw their own masks: the remat test below)


def test_fsdp_steps_equal_data_parallel_steps_with_an_eighth_of_the_state_per_device(tmp_path):
  config = test_config()  # dropout on; the data-parallel steps are the 8-device test's
  batches = [synthetic_batch(16, 32, config.model.vocab_size, seed=s) for s in range(3)]
  dp, m_dp = _run_steps(config, jax.devices(), batches)
  config.fsdp = True
  state, m_fsdp = _run_steps(config, jax.devices(), batches)
  for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(dp)):
    np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4)
  for a, b in zip(m_fsdp, m_dp):
    for k in a:
      np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-4, err_msg=k)
  # the split: every matrix (parameters and both Adam moments) holds 1/8 per device; LayerNorm
  # vectors and biases stay whole
  leaves = jax.tree_util.tree_flatten_with_path(state)[0]
  sizes = {'split': 0, 'whole': 0}
  for path, x in leaves:
    name = partitioning._path(path)
    shard = x.addressable_shards[0].data.size
    if x.ndim >= 2:
      assert shard * 8 == x.size, name
      sizes['split'] += x.size
    else:
      assert shard == x.size, name
      sizes['whole'] += x.size
  assert sizes['split'] > 20 * sizes['whole']
  # an FSDP checkpoint restores into the replicated layout, and back
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'c'))
  ckpt.save(3, state, {'step': 3})
  ckpt.close()
  config.fsdp = False
  init_dp, _, _ = step_lib.compile_steps(pretrain_setup.build_setup(parse(config), SPECIAL),
                                          partitioning.make_mesh())
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'c'))
  restored, _ = ckpt.restore(3, init_dp())
  ckpt.close()
  for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(dp)):
    assert a.sharding.is_fully_replicated
    np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4)


def test_the_memory_benchmark_sizes_the_fsdp_split_without_running_a_step():
  from benchmarks import step_benchmark as benchmark
  config = test_config()  # the steps of the FSDP test, compiled for abstract arrays
  dp = benchmark.step_memory(config)
  config.fsdp = True
  fsdp = benchmark.step_memory(config)
  assert dp['parameters'] == fsdp['parameters'] > 0 and dp['state_mb'] == fsdp['state_mb']
  assert dp['state_per_device_mb'] == pytest.approx(dp['state_mb'])
  assert fsdp['state_per_device_mb'] < dp['state_mb'] / 6  # 1/8 of the matrices, vectors whole
  assert fsdp['memory']['arguments_mb'] < dp['memory']['arguments_mb'] / 3


@pytest.mark.fast
def test_fsdp_rules_split_one_dimension_the_devices_divide():
  spec = partitioning.leaf_spec
  assert spec('discriminator/layer_0/attention/query/kernel', (64, 32), 8) == \
      partitioning.P('data', None)  # whole rows: the minor dimension stays whole
  assert spec('discriminator/layer_0/attention/query/kernel', (12, 64), 8) == \
      partitioning.P(None, 'data')  # the rows do not divide: the columns
  assert spec('discriminator/layer_0/ffn/kernel', (64, 12), 8) == partitioning.P('data', None)
  assert spec('embeddings/word_embeddings/embedding', (30522, 128), 8) == \
      partitioning.P(None, 'data')  # 30,522 rows do not divide by 8: the width does
  assert spec('embeddings/LayerNorm/scale', (64,), 8) == partitioning.P()
  assert spec('layer_0/ffn/bias', (128,), 8) == partitioning.P()
  assert spec('layer_0/ffn/kernel', (6, 10), 8) == partitioning.P()  # nothing divides: whole


def _temporaries(config):
  setup = pretrain_setup.build_setup(parse(config), SPECIAL)
  mesh = partitioning.make_mesh(jax.devices()[:1])
  init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
  batch = {k: jax.device_put(v, partitioning.batch_sharding(mesh)) for k, v in synthetic_batch(
      config.data.batch_size, 32, config.model.vocab_size).items()}  # as _run_steps puts it
  return train_fn.lower(init_fn(), batch).compile().memory_analysis().temp_size_in_bytes


def test_remat_and_microbatches_give_the_same_step_in_less_memory():
  # dropout on; the plain steps are the 8-device test's (and its 1-device one)
  config = test_config()
  batches = [synthetic_batch(16, 32, config.model.vocab_size, seed=s) for s in range(2)]
  plain, _ = _run_steps(config, jax.devices(), batches)
  memory = {'plain': _temporaries(config)}
  config.model.remat = True  # recomputed activations draw the same dropout masks
  remat, _ = _run_steps(config, jax.devices(), batches)
  for a, b in zip(jax.tree.leaves(remat), jax.tree.leaves(plain)):
    np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4)
  setup = pretrain_setup.build_setup(parse(config), SPECIAL)
  jaxpr = str(jax.make_jaxpr(functools.partial(step_lib.train_step, setup))(
      jax.eval_shape(lambda: step_lib.init_state(setup)), batches[0]))
  layers = 2 * config.model.num_layers  # the generator's and the discriminator's
  assert jaxpr.count('remat2[') >= layers, f'each of the {layers} layers is rematerialized'
  # (XLA's CPU scheduler keeps recomputed activations alive: remat saves memory on GPU/TPU only)
  config.model.remat = False
  config.microbatches = 4
  memory['microbatches'] = _temporaries(config)
  assert memory['microbatches'] < 0.5 * memory['plain'], memory
  # With dropout the parts draw their own masks, not the whole batch's: the same loss up to
  # noise, different parameters (1 device: the programs just compiled for their memory)
  parts, m_parts = _run_steps(config, jax.devices()[:1], batches)
  config.microbatches = 1
  whole, m_whole = _run_steps(config, jax.devices()[:1], batches)
  for a, b in zip(m_parts, m_whole):
    loss = lambda m: float(m['loss'][0] / m['loss'][1])
    assert loss(a) == pytest.approx(loss(b), rel=0.05) and loss(a) != loss(b)
  assert not all(np.allclose(a, b) for a, b in zip(jax.tree.leaves(parts.params),
                                                   jax.tree.leaves(whole.params)))


def test_a_few_steps_of_the_tiny_config_reduce_the_loss():
  from configs import tiny
  c = tiny.get_config()
  c.data.batch_size = 8
  c.optimizer.update(learning_rate=1e-3, warmup_steps=1)
  batch = synthetic_batch(8, c.data.max_seq_length, c.model.vocab_size)
  _, m = _run_steps(c, jax.devices()[:1], [batch] * 6)  # one device compiles in half the time
  losses = [float(x['loss'][0]) for x in m]
  assert losses[-1] < losses[1] - 1.0, losses


@pytest.mark.fast
def test_config_overrides_reach_derived_fields_and_typos_fail():
  c, fields = config_files.config_from(f'{ROOT}/configs/small.py', [
      'objective.disc_weight=10', 'model.hidden_size=512', 'data.max_seq_length=256',
      'optimizer.decay_steps=1000', 'data.eval_batch_size=64'])
  assert fields == ['objective.disc_weight', 'model.hidden_size', 'data.max_seq_length',
                    'optimizer.decay_steps', 'data.eval_batch_size']
  assert c.objective.disc_weight == 10.0
  assert (c.model.intermediate_size, c.model.num_heads, c.objective.max_predictions) == (
      2048, 8, 39)
  # setting a derived field leaves its source alone
  assert (c.optimizer.decay_steps, c.train_steps) == (1000, 1_000_000)
  assert (c.data.eval_batch_size, c.data.batch_size) == (64, 128)
  with pytest.raises(UserError, match=r"did you mean --config.objective.disc_weight\?"):
    config_files.config_from(f'{ROOT}/configs/small.py', ['objective.disc_wieght=10'])
  with pytest.raises(AttributeError):  # locked, as ml_collections' config files are: no new field
    c.objective.disc_wieght = 10
  c, _ = config_files.config_from(f'{ROOT}/configs/small.py',
                                  ['model.remat', 'data.corpus=a/*.txt'])
  assert (c.model.remat, c.data.corpus) == (True, 'a/*.txt')  # a bare bool field is true
  for given, sentence in [('model=3', 'model is a section; set one of its fields'),
                          ('data.corpus', 'give data.corpus a value'),
                          ('model.remat=maybe', 'model.remat takes true or false'),
                          ('seed=1.5', 'seed takes an integer')]:
    with pytest.raises(UserError, match=sentence):
      config_files.config_from(f'{ROOT}/configs/small.py', [given])


def _cli(*args):
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  return subprocess.run([sys.executable, os.path.join(ROOT, 'launch', 'train.py'), *args],
                        capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.fast
def test_cli_typo_is_one_sentence_with_the_close_match(tmp_path):
  r = _cli(f'--config={ROOT}/configs/tiny.py', f'--workdir={tmp_path}/w',
           '--config.objective.disc_wieght=3')
  assert r.returncode == 2
  assert r.stderr.strip().splitlines()[-1] == (
      "error: unknown config field 'objective.disc_wieght'; did you mean "
      "--config.objective.disc_weight?")
  assert not os.path.exists(tmp_path / 'w')
  # a field out of its range, found by the run's own check (after the flags)
  r = _cli(f'--config={ROOT}/configs/tiny.py', f'--workdir={tmp_path}/w', '--config.train_steps=0')
  assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
      'error: train_steps is 0; it must be a number of at least 1'), r.stderr
  assert not os.path.exists(tmp_path / 'w')
  # the other mistakes of a config file and its overrides: the sentence the launch prints after
  # 'error: ' (the same path as the first above)
  tiny = f'{ROOT}/configs/tiny.py'
  for spec, overrides, sentence in [
      (f'{ROOT}/configs/tinny.py', [], f'--config: the config file {ROOT}/configs/tinny.py does '
       f'not exist; did you mean {ROOT}/configs/tiny.py?'),
      (f'{tiny}:big', [], f"--config={tiny}:big: configs/tiny.py has no variant 'big'; use "
       'configs/tiny.py or configs/tiny.py:modern'),
      (tiny, ['disc_wieght=3'], "unknown config field 'disc_wieght'; did you mean "
       '--config.objective.disc_weight?'),
      (tiny, ['data.batch_size=abc'],
       '--config.data.batch_size=abc: data.batch_size takes an integer'),
      (tiny, ['model.remat=maybe'], '--config.model.remat=maybe: model.remat takes true or false')]:
    with pytest.raises(UserError) as raised:
      config_files.config_from(spec, overrides)
    assert str(raised.value) == sentence


@pytest.mark.fast
def test_a_field_named_without_its_section_is_the_one_field_of_that_name(tmp_path):
  """--config.disc_weight=50, as the design card writes it, is --config.objective.disc_weight=50."""
  c, fields = config_files.config_from(f'{ROOT}/configs/base.py',
                                       ['disc_weight=50', 'hidden_size=512', 'seed=3'])
  assert fields == ['objective.disc_weight', 'model.hidden_size', 'seed']
  assert (c.objective.disc_weight, c.model.hidden_size, c.seed) == (50.0, 512, 3)
  two = tmp_path / 'two.py'  # a config with one field name in two sections
  two.write_text('import ml_collections\n'
                 'def get_config():\n'
                 '  return ml_collections.ConfigDict({"a": {"rate": 0.1}, "b": {"rate": 0.2}})\n')
  with pytest.raises(UserError, match=r'several sections \(a.rate, b.rate\)'):
    config_files.config_from(str(two), ['rate=0'])


@pytest.mark.fast
def test_cli_bad_input_exits_non_zero_with_one_sentence(tmp_path):
  r = _cli(f'--config={ROOT}/configs/tiny.py', f'--workdir={tmp_path}/w',
           f'--config.data.corpus={tmp_path}/missing/*.txt')
  assert r.returncode == 2
  last = r.stderr.strip().splitlines()[-1]
  assert last.startswith('error: the corpus') and 'matches no file' in last
  assert not os.path.exists(tmp_path / 'w')


def _small_run_config(corpus, **overrides):
  # (test_config's decay horizon is fixed: extending train_steps on resume keeps the schedule)
  return test_config(**{'data.corpus': corpus, 'eval_every': 2, 'save_every': 2, **overrides})


def _quiet(*_):
  pass


@pytest.mark.fast
def test_curves_are_redrawn_at_most_once_a_minute_and_when_the_run_ends(tmp_path):
  values = {'loss': 1.0, 'mlm_loss': 2.0}
  logs = logs_lib.Logs(str(tmp_path / 'a'))  # the default interval: 60 s
  logs.write('train', 2, values)
  logs.write('eval', 2, values)
  assert not (tmp_path / 'a' / 'curves.png').exists()  # a run's first minute: not drawn yet
  logs.close()  # the end of the run draws what is new
  assert (tmp_path / 'a' / 'curves.png').read_bytes().startswith(b'\x89PNG')
  logs = logs_lib.Logs(str(tmp_path / 'b'), plot_every_s=0.0)
  logs.write('eval', 2, values)  # the interval has passed: drawn at the evaluation
  drawn = (tmp_path / 'b' / 'curves.png').read_bytes()
  assert drawn.startswith(b'\x89PNG')
  (tmp_path / 'b' / 'curves.png').unlink()
  logs.write('train', 4, values)
  logs.close()  # nothing evaluated since: not drawn again
  assert not (tmp_path / 'b' / 'curves.png').exists()


@pytest.mark.fast
def test_event_files_are_written_without_tensorflow_and_a_run_goes_on_without_tensorboard(
    tmp_path):
  """The event files are the tensorboard package's format, written without TensorFlow (read
  here by TensorFlow); without the package a run logs the rest and says so once, before its first
  step, instead of dying at its first write."""
  script = ('import sys\n'
            'if sys.argv[2] == "without": sys.modules["tensorboard"] = None\n'
            'from electra_jax.train import logs\n'
            'l = logs.Logs(sys.argv[1], plot_every_s=1e9)\n'
            'print("made", flush=True)\n'
            'l.write("train", 3, {"loss": 2.5, "accuracy": float("nan")})\n'
            'l.write("eval", 3, {"loss": 1.5})\n'
            'l.board.close()\n'
            'print("tensorflow" in sys.modules)\n')
  for mode in ('with', 'without'):
    folder = tmp_path / mode
    done = subprocess.run([sys.executable, '-c', script, str(folder), mode], capture_output=True,
                          text=True, env=CHILD_ENV, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.split() == ['made', 'False'], done.stderr[-2000:]
    assert len(open(folder / 'metrics.jsonl').readlines()) == 2
    if mode == 'without':
      assert done.stderr.strip() == (
          f'warning: no TensorBoard event files in {folder}: the tensorboard package is not '
          'installed (pip install tensorboard); metrics.jsonl and curves.png hold the same values')
      assert not (folder / 'tensorboard').exists()
  assert sorted(_board(tmp_path / 'with')) == [('eval/loss', 3, 1.5), ('train/loss', 3, 2.5)]


@pytest.mark.xla_defaults
def test_train_end_to_end_then_resume_equals_uninterrupted(tmp_path, corpus_file):
  w1, w2 = str(tmp_path / 'interrupted'), str(tmp_path / 'straight')
  s = pretrain.train_and_evaluate(_small_run_config(corpus_file), w1, log=_quiet)
  for name in ('config.json', 'metrics.jsonl', 'curves.png', 'summary.json'):
    assert os.path.getsize(os.path.join(w1, name)) > 0, name
  board = {(tag, step): value for tag, values in _accumulated(w1).items()
           for step, value in values}
  jsonl = [json.loads(l) for l in open(os.path.join(w1, 'metrics.jsonl'))]
  for record in jsonl:  # every logged value is in TensorBoard too, at its step
    for key in ('loss', 'mlm_loss', 'disc_auc', 'learning_rate', 'grad_norm', 'tokens_per_s',
                'mfu'):
      if key in record:
        assert board[(f'{record["split"]}/{key}', record['step'])] == pytest.approx(record[key])
  assert ('eval/disc_auc', 4) in board and ('train/grad_norm', 2) in board
  assert s['step'] == 4 and 0 <= s['eval']['disc_auc'] <= 1
  assert os.path.isdir(os.path.join(w1, 'checkpoints', '4'))
  lines = []
  pretrain.train_and_evaluate(_small_run_config(corpus_file, train_steps=6), w1,
                               log=lines.append)
  assert any('resumed from' in l and '/4 (input stream at example 16 of each of 4 reader(s))' in l
             for l in lines)  # 4 train shards: 4 readers of 16 / 4 rows per step
  assert any(l.startswith('MFU against ') and 'measured float32 2048^3 matmul' in l for l in lines)
  progress = [l for l in lines if re.match(r'^\d\d:\d\d:\d\d step ', l)]
  assert progress and all(' | MFU ' in l for l in progress)
  assert 0 < jsonl[0]['mfu'] < 1
  pretrain.train_and_evaluate(_small_run_config(corpus_file, train_steps=6), w2, log=_quiet)
  restored = []
  for w in (w1, w2):
    ckpt = checkpoint_lib.Checkpointer(os.path.join(w, 'checkpoints'))
    assert ckpt.latest_step() == 6
    config = parse(_small_run_config(corpus_file, train_steps=6))
    setup = pretrain_setup.build_setup(config, SPECIAL)
    target = jax.jit(lambda: step_lib.init_state(setup))()
    restored.append(ckpt.restore(6, target)[0])
    ckpt.close()
  for a, b in zip(jax.tree.leaves(restored[0]), jax.tree.leaves(restored[1])):
    np.testing.assert_array_equal(a, b)


def test_keep_best_keeps_the_best_evaluated_checkpoint_and_other_shapes_are_refused(
    tmp_path, records_dir):
  config = _small_run_config('', **{'data.records': records_dir, 'train_steps': 8,
                                    'save_every': 0, 'keep_checkpoints': 1,
                                    'keep_best': 'disc_auc', 'optimizer.learning_rate': 3e-2})
  workdir = str(tmp_path / 'w')
  summary = pretrain.train_and_evaluate(config, workdir, log=_quiet)
  evals = {r['step']: r['disc_auc'] for r in logs_lib.read_jsonl(
      os.path.join(workdir, 'metrics.jsonl')) if r['split'] == 'eval'}
  assert sorted(evals) == [2, 4, 6, 8] and len(set(evals.values())) == 4, evals
  best = max(evals, key=evals.get)  # an AUC: higher is better
  assert summary['best_checkpoint'] == os.path.join(workdir, 'checkpoints', str(best))
  assert sorted(int(p) for p in os.listdir(os.path.join(workdir, 'checkpoints'))) == sorted(
      {best, 8})
  # A fine-tuning starts from the checkpoint its init_step names: latest, best, or a step number.
  from electra_jax.finetune import pretrained as pretrained_lib
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'))
  saved = {s: ckpt.restore_arrays(s)[0]['params']['discriminator'] for s in {best, 8}}
  ckpt.close()
  for step, want in (('latest', 8), ('best', best), ('8', 8), (str(best), best)):
    got = pretrained_lib.load(workdir, step=step, log=_quiet)
    assert got.checkpoint == os.path.join(workdir, 'checkpoints', str(want))
    for a, b in zip(jax.tree.leaves(got.params['discriminator']), jax.tree.leaves(saved[want])):
      np.testing.assert_array_equal(a, b)
  assert best != 8 and any(not np.array_equal(a, b) for a, b in zip(
      jax.tree.leaves(saved[best]), jax.tree.leaves(saved[8]))), evals
  with pytest.raises(UserError, match=rf'init_step=3, but {workdir} has no checkpoint of that '
                     rf'step; its checkpoints are at steps \[{min(best, 8)}'):
    pretrained_lib.load(workdir, step='3', log=_quiet)
  # Without config.json to compare with, a model of another width is refused by the checkpoint.
  os.remove(os.path.join(workdir, 'config.json'))
  wider = _small_run_config('', **{'data.records': records_dir, 'train_steps': 10,
                                   'model.hidden_size': 64})
  with pytest.raises(UserError, match=r'checkpoints/8 holds a model of other shapes than this '
                     r'config \(discriminator/.* \(32,\) in the checkpoint, \(64,\) in this '
                     r'config'):
    pretrain.train_and_evaluate(wider, workdir, log=_quiet)


@pytest.mark.fast
@pytest.mark.parametrize('overrides, message', [
    ({'data.batch_size': 12}, 'does not divide among 8 devices'),
    ({'microbatches': 4}, 'does not split into microbatches=4 equal parts on 8 devices; use a '
     'multiple of 32'),
    ({'microbatches': -1}, 'microbatches is -1; it must be a number of at least 0'),
    ({'model.vocab_size': 100, 'data.records': 'RECORDS'}, 'set --config.model.vocab_size=96'),
    ({'data.max_seq_length': 64, 'model.max_position_embeddings': 64, 'data.records': 'RECORDS'},
     'hold 32-token examples'),
    ({'data.max_seq_length': 64}, 'exceeds model.max_position_embeddings'),
    ({'data.vocab': 'VOCAB', 'model.vocab_size': 90}, 'has 96 entries but model.vocab_size is 90'),
    ({'data.corpus': 'EMPTY'}, 'holds no text'),
    ({'data.corpus': 'TINY', 'model.vocab_size': 5000}, 'too small for a vocabulary of 5000'),
    ({'model.generator': 'big'}, "model.generator is 'big'"),
    ({'keep_best': 'auc'}, "keep_best is 'auc', not a held-out metric of objective electra; "
     'use one of loss, '),
    ({'keep_best': 'main_mlm_loss'}, "keep_best is 'main_mlm_loss', not a held-out metric of "
     'objective electra; use one of loss, mlm_loss, disc_loss, disc_auc, mlm_accuracy, '),
    ({'keep_best': 'disc_auc'}, 'but eval_every is 0; set --config.eval_every'),
])
def test_bad_input_is_refused_and_leaves_nothing(tmp_path, records_dir, overrides, message):
  empty = tmp_path / 'empty.txt'
  empty.write_text('\n\n')
  tiny_corpus = write_corpus(str(tmp_path / 'tiny.txt'), num_docs=3)
  subst = {'RECORDS': records_dir, 'EMPTY': str(empty), 'TINY': tiny_corpus,
           'VOCAB': os.path.join(records_dir, 'vocab.model')}
  overrides = {k: subst.get(v, v) if isinstance(v, str) else v for k, v in overrides.items()}
  workdir = tmp_path / 'w'
  with pytest.raises(UserError, match=message):
    pretrain.train_and_evaluate(test_config(**overrides), str(workdir), log=_quiet)
  assert not workdir.exists()
  assert sorted(p.name for p in tmp_path.iterdir()) == ['empty.txt', 'tiny.txt']


@pytest.mark.fast
def test_records_that_are_unfinished_damaged_or_of_another_vocabulary_are_refused(
    tmp_path, records_dir):
  copy = tmp_path / 'records'
  shutil.copytree(records_dir, copy)
  other_vocab = tmp_path / 'other.model'
  tokenizer_lib.train_sentencepiece(
      [' '.join(WORDS[i:] + WORDS[:i]).upper() for i in range(len(WORDS))], str(other_vocab), 96,
      lower_case=False)
  shard = copy / 'train-00001-of-00004.tfrecord'
  cases = [({'data.vocab': str(other_vocab)}, 'tokenized with another vocabulary than'),
           ({}, 'the records folder is damaged'),
           ({}, r'unfinished records folder \(4 of 5 shards written\)')]
  for i, (overrides, message) in enumerate(cases):
    if i == 1:
      shard.write_bytes(shard.read_bytes()[:-10])  # cut short, as by an interrupted copy
    if i == 2:
      (copy / 'train-00001-of-00004.json').unlink()
      (copy / records_lib.METADATA).unlink()
    workdir = tmp_path / f'w{i}'
    with pytest.raises(UserError, match=message):
      pretrain.train_and_evaluate(test_config(**{'data.records': str(copy), **overrides}),
                                   str(workdir), log=_quiet)
    assert not workdir.exists()


@pytest.mark.fast
def test_unwritable_workdir_and_other_runs_are_refused(tmp_path, records_dir):
  blocker = tmp_path / 'file'
  blocker.write_text('x')
  with pytest.raises(UserError, match='cannot write to --workdir'):
    pretrain.train_and_evaluate(test_config(**{'data.records': records_dir}),
                                 str(blocker / 'sub'), log=_quiet)
  with pytest.raises(UserError, match='is a file'):
    pretrain.train_and_evaluate(test_config(**{'data.records': records_dir}), str(blocker),
                                 log=_quiet)
  w = tmp_path / 'run'
  w.mkdir()
  (w / 'config.json').write_text(test_config(**{'data.records': records_dir}).to_json())
  (w / 'checkpoints' / '2').mkdir(parents=True)  # a run that saved (one that did not is replaced)
  with pytest.raises(UserError, match=r'holds a run with a different config \(seed 0 -> 5\)'):
    pretrain.train_and_evaluate(test_config(**{'data.records': records_dir, 'seed': 5}), str(w),
                                 log=_quiet)
  with pytest.raises(UserError, match=r'\(model.hidden_size 32 -> 64, model.intermediate_size'):
    pretrain.train_and_evaluate(
        test_config(**{'data.records': records_dir, 'model.hidden_size': 64}), str(w), log=_quiet)
  assert sorted(p.name for p in w.iterdir()) == ['checkpoints', 'config.json']


@pytest.mark.fast
def test_eval_step_is_deterministic(records_dir):
  config = test_config(**{'data.records': records_dir})
  mesh = partitioning.make_mesh()
  setup = pretrain_setup.build_setup(parse(config), SPECIAL)
  init_fn, _, eval_fn = step_lib.compile_steps(setup, mesh)
  state = init_fn()
  b = {k: jax.device_put(v, partitioning.batch_sharding(mesh))
       for k, v in synthetic_batch(16, 32, 96).items()}
  a1 = jax.device_get(eval_fn(state.params, b, jnp.asarray(0, jnp.int32)))
  a2 = jax.device_get(eval_fn(state.params, b, jnp.asarray(0, jnp.int32)))
  a3 = jax.device_get(eval_fn(state.params, b, jnp.asarray(1, jnp.int32)))
  for k in a1:
    np.testing.assert_array_equal(a1[k], a2[k])
  assert any((a1[k] != a3[k]).any() for k in a1)


@pytest.mark.fast
def test_a_nonfinite_step_changes_nothing_and_is_counted():
  """Step 3's loss is NaN (the poisoned step of the run below: one compiled program for both)."""
  setup = poisoned_setup(parse(test_config()), [3])
  mesh = partitioning.make_mesh()
  init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
  batch = {k: jax.device_put(v, partitioning.batch_sharding(mesh))
           for k, v in synthetic_batch(16, 32, 96).items()}
  state, states, metrics = init_fn(), [], []
  for _ in range(4):
    state, m = train_fn(state, batch)
    states.append(jax.device_get(state))  # the step donates its input: keep a host copy
    metrics.append(jax.device_get(m))
  s2, s3, s4 = states[1:]
  m3, m4 = metrics[2:]
  assert int(s3.step) == 3 and int(s3.nonfinite_steps) == 1 and int(s3.first_nonfinite) == 3
  for a, b in zip(jax.tree.leaves((s2.params, s2.opt_state)), jax.tree.leaves((s3.params,
                                                                              s3.opt_state))):
    np.testing.assert_array_equal(a, b)
  assert float(m3['nonfinite_steps'][0]) == 1 and float(m4['nonfinite_steps'][0]) == 0
  assert all(np.isfinite(np.asarray(v)).all() for v in jax.tree.leaves(m3))
  assert int(s4.nonfinite_steps) == 1 and int(s4.first_nonfinite) == 3
  changed = [not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(s3.params),
                                                       jax.tree.leaves(s4.params))]
  assert any(changed)  # the next finite step trains again


@pytest.mark.fast
def test_state_shapes_from_known_parameter_shapes_equal_the_traced_ones():
  """A setup that knows its parameters' shapes (a fine-tuning's, computed for the layer-wise
  factors) gives the state's shapes without tracing the initializers again: the same shapes."""
  setup = pretrain_setup.build_setup(parse(test_config()), SPECIAL)
  traced = step_lib.state_shapes(setup)
  known = dataclasses.replace(setup, param_shapes=jax.eval_shape(
      setup.init_params, jax.random.key(0)), init_params=None)  # never called
  assert jax.tree.structure(step_lib.state_shapes(known)) == jax.tree.structure(traced)
  assert jax.tree.leaves(step_lib.state_shapes(known)) == jax.tree.leaves(traced)


@pytest.mark.fast
def test_initial_weights_given_to_a_setup_are_arguments_of_its_init_program():
  """A fine-tuning's pre-trained weights reach the init program as arguments, one per array, not
  as constants compiled into it (which made a Base fine-tuning's cached init program 314 MB and
  its cache key the weights'); the state starts from them. (The seed is the one argument
  besides.)"""
  setup = pretrain_setup.build_setup(parse(test_config()), SPECIAL)
  given = jax.tree.map(lambda x: x + 1.0, setup.init_params(jax.random.key(9)))
  mesh = partitioning.make_mesh(jax.devices()[:1])
  arguments = {}
  for name, variant in (('given', dict(init_params=lambda key, p: p, init_args=(given,))),
                        ('closed over', dict(init_params=lambda key: given))):
    init_fn = step_lib.compile_steps(dataclasses.replace(setup, **variant), mesh)[0]
    arguments[name] = len(jax.tree.leaves(init_fn.lower().args_info))
    for a, b in zip(jax.tree.leaves(init_fn().params), jax.tree.leaves(given)):
      np.testing.assert_array_equal(a, b)
  assert arguments == {'given': 1 + len(jax.tree.leaves(given)), 'closed over': 1}


@pytest.mark.fast
def test_the_clipped_guard_is_a_select_in_place_and_the_unclipped_one_a_conditional():
  """Clipped, the guard's flag is known before the update: the program has no conditional (which
  GPU command buffers leave out) and the select of new or old values adds no second copy of the
  optimizer state to the step's temporary memory. Unclipped, it is a conditional."""
  mesh = partitioning.make_mesh(jax.devices()[:1])
  batch = synthetic_batch(16, 32, 96, seed=2)
  clipped = pretrain_setup.build_setup(parse(test_config()), SPECIAL)
  compiled = {}
  for name, setup in (('select', clipped), ('conditional', dataclasses.replace(
      clipped, check_update=True))):
    init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
    shape = init_fn.eval_shape()
    compiled[name] = train_fn.lower(shape, batch).compile()
  conditionals = lambda c: len(re.findall(r'\sconditional\(', c.as_text()))
  assert conditionals(compiled['select']) == 0 and conditionals(compiled['conditional']) == 1
  opt_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shape.opt_state))
  temp = {k: c.memory_analysis().temp_size_in_bytes for k, c in compiled.items()}
  assert temp['select'] - temp['conditional'] < opt_bytes / 2, (temp, opt_bytes)


def test_a_nan_stops_the_run_naming_the_step_or_is_skipped(tmp_path, records_dir, monkeypatch):
  real = pretrain_setup.build_setup
  monkeypatch.setattr(pretrain_setup, 'build_setup',
                      lambda config, special, *rest, **named: poisoned_setup(
                          config, [3], lambda c, s: real(c, s, *rest, **named)))
  overrides = {'data.records': records_dir, 'train_steps': 6, 'save_every': 2, 'log_every': 2}
  workdir = str(tmp_path / 'stop')
  with pytest.raises(UserError, match=r'^step 3: the loss, gradient norm or update is not '
                     r'finite .* '
                     r'last good checkpoint .*/checkpoints/(2|4) is intact'):
    pretrain.train_and_evaluate(test_config(**overrides), workdir, log=_quiet)
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'))
  last = ckpt.latest_step()
  target = jax.jit(lambda: step_lib.init_state(real(parse(test_config(**overrides)), SPECIAL)))()
  restored, _ = ckpt.restore(last, target)
  ckpt.close()
  assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(restored.params))
  lines = []
  summary = pretrain.train_and_evaluate(test_config(**overrides, nonfinite='skip'),
                                         str(tmp_path / 'skip'), log=lines.append)
  assert summary['step'] == 6 and np.isfinite(summary['eval']['loss'])
  assert any(l.startswith('warning: skipped 1 step(s)') and 'first at step 3' in l for l in lines)


def _wait_for_step(proc, step):
  lines = []
  for line in proc.stdout:  # wait until it trains
    lines.append(line)
    if f' step {step}/' in f' {line}':
      return lines
  raise AssertionError(''.join(lines[-20:]))


def test_sigterm_saves_a_checkpoint_and_exits_within_seconds_on_a_loaded_machine(
    tmp_path, records_dir):
  """A spot VM's notice is 30 s: the checkpoint is saved and the process gone within it, with the
  machine loaded (a shared host at 2-3x its cores). The notice is the test's timeout, nothing is
  timed: a process still there after it fails the test."""
  import signal
  config_file = run_config_file(tmp_path, records_dir, train_steps=1_000_000)
  workdir = tmp_path / 'w'
  proc = subprocess.Popen(launch_command(config_file, workdir), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=CHILD_ENV)
  _wait_for_step(proc, 3)  # started and compiled (unloaded: the load is for the stop)
  with cpu_burner(2):
    _wait_for_step(proc, 5)  # trains on the loaded machine, then the notice comes
    proc.send_signal(signal.SIGTERM)
    try:
      rest, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
      proc.kill()
      raise AssertionError('the run was still there 30 s after SIGTERM') from None
  assert proc.returncode == 143, rest[-3000:]  # 128 + SIGTERM: not a finished run
  stopped = [l for l in rest.splitlines() if l.startswith('stopped by SIGTERM at step ')]
  assert stopped, rest[-3000:]
  step = int(stopped[0].split('at step ')[1].split(':')[0])
  assert step >= 3 and os.path.isdir(workdir / 'checkpoints' / str(step))


def test_a_damaged_latest_checkpoint_falls_back_to_the_one_before(tmp_path, records_dir):
  overrides = {'data.records': records_dir, 'save_every': 2}
  workdir = tmp_path / 'w'
  pretrain.train_and_evaluate(test_config(**overrides), str(workdir), log=_quiet)  # saves 2, 4
  for p in (workdir / 'checkpoints' / '4' / 'state').rglob('*'):  # as a full disk would leave them
    if p.is_file() and p.stat().st_size > 1024:
      p.write_bytes(p.read_bytes()[:p.stat().st_size // 2])
  lines = []
  summary = pretrain.train_and_evaluate(test_config(**overrides, train_steps=6), str(workdir),
                                         log=lines.append)
  warnings = [l for l in lines if l.startswith('warning: checkpoint')]
  assert len(warnings) == 1 and '/checkpoints/4 cannot be read' in warnings[0], lines
  assert any(l.startswith('resumed from') and '/checkpoints/2 ' in l for l in lines)
  assert summary['step'] == 6
  assert os.path.isdir(workdir / 'checkpoints' / '4.damaged')  # set aside; step 4 saved again
  assert os.path.isdir(workdir / 'checkpoints' / '4')
  for step in (2, 4, 6):  # nothing readable left: all set aside (kept), trained from step 0
    for p in (workdir / 'checkpoints' / str(step) / 'state').rglob('*'):
      if p.is_file() and p.stat().st_size > 1024:
        p.write_bytes(b'')
  lines = []
  summary = pretrain.train_and_evaluate(test_config(**overrides, train_steps=6), str(workdir),
                                         log=lines.append)
  assert sum(l.startswith('warning: checkpoint') for l in lines) == 3, lines
  assert any('no checkpoint in' in l and 'starting from step 0' in l for l in lines), lines
  assert not any('resumed from' in l for l in lines) and summary['step'] == 6
  assert sorted(os.listdir(workdir / 'checkpoints')) == [
      '2', '2.damaged', '4', '4.damaged', '4.damaged-1', '6', '6.damaged']


def test_checkpoints_carry_the_config_and_vocabulary_and_refuse_other_records(
    tmp_path, records_dir, corpus_file):
  records_copy = tmp_path / 'records'
  shutil.copytree(records_dir, records_copy)
  overrides = {'data.records': str(records_copy), 'train_steps': 2}
  workdir = tmp_path / 'w'
  pretrain.train_and_evaluate(test_config(**overrides), str(workdir), log=_quiet)
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'))
  _, _, saved = ckpt.restore_latest(jax.jit(lambda: step_lib.init_state(
      pretrain_setup.build_setup(parse(test_config(**overrides)), SPECIAL)))(), log=_quiet)
  ckpt.close()
  assert saved['vocab_fingerprint'] == records_lib.read_metadata(records_dir)['vocab_fingerprint']
  assert saved['config'] == json.loads(test_config(**overrides).to_json())
  # The same path now holds records of another vocabulary of the same size.
  other_vocab = tmp_path / 'other.model'
  tokenizer_lib.train_sentencepiece(
      [' '.join(WORDS[i:] + WORDS[:i]).upper() for i in range(len(WORDS))], str(other_vocab), 96,
      lower_case=False)
  shutil.rmtree(records_copy)
  prepare_lib.records_folder(records_lib.Settings(source=corpus_file, max_seq_length=32,
                                           eval_fraction=0.2, vocab=str(other_vocab)),
                      str(records_copy), log=_quiet)
  with pytest.raises(UserError, match='was trained on records of another vocabulary'):
    pretrain.train_and_evaluate(test_config(**{**overrides, 'train_steps': 4}), str(workdir),
                                 log=_quiet)


def test_sigkill_at_a_random_step_then_resume_ends_bit_identical(tmp_path, records_dir):
  import random
  config_file = run_config_file(tmp_path, records_dir, train_steps=12, save_every=2)
  kill_at = random.randint(3, 10)
  killed, straight = tmp_path / 'killed', tmp_path / 'straight'
  proc = subprocess.Popen(launch_command(config_file, killed), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=CHILD_ENV)
  _wait_for_step(proc, kill_at)
  proc.kill()  # SIGKILL: no handler, no last save
  proc.wait()
  # Saves are asynchronous: the kill may land before the latest one is committed. The resumed
  # run must start from the newest committed checkpoint (from scratch when there is none).
  ckpt = checkpoint_lib.Checkpointer(os.path.join(killed, 'checkpoints'))
  committed = ckpt.latest_step()
  ckpt.close()
  assert committed is None or committed <= kill_at + 1, (kill_at, committed)
  scratch = tmp_path / 'tmp'  # the resumed run's temporary folder: empty again when it ends
  scratch.mkdir()
  run = subprocess.run(launch_command(config_file, killed), capture_output=True, text=True,
                       check=False, env={**CHILD_ENV, 'TMPDIR': str(scratch)})
  assert run.returncode == 0, run.stderr[-3000:]
  assert not os.listdir(scratch), os.listdir(scratch)
  resumed = [l for l in run.stdout.splitlines() if l.startswith('resumed from')]
  if committed is None:
    assert not resumed and 'steps 0 -> 12' in run.stdout, (kill_at, run.stdout[-3000:])
  else:
    assert len(resumed) == 1, (kill_at, committed, run.stdout[-3000:])
    step = int(resumed[0].split('/checkpoints/')[1].split()[0])
    assert step == committed, (kill_at, committed, step)
  # The uninterrupted run, in this process (the same program, flags and devices as the child's).
  pretrain.train_and_evaluate(load_config(config_file), str(straight), log=_quiet)
  states = []
  for workdir in (killed, straight):
    ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'))
    setup = pretrain_setup.build_setup(parse(load_config(config_file)), SPECIAL)
    target = jax.jit(lambda: step_lib.init_state(setup))()
    states.append(ckpt.restore(12, target)[0])
    ckpt.close()
  for a, b in zip(jax.tree.leaves(states[0]), jax.tree.leaves(states[1])):
    np.testing.assert_array_equal(a, b, err_msg=f'killed at step {kill_at}')
  # One record per step, the resumed run's (its losses are the uninterrupted run's), in
  # metrics.jsonl and in TensorBoard's events.
  logged = {}
  for workdir in (killed, straight):
    records = [json.loads(l) for l in open(workdir / 'metrics.jsonl')]
    train = [(r['step'], r['loss']) for r in records if r['split'] == 'train']
    assert [step for step, _ in train] == list(range(1, 13)), (kill_at, committed, train)
    logged[workdir] = train
  assert logged[killed] == logged[straight], (kill_at, committed)
  board = _board(killed)
  assert sorted(step for tag, step, _ in board if tag == 'train/loss') == list(range(1, 13))
  assert [step for step, _ in _accumulated(killed)['train/loss']] == list(range(1, 13))
  assert {step: v for tag, step, v in board if tag == 'train/loss'} == pytest.approx(
      dict(logged[killed]))


def _accumulated(workdir) -> dict[str, list[tuple[int, float]]]:
  """{tag: [(step, value)]} of a workdir's scalars as TensorBoard's classic reader returns them
  (`EventAccumulator`, which scripts and tbparse-style tools build on)."""
  events = event_accumulator.EventAccumulator(os.path.join(workdir, 'tensorboard'),
                                              size_guidance={event_accumulator.SCALARS: 0})
  events.Reload()
  return {tag: [(e.step, e.value) for e in events.Scalars(tag)]
          for tag in events.Tags()['scalars']}


def _board(workdir) -> list[tuple[str, int, float]]:
  """(tag, step, value) of every scalar in a workdir's TensorBoard events."""
  tf = tf_import.tensorflow()
  out = []
  for path in tf.io.gfile.glob(os.path.join(workdir, 'tensorboard', '*tfevents*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      out += [(v.tag, event.step, v.simple_value) for v in event.summary.value]
  return out


def test_a_checkpoint_saved_on_eight_devices_restores_on_one(tmp_path):
  setup = pretrain_setup.build_setup(parse(test_config()), SPECIAL)
  mesh8 = partitioning.make_mesh()
  mesh1 = partitioning.make_mesh(jax.devices()[:1])
  init8, train8, _ = step_lib.compile_steps(setup, mesh8)
  batch = {k: jax.device_put(v, partitioning.batch_sharding(mesh8))
           for k, v in synthetic_batch(16, 32, 96).items()}
  state, _ = train8(init8(), batch)
  expected = jax.device_get(state)
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'c'))
  ckpt.save(1, state, {'step': 1})
  ckpt.close()
  init1, _, _ = step_lib.compile_steps(setup, mesh1)
  target = init1()
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'c'))
  restored, _ = ckpt.restore(1, target)
  ckpt.close()
  assert len(mesh8.devices.flat) == 8
  for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(expected)):
    assert a.sharding.device_set == {jax.devices()[0]}
    np.testing.assert_array_equal(a, b)


def test_no_recompilation_after_the_first_step(tmp_path, records_dir):
  """Running twice as many steps traces and compiles nothing more: every step, log and
  evaluation reuses what the first one compiled."""
  events = []
  jax.monitoring.register_event_duration_secs_listener(
      lambda name, *_, **__: events.append(name) if name.startswith('/jax/core/compile/') else None)
  counts = {}
  for steps in (4, 12):
    jax.clear_caches()
    events.clear()
    config = test_config(**{'data.records': records_dir, 'train_steps': steps, 'log_every': 2,
                            'eval_every': 4})
    pretrain.train_and_evaluate(config, str(tmp_path / f'w{steps}'), log=_quiet)
    counts[steps] = sorted(e for e in events if 'trace' in e)
  assert counts[4], 'no compilation was observed: the listener is not working'
  assert counts[12] == counts[4]


def test_below_its_edge_a_pretraining_reads_the_typed_config_alone(tmp_path, records_dir,
                                                                   monkeypatch):
  """Every read of an untyped config (ml_collections) by the package during a run, by the function
  that reads it: before `preflight.configure` returns (the edge: fitting to the objective, parsing)
  at most 30 functions, after it none (records, steps, checkpoints, the loop: the typed config
  alone)."""
  from electra_jax.pretraining import preflight
  readers = record_config_reads(monkeypatch, preflight, 'configure')
  summary = pretrain.train_and_evaluate(test_config(**{'data.records': records_dir}),
                                        str(tmp_path / 'w'), log=_quiet)
  assert summary['step'] == 4
  assert readers['below'] == set(), readers['below']
  assert 'pretraining/preflight.py:configure' in readers['edge']
  assert len(readers['edge']) <= 30, sorted(readers['edge'])
