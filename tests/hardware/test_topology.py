"""Compiling the user's run for a Cloud TPU slice on this CPU machine (XLA's TPU compiler from
libtpu, compile-only devices): the slices by name, the compiled programs' memory and kernels, the
compiler's estimate, the fewest microbatches that fit, and the attention kernel's safety rules."""

import dataclasses
import importlib.util
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import CHILD_ENV, ROOT, load_config, test_config, with_fields
from electra_jax.config.pretraining import parse
from electra_jax import UserError
from electra_jax.config import files as config_files
from electra_jax.hardware import peak
from electra_jax.pretraining import step_flops as step_flops_lib
from electra_jax.hardware import hlo_cost
from electra_jax.hardware import topology
from electra_jax.model import attention
from electra_jax.model import networks as model_lib
from electra_jax.model import flash
from electra_jax.platform import chips
from benchmarks import ceiling
from electra_jax.pretraining import compiling
from electra_jax.train import aot
from electra_jax.train import partitioning
from electra_jax.pretraining import setup as pretrain_setup
from electra_jax.train import step as step_lib

needs_libtpu = pytest.mark.skipif(importlib.util.find_spec('libtpu') is None,
                                  reason='the TPU compiler (pip install -e ".[tpu]")')


def base_like(**overrides):
  """ELECTRA-Base's structure at a size that compiles in seconds: embeddings as wide as the
  hidden layers, heads of 64, dropout, a generator of its own, two 128-token blocks per sequence
  for the attention kernel, FSDP and two microbatches."""
  c = load_config(f'{ROOT}/configs/base.py')
  c.model.update(vocab_size=512, embedding_size=128, hidden_size=128, num_layers=2,
                 max_position_embeddings=256, generator_hidden_fraction=0.5)
  c.data.update(max_seq_length=256, batch_size=32)
  c.update(fsdp=True, microbatches=2)
  return with_fields(c, overrides)


# ------------------------------------------------------------------------------------------------
# Slices by name
# ------------------------------------------------------------------------------------------------

@pytest.mark.fast
def test_slices_by_their_gcloud_names():
  v4 = topology.parse('v4-8')
  assert (v4.chips, v4.hosts, v4.topology, v4.family) == (4, 1, 'v4:2x2x1', 'v4')
  assert topology.parse('v5litepod-8') == dataclasses.replace(topology.parse('v5e-8'),
                                                              name='v5litepod-8')
  assert topology.parse('v5e-8').topology == 'v5e:2x4'
  assert (topology.parse('v5p-8').chips, topology.parse('v5p-8').topology) == (4, 'v5:2x2x1')
  assert topology.parse('v6e-8').hbm_bytes == 32 * topology.GiB
  pod = topology.parse('v4-32')
  assert (pod.chips, pod.hosts, pod.topology) == (16, 4, 'v4:2x2x4')
  assert (topology.parse('v5e-32').chips, topology.parse('v5e-32').hosts) == (32, 8)
  for bad in ('v5e-7', 'v3-8', 'tpu', 'v4-6'):
    with pytest.raises(ValueError, match='v4-8|v5e-'):
      topology.parse(bad)
  with pytest.raises(ValueError, match='slices'):
    topology.parse('v5e-8', num_slices=0)


@pytest.mark.fast
@needs_libtpu
def test_compile_only_devices_of_multi_host_and_multislice_slices():
  devices = topology.parse('v4-32').devices()
  assert len(devices) == 16 and {d.device_kind for d in devices} == {'TPU v4'}
  assert sorted({d.process_index for d in devices}) == [0, 1, 2, 3]  # four hosts
  two = topology.parse('v5e-8', num_slices=2).devices()
  assert len(two) == 16 and sorted({d.slice_index for d in two}) == [0, 1]
  mesh = partitioning.make_mesh(two)  # (jax.make_mesh takes one slice only)
  assert [d.slice_index for d in mesh.devices.flat] == [0] * 8 + [1] * 8  # slice after slice


# ------------------------------------------------------------------------------------------------
# The estimate
# ------------------------------------------------------------------------------------------------

