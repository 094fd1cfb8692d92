"""What a run leaves to read: progress lines, metrics.jsonl, TensorBoard event files and
curves.png (`Logs`, of one folder), and strict JSON for the files a run writes."""

import io
import itertools
import json
import math
import os
import socket
import struct
import sys
import time
from typing import Any


from electra_jax.storage import fs
from electra_jax.train import workdir as workdir_lib

try:  # TensorBoard's record format and protocol buffers (the package, not TensorFlow)
  from tensorboard.compat.proto import event_pb2
  from tensorboard.compat.proto import summary_pb2
  from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
  from tensorboard.summary.writer import record_writer
except ImportError:  # an image without it: metrics.jsonl and curves.png alone (Logs says so)
  record_writer = None

# What a progress line shows when its run names nothing else (a pre-training shows its objective's
# metrics, a fine-tuning its task's).
SHOWN = ('loss', 'learning_rate')

format_duration = fs.duration_text


def format_line(values: dict, keys=SHOWN) -> str:
  parts = []
  for k in keys:
    if k in values:
      v = values[k]
      parts.append(f'{k} {v:.2e}' if k == 'learning_rate' else f'{k} {v:.4f}')
  return ' | '.join(parts)


def stamp() -> str:
  """The wall-clock time that starts a progress line: 'HH:MM:SS '."""
  return time.strftime('%H:%M:%S ')


class Progress:
  """Tokens/s and ETA over the steps since the last report. The run's first step carries its
  start-up (the first run of each program, the input pipeline's start, a compilation): a speed
  measured on it alone says so (`startup`), and later intervals are measured from its end."""

  def __init__(self, start_step: int, total_steps: int, tokens_per_step: int):
    self.total, self.tokens_per_step = total_steps, tokens_per_step
    self.start = start_step
    self.last_step, self.last_time = start_step, time.perf_counter()
    self.first_done: tuple[int, float] | None = None  # (the first step, when it ended)
    self.startup = False  # the last speed is the first step's alone

  def update(self, step: int, keep: bool = False) -> dict:
    """The speed since the last report; `keep`: a look between reports, which leaves the
    reports' intervals as they were."""
    now = time.perf_counter()
    base_step, base_time = self.last_step, self.last_time
    if base_step == self.start and self.first_done and step > self.first_done[0]:
      base_step, base_time = self.first_done  # (the start-up left out)
    self.startup = base_step == self.start
    if self.first_done is None:
      self.first_done = (step, now)
    steps = max(step - base_step, 1)
    seconds = max(now - base_time, 1e-9)
    if not keep:
      self.last_step, self.last_time = step, now
    rate = steps / seconds
    return {'steps_per_s': rate, 'tokens_per_s': rate * self.tokens_per_step,
            'eta_s': (self.total - step) / rate}

  def format(self, step: int, speed: dict) -> str:
    if self.startup:
      return (f'step {step}/{self.total} | {speed["tokens_per_s"]:,.0f} tok/s over the first '
              'step, start-up included | ETA from the next line')
    return (f'step {step}/{self.total} | {speed["tokens_per_s"]:,.0f} tok/s | '
            f'ETA {format_duration(speed["eta_s"])}')


class JsonlWriter:
  """Appends one JSON object per line; each line is flushed as it is written."""

  def __init__(self, path: str):
    self.path = path

  def write(self, record: dict):
    with fs.open(self.path, 'a') as f:
      f.write(fs.json_text(record) + '\n')

  def resume(self, step: int, evaluated_again: bool = False):
    """Drops the records after `step` (a run resumed there writes them again), the evaluation at
    `step` where the run evaluates it again (a finished run re-run), and a last line a kill cut
    short; the file is rewritten whole."""
    if not fs.exists(self.path):
      return
    with fs.open(self.path) as f:
      lines = f.read().splitlines(keepends=True)
    kept = []
    for line in lines:
      try:
        record = json.loads(line)
      except ValueError:
        continue
      if not isinstance(record, dict) or record.get('step', 0) < step or (
          record.get('step', 0) == step and not (evaluated_again and
                                                 record.get('split') == 'eval')):
        kept.append(line if line.endswith('\n') else line + '\n')
    if len(kept) != len(lines):
      fs.write_atomic(self.path, ''.join(kept))


