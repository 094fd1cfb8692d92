"""Checkpoints through Orbax: the train state plus a small JSON of facts about the run.

Saves are asynchronous: `save` returns once the arrays are copied off the devices, and the files are
written in a background thread while training goes on. Each step is written to a temporary directory
and renamed when complete (Orbax's atomicity), so a crash never leaves a checkpoint that looks
finished. The last `keep` checkpoints are kept, plus, when `best_metric` names an evaluation metric,
the one with its best value (checkpoints saved with evaluation metrics carry them).
"""

import contextlib
import functools
import inspect
import json
import math
import os
import re
import sys
import traceback
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers as policies

from electra_jax import UserError
from electra_jax.platform import private
from electra_jax.storage import deadline
from electra_jax.storage import fs
from electra_jax.train import distributed
from electra_jax.train import workdir as workdir_lib


# Orbax writes a replicated array in slices, one per replica ("replica-parallel"), which spreads
# the writing of a large array over the hosts. For a small one each slice is an operation of its
# own on the device, compiled for its shape: a replicated state of 8 devices costs thousands of
# slice dispatches a save and, in a fresh process, seconds of compiling them before the first save
# returns. Slices of less than this many bytes are not worth it: one replica writes such an array
# whole. Large arrays (the embedding table, the feed-forward kernels) are still sliced.
MIN_REPLICA_SLICE_BYTES = 1 << 20


# What a failed read of a damaged checkpoint leaves behind: the reads Orbax had started go on, and
# as each finishes (while the failure unwinds, or later), its callback finds Orbax's event loop
# closed (a RuntimeError raised in asyncio) or its coroutine's error is never retrieved; Python
# prints each as an "exception ignored" traceback, in the middle of the run's output or after a
# command's one-sentence error. A read allows that many to be dropped, two per array it reads,
# from its start, and gives the allowance back when it succeeds (`_reading`); every other
# unraisable exception, and any beyond the allowance, go to the hook there was.
_late_reads: dict[str, Any] = {'allowed': 0, 'previous': None}


def _unraisable(unraisable):
  e, origin = unraisable.exc_value, unraisable.object
  frames = traceback.extract_tb(unraisable.exc_traceback) if unraisable.exc_traceback else []
  closed = (isinstance(e, RuntimeError) and str(e) == 'Event loop is closed' and frames
            and f'{os.sep}asyncio{os.sep}' in frames[-1].filename)  # raised by asyncio itself
  orbax_read = inspect.iscoroutine(origin) and 'orbax' in origin.cr_code.co_filename
  if (closed or orbax_read) and _late_reads['allowed'] > 0:
    _late_reads['allowed'] -= 1
    return
  _late_reads['previous'](unraisable)


@contextlib.contextmanager
def _reading(arrays: int):
  """A read of a checkpoint of `arrays` arrays: the late errors of its reads are expected, up to
  two per array, until it succeeds."""
  if _late_reads['previous'] is None:
    _late_reads['previous'] = sys.unraisablehook
    sys.unraisablehook = _unraisable
  _late_reads['allowed'] += 2 * arrays
  yield
  _late_reads['allowed'] = max(0, _late_reads['allowed'] - 2 * arrays)  # read whole: none late


@functools.cache
def _use_replica_slices_for_large_arrays_only():
  """Orbax's array handler with MIN_REPLICA_SLICE_BYTES, registered when the first Checkpointer is
  made (another Orbax, whose handler takes other arguments, keeps its default)."""
  store = private.array_metadata_store()
  if store is None:  # (another Orbax: its default handler is kept)
    return
  try:
    handler = ocp.type_handlers.ArrayHandler(
        array_metadata_store=store.Store(),
        min_slice_bytes_for_replica_parallel=MIN_REPLICA_SLICE_BYTES)
  except TypeError:
    return
  ocp.type_handlers.register_type_handler(jax.Array, handler, override=True)


class DiskFull(ValueError):
  """A checkpoint could not be written: its disk is full."""


class ShapeMismatch(ValueError):
  """The checkpoint holds a model of other shapes than the one it is restored into."""


def _flat_shapes(tree) -> dict[str, tuple]:
  def name(key):
    for attr in ('key', 'name', 'idx'):
      if hasattr(key, attr):
        return str(getattr(key, attr))
    return str(key)
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {'/'.join(name(k) for k in path): tuple(leaf.shape) for path, leaf in leaves}


