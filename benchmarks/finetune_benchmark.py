"""benchmarks/benchmark.py --mode=finetune: fine-tuning's examples per second, in training and in
prediction, with each example a padded row of max_seq_length (packing=False) and with examples
packed into rows (packing=True), and, with a peer, HF transformers' Trainer on the same examples
with each batch padded to its longest row and length-grouped batches
(benchmarks/peer_hf_trainer.py).

The data: the fine-tuning config's task (its train split, and its first dev split for prediction),
tokenized with --init's vocabulary at the config's max_seq_length. The model: --init's, or the
sizes of a pre-training config with --init's vocabulary; random weights (speed does not depend on
them). Runs alternate (padded, packed, peer, padded, ...) so all see the same machine load; each
result is the median of the runs. With a slice (--topology), the padded and the packed train steps
are also compiled for it here and their time estimated from XLA's TPU cost model.
"""

import dataclasses
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

from electra_jax import UserError, user_errors
from electra_jax.convert import hf as hf_lib
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.finetune import batches, run
from electra_jax.finetune import config as config_lib
from electra_jax.finetune import pretrained as pretrained_lib
from electra_jax.finetune.inputs import packing
from electra_jax.finetune.kinds import registry
from electra_jax.hardware import compile_cache, hlo_cost, xla_options
from electra_jax.model import networks as model_lib
from electra_jax.train import aot
from electra_jax.train import metrics as metrics_lib
from electra_jax.train import logs as logs_lib
from electra_jax.train import loop as loop_lib
from electra_jax.train import model_view, partitioning
from electra_jax.train import step as step_lib

LAYOUTS = ('padded', 'packed')
PEERS = {'hf': 'hf_trainer', 'hf-compile': 'hf_trainer_compiled'}  # --peer -> its name here
# the HF classes the peer's Trainer fine-tunes (benchmarks/peer_hf_trainer.py)
_PEER_CLASSES = ('ElectraForSequenceClassification', 'ElectraForTokenClassification')


@dataclasses.dataclass
class Problem:
  """What is timed: the task, its encoded train and dev examples, the model to fine-tune."""
  cfg: config_lib.FinetuningConfig
  task: object
  kind: object  # the task's kind (finetune/kinds/registry.py)
  train: object
  dev: object
  pretrained: pretrained_lib.Pretrained
  resolved: config_lib.Resolved  # the fine-tuning's derived values, its total steps among them


def problem(cfg, model_config=None, log=print) -> Problem:
  """The task of the fine-tuning config `cfg` encoded with its --init's vocabulary; the model
  --init's, or with the sizes of the pre-training config `model_config`."""
  cfg = config_lib.parse(cfg)
  pretrained = pretrained_lib.load(cfg.init, True, log)
  with user_errors(ValueError, FileNotFoundError):
    task, splits = registry.load(cfg.task, pretrained.config, log)
  kind = registry.get(task.kind)
  if not kind.packs:
    raise UserError(f'{task.name}\'s examples are windows of {cfg.max_seq_length} tokens that fill '
                    'their rows: nothing to pack; benchmark a classification, regression, '
                    'tagging or multiple-choice task')
  dev = next((s for s in task.dev_splits if s in splits), None)
  if 'train' not in splits or dev is None:
    raise UserError('--mode=finetune times training on the train split and prediction on the dev '
                    'split; the task needs both')
  tokenizer = tokenizer_lib.load_tokenizer(pretrained.vocab, lower_case=pretrained.lower_case)
  train, dev = (kind.encode(task, splits[s], tokenizer, cfg.max_seq_length, s == 'train', cfg)
                for s in ('train', dev))
  model_cfg = pretrained.model_cfg
  if model_config is not None:  # those sizes, the vocabulary's rows
    with user_errors(ValueError):
      model_cfg = dataclasses.replace(
          model_lib.ModelConfig.from_config(model_config.model), vocab_size=model_cfg.vocab_size,
          max_position_embeddings=max(model_config.model.max_position_embeddings,
                                      cfg.max_seq_length))
  reinit = config_lib.check_for_model(cfg, model_cfg)
  device = jax.devices()[0]
  model_cfg = model_view.model_for_devices(dataclasses.asdict(model_cfg), device.platform,
                                           device.device_kind, cfg.max_seq_length, log=log)
  if len(train) < cfg.batch_size:
    raise UserError(f'the train split has {len(train)} examples, fewer than one batch of '
                    f'{cfg.batch_size}; lower --finetune_config.batch_size')
  total = run.total_steps(cfg, task, train)
  return Problem(cfg, task, kind, train, dev,
                 dataclasses.replace(pretrained, model_cfg=model_cfg, params=None),
                 config_lib.resolve(cfg, task, model_cfg, total, reinit))


