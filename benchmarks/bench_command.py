"""What `benchmarks/benchmark.py` runs: each mode's measurement, printed as lines and returned as a
dict (written as JSON where asked). The measurements themselves are in benchmark.py (the
pre-training step, attention, memory), finetune_benchmark.py and io_benchmark.py (the input
pipeline, checkpoints); this module reads the command's options and says the results."""

import dataclasses
import json
import os
import shutil
import tempfile

import jax

from benchmarks import finetune_benchmark, io_benchmark, profiling
from benchmarks import step_benchmark as benchmark
from electra_jax import UserError
from electra_jax.data import prepare as prepare_lib
from electra_jax.data import records
from electra_jax.hardware import topology
from electra_jax.hardware import peak as peak_lib
from electra_jax.model import flash
from electra_jax.objectives import registry as objectives
from electra_jax.pretraining import compiling
from electra_jax.train import aot


@dataclasses.dataclass(frozen=True)
class Options:
  """The command's flags (benchmarks/benchmark.py says what each means)."""
  mode: str = 'step'
  steps: int = 10
  repeats: int = 3
  json: str | None = None
  blocks: str = ''
  memory_gb: float = 0.0
  records: str = ''
  peer: str = ''
  profile: bool = False
  profile_dir: str = ''
  top: int = 15
  batches: int = 50
  finetune_config: object = None
  topology: str | None = None
  objectives: str = 'electra,cocolm,amos'


def _finetune(config, o: Options) -> dict:
  """`o.finetune_config`'s task (its init set, checked by the command) timed."""
  log = lambda line: print(line, flush=True)
  problem = finetune_benchmark.problem(o.finetune_config, config, log)
  result = finetune_benchmark.benchmark(problem, o.steps, o.repeats, o.peer, log)
  for line in finetune_benchmark.report(result):
    print(line)
  if o.topology:
    slice_ = topology.for_compiling(o.topology)  # (ValueError: run says it)
    result['topology'] = finetune_benchmark.topology_estimate(problem, slice_, log)
  return result


def _objectives(config, o: Options) -> dict:
  """Each of `o.objectives`' steps at `config`'s sizes: timed here in alternation, or with
  `o.topology` XLA's estimate on that slice (compiled here, nothing runs); ratios to the first."""
  names = [n.strip() for n in o.objectives.split(',') if n.strip()]
  if not names:
    raise ValueError('--objectives names no objective; give them comma separated, the reference '
                     'first (e.g. --objectives=electra,cocolm,amos)')
  for name in names:
    objectives.get(name)  # (ValueError naming the others: run says it)
  if not o.topology:
    result = benchmark.objective_costs(config, names, o.steps, repeats=o.repeats)
    for name, r in result.items():
      print(f'{name}: {r["ms_per_step"]:.1f} ms/step (median of {len(r["ms_per_step_runs"])} '
            f'runs: {", ".join(f"{x:.1f}" for x in r["ms_per_step_runs"])}) | '
            f'{r["time_ratio"]:.2f}x {names[0]}\'s time (per alternating run: '
            f'{", ".join(f"{x:.2f}" for x in r["pairwise_ratios"])}) | model FLOPs '
            f'{r["model_flops_per_step"] / 1e9:.2f} G = {r["flops_ratio"]:.2f}x')
    return result
  slice_ = topology.for_compiling(o.topology)
  result = {}
  for name in names:
    c = config.copy_and_resolve_references()
    c.objective.name = name
    report = compiling.compile_for_topology(c, slice_, lambda line: print(line, flush=True))
    result[name] = {'step_s': report['estimate']['step_s'], 'mfu': report['estimate']['mfu']}
  for name, r in result.items():
    print(f'{name} on {o.topology} (XLA\'s estimate, not a measurement): '
          f'{1e3 * r["step_s"]:.1f} ms/step, MFU {100 * r["mfu"]:.1f}% | '
          f'{r["step_s"] / result[names[0]]["step_s"]:.2f}x {names[0]}\'s time')
  return result


