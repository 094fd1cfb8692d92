"""A pre-training's programs compiled ahead of its first batch: the model's view for the devices,
the train and evaluation steps (microbatches chosen to fit, the Pallas kernel's fallback), and the
whole run compiled for a Cloud TPU slice on this machine (`compile_for_topology`: no TPU, no data).
"""

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections

from electra_jax import UserError, user_errors
from electra_jax.data import records as records_lib
from electra_jax.data.tokenizer import SpecialIds
from electra_jax.hardware import compile_cache
from electra_jax.model import attention as attention_lib
from electra_jax.pretraining import preflight
from electra_jax.pretraining import setup as pretrain_setup
from electra_jax.pretraining import step_flops as step_flops_lib
from electra_jax.train import aot
from electra_jax.train import logs as logs_lib
from electra_jax.train import model_view
from electra_jax.train import partitioning
from electra_jax.train import step as step_lib


def model_for_run(cfg, checked: bool = True, log=print):
  """The model's view of a pre-training's typed config, its attention path decided."""
  return model_view.with_attention(cfg.model, cfg.data.max_seq_length, checked, log)


def _batch_shapes(sharding, rows: int, length: int) -> dict:
  return {k: jax.ShapeDtypeStruct((rows, length), jnp.int32, sharding=sharding)
          for k in records_lib.FEATURES}


@dataclasses.dataclass
class Programs:
  """A run's setup and its programs, all of one setup: the state is initialized by `init` and
  trained by `train` (the step compiled ahead of time), held-out batches scored by `evaluate`."""
  setup: pretrain_setup.Setup  # with the microbatches and the attention path the step compiled with
  init: Any  # () -> TrainState (jitted; compiled at its first call, or lowered for a slice)
  train: Any  # compiled (state, batch) -> (state, metric sums)
  evaluate: Any  # compiled (params, batch, index) -> metric sums
  memory: Any  # the train step's memory per device (aot.Memory)


def compile_run(cfg, make_setup, model_cfg, mesh, limit, log) -> Programs:
  """The run's programs, from one setup: `make_setup(model_cfg)`, its train step compiled for the
  global batch (`microbatches=0`: the fewest parts whose step fits `limit` bytes per device), its
  evaluation step, and the initialization of that same setup. A step that the compiler rejects
  with an attention path is compiled again with the path's fallback (the kernel's: the explicit
  path), with a warning, instead of ending the run: the state is then initialized by that setup
  too. Nothing is initialized here (the state's shapes are abstract)."""
  d = cfg.data
  sharding = partitioning.batch_sharding(mesh)

  def build(model_cfg):
    setup = make_setup(model_cfg)
    init, _, evaluate = step_lib.compile_steps(setup, mesh)
    state = init.eval_shape()
    compile_train = lambda m: step_lib.compile_steps(
        dataclasses.replace(setup, microbatches=m), mesh)[1].lower(
            state, _batch_shapes(sharding, d.batch_size, d.max_seq_length)).compile()
    if cfg.microbatches:
      try:
        train = compile_train(cfg.microbatches)
      except Exception as e:
        need = aot.out_of_memory(e)
        if need is None:
          raise
        raise UserError(f'the train step needs {need[0] / 2 ** 30:.1f} GiB per device of '
                        f'{need[1] / 2 ** 30:.1f} (the compiler\'s count); set '
                        '--config.microbatches=0 (auto), --config.fsdp=True, '
                        '--config.model.remat=True or a smaller --config.data.batch_size') from None
      used = aot.memory(train, state)
      setup = dataclasses.replace(setup, microbatches=cfg.microbatches)
    else:
      with user_errors(aot.DoesNotFit):
        m, train, used = aot.fit_microbatches(compile_train, d.batch_size, mesh.devices.size,
                                              limit, state, log)
      setup = dataclasses.replace(setup, microbatches=m)
      if m > 1:
        log(f'microbatches=auto: {m} parts of {d.batch_size // m} rows per step '
            f'({used.total / 2 ** 30:.1f} GiB per device)')
    evaluate = evaluate.lower(state.params, _batch_shapes(sharding, d.eval_batch_size,
                                                          d.max_seq_length),
                              jax.ShapeDtypeStruct((), jnp.int32)).compile()
    return Programs(setup, init, train, evaluate, used)  # (init: the same for any microbatches)

  try:
    return build(model_cfg)
  except (UserError, KeyboardInterrupt):
    raise
  except Exception as e:
    path = attention_lib.PATHS[model_cfg.attention]
    if not path.fallback or cfg.model.attention == path.name or aot.out_of_memory(e):
      raise  # (a path the config forced, or none to fall back to)
    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
    fallback = attention_lib.PATHS[path.fallback]
    log(f'warning: the step did not compile with the {path.title} ({first}); compiling it with '
        f'the {fallback.title}')
    return build(dataclasses.replace(model_cfg, attention=fallback.name))


