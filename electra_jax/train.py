"""Pre-training: TrainState, the one `train_step`, `eval_step`, and the loop.

    records -> global batch -> train_step: objective(params, batch, rng) -> grads -> optimizer
    -> metric sums (read from the device only at log intervals) -> checkpoints -> summary

Every random choice of step t comes from fold_in(key(seed), t): a run is reproducible and a resumed
run continues exactly.
"""

import dataclasses
import functools
import json
import os
import signal
import threading
import time
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

from electra_jax import UserError
from electra_jax import checkpoint as checkpoint_lib
from electra_jax import config as config_lib
from electra_jax import corpus as corpus_lib
from electra_jax import distributed
from electra_jax import flops as flops_lib
from electra_jax import fs
from electra_jax import metrics as metrics_lib
from electra_jax import model as model_lib
from electra_jax import objectives
from electra_jax import optim
from electra_jax import partitioning
from electra_jax import records as records_lib
from electra_jax.tokenizer import SpecialIds

jax.config.update('jax_threefry_partitionable', True)  # random bits independent of sharding


# ================================================================================================
# State and steps
# ================================================================================================

@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any
  nonfinite_steps: jax.Array  # steps whose loss or gradient norm was NaN/Inf (not applied)
  first_nonfinite: jax.Array  # the first such step, -1 if none


@dataclasses.dataclass(frozen=True)
class Setup:
  """Everything static a run needs, built once from the config and the vocabulary's ids.

  Pre-training and fine-tuning differ only here: their models, losses and initial parameters.
  """
  model_cfg: model_lib.ModelConfig
  objective_cfg: objectives.ObjectiveConfig | None
  special: SpecialIds
  model: Any
  tx: optax.GradientTransformation
  schedule: Callable
  loss_fn: Callable  # (params, batch, rng, deterministic) -> (loss, metric sums)
  seed: int
  init_params: Callable  # key -> parameters
  draw: Callable | None = None  # (rng, global batch) -> objectives.Draws: masking, normalizers
  microbatches: int = 1  # gradient accumulation: sequential parts of the global batch per step
  fsdp: bool = False  # parameters and optimizer state split over the devices (partitioning.py)
  param_shardings: Any = None  # set by compile_steps: gradients are kept in the parameters' layout


def build_setup(config: ml_collections.ConfigDict, special: SpecialIds) -> Setup:
  model_cfg = model_lib.ModelConfig.from_config(config.model)
  objective_cfg = objectives.ObjectiveConfig.from_config(config.objective)
  model = model_lib.Electra(model_cfg)
  tx, schedule = optim.make_optimizer(config.optimizer)
  objective = objectives.get_objective(config.objective.name)

  def loss_fn(params, batch, rng, deterministic=False, draws=None):
    return objective(params, batch, rng, model=model, cfg=objective_cfg, special=special,
                     deterministic=deterministic, draws=draws)

  def draw(rng, batch):
    return objectives.draw(rng, batch, objective_cfg, special, model_cfg.vocab_size)

  return Setup(model_cfg, objective_cfg, special, model, tx, schedule, loss_fn, config.seed,
               functools.partial(model_lib.init_params, model_cfg), draw,
               config.get('microbatches', 1), config.get('fsdp', False))


def _keys(seed: int):
  init_key, train_key, eval_key = jax.random.split(jax.random.key(seed), 3)
  return init_key, train_key, eval_key


def init_state(setup: Setup) -> TrainState:
  params = setup.init_params(_keys(setup.seed)[0])
  zero = jnp.zeros((), jnp.int32)
  return TrainState(zero, params, setup.tx.init(params), zero, zero - 1)


