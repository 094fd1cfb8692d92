"""Times a config's train step on synthetic batches: tokens/s, ms/step, FLOPs, achieved FLOP/s.

Synthetic batches hold random ids with a realistic padding pattern; the step is the real one
(masking, generator, sampling, discriminator, optimizer), compiled once over all devices.
"""

import dataclasses
import functools
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import profiling
from electra_jax.config import pretraining as config_lib
from electra_jax.data.synthetic import synthetic_batch
from electra_jax.data.tokenizer import SPECIAL
from electra_jax.model import flops as flops_lib
from electra_jax.hardware import hlo_cost
from electra_jax.model import attention, attention_masks, flash
from electra_jax.model import networks as model_lib
from electra_jax.objectives import registry as objectives
from electra_jax.pretraining import preflight
from electra_jax.pretraining import setup as pretrain_setup
from electra_jax.pretraining import step_flops as step_flops_lib
from electra_jax.train import loop as loop_lib
from electra_jax.train import partitioning
from electra_jax.train import step as step_lib


def _peer_spec(setup, config, batch_file: str) -> dict:
  m, o = setup.model_cfg, setup.objective_cfg
  spec = {k: getattr(m, k) for k in (
      'vocab_size', 'embedding_size', 'hidden_size', 'num_layers', 'num_heads',
      'intermediate_size', 'max_position_embeddings', 'type_vocab_size', 'dropout_rate',
      'attention_dropout_rate', 'layer_norm_eps', 'generator_hidden_size', 'generator_num_layers',
      'generator_num_heads')}
  spec.update(max_predictions=o.max_predictions, mask_prob=o.mask_prob, mask_id=SPECIAL.mask,
              special_ids=[SPECIAL.pad, SPECIAL.cls, SPECIAL.sep], dtype=m.dtype,
              batch=batch_file, device='cuda' if jax.default_backend() == 'gpu' else 'cpu')
  return spec


class Peer:
  """The PyTorch peer (benchmarks/peer_hf.py) in a child process, timed on request."""

  def __init__(self, spec: dict):
    for name in ('torch', 'transformers'):
      if importlib.util.find_spec(name) is None:
        raise ValueError(f'--peer=hf needs torch and transformers ({name} is missing); install '
                         'the test extra: pip install -e ".[test]"')
    self.proc = subprocess.Popen([sys.executable, '-m', 'benchmarks.peer_hf', json.dumps(spec)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    self.info = self._read()

  def _read(self) -> dict:
    line = self.proc.stdout.readline()
    if not line:
      raise RuntimeError(f'the PyTorch peer exited with code {self.proc.wait()}')
    return json.loads(line)

  def run(self, steps: int) -> float:
    self.proc.stdin.write(f'run {steps}\n')
    self.proc.stdin.flush()
    return self._read()['step_s']

  def close(self):
    self.proc.stdin.close()
    self.proc.wait()


def _step_memory(compiled) -> dict:
  """Per-device memory of the compiled step from XLA's buffer assignment, in MB: the arguments
  (state and batch), outputs not written in place of a donated argument, and temporaries (the
  activations kept for the backward pass, gradients, workspace). Their sum bounds the step's
  peak."""
  try:
    a = compiled.memory_analysis()
  except Exception:
    a = None  # a backend without buffer statistics
  if a is None:
    return {}
  mb = lambda n: n / 1e6
  out = {'arguments_mb': mb(a.argument_size_in_bytes),
         'outputs_mb': mb(a.output_size_in_bytes - a.alias_size_in_bytes),
         'temporaries_mb': mb(a.temp_size_in_bytes)}
  out['peak_estimate_mb'] = sum(out.values())
  return out


def _compiled(config):
  """(mesh of all devices, setup, init, train step) of `config`, checked."""
  mesh = partitioning.make_mesh()
  cfg, _ = preflight.configure(config, mesh, log=lambda line: None)
  setup = pretrain_setup.build_setup(cfg, SPECIAL)
  init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
  return mesh, setup, init_fn, train_fn


def step_memory(config) -> dict:
  """The step's memory per device without running it (nothing is allocated: the step is compiled
  for abstract arrays): the train state's share (parameters and Adam moments, whole or split by
  FSDP) and XLA's buffer assignment. Large on 8 devices can be sized on a laptop."""
  mesh, setup, init_fn, train_fn = _compiled(config)
  d = config.data
  state = init_fn.eval_shape()
  batch = {k: jax.ShapeDtypeStruct((d.batch_size, d.max_seq_length), np.int32,
                                   sharding=partitioning.batch_sharding(mesh))
           for k in ('input_ids', 'input_mask', 'segment_ids')}
  t = time.perf_counter()
  compiled = train_fn.lower(state, batch).compile()
  compile_s = time.perf_counter() - t

  def share(leaf):  # bytes of one device's piece
    shape = leaf.sharding.shard_shape(leaf.shape)
    return int(np.prod(shape)) * leaf.dtype.itemsize

  leaves = jax.tree.leaves(state)
  return {'devices': mesh.devices.size, 'fsdp': step_lib.uses_fsdp(setup, mesh),
          'batch_size': d.batch_size,
          'seq_len': d.max_seq_length, 'compile_s': compile_s,
          'parameters': sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params)),
          'state_mb': sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in leaves) / 1e6,
          'state_per_device_mb': sum(share(x) for x in leaves) / 1e6,
          'memory': _step_memory(compiled)}


