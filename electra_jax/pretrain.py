"""Pre-training: a workdir, its data and its first weights, then the loop.

    config -> resolve: fitted to init_from's weights and to the objective (a new config)
    -> checks: every field; the workdir claimed (one run at a time), the run it already holds
    -> records: read, or built from the corpus on first use
    -> state: restored from the latest checkpoint, or init_from's weights, or fresh
    -> step.compile_steps over the mesh -> loop.run -> summary.json
"""

import dataclasses
import json
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from electra_jax import UserError
from electra_jax import user_errors
from electra_jax import aot
from electra_jax import attention as attention_lib
from electra_jax import checkpoint as checkpoint_lib
from electra_jax import config as config_lib
from electra_jax import corpus as corpus_lib
from electra_jax import distributed
from electra_jax import flops as flops_lib
from electra_jax import fs
from electra_jax import input_pipeline
from electra_jax import loop as loop_lib
from electra_jax import metrics as metrics_lib
from electra_jax import model as model_lib
from electra_jax import objectives
from electra_jax import optim
from electra_jax import partitioning
from electra_jax import records as records_lib
from electra_jax import step as step_lib
from electra_jax import workdir as workdir_lib
from electra_jax.tokenizer import SpecialIds


# ================================================================================================
# Checks that turn user mistakes into one sentence, before anything is written
# ================================================================================================

def check_config(config: ml_collections.ConfigDict, mesh, data: bool = True):
  """Every field checked before anything is read or written: one sentence for the first problem.
  `data=False`: the corpus is not looked for (compiling for a slice, which reads no data)."""
  with user_errors(ValueError):
    config_lib.check(config)
    model_lib.ModelConfig.from_config(config.model, mesh.devices.flat[0].platform)
    partitioning.check_batch_size(config.data.batch_size, mesh, 'data.batch_size',
                                  config.microbatches)
    partitioning.check_batch_size(config.data.eval_batch_size, mesh, 'data.eval_batch_size')
    optim.make_optimizer(config.optimizer)
    objectives.get(config.objective.name)
  d, m = config.data, config.model
  if d.max_seq_length > m.max_position_embeddings:
    raise UserError(f'data.max_seq_length={d.max_seq_length} exceeds '
                    f'model.max_position_embeddings={m.max_position_embeddings}; shorten the '
                    'sequences or enlarge the position table')
  if config.objective.max_predictions < 1:
    raise UserError(f'objective.mask_prob={config.objective.mask_prob} selects no token in '
                    f'{d.max_seq_length}-token sequences; raise it')
  if config.nonfinite not in ('stop', 'skip'):
    raise UserError(f"nonfinite is {config.nonfinite!r}; use 'stop' or 'skip'")
  if config.keep_best and config.keep_best not in metrics_lib.EVAL_METRICS:
    raise UserError(f'keep_best is {config.keep_best!r}, not a held-out metric; use one of '
                    f'{", ".join(metrics_lib.EVAL_METRICS)}, or \'\' to keep the latest only')
  if config.keep_best and not config.eval_every:
    raise UserError(f'keep_best={config.keep_best!r} ranks the checkpoints saved at evaluations, '
                    'but eval_every is 0; set --config.eval_every')
  if data and not d.records:
    with user_errors(FileNotFoundError, ValueError):
      corpus_lib.Source(d.corpus, d.text_field)  # a glob that matches nothing fails here


# Sizes a run starting from other weights must share with them, and what it takes from them.
_MUST_MATCH = ('embedding_size', 'hidden_size', 'num_layers', 'num_heads', 'intermediate_size',
               'max_position_embeddings', 'type_vocab_size')
_ADOPTED = ('vocab_size', 'generator', 'generator_hidden_fraction', 'generator_layers_fraction',
            'untied_generator_embeddings', 'layer_norm_eps')


def resolve(config: ml_collections.ConfigDict, log=print):
  """(the run's config, the source of its `init_from` or None): `config` as parsed, fitted to the
  weights it starts from and to its objective, as a new value (`config` is left as it was)."""
  config = config.copy_and_resolve_references()
  source = _adopt_init_from(config, log)
  with user_errors(ValueError):
    config = objectives.fit_model_config(config, log)
  return config, source