class NullWriter:
  """What the processes other than process 0 write: nothing."""

  path = None

  def write(self, *args, **kwargs):
    del args, kwargs

  def resume(self, step: int, evaluated_again: bool = False):
    del step, evaluated_again

  def close(self):
    pass


_FILES = itertools.count()  # event files made by this process


class TensorBoardWriter:
  """Scalars as TensorBoard event files (`tensorboard --logdir <workdir>/tensorboard`), written
  with the tensorboard package's protocol buffers and record format and our own files: no
  TensorFlow. The file of this run is made at its first write; each write is flushed."""

  def __init__(self, logdir: str):
    self.logdir = logdir
    self.file: Any = None
    self.records: Any = None

  def _open(self):
    fs.makedirs(self.logdir, exist_ok=True)
    name = (f'events.out.tfevents.{time.time():.0f}.{socket.gethostname()}.{os.getpid()}.'
            f'{next(_FILES)}')
    self.file = fs.open(fs.join(self.logdir, name), 'ab')
    self.records = record_writer.RecordWriter(self.file)
    self.records.write(event_pb2.Event(wall_time=time.time(),
                                       file_version='brain.Event:2').SerializeToString())

  def write(self, step: int, values: dict, prefix: str):
    if self.records is None:
      self._open()
    # `simple_value`: the form every reader knows, TensorBoard's UI (which migrates it to its
    # scalars plugin), its EventAccumulator, tf.compat.v1's summary_iterator and the tools on them.
    scalars = [summary_pb2.Summary.Value(tag=f'{prefix}/{name}', simple_value=value)
               for name, value in values.items()
               if isinstance(value, (int, float)) and math.isfinite(value)]
    self.records.write(event_pb2.Event(wall_time=time.time(), step=step, summary=(
        summary_pb2.Summary(value=scalars))).SerializeToString())
    self.records.flush()

  def resume(self, step: int, evaluated_again: bool = False):
    """Drops the events after `step` (and the evaluation at `step` where this run evaluates it
    again) from the event files of earlier runs, each file rewritten whole: every reader of them
    sees one value per step, whatever it does with steps out of order. Before this run's first
    write."""
    if not fs.isdir(self.logdir):
      return
    for name in sorted(fs.listdir(self.logdir)):
      if 'tfevents' not in name or name.startswith('.'):
        continue
      path = fs.join(self.logdir, name)
      records = list(_event_records(fs.read_bytes(path)))
      kept = [raw for raw, event in records if event.step < step or (event.step == step and not (
          evaluated_again and any(v.tag.startswith('eval/') for v in event.summary.value)))]
      if len(kept) < len(records) or sum(map(len, kept)) < fs.getsize(path):
        fs.write_atomic(path, b''.join(kept))  # (and a last record a kill cut short goes)

  def close(self):
    if self.file is not None:
      self.file.close()
      self.file = self.records = None


def _event_records(data: bytes):
  """(raw record, Event) of each whole record of an event file's bytes (TFRecord framing: length,
  its masked CRC-32C, the event, its masked CRC-32C); stops at a record cut short or damaged."""
  at = 0
  while at + 12 <= len(data):
    (length,) = struct.unpack('<Q', data[at:at + 8])
    end = at + 12 + length + 4
    payload = data[at + 12:at + 12 + length]
    if end > len(data) or struct.unpack('<I', data[end - 4:end])[0] != masked_crc32c(payload):
      return
    yield data[at:end], event_pb2.Event.FromString(payload)
    at = end