def _device_limit_mb() -> float | None:
  stats = jax.devices()[0].memory_stats() or {}
  return stats['bytes_limit'] / 1e6 if 'bytes_limit' in stats else None


def max_batch(config, limit_mb: float | None = None, margin: float = 0.95) -> dict:
  """The largest global batch (per device a multiple of 8 rows) whose step fits `limit_mb` per
  device (default: the device's memory as its allocator reports it), by XLA's buffer assignment.

  The step's memory grows linearly with the batch: two compilations give the line, a third
  confirms the predicted batch (stepping down while it does not fit). Nothing runs or allocates.
  """
  limit = limit_mb or _device_limit_mb()
  if not limit:
    raise ValueError('this device reports no memory limit; give one with --memory_gb')
  budget = limit * margin
  n = partitioning.make_mesh().devices.size
  step = 8 * max(1, config.microbatches)

  def memory(rows_per_device):
    c = config.copy_and_resolve_references()
    c.data.batch_size = rows_per_device * n
    c.data.eval_batch_size = c.data.batch_size
    return step_memory(c)['memory']['peak_estimate_mb']

  first, second = step, 2 * step
  m1, m2 = memory(first), memory(second)
  per_row = (m2 - m1) / (second - first)
  fixed = m1 - per_row * first
  rows = max(step, int((budget - fixed) / per_row) // step * step) if per_row > 0 else step
  tried = {first: m1, second: m2}
  while True:
    tried[rows] = tried.get(rows) or memory(rows)
    if tried[rows] <= budget or rows == step:
      break
    rows -= step
  fits = tried[rows] <= budget
  return {'devices': n, 'limit_mb': limit, 'budget_mb': budget, 'batch_per_device': rows if fits
          else 0, 'global_batch': rows * n if fits else 0, 'memory_mb': tried[rows],
          'fixed_mb': fixed, 'mb_per_row': per_row, 'compiled': dict(sorted(tried.items()))}


def peer_max_batch(config) -> int:
  """The PyTorch peer's largest batch on this GPU (it tries real steps until out of memory)."""
  setup = pretrain_setup.build_setup(config_lib.parse(config), SPECIAL)
  d = config.data
  with tempfile.TemporaryDirectory(prefix='electra_peer_') as folder:
    batch_file = os.path.join(folder, 'batch.npz')
    np.savez(batch_file, **synthetic_batch(8, d.max_seq_length, config.model.vocab_size))
    peer = Peer(_peer_spec(setup, config, batch_file))
    try:
      peer.proc.stdin.write('maxbatch\n')
      peer.proc.stdin.flush()
      return peer._read()['max_batch']
    finally:
      peer.close()


def time_attention(config, repeats: int = 5, iterations: int = 10, blocks=()) -> list[dict]:
  """One layer's attention (forward and backward) at the config's shapes on one device, on each
  path: the explicit softmax and the Pallas kernels with the config's attention dropout,
  jax.nn.dot_product_attention without (it has none), and the kernels with each block setting in
  `blocks` (FlashOptions fields). Each row: median ms, and the largest difference from the
  explicit path relative to its largest value (output and gradients; dropout masks are the same
  on both)."""
  m, d = config.model, config.data
  n = partitioning.make_mesh().devices.size
  heads = m.num_heads
  shape = (d.batch_size // n, d.max_seq_length, heads, m.hidden_size // heads)
  dtype = jnp.dtype(model_lib.ModelConfig.from_config(m).dtype)  # 'auto' decided for this device
  keys = jax.random.split(jax.random.key(0), 4)
  q, k, v, do = (jax.random.normal(key, shape, jnp.float32).astype(dtype) for key in keys)
  key_mask = jnp.asarray(synthetic_batch(shape[0], shape[1], 100)['input_mask'])
  words = attention_masks.seed_words(jax.random.key(1))
  rate = m.attention_dropout_rate
  options = attention.default_options(jax.default_backend())
  paths = [('explicit', rate, attention.explicit), ('pallas', rate,
           functools.partial(flash.flash, options=options))]
  for spec in blocks:
    o = dataclasses.replace(options, **spec)
    paths.append((f'pallas {spec}', rate, functools.partial(flash.flash, options=o)))
  if jax.default_backend() != 'cpu':
    paths.append(('fused (jax.nn.dot_product_attention), no dropout', 0.0,
                  attention.fused))
    paths.append(('explicit, no dropout', 0.0, attention.explicit))

  def fwd_bwd(fn, rate):
    def run(q, k, v, do):
      out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, key_mask, dropout_rate=rate, words=words),
                         q, k, v)
      return (out,) + vjp(do)
    return jax.jit(run)

  rows, reference = [], {}
  for name, path_rate, fn in paths:
    row = {'path': name, 'dropout': path_rate, 'shape': shape, 'dtype': str(dtype)}
    try:
      f = fwd_bwd(fn, path_rate)
      outs = jax.block_until_ready(f(q, k, v, do))
      times = []
      for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(iterations):
          outs = f(q, k, v, do)
        jax.block_until_ready(outs)
        times.append((time.perf_counter() - t) / iterations)
      row['ms'] = 1e3 * statistics.median(times)
      if path_rate not in reference:
        reference[path_rate] = [np.asarray(x, np.float32) for x in outs]
      row['max_rel_diff'] = max(
          float(np.abs(np.asarray(a, np.float32) - b).max() / (np.abs(b).max() + 1e-9))
          for a, b in zip(outs, reference[path_rate]))
    except Exception as e:
      row['error'] = f'{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ""}'[:300]
    rows.append(row)
  return rows