class _Ours:
  """One layout's compiled train step and prediction, on a stream of the task's batches."""

  def __init__(self, p: Problem, pack: bool, mesh):
    self.p, self.pack, self.mesh = p, pack, mesh
    cfg = config_lib.with_values(p.cfg, {'packing': pack})
    setup = run.make_setup(cfg, p.resolved, p.pretrained, p.task, p.kind, cfg.seed)
    self.model = setup.model
    init_fn, self.train_fn, _ = step_lib.compile_steps(setup, mesh)
    self.state = init_fn()
    self.shapes = batches.train_shapes(p.train, cfg.batch_size, cfg.seed,
                                       p.resolved.total_steps, pack, mesh, cfg.packing_shapes)
    self.stream = self._batches()
    t = time.perf_counter()
    for layout in self.shapes.layouts:  # each shape compiled and run once
      self.state, metrics = self.train_fn(self.state, self._batch_of(layout))
      self.first_loss = getattr(self, 'first_loss', metrics_lib.summarize(metrics)['loss'])
    # the kernels of the largest shape's step (compiled again: from the compilation cache when on)
    self.kernels = hlo_cost.kernels(self.train_fn.lower(
        self.state, self._batch_of(self.shapes.largest)).compile().as_text())
    self.train(2)
    self.predict()
    # where prediction departs from XLA's defaults (float32 on CPUs), those are timed beside it
    self.own_options = xla_options.forward(self.model.cfg.dtype) is not None
    if self.own_options:
      self.predict(xla_defaults=True)
    self.warmup_s = time.perf_counter() - t

  def _batch_of(self, layout) -> dict:
    """A train batch in `layout`: the first batch's examples, as many as its rows hold."""
    examples = next(batches.step_examples(len(self.p.train), self.p.cfg.batch_size,
                                          self.p.cfg.seed)).copy()
    while len(packing.place(self.p.train, examples, self.pack)) > layout.rows:
      examples[np.flatnonzero(examples >= 0)[-1]] = -1
    arrays = batches.assemble(self.p.train, examples, layout, self.pack)
    sharding = partitioning.batch_sharding(self.mesh)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in arrays.items()}

  def _batches(self):
    while True:  # the fine-tuning's stream, again from its start when used up
      yield from batches.train_batches(self.p.train, self.p.cfg.batch_size, self.p.cfg.seed, 0,
                                       partitioning.batch_sharding(self.mesh), self.shapes,
                                       self.pack)

  def train(self, steps: int) -> float:
    """Examples per second of `steps` steps of the fine-tuning's loop (train/loop.py: batches
    assembled as the run assembles them, its progress lines every log_every steps; no evaluation,
    no checkpoint, nothing written)."""
    plan = loop_lib.Plan(total_steps=steps, log_every=self.p.cfg.log_every, eval_every=0,
                         save_every=0, nonfinite='skip', fields=('loss',))
    t = time.perf_counter()
    result = loop_lib.run(plan, self.state, self.train_fn, self.stream, 0,
                          evaluate=lambda step, state: {}, ckpt=_NoCheckpoints(),
                          meta=lambda step: {}, logs=logs_lib.Logs('', main=False),
                          log=lambda line: None, signals=loop_lib.Signals(None, install=False))
    jax.block_until_ready(result.state)
    self.state = result.state
    return steps * self.p.cfg.batch_size / (time.perf_counter() - t)

  def step_alone(self, steps: int) -> float:
    """Examples per second of the compiled train step alone, on `steps` batches already on the
    devices: what the loop's examples/s would be without any work of its own."""
    ready = jax.block_until_ready([b for _, b in zip(range(steps), self.stream)])
    t = time.perf_counter()
    for batch in ready:
      self.state, metrics = self.train_fn(self.state, batch)
    jax.block_until_ready(metrics)
    return steps * self.p.cfg.batch_size / (time.perf_counter() - t)

  def predict(self, xla_defaults: bool = False) -> float:
    """Examples per second of predicting the dev split (`xla_defaults`: compiled with XLA's
    default options, not hardware/xla_options.forward's)."""
    t = time.perf_counter()
    batches.predict(self.model, self.state.params, self.p.dev, self.p.cfg.eval_batch_size,
                    self.mesh, pack=self.pack, xla_defaults=xla_defaults)
    return len(self.p.dev) / (time.perf_counter() - t)


