"""benchmarks/benchmark.py's tools: the profile reader, the largest-batch search, the attention
timer."""

import gzip
import json
import os
import subprocess

import pytest

from conftest import CHILD_ENV, ROOT, script, test_config
from electra_jax import UserError
from benchmarks import bench_command
from benchmarks import step_benchmark as benchmark
from benchmarks import profiling


def _write_trace(directory, events):
  run = os.path.join(directory, 'plugins', 'profile', '2026_01_01_00_00_00')
  os.makedirs(run)
  with gzip.open(os.path.join(run, 'perfetto_trace.json.gz'), 'wt') as f:
    json.dump({'traceEvents': events}, f)


@pytest.mark.fast
def test_profile_counts_each_kernel_once_and_nested_ones_apart(tmp_path):
  """Device lines: a `while` holding two kernels keeps only its own time; host and module lines
  are left out; instances of one kind group together."""
  meta = [{'ph': 'M', 'pid': 1, 'name': 'process_name', 'args': {'name': '/device:GPU:0'}},
          {'ph': 'M', 'pid': 2, 'name': 'process_name', 'args': {'name': '/host:CPU'}},
          {'ph': 'M', 'pid': 1, 'tid': 7, 'name': 'thread_name', 'args': {'name': 'Stream #7'}},
          {'ph': 'M', 'pid': 1, 'tid': 8, 'name': 'thread_name',
           'args': {'name': 'XLA Modules'}}]
  x = lambda pid, tid, ts, dur, name: {'ph': 'X', 'pid': pid, 'tid': tid, 'ts': ts, 'dur': dur,
                                       'name': name}
  events = meta + [
      x(1, 7, 0, 100, 'while.3'), x(1, 7, 10, 30, 'loop_add_fusion_1'),
      x(1, 7, 50, 40, 'sm90_xmma_gemm_bf16'), x(1, 7, 200, 20, 'loop_add_fusion_2'),
      x(1, 7, 300, 60, 'electra_flash_forward'),
      x(1, 8, 0, 1000, 'jit_train_step'),  # the module: not a kernel
      x(2, 9, 0, 500, 'PjitFunction(train_step)')]  # host: left out when device lines exist
  _write_trace(str(tmp_path), events)
  rows, busy = profiling.kernel_table(str(tmp_path), steps=2)
  ms = {r['name']: r['ms_per_step'] for r in rows}
  assert ms == pytest.approx({'while.3': 0.015, 'loop_add_fusion_1': 0.015,
                              'sm90_xmma_gemm_bf16': 0.02, 'loop_add_fusion_2': 0.01,
                              'electra_flash_forward': 0.03})
  assert busy == pytest.approx(0.09)  # 180 us of kernels in 2 steps
  assert rows[0]['name'] == 'electra_flash_forward' and rows[0]['category'] == 'attention kernel'
  cats = profiling.by_category(rows)
  assert cats['matmul'] == pytest.approx(0.02)
  assert cats['elementwise / reduction fusion'] == pytest.approx(0.025)
  kinds = {g['name']: g for g in profiling.grouped(rows)}
  assert kinds['loop_add_fusion']['instances'] == 2
  assert kinds['loop_add_fusion']['ms_per_step'] == pytest.approx(0.025)


@pytest.mark.fast
def test_profile_keeps_the_whole_time_of_neighbours_that_overlap_by_clock_skew(tmp_path):
  """On an H100's stream consecutive kernels overlap by the clocks' skew (0.13 us typically); each
  keeps its whole time (the reader once subtracted the next kernel from the one before, and
  reported 34.8 ms of a 91 ms step), and a kernel is categorized by its own name before the XLA
  operation's (pallas_call, custom-call)."""
  meta = [{'ph': 'M', 'pid': 1, 'name': 'process_name', 'args': {'name': '/device:GPU:0'}},
          {'ph': 'M', 'pid': 1, 'tid': 7, 'name': 'thread_name', 'args': {'name': 'Stream #7'}}]
  x = lambda ts, dur, kernel, op: {'ph': 'X', 'pid': 1, 'tid': 7, 'ts': ts, 'dur': dur,
                                   'name': kernel, 'args': {'hlo_op': op}}
  events = meta + [x(0.0, 400.0, 'electra_flash_dq', 'pallas_call.3'),
                   x(399.87, 300.0, 'nvjet_sm90_tss_192x192_64x3', 'custom-call.7'),
                   x(699.0, 100.0, 'loop_add_fusion_2', 'loop_add_fusion.2'),  # 1 us of skew
                   x(710.0, 20.0, 'loop_add_fusion_5', 'loop_add_fusion.5')]  # truly nested
  _write_trace(str(tmp_path), events)
  rows, busy = profiling.kernel_table(str(tmp_path), steps=1)
  ms = {r['name']: r['ms_per_step'] for r in rows}
  assert ms == pytest.approx({'pallas_call.3': 0.4, 'custom-call.7': 0.3,
                              'loop_add_fusion.2': 0.08, 'loop_add_fusion.5': 0.02})
  assert busy == pytest.approx(0.8)
  kinds = {r['name']: r['category'] for r in rows}
  assert kinds['pallas_call.3'] == 'attention kernel' and kinds['custom-call.7'] == 'matmul'
  assert profiling.graphs_note(rows) == ''
  graphs = [{'name': 'command_buffer_1', 'share': 0.9}, {'name': 'fusion.2', 'share': 0.1}]
  assert 'XLA_FLAGS=--xla_gpu_enable_command_buffer=' in profiling.graphs_note(graphs)