def benchmark(config, steps: int = 10, warmup: int = 2, repeats: int = 3,
              peer: str = '', profile_dir: str = '') -> dict:
  """Compiles the step, then times `repeats` runs of `steps` steps; reports medians.

  With `peer='hf'` (or 'hf-compile': under torch.compile) the same step written with HF
  transformers in PyTorch runs in a child process, its runs alternating with ours (ours, peer,
  ours, ...), so both see the same machine load. With `profile_dir`, `steps` more steps run under
  `jax.profiler` (trace kept there) and result['profile'] holds the kernels' times per step; the
  compiled step's HLO is written beside the trace (`step_hlo.txt`), where each kernel's fusion is
  spelled out under its name.
  """
  mesh, setup, init_fn, train_fn = _compiled(config)
  d = config.data
  sharding = partitioning.batch_sharding(mesh)
  host_batch = synthetic_batch(d.batch_size, d.max_seq_length, config.model.vocab_size)
  batch = {k: jax.device_put(v, sharding) for k, v in host_batch.items()}
  state = init_fn()
  t = time.perf_counter()
  lowered = train_fn.lower(state, batch)
  compiled = lowered.compile()
  compile_s = time.perf_counter() - t
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  xla_flops = float(cost.get('flops', float('nan'))) if cost else float('nan')
  memory = _step_memory(compiled)
  kernels = hlo_cost.kernels(compiled.as_text())
  if profile_dir:  # the kernels' names in the trace are the fusions' names in this text
    os.makedirs(profile_dir, exist_ok=True)
    with open(os.path.join(profile_dir, 'step_hlo.txt'), 'w') as f:
      f.write(compiled.as_text())
  train_fn = _queued_as_the_loop_does(train_fn)
  for _ in range(warmup):
    state, m = train_fn(state, batch)
  jax.block_until_ready(m)
  peer_runner, peer_folder = None, None
  if peer:  # the peer reads the same batch from a file removed with its folder at the end
    peer_folder = tempfile.TemporaryDirectory(prefix='electra_peer_')
    batch_file = os.path.join(peer_folder.name, 'batch.npz')
    np.savez(batch_file, **host_batch)
    peer_runner = Peer({**_peer_spec(setup, config, batch_file),
                        'compile': peer == 'hf-compile'})
  try:
    state, runs, peer_runs = _timed_runs(train_fn, state, batch, steps, repeats, peer_runner)
  finally:
    if peer_runner:
      peer_runner.close()
      peer_folder.cleanup()
  profile = _profile(train_fn, state, batch, steps, profile_dir) if profile_dir else None
  step_s = statistics.median(runs)
  model_flops = step_flops_lib.step_matmul_flops(setup.model_cfg, d.max_seq_length, d.batch_size,
                                            setup.objective_cfg.max_predictions,
                                            config.objective.name, setup.objective_cfg)
  paper_flops = flops_lib.paper_train_flops(setup.model_cfg, d.max_seq_length, d.batch_size, 1)
  tokens = d.batch_size * d.max_seq_length
  stats = jax.devices()[0].memory_stats() or {}  # GPU/TPU: the allocator's high-water mark
  if 'peak_bytes_in_use' in stats:
    memory['device_peak_mb'] = stats['peak_bytes_in_use'] / 1e6
  result = {'devices': mesh.devices.size, 'device_kind': jax.devices()[0].device_kind,
            'batch_size': d.batch_size, 'seq_len': d.max_seq_length, 'dtype': setup.model_cfg.dtype,
            'microbatches': setup.microbatches, 'memory': memory, 'kernels': kernels,
            'compile_s': compile_s, 'ms_per_step': 1e3 * step_s, 'ms_per_step_runs':
            [1e3 * r for r in runs], 'tokens_per_s': tokens / step_s,
            'model_flops_per_step': model_flops, 'paper_flops_per_step': paper_flops,
            'xla_flops_per_step': xla_flops,
            'model_flops_per_s': model_flops / step_s, 'xla_flops_per_s': xla_flops / step_s}
  if profile:
    result['profile'] = profile
  if peer_runner:
    peer_s = statistics.median(peer_runs)
    result['peer'] = {'name': peer, 'versions': {k: peer_runner.info[k] for k in
                                                 ('torch', 'transformers')},
                      'device': peer_runner.info['device'],
                      'ms_per_step': 1e3 * peer_s, 'ms_per_step_runs': [1e3 * r for r in peer_runs],
                      'tokens_per_s': tokens / peer_s, 'first_loss': peer_runner.info['first_loss'],
                      'ratios': [p / o for o, p in zip(runs, peer_runs)]}
    result['speedup_over_peer'] = peer_s / step_s
  return result