def _adopt_init_from(config: ml_collections.ConfigDict, log=print):
  """The source of `config.init_from` (None without one), after fitting `config` (a copy) to it.

  The model's main sizes must be the config's (another size is refused, naming it); the vocabulary
  size, the generator's shape (read from the weights: Small++ has a full-width generator) and the
  vocabulary file (unless data.vocab names one) are taken from the source and logged.
  """
  if not config.init_from:
    if config.init_generator:
      raise UserError('init_generator is set but init_from is empty; set --config.init_from to '
                      'the discriminator\'s folder')
    return None
  from electra_jax.convert import sources  # pylint: disable=import-outside-toplevel
  with user_errors(ValueError, FileNotFoundError):
    source = sources.open_source(config.init_from, config.init_generator, config.data.vocab)
  fields, m = source.fields, config.model
  diffs = [f'{k} {fields[k]} (config: {m[k]})' for k in _MUST_MATCH
           if k in fields and fields[k] != m[k]]
  if diffs:
    raise UserError(f'{config.init_from} holds a model with other sizes than the config: '
                    f'{", ".join(diffs)}; use the config of its size (configs/small.py, base.py, '
                    'large.py) or set these fields')
  for key in _ADOPTED:
    if key in fields and fields[key] != m[key]:
      log(f'init_from: model.{key} {m[key]!r} -> {fields[key]!r} (from the weights)')
      m[key] = fields[key]
  if not config.data.vocab:
    if source.vocab is None:
      raise UserError(f'{config.init_from} has no vocabulary file (vocab.txt or a SentencePiece '
                      '.model) beside its weights; give the one it was trained with as '
                      '--config.data.vocab')
    config.data.vocab, config.data.lower_case = source.vocab, source.lower_case
    log(f'init_from: data.vocab {source.vocab} (lower_case={source.lower_case})')
  for note in source.notes:
    log(f'init_from: {note}')
  return source


_RUN_IDENTITY = ('seed', 'model', 'objective', 'data')
_HOW_NOT_WHAT = ('model.remat', 'model.attention')  # the same computation: may change on resume


def _checkpoint_steps(workdir: str) -> list[int]:
  folder = fs.join(workdir, 'checkpoints')
  return sorted(int(n) for n in fs.listdir(folder) if n.isdigit()) if fs.isdir(folder) else []


def _has_checkpoint(workdir: str) -> bool:
  return bool(_checkpoint_steps(workdir))


def check_same_run(config, workdir: str, log=print):
  """A workdir holds one run: resuming with a different model, objective or data is refused. A run
  that stopped before its first checkpoint holds nothing to resume: its config is replaced."""
  path = fs.join(workdir, 'config.json')
  if not fs.exists(path):
    return
  old = fs.read_json(path, 'delete it, and the same command resumes the run from its checkpoints '
                     '(config.json is written again)')
  new = json.loads(config.to_json())
  diffs = []
  for section in _RUN_IDENTITY:
    before, after = old.get(section), new.get(section)
    if not (isinstance(before, dict) and isinstance(after, dict)):
      before, after = {section: before}, {section: after}
    else:
      before = {f'{section}.{k}': v for k, v in before.items()}
      after = {f'{section}.{k}': v for k, v in after.items()}
    defaults = json.loads(config_lib.default_config().to_json())
    for key in sorted((set(before) | set(after)) - set(_HOW_NOT_WHAT)):
      section_default = defaults.get(section)
      default = (section_default.get(key.split('.', 1)[-1]) if isinstance(section_default, dict)
                 else section_default)
      if key not in before and after.get(key) == default:
        continue  # a field added since that run, at its default
      if before.get(key) != after.get(key):
        diffs.append(f'{key} {before.get(key)!r} -> {after.get(key)!r}')
  if diffs and not _has_checkpoint(workdir):
    log(f'note: {workdir} holds no checkpoint of its earlier run; starting it afresh with this '
        f'config ({", ".join(diffs)})')
  elif diffs:
    raise UserError(f'--workdir {workdir} holds a run with a different config ({", ".join(diffs)}); '
                    'use a new --workdir, or the same config to resume')


# ================================================================================================
# Data
# ================================================================================================

