"""Pre-training: a workdir, its data and its first weights, then the loop.

    config -> preflight.configure: fitted to init_from's weights and to the objective, typed and
       every field checked once (PretrainingConfig: all that the rest reads)
    -> the workdir claimed (one run at a time), the run it holds compared
    -> records: read, or built from the corpus on first use
    -> state: restored from the latest checkpoint, or init_from's weights, or fresh
    -> compiling: the steps over the mesh (microbatches fitted) -> loop.run -> summary.json
"""

import dataclasses
import json
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from electra_jax import UserError, user_errors
from electra_jax import fields as fields_lib
from electra_jax.config import pretraining as config_lib
from electra_jax.data import input_pipeline
from electra_jax.data import prepare as prepare_lib
from electra_jax.data import records as records_lib
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.data.tokenizer import SpecialIds
from electra_jax.hardware import peak as peak_lib
from electra_jax.train import metrics as metrics_lib
from electra_jax.objectives import registry as objectives
from electra_jax.pretraining import compiling
from electra_jax.pretraining import preflight
from electra_jax.pretraining import setup as pretrain_setup
from electra_jax.pretraining import step_flops as step_flops_lib
from electra_jax.storage import fs
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import distributed
from electra_jax.train import logs as logs_lib
from electra_jax.train import loop as loop_lib
from electra_jax.train import optim
from electra_jax.train import partitioning
from electra_jax.train import step as step_lib
from electra_jax.train import workdir as workdir_lib


# ================================================================================================
# Data
# ================================================================================================

def prepare_data(cfg: config_lib.PretrainingConfig, workdir: str,
                 log=print) -> tuple[str, dict]:
  """The records folder of this run, built under <workdir>/data on first use (or finished)."""
  d = cfg.data
  records_dir = d.records or fs.join(workdir, 'data')
  with user_errors(ValueError, FileNotFoundError, FileExistsError):
    if d.vocab:  # a given vocabulary must fit the model before anything is built with it
      size = tokenizer_lib.load_tokenizer(d.vocab, lower_case=d.lower_case).vocab_size
      if size != cfg.model.vocab_size:
        raise ValueError(f'the vocabulary {d.vocab} has {size} entries but model.vocab_size is '
                         f'{cfg.model.vocab_size}; set --config.model.vocab_size={size}')
    built = fs.join(records_dir, records_lib.METADATA)
    if not d.records and not fs.exists(built) and not distributed.is_main():
      log(f'waiting for process 0 to build the records in {records_dir}')
      while not fs.exists(built):
        time.sleep(1)
    if not d.records and not fs.exists(built):
      prepare_lib.records_folder(records_lib.Settings.of_config(cfg), records_dir, log=log,
                                 size_flag='--config.model.vocab_size')
    meta = records_lib.read_metadata(records_dir)
    records_lib.verify(records_dir, meta)
  if cfg.init_from and d.records and d.vocab and (
      tokenizer_lib.file_fingerprint(d.vocab) != meta['vocab_fingerprint']):
    raise UserError(  # (init_from's vocabulary and size are the run's: no model field can help)
        f'the records in {records_dir} were tokenized with another vocabulary '
        f'({meta["vocab_size"]} entries) than --config.init_from={cfg.init_from} was trained '
        f'with ({d.vocab}, {cfg.model.vocab_size} entries); build records with its vocabulary '
        f'(python launch/prepare_data.py --vocab={d.vocab} ...) and give those, or drop '
        '--config.data.records to build them in the workdir')
  if meta['vocab_size'] != cfg.model.vocab_size:
    raise UserError(f'the records in {records_dir} use a vocabulary of {meta["vocab_size"]} '
                    f'entries but model.vocab_size is {cfg.model.vocab_size}; set '
                    f'--config.model.vocab_size={meta["vocab_size"]}')
  if meta['max_seq_length'] != d.max_seq_length:
    raise UserError(f'the records in {records_dir} hold {meta["max_seq_length"]}-token examples '
                    f'but data.max_seq_length is {d.max_seq_length}; set '
                    f'--config.data.max_seq_length={meta["max_seq_length"]} or build new records')
  if meta.get('pack_documents', False) != d.pack_documents:
    raise UserError(f'the records in {records_dir} hold '
                    + ('rows of packed documents' if d.pack_documents is False else
                       "the original's [CLS] A [SEP] B [SEP] examples")
                    + f' but data.pack_documents is {d.pack_documents}; set '
                    f'--config.data.pack_documents={not d.pack_documents} or build new records')
  if d.vocab:
    fingerprint = tokenizer_lib.file_fingerprint(d.vocab)
    if fingerprint != meta['vocab_fingerprint']:
      raise UserError(f'the records in {records_dir} were tokenized with another vocabulary than '
                      f'{d.vocab}; rebuild the records with it or drop data.vocab')
  return records_dir, meta