def describe_mismatch(saved: dict, wanted: dict, limit: int = 3) -> str:
  """The first `limit` differences between two {name: shape} maps, in words."""
  diffs = []
  for key in sorted(set(saved) | set(wanted)):
    if key not in wanted:
      diffs.append(f'{key} only in the checkpoint')
    elif key not in saved:
      diffs.append(f'{key} not in the checkpoint')
    elif saved[key] != wanted[key]:
      diffs.append(f'{key} {saved[key]} in the checkpoint, {wanted[key]} in this config')
  more = f' and {len(diffs) - limit} more' if len(diffs) > limit else ''
  return '; '.join(diffs[:limit]) + more


def _text(e: BaseException) -> str:
  """An exception's message on one line, without object reprs or pointers to them."""
  text = re.sub(r'\s*See full TensorStore details:.*', '', str(e), flags=re.S)
  text = re.sub(r'<(bound method|function|built-in)[^>]*>+', '', text)
  return ' '.join(text.split()).strip(' ;:,.')


def reason(e: BaseException) -> str:
  """An error of reading a checkpoint in a few words (no object reprs, one line): the error and,
  where it wraps another (Orbax around TensorStore), the innermost one, which names the file."""
  inner: BaseException = e
  while (behind := inner.__cause__ or inner.__context__) is not None:
    inner = behind
  if inner is not e and _text(inner):
    e = inner
  return f'{type(e).__name__}: {_text(e)[:300]}'


