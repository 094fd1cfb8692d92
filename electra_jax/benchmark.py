"""Times a config's train step on synthetic batches: tokens/s, ms/step, FLOPs, achieved FLOP/s.

Synthetic batches hold random ids with a realistic padding pattern; the step is the real one
(masking, generator, sampling, discriminator, optimizer), compiled once over all devices.
"""

import json
import os
import statistics
import time

import jax
import numpy as np

from electra_jax import flops as flops_lib
from electra_jax import partitioning
from electra_jax import train as train_lib
from electra_jax.tokenizer import SpecialIds

SPECIAL = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)


def synthetic_batch(batch_size: int, seq_len: int, vocab_size: int, seed: int = 0) -> dict:
  """[CLS] tokens [SEP] tokens [SEP] with 5% of rows shorter, like the example builder's output."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, vocab_size, (batch_size, seq_len), dtype=np.int32)
  lengths = np.where(rng.random(batch_size) < 0.05, rng.integers(5, seq_len, batch_size), seq_len)
  mask = (np.arange(seq_len)[None, :] < lengths[:, None]).astype(np.int32)
  half = lengths // 2
  segments = ((np.arange(seq_len)[None, :] > half[:, None]) & (mask > 0)).astype(np.int32)
  ids[:, 0] = SPECIAL.cls
  ids[np.arange(batch_size), half] = SPECIAL.sep
  ids[np.arange(batch_size), lengths - 1] = SPECIAL.sep
  ids = np.where(mask > 0, ids, SPECIAL.pad)
  return {'input_ids': ids, 'input_mask': mask, 'segment_ids': segments}


def _peer_spec(setup, config, batch_file: str) -> dict:
  m, o = setup.model_cfg, setup.objective_cfg
  spec = {k: getattr(m, k) for k in (
      'vocab_size', 'embedding_size', 'hidden_size', 'num_layers', 'num_heads',
      'intermediate_size', 'max_position_embeddings', 'type_vocab_size', 'dropout_rate',
      'attention_dropout_rate', 'layer_norm_eps', 'generator_hidden_size', 'generator_num_layers',
      'generator_num_heads')}
  spec.update(max_predictions=o.max_predictions, mask_prob=o.mask_prob, mask_id=SPECIAL.mask,
              special_ids=[SPECIAL.pad, SPECIAL.cls, SPECIAL.sep], dtype=config.model.dtype,
              batch=batch_file)
  return spec


class Peer:
  """The PyTorch peer (electra_jax/peer_hf.py) in a child process, timed on request."""

  def __init__(self, spec: dict):
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    import importlib.util  # pylint: disable=import-outside-toplevel
    for name in ('torch', 'transformers'):
      if importlib.util.find_spec(name) is None:
        raise ValueError(f'--peer=hf needs torch and transformers ({name} is missing); install '
                         'the test extra: pip install -e ".[test]"')
    self.proc = subprocess.Popen([sys.executable, '-m', 'electra_jax.peer_hf', json.dumps(spec)],
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
  activations kept for the backward pass, gradients, workspace). Their sum bounds the step's peak."""
  try:
    a = compiled.memory_analysis()
  except Exception:  # pylint: disable=broad-except
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
  train_lib.check_config(config, mesh)
  setup = train_lib.build_setup(config, SPECIAL)
  init_fn, train_fn, _ = train_lib.compile_steps(setup, mesh)
  return mesh, setup, init_fn, train_fn


def step_memory(config) -> dict:
  """The step's memory per device without running it (nothing is allocated: the step is compiled
  for abstract arrays): the train state's share (parameters and Adam moments, whole or split by
  FSDP) and XLA's buffer assignment. Large on 8 devices can be sized on a laptop."""
  mesh, setup, init_fn, train_fn = _compiled(config)
  d = config.data
  state = jax.eval_shape(init_fn)
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
  return {'devices': mesh.devices.size, 'fsdp': setup.fsdp, 'batch_size': d.batch_size,
          'seq_len': d.max_seq_length, 'compile_s': compile_s,
          'parameters': sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params)),
          'state_mb': sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in leaves) / 1e6,
          'state_per_device_mb': sum(share(x) for x in leaves) / 1e6,
          'memory': _step_memory(compiled)}


