"""Compiling a fine-tuning for a Cloud TPU slice on this machine (launch/finetune.py --topology):
the model's sizes from --init's config (no weights read), the task's shapes from its definition.
"""

import dataclasses


from electra_jax import UserError, user_errors
from electra_jax.finetune import batches
from electra_jax.finetune import config as config_lib
from electra_jax.finetune import pretrained as pretrained_lib
from electra_jax.finetune import run
from electra_jax.finetune.inputs import packing
from electra_jax.finetune.kinds import interface as kinds
from electra_jax.finetune.kinds import registry
from electra_jax.hardware import compile_cache
from electra_jax.model import flops as flops_lib
from electra_jax.train import aot
from electra_jax.train import model_view
from electra_jax.train import partitioning
from electra_jax.train import step as step_lib


def compile_for_topology(config, slice_, log=print) -> dict:
  """Compiles the fine-tuning of `config` (a config file's, typed here: config_lib.parse) for
  the TPU slice `slice_` (topology.parse) on this machine: the model's sizes come from --init's
  config (no weights are read), a named task's shape from its definition (your own data: its
  train file, for the labels). Logs each program's memory per chip and the estimated step;
  returns 0 when all compile and fit, else raises UserError."""
  with compile_cache.off():
    mesh = partitioning.make_mesh(slice_.devices())
    return _compile_for_topology(config_lib.parse(config, mesh), mesh, slice_, log)


def _compile_for_topology(cfg: config_lib.FinetuningConfig, mesh, slice_, log) -> dict:
  pretrained = pretrained_lib.load(cfg.init, True, log)
  with user_errors(ValueError, FileNotFoundError):
    task = registry.named(cfg.task)
    if task is None:
      task, _ = registry.load(cfg.task, pretrained.config, log)
  log(f'{slice_.describe()} | compiling here for the slice: no TPU used, no data read')
  dtype = (pretrained.config.as_json['model']['dtype'] if pretrained.config is not None else
           'auto')  # (as written: the slice's run decides 'auto')
  model_cfg = model_view.model_for_devices(  # as the run on the slice decides it
      {**dataclasses.asdict(pretrained.model_cfg), 'dtype': dtype}, 'tpu', slice_.device_kind,
      cfg.max_seq_length, checked=False, log=log)
  kind = registry.get(task.kind)
  resolved = config_lib.resolve(cfg, task, model_cfg, 1000,  # (only the schedule needs steps)
                                config_lib.check_for_model(cfg, model_cfg))
  setup = run.make_setup(cfg, resolved, dataclasses.replace(pretrained, model_cfg=model_cfg),
                         task, kind, cfg.seed)
  init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
  state = init_fn.eval_shape()
  sharding = partitioning.batch_sharding(mesh)
  problems: list[str] = []
  capacity, report = slice_.hbm_bytes, {'slice': slice_.name, 'kind': task.kind}
  log(f'{task.name}: {task.kind} | batch {cfg.batch_size} x {cfg.max_seq_length}, evaluation '
      f'batch {cfg.eval_batch_size} | {model_cfg.dtype} activations')
  # Without the data, the batches' shapes are those of a row per sequence (packing's rows need
  # the texts' lengths): the estimate is packing's upper bound.
  k = kind.sequences(task)
  shapes = lambda rows, examples: kind.batch_shapes(task, packing.Layout(
      rows=rows, slots=1, examples=examples, choices=k, length=cfg.max_seq_length), sharding)
  predict_fn = batches.predict_fn(setup.model, mesh, rows=kind.packs)
  inputs = kinds.INPUTS + (('positions', 'starts') if kind.packs else ())
  predict_inputs = lambda: {n: v for n, v in shapes(cfg.eval_batch_size * k, cfg.eval_batch_size
                                                    ).items() if n in inputs}
  programs = (('init', init_fn.lower, None),
              ('train step', lambda: train_fn.lower(state, shapes(cfg.batch_size * k,
                                                                  cfg.batch_size)), state),
              ('prediction', lambda: predict_fn.lower(state.params, predict_inputs()),
               state.params))
  for name, lower, args in programs:
    compiled, seconds, error = aot.timed_compile(lower)
    used = aot.report(name, compiled, seconds, error, args, capacity, log, problems,
                      'lower the batch size')
    if used is None:
      continue
    report[name] = {'memory': used, 'hlo': compiled.as_text()}
    if name == 'train step':
      model_flops = 3 * cfg.batch_size * flops_lib.encoder_forward_flops(model_cfg,
                                                                         cfg.max_seq_length)
      lines, report['estimate'] = aot.estimate_lines(
          compiled, slice_.chip, slice_.chips, slice_.num_slices, model_flops,
          cfg.batch_size * cfg.max_seq_length, slice_.chips * slice_.num_slices)
      for line in lines:
        log(line)
  if problems:
    raise UserError('; '.join(problems))
  log(f'{slice_.label}: every program compiles and fits')
  return report
