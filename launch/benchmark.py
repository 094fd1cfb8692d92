"""Time a config's train step (tokens/s, ms/step, FLOPs, MFU) and/or its input pipeline.

    python launch/benchmark.py --config=configs/small.py --config.data.batch_size=16
    python launch/benchmark.py --config=configs/small.py --config.data.batch_size=16 --peer=hf
    python launch/benchmark.py --config=configs/small.py --mode=both   # input vs step, same run
    python launch/benchmark.py --config=configs/small.py --mode=checkpoint  # save/restore times
    python launch/benchmark.py --config=configs/large.py --mode=memory --config.fsdp=True

--mode=input reads --records (default: records of the config's sequence length built from the
built-in corpus in a temporary folder) at the config's global batch.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import flags  # pylint: disable=wrong-import-position
from ml_collections import config_flags  # pylint: disable=wrong-import-position

from electra_jax import cli  # pylint: disable=wrong-import-position

_CONFIG = config_flags.DEFINE_config_file('config', None, 'a configs/*.py file[:variant]')
_STEPS = flags.DEFINE_integer('steps', 10, 'timed steps per run')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'timed runs; the median is reported')
_JSON = flags.DEFINE_string('json', None, 'also write the result to this JSON file')
_MODE = flags.DEFINE_enum('mode', 'step', ['step', 'input', 'both', 'checkpoint', 'memory'],
                          'what to time (memory: compile only, the step\'s memory per device)')
_RECORDS = flags.DEFINE_string('records', '', 'records folder for --mode=input/both; empty: build '
                               'one from the built-in corpus in a temporary folder')
_PEER = flags.DEFINE_enum('peer', '', ['', 'hf'], "also time the same step written with HF "
                          "transformers in PyTorch ('hf'), alternating runs with ours")
_BATCHES = flags.DEFINE_integer('batches', 50, 'timed input batches per run')
flags.mark_flags_as_required(['config'])


def _records(config, log) -> str:
  if _RECORDS.value:
    return _RECORDS.value
  import tempfile  # pylint: disable=import-outside-toplevel
  from electra_jax import records  # pylint: disable=import-outside-toplevel
  out = os.path.join(tempfile.mkdtemp(prefix='electra_bench_'), 'records')
  log(f'building records of {config.data.max_seq_length} tokens from the built-in corpus in {out}')
  records.prepare(records.Settings(source='builtin', max_seq_length=config.data.max_seq_length,
                                   vocab_size=4096, num_shards=8), out, log=lambda *_: None)
  return out


def _time_step(config) -> dict:
  import jax  # pylint: disable=import-outside-toplevel
  from electra_jax import benchmark, flops  # pylint: disable=import-outside-toplevel
  result = benchmark.benchmark(config, steps=_STEPS.value, repeats=_REPEATS.value,
                               peer=_PEER.value)
  peak, result['peak_source'] = flops.mesh_peak(jax.devices(), config.model.dtype)
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
  mem = r['memory']
  if mem:
    print(f'memory per device (XLA buffer assignment): {mem["peak_estimate_mb"]:,.0f} MB = state '
          f'and batch {mem["arguments_mb"]:,.0f} + temporaries {mem["temporaries_mb"]:,.0f} + '
          f'outputs {mem["outputs_mb"]:,.0f}' +
          (f' | device high-water mark {mem["device_peak_mb"]:,.0f} MB'
           if 'device_peak_mb' in mem else '') +
          (f' | {r["microbatches"]} microbatches' if r['microbatches'] > 1 else ''))
  if 'peer' in r:
    p = r['peer']
    print(f'peer (HF transformers {p["versions"]["transformers"]}, torch {p["versions"]["torch"]}): '
          f'{p["tokens_per_s"]:,.0f} tokens/s | {p["ms_per_step"]:.1f} ms/step (median of '
          f'{len(p["ms_per_step_runs"])} runs: {", ".join(f"{x:.1f}" for x in p["ms_per_step_runs"])})')
    print(f'ours / peer: {r["speedup_over_peer"]:.2f}x (per alternating pair: '
          f'{", ".join(f"{x:.2f}" for x in p["ratios"])})')
  return result


def _time_input(config) -> dict:
  from electra_jax import benchmark  # pylint: disable=import-outside-toplevel
  records_dir = _records(config, lambda line: print(line, flush=True))
  r = benchmark.benchmark_input(records_dir, config.data.batch_size, batches=_BATCHES.value,
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
  from electra_jax import benchmark  # pylint: disable=import-outside-toplevel
  directory = tempfile.mkdtemp(prefix='electra_ckpt_bench_')
  try:
    r = benchmark.benchmark_checkpoint(config, os.path.join(directory, 'c'), _REPEATS.value)
  finally:
    shutil.rmtree(directory, ignore_errors=True)
  print(f'checkpoint of the train state ({r["state_mb"]:.0f} MB): save holds the loop '
        f'{r["save_blocking_ms"]:.0f} ms, files complete after {r["save_total_ms"]:.0f} ms '
        f'(medians of {len(r["save_total_ms_runs"])}: '
        f'{", ".join(f"{a:.0f}/{b:.0f}" for a, b in zip(r["save_blocking_ms_runs"], r["save_total_ms_runs"]))}'
        f'); restore {r["restore_ms"]:.0f} ms')
  return r


def _memory(config) -> dict:
  from electra_jax import benchmark  # pylint: disable=import-outside-toplevel
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


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}; pass settings as --config.<field>=...')
  config = _CONFIG.value
  result = {}
  try:
    if _MODE.value in ('input', 'both'):
      result['input'] = _time_input(config)
    if _MODE.value in ('step', 'both'):
      result['step'] = _time_step(config)
    if _MODE.value == 'checkpoint':
      result['checkpoint'] = _time_checkpoint(config)
    if _MODE.value == 'memory':
      result['memory'] = _memory(config)
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