_HLO = '''HloModule step

%fused_body (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %m = f32[8]{0} multiply(%p, %p)
}

%body (t: (s32[], f32[1024])) -> (s32[], f32[1024]) {
  %t = (s32[], f32[1024]{0}) parameter(0)
  %x = f32[1024]{0} get-tuple-element(%t), index=1
  %f = f32[1024]{0} fusion(%x), kind=kLoop, calls=%fused_body, metadata={op_name="jit(step)/layer_3/mul"}, backend_config={"window_config":{"estimated_cycles":"1000"}}
  %i = s32[] get-tuple-element(%t), index=0
  ROOT %r = (s32[], f32[1024]{0}) tuple(%i, %f)
}

%cond (t: (s32[], f32[1024])) -> pred[] {
  %t = (s32[], f32[1024]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(4)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%cheap (a: f32[1024]) -> f32[1024] {
  %a = f32[1024]{0} parameter(0)
  ROOT %c = f32[1024]{0} fusion(%a), kind=kLoop, calls=%fused_body, backend_config={"window_config":{"estimated_cycles":"100"}}
}

%dear (a: f32[1024]) -> f32[1024] {
  %a = f32[1024]{0} parameter(0)
  ROOT %d = f32[1024]{0} fusion(%a), kind=kLoop, calls=%fused_body, backend_config={"window_config":{"estimated_cycles":"500"}}
}

ENTRY %main (a: f32[1024], b: pred[]) -> f32[1024] {
  %a = f32[1024]{0} parameter(0)
  %b = pred[] parameter(1)
  %z = s32[] constant(0)
  %t = (s32[], f32[1024]{0}) tuple(%z, %a)
  %w = (s32[], f32[1024]{0}) while(%t), condition=%cond, body=%body
  %y = f32[1024]{0} get-tuple-element(%w), index=1
  %k = f32[1024]{0} custom-call(%y), custom_call_target="tpu_custom_call", metadata={op_name="jit(step)/pallas_call"}, backend_config={"custom_call_config":{"body":"x","cost_estimate":{"flops":"2000000","transcendentals":"0","bytes_accessed":"3000"}}}
  %s = f32[1024]{0} all-reduce(%k), replica_groups={}, to_apply=%fused_body
  ROOT %c = f32[1024]{0} conditional(%b, %s, %s), branch_computations={%cheap, %dear}
}
'''  # noqa: E501  (the compiler's text, one instruction a line)


@pytest.mark.fast
def test_the_estimate_walks_loops_branches_kernels_and_collectives():
  chip = hlo_cost.Chip('test', peak_flops=1e12, hbm_bytes_per_s=1e9, clock_hz=1e6,
                       ici_bytes_per_s=1e8)
  est = hlo_cost.estimate(_HLO, chip, devices_per_slice=4)
  loop = 4 * 1000 / 1e6  # the body's fusion, four trips
  kernel = max(2e6 / 1e12, 3000 / 1e9)  # its declared cost: 3 us of bytes
  collective = 2 * 3 / 4 * 4096 / 1e8  # ring all-reduce of 4 KiB among 4 chips
  branch = 500 / 1e6  # the dearer branch
  condition = 5 * (4 + 4 + 1) / 1e9  # the loop's compare, without an estimate: its bytes, 5 times
  assert est.by_source['compiler'] == pytest.approx(loop + branch)
  assert est.by_source['roofline'] == pytest.approx(condition)
  assert est.by_source['kernel'] == pytest.approx(kernel)
  assert est.by_source['collective'] == pytest.approx(collective)
  assert est.seconds == pytest.approx(loop + kernel + collective + branch + condition)
  assert est.unknown_loops == 0
  top = est.top(2)
  assert top[0]['what'] == 'layer_*/mul' and top[0]['count'] == 4  # layers merged, trips counted
  two = hlo_cost.estimate(_HLO, chip, devices_per_slice=4, num_slices=2)
  assert two.by_source['collective'] > est.by_source['collective']  # the data-center network too
  # the kernels a step launches: the loop's fusion 4 times, the dearer branch's once, the
  # condition's compare 5 times, the Pallas kernel and the all-reduce once
  assert est.kernels() == {'fusions': 5, 'pallas': 1, 'collectives': 1, 'matmuls': 0, 'other': 5,
                           'total': 12}


_GPU = '''HloModule step

ENTRY %main (a: f32[64,64]) -> f32[64,64] {
  %a = f32[64,64]{1,0} parameter(0)
  %g = (f32[64,64]{1,0}, s8[1024]{0}) custom-call(%a, %a), custom_call_target="__cublas$gemm"
  %m = f32[64,64]{1,0} get-tuple-element(%g), index=0
  %t = f32[64,64]{1,0} custom-call(%m), custom_call_target="__gpu$xla.gpu.triton"
  %d = f32[64,64]{1,0} custom-call(%t), custom_call_target="__cudnn$fmhaSoftmax"
  ROOT %f = f32[64,64]{1,0} fusion(%d), kind=kLoop, calls=%fused_body
}
'''