def _records(config, o: Options, log) -> str:
  if o.records:
    return o.records
  out = os.path.join(tempfile.mkdtemp(prefix='electra_bench_'), 'records')
  log(f'building records of {config.data.max_seq_length} tokens from the built-in corpus in {out}')
  prepare_lib.records_folder(records.Settings(
      source='builtin', max_seq_length=config.data.max_seq_length, vocab_size=4096, num_shards=8),
      out, log=lambda *_: None)
  return out


def _time_step(config, o: Options) -> dict:
  profile_dir = ''
  if o.profile:
    profile_dir = o.profile_dir or tempfile.mkdtemp(prefix='electra_profile_')
  result = benchmark.benchmark(config, steps=o.steps, repeats=o.repeats,
                               peer=o.peer, profile_dir=profile_dir)
  peak, result['peak_source'] = peak_lib.mesh_peak(jax.devices(), result['dtype'])
  result['peak_flops_per_s'] = peak
  result['mfu'] = result['model_flops_per_s'] / peak if peak else None
  r = result
  print(f'{r["devices"]} x {r["device_kind"]} | batch {r["batch_size"]} x {r["seq_len"]} | '
        f'{r["dtype"]} | compile {r["compile_s"]:.1f} s')
  print(f'{r["tokens_per_s"]:,.0f} tokens/s | {r["ms_per_step"]:.1f} ms/step (median of '
        f'{len(r["ms_per_step_runs"])} runs: '
        f'{", ".join(f"{x:.1f}" for x in r["ms_per_step_runs"])})')
  print(f'FLOPs/step: model {r["model_flops_per_step"] / 1e9:.2f} G (matmuls, bwd = 2 x fwd) | '
        f'paper accounting {r["paper_flops_per_step"] / 1e9:.2f} G | XLA cost analysis '
        f'{r["xla_flops_per_step"] / 1e9:.2f} G' +
        (' (counts the microbatch loop body once)' if r['microbatches'] > 1 else ''))
  print(f'achieved {r["model_flops_per_s"] / 1e9:.1f} GFLOP/s (model) | '
        f'{r["xla_flops_per_s"] / 1e9:.1f} GFLOP/s (XLA)' +
        (f' | peak {peak / 1e9:.0f} GFLOP/s ({r["peak_source"]}) | MFU {100 * r["mfu"]:.1f}%'
         if peak else ''))
  print(f'kernels per step (the compiled program; a CUDA graph runs many): '
        f'{aot.kernel_counts(r["kernels"])}')
  mem = r['memory']
  if mem:
    print(f'memory per device (XLA buffer assignment): {mem["peak_estimate_mb"]:,.0f} MB = state '
          f'and batch {mem["arguments_mb"]:,.0f} + temporaries {mem["temporaries_mb"]:,.0f} + '
          f'outputs {mem["outputs_mb"]:,.0f}' +
          (f' | device high-water mark {mem["device_peak_mb"]:,.0f} MB'
           if 'device_peak_mb' in mem else '') +
          (f' | {r["microbatches"]} microbatches' if r['microbatches'] > 1 else ''))
  if 'profile' in r:
    _print_profile(r['profile'], r['ms_per_step'], o.top)
  if 'peer' in r:
    p = r['peer']
    label = 'under torch.compile, ' if p['name'] == 'hf-compile' else ''
    print(f'peer (HF transformers {p["versions"]["transformers"]}, torch {p["versions"]["torch"]}, '
          f'{label}{p["device"]}): '
          f'{p["tokens_per_s"]:,.0f} tokens/s | {p["ms_per_step"]:.1f} ms/step (median of '
          f'{len(p["ms_per_step_runs"])} runs: '
          f'{", ".join(f"{x:.1f}" for x in p["ms_per_step_runs"])})')
    print(f'ours / peer: {r["speedup_over_peer"]:.2f}x (per alternating pair: '
          f'{", ".join(f"{x:.2f}" for x in p["ratios"])})')
  return result