# ================================================================================================
# State and steps of the run
# ================================================================================================

def start_from(setup: step_lib.Setup, state: step_lib.TrainState, source) -> step_lib.TrainState:
  """`state` with the source's parameters (what it lacks stays as initialized) and a fresh
  optimizer state for them, laid out as `state`'s."""
  fresh = jax.device_get(state.params)
  with user_errors(ValueError):
    params = source.params(setup.model_cfg, fill=fresh)
  layout = lambda tree: jax.tree.map(lambda x: x.sharding, tree)
  params = jax.device_put(jax.tree.map(lambda p, f: np.asarray(p, f.dtype), params, fresh),
                          layout(state.params))
  opt_state = jax.jit(setup.tx.init, out_shardings=layout(state.opt_state))(params)
  return dataclasses.replace(state, params=params, opt_state=opt_state)


def evaluate(evaluate_fn, params, dataset, sharding, num_batches: int,
             records_dir: str | None = None) -> dict:
  total = None
  replicated = partitioning.replicated(sharding.mesh)
  batches = input_pipeline.global_batches(dataset.take(num_batches), sharding, records_dir)
  one_at_a_time = not loop_lib.queue_ahead(sharding.mesh.size)  # as the training steps
  for i, batch in enumerate(batches):
    sums = evaluate_fn(params, batch, jax.device_put(jnp.asarray(i, jnp.int32), replicated))
    if one_at_a_time:
      jax.block_until_ready(sums)
    total = sums if total is None else step_lib.accumulate(total, sums)
  return metrics_lib.summarize(total)


# ================================================================================================
# The run
# ================================================================================================

def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, log=print,
                       probe=None) -> dict:
  """Pre-trains per `config` in `workdir` (resuming if it holds a checkpoint); returns the
  summary. `probe` (apps/zeroshot.py's `probe`, which the commands give): (the typed config,
  vocabulary file, lower_case, log) -> a scorer (model config, params) -> zeroshot_task's zero-shot
  accuracy, run at every held-out evaluation."""
  main = distributed.is_main()  # the one process that logs and writes files
  if not main:
    log = lambda line: None
  mesh = partitioning.make_mesh()
  cfg, source = preflight.configure(config, mesh, log)  # typed once: below, `cfg` alone
  for warning in optim.schedule_warnings(cfg.optimizer, cfg.train_steps,
                                         f'optimizer.warmup_steps={cfg.optimizer.warmup_steps}',
                                         'warm up for fewer steps (the paper: 10,000 of '
                                         "1,000,000), or set optimizer.schedule="
                                         "'warmup_then_decay'"):
    log(f'warning: {warning}')
  if cfg.zeroshot_task and probe is None:
    raise UserError(f'zeroshot_task={cfg.zeroshot_task!r} is scored by the commands '
                    '(launch/train.py, launch/compare.py); from Python, pass '
                    'probe=electra_jax.apps.zeroshot.probe')
  with workdir_lib.claim(workdir, 'pre-training'):  # one run at a time in a workdir
    return _train(cfg, source, workdir, mesh, log, probe)