class Checkpointer:
  """Saves and restores {state, meta} under `<workdir>/checkpoints/<step>`."""

  def __init__(self, directory: str, keep: int = 3, best_metric: str = '',
               best_mode: str = 'max'):
    _use_replica_slices_for_large_arrays_only()
    self.directory = fs.abspath(directory)
    if fs.exists(self.directory) and not fs.isdir(self.directory):
      raise UserError(f'{self.directory} is a file where the run keeps its checkpoints (a folder); '
                      'move the file away')
    self.best_metric = best_metric
    policy = policies.LatestN(n=keep)
    best_fn = None
    if best_metric:
      best_fn = lambda metrics: metrics[best_metric]
      policy = policies.AnyPreservationPolicy([policy, policies.BestN(
          get_metric_fn=best_fn, reverse=best_mode == 'min', n=1,
          keep_checkpoints_without_metrics=False)])
    registry = ocp.handlers.DefaultCheckpointHandlerRegistry()
    for name, save, restore, handler in (
        ('state', ocp.args.StandardSave, ocp.args.StandardRestore, ocp.StandardCheckpointHandler),
        ('meta', ocp.args.JsonSave, ocp.args.JsonRestore, ocp.JsonCheckpointHandler)):
      handler = handler()  # one handler per item, both directions (metadata reads need it)
      registry.add(name, save, handler)
      registry.add(name, restore, handler)
    self.manager = ocp.CheckpointManager(
        self.directory, handler_registry=registry,
        options=ocp.CheckpointManagerOptions(
            preservation_policy=policy, best_fn=best_fn, best_mode=best_mode, create=True,
            enable_async_checkpointing=True))

  @classmethod
  def of_run(cls, workdir: str, config, best_mode: str = 'max') -> 'Checkpointer':
    """The checkpoints of the pre-training run of `config` in `workdir`: its number kept and the
    held-out metric its best one is kept by, better when higher (`best_mode` 'max') or lower
    ('min', which its objective declares)."""
    return cls(fs.join(workdir, 'checkpoints'), keep=config.keep_checkpoints,
               best_metric=config.keep_best, best_mode=best_mode)

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def best_step(self) -> int | None:
    """The step of the best checkpoint by `best_metric` (None without one)."""
    if not self.best_metric:
      return None
    self.manager.wait_until_finished()
    return self.manager.best_step()

  def all_steps(self) -> list[int]:
    return list(self.manager.all_steps())

  def save(self, step: int, state, meta: dict, metrics: dict | None = None):
    """Starts an asynchronous save; `metrics` (evaluation values) rank it for `best_metric`.

    A save that fails for a full disk (this one, or the previous one still being written) raises
    DiskFull naming the space; its unfinished folder is deleted and the checkpoints saved before
    are untouched."""
    workdir_lib.confirm_held()  # (another run may hold the workdir now: then no save)
    if metrics is not None and self.best_metric:
      metrics = {k: float(v) for k, v in metrics.items() if math.isfinite(v)}
    if not self.best_metric or not metrics or self.best_metric not in metrics:
      metrics = None  # not ranked: kept while among the latest only
    self._state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    with self._space():
      self.manager.wait_until_finished()  # (Orbax would wait for the previous save here anyway)
    free = fs.free_bytes(self.directory)
    if free is not None and free < self._state_bytes:  # refused before a byte is written
      raise DiskFull(self._disk_full())
    with self._space():
      self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                      meta=ocp.args.JsonSave(meta)),
                        metrics=metrics)

  def _disk_full(self) -> str:
    free = fs.free_bytes(self.directory)
    size = getattr(self, '_state_bytes', 0)
    complete = list(self.manager.all_steps())
    kept = (f'the last complete checkpoint {self.directory}/{max(complete)} is untouched; '
            if complete else '')
    return (f'the disk holding {self.directory} is full: a checkpoint of this run takes about '
            f'{fs.size_text(size)}' + (f' and {fs.size_text(free)} are free' if free is not None
                                       else '') + f'; {kept}free space (or keep fewer checkpoints '
            'with --config.keep_checkpoints) and run the same command again to continue')

  @contextlib.contextmanager
  def _space(self):
    """Orbax's and TensorStore's 'No space left on device' as DiskFull, in one sentence; a wait on
    a bucket watched (storage/deadline.py)."""
    try:
      with deadline.waiting(self.directory):
        yield
    except Exception as e:
      if not fs.no_space(e):
        raise
      self._remove_unfinished()
      raise DiskFull(self._disk_full()) from None

  def _remove_unfinished(self):
    """Deletes the temporary folders of saves that failed, so their space is free again and the
    folder holds complete checkpoints only (Orbax would delete them at the next start)."""
    with contextlib.suppress(Exception):
      self.manager.wait_until_finished()  # (raises the failure again; it is being handled)
    if jax.process_index() != 0 or not fs.isdir(self.directory):
      return
    for name in fs.listdir(self.directory):
      if '.orbax-checkpoint-tmp' in name:
        fs.rmtree(fs.join(self.directory, name), ignore_errors=True)

  def reached_preemption(self, step: int) -> bool:
    """True at the step all processes agreed to stop at after a preemption notice (multi-host)."""
    return self.manager.reached_preemption(step)

  def check_shapes(self, step: int, target_state):
    """Raises ShapeMismatch when checkpoint `step` holds parameters of other names or shapes."""
    try:
      with _reading(self._arrays(step)):
        saved = _flat_shapes(self.manager.item_metadata(step)['state'].tree['params'])
    except Exception:
      return  # metadata that cannot be read: the restore reports the checkpoint as damaged
    wanted = _flat_shapes(target_state.params)
    if saved != wanted:
      raise ShapeMismatch(
          f'the checkpoint {self.directory}/{step} holds a model of other shapes than this config '
          f'({describe_mismatch(saved, wanted)}); run with the config of that run, or use a new '
          '--workdir')

  def restore(self, step: int, target_state, only: tuple[str, ...] = ()):
    """Restores onto `target_state`'s structure, shapes, dtypes and shardings. `only`: the names
    of the parameters' top-level parts to read, and nothing else (a fine-tuning's start reads the
    discriminator, not the generator or the optimizer's moments); the state returned then holds
    those parameters and the target's other fields as given."""
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target_state)
    with _reading(self._arrays(step)):
      if only:
        return self._restore_params(step, abstract, only), self.meta(step)
      out = self.manager.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    return out['state'], out['meta']

  def _restore_params(self, step: int, abstract, only: tuple[str, ...]):
    """Orbax's partial restore of the parameters `only` of checkpoint `step` (the item's handler
    reads whole trees, so its folder is read by a tree handler of its own)."""
    wanted = {'params': {k: v for k, v in abstract.params.items() if k in only}}
    reader = ocp.Checkpointer(ocp.PyTreeCheckpointHandler())
    args = ocp.args.PyTreeRestore(
        wanted, restore_args=ocp.checkpoint_utils.construct_restore_args(wanted),
        partial_restore=True)
    try:
      read = reader.restore(self.manager.directory / str(step) / 'state', args=args)
    finally:
      reader.close()
    return abstract.replace(params=read['params'])

  def meta(self, step: int) -> dict:
    """The meta saved with the checkpoint of `step`."""
    return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))['meta']

  def restore_arrays(self, step: int):
    """(state as nested dicts of arrays on one device, meta) of checkpoint `step`, read by its own
    metadata: no model or optimizer needs to be built (exports, inspection)."""
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    with _reading(self._arrays(step)):
      abstract = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                              self.manager.item_metadata(step)['state'].tree)
      out = self.manager.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    return out['state'], out['meta']

  def _arrays(self, step: int) -> int:
    """How many arrays checkpoint `step` holds, by its Orbax metadata file (1,000 where that
    cannot be read): how many reads a read of it starts."""
    try:
      with fs.open(fs.join(self.directory, str(step), 'state', '_METADATA')) as f:
        return len(json.load(f)['tree_metadata'])
    except (OSError, ValueError, KeyError, TypeError):
      return 1000

  def restore_latest(self, target_state, log=print, afresh: bool = False,
                     only: tuple[str, ...] = ()):
    """(step, state, meta) of the newest checkpoint that reads back whole; (0, target, {}) if none.

    Raises ShapeMismatch when a checkpoint holds a model of other shapes. When checkpoints exist
    but none can be read: with `afresh` (a run that can train again) they are all moved aside and
    (0, target, {}) returned, else ValueError. `only`: as `restore`'s.

    A damaged checkpoint (a truncated or missing file) is reported and the one before it is used;
    the damaged ones are moved aside to `<step>.damaged` (kept for inspection), so that the steps
    trained again are saved again under their own numbers.
    """
    damaged, rotated = [], 0
    steps = sorted(self.manager.all_steps(), reverse=True)
    while steps:
      step = steps.pop(0)
      try:
        state, meta = self.restore(step, target_state, only)
      except Exception as e:
        # Orbax refuses arrays of other shapes than the target's: a model of other shapes is
        # said as such (its metadata compared here, not before every read: 0.5 s of a Base start)
        self.check_shapes(step, target_state)
        if not fs.isdir(fs.join(self.directory, str(step))) and rotated < 10:
          # deleted while read: a run still writing here keeps its newest checkpoints only
          rotated += 1
          log(f'note: checkpoint {self.directory}/{step} was deleted while it was read (the run '
              'writing there keeps its newest checkpoints only); reading the newest again')
          self.manager.reload()
          steps = [s for s in sorted(self.manager.all_steps(), reverse=True) if s not in damaged]
          continue
        log(f'warning: checkpoint {self.directory}/{step} cannot be read ({reason(e)}); trying '
            'the one before it')
        damaged.append(step)
        continue
      self._set_aside(damaged, log)
      return step, state, meta
    if damaged and afresh:
      self._set_aside(damaged, log)
      log(f'warning: no checkpoint in {self.directory} could be read; starting from step 0')
    elif damaged:
      raise ValueError(f'no checkpoint in {self.directory} can be read (see the warnings above); '
                       'run the command that wrote them again: it moves the damaged ones aside '
                       'and trains afresh')
    return 0, target_state, {}

  def _set_aside(self, steps: list[int], log):
    """Moves the folders of damaged checkpoints `steps` to `<step>.damaged[-k]`."""
    if not steps:
      return
    for step in steps if jax.process_index() == 0 else ():
      source = fs.join(self.directory, str(step))
      target = fs.join(self.directory, f'{step}.damaged')
      k = 1
      while fs.exists(target):
        target, k = fs.join(self.directory, f'{step}.damaged-{k}'), k + 1
      fs.move_tree(source, target)
      log(f'warning: moved the damaged checkpoint to {target}; step {step} will be saved again')
    self._sync('set_aside')
    self.manager.reload()

  def _sync(self, name: str):
    distributed.barrier(f'checkpoint_{name}')

  def wait(self):
    with self._space():
      self.manager.wait_until_finished()

  def close(self):
    with self._space():
      self.manager.wait_until_finished()
      self.manager.close()