def train_step(setup: Setup, state: TrainState, batch: dict) -> tuple[TrainState, dict]:
  """One optimizer step on one global batch: the same function for every objective and mesh."""
  rng = jax.random.fold_in(_keys(setup.seed)[1], state.step)
  (loss, metrics), grads = _gradients(setup, state.params, batch, rng)
  grads = _like_params(setup, grads)
  grad_norm = optax.global_norm(grads)
  # NaN/Inf guard, without a host sync: a step whose loss, gradient norm or update is not finite
  # leaves parameters, optimizer state and metric sums as they were, and is counted; the loop reads
  # the count at log time. (A finite gradient can still make a non-finite update, e.g. through the
  # learning rate or Adam's moments.) A conditional, not a select between old and new values, lets
  # XLA update the donated state in place; the update is computed twice (its norm here, fused into
  # one reduction, and again in the branch that applies it) so that no second copy of the
  # optimizer state is ever alive.
  update_norm = optax.global_norm(setup.tx.update(grads, state.opt_state, state.params)[0])
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm) & jnp.isfinite(update_norm)

  def apply(params, opt_state):
    updates, opt_state = setup.tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  params, opt_state = jax.lax.cond(finite, apply, lambda p, o: (p, o), state.params,
                                   state.opt_state)
  metrics = jax.tree.map(lambda m: jnp.where(finite, m, jnp.zeros_like(m)), metrics)
  metrics['grad_norm'] = objectives.ratio(jnp.where(finite, grad_norm, 0.0), finite)
  metrics['learning_rate'] = objectives.ratio(setup.schedule(state.step), 1.0)
  bad = jnp.logical_not(finite).astype(jnp.int32)
  metrics['nonfinite_steps'] = objectives.ratio(bad, 1.0)  # summed: a count per log interval
  first = jnp.where((state.first_nonfinite < 0) & (bad > 0), state.step + 1, state.first_nonfinite)
  return TrainState(state.step + 1, params, opt_state, state.nonfinite_steps + bad, first), metrics


def _gradients(setup: Setup, params, batch: dict, rng: jax.Array):
  """((loss, metric sums), gradients) of the global batch.

  With `setup.microbatches` = M > 1 the batch runs in M sequential parts (`lax.scan`) whose
  gradients and metric sums add up: activations of only B / M rows are alive at a time. Masking,
  the sampling numbers and every loss denominator are drawn once for the whole batch, so the sum is
  the whole batch's loss and gradient (up to float32 summation order); dropout masks are drawn per
  part. Part k takes rows k, k + M, k + 2M, ...: every device holds an equal share of each part.
  """
  grad_fn = jax.value_and_grad(lambda p, *a, **k: setup.loss_fn(_gathered(setup, p), *a, **k),
                               has_aux=True)
  m = setup.microbatches
  if m == 1:
    return grad_fn(params, batch, rng)
  draws = setup.draw(rng, batch)

  def split(x):  # [B, ..] -> [M, B / M, ..]
    return x.reshape((x.shape[0] // m, m) + x.shape[1:]).swapaxes(0, 1)

  def part(k, rows, masked, uniform):
    part_draws = objectives.Draws(masked, uniform, draws.counts)
    return grad_fn(params, rows, jax.random.fold_in(rng, k), draws=part_draws)

  def body(total, xs):
    (loss, metrics), grads = part(*xs)
    return jax.tree.map(jnp.add, total, ((loss, metrics), _like_params(setup, grads))), None

  xs = (jnp.arange(m), *jax.tree.map(split, (batch, draws.masked, draws.sample_uniform)))
  zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype),
                       jax.eval_shape(part, *jax.tree.map(lambda x: x[0], xs)))
  ((loss, metrics), grads), _ = jax.lax.scan(body, zeros, xs)
  metrics['loss'] = objectives.ratio(loss, 1.0)  # a sum of parts, not a mean of M ratios
  return (loss, metrics), grads


def _gathered(setup: Setup, params):
  """Under FSDP, the whole parameters for the forward pass (all-gathered once per step; the
  gradient of the gather is a reduce-scatter). Left to itself, XLA may instead gather the batch's
  activations to meet the split weights, which costs far more memory."""
  if setup.param_shardings is None:
    return params
  whole = jax.tree.map(lambda s: NamedSharding(s.mesh, PartitionSpec()), setup.param_shardings)
  return jax.lax.with_sharding_constraint(params, whole)