def objective_costs(config, names, steps: int = 10, warmup: int = 2, repeats: int = 3) -> dict:
  """Each objective of `names` pre-training `config`'s sizes (the model fitted to it as a run
  fits it): its step compiled, then timed in alternation (a run of `steps` steps of each, then
  again, `repeats` times), so all see the same machine load. {name: ms/step median and runs,
  model FLOPs per step, both as ratios to the first objective's}."""
  programs = {}
  for name in names:
    c = config.copy_and_resolve_references()
    c.objective.name = name
    c = objectives.fit_model_config(c, lambda *_: None)
    mesh, setup, init_fn, train_fn = _compiled(c)
    d = c.data
    host = synthetic_batch(d.batch_size, d.max_seq_length, c.model.vocab_size)
    batch = {k: jax.device_put(v, partitioning.batch_sharding(mesh)) for k, v in host.items()}
    train_fn, state = _queued_as_the_loop_does(train_fn), init_fn()
    for _ in range(warmup):
      state, m = train_fn(state, batch)
    jax.block_until_ready(m)
    flops = step_flops_lib.step_matmul_flops(setup.model_cfg, d.max_seq_length, d.batch_size,
                                             setup.objective_cfg.max_predictions, name,
                                             setup.objective_cfg)
    programs[name] = [train_fn, state, batch, flops, []]
  for _ in range(repeats):
    for p in programs.values():
      p[1], seconds = _timed_runs(p[0], p[1], p[2], steps, 1, None)[:2]
      p[4] += seconds
  first = programs[names[0]]
  out = {}
  for name, (_, _, _, flops, runs) in programs.items():
    ms = 1e3 * statistics.median(runs)
    out[name] = {'ms_per_step': ms, 'ms_per_step_runs': [1e3 * r for r in runs],
                 'model_flops_per_step': flops, 'flops_ratio': flops / first[3],
                 'time_ratio': ms / (1e3 * statistics.median(first[4])),
                 'pairwise_ratios': [r / f for r, f in zip(runs, first[4])]}
  return out


