"""Compiles the presets' pre-training for Cloud TPU slices on this machine and tabulates the
results: the table of WORKSPACE.md's Cloud TPU section. A benchmark, not a test (Base takes 3-6
minutes per slice on two CPU cores, Large more).

    python -m benchmarks.compile_table --out=/tmp/compile_table           # every preset and slice
    python -m benchmarks.compile_table --presets=base --slices=v5e-8,v6e-8 --out=/tmp/t

Each cell is `launch/train.py --config=configs/<preset>.py --topology=<slice>` with the preset as
it comes (model.dtype and microbatches 'auto'). Writes <out>.md and <out>.json; the step times
are XLA's TPU cost model's estimate (electra_jax/hardware/hlo_cost.py), not measurements.
"""

import json
import os
import time

from absl import flags

from electra_jax import UserError, cli, user_errors
from electra_jax.config import files as config_files
from electra_jax.hardware import topology
from electra_jax.pretraining import compiling

_PRESETS = flags.DEFINE_list('presets', ['small', 'base', 'large'], 'configs/<name>.py presets')
_SLICES = flags.DEFINE_list('slices', ['v4-8', 'v5e-8', 'v5p-8', 'v6e-8', 'v4-32'],
                            'Cloud TPU accelerator types')
_OVERRIDES = flags.DEFINE_list('set', [], 'config fields for every cell, e.g. fsdp=True')
_OUT = flags.DEFINE_string('out', None, 'writes <out>.md and <out>.json')
flags.mark_flags_as_required(['out'])


def _set(config, path: str, text: str):
  """config.<path> = text, read as the field's type (one sentence when the field is unknown)."""
  *sections, last = path.split('.')
  target = config
  for section in sections:
    target = target[section]
  if last not in target:
    raise cli.UserError(f'--set {path}: no such config field')
  old = target[last]
  if isinstance(old, bool):
    value = text.lower() in ('true', '1')
  elif isinstance(old, (int, float)):
    value = type(old)(float(text)) if isinstance(old, int) and '.' not in text else float(text)
  else:
    value = text
  setattr(target, last, value)


def _config(preset: str):
  """configs/<preset>.py with --set applied (one sentence for an unknown preset or field)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  config = config_files.load_config_file(os.path.join(root, 'configs', f'{preset}.py'), 'presets')
  for item in _OVERRIDES.value:
    key, _, value = item.partition('=')
    _set(config, key, value)
  return config


def _row(preset: str, config, slice_name: str, slice_, log) -> dict:
  row = {'preset': preset, 'slice': slice_name, 'batch': config.data.batch_size,
         'length': config.data.max_seq_length, 'overrides': list(_OVERRIDES.value)}
  t = time.perf_counter()
  try:
    report = compiling.compile_for_topology(config, slice_, log)
  except UserError as e:
    row.update(fits=False, error=str(e), seconds=time.perf_counter() - t)
    return row
  memory = report['memory']['train']
  row.update(fits=True, seconds=time.perf_counter() - t, attention=report['attention'],
             microbatches=report['microbatches'], hbm_gib=memory.total / 2 ** 30,
             hbm_of_gib=slice_.hbm_bytes / 2 ** 30,
             largest_batch=report['largest_batch'], step_ms=1e3 * report['estimate']['step_s'],
             tokens_per_s=report['estimate']['tokens_per_s'], mfu=report['estimate']['mfu'])
  return row


def _table(rows: list) -> str:
  lines = ['| slice | preset, batch x length | compiles and fits | attention | microbatches | '
           'HBM per chip (GiB) | largest batch (est.) | est. step | est. tokens/s | est. MFU | '
           'compile here |', '|' + '---|' * 11]
  for r in rows:
    if not r['fits']:
      lines.append(f'| {r["slice"]} | {r["preset"]}, {r["batch"]} x {r["length"]} | no: '
                   f'{r["error"][:160]} | | | | | | | | {r["seconds"]:.0f} s |')
      continue
    lines.append(f'| {r["slice"]} | {r["preset"]}, {r["batch"]} x {r["length"]} | yes | '
                 f'{r["attention"]} | {r["microbatches"]} | {r["hbm_gib"]:.1f} of '
                 f'{r["hbm_of_gib"]:.0f} | {r["largest_batch"]:,} | {r["step_ms"]:.0f} ms | '
                 f'{r["tokens_per_s"]:,.0f} | {100 * r["mfu"]:.0f}% | {r["seconds"]:.0f} s |')
  return '\n'.join(lines) + '\n'


def main(argv):
  del argv
  os.environ.setdefault('JAX_PLATFORMS', 'cpu')
  # every slice, preset and field checked before the first cell compiles (minutes each)
  with user_errors(ValueError):
    slices = {name: topology.parse(name, flag='--slices') for name in _SLICES.value}
  configs = {preset: _config(preset) for preset in _PRESETS.value}
  rows = []
  for preset, config in configs.items():
    for slice_name, slice_ in slices.items():
      print(f'== {preset} on {slice_name}', flush=True)
      rows.append(_row(preset, config, slice_name, slice_,
                       lambda line: print('  ' + line, flush=True)))
      with open(_OUT.value + '.json', 'w') as f:
        json.dump(rows, f, indent=2)
      with open(_OUT.value + '.md', 'w') as f:
        f.write(_table(rows))
  print(_table(rows))


if __name__ == '__main__':
  cli.run(main)