@pytest.mark.fast
def test_kernels_of_a_gpu_program_name_cublas_matmuls_and_triton_kernels():
  """Any backend's program is counted without a chip: cuBLAS calls are matmuls, Triton's (our
  Pallas kernels on GPUs) kernels, other custom calls (cuDNN) other."""
  assert hlo_cost.kernels(_GPU) == {'fusions': 1, 'pallas': 1, 'collectives': 0, 'matmuls': 1,
                                    'other': 1, 'total': 4}


_SPLIT = '''HloModule step

ENTRY %main (a: f32[64,64]) -> f32[64,64] {
  %a = f32[64,64]{1,0} parameter(0)
  %k = f32[64,64]{1,0} custom-call(%a), custom_call_target="tpu_custom_call", backend_config={"custom_call_config": {"metadata":"{\\"block_q\\": 512,
}"}, "estimated_cycles":"940000"}, metadata={op_name="jit(step)/splash_mha_fwd"}
  %f = f32[64,64]{1,0} fusion(%k), kind=kLoop, calls=%fused_body, backend_config={"estimated_cycles":"1000"}
  ROOT %g = f32[64,64]{1,0} fusion(%f), kind=kLoop, calls=%fused_body, backend_config={"estimated_cycles":"1000"}
}
'''  # noqa: E501  (a kernel's config holding a newline, as JAX's splash kernel's does)


@pytest.mark.fast
def test_an_instruction_over_several_lines_is_one_and_the_computation_goes_on():
  """A TPU kernel whose backend_config spans lines (a line of it starting with '}'): one
  instruction, a Pallas kernel, and the instructions after it still counted."""
  chip = hlo_cost.Chip('test', peak_flops=1e12, hbm_bytes_per_s=1e9, clock_hz=1e6,
                       ici_bytes_per_s=1e8)
  est = hlo_cost.estimate(_SPLIT, chip, devices_per_slice=8)
  assert est.kernels() == {'fusions': 2, 'pallas': 1, 'collectives': 0, 'matmuls': 0, 'other': 0,
                           'total': 3}
  assert est.seconds == pytest.approx(942_000 / chip.clock_hz)
  assert est.top(1)[0]['what'].endswith('splash_mha_fwd')
  # an estimate faster than the chips' peak allows says so instead of printing it as a result
  compiled = type('Compiled', (), {'as_text': lambda self: _SPLIT})()
  v5e = chips.of_slice_name('v5e')
  lines, numbers = aot.estimate_lines(compiled, v5e, 8, 1, 1e18, 1000, 8)
  assert numbers['mfu'] > 1 and 'do not use this estimate' in lines[1]
  lines, numbers = aot.estimate_lines(compiled, v5e, 8, 1, 1e9, 1000, 8)
  assert numbers['mfu'] < 1 and 'do not use' not in lines[1]


_UNKNOWN = '''HloModule step

%matmul (x: f32[64,4096], w: f32[4096,32]) -> f32[64,32] {
  %x = f32[64,4096]{1,0} parameter(0)
  %w = f32[4096,32]{1,0} parameter(1)
  ROOT %c = f32[64,32]{1,0} convolution(%x, %w), window={size=1}, dim_labels=bf_io->bf
}

ENTRY %main (x: f32[64,4096], w: f32[4096,32]) -> f32[64,32] {
  %x = f32[64,4096]{1,0} parameter(0)
  %w = f32[4096,32]{1,0} parameter(1)
  ROOT %f = f32[64,32]{1,0} fusion(%x, %w), kind=kOutput, calls=%matmul, backend_config={"window_config":{"estimated_cycles":"9223372036854775807"}}
}
'''  # noqa: E501  (the compiler's text, one instruction a line)


@pytest.mark.fast
def test_an_operation_the_cost_model_cannot_estimate_gets_its_roofline():
  """The cost model's "unknown" (2^63 - 1 cycles, seen on v4 for one matmul of Base) is not a
  time: the operation gets the roofline of its matmul's FLOPs and its bytes."""
  chip = hlo_cost.Chip('test', peak_flops=1e12, hbm_bytes_per_s=1e12, clock_hz=1e9,
                       ici_bytes_per_s=1e9)
  est = hlo_cost.estimate(_UNKNOWN, chip, devices_per_slice=1)
  flops = 2 * 64 * 32 * 4096  # more than its 1.6 MB take at 1e12 bytes/s
  assert est.seconds == pytest.approx(flops / 1e12) and set(est.by_source) == {'roofline'}