def prepare_data(config, workdir: str, log=print) -> tuple[str, dict]:
  """The records folder of this run, built under <workdir>/data on first use (or finished)."""
  d = config.data
  records_dir = d.records or fs.join(workdir, 'data')
  with user_errors(ValueError, FileNotFoundError, FileExistsError):
    if d.vocab:  # a given vocabulary must fit the model before anything is built with it
      from electra_jax import tokenizer as tokenizer_lib  # pylint: disable=import-outside-toplevel
      size = tokenizer_lib.load_tokenizer(d.vocab, lower_case=d.lower_case).vocab_size
      if size != config.model.vocab_size:
        raise ValueError(f'the vocabulary {d.vocab} has {size} entries but model.vocab_size is '
                         f'{config.model.vocab_size}; set --config.model.vocab_size={size}')
    built = fs.join(records_dir, records_lib.METADATA)
    if not d.records and not fs.exists(built) and not distributed.is_main():
      log(f'waiting for process 0 to build the records in {records_dir}')
      while not fs.exists(built):
        time.sleep(1)
    if not d.records and not fs.exists(built):
      settings = records_lib.Settings(
          source=d.corpus, text_field=d.text_field, max_seq_length=d.max_seq_length,
          seed=config.seed, eval_fraction=d.eval_fraction, num_shards=d.num_shards,
          num_eval_shards=d.num_eval_shards, lower_case=d.lower_case, vocab=d.vocab,
          vocab_size=config.model.vocab_size)
      records_lib.prepare(settings, records_dir, log=log, size_flag='--config.model.vocab_size')
    meta = records_lib.read_metadata(records_dir)
    records_lib.verify(records_dir, meta)
  if meta['vocab_size'] != config.model.vocab_size:
    raise UserError(f'the records in {records_dir} use a vocabulary of {meta["vocab_size"]} '
                    f'entries but model.vocab_size is {config.model.vocab_size}; set '
                    f'--config.model.vocab_size={meta["vocab_size"]}')
  if meta['max_seq_length'] != d.max_seq_length:
    raise UserError(f'the records in {records_dir} hold {meta["max_seq_length"]}-token examples '
                    f'but data.max_seq_length is {d.max_seq_length}; set '
                    f'--config.data.max_seq_length={meta["max_seq_length"]} or build new records')
  if d.vocab:
    from electra_jax import tokenizer as tokenizer_lib  # pylint: disable=import-outside-toplevel
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
  return state.replace(params=params, opt_state=opt_state)


def evaluate(evaluate_fn, params, dataset, sharding, num_batches: int,
             records_dir: str | None = None) -> dict:
  total = None
  replicated = partitioning.replicated(sharding.mesh)
  batches = input_pipeline.global_batches(dataset.take(num_batches), sharding, records_dir)
  for i, batch in enumerate(batches):
    sums = evaluate_fn(params, batch, jax.device_put(jnp.asarray(i, jnp.int32), replicated))
    total = sums if total is None else step_lib.accumulate(total, sums)
  return metrics_lib.summarize(total)


def model_for_run(config, platform: str, checked: bool = True, log=print, chip: str = ''):
  """The model's view of the run on `platform` (devices of kind `chip`): dtype 'auto' and
  attention 'auto' decided (the attention kernel checked at the run's shape on the device when
  `checked`; every process takes one verdict), the attention line logged."""
  with user_errors(ValueError):
    model_cfg = model_lib.ModelConfig.from_config(config.model, platform, chip)
    model_cfg, note = attention_lib.resolve(
        model_cfg, config.data.max_seq_length, checked,
        agree=lambda ok: distributed.all_agree(ok, 'attention_kernel'))
  if note:
    log(note)
  return model_cfg


def _batch_shapes(sharding, rows: int, length: int) -> dict:
  return {k: jax.ShapeDtypeStruct((rows, length), jnp.int32, sharding=sharding)
          for k in records_lib.FEATURES}


