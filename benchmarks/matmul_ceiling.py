"""The highest MFU XLA's TPU cost model allows a config's ELECTRA step on a Cloud TPU slice: each of
the step's matmuls compiled alone for the chip (no TPU needed), their estimates summed.

    python -m benchmarks.matmul_ceiling --config=configs/base.py --topology=v6e-8
    python -m benchmarks.matmul_ceiling --config=configs/large.py --topology=v5e-8 --microbatches=8

Compare with the step's own estimate (`launch/train.py ... --topology=<slice>`, same microbatches):
the difference is what the rest of the step (elementwise work, reductions, copies, collectives)
costs by the same estimate. Both are estimates from the compiler's cost model, not measurements.
"""

from absl import flags

from benchmarks import ceiling
from electra_jax import cli, user_errors
from electra_jax.config import pretraining as config_lib
from electra_jax.hardware import topology
from electra_jax.model import networks as model_lib

_CONFIG = cli.define_config_file('config', None, 'a configs/*.py pre-training config')
_TOPOLOGY = flags.DEFINE_string('topology', None,
                                'a Cloud TPU accelerator type (v5e-8, v6e-8, ...)')
_MICROBATCHES = flags.DEFINE_integer('microbatches', 1, 'parts of the global batch per step (as '
                                     '--topology chose for the step)')
flags.mark_flags_as_required(['config', 'topology'])


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}')
  if _MICROBATCHES.value < 1:
    raise cli.UserError('--microbatches must be at least 1')
  config = _CONFIG.value
  with user_errors(ValueError):
    config_lib.check(config)
    slice_ = topology.parse(_TOPOLOGY.value)
    cfg = model_lib.ModelConfig.from_config(config.model, platform='tpu',
                                            chip=slice_.device_kind)
  d = config.data
  chips = slice_.chips * slice_.num_slices
  if d.batch_size % (chips * _MICROBATCHES.value):
    raise cli.UserError(f'batch {d.batch_size} does not split into {_MICROBATCHES.value} '
                        f'microbatches over {chips} chips; change --microbatches or the batch')
  r = ceiling.ceiling(cfg, d.max_seq_length, d.batch_size, config.objective.max_predictions,
                      _MICROBATCHES.value, slice_)
  print(f'{slice_.describe()} | batch {d.batch_size} x {d.max_seq_length}, {r["rows"]} rows per '
        f'chip and microbatch')
  print('each matmul compiled alone for one chip (forward + input gradient + weight gradient), '
        "XLA's TPU cost model's estimate per step:")
  for mm, seconds in r['lines']:
    at_peak = 3 * mm.flops * mm.count * r['parts'] / slice_.chip.peak_flops
    print(f'  {1e3 * seconds:8.2f} ms  {100 * at_peak / seconds:5.1f}% of peak  {mm.count:3d} x '
          f'[{mm.m}, {mm.k}] @ [{mm.k}, {mm.n}]  {mm.what}')
  print(f'  {1e3 * r["attention_seconds"]:8.2f} ms  100.0% of peak  attention scores and context '
        '(the flash kernel; counted at peak)')
  print(f'matmuls alone: {1e3 * r["seconds"]:.1f} ms per step (at peak: '
        f'{1e3 * r["ideal_seconds"]:.1f} ms) -> at most {100 * r["mfu"]:.1f}% MFU by this estimate '
        f'(model FLOPs {r["model_flops"] / 1e12:.2f} T per step)')


if __name__ == '__main__':
  cli.run(main)