def _print_profile(p: dict, step_ms: float, top: int):
  print(f'profile of {p["steps"]} steps ({p["directory"]}): {p["busy_ms_per_step"]:.1f} ms of '
        f'kernel time per step ({p["wall_ms_per_step"]:.1f} ms wall while tracing, '
        f'{step_ms:.1f} untraced)')
  print('  ' + ' | '.join(f'{name} {ms:.1f} ms ({100 * ms / p["busy_ms_per_step"]:.0f}%)'
                          for name, ms in p['categories'].items()))
  print(f'  kernels per step: {sum(r["calls_per_step"] for r in p["kernels"]):,.0f} (each '
        'operation the trace shows; a CUDA graph counts as one)')
  for title, rows in (('kinds of kernel (instances summed)', p['kinds']),
                      ('single kernels', p['kernels'])):
    print(f'  {title}:\n  {"ms/step":>8} {"share":>6} {"calls":>6}  kernel (category)')
    for row in rows[:top]:
      print(f'  {row["ms_per_step"]:8.2f} {100 * row["share"]:5.1f}% '
            f'{row["calls_per_step"]:6.0f}  {row["name"][:90]} ({row["category"]})')
  if note := profiling.graphs_note(p['kernels']):
    print(f'  {note}')
  print(f'  each fusion spelled out: {os.path.join(p["directory"], "step_hlo.txt")}')


def _time_input(config, o: Options) -> dict:
  records_dir = _records(config, o, lambda line: print(line, flush=True))
  r = io_benchmark.benchmark_input(records_dir, config.data.batch_size, batches=o.batches,
                                   repeats=o.repeats, seed=config.seed,
                                   shuffle_buffer=config.data.shuffle_buffer)
  print(f'input pipeline ({records_dir}): {r["examples_per_s"]:,.0f} examples/s | '
        f'{r["tokens_per_s"]:,.0f} tokens/s | {r["ms_per_batch"]:.1f} ms per batch of '
        f'{r["batch_size"]} x {r["seq_len"]} (median of {len(r["ms_per_batch_runs"])} runs: '
        f'{", ".join(f"{x:.1f}" for x in r["ms_per_batch_runs"])})')
  return r


def _time_checkpoint(config, o: Options) -> dict:
  directory = tempfile.mkdtemp(prefix='electra_ckpt_bench_')
  try:
    r = io_benchmark.benchmark_checkpoint(config, os.path.join(directory, 'c'), o.repeats)
  finally:
    shutil.rmtree(directory, ignore_errors=True)
  print(f'checkpoint of the train state ({r["state_mb"]:.0f} MB): save holds the loop '
        f'{r["save_blocking_ms"]:.0f} ms, files complete after {r["save_total_ms"]:.0f} ms '
        f'(medians of {len(r["save_total_ms_runs"])}: '
        + ', '.join(f'{a:.0f}/{b:.0f}' for a, b in zip(r['save_blocking_ms_runs'],
                                                      r['save_total_ms_runs'])) +
        f'); restore {r["restore_ms"]:.0f} ms')
  return r


def _memory(config, o: Options) -> dict:
  r = benchmark.step_memory(config)
  m = r['memory']
  print(f'{r["parameters"]:,} parameters on {r["devices"]} devices'
        f'{" (FSDP)" if r["fsdp"] else " (replicated)"} | batch {r["batch_size"]} x '
        f'{r["seq_len"]} | compile {r["compile_s"]:.1f} s')
  print(f'train state {r["state_mb"]:,.0f} MB, per device {r["state_per_device_mb"]:,.0f} MB')
  if m:
    print(f'memory per device (XLA buffer assignment): {m["peak_estimate_mb"]:,.0f} MB = state '
          f'and batch {m["arguments_mb"]:,.0f} + temporaries {m["temporaries_mb"]:,.0f} + '
          f'outputs {m["outputs_mb"]:,.0f}')
  return r