def read_jsonl(path: str) -> list[dict]:
  if not fs.exists(path):
    return []
  with fs.open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def plot_curves(records: list[dict], path: str, panels=None):
  """The `panels` (key, title[, baseline]) of the records against steps, train and held-out: the
  first six of them the records hold. With `baseline` true, the records' last `unigram_baseline`
  is drawn across the panel (a token loss in nats)."""
  import matplotlib  # (0.4 s to import: only to draw)
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  present = {k for r in records for k in r}
  panels = [p for p in panels or () if p[0] in present][:6] or [('loss', 'loss')]
  # Only the panels the run reports, at fixed margins: about half the time of a full grid laid out
  # by tight_layout.
  cols = min(len(panels), 3)
  rows = -(-len(panels) // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.5 * rows), squeeze=False)
  fig.subplots_adjust(left=0.07 if cols > 1 else 0.15, right=0.98, bottom=0.15 / rows,
                      top=1 - 0.08 / rows, wspace=0.25, hspace=0.4)
  for ax in axes.flat[len(panels):]:
    ax.remove()
  for ax, (key, title, *baseline) in zip(axes.flat, panels):
    for split, style in (('train', '-'), ('eval', 'o-')):
      pts = [(r['step'], r[key]) for r in records
             if r.get('split') == split and r.get(key) is not None]
      if pts:
        xs, ys = zip(*pts)
        ax.plot(xs, ys, style, label=split, markersize=3)
    ax.set_title(title)
    ax.set_xlabel('step')
    ax.grid(alpha=0.3)
    if any(baseline):
      base = [r['unigram_baseline'] for r in records if 'unigram_baseline' in r]
      if base:
        ax.axhline(base[-1], color='gray', linestyle='--', label='unigram baseline')
    ax.legend(fontsize=8)
  png = io.BytesIO()
  fig.savefig(png, dpi=90, format='png')
  plt.close(fig)
  fs.write_atomic(path, png.getvalue())


class Logs:
  """metrics.jsonl, TensorBoard events and curves.png of a folder (process 0; others write none).

  `tags` open every metrics.jsonl record (a fine-tuning's seed); `panels` are the curves drawn.
  curves.png is redrawn after an evaluation once `plot_every_s` have passed since the last
  drawing (or since the start), and when the run ends: a drawing holds the loop for about half a
  second of a CPU, which short runs and frequent evaluations would otherwise pay each time."""

  def __init__(self, folder: str, main: bool = True, tags: dict | None = None, panels=None,
               plot_every_s: float = 60.0):
    self.main, self.tags, self.panels = main, tags or {}, panels
    if main:
      fs.makedirs(folder, exist_ok=True)
    self.jsonl = (JsonlWriter(fs.join(folder, 'metrics.jsonl')) if main else
                  NullWriter())
    self.board = (TensorBoardWriter(fs.join(folder, 'tensorboard')) if main and record_writer
                  else NullWriter())
    if main and not record_writer:
      print(f'warning: no TensorBoard event files in {folder}: the tensorboard package is not '
            'installed (pip install tensorboard); metrics.jsonl and curves.png hold the same '
            'values', file=sys.stderr, flush=True)
    self.curves = fs.join(folder, 'curves.png')
    self.plot_every_s, self.plotted, self.stale = plot_every_s, time.monotonic(), False

  def write(self, split: str, step: int, values: dict, extra: dict | None = None):
    workdir_lib.confirm_held()  # (another run may hold the workdir now: then not a line more)
    self.jsonl.write({'split': split, **self.tags, 'step': step, **(extra or {}), **values})
    self.board.write(step, {**(extra or {}), **values}, split)
    if split == 'eval' and self.main:
      self.stale = True
      if time.monotonic() - self.plotted >= self.plot_every_s:
        self.plot()

  def plot(self):
    """curves.png from every record so far, if an evaluation came since the last drawing."""
    if self.stale:
      plot_curves(read_jsonl(self.jsonl.path), self.curves, self.panels)
      self.plotted, self.stale = time.monotonic(), False

  def resume(self, step: int, evaluated_again: bool = False):
    """Forgets what an earlier run in this folder logged after `step`, where this one starts (and
    its evaluation at `step`, where this one evaluates that step again: a finished run run
    again), so that every record of a step is its last run's."""
    self.jsonl.resume(step, evaluated_again)
    self.board.resume(step, evaluated_again)

  def close(self):
    self.plot()
    self.board.close()
