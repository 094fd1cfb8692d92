"""The training loop: any compiled step, any batches, any checkpoint contents.

    each step:   a stop notice?  -> save here, raise Stopped     (SIGTERM / Ctrl-C / preemption)
                 state, sums = step_fn(state, next(batches))      (queued on the device; with
                                                           several CPU devices in one process
                                                           finished first: queue_ahead)
                 the previous interval's sums are read now        (the device runs ahead meanwhile)
                 every log_every:   close the interval  -> report (NaN policy, progress line, logs)
                 the first step, and 30 s after the last line: a progress line of the interval
                                                           so far (nothing logged, nothing closed)
                 every eval_every:  evaluate            -> eval line, logs (curves.png: at
                                                           most once a minute, and at the end)
                 every save_every, or after an evaluation when the best is kept: save
    at the end:  the last report, an evaluation, a save

The application says what a step, a batch, an evaluation and a checkpoint's metadata are
(electra_jax/pretraining/run.py, electra_jax/finetune/run.py); nothing here knows about ELECTRA.
"""

import contextlib
import dataclasses
import os
import signal
import threading
import time
from typing import Any, Callable, Iterator

import jax

from electra_jax import Stopped, UserError
from electra_jax.train import metrics as metrics_lib
from electra_jax.storage import deadline
from electra_jax.storage import fs
from electra_jax.train import logs as logs_lib
from electra_jax.train import step as step_lib


# The longest silence between progress lines, whatever log_every is: a line comes at the first
# step after compiling, and then 30 s after the last at most (a look at the interval so far:
# metrics.jsonl and TensorBoard keep their records at every log_every).
LINE_EVERY_S = 30.0


@dataclasses.dataclass(frozen=True)
class Every:
  """A periodic trigger: true at the multiples of `n`; never for n = 0."""
  n: int

  def __call__(self, step: int) -> bool:
    return self.n > 0 and step % self.n == 0


@dataclasses.dataclass
class Plan:
  """When the loop reports, evaluates and saves, and how its lines look. The intervals and the
  non-finite policy are the run config's fields of the same names (declared there: `of`)."""
  total_steps: int
  log_every: int
  eval_every: int
  save_every: int
  nonfinite: str  # a step with a non-finite loss, gradient or update: 'stop' or 'skip'
  keep_best: bool = False  # save after every evaluation (the checkpointer keeps the best)
  tokens_per_step: int = 0
  prefix: str = ''  # of every progress and evaluation line ('seed 3 | ')
  fields: tuple | None = None  # values shown on the progress line (None: logs.SHOWN)
  eval_fields: tuple | None = None  # values shown on the evaluation line (None: logs.SHOWN)
  eval_note: str = ''  # appended to the evaluation line
  eval_record: dict = dataclasses.field(default_factory=dict)  # written with each evaluation


  @classmethod
  def of(cls, config, **values) -> 'Plan':
    """The plan with the fields `config` declares under the same names (log_every, eval_every,
    save_every, nonfinite), and `values` for the others (or to set one the config lacks)."""
    own = {f.name: getattr(config, f.name) for f in dataclasses.fields(cls)
           if hasattr(config, f.name) and f.name not in values}
    return cls(**own, **values)


class Signals:
  """SIGTERM/SIGINT -> `received` is set, and the loop saves a checkpoint and raises Stopped.

  A second signal ends the process at once. Installed only in the main thread (Python's rule).
  """

  def __init__(self, log, install: bool = True):
    self.received, self.log, self.previous = None, log, {}
    if install and threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGTERM, signal.SIGINT):
        self.previous[sig] = signal.signal(sig, self._handle)
      deadline.watch()  # (a signal that arrives while the main thread waits on a bucket)

  def _handle(self, signum, frame):
    del frame
    if self.received:  # the second one: no checkpoint, out now
      os._exit(128 + signum)
    self.received = signal.Signals(signum).name
    deadline.stop_taken_up()
    self.log(f'{self.received} received: saving a checkpoint after this step (again to quit now)')

  def restore(self):
    if self.previous:
      deadline.unwatch()
    for sig, handler in self.previous.items():
      signal.signal(sig, handler)
    self.previous = {}


def queue_ahead(devices: int | None = None) -> bool:
  """Whether steps of a program over `devices` devices (None: all of this process's) may be queued
  before the last one finished: not on CPU devices that reduce across each other, several in one
  process (fake devices, `--xla_force_host_platform_device_count`) or one in each of several
  processes (gloo). In one process XLA runs each device's part of a
  step on one shared thread pool and an in-process all-reduce holds its thread until every device
  arrives, so the parts of a later step can hold the threads a device still in an earlier step
  needs (XLA ends that deadlock after 40 s by aborting: "Termination timeout for `all reduce
  ...`"); across processes, the collectives of steps queued ahead can interleave and wait on each
  other forever. Costs the host's lead of a step there."""
  devices = jax.local_device_count() if devices is None else devices
  return not (jax.local_devices()[0].platform == 'cpu' and
              (devices > 1 or jax.process_count() > 1))


def _devices(state) -> int | None:
  """How many devices the steps on `state` run on (its arrays' devices together)."""
  spanned = set().union(*(x.sharding.device_set for x in jax.tree.leaves(state)
                          if isinstance(x, jax.Array)))
  return len(spanned) or None


@dataclasses.dataclass
class Result:
  state: Any
  step: int  # the last step done
  eval: dict  # the last evaluation