def compile_run(config, make_setup, model_cfg, mesh, state, limit, log):
  """(setup, compiled train step, compiled evaluation step, the train step's memory per device).

  `microbatches=0` takes the fewest parts whose step fits `limit` bytes per device. A step that
  the compiler rejects with the Pallas attention kernel is compiled again with the explicit path,
  with a warning, instead of ending the run."""
  d = config.data
  sharding = partitioning.batch_sharding(mesh)

  def build(model_cfg):
    setup = make_setup(model_cfg)
    _, _, evaluate = step_lib.compile_steps(setup, mesh)
    compile_train = lambda m: step_lib.compile_steps(
        dataclasses.replace(setup, microbatches=m), mesh)[1].lower(
            state, _batch_shapes(sharding, d.batch_size, d.max_seq_length)).compile()
    if config.microbatches:
      try:
        train = compile_train(config.microbatches)
      except Exception as e:  # pylint: disable=broad-except
        need = aot.out_of_memory(e)
        if need is None:
          raise
        raise UserError(f'the train step needs {need[0] / 2 ** 30:.1f} GiB per device of '
                        f'{need[1] / 2 ** 30:.1f} (the compiler\'s count); set '
                        '--config.microbatches=0 (auto), --config.fsdp=True, '
                        '--config.model.remat=True or a smaller --config.data.batch_size') from None
      used = aot.memory(train, state)
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
    return setup, train, evaluate, used

  try:
    return build(model_cfg)
  except (UserError, KeyboardInterrupt):
    raise
  except Exception as e:  # pylint: disable=broad-except
    if (model_cfg.attention != 'pallas' or config.model.attention == 'pallas'
        or aot.out_of_memory(e)):
      raise
    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
    log(f'warning: the step did not compile with the Pallas attention kernel ({first}); '
        'compiling it with the explicit softmax')
    return build(dataclasses.replace(model_cfg, attention='explicit'))


def _compile(config, make_setup, model_cfg, mesh, state, log):
  """The steps compiled ahead of the first batch, saying so: the minute of compilation (or a few
  seconds from JAX's compilation cache) is not silence, and not counted in the first interval's
  tokens/s."""
  log(f'{metrics_lib.stamp()}compiling the train and evaluation steps ...')
  t = time.perf_counter()
  compiled = compile_run(config, make_setup, model_cfg, mesh, state, aot.device_memory_limit(
      mesh.devices.flat[0]), log)
  log(f'{metrics_lib.stamp()}compiled in {time.perf_counter() - t:.1f} s')
  return compiled


SPECIAL_IDS = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)  # as prepare_data's vocabularies


def compile_for_topology(config: ml_collections.ConfigDict, slice_, log=print) -> dict:
  """Compiles the run of `config` for the TPU slice `slice_` (topology.parse) on this machine: no
  TPU and no data. Logs each program's memory per chip and the estimated step; returns the report
  (memory, microbatches, attention path, estimate, the train step's HLO) when every program
  compiles and fits, else raises UserError naming the fix."""
  with aot.no_persistent_cache():
    return _compile_for_topology(config, slice_, log)