class _NoCheckpoints:
  """The checkpointer of a loop that saves nothing (the benchmark's)."""

  def latest_step(self):
    return None

  def reached_preemption(self, step: int) -> bool:
    return False

  def save(self, *args, **kwargs):
    pass

  wait = close = save


class _Peer:
  """HF transformers' Trainer (benchmarks/peer_hf_trainer.py) in a child process: one Trainer whose
  steps go on across the timed runs (`max_steps` in all, at least), under torch.compile with
  `compile`."""

  def __init__(self, p: Problem, folder: str, max_steps: int, compile_: bool = False):
    for name in ('torch', 'transformers', 'accelerate'):
      if importlib.util.find_spec(name) is None:
        raise UserError(f'--peer=hf needs torch, transformers and accelerate ({name} is missing); '
                        'install the test extra: pip install -e ".[test]"')
    if p.kind.hf_class not in _PEER_CLASSES:
      raise UserError(f'--peer fine-tunes the tasks HF holds as {" or ".join(_PEER_CLASSES)}; '
                      f'{p.task.name} is {p.task.kind}: leave out --peer')
    data = os.path.join(folder, 'data.npz')
    np.savez(data, **{f'{split}_{k}': v for split, d in (('train', p.train), ('dev', p.dev))
                      for k, v in d.arrays().items()})
    m, cfg = p.pretrained.model_cfg, p.cfg
    numbers = p.kind.baseline == 'numbers'  # regression: one output, squared error
    spec = {'data': data, 'output_dir': os.path.join(folder, 'trainer'),
            'hf_class': p.kind.hf_class, 'regression': numbers,
            'hf_config': hf_lib.hf_config(m, 'discriminator'),
            'num_labels': 1 if numbers else len(p.task.labels),
            'pad_id': tokenizer_lib.SPECIAL.pad, 'batch_size': cfg.batch_size,
            'eval_batch_size': cfg.eval_batch_size, 'bf16': m.dtype == 'bfloat16',
            'learning_rate': p.resolved.optimizer.learning_rate,
            'max_steps': max_steps, 'compile': compile_}
    spec['hf_config'].update(hidden_dropout_prob=p.resolved.dropout_rate,
                             attention_probs_dropout_prob=p.resolved.dropout_rate)
    self.proc = subprocess.Popen(
        [sys.executable, '-m', 'benchmarks.peer_hf_trainer', json.dumps(spec)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    self.info = self._ask(None)
    self.first_loss = self.info['first_loss']
    t = time.perf_counter()
    self.train(2)
    self.predict()
    self.warmup_s = time.perf_counter() - t

  def _ask(self, line: str | None) -> dict:
    if line is not None:
      self.proc.stdin.write(line + '\n')
      self.proc.stdin.flush()
    answer = self.proc.stdout.readline()
    if not answer:
      raise UserError(f'the HF Trainer peer exited with code {self.proc.wait()} (its error is '
                      'above)')
    return json.loads(answer)

  def train(self, steps: int) -> float:
    answer = self._ask(f'train {steps}')
    self.step = answer['step']  # the Trainer's steps so far: it goes on across the runs
    return answer['examples_per_s']

  def predict(self) -> float:
    return self._ask('predict')['examples_per_s']

  def close(self):
    self.proc.stdin.close()
    self.proc.wait()


def benchmark(p: Problem, steps: int = 10, repeats: int = 3, peer: str = '', log=print) -> dict:
  """Examples per second of training and of prediction for each layout (and the peer, 'hf' or
  'hf-compile'): the medians of `repeats` alternating runs of `steps` train steps and one pass
  over the dev split. Each system's steps go on through its batches across the runs (the runs
  time ordinary batches of the fine-tuning's stream, not its first ones again)."""
  mesh = partitioning.make_mesh()
  systems = {}
  for name in LAYOUTS:
    systems[name] = _Ours(p, name == 'packed', mesh)
    log(f'{name}: compiled and warmed up in {systems[name].warmup_s:.1f} s')
  folder = tempfile.TemporaryDirectory(prefix='electra_ft_peer_') if peer else None
  try:
    if peer:
      name = PEERS[peer]
      systems[name] = _Peer(p, folder.name, 2 + repeats * steps + 1, peer == 'hf-compile')
      log(f'{name}: transformers {systems[name].info["transformers"]}, torch '
          f'{systems[name].info["torch"]}, warmed up in {systems[name].warmup_s:.1f} s')
    runs = {name: {'train': [], 'step_alone': [], 'predict': [], 'predict_xla_defaults': []}
            for name in systems}
    for r in range(repeats):
      for name, system in systems.items():
        runs[name]['train'].append(system.train(steps))
        if name in LAYOUTS:
          runs[name]['step_alone'].append(system.step_alone(steps))
        runs[name]['predict'].append(system.predict())
        if getattr(system, 'own_options', False):
          runs[name]['predict_xla_defaults'].append(system.predict(xla_defaults=True))
      log(f'run {r + 1}/{repeats}: ' + ' | '.join(
          f'{name} train {v["train"][-1]:.1f}, predict {v["predict"][-1]:.1f} examples/s'
          for name, v in runs.items()))
  finally:
    if peer and PEERS[peer] in systems:
      systems[PEERS[peer]].close()
    if folder:
      folder.cleanup()
  fill = lambda rows: float(sum_tokens(p.train) / len(p.train) * p.cfg.batch_size
                            / (rows * p.cfg.max_seq_length))
  result = {'task': p.task.name, 'kind': p.task.kind, 'max_seq_length': p.cfg.max_seq_length,
            'batch_size': p.cfg.batch_size, 'eval_batch_size': p.cfg.eval_batch_size,
            'train_examples': len(p.train), 'dev_examples': len(p.dev),
            'mean_tokens': float(sum_tokens(p.train) / len(p.train)),
            'model': {k: getattr(p.pretrained.model_cfg, k) for k in (
                'hidden_size', 'num_layers', 'num_heads', 'intermediate_size', 'dtype',
                'attention')},
            'device_kind': jax.devices()[0].device_kind, 'devices': mesh.devices.size,
            'steps': steps, 'repeats': repeats}
  for name, v in runs.items():
    result[name] = {'train_examples_per_s': statistics.median(v['train']),
                    'predict_examples_per_s': statistics.median(v['predict']),
                    'train_runs': v['train'], 'predict_runs': v['predict'],
                    'first_loss': systems[name].first_loss}
    if name in LAYOUTS:
      result[name]['kernels'] = systems[name].kernels
    if v['step_alone']:
      result[name].update(step_alone_examples_per_s=statistics.median(v['step_alone']),
                          step_alone_runs=v['step_alone'])
    if v['predict_xla_defaults']:
      result[name].update(predict_xla_defaults_examples_per_s=statistics.median(
          v['predict_xla_defaults']), predict_xla_defaults_runs=v['predict_xla_defaults'])
    if name not in LAYOUTS:
      result[name]['trainer_steps'] = systems[name].step
    if name in LAYOUTS:
      shapes = systems[name].shapes
      result[name].update(rows=shapes.mean_rows, shapes=[l.rows for l in shapes.layouts],
                          slots=shapes.largest.slots, real_tokens=fill(shapes.mean_rows))
  return result


def sum_tokens(data) -> int:
  return int(np.asarray(data.input_mask).sum())


def report(result: dict) -> list[str]:
  """The table of a result, as lines."""
  base = result['padded']
  lines = [f'{result["task"]} ({result["kind"]}): {result["train_examples"]:,} train / '
           f'{result["dev_examples"]:,} dev examples of {result["mean_tokens"]:.1f} tokens on '
           f'average, max_seq_length {result["max_seq_length"]}, batch {result["batch_size"]} '
           f'(prediction {result["eval_batch_size"]}) | model hidden '
           f'{result["model"]["hidden_size"]} x {result["model"]["num_layers"]} layers, '
           f'{result["model"]["dtype"]} | {result["devices"]} x {result["device_kind"]}',
           f'{"":20s} {"train ex/s":>11s} {"x padded":>9s} {"predict ex/s":>13s} {"x padded":>9s}'
           '  rows a step on average (real tokens)']
  for name in LAYOUTS + tuple(PEERS.values()):
    if name not in result:
      continue
    r = result[name]
    rows = (f'  {r["rows"]:.1f} ({100 * r["real_tokens"]:.0f}%)' if 'rows' in r
            else '  a batch padded to its longest row')
    lines.append(f'{name:20s} {r["train_examples_per_s"]:11.1f} '
                 f'{r["train_examples_per_s"] / base["train_examples_per_s"]:8.2f}x '
                 f'{r["predict_examples_per_s"]:13.1f} '
                 f'{r["predict_examples_per_s"] / base["predict_examples_per_s"]:8.2f}x' + rows)
  for name in LAYOUTS:  # the loop beside its step alone; prediction beside XLA's defaults
    r = result[name]
    lines.append(f'{name}: the loop {r["train_examples_per_s"]:.1f} examples/s, its compiled step '
                 f'alone on batches already on the devices {r["step_alone_examples_per_s"]:.1f}: '
                 'the loop takes '
                 f'{r["step_alone_examples_per_s"] / r["train_examples_per_s"]:.2f}x '
                 f'the step\'s time; kernels per step {aot.kernel_counts(r["kernels"])}')
    if 'predict_xla_defaults_examples_per_s' in r:
      lines.append(f'{name} prediction compiled with XLA\'s default CPU fusions (YNNPACK; runs use '
                   f'hardware/xla_options.py): {r["predict_xla_defaults_examples_per_s"]:.1f} '
                   'examples/s, '
                   f'{r["predict_examples_per_s"] / r["predict_xla_defaults_examples_per_s"]:.2f}x '
                   'slower')
  return lines


def topology_estimate(p: Problem, slice_, log=print) -> dict:
  """The padded and the packed train steps compiled here for the TPU slice `slice_`
  (hardware/topology.py), each with its time estimated from XLA's TPU cost model: an estimate,
  not a measurement."""
  mesh = partitioning.make_mesh(slice_.devices())
  out = {'slice': slice_.name}
  with compile_cache.off():
    model_cfg = model_view.model_for_devices(
        {**dataclasses.asdict(p.pretrained.model_cfg), 'dtype': 'auto'}, 'tpu',
        slice_.device_kind, p.cfg.max_seq_length, checked=False, log=log)
    for name in LAYOUTS:
      cfg = config_lib.with_values(p.cfg, {'packing': name == 'packed'})
      setup = run.make_setup(cfg, p.resolved,
                             dataclasses.replace(p.pretrained, model_cfg=model_cfg), p.task,
                             p.kind, cfg.seed)
      init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
      state = init_fn.eval_shape()
      shapes = batches.train_shapes(p.train, cfg.batch_size, cfg.seed, p.resolved.total_steps,
                                    cfg.packing, mesh, cfg.packing_shapes)
      seconds, kernels = [], []
      for layout in shapes.layouts:
        batch = p.kind.batch_shapes(p.task, layout, partitioning.batch_sharding(mesh))
        compiled, _, error = aot.timed_compile(lambda: train_fn.lower(state, batch))
        if compiled is None:
          raise UserError(f'the {name} train step did not compile for {slice_.name}: {error}')
        est = hlo_cost.estimate(compiled.as_text(), slice_.chip, slice_.chips, slice_.num_slices)
        seconds.append(est.seconds)
        kernels.append(est.kernels())
      step_s = sum(s * c for s, c in zip(seconds, shapes.counts)) / sum(shapes.counts)
      out[name] = {'rows': shapes.mean_rows, 'shapes': [l.rows for l in shapes.layouts],
                   'step_s': step_s, 'train_examples_per_s': cfg.batch_size / step_s,
                   'kernels': kernels[0]}
      log(f'{slice_.label}, {name}: {shapes.mean_rows:.1f} rows of {cfg.max_seq_length} a step on '
          f'average ({len(shapes.layouts)} shape(s)), estimated {1e3 * step_s:.2f} ms a step = '
          f"{cfg.batch_size / step_s:,.0f} examples/s (an estimate from XLA's TPU cost model, not "
          f'a measurement); kernels per step: {aot.kernel_counts(kernels[0])}')
  out['packed_over_padded'] = out['padded']['step_s'] / out['packed']['step_s']
  log(f'{slice_.label}: packed {out["packed_over_padded"]:.2f}x the padded examples/s '
      '(estimated)')
  return out
