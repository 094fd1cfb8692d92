"""Time a config's train step (tokens/s, ms/step, FLOPs, MFU) and/or its input pipeline.

    python launch/benchmark.py --config=configs/small.py --config.data.batch_size=16
    python launch/benchmark.py --config=configs/small.py --config.data.batch_size=16 --peer=hf
    python launch/benchmark.py --config=configs/small.py --config.data.batch_size=16 --profile
    python launch/benchmark.py --config=configs/small.py --mode=both   # input vs step, same run
    python launch/benchmark.py --config=configs/small.py --mode=checkpoint  # save/restore times
    python launch/benchmark.py --config=configs/large.py --mode=memory --config.fsdp=True
    python launch/benchmark.py --config=configs/base.py --mode=max_batch --config.model.dtype=bfloat16
    python launch/benchmark.py --config=configs/base.py --mode=attention --config.data.batch_size=64
    python launch/benchmark.py --mode=finetune --init=/tmp/electra_demo --config=configs/small.py \
        --finetune_config=configs/finetune/builtin.py:topic --finetune_config.max_seq_length=128 \
        --peer=hf --topology=v5e-8

--mode=finetune times fine-tuning (examples/s of training and of prediction) with each example
padded to max_seq_length and with examples packed into rows, on --finetune_config's task
tokenized with --init's vocabulary; --config (optional here) gives the model's sizes instead of
--init's, with random weights. --peer=hf also times HF transformers' Trainer on the same examples
(each batch padded to its longest row, length-grouped batches; one Trainer whose steps go on
across the runs, as ours do), --peer=hf-compile the same under torch.compile; --topology also
estimates the padded and packed steps on that TPU slice from XLA's cost model (compiled here,
nothing runs).

--mode=input reads --records (default: records of the config's sequence length built from the
built-in corpus in a temporary folder) at the config's global batch.
"""

import dataclasses
import json
import os


from absl import flags
from ml_collections import config_flags

from electra_jax import cli

_CONFIG = config_flags.DEFINE_config_file('config', None, 'a configs/*.py file[:variant]')
_STEPS = flags.DEFINE_integer('steps', 10, 'timed steps per run', lower_bound=1)
_REPEATS = flags.DEFINE_integer('repeats', 3, 'timed runs; the median is reported',
                                lower_bound=1)
_JSON = flags.DEFINE_string('json', None, 'also write the result to this JSON file')
_MODE = flags.DEFINE_enum('mode', 'step', ['step', 'input', 'both', 'checkpoint', 'memory',
                                           'max_batch', 'attention', 'finetune'],
                          'what to time (memory: compile only, the step\'s memory per device; '
                          'max_batch: the largest batch that fits a device; attention: one '
                          'layer\'s attention on each path; finetune: fine-tuning padded, packed '
                          'and with --peer=hf HF\'s Trainer)')
_BLOCKS = flags.DEFINE_string('blocks', '', "--mode=attention: more kernel settings to time, "
                              "'bq,bk,bk_dkv,bq_dkv,bq_dq,bk_dq;...' (FlashOptions' block sizes) "
                              "or FlashOptions fields by name, 'num_warps=8,num_stages=3;...'")
_MEMORY_GB = flags.DEFINE_float('memory_gb', 0, '--mode=max_batch: memory per device to fit in '
                                '(default: what the GPU/TPU reports)')
_RECORDS = flags.DEFINE_string('records', '', 'records folder for --mode=input/both; empty: build '
                               'one from the built-in corpus in a temporary folder')
_PEER = flags.DEFINE_enum('peer', '', ['', 'hf', 'hf-compile'], "also time the same step "
                          "written with HF transformers in PyTorch ('hf'; 'hf-compile': under "
                          "torch.compile), alternating runs with ours")
_PROFILE = flags.DEFINE_bool('profile', False, 'also trace --steps steps with jax.profiler and '
                             'print the kernels that take the time, per step')
_PROFILE_DIR = flags.DEFINE_string('profile_dir', '', 'where the trace is kept (TensorBoard or '
                                   'Perfetto read it); empty: a temporary folder')
_TOP = flags.DEFINE_integer('top', 15, 'kernels listed by --profile', lower_bound=1)
_BATCHES = flags.DEFINE_integer('batches', 50, 'timed input batches per run', lower_bound=1)
_FT_CONFIG = cli.define_config_file('finetune_config', None, '--mode=finetune: the fine-tuning '
                                    'config (task, max_seq_length, batch sizes)')
_INIT = flags.DEFINE_string('init', None, '--mode=finetune: the pre-training workdir (or HF folder) '
                            'whose vocabulary tokenizes the task, and whose model is timed '
                            'unless --config is given')
_TOPOLOGY = flags.DEFINE_string('topology', None, '--mode=finetune: also estimate the padded and '
                                'packed steps on this Cloud TPU slice (v5e-8, ...), compiled here')