# ------------------------------------------------------------------------------------------------
# The run compiled for v5e-8 and v4-8
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def v5e_report():
  lines = []
  report = compiling.compile_for_topology(base_like(), topology.parse('v5e-8'), lines.append)
  return report, lines


@needs_libtpu
def test_base_structure_compiles_for_v5e8_with_every_feature(v5e_report):
  """Mosaic compiles the Pallas kernels inside the real step (FSDP's gathers, two microbatches,
  dropout, ELECTRA's generator and discriminator) for eight v5e chips."""
  report, lines = v5e_report
  hlo = report['train_hlo']
  assert report['attention'] == 'pallas' and report['dtype'] == 'bfloat16'
  assert 'Pallas flash kernel on tpu' in '\n'.join(lines)
  for kernel in ('electra_flash_forward', 'electra_flash_dkv', 'electra_flash_dq'):
    assert kernel in hlo
  assert hlo.count('custom_call_target="tpu_custom_call"') >= 3 * 4  # 2 layers x 2 networks
  assert 'all-gather' in hlo and 'reduce-scatter' in hlo  # FSDP: weights gathered, grads split
  assert ' while(' in hlo  # the microbatch loop
  assert report['microbatches'] == 2
  memory = report['memory']['train']
  params = report['parameters']
  assert params * 4 * 3 / 8 <= memory.state < params * 4 * 3 / 4  # FSDP: about an eighth each
  assert memory.total < 16 * topology.GiB
  est = report['estimate']
  assert est['step_s'] > 0 and 0 < est['mfu'] < 1
  assert est['by_source_s']['kernel'] > 0 and est['by_source_s']['collective'] > 0
  assert est['unknown_loops'] == 0
  assert any('not a measurement' in line for line in lines)
  assert lines[-1] == 'v5e-8: every program compiles and fits'


@needs_libtpu
def test_cocolm_compiles_for_v5e8_with_its_global_contrast():
  """COCO-LM's step (its auxiliary network, the crop's pass, the contrastive loss over the global
  batch) compiles and fits for eight v5e chips; the crop's embeddings meet across the chips."""
  lines = []
  report = compiling.compile_for_topology(
      base_like(**{'objective.name': 'cocolm', 'microbatches': 1}), topology.parse('v5e-8'),
      lines.append)
  assert lines[-1] == 'v5e-8: every program compiles and fits'
  hlo = report['train_hlo']
  assert 'Electra.sequence_embedding' in hlo and 'all-gather' in hlo
  assert report['estimate']['step_s'] > 0


@needs_libtpu
def test_amos_compiles_for_v5e8():
  """AMOS's step (its generator's three exits at the main width, the straight-through sample's
  products with the word table) compiles and fits for eight v5e chips."""
  lines = []
  report = compiling.compile_for_topology(
      base_like(**{'objective.name': 'amos', 'microbatches': 1}), topology.parse('v5e-8'),
      lines.append)
  assert lines[-1] == 'v5e-8: every program compiles and fits'
  assert 'Electra.generator_exit_logits' in report['train_hlo']
  assert report['estimate']['step_s'] > 0


@needs_libtpu
def test_the_modern_backbone_compiles_for_v5e8():
  """The modern backbone's step (every layer on the Pallas kernel, the local ones' loops bounded
  by their window; a generator with a word table of its own width) compiles and fits for eight
  v5e chips."""
  lines = []
  report = compiling.compile_for_topology(
      base_like(**{'model.backbone': 'modern', 'model.num_layers': 4, 'model.local_window': 64,
                   'model.layer_norm_eps': 1e-5, 'model.untied_generator_embeddings': True,
                   'model.dropout_rate': 0.0, 'model.attention_dropout_rate': 0.0,
                   'microbatches': 1}), topology.parse('v5e-8'), lines.append)
  assert lines[-1] == 'v5e-8: every program compiles and fits'
  hlo = report['train_hlo']
  # the kernels (forward, dkv, dq) of every layer: 4 of the discriminator, 4 of the generator (as
  # deep, narrower)
  assert report['attention'] == 'pallas'
  assert hlo.count('custom_call_target="tpu_custom_call"') == 3 * 8
  assert report['estimate']['step_s'] > 0