def _train(cfg: config_lib.PretrainingConfig, source, workdir: str, mesh, log, probe=None) -> dict:
  main = distributed.is_main()
  records_dir, meta, readers, eval_batches, compared = _open_workdir(cfg, workdir, log)
  scorer = None  # the zero-shot probe: its dev texts read and encoded once, before compiling
  if cfg.zeroshot_task:
    vocab = records_lib.workdir_vocab(workdir, cfg)[2]
    with user_errors(ValueError):
      scorer = probe(cfg, vocab, cfg.data.lower_case, log)

  # ---- the programs, of one setup: the attention path decided (its start-up check), the train
  # step compiled (microbatches fitted; the path's fallback if the compiler rejects it) ----
  special = SpecialIds(**meta['special_ids'])
  model_cfg = compiling.model_for_run(cfg, log=log)
  make_setup = lambda model_cfg: pretrain_setup.build_setup(cfg, special, model_cfg)
  probed = preflight.probe_metrics(cfg)
  best_mode = objectives.ranking(cfg.objective.name, cfg.keep_best, probed)
  ckpt = checkpoint_lib.Checkpointer.of_run(workdir, cfg, best_mode)
  latest = ckpt.latest_step()
  if latest is not None:  # a checkpoint of other shapes is refused before the compilation
    with user_errors(ValueError):
      ckpt.check_shapes(latest, step_lib.state_shapes(make_setup(model_cfg)))
  programs = compiling.compile_logged(cfg, make_setup, model_cfg, mesh, log)
  setup, train_fn, eval_fn = programs.setup, programs.train, programs.evaluate

  # ---- the state, initialized by that setup: restored, or init_from's weights, or fresh ----
  start, state, readers, position = _restore(cfg, compared, workdir, ckpt, programs.init(), meta,
                                             readers, log)
  if not start and source is not None:
    state = start_from(setup, state, source)
    log(f'initial weights: {source.describe()}')
  if main:  # once every check has passed; whole or not at all (others read it in check_same_run)
    fs.write_atomic(fs.join(workdir, 'config.json'), json.dumps(cfg.as_json, indent=2))

  # ---- the data ----
  d = cfg.data
  sharding = partitioning.batch_sharding(mesh)
  train_ds = input_pipeline.make_dataset(records_dir, 'train', d.batch_size, seed=cfg.seed,
                                         shuffle_buffer=d.shuffle_buffer, position=position,
                                         readers=readers)
  eval_ds = input_pipeline.make_dataset(records_dir, 'eval', d.eval_batch_size, shuffle=False)
  batches = input_pipeline.global_batches(train_ds, sharding, records_dir)

  # ---- the loop ----
  annotate = _describe_run(cfg, setup, state, mesh, readers, start, log)
  baseline = meta['unigram_xent']
  objective = objectives.get(cfg.objective.name)
  plan = loop_lib.Plan.of(
      cfg, total_steps=cfg.train_steps, keep_best=bool(cfg.keep_best),
      tokens_per_step=d.batch_size * d.max_seq_length, fields=objective.shown + ('learning_rate',),
      eval_fields=objective.shown + tuple(m.name for m in probed),
      eval_note=f' | unigram baseline {baseline:.4f}', eval_record={'unigram_baseline': baseline})
  panels = [(m.name, m.title, m.baseline) for m in objective.metrics if m.title]
  panels[5:5] = [(m.name, m.title, m.baseline) for m in probed]  # among the six drawn
  saved_meta = lambda step: {'step': step, 'readers': readers,  # and what the run is: checked
                             'data_position': step * d.batch_size // readers,  # on resume
                             'vocab_fingerprint': meta['vocab_fingerprint'],
                             'records_fingerprint': records_lib.fingerprint(meta),
                             'records': {k: meta.get(k) for k in records_lib.IDENTITY},
                             'config': cfg.as_json,
                             'keep_best_mode': best_mode,  # (for a fine-tuning's init_step=best)
                             'detection_head': objective.detects}  # (for prompting: trained?)

  def evaluate_now(step, state):
    values = evaluate(eval_fn, state.params, eval_ds, sharding, eval_batches, records_dir)
    if scorer is not None:
      values[preflight.ZEROSHOT.name] = scorer(setup.model_cfg, state.params)
    return values

  # Every process has compiled and restored before the first exchange (see distributed.barrier).
  distributed.barrier('first_step')
  with user_errors(input_pipeline.DamagedRecords, checkpoint_lib.DiskFull):
    result = loop_lib.run(plan, state, train_fn, batches, start, evaluate=evaluate_now, ckpt=ckpt,
                          meta=saved_meta, logs=logs_lib.Logs(workdir, main, panels=panels),
                          log=log, annotate=annotate)
    best = ckpt.best_step()
    ckpt.close()
  return _summarize(cfg, workdir, setup, ckpt, result, best, baseline, eval_batches, log)