def compile_logged(cfg, make_setup, model_cfg, mesh, log) -> Programs:
  """`compile_run` ahead of the first batch, saying so: the minute of compilation (or a few
  seconds from JAX's compilation cache) is not silence, and not counted in the first interval's
  tokens/s."""
  log(f'{logs_lib.stamp()}compiling the train and evaluation steps ...')
  t, before = time.perf_counter(), compile_cache.counts()
  programs = compile_run(cfg, make_setup, model_cfg, mesh,
                         aot.device_memory_limit(mesh.devices.flat[0]), log)
  log(f'{logs_lib.stamp()}compiled in {time.perf_counter() - t:.1f} s{compile_cache.note(before)}')
  return programs


SPECIAL_IDS = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)  # as prepare_data's vocabularies


def compile_for_topology(config: ml_collections.ConfigDict, slice_, log=print) -> dict:
  """Compiles the run of `config` for the TPU slice `slice_` (topology.parse) on this machine: no
  TPU and no data. Logs each program's memory per chip and the estimated step; returns the report
  (memory, microbatches, attention path, estimate, the train step's HLO) when every program
  compiles and fits, else raises UserError naming the fix."""
  with compile_cache.off():
    return _compile_for_topology(config, slice_, log)


def _compile_for_topology(config, slice_, log) -> dict:
  devices = slice_.devices()
  mesh = partitioning.make_mesh(devices)
  cfg, _ = preflight.configure(config, mesh, log, data=False)
  d = cfg.data
  log(f'{slice_.describe()} | compiling here for the slice: no TPU used, no data read')
  model_cfg = model_for_run(cfg, checked=False, log=log)
  make_setup = lambda model_cfg: pretrain_setup.build_setup(cfg, SPECIAL_IDS, model_cfg)
  capacity = slice_.hbm_bytes
  t = time.perf_counter()
  try:  # the programs a run on the slice compiles (compile_run), the state's init among them
    programs = compile_run(cfg, make_setup, model_cfg, mesh, capacity, log)
  except UserError as e:
    log(f'train step: does not fit ({time.perf_counter() - t:.0f} s): {e}')
    raise
  except Exception as e:
    first = ' '.join(str(e).split())[:400]
    log(f'train step: does not compile ({time.perf_counter() - t:.0f} s): {first}')
    raise UserError(f'the train step does not compile for {slice_.label}: {first}') from None
  compile_s = time.perf_counter() - t
  setup, train, evaluate, used = (programs.setup, programs.train, programs.evaluate,
                                  programs.memory)
  state = programs.init.eval_shape()
  n_params = sum(x.size for x in jax.tree.leaves(state.params))
  rows = d.batch_size // mesh.devices.size
  split = ' split by FSDP' if step_lib.uses_fsdp(setup, mesh) else ''
  log(f'{n_params:,} parameters | {setup.model_cfg.dtype} activations, '
      f'{setup.model_cfg.param_dtype} parameters and Adam moments{split} | batch {d.batch_size} x '
      f'{d.max_seq_length} ({rows} rows per chip)')
  problems: list[str] = []
  init, seconds, error = aot.timed_compile(programs.init.lower)
  aot.report('init', init, seconds, error, None, capacity, log, problems, 'set --config.fsdp=True')
  m = setup.microbatches
  aot.report(f'train step ({m} microbatch{"es" if m > 1 else ""} of {d.batch_size // m} rows, '
             f'attention {setup.model_cfg.attention})', train, compile_s, '', state, capacity,
             log, problems, 'set --config.microbatches=0 (auto), --config.fsdp=True or '
             '--config.model.remat=True, or a smaller batch')
  best = aot.largest_batch(used, rows, capacity, m)
  log(f'  largest global batch that fits with {m} microbatch{"es" if m > 1 else ""}: '
      f'{best * mesh.devices.size:,} ({best} rows per chip; an estimate: the batch and '
      'temporaries taken to grow in proportion to the rows)')
  step_flops = step_flops_lib.step_matmul_flops(setup.model_cfg, d.max_seq_length, d.batch_size,
                                           cfg.objective.max_predictions,
                                           cfg.objective.name, setup.objective_cfg)
  lines, numbers = aot.estimate_lines(train, slice_.chip, slice_.chips, slice_.num_slices,
                                      step_flops, d.batch_size * d.max_seq_length,
                                      slice_.chips * slice_.num_slices)
  for line in lines:
    log(line)
  used_eval = aot.report('eval step', evaluate, None, '', state.params, capacity, log, problems,
                         'lower --config.data.eval_batch_size')
  if problems:
    raise UserError('; '.join(problems))
  log(f'{slice_.label}: every program compiles and fits')
  return {'slice': slice_.name, 'parameters': n_params, 'microbatches': m,
          'attention': setup.model_cfg.attention, 'dtype': setup.model_cfg.dtype,
          'memory': {'init': aot.memory(init), 'train': used, 'eval': used_eval},
          'largest_batch': best * mesh.devices.size, 'estimate': numbers,
          'train_hlo': train.as_text()}