def _finetune(config) -> dict:
  from electra_jax.tools import finetune_benchmark  # pylint: disable=import-outside-toplevel
  ft = _FT_CONFIG.value
  if ft is None or not _INIT.value:
    raise cli.UserError('--mode=finetune needs --finetune_config (the task) and --init (the '
                        'vocabulary, and the model unless --config is given)')
  cli.require_config(ft, 'fine-tuning', '--finetune_config')
  if config is not None:
    cli.require_config(config, 'pre-training')
  cli.check_paths(_INIT.value)
  ft.init = _INIT.value
  log = lambda line: print(line, flush=True)
  problem = finetune_benchmark.problem(ft, config, log)
  result = finetune_benchmark.benchmark(problem, _STEPS.value, _REPEATS.value, _PEER.value, log)
  for line in finetune_benchmark.report(result):
    print(line)
  if _TOPOLOGY.value:
    from electra_jax.hardware import topology  # pylint: disable=import-outside-toplevel
    slice_ = topology.for_compiling(_TOPOLOGY.value)  # (ValueError: main says it)
    result['topology'] = finetune_benchmark.topology_estimate(problem, slice_, log)
  return result


def _records(config, log) -> str:
  if _RECORDS.value:
    return _RECORDS.value
  import tempfile  # pylint: disable=import-outside-toplevel
  from electra_jax.data import records  # pylint: disable=import-outside-toplevel
  from electra_jax.data import prepare as prepare_lib  # pylint: disable=import-outside-toplevel
  out = os.path.join(tempfile.mkdtemp(prefix='electra_bench_'), 'records')
  log(f'building records of {config.data.max_seq_length} tokens from the built-in corpus in {out}')
  prepare_lib.records_folder(records.Settings(
      source='builtin', max_seq_length=config.data.max_seq_length, vocab_size=4096, num_shards=8),
      out, log=lambda *_: None)
  return out


def _time_step(config) -> dict:
  import jax  # pylint: disable=import-outside-toplevel
  from electra_jax.hardware import aot, flops  # pylint: disable=import-outside-toplevel
  from electra_jax.tools import benchmark  # pylint: disable=import-outside-toplevel
  profile_dir = ''
  if _PROFILE.value:
    import tempfile  # pylint: disable=import-outside-toplevel
    profile_dir = _PROFILE_DIR.value or tempfile.mkdtemp(prefix='electra_profile_')
  result = benchmark.benchmark(config, steps=_STEPS.value, repeats=_REPEATS.value,
                               peer=_PEER.value, profile_dir=profile_dir)
  peak, result['peak_source'] = flops.mesh_peak(jax.devices(), result['dtype'])
  result['peak_flops_per_s'] = peak
  result['mfu'] = result['model_flops_per_s'] / peak if peak else None
  r = result
  print(f'{r["devices"]} x {r["device_kind"]} | batch {r["batch_size"]} x {r["seq_len"]} | '
        f'{r["dtype"]} | compile {r["compile_s"]:.1f} s')
  print(f'{r["tokens_per_s"]:,.0f} tokens/s | {r["ms_per_step"]:.1f} ms/step (median of '
        f'{len(r["ms_per_step_runs"])} runs: {", ".join(f"{x:.1f}" for x in r["ms_per_step_runs"])})')
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
    _print_profile(r['profile'], r['ms_per_step'])
  if 'peer' in r:
    p = r['peer']
    label = 'under torch.compile, ' if p['name'] == 'hf-compile' else ''
    print(f'peer (HF transformers {p["versions"]["transformers"]}, torch {p["versions"]["torch"]}, '
          f'{label}{p["device"]}): '
          f'{p["tokens_per_s"]:,.0f} tokens/s | {p["ms_per_step"]:.1f} ms/step (median of '
          f'{len(p["ms_per_step_runs"])} runs: {", ".join(f"{x:.1f}" for x in p["ms_per_step_runs"])})')
    print(f'ours / peer: {r["speedup_over_peer"]:.2f}x (per alternating pair: '
          f'{", ".join(f"{x:.2f}" for x in p["ratios"])})')
  return result


def _print_profile(p: dict, step_ms: float):
  from electra_jax.tools import profiling  # pylint: disable=import-outside-toplevel
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
    for row in rows[:_TOP.value]:
      print(f'  {row["ms_per_step"]:8.2f} {100 * row["share"]:5.1f}% '
            f'{row["calls_per_step"]:6.0f}  {row["name"][:90]} ({row["category"]})')
  if note := profiling.graphs_note(p['kernels']):
    print(f'  {note}')
  print(f'  each fusion spelled out: {os.path.join(p["directory"], "step_hlo.txt")}')