def test_profile_option_prints_the_kernels_of_the_real_step(tmp_path, records_dir):
  """benchmarks/benchmark.py --profile in a process of its own, as it is run (a process that
  compiled for a TPU slice first, as test_topology.py does, records no XLA operation: the error says
  so)."""
  from conftest import run_config_file
  trace, out = tmp_path / 'trace', tmp_path / 'result.json'
  done = subprocess.run([*script('benchmark.py'),
                         f'--config={run_config_file(tmp_path, records_dir)}', '--steps=2',
                         '--repeats=1', '--profile', f'--profile_dir={trace}', f'--json={out}'],
                        capture_output=True, text=True, cwd=ROOT, env=CHILD_ENV, timeout=300,
                        check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  p = json.loads(out.read_text())['profile']
  assert p['kernels'] and p['busy_ms_per_step'] > 0
  assert sum(r['ms_per_step'] for r in p['kernels']) == pytest.approx(p['busy_ms_per_step'])
  assert sorted((r['ms_per_step'] for r in p['kernels']), reverse=True) == [
      r['ms_per_step'] for r in p['kernels']]
  assert 'matmul' in p['categories']  # the step's matmuls are found by name
  hlo = (trace / 'step_hlo.txt').read_text()  # where each kernel is spelled out
  fusions = [r['name'] for r in p['kernels'] if 'fusion' in r['name']]
  assert fusions and all(f'{name} = ' in hlo for name in fusions[:5]), fusions[:5]
  # the kernel time of a CPU step cannot exceed the wall time of the traced steps on 2 cores
  assert p['busy_ms_per_step'] < 8 * p['wall_ms_per_step']
  printed = done.stdout
  assert 'single kernels:' in printed and p['kernels'][0]['name'][:90] in printed, printed
  count = sum(r['calls_per_step'] for r in p['kernels'])
  assert f'kernels per step: {count:,.0f} (' in printed, printed


def test_max_batch_is_the_largest_that_fits():
  """The batch found fits the budget and 8 more rows per device would not (by XLA's buffer
  assignment, what the step would allocate)."""
  config = test_config()
  config.model.dtype = 'float32'
  r = benchmark.max_batch(config, limit_mb=3.5)  # 16 rows: the second probe, no third compile
  rows = r['batch_per_device']
  assert rows > 0 and rows % 8 == 0 and r['global_batch'] == rows * 8
  assert r['memory_mb'] <= r['budget_mb']

  def memory(per_device):
    c = config.copy_and_resolve_references()
    c.data.batch_size = c.data.eval_batch_size = per_device * 8
    return benchmark.step_memory(c)['memory']['peak_estimate_mb']

  assert memory(rows + 8) > r['budget_mb']
  with pytest.raises(ValueError, match='--memory_gb'):
    benchmark.max_batch(config)  # a CPU reports no limit


def test_attention_mode_times_each_path_and_checks_it():
  config = test_config(**{'data.batch_size': 8, 'model.attention_dropout_rate': 0.1})
  rows = benchmark.time_attention(config, repeats=1, iterations=1,
                                  blocks=[{'block_q': 16, 'block_k': 16}])
  assert [r['path'].split()[0] for r in rows] == ['explicit', 'pallas', 'pallas']
  for r in rows:
    assert 'error' not in r and r['ms'] > 0 and r['max_rel_diff'] < 1e-5


@pytest.mark.fast
def test_max_batch_without_a_known_limit_and_bad_kernel_settings_are_one_error_line():
  command = [*script('benchmark.py'),
             f'--config={os.path.join(ROOT, "configs", "tiny.py")}', '--steps=1', '--repeats=1']
  done = subprocess.run(command + ['--mode=max_batch'], capture_output=True, text=True,
                        cwd=ROOT, env=CHILD_ENV, timeout=300, check=False)
  assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].startswith('error:')
  assert '--memory_gb' in done.stderr
  done = subprocess.run(command + ['--mode=attention', '--blocks=num_warps=8;num_warp=8'],
                        capture_output=True, text=True, cwd=ROOT, env=CHILD_ENV, timeout=300,
                        check=False)
  assert done.returncode == 2, done.stderr
  assert done.stderr.strip().splitlines()[-1].startswith(
      "error: --blocks has 'num_warp=8', not up to six block sizes or name=integer pairs of "
      'block_k, ')


def test_objectives_mode_times_each_objectives_own_step_against_the_first():
  """--mode=objectives: each objective's step with the model its run fits (COCO-LM's heads, AMOS's
  exits), timed in alternation; the first is the reference of the ratios."""
  config = test_config(**{'data.batch_size': 8})
  r = benchmark.objective_costs(config, ['electra', 'cocolm', 'amos'], steps=1, warmup=1,
                                repeats=2)
  assert list(r) == ['electra', 'cocolm', 'amos']
  assert r['electra']['time_ratio'] == r['electra']['flops_ratio'] == 1.0
  for name in ('cocolm', 'amos'):  # a full-width generator and their extra passes cost more
    assert r[name]['flops_ratio'] > 1 and len(r[name]['ms_per_step_runs']) == 2
    assert r[name]['ms_per_step'] > 0 and len(r[name]['pairwise_ratios']) == 2
  for objectives, message in (('', '--objectives names no objective'),
                              ('electra,bert', "objective.name is 'bert'; available: electra")):
    with pytest.raises(UserError, match=message):
      bench_command.run(config, bench_command.Options(mode='objectives', objectives=objectives))