def _queued_as_the_loop_does(train_fn):
  """`train_fn`, or on several CPU devices `train_fn` finishing each step before it returns: the
  steps are queued as the training loop queues them (loop.queue_ahead)."""
  if loop_lib.queue_ahead():
    return train_fn

  def one_at_a_time(state, batch):
    return jax.block_until_ready(train_fn(state, batch))

  return one_at_a_time


def _timed_runs(train_fn, state, batch, steps: int, repeats: int, peer_runner):
  """`repeats` timed runs of `steps` steps (seconds per step), each followed by one of the
  peer's when there is one: (the state after them, our runs, the peer's runs)."""
  runs, peer_runs = [], []
  for _ in range(repeats):
    t = time.perf_counter()
    for _ in range(steps):
      state, m = train_fn(state, batch)
    jax.block_until_ready(m)
    runs.append((time.perf_counter() - t) / steps)
    if peer_runner:
      peer_runs.append(peer_runner.run(steps))
  return state, runs, peer_runs


def _profile(train_fn, state, batch, steps: int, directory: str) -> dict:
  """Kernel times per step of `steps` steps traced with jax.profiler into `directory`."""
  t = time.perf_counter()
  with jax.profiler.trace(directory, create_perfetto_trace=True):
    for _ in range(steps):
      state, m = train_fn(state, batch)
    jax.block_until_ready(m)
  wall_ms = 1e3 * (time.perf_counter() - t) / steps
  rows, busy_ms = profiling.kernel_table(directory, steps)
  if not rows:  # seen in a process that had loaded the TPU runtime for compile-only devices
    raise RuntimeError(f'jax.profiler recorded no XLA operation in {directory}: profile in a '
                       'process of its own (one that compiled for a --topology slice first, '
                       'loading the TPU runtime, records none)')
  return {'directory': directory, 'steps': steps, 'wall_ms_per_step': wall_ms,
          'busy_ms_per_step': busy_ms, 'categories': profiling.by_category(rows), 'kernels': rows,
          'kinds': profiling.grouped(rows)}