def _time_input(config) -> dict:
  from electra_jax.tools import io_benchmark  # pylint: disable=import-outside-toplevel
  records_dir = _records(config, lambda line: print(line, flush=True))
  r = io_benchmark.benchmark_input(records_dir, config.data.batch_size, batches=_BATCHES.value,
                                   repeats=_REPEATS.value, seed=config.seed,
                                   shuffle_buffer=config.data.shuffle_buffer)
  print(f'input pipeline ({records_dir}): {r["examples_per_s"]:,.0f} examples/s | '
        f'{r["tokens_per_s"]:,.0f} tokens/s | {r["ms_per_batch"]:.1f} ms per batch of '
        f'{r["batch_size"]} x {r["seq_len"]} (median of {len(r["ms_per_batch_runs"])} runs: '
        f'{", ".join(f"{x:.1f}" for x in r["ms_per_batch_runs"])})')
  return r


def _time_checkpoint(config) -> dict:
  import shutil  # pylint: disable=import-outside-toplevel
  import tempfile  # pylint: disable=import-outside-toplevel
  from electra_jax.tools import io_benchmark  # pylint: disable=import-outside-toplevel
  directory = tempfile.mkdtemp(prefix='electra_ckpt_bench_')
  try:
    r = io_benchmark.benchmark_checkpoint(config, os.path.join(directory, 'c'), _REPEATS.value)
  finally:
    shutil.rmtree(directory, ignore_errors=True)
  print(f'checkpoint of the train state ({r["state_mb"]:.0f} MB): save holds the loop '
        f'{r["save_blocking_ms"]:.0f} ms, files complete after {r["save_total_ms"]:.0f} ms '
        f'(medians of {len(r["save_total_ms_runs"])}: '
        f'{", ".join(f"{a:.0f}/{b:.0f}" for a, b in zip(r["save_blocking_ms_runs"], r["save_total_ms_runs"]))}'
        f'); restore {r["restore_ms"]:.0f} ms')
  return r


def _memory(config) -> dict:
  from electra_jax.tools import benchmark  # pylint: disable=import-outside-toplevel
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
  from electra_jax.model import flash  # pylint: disable=import-outside-toplevel
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
    raise cli.UserError(f'--blocks has {spec!r}, not up to six block sizes or name=integer pairs '
                        f'of {", ".join(sorted(tunable))}')
  return setting


def _attention(config) -> list:
  from electra_jax.tools import benchmark  # pylint: disable=import-outside-toplevel
  blocks = [_kernel_setting(spec) for spec in _BLOCKS.value.split(';') if spec.strip()]
  rows = benchmark.time_attention(config, repeats=_REPEATS.value, iterations=_STEPS.value,
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


def _max_batch(config) -> dict:
  from electra_jax.tools import benchmark  # pylint: disable=import-outside-toplevel
  r = benchmark.max_batch(config, _MEMORY_GB.value * 1e3 or None)
  print(f'step memory per device = {r["fixed_mb"]:,.0f} MB + {r["mb_per_row"]:,.1f} MB per row of '
        f'{config.data.max_seq_length} tokens (XLA buffer assignment; compiled at '
        f'{", ".join(f"{b} rows: {m:,.0f} MB" for b, m in r["compiled"].items())})')
  print(f'largest batch that fits {r["budget_mb"]:,.0f} MB (95% of {r["limit_mb"]:,.0f}) per '
        f'device: {r["batch_per_device"]} per device, global {r["global_batch"]} on '
        f'{r["devices"]} device(s)')
  if _PEER.value:
    import jax  # pylint: disable=import-outside-toplevel
    if jax.default_backend() != 'gpu':
      raise cli.UserError('--mode=max_batch --peer runs the PyTorch peer into the GPU\'s memory '
                          'limit; on this backend leave --peer out')
    r['peer_batch'] = benchmark.peer_max_batch(config)
    print(f'peer (HF transformers, eager): largest batch {r["peer_batch"]} (real steps until out '
          'of memory)')
  return r


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}; pass settings as --config.<field>=...')
  config = _CONFIG.value
  if config is None and _MODE.value != 'finetune':
    raise cli.UserError(f'--mode={_MODE.value} times a pre-training config: give --config=configs/'
                        '<size>.py')
  result = {}
  try:
    if _MODE.value == 'finetune':
      result['finetune'] = _finetune(config)
    if _MODE.value in ('input', 'both'):
      result['input'] = _time_input(config)
    if _MODE.value in ('step', 'both'):
      result['step'] = _time_step(config)
    if _MODE.value == 'checkpoint':
      result['checkpoint'] = _time_checkpoint(config)
    if _MODE.value == 'memory':
      result['memory'] = _memory(config)
    if _MODE.value == 'max_batch':
      result['max_batch'] = _max_batch(config)
    if _MODE.value == 'attention':
      result['attention'] = _attention(config)
  except (ValueError, FileNotFoundError) as e:
    raise cli.UserError(str(e)) from None
  if _MODE.value == 'both':
    ratio = result['input']['tokens_per_s'] / result['step']['tokens_per_s']
    result['input_over_step'] = ratio
    print(f'the input pipeline delivers {ratio:.1f}x the tokens the train step consumes')
  if _JSON.value:
    with open(_JSON.value, 'w') as f:
      json.dump(result if _MODE.value == 'both' else result[_MODE.value], f, indent=2)


if __name__ == '__main__':
  cli.run(main)