@pytest.mark.fast
def test_the_ceilings_matmuls_are_the_ones_mfu_counts():
  """The matmuls the ceiling compiles alone do the FLOPs that MFU's model FLOPs count."""
  for preset in ('small', 'base', 'large'):
    c = load_config(f'{ROOT}/configs/{preset}.py')
    cfg = model_lib.ModelConfig.from_config(c.model, platform='tpu')
    n = c.objective.max_predictions
    matmuls, attention = ceiling.forward_matmuls(cfg, 512, 3, n)
    counted = sum(mm.flops * mm.count for mm in matmuls) + attention
    assert counted * 3 == pytest.approx(step_flops_lib.step_matmul_flops(cfg, 512, 3, n), rel=1e-12)


@needs_libtpu
def test_the_matmuls_alone_bound_the_steps_estimate(v5e_report):
  """Each matmul of the step compiled alone for a v5e chip: their sum is under the whole step's
  estimate, above the FLOPs at peak, so its MFU lies between the step's and 100%."""
  report, _ = v5e_report
  c = base_like()
  cfg = model_lib.ModelConfig.from_config(c.model, platform='tpu', writes_for_backward=False)
  r = ceiling.ceiling(cfg, c.data.max_seq_length, c.data.batch_size,
                      c.objective.max_predictions, report['microbatches'], topology.parse('v5e-8'))
  assert r['rows'] == 32 // 8 // 2
  assert r['ideal_seconds'] < r['seconds'] < report['estimate']['step_s']
  assert report['estimate']['mfu'] < r['mfu'] < 1
  assert all(seconds > 0 for _, seconds in r['lines'])
  assert sum(seconds for _, seconds in r['lines']) + r['attention_seconds'] == pytest.approx(
      r['seconds'])


@needs_libtpu
def test_v4_8_compiles_the_pretraining_and_a_finetuning_step(pretrained):
  """The same on v4's megacore chips (4 devices of two cores), data parallel, and the fine-tuning
  of a classifier on the test model's pre-training, with a new head and prompted."""
  from electra_jax.finetune import config as finetune_config
  from electra_jax.finetune import compiling as finetune_compiling
  lines = []
  report = compiling.compile_for_topology(base_like(fsdp=False, microbatches=1),
                                         topology.parse('v4-8'), lines.append)
  assert report['attention'] == 'pallas' and 'electra_flash_dkv' in report['train_hlo']
  assert 'all-gather' not in report['train_hlo']  # data parallel: the state is replicated
  assert report['memory']['train'].state >= report['parameters'] * 4 * 3
  cfg = finetune_config.default_config()
  cfg.update(init=pretrained, batch_size=16, eval_batch_size=16, max_seq_length=32)
  cfg.task.name = 'builtin'
  tuned = finetune_compiling.compile_for_topology(cfg, topology.parse('v4-8'), lines.append)
  assert tuned['kind'] == 'classification'
  assert 'tpu_custom_call' in tuned['train step']['hlo']
  assert tuned['estimate']['step_s'] > 0
  cfg.task.kind = 'prompted'  # the detection head at each class's word: a sequence per class
  prompted = finetune_compiling.compile_for_topology(cfg, topology.parse('v4-8'), lines.append)
  assert prompted['kind'] == 'prompted' and prompted['estimate']['step_s'] > 0


@needs_libtpu
def test_a_step_too_large_for_the_chip_is_refused_naming_the_fix():
  """At 12,288 rows per chip the step needs well over a v5e's 16 GiB: the TPU compiler refuses
  it, and the run says so in one sentence naming the fix (microbatches=0 picks the parts: below,
  and Large at batch 2048 in benchmarks/compile_table.py)."""
  config = base_like(**{'data.batch_size': 8 * 12288, 'data.eval_batch_size': 64,
                        'microbatches': 1, 'fsdp': False})
  lines = []
  with pytest.raises(UserError, match=r'needs (\d+\.\d) GiB per device of 15\.\d .*'
                                      'microbatches=0 \\(auto\\)') as refused:
    compiling.compile_for_topology(config, topology.parse('v5e-8'), lines.append)
  needed = float(re.search(r'needs (\d+\.\d) GiB', str(refused.value)).group(1))
  assert needed > 20  # 26.4 GiB at d4725df
  assert any(line.startswith('train step: does not fit') for line in lines)