def _compile_for_topology(config, slice_, log) -> dict:
  devices = slice_.devices()
  mesh = partitioning.make_mesh(devices)
  config, _ = resolve(config, log)
  check_config(config, mesh, data=False)
  d = config.data
  log(f'{slice_.describe()} | compiling here for the slice: no TPU used, no data read')
  model_cfg = model_for_run(config, 'tpu', checked=False, log=log, chip=devices[0].device_kind)
  make_setup = lambda cfg: step_lib.build_setup(config, SPECIAL_IDS, 'tpu', cfg)
  setup = make_setup(model_cfg)
  init_fn, _, _ = step_lib.compile_steps(setup, mesh)
  init, seconds, error = aot.timed_compile(init_fn.lower)
  state = jax.eval_shape(init_fn)
  n_params = sum(x.size for x in jax.tree.leaves(state.params))
  rows = d.batch_size // mesh.devices.size
  split = ' split by FSDP' if step_lib.uses_fsdp(setup, mesh) else ''
  log(f'{n_params:,} parameters | {model_cfg.dtype} activations, {model_cfg.param_dtype} '
      f'parameters and Adam moments{split} | batch {d.batch_size} x {d.max_seq_length} ({rows} '
      'rows per chip)')
  capacity = slice_.hbm_bytes
  problems = []
  if error:
    log(f'init: does not compile ({seconds:.0f} s): {error}')
    problems.append(f'the initialization does not compile ({error})')
  else:
    used = aot.memory(init)
    log(f'init: compiled in {seconds:.0f} s | HBM per chip {used.describe(capacity)}')
  t = time.perf_counter()
  try:
    setup, train, evaluate, used = compile_run(config, make_setup, model_cfg, mesh, state,
                                               capacity, log)
  except UserError as e:
    log(f'train step: does not fit ({time.perf_counter() - t:.0f} s): {e}')
    raise
  except Exception as e:  # pylint: disable=broad-except
    first = ' '.join(str(e).split())[:400]
    log(f'train step: does not compile ({time.perf_counter() - t:.0f} s): {first}')
    raise UserError(f'the train step does not compile for {slice_.label}: {first}') from None
  m = setup.microbatches
  fits = used.total <= aot.MARGIN * capacity
  log(f'train step ({m} microbatch{"es" if m > 1 else ""} of {d.batch_size // m} rows, attention '
      f'{setup.model_cfg.attention}): compiled in {time.perf_counter() - t:.0f} s | HBM per chip '
      f'{used.describe(capacity)}{"" if fits else " | does NOT fit"}')
  multiple = 8 * m
  best = aot.largest_batch(used, rows, capacity, multiple)
  log(f'  largest global batch that fits with {m} microbatch{"es" if m > 1 else ""}: '
      f'{best * mesh.devices.size:,} ({best} rows per chip; an estimate: the batch and '
      'temporaries taken to grow in proportion to the rows)')
  step_flops = flops_lib.step_matmul_flops(setup.model_cfg, d.max_seq_length, d.batch_size,
                                           setup.objective_cfg.max_predictions,
                                           config.objective.name)
  lines, numbers = aot.estimate_lines(train, slice_.chip, slice_.chips, slice_.num_slices,
                                      step_flops, d.batch_size * d.max_seq_length,
                                      slice_.chips * slice_.num_slices)
  for line in lines:
    log(line)
  used_eval = aot.memory(evaluate, state.params)
  log(f'eval step: compiled | HBM per chip {used_eval.describe(capacity)}')
  if not fits:
    problems.append(f'the train step needs {used.total / 2 ** 30:.1f} GiB per chip of '
                    f'{capacity / 2 ** 30:.0f}; set --config.microbatches=0 (auto), '
                    '--config.fsdp=True or --config.model.remat=True, or a smaller batch')
  if used_eval.total > aot.MARGIN * capacity:
    problems.append(f'the evaluation step needs {used_eval.total / 2 ** 30:.1f} GiB per chip; '
                    'lower --config.data.eval_batch_size')
  if problems:
    raise UserError('; '.join(problems))
  log(f'{slice_.label}: every program compiles and fits')
  return {'slice': slice_.name, 'parameters': n_params, 'microbatches': m,
          'attention': setup.model_cfg.attention, 'dtype': setup.model_cfg.dtype,
          'memory': {'init': aot.memory(init), 'train': used, 'eval': used_eval},
          'largest_batch': best * mesh.devices.size, 'estimate': numbers,
          'train_hlo': train.as_text()}


# ================================================================================================
# The run
# ================================================================================================

def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, log=print) -> dict:
  """Pre-trains per `config` in `workdir` (resuming if it holds a checkpoint); returns the summary."""
  main = distributed.is_main()  # the one process that logs and writes files
  if not main:
    log = lambda line: None  # pylint: disable=unnecessary-lambda-assignment
  mesh = partitioning.make_mesh()
  config, source = resolve(config, log)
  check_config(config, mesh)
  with workdir_lib.claim(workdir, 'pre-training'):  # one run at a time in a workdir
    return _train(config, source, workdir, mesh, log)