def read_kept(directory: str, step: int | None, what: str):
  """(step, state as numpy arrays, meta) of checkpoint `step` (None: the latest) under `directory`,
  for a reader beside the run (an export): the latest of a run still writing there may be deleted
  while it is read (the run keeps its newest ones): then the newest is read again. `what`: the
  run, as the sentences name it ('pre-training', 'fine-tuning')."""
  ckpt = Checkpointer(directory)
  latest = step is None
  try:
    for _ in range(10):
      step = ckpt.latest_step() if latest else step
      if step is None or step not in ckpt.all_steps():
        steps = ckpt.all_steps()
        raise UserError(f'{directory} holds no checkpoint{f" of step {step}" if step else ""} '
                        f'(it has {steps or "none"}); ' + (
                            'give one of those with --step, or leave --step out for the latest'
                            if steps else f'let the {what} save one first'))
      try:
        state, meta = ckpt.restore_arrays(step)
        break
      except Exception as e:
        if not fs.isdir(fs.join(directory, str(step))):
          if latest:
            ckpt.manager.reload()
            continue
          raise UserError(f'the checkpoint {directory}/{step} was deleted while it was read (the '
                          f'{what} writing there keeps its newest checkpoints only); export '
                          'the latest step (no --step), or one it keeps') from None
        others = [s for s in ckpt.all_steps() if s != step]
        raise UserError(
            f'the checkpoint {directory}/{step} cannot be read ({reason(e)}); run '
            f'the {what} command again to rewrite it'
            + (f', or export another step with --step (it has {others})' if others else '')
        ) from None
    else:
      raise UserError(f'the checkpoints in {directory} kept being deleted while they were read; '
                      f'export once the {what} writing there has stopped')
  finally:
    ckpt.close()
  return step, jax.tree.map(np.asarray, state), meta