@needs_libtpu
def test_a_chip_added_to_the_table_is_a_slice_a_peak_and_an_estimate(monkeypatch):
  """A chip is one line of platform/chips.py: here a 'TPU v5x', a v5e with twice its peak, memory
  and memory bandwidth, on v5e's compile-only devices. Its slices parse, MFU takes its peak, and the
  step compiled for it is estimated with its datasheet."""
  v5e = chips.of_slice_name('v5e')
  v5x = dataclasses.replace(v5e, name='TPU v5x', device_kinds=('TPU v5x',),
                            peak_flops=2 * v5e.peak_flops, hbm_bytes=2 * v5e.hbm_bytes,
                            hbm_bytes_per_s=2 * v5e.hbm_bytes_per_s, slice_names=('v5x',))
  monkeypatch.setattr(chips, 'CHIPS', chips.CHIPS + (v5x,))
  slice_ = topology.parse('v5x-8')
  assert (slice_.chip, slice_.chips, slice_.topology, slice_.hbm_bytes) == (
      v5x, 8, 'v5e:2x4', 32 * topology.GiB)
  assert peak.peak_flops(type('D', (), {'device_kind': 'TPU v5x'})()) == 2 * v5e.peak_flops
  with pytest.raises(ValueError, match='v5x-8'):
    topology.parse('v9-8')
  lines = []
  config = test_config(**{'data.batch_size': 64, 'microbatches': 1})
  report = compiling.compile_for_topology(config, slice_, lines.append)
  assert any('x 394 TFLOP/s TPU v5x bf16 peak' in line for line in lines), lines
  on = {chip.name: hlo_cost.estimate(report['train_hlo'], chip, 8).seconds for chip in (v5e, v5x)}
  assert report['estimate']['step_s'] == pytest.approx(on['TPU v5x'])
  assert on['TPU v5x'] < on['TPU v5e']  # (the test model's step is bound by memory)


@pytest.mark.fast
def test_the_launch_script_refuses_an_unknown_slice_in_one_sentence(tmp_path):
  out = subprocess.run([sys.executable, f'{ROOT}/launch/train.py',
                        f'--config={ROOT}/configs/tiny.py',
                        f'--workdir={tmp_path}/w', '--topology=v5e-7'],
                       capture_output=True, text=True, env=CHILD_ENV, timeout=300)
  assert out.returncode == 2
  assert out.stderr.strip().splitlines()[-1].startswith("error: v5e-7 is not a v5e slice")
  assert not (tmp_path / 'w').exists()


# ------------------------------------------------------------------------------------------------
# Picking microbatches, the dtype, and the attention kernel's safety
# ------------------------------------------------------------------------------------------------

class _Compiled:
  """A compiled step whose temporaries shrink with its microbatches as a real one's do; with
  `refuse`, the compiler refuses the parts that do not fit its `refuse` bytes (XLA's TPU compiler
  checks at compile time), in its own words."""

  def __init__(self, m, refuse=None):
    self.m = m
    if refuse and self.total() > refuse:
      raise RuntimeError(f'RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required '
                         f'for HLO temporaries ({self.total() / 1000:.2f}K) exceeds available HBM '
                         f'({refuse / 1000:.2f}K).')

  def total(self):
    return 400 + 50 + 2 * 100 + 4000 // self.m

  def memory_analysis(self):
    temps = 2 * 100 + 4000 // self.m  # gradients and their sum, then activations
    return type('Stats', (), dict(argument_size_in_bytes=400, temp_size_in_bytes=temps,
                                  generated_code_size_in_bytes=50, output_size_in_bytes=0,
                                  alias_size_in_bytes=0))()


@pytest.mark.fast
def test_fit_microbatches_takes_the_fewest_parts_that_fit():
  state = step_lib.TrainState(jnp.zeros(()), {'w': jax.ShapeDtypeStruct((25,), jnp.float32)},
                              None, jnp.zeros(()), jnp.zeros(()))
  compiled = []
  compile_step = lambda m: compiled.append(m) or _Compiled(m)
  m, _, used = aot.fit_microbatches(compile_step, 64, 8, 2000, state, log=lambda *_: None)
  # 400 arguments + 50 code + 200 + 4000 / m <= 0.95 * 2000 -> m >= 3.0, and m divides 64 / 8
  assert m == 4 and used.total <= 1900
  assert compiled == [1, 4]  # predicted from the first compile, confirmed by the second
  assert aot.fit_microbatches(compile_step, 64, 8, None, state, log=print)[0] == 1  # no limit
  with pytest.raises(aot.DoesNotFit, match='fsdp'):
    aot.fit_microbatches(compile_step, 64, 8, 600, state, log=lambda *_: None)
  # a part the compiler refuses counts as its stated need: 4,650 bytes at m=1 -> m=4
  compiled.clear()
  refusing = lambda m: compiled.append(m) or _Compiled(m, refuse=2000)
  m, program, _ = aot.fit_microbatches(refusing, 64, 8, 2000, state, log=lambda *_: None)
  assert (m, compiled, program.m) == (4, [1, 4], 4)
  assert aot.out_of_memory(RuntimeError('RESOURCE_EXHAUSTED: ... (17.04G) exceeds available HBM '
                                        '(15.75G).')) == (17.04 * 2 ** 30, 15.75 * 2 ** 30)
  assert aot.out_of_memory(RuntimeError('INVALID_ARGUMENT: bad shape')) is None
  assert aot.out_of_memory(RuntimeError(
      'RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space '
      'hbm. Used 20.93G of 15.48G hbm. Exceeded hbm capacity by 5.45G.')) == (
          20.93 * 2 ** 30, 15.48 * 2 ** 30)
  # a kernel's scoped VMEM (its operands' layouts hold "(2,1)"): not the device's memory
  assert aot.out_of_memory(RuntimeError(
      'RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom:\nRan out of memory in memory space '
      'vmem while allocating on stack for %electra_flash_dkv.6 = (bf16[1,8192,768]{2,1,0:T(8,128)'
      '(2,1)S(1)}) custom-call(...). Scoped allocation with size 44.25M and limit 16.00M exceeded '
      'scoped vmem limit by 28.25M.')) is None