def _train(config, source, workdir: str, mesh, log) -> dict:
  main = distributed.is_main()
  records_dir, meta, readers, eval_batches = _open_workdir(config, workdir, log)

  # ---- the state: restored, or init_from's weights, or fresh ----
  special = SpecialIds(**meta['special_ids'])
  platform = mesh.devices.flat[0].platform
  model_cfg = model_for_run(config, platform, log=log, chip=mesh.devices.flat[0].device_kind)
  make_setup = lambda cfg: step_lib.build_setup(config, special, platform, cfg)
  setup = make_setup(model_cfg)
  init_fn, _, _ = step_lib.compile_steps(setup, mesh)
  ckpt = checkpoint_lib.Checkpointer(
      fs.join(workdir, 'checkpoints'), keep=config.keep_checkpoints,
      best_metric=config.keep_best, best_mode=metrics_lib.EVAL_METRICS.get(config.keep_best, 'max'))
  start, state, readers, position = _restore(config, workdir, ckpt, init_fn(), meta, readers, log)
  if not start and source is not None:
    state = start_from(setup, state, source)
    log(f'initial weights: {source.describe()}')

  # ---- the data ----
  d = config.data
  sharding = partitioning.batch_sharding(mesh)
  train_ds = input_pipeline.make_dataset(records_dir, 'train', d.batch_size, seed=config.seed,
                                         shuffle_buffer=d.shuffle_buffer, position=position,
                                         readers=readers)
  eval_ds = input_pipeline.make_dataset(records_dir, 'eval', d.eval_batch_size, shuffle=False)
  batches = input_pipeline.global_batches(train_ds, sharding, records_dir)

  # ---- the loop ----
  annotate = _describe_run(config, setup, state, mesh, readers, start, log)
  setup, train_fn, eval_fn, _ = _compile(config, make_setup, model_cfg, mesh, state, log)
  baseline = meta['unigram_xent']
  plan = loop_lib.Plan(
      total_steps=config.train_steps, log_every=config.log_every, eval_every=config.eval_every,
      save_every=config.save_every, keep_best=bool(config.keep_best), nonfinite=config.nonfinite,
      tokens_per_step=d.batch_size * d.max_seq_length, eval_note=f' | unigram baseline {baseline:.4f}',
      eval_record={'unigram_baseline': baseline},
      # CPU devices of several processes (gloo): steps queued ahead of each other can interleave
      # their collectives and wait on each other forever, so each is finished before the next.
      one_at_a_time=jax.process_count() > 1 and jax.devices()[0].platform == 'cpu')
  saved_meta = lambda step: {'step': step, 'readers': readers,
                             'data_position': step * d.batch_size // readers,
                             'vocab_fingerprint': meta['vocab_fingerprint'],
                             'config': json.loads(config.to_json())}
  evaluate_now = lambda step, state: evaluate(eval_fn, state.params, eval_ds, sharding,
                                              eval_batches, records_dir)
  # Every process has compiled and restored before the first exchange (see distributed.barrier).
  distributed.barrier('first_step')
  with user_errors(input_pipeline.DamagedRecords, checkpoint_lib.DiskFull):
    result = loop_lib.run(plan, state, train_fn, batches, start, evaluate=evaluate_now, ckpt=ckpt,
                          meta=saved_meta, logs=loop_lib.Logs(workdir, main), log=log,
                          annotate=annotate)
    if result.preempted:
      return {'step': result.step, 'preempted': result.preempted}
    best = ckpt.best_step()
    ckpt.close()
  return _summarize(config, workdir, setup, ckpt, result, best, baseline, eval_batches, log)


def _open_workdir(config, workdir: str, log):
  """(records folder, its metadata, input readers, held-out batches), config.json written."""
  check_same_run(config, workdir, log)
  latest = max(_checkpoint_steps(workdir), default=0)
  if latest > config.train_steps:
    raise UserError(f'the run in {workdir} is at step {latest}, past train_steps='
                    f'{config.train_steps}; raise --config.train_steps to go on, or use a new '
                    '--workdir for a shorter run')
  records_dir, meta = prepare_data(config, workdir, log)
  with user_errors(ValueError):
    eval_batches = input_pipeline.held_out_batches(meta, config.data.eval_batch_size,
                                                   config.eval_batches)
    readers = input_pipeline.num_readers(meta, config.data.batch_size, config.data.readers)
    input_pipeline.process_readers(readers, jax.process_index(), jax.process_count())
  if distributed.is_main():  # whole or not at all: other processes may read it in check_same_run
    fs.write_atomic(fs.join(workdir, 'config.json'), config.to_json(indent=2))
  return records_dir, meta, readers, eval_batches