def _open_workdir(cfg: config_lib.PretrainingConfig, workdir: str, log):
  """(records folder, its metadata, input readers, held-out batches, the config.json compared
  with the run's), the workdir checked."""
  workdir_lib.check_entries(workdir, folders=('checkpoints', 'tensorboard') + (
      () if cfg.data.records else ('data',)), files=(
          'config.json', 'metrics.jsonl', 'summary.json', 'curves.png'))
  compared = preflight.check_same_run(cfg.as_json, workdir, log)
  latest = max(preflight.checkpoint_steps(workdir), default=0)
  if latest > cfg.train_steps:
    raise UserError(f'the run in {workdir} is at step {latest}, past train_steps='
                    f'{cfg.train_steps}; raise --config.train_steps to go on, or use a new '
                    '--workdir for a shorter run')
  records_dir, meta = prepare_data(cfg, workdir, log)
  with user_errors(ValueError):
    eval_batches = input_pipeline.held_out_batches(meta, cfg.data.eval_batch_size,
                                                   cfg.eval_batches)
    readers = input_pipeline.num_readers(meta, cfg.data.batch_size, cfg.data.readers)
    input_pipeline.process_readers(readers, jax.process_index(), jax.process_count())
  return records_dir, meta, readers, eval_batches, compared


def _restore(cfg: config_lib.PretrainingConfig, compared, workdir: str, ckpt, state, meta: dict,
             readers: int, log):
  """(start step, state, input readers, input position): from the latest readable checkpoint, whose
  config (unless it is the config.json already `compared`), records and readers must be the run's,
  or (0, `state`, `readers`, 0)."""
  with user_errors(ValueError):
    start, state, ckpt_meta = ckpt.restore_latest(state, log, afresh=True)
  if not start:
    return 0, state, readers, 0
  d = cfg.data
  records_dir = d.records or fs.join(workdir, 'data')
  if ckpt_meta.get('vocab_fingerprint', meta['vocab_fingerprint']) != meta['vocab_fingerprint']:
    raise UserError(f'the checkpoint {ckpt.directory}/{start} was trained on records of another '
                    f'vocabulary than {records_dir}; point data.records at the records of the run, '
                    'or use a new --workdir')
  _check_belongs(cfg.as_json, compared, meta, ckpt_meta, f'{ckpt.directory}/{start}',
                 records_dir)
  saved = ckpt_meta.get('readers', 1)  # the batches continue as they were read
  if d.readers and d.readers != saved:
    raise UserError(f'the run in {workdir} reads its data with {saved} input reader(s), not '
                    f'data.readers={d.readers}; leave data.readers at 0 (or {saved}) to resume')
  try:
    input_pipeline.process_readers(saved, jax.process_index(), jax.process_count())
  except ValueError:
    raise UserError(f'the run in {workdir} reads its data with {saved} input readers, which do '
                    f'not divide among {jax.process_count()} processes; resume it on a number '
                    f'of processes dividing {saved}') from None
  position = ckpt_meta.get('data_position', start * d.batch_size // saved)
  log(f'resumed from {ckpt.directory}/{start} (input stream at example {position:,} of each of '
      f'{saved} reader(s))')
  return start, state, saved, position


def _check_belongs(as_json: dict, compared, meta: dict, ckpt_meta: dict, where: str,
                   records_dir: str):
  """Refuses a checkpoint of another run (copied in: another config, or other records of the same
  shapes and vocabulary), naming what differs. The config is compared once: a checkpoint saved
  with the config.json already compared with the run's (`compared`) is not compared again.
  Checkpoints of earlier versions carry less."""
  if 'config' in ckpt_meta and ckpt_meta['config'] != compared:
    diffs = fields_lib.same_run_diffs(config_lib.CONFIG, ckpt_meta['config'], as_json)
    if diffs:
      raise UserError(f'the checkpoint {where} belongs to another run ({"; ".join(diffs)}); move '
                      'it out of the workdir, or resume it with the config it was trained with')
  saved = ckpt_meta.get('records_fingerprint')
  if saved is not None and saved != records_lib.fingerprint(meta):
    theirs = ckpt_meta.get('records', {})
    diffs = [f'{k} {theirs.get(k)!r} -> {meta.get(k)!r}' for k in records_lib.IDENTITY
             if k in theirs and theirs[k] != meta.get(k)]
    raise UserError(f'the checkpoint {where} was trained on other records than {records_dir} ('
                    + ('; '.join(diffs) if diffs else 'the same settings, other contents: a '
                       'corpus changed since') + '); move it out of the workdir, or point '
                    'data.records at the records it was trained on')


def _describe_run(cfg: config_lib.PretrainingConfig, setup, state, mesh, readers: int, start: int,
                  log):
  """Logs the run's size and speed reference; returns the progress lines' MFU annotation."""
  d = cfg.data
  n_params = sum(x.size for x in jax.tree.leaves(state.params))
  step_flops = step_flops_lib.step_matmul_flops(setup.model_cfg, d.max_seq_length, d.batch_size,
                                           setup.objective_cfg.max_predictions,
                                           cfg.objective.name, setup.objective_cfg)
  hosts = (f'{jax.process_count()} processes, ' if jax.process_count() > 1 else '')
  log(f'{n_params:,} parameters | {hosts}{mesh.devices.size} x {jax.devices()[0].device_kind}'
      f'{" (FSDP)" if step_lib.uses_fsdp(setup, mesh) else ""} | batch {d.batch_size} x '
      f'{d.max_seq_length}, '
      f'{readers} input reader(s) | {step_flops / 1e9:.1f} GFLOP/step | '
      f'steps {start} -> {cfg.train_steps}')
  peak, peak_source = peak_lib.mesh_peak(mesh.devices.flat, setup.model_cfg.dtype)
  log(f'MFU against {peak / 1e12:.3g} TFLOP/s ({peak_source})')

  def annotate(values, speed):
    values['model_tflops_per_s'] = speed['steps_per_s'] * step_flops / 1e12
    values['mfu'] = values['model_tflops_per_s'] * 1e12 / peak
    return f'MFU {100 * values["mfu"]:.1f}% | '
  return annotate


def _summarize(cfg: config_lib.PretrainingConfig, workdir: str, setup, ckpt, result, best,
               baseline: float, eval_batches: int, log) -> dict:
  """summary.json (process 0) and the summary lines."""
  values = result.eval
  summary = {'step': result.step, 'eval': values, 'unigram_baseline': baseline,
             'checkpoint': fs.join(ckpt.directory, str(result.step))}
  if cfg.keep_best:
    summary['best_checkpoint'] = fs.join(ckpt.directory, str(best))
    log(f'best held-out {cfg.keep_best}: step {best} ({summary["best_checkpoint"]})')
  if distributed.is_main():  # strict JSON: a metric without a value (NaN) is written as null
    fs.write_atomic(fs.join(workdir, 'summary.json'), fs.json_text(summary, indent=2))
  parts = [part.format(**values, generator=setup.model_cfg.generator_shape.summary,
                       baseline=baseline)
           for part in objectives.get(cfg.objective.name).summary]
  log(f'summary (held-out, {eval_batches} batches of {cfg.data.eval_batch_size}, no dropout): '
      + '; '.join(parts))
  log(f'final parameters: {summary["checkpoint"]} | curves: {fs.join(workdir, "curves.png")}')
  return summary