@pytest.mark.fast
def test_dtype_auto_is_bfloat16_on_accelerators_and_float32_on_cpus():
  model = test_config().model
  assert model.dtype == 'auto'
  assert model_lib.ModelConfig.from_config(model, 'tpu').dtype == 'bfloat16'
  assert model_lib.ModelConfig.from_config(model, 'gpu').dtype == 'bfloat16'
  assert model_lib.ModelConfig.from_config(model, 'cpu').dtype == 'float32'
  assert model_lib.ModelConfig.from_config(model).dtype == 'float32'  # this CPU
  model.dtype = 'float32'
  assert model_lib.ModelConfig.from_config(model, 'tpu').dtype == 'float32'  # as asked


@pytest.mark.fast
@needs_libtpu
def test_fsdp_auto_splits_the_state_on_tpu_slices_of_several_chips():
  """config.fsdp=None (the default): FSDP on a TPU slice of several chips (each updates its share
  of the state), replicated on one chip and on CPUs; True or False as asked."""
  from electra_jax.data.tokenizer import SPECIAL
  config = test_config()
  assert config.fsdp is None
  setup = pretrain_setup.build_setup(parse(config, 'tpu'), SPECIAL)
  chips = topology.parse('v5e-8').devices()
  assert step_lib.uses_fsdp(setup, partitioning.make_mesh(chips))
  assert not step_lib.uses_fsdp(setup, partitioning.make_mesh(chips[:1]))
  assert not step_lib.uses_fsdp(setup, partitioning.make_mesh())  # this CPU's 8 devices
  for asked in (True, False):
    config.fsdp = asked
    setup = pretrain_setup.build_setup(parse(config, 'tpu'), SPECIAL)
    assert step_lib.uses_fsdp(setup, partitioning.make_mesh()) is asked
    assert step_lib.uses_fsdp(setup, partitioning.make_mesh(chips)) is asked
  c, _ = config_files.config_from(f'{ROOT}/configs/base.py', ['fsdp=True'])
  assert c.fsdp is True  # None (auto) takes a bool as its type says
  with pytest.raises(UserError, match='fsdp takes true or false'):
    config_files.config_from(f'{ROOT}/configs/base.py', ['fsdp=maybe'])


@pytest.mark.fast
def test_flash_refuses_shapes_its_blocks_do_not_divide():
  """At 48 tokens with 32-row blocks the grid would cover rows 0-31 only."""
  options = dataclasses.replace(attention.default_options('cpu'), block_q=32, block_k=32,
                                block_k_dkv=32, block_q_dkv=32, block_q_dq=32, block_k_dq=32)
  q = jnp.zeros((1, 48, 1, 16))
  with pytest.raises(ValueError, match='do not divide the sequence length 48'):
    flash.flash(q, q, q, jnp.ones((1, 48)), options=options)
  cfg = model_lib.ModelConfig(hidden_size=128, num_heads=2, attention='pallas', platform='tpu')
  with pytest.raises(ValueError, match='model.attention=auto or explicit'):
    attention.resolve(cfg, 200)