def run(plan: Plan, state: step_lib.TrainState, step_fn: Callable, batches: Iterator, start: int,
        *, evaluate: Callable[[int, Any], dict], ckpt, meta: Callable[[int], dict],
        logs: logs_lib.Logs, log=print, annotate: Callable[[dict, dict], str] | None = None,
        signals: Signals | None = None) -> Result:
  """Trains from step `start` to `plan.total_steps` (the module docstring). `evaluate(step, state)`
  returns held-out values; `meta(step)` what a checkpoint carries besides the state;
  `annotate(values, speed)` may add values to a report and returns text for its line."""
  progress = logs_lib.Progress(start, plan.total_steps, plan.tokens_per_step)
  logs.resume(start, evaluated_again=start >= plan.total_steps)  # one record per step
  signals = signals or Signals(log, install=jax.process_count() == 1)
  log_trigger, eval_trigger, save_trigger = Every(plan.log_every), Every(plan.eval_every), Every(
      plan.save_every)
  sums, pending = None, None
  one_at_a_time = not queue_ahead(_devices(state))
  line = _Lines(plan, progress, annotate, log)

  def report(step, sums):
    values = metrics_lib.summarize(sums)
    if values['nonfinite_steps']:
      _nonfinite(plan, state, step, values, ckpt, log)
    speed = line(step, values)  # (the annotation adds to the values)
    logs.write('train', step, {**values, **speed})

  def run_eval(step):
    values = evaluate(step, state)
    if not values:  # nothing held out
      return values
    shown = logs_lib.format_line(values, *([plan.eval_fields] if plan.eval_fields else []))
    log(f'{logs_lib.stamp()}{plan.prefix}eval step {step} | {shown}{plan.eval_note}')
    logs.write('eval', step, values, plan.eval_record)
    return values

  def save(step, eval_values=None):
    if ckpt.latest_step() != step:
      ckpt.save(step, state, meta(step), metrics=eval_values)

  try:
    for step in range(start + 1, plan.total_steps + 1):
      if signals.received or ckpt.reached_preemption(step - 1):
        if pending is not None:
          report(*pending)
        save(step - 1)
        ckpt.close()
        logs.close()
        log(f'stopped by {signals.received or "preemption"} at step {step - 1}: checkpoint '
            f'{ckpt.directory}/{step - 1} saved; run the same command to resume')
        raise Stopped(signals.received or 'preemption', step - 1)
      state, step_sums = step_fn(state, next(batches))
      if one_at_a_time:
        jax.block_until_ready(step_sums)
      sums = step_sums if sums is None else step_lib.accumulate(sums, step_sums)
      if pending is not None:  # read the previous interval's sums now that this step is queued
        report(*pending)
        pending = None
      if log_trigger(step) or step == plan.total_steps:
        pending, sums = (step, sums), None
      elif step == start + 1 or line.due():  # a look, not a record (waits for this step)
        line(step, metrics_lib.summarize(sums), keep=True)
      if step == plan.total_steps:
        break
      eval_values = None
      if eval_trigger(step):
        if pending is not None:
          report(*pending)
          pending = None
        eval_values = run_eval(step)
      if save_trigger(step) or (plan.keep_best and eval_values is not None):
        save(step, eval_values)
    if pending is not None:
      report(*pending)
    values = run_eval(plan.total_steps)
    save(plan.total_steps, values)
    ckpt.wait()
  except BaseException:  # the save under way ends whole (another run's lock: then nothing more)
    _close_quietly(ckpt)
    raise
  finally:
    signals.restore()
  logs.close()
  return Result(state, plan.total_steps, values)


def _close_quietly(ckpt):
  """Waits for the checkpoint being saved as the loop ends in an error: its own error, if any, is
  left to the next run's check of the folder (the loop's is the one to tell)."""
  with contextlib.suppress(Exception):
    ckpt.close()


class _Lines:
  """The progress lines: `(step, values)` logs the line of the steps to `step` since the last
  report (`keep`: a look between reports, which leaves their interval open) and returns the
  speed; `due()` says whether LINE_EVERY_S have passed since the last line."""

  def __init__(self, plan: Plan, progress, annotate, log):
    self.plan, self.progress, self.annotate, self.log = plan, progress, annotate, log
    self.last = time.monotonic()

  def due(self) -> bool:
    return time.monotonic() - self.last >= LINE_EVERY_S

  def __call__(self, step: int, values: dict, keep: bool = False) -> dict:
    plan = self.plan
    speed = self.progress.update(step, keep)
    note = self.annotate(values, speed) if self.annotate else ''
    shown = logs_lib.format_line(values, *([plan.fields] if plan.fields else []))
    self.log(f'{logs_lib.stamp()}{plan.prefix}'
             f'{self.progress.format(step, speed)} | {note}{shown}')
    self.last = time.monotonic()
    return speed


def _nonfinite(plan, state, step, values, ckpt, log):
  first = int(jax.device_get(state.first_nonfinite))
  if plan.nonfinite == 'stop':
    ckpt.close()
    last = ckpt.latest_step()
    raise UserError(
        f'step {first}: the loss, gradient norm or update is not finite (NaN or Inf); stopped '
        f'at step {step} without saving, and the last good checkpoint '
        f'{fs.join(ckpt.directory, str(last)) if last else "(none yet)"} is intact; '
        'lower optimizer.learning_rate, or set --config.nonfinite=skip to skip such steps')
  log(f'warning: skipped {int(values["nonfinite_steps"])} step(s) whose loss, gradient norm or '
      f'update was not finite (first at step {first}, '
      f'{int(jax.device_get(state.nonfinite_steps))} in this run so far)')