def benchmark(config, steps: int = 10, warmup: int = 2, repeats: int = 3,
              peer: str = '') -> dict:
  """Compiles the step, then times `repeats` runs of `steps` steps; reports medians.

  With `peer='hf'` the same step written with HF transformers in PyTorch runs in a child process,
  its runs alternating with ours (ours, peer, ours, ...), so both see the same machine load.
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
  for _ in range(warmup):
    state, m = train_fn(state, batch)
  jax.block_until_ready(m)
  peer_runner = None
  if peer:
    import tempfile  # pylint: disable=import-outside-toplevel
    batch_file = os.path.join(tempfile.mkdtemp(prefix='electra_peer_'), 'batch.npz')
    np.savez(batch_file, **host_batch)
    peer_runner = Peer(_peer_spec(setup, config, batch_file))
  runs, peer_runs = [], []
  try:
    for _ in range(repeats):
      t = time.perf_counter()
      for _ in range(steps):
        state, m = train_fn(state, batch)
      jax.block_until_ready(m)
      runs.append((time.perf_counter() - t) / steps)
      if peer_runner:
        peer_runs.append(peer_runner.run(steps))
  finally:
    if peer_runner:
      peer_runner.close()
  step_s = statistics.median(runs)
  model_flops = flops_lib.step_matmul_flops(setup.model_cfg, d.max_seq_length, d.batch_size,
                                            setup.objective_cfg.max_predictions,
                                            config.objective.name)
  paper_flops = flops_lib.paper_train_flops(setup.model_cfg, d.max_seq_length, d.batch_size, 1)
  tokens = d.batch_size * d.max_seq_length
  stats = jax.devices()[0].memory_stats() or {}  # GPU/TPU: the allocator's high-water mark
  if 'peak_bytes_in_use' in stats:
    memory['device_peak_mb'] = stats['peak_bytes_in_use'] / 1e6
  result = {'devices': mesh.devices.size, 'device_kind': jax.devices()[0].device_kind,
            'batch_size': d.batch_size, 'seq_len': d.max_seq_length, 'dtype': config.model.dtype,
            'microbatches': setup.microbatches, 'memory': memory,
            'compile_s': compile_s, 'ms_per_step': 1e3 * step_s, 'ms_per_step_runs':
            [1e3 * r for r in runs], 'tokens_per_s': tokens / step_s,
            'model_flops_per_step': model_flops, 'paper_flops_per_step': paper_flops,
            'xla_flops_per_step': xla_flops,
            'model_flops_per_s': model_flops / step_s, 'xla_flops_per_s': xla_flops / step_s}
  if peer_runner:
    peer_s = statistics.median(peer_runs)
    result['peer'] = {'name': peer, 'versions': {k: peer_runner.info[k] for k in
                                                 ('torch', 'transformers')},
                      'ms_per_step': 1e3 * peer_s, 'ms_per_step_runs': [1e3 * r for r in peer_runs],
                      'tokens_per_s': tokens / peer_s, 'first_loss': peer_runner.info['first_loss'],
                      'ratios': [p / o for o, p in zip(runs, peer_runs)]}
    result['speedup_over_peer'] = peer_s / step_s
  return result


def benchmark_input(records_dir: str, batch_size: int, *, batches: int = 50, repeats: int = 3,
                    seed: int = 0, shuffle_buffer: int = 10_000) -> dict:
  """Times the input pipeline: records -> shuffled, parsed batches -> global jax.Arrays.

  Each run starts a fresh pipeline at a new position (as a resumed job would), skips its first
  batch (start-up) and times the next `batches`; the median run is reported.
  """
  from electra_jax import input_pipeline  # pylint: disable=import-outside-toplevel
  from electra_jax import records  # pylint: disable=import-outside-toplevel
  meta = records.read_metadata(records_dir)
  sharding = partitioning.batch_sharding(partitioning.make_mesh())
  readers = input_pipeline.num_readers(meta, batch_size)  # as training reads them
  runs = []
  for r in range(repeats):
    dataset = input_pipeline.make_dataset(records_dir, 'train', batch_size, seed=seed,
                                          shuffle_buffer=shuffle_buffer, readers=readers,
                                          position=r * (batches + 1) * batch_size // readers)
    it = input_pipeline.global_batches(dataset, sharding)
    jax.block_until_ready(next(it))
    t = time.perf_counter()
    for _ in range(batches):
      out = next(it)
    jax.block_until_ready(out)
    runs.append((time.perf_counter() - t) / batches)
  batch_s = statistics.median(runs)
  seq_len = meta['max_seq_length']
  return {'batch_size': batch_size, 'seq_len': seq_len, 'ms_per_batch': 1e3 * batch_s,
          'ms_per_batch_runs': [1e3 * r for r in runs], 'examples_per_s': batch_size / batch_s,
          'tokens_per_s': batch_size * seq_len / batch_s}


def benchmark_checkpoint(config, directory: str, repeats: int = 3) -> dict:
  """Times checkpoint saves of the config's full train state: how long `save` holds the loop
  (copying the arrays off the devices) and how long until the files are complete (background)."""
  from electra_jax import checkpoint as checkpoint_lib  # pylint: disable=import-outside-toplevel
  mesh = partitioning.make_mesh()
  init_fn, _, _ = train_lib.compile_steps(train_lib.build_setup(config, SPECIAL), mesh)
  state = jax.block_until_ready(init_fn())
  ckpt = checkpoint_lib.Checkpointer(directory, keep=1)
  blocking, total = [], []
  for step in range(1, repeats + 1):
    t = time.perf_counter()
    ckpt.save(step, state, {'step': step})
    blocking.append(time.perf_counter() - t)
    ckpt.manager.wait_until_finished()
    total.append(time.perf_counter() - t)
  t = time.perf_counter()
  ckpt.restore(repeats, state)
  restore_s = time.perf_counter() - t
  ckpt.close()
  size = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
  return {'state_mb': size / 1e6, 'save_blocking_ms': 1e3 * statistics.median(blocking),
          'save_total_ms': 1e3 * statistics.median(total), 'restore_ms': 1e3 * restore_s,
          'save_blocking_ms_runs': [1e3 * x for x in blocking],
          'save_total_ms_runs': [1e3 * x for x in total]}