def _restore(config, workdir: str, ckpt, state, meta: dict, readers: int, log):
  """(start step, state, input readers, input position): from the latest readable checkpoint, whose
  records and readers must be the run's, or (0, `state`, `readers`, 0)."""
  with user_errors(ValueError):
    start, state, ckpt_meta = ckpt.restore_latest(state, log, afresh=True)
  if not start:
    return 0, state, readers, 0
  d = config.data
  if ckpt_meta.get('vocab_fingerprint', meta['vocab_fingerprint']) != meta['vocab_fingerprint']:
    raise UserError(f'the checkpoint {ckpt.directory}/{start} was trained on records of another '
                    f'vocabulary than {d.records or fs.join(workdir, "data")}; point data.records '
                    'at the records of the run, or use a new --workdir')
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


def _describe_run(config, setup, state, mesh, readers: int, start: int, log):
  """Logs the run's size and speed reference; returns the progress lines' MFU annotation."""
  d = config.data
  n_params = sum(x.size for x in jax.tree.leaves(state.params))
  step_flops = flops_lib.step_matmul_flops(setup.model_cfg, d.max_seq_length, d.batch_size,
                                           setup.objective_cfg.max_predictions,
                                           config.objective.name)
  hosts = (f'{jax.process_count()} processes, ' if jax.process_count() > 1 else '')
  log(f'{n_params:,} parameters | {hosts}{mesh.devices.size} x {jax.devices()[0].device_kind}'
      f'{" (FSDP)" if step_lib.uses_fsdp(setup, mesh) else ""} | batch {d.batch_size} x '
      f'{d.max_seq_length}, '
      f'{readers} input reader(s) | {step_flops / 1e9:.1f} GFLOP/step | '
      f'steps {start} -> {config.train_steps}')
  peak, peak_source = flops_lib.mesh_peak(mesh.devices.flat, setup.model_cfg.dtype)
  log(f'MFU against {peak / 1e12:.3g} TFLOP/s ({peak_source})')

  def annotate(values, speed):
    values['model_tflops_per_s'] = speed['steps_per_s'] * step_flops / 1e12
    values['mfu'] = values['model_tflops_per_s'] * 1e12 / peak
    return f'MFU {100 * values["mfu"]:.1f}% | '
  return annotate


def _summarize(config, workdir: str, setup, ckpt, result, best, baseline: float,
               eval_batches: int, log) -> dict:
  """summary.json (process 0) and the summary lines."""
  values = result.eval
  summary = {'step': result.step, 'eval': values, 'unigram_baseline': baseline,
             'checkpoint': fs.join(ckpt.directory, str(result.step))}
  if config.keep_best:
    summary['best_checkpoint'] = fs.join(ckpt.directory, str(best))
    log(f'best held-out {config.keep_best}: step {best} ({summary["best_checkpoint"]})')
  if distributed.is_main():  # strict JSON: a metric without a value (NaN) is written as null
    fs.write_atomic(fs.join(workdir, 'summary.json'), metrics_lib.dumps(summary, indent=2))
  parts = []
  if 'disc_auc' in values:
    parts.append(f'discriminator AUC {values["disc_auc"]:.3f} (chance 0.5), accuracy '
                 f'{values["disc_accuracy"]:.3f}')
  gen_name = {'tied': 'MLM', 'two_tower': 'cloze model'}.get(setup.model_cfg.generator,
                                                             'generator MLM')
  for key, name in (('mlm', gen_name),
                    ('main_mlm', 'main MLM'), ('all_tokens', 'all-tokens MLM')):
    if f'{key}_loss' in values:
      accuracy = (f', accuracy {values[key + "_accuracy"]:.3f}'
                  if f'{key}_accuracy' in values else '')
      versus = f' vs unigram baseline {baseline:.3f}' if key != 'all_tokens' else ''
      parts.append(f'{name} loss {values[key + "_loss"]:.3f} nats{versus}{accuracy}')
  log(f'summary (held-out, {eval_batches} batches of {config.data.eval_batch_size}, no dropout): '
      + '; '.join(parts))
  log(f'final parameters: {summary["checkpoint"]} | curves: {fs.join(workdir, "curves.png")}')
  return summary