@pytest.mark.fast
def test_the_kernel_check_runs_at_the_runs_shape_and_every_host_takes_one_verdict(monkeypatch):
  calls = []
  monkeypatch.setattr(attention, 'kernel_check',
                      lambda *args: calls.append(args) or (True, ''))
  cfg = model_lib.ModelConfig(hidden_size=128, num_heads=2, dtype='bfloat16', platform='tpu',
                              attention_dropout_rate=0.1, generator='two_tower')
  resolved, note = attention.resolve(cfg, 512)
  assert resolved.attention == 'pallas' and 'start-up check' in note
  assert calls == [('tpu', 512, 'bfloat16', 0.1, ('', 'ltr', 'rtl'), 64, (0,))]
  resolved, note = attention.resolve(cfg, 512, agree=lambda ok: False)  # another host
  assert resolved.attention == 'fused' and 'failed on another process' in note
  unchecked, note = attention.resolve(cfg, 512, checked=False)
  assert unchecked.attention == 'pallas' and len(calls) == 2 and 'on the TPU itself' in note


def test_a_step_that_does_not_compile_with_the_kernel_falls_back(monkeypatch, records_dir):
  """The compiler rejecting the kernel inside the real step ends in the explicit path, warned."""
  config = test_config(**{'data.records': records_dir, 'microbatches': 1})
  mesh = partitioning.make_mesh()
  from electra_jax.data.tokenizer import SPECIAL
  make_setup = lambda cfg: pretrain_setup.build_setup(parse(config, 'cpu'), SPECIAL, cfg)
  pallas = dataclasses.replace(model_lib.ModelConfig.from_config(config.model, 'cpu'),
                               attention='pallas')

  def broken(*args, **kwargs):
    raise RuntimeError('Mosaic failed to compile the kernel')
  monkeypatch.setattr(flash, 'flash_sharded', broken)
  lines = []
  programs = compiling.compile_run(config, make_setup, pallas, mesh, None, lines.append)
  setup, train = programs.setup, programs.train
  assert setup.model_cfg.attention == 'explicit'
  state = programs.init()  # the state of the setup that compiled
  assert lines[0].startswith('warning: the step did not compile with the Pallas flash kernel '
                             '(Mosaic failed to compile the kernel)')
  batch = {k: np.ones((config.data.batch_size, 32), np.int32) for k in ('input_ids', 'input_mask',
                                                                       'segment_ids')}
  batch = jax.device_put(batch, partitioning.batch_sharding(mesh))
  _, metrics = train(state, batch)
  assert np.isfinite(float(metrics['loss'][0]))


@pytest.mark.fast
def test_the_largest_batch_counts_rows_in_tiles_and_a_few_long_rows_one_by_one():
  """Rows per chip grow in proportion to the memory left: a multiple of 8 per microbatch where one
  fits, else of the microbatches (8,192-token rows: 2 a chip, not 0)."""
  gib = 2**30
  used = aot.Memory(state=4 * gib, batch=0, temporaries=4 * gib, code=0, outputs=0)  # 2 rows
  assert aot.largest_batch(used, 2, 16 * gib) == 5  # (0.95 * 16 - 4) / 2 = 5.6 rows
  assert aot.largest_batch(used, 2, 16 * gib, microbatches=2) == 4
  assert aot.largest_batch(used, 2, 64 * gib) == 24  # 28.4 rows: three tiles of 8
  assert aot.largest_batch(used, 2, 4 * gib) == 0  # the state alone fills the chip


@needs_libtpu
def test_the_modern_backbone_past_the_flash_kernels_length_compiles_with_splash_for_v5e8():
  """At 2,560 tokens (past flash.TPU_LONGEST) without dropout the modern step takes JAX's splash
  kernel (streaming key blocks; a local layer's blocks outside its window skipped) in every layer,
  and compiles and fits for eight v5e chips."""
  lines = []
  report = compiling.compile_for_topology(
      base_like(**{'model.backbone': 'modern', 'model.num_layers': 2, 'model.local_window': 128,
                   'model.layer_norm_eps': 1e-5, 'model.untied_generator_embeddings': True,
                   'model.dropout_rate': 0.0, 'model.attention_dropout_rate': 0.0,
                   'model.max_position_embeddings': 2560, 'data.max_seq_length': 2560,
                   'data.batch_size': 8, 'microbatches': 1}), topology.parse('v5e-8'),
      lines.append)
  assert lines[-1] == 'v5e-8: every program compiles and fits', lines[-3:]
  assert report['attention'] == 'splash'
  # forward, dK/dV and dQ kernels of 2 discriminator and 2 generator layers
  assert report['train_hlo'].count('custom_call_target="tpu_custom_call"') == 3 * 4