def _like_params(setup: Setup, grads):
  """Gradients in the parameters' layout: under FSDP, XLA then reduce-scatters them and the
  optimizer updates each device's share only (unconstrained, it may keep whole copies)."""
  if setup.param_shardings is None:
    return grads
  return jax.lax.with_sharding_constraint(grads, setup.param_shardings)


def eval_step(setup: Setup, params, batch: dict, index: jax.Array) -> dict:
  """Held-out metrics without dropout; masking and sampling keys depend on the batch index only."""
  rng = jax.random.fold_in(_keys(setup.seed)[2], index)
  return setup.loss_fn(_gathered(setup, params), batch, rng, deterministic=True)[1]


@jax.jit
def accumulate(total, new):
  return jax.tree.map(jnp.add, total, new)


def compile_steps(setup: Setup, mesh):
  """(init, train_step, eval_step) jitted over the mesh: batch split on 'data', state replicated
  (or split by FSDP's rules with `setup.fsdp`)."""
  data = partitioning.batch_sharding(mesh)
  repl = partitioning.replicated(mesh)
  state = partitioning.state_shardings(jax.eval_shape(functools.partial(init_state, setup)), mesh,
                                       setup.fsdp)
  if setup.fsdp:
    setup = dataclasses.replace(setup, param_shardings=state.params)
  on_mesh = lambda fn: partitioning.on_mesh(functools.partial(fn, setup), mesh)
  init = jax.jit(on_mesh(init_state), out_shardings=state)
  train = jax.jit(on_mesh(train_step), in_shardings=(state, data), out_shardings=(state, repl),
                  donate_argnums=(0,))
  evaluate = jax.jit(on_mesh(eval_step), in_shardings=(state.params, data, repl),
                     out_shardings=repl)
  return init, train, evaluate


# ================================================================================================
# Checks that turn user mistakes into one sentence, before anything is written
# ================================================================================================

def check_config(config: ml_collections.ConfigDict, mesh):
  """Every field checked before anything is read or written: one sentence for the first problem."""
  try:
    config_lib.check(config)
    model_lib.ModelConfig.from_config(config.model)
    if config.microbatches < 1:
      raise ValueError(f'microbatches is {config.microbatches}; use 1 (no accumulation) or more')
    partitioning.check_batch_size(config.data.batch_size, mesh, 'data.batch_size',
                                  config.microbatches)
    partitioning.check_batch_size(config.data.eval_batch_size, mesh, 'data.eval_batch_size')
    optim.make_optimizer(config.optimizer)
    objectives.get_objective(config.objective.name)
  except ValueError as e:
    raise UserError(str(e)) from None
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
  if not d.records:
    try:
      corpus_lib.Source(d.corpus, d.text_field)  # a glob that matches nothing fails here
    except (FileNotFoundError, ValueError) as e:
      raise UserError(str(e)) from None


# Sizes a run starting from other weights must share with them, and what it takes from them.
_MUST_MATCH = ('embedding_size', 'hidden_size', 'num_layers', 'num_heads', 'intermediate_size',
               'max_position_embeddings', 'type_vocab_size')
_ADOPTED = ('vocab_size', 'generator', 'generator_hidden_fraction', 'generator_layers_fraction',
            'untied_generator_embeddings', 'layer_norm_eps')


