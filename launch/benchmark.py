"""Time a config's train step: tokens/s, ms/step, model and XLA FLOPs, achieved FLOP/s, MFU.

    python launch/benchmark.py --config=configs/small.py --config.data.batch_size=16
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
flags.mark_flags_as_required(['config'])


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}; pass settings as --config.<field>=...')
  import jax  # pylint: disable=import-outside-toplevel
  from electra_jax import benchmark, flops  # pylint: disable=import-outside-toplevel
  result = benchmark.benchmark(_CONFIG.value, steps=_STEPS.value, repeats=_REPEATS.value)
  device = jax.devices()[0]
  peak = flops.peak_flops(device)
  if peak is None and device.platform == 'cpu':
    dtype = _CONFIG.value.model.dtype
    peak = benchmark.measure_matmul_peak(dtype)
    result['peak_source'] = f'measured {dtype} 2048^3 matmul'
  elif peak is not None:
    peak *= result['devices']
    result['peak_source'] = 'bf16 datasheet peak x devices'
  result['peak_flops_per_s'] = peak
  result['mfu'] = result['model_flops_per_s'] / peak if peak else None
  r = result
  print(f'{r["devices"]} x {r["device_kind"]} | batch {r["batch_size"]} x {r["seq_len"]} | '
        f'{r["dtype"]} | compile {r["compile_s"]:.1f} s')
  print(f'{r["tokens_per_s"]:,.0f} tokens/s | {r["ms_per_step"]:.1f} ms/step (median of '
        f'{len(r["ms_per_step_runs"])} runs: {", ".join(f"{x:.1f}" for x in r["ms_per_step_runs"])})')
  print(f'FLOPs/step: model {r["model_flops_per_step"] / 1e9:.2f} G (matmuls, bwd = 2 x fwd) | '
        f'paper accounting {r["paper_flops_per_step"] / 1e9:.2f} G | XLA cost analysis '
        f'{r["xla_flops_per_step"] / 1e9:.2f} G')
  print(f'achieved {r["model_flops_per_s"] / 1e9:.1f} GFLOP/s (model) | '
        f'{r["xla_flops_per_s"] / 1e9:.1f} GFLOP/s (XLA)' +
        (f' | peak {peak / 1e9:.0f} GFLOP/s ({r["peak_source"]}) | MFU {100 * r["mfu"]:.1f}%'
         if peak else ''))
  if _JSON.value:
    with open(_JSON.value, 'w') as f:
      json.dump(result, f, indent=2)


if __name__ == '__main__':
  cli.run(main)