def _kernel_setting(spec: str) -> dict:
  """'128,64,...' (the six block sizes in order) or 'name=value,...' (FlashOptions' fields)."""
  tunable = {f.name for f in dataclasses.fields(flash.FlashOptions)} - {
      'direction', 'dropout_rate', 'backend', 'interpret'}
  parts = [p.strip() for p in spec.split(',')]
  try:
    if all('=' in p for p in parts):
      setting = {k.strip(): int(v) for k, v in (p.split('=', 1) for p in parts)}
    else:
      setting = dict(zip(('block_q', 'block_k', 'block_k_dkv', 'block_q_dkv', 'block_q_dq',
                          'block_k_dq'), map(int, parts)))
  except ValueError:
    setting = None
  if setting is None or set(setting) - tunable:
    raise UserError(f'--blocks has {spec!r}, not up to six block sizes or name=integer pairs '
                    f'of {", ".join(sorted(tunable))}')
  return setting


def _attention(config, o: Options) -> list:
  blocks = [_kernel_setting(spec) for spec in o.blocks.split(';') if spec.strip()]
  rows = benchmark.time_attention(config, repeats=o.repeats, iterations=o.steps,
                                  blocks=blocks)
  print(f'attention of one layer, forward + backward, {rows[0]["shape"]} (batch, length, heads, '
        f'head size) per device, {rows[0]["dtype"]}:')
  for r in rows:
    if 'error' in r:
      print(f'  {r["path"]}: failed: {r["error"]}')
    else:
      print(f'  {r["path"]} (dropout {r["dropout"]}): {r["ms"]:.3f} ms | largest difference from '
            f'the explicit path {r["max_rel_diff"]:.1e} (relative)')
  return rows


def _max_batch(config, o: Options) -> dict:
  r = benchmark.max_batch(config, o.memory_gb * 1e3 or None)
  print(f'step memory per device = {r["fixed_mb"]:,.0f} MB + {r["mb_per_row"]:,.1f} MB per row of '
        f'{config.data.max_seq_length} tokens (XLA buffer assignment; compiled at '
        f'{", ".join(f"{b} rows: {m:,.0f} MB" for b, m in r["compiled"].items())})')
  print(f'largest batch that fits {r["budget_mb"]:,.0f} MB (95% of {r["limit_mb"]:,.0f}) per '
        f'device: {r["batch_per_device"]} per device, global {r["global_batch"]} on '
        f'{r["devices"]} device(s)')
  if o.peer:
    if jax.default_backend() != 'gpu':
      raise UserError('--mode=max_batch --peer runs the PyTorch peer into the GPU\'s memory '
                      'limit; on this backend leave --peer out')
    r['peer_batch'] = benchmark.peer_max_batch(config)
    print(f'peer (HF transformers, eager): largest batch {r["peer_batch"]} (real steps until out '
          'of memory)')
  return r


def run(config, o: Options) -> dict:
  """Runs `o.mode`'s measurement of the pre-training `config` (None for --mode=finetune without
  one), prints its lines, writes its JSON where asked, and returns it."""
  if config is None and o.mode != 'finetune':
    raise UserError(f'--mode={o.mode} times a pre-training config: give --config=configs/'
                    '<size>.py')
  result = {}
  try:
    if o.mode == 'finetune':
      result['finetune'] = _finetune(config, o)
    if o.mode in ('input', 'both'):
      result['input'] = _time_input(config, o)
    if o.mode in ('step', 'both'):
      result['step'] = _time_step(config, o)
    if o.mode == 'checkpoint':
      result['checkpoint'] = _time_checkpoint(config, o)
    if o.mode == 'memory':
      result['memory'] = _memory(config, o)
    if o.mode == 'max_batch':
      result['max_batch'] = _max_batch(config, o)
    if o.mode == 'attention':
      result['attention'] = _attention(config, o)
    if o.mode == 'objectives':
      result['objectives'] = _objectives(config, o)
  except (ValueError, FileNotFoundError) as e:
    raise UserError(str(e)) from None
  if o.mode == 'both':
    ratio = result['input']['tokens_per_s'] / result['step']['tokens_per_s']
    result['input_over_step'] = ratio
    print(f'the input pipeline delivers {ratio:.1f}x the tokens the train step consumes')
  if o.json:
    with open(o.json, 'w') as f:
      json.dump(result if o.mode == 'both' else result[o.mode], f, indent=2)
  return result