def adopt_init_from(config: ml_collections.ConfigDict, log=print):
  """The source of `config.init_from` (None without one), after fitting `config` to it.

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
  try:
    source = sources.open_source(config.init_from, config.init_generator, config.data.vocab)
  except (ValueError, FileNotFoundError) as e:
    raise UserError(str(e)) from None
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


def make_workdir(workdir: str):
  if fs.exists(workdir) and not fs.isdir(workdir):
    raise UserError(f'--workdir {workdir} is a file; give a folder')
  try:
    fs.makedirs(workdir, exist_ok=True)
    probe = fs.join(workdir, f'.write_test.{jax.process_index()}.{os.getpid()}')
    with fs.open(probe, 'w') as f:
      f.write('ok')
    fs.remove(probe)
  except OSError as e:
    raise UserError(f'cannot write to --workdir {workdir} ({e.strerror}); choose a folder you can '
                    'write to') from None


_RUN_IDENTITY = ('seed', 'model', 'objective', 'data')
_HOW_NOT_WHAT = ('model.remat', 'model.attention')  # the same computation: may change on resume


def _has_checkpoint(workdir: str) -> bool:
  folder = fs.join(workdir, 'checkpoints')
  return fs.isdir(folder) and any(n.isdigit() for n in fs.listdir(folder))


def check_same_run(config, workdir: str, log=print):
  """A workdir holds one run: resuming with a different model, objective or data is refused. A run
  that stopped before its first checkpoint holds nothing to resume: its config is replaced."""
  path = fs.join(workdir, 'config.json')
  if not fs.exists(path):
    return
  with fs.open(path) as f:
    old = json.load(f)
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


class _Signals:
  """SIGTERM/SIGINT -> `received` is set, and the loop saves a checkpoint and returns (preemption).

  A second signal ends the process at once. Installed only in the main thread (Python's rule).
  """

  def __init__(self, log, install: bool = True):
    self.received, self.log, self.previous = None, log, {}
    if install and threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGTERM, signal.SIGINT):
        self.previous[sig] = signal.signal(sig, self._handle)

  def _handle(self, signum, frame):
    del frame
    if self.received:  # the second one: no checkpoint, out now
      os._exit(128 + signum)  # pylint: disable=protected-access
    self.received = signal.Signals(signum).name
    self.log(f'{self.received} received: saving a checkpoint after this step (again to quit now)')

  def restore(self):
    for sig, handler in self.previous.items():
      signal.signal(sig, handler)
    self.previous = {}


# ================================================================================================
# Data
# ================================================================================================

def prepare_data(config, workdir: str, log=print) -> tuple[str, dict]:
  """The records folder of this run, built under <workdir>/data on first use (or finished)."""
  d = config.data
  records_dir = d.records or fs.join(workdir, 'data')
  try:
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
  except (ValueError, FileNotFoundError, FileExistsError) as e:
    raise UserError(str(e)) from None
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


def workdir_vocab(workdir: str, config) -> tuple[str, dict, str]:
  """(records folder, its metadata, vocabulary file) of the pre-training run in `workdir`."""
  records_dir = config.data.records or fs.join(workdir, 'data')
  try:
    meta = records_lib.read_metadata(records_dir)
  except (ValueError, FileNotFoundError) as e:
    raise UserError(str(e)) from None
  vocab = next((fs.join(records_dir, n) for n in ('vocab.model', 'vocab.txt')
                if fs.isfile(fs.join(records_dir, n))), None)
  if vocab is None:
    raise UserError(f'the records folder {records_dir} of {workdir} holds no vocabulary file')
  return records_dir, meta, vocab


# ================================================================================================
# The loop
# ================================================================================================

def start_from(setup: Setup, state: TrainState, source) -> TrainState:
  """`state` with the source's parameters (what it lacks stays as initialized) and a fresh
  optimizer state for them, laid out as `state`'s."""
  fresh = jax.device_get(state.params)
  try:
    params = source.params(setup.model_cfg, fill=fresh)
  except ValueError as e:
    raise UserError(str(e)) from None
  layout = lambda tree: jax.tree.map(lambda x: x.sharding, tree)
  params = jax.device_put(jax.tree.map(lambda p, f: np.asarray(p, f.dtype), params, fresh),
                          layout(state.params))
  opt_state = jax.jit(setup.tx.init, out_shardings=layout(state.opt_state))(params)
  return state.replace(params=params, opt_state=opt_state)


def evaluate(evaluate_fn, params, dataset, sharding, num_batches: int,
             records_dir: str | None = None) -> dict:
  from electra_jax import input_pipeline  # pylint: disable=import-outside-toplevel
  total = None
  replicated = partitioning.replicated(sharding.mesh)
  batches = input_pipeline.global_batches(dataset.take(num_batches), sharding, records_dir)
  for i, batch in enumerate(batches):
    sums = evaluate_fn(params, batch, jax.device_put(jnp.asarray(i, jnp.int32), replicated))
    total = sums if total is None else accumulate(total, sums)
  return metrics_lib.summarize(total)


def _compile(train_fn, eval_fn, state, sharding, d, log):
  """The train and evaluation steps compiled ahead of the first batch, saying so: the minute of
  compilation (or a few seconds from JAX's compilation cache) is not silence, and not counted in
  the first interval's tokens/s."""
  shape = lambda rows: {k: jax.ShapeDtypeStruct((rows, d.max_seq_length), jnp.int32,
                                                sharding=sharding) for k in records_lib.FEATURES}
  log(f'{metrics_lib.stamp()}compiling the train and evaluation steps ...')
  t = time.perf_counter()
  train_fn = train_fn.lower(state, shape(d.batch_size)).compile()
  eval_fn = eval_fn.lower(state.params, shape(d.eval_batch_size),
                          jax.ShapeDtypeStruct((), jnp.int32)).compile()
  log(f'{metrics_lib.stamp()}compiled in {time.perf_counter() - t:.1f} s')
  return train_fn, eval_fn


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, log=print) -> dict:
  """Pre-trains per `config` in `workdir` (resuming if it holds a checkpoint); returns the summary."""
  from electra_jax import input_pipeline  # pylint: disable=import-outside-toplevel
  main = distributed.is_main()  # the one process that logs and writes files
  if not main:
    log = lambda line: None  # pylint: disable=unnecessary-lambda-assignment
  mesh = partitioning.make_mesh()
  source = adopt_init_from(config, log)
  try:
    objectives.fit_model_config(config, log)
  except ValueError as e:
    raise UserError(str(e)) from None
  check_config(config, mesh)
  existed = fs.isdir(workdir)
  make_workdir(workdir)
  try:
    check_same_run(config, workdir, log)
    records_dir, meta = prepare_data(config, workdir, log)
    try:
      eval_batches = input_pipeline.held_out_batches(meta, config.data.eval_batch_size,
                                                     config.eval_batches)
      readers = input_pipeline.num_readers(meta, config.data.batch_size, config.data.readers)
      input_pipeline.process_readers(readers, jax.process_index(), jax.process_count())
    except ValueError as e:
      raise UserError(str(e)) from None
  except UserError:
    if main and not existed and not fs.listdir(workdir):
      fs.rmdir(workdir)
    raise
  if main:  # whole or not at all: other processes may be reading it in check_same_run
    fs.write_atomic(fs.join(workdir, 'config.json'), config.to_json(indent=2))

  setup = build_setup(config, SpecialIds(**meta['special_ids']))
  note = model_lib.attention_note(setup.model_cfg, config.data.max_seq_length)
  if note:
    log(note)
  init_fn, train_fn, eval_fn = compile_steps(setup, mesh)
  data_sharding = partitioning.batch_sharding(mesh)
  ckpt = checkpoint_lib.Checkpointer(
      fs.join(workdir, 'checkpoints'), keep=config.keep_checkpoints,
      best_metric=config.keep_best, best_mode=metrics_lib.EVAL_METRICS.get(config.keep_best, 'max'))

  state = init_fn()
  d = config.data
  try:
    start, state, ckpt_meta = ckpt.restore_latest(state, log)
  except ValueError as e:
    raise UserError(str(e)) from None
  position = 0
  if start:
    if ckpt_meta.get('vocab_fingerprint', meta['vocab_fingerprint']) != meta['vocab_fingerprint']:
      raise UserError(f'the checkpoint {ckpt.directory}/{start} was trained on records of another '
                      f'vocabulary than {records_dir}; point data.records at the records of the '
                      'run, or use a new --workdir')
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
    readers = saved
    position = ckpt_meta.get('data_position', start * d.batch_size // readers)
    log(f'resumed from {ckpt.directory}/{start} (input stream at example {position:,} of each of '
        f'{readers} reader(s))')
  elif source is not None:
    state = start_from(setup, state, source)
    log(f'initial weights: {source.describe()}')
  total_steps = config.train_steps
  train_ds = input_pipeline.make_dataset(records_dir, 'train', d.batch_size, seed=config.seed,
                                         shuffle_buffer=d.shuffle_buffer, position=position,
                                         readers=readers)
  eval_ds = input_pipeline.make_dataset(records_dir, 'eval', d.eval_batch_size, shuffle=False)
  batches = input_pipeline.global_batches(train_ds, data_sharding, records_dir)

  n_params = sum(x.size for x in jax.tree.leaves(state.params))
  tokens_per_step = d.batch_size * d.max_seq_length
  step_flops = flops_lib.step_matmul_flops(setup.model_cfg, d.max_seq_length, d.batch_size,
                                           setup.objective_cfg.max_predictions,
                                           config.objective.name)
  hosts = (f'{jax.process_count()} processes, ' if jax.process_count() > 1 else '')
  log(f'{n_params:,} parameters | {hosts}{mesh.devices.size} x {jax.devices()[0].device_kind}'
      f'{" (FSDP)" if setup.fsdp else ""} | batch {d.batch_size} x {d.max_seq_length}, '
      f'{readers} input reader(s) | {step_flops / 1e9:.1f} GFLOP/step | '
      f'steps {start} -> {total_steps}')

  writer = (metrics_lib.JsonlWriter(fs.join(workdir, 'metrics.jsonl')) if main else
            metrics_lib.NullWriter())
  board = (metrics_lib.TensorBoardWriter(fs.join(workdir, 'tensorboard')) if main else
           metrics_lib.NullWriter())
  peak, peak_source = flops_lib.mesh_peak(mesh.devices.flat, config.model.dtype)
  log(f'MFU against {peak / 1e12:.3g} TFLOP/s ({peak_source})')
  baseline = meta['unigram_xent']
  train_fn, eval_fn = _compile(train_fn, eval_fn, state, data_sharding, d, log)
  progress = metrics_lib.Progress(start, total_steps, tokens_per_step)  # timed from here
  plot_path = fs.join(workdir, 'curves.png')

  def report(step, sums):
    values = metrics_lib.summarize(sums)
    if values['nonfinite_steps']:
      first = int(jax.device_get(state.first_nonfinite))
      if config.nonfinite == 'stop':
        ckpt.close()
        last = ckpt.latest_step()
        raise UserError(
            f'step {first}: the loss, gradient norm or update is not finite (NaN or Inf); stopped '
            f'at step {step} without saving, and the last good checkpoint '
            f'{fs.join(ckpt.directory, str(last)) if last else "(none yet)"} is intact; '
            'lower optimizer.learning_rate, or set --config.nonfinite=skip to skip such steps')
      log(f'warning: skipped {int(values["nonfinite_steps"])} step(s) whose loss, gradient norm or '
          'update '
          f'was not finite (first at step {first}, {int(jax.device_get(state.nonfinite_steps))} '
          'in this run so far)')
    speed = progress.update(step)
    values['model_tflops_per_s'] = speed['steps_per_s'] * step_flops / 1e12
    values['mfu'] = values['model_tflops_per_s'] * 1e12 / peak
    log(f'{metrics_lib.stamp()}{metrics_lib.Progress.format(step, total_steps, speed)} | '
        f'MFU {100 * values["mfu"]:.1f}% '
        f'| {metrics_lib.format_line(values)}')
    writer.write({'split': 'train', 'step': step, **values, **speed})
    board.write(step, {**values, **speed}, 'train')

  def run_eval(step):
    values = evaluate(eval_fn, state.params, eval_ds, data_sharding, eval_batches, records_dir)
    log(f'{metrics_lib.stamp()}eval step {step} | {metrics_lib.format_line(values)} | unigram baseline '
        f'{baseline:.4f}')
    writer.write({'split': 'eval', 'step': step, 'unigram_baseline': baseline, **values})
    board.write(step, {'unigram_baseline': baseline, **values}, 'eval')
    if main:
      metrics_lib.plot_curves(metrics_lib.read_jsonl(writer.path), plot_path)
    return values

  sums, pending, values = None, None, {}
  def save(step, eval_values=None):
    if ckpt.latest_step() != step:
      ckpt.save(step, state, {'step': step, 'readers': readers,
                              'data_position': step * d.batch_size // readers,
                              'vocab_fingerprint': meta['vocab_fingerprint'],
                              'config': json.loads(config.to_json())}, metrics=eval_values)

  # One process: SIGTERM/SIGINT are caught here. Several: JAX's preemption service gets the notice
  # and Orbax names the step at which every process saves (`reached_preemption`).
  signals = _Signals(log, install=jax.process_count() == 1)
  # CPU devices of several processes (gloo): steps queued ahead of each other can interleave their
  # collectives and wait on each other forever, so each step is finished before the next is queued.
  one_at_a_time = jax.process_count() > 1 and jax.devices()[0].platform == 'cpu'
  # Every process has compiled and restored before the first exchange (see distributed.barrier).
  distributed.barrier('first_step')

  try:
    for step in range(start + 1, total_steps + 1):
      if signals.received or ckpt.reached_preemption(step - 1):
        step -= 1  # the steps done so far
        if pending is not None:
          report(*pending)
        save(step)
        ckpt.close()
        board.close()
        log(f'stopped by {signals.received or "preemption"} at step {step}: checkpoint '
            f'{ckpt.directory}/{step} saved; run the same command to resume')
        return {'step': step, 'preempted': signals.received or 'preemption'}
      state, step_sums = train_fn(state, next(batches))
      if one_at_a_time:
        jax.block_until_ready(step_sums)
      sums = step_sums if sums is None else accumulate(sums, step_sums)
      if pending is not None:  # read the previous interval's sums now that this step is queued
        report(*pending)
        pending = None
      if step % config.log_every == 0 or step == total_steps:
        pending, sums = (step, sums), None
      if step == total_steps:
        break
      eval_values = None
      if config.eval_every and step % config.eval_every == 0:
        if pending is not None:
          report(*pending)
          pending = None
        eval_values = run_eval(step)
      if ((config.save_every and step % config.save_every == 0)
          or (config.keep_best and eval_values is not None)):
        save(step, eval_values)
    if pending is not None:
      report(*pending)
    values = run_eval(total_steps)
    save(total_steps, values)
    best = ckpt.best_step()
    ckpt.close()
  except (input_pipeline.DamagedRecords, checkpoint_lib.DiskFull) as e:
    raise UserError(str(e)) from None
  finally:
    signals.restore()

  board.close()
  summary = {'step': total_steps, 'eval': values, 'unigram_baseline': baseline,
             'checkpoint': fs.join(ckpt.directory, str(total_steps))}
  if config.keep_best:
    summary['best_checkpoint'] = fs.join(ckpt.directory, str(best))
    log(f'best held-out {config.keep_best}: step {best} ({summary["best_checkpoint"]})')
  if main:  # strict JSON: a metric without a value (NaN) is written as null
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
  log(f'summary (held-out, {eval_batches} batches of {d.eval_batch_size}, no dropout): '
      + '; '.join(parts))
  log(f'final parameters: {summary["checkpoint"]} | curves: {plot_path}')
  return summary
