"""A records folder of a corpus of files built on Apache Beam: the same folder, byte for byte, as
the local build (prepare.py), on any Beam runner (the DirectRunner's processes, Dataflow, Flink,
Spark).

    pip install -e ".[beam]"
    python launch/prepare_data.py --corpus="$HOME/corpus/*.txt" --output=$HOME/records/mine \
        --vocab_size=30522 --runner=DirectRunner --direct_num_workers=4 \
        --direct_running_mode=multi_processing

The command's own process trains or copies the vocabulary and writes the plan as a local build
does; the pipeline's elements are the train shards still to write: each is written by
`prepare.write_parts` from its parts of the corpus alone, with its parts' held-out examples spooled
beside it, the elements spread over the runner's workers; then each eval shard still to write is
joined from its parts' spools (after every train shard: their outputs are its side input); the
command's process then combines the shards' counts into metadata.json. A shard is written under a
temporary name and renamed (in a bucket: the object appears whole), so a pipeline stopped and run
again writes only what is missing.
"""

import _thread
import contextlib
import io
import os
import signal
import socket
import sys
import threading
from typing import Callable

from electra_jax.data import prepare
from electra_jax.data import records

EXTRA = 'pip install -e ".[beam]"'


def _beam():
  try:
    import apache_beam
  except ImportError:
    raise ValueError(f'--runner builds the records on Apache Beam, which is not installed; '
                     f'{EXTRA} (or leave --runner out: --num_workers processes here)') from None
  return apache_beam


def options(runner: str, args: list[str]):
  """Beam's PipelineOptions of `--runner` and Beam's own flags `args`; ValueError (one sentence)
  for a flag Beam does not know."""
  beam = _beam()
  from apache_beam.options import pipeline_options
  from apache_beam.runners import runner as runners
  try:
    runners.create_runner(runner)
  except ValueError:
    raise ValueError(f'--runner={runner} is not a runner of Apache Beam {beam.__version__}; give '
                     'DirectRunner, DataflowRunner, FlinkRunner, SparkRunner, ... (python -c '
                     '"from apache_beam.runners import runner; runner.create_runner(\'X\')" lists '
                     'them)') from None
  except ImportError as e:
    raise ValueError(f'--runner={runner} needs a part of Apache Beam that is not installed '
                     f'({e}); pip install "apache-beam[gcp]" for Dataflow') from None
  from apache_beam.options import pipeline_options_validator
  given = pipeline_options.PipelineOptions([f'--runner={runner}', *args])
  unknown = sorted(set(_parsed(given, retain_unknown_options=True)) - set(_parsed(given)))
  if unknown:
    raise ValueError(f'--{unknown[0]} is neither a flag of this command nor a pipeline option of '
                     f'Apache Beam {beam.__version__}; check its spelling (python -m '
                     'apache_beam.options.pipeline_options lists them)')
  try:
    wrong = pipeline_options_validator.PipelineOptionsValidator(
        given, runners.create_runner(runner)).validate()
  except Exception as e:  # (Dataflow's looks for a staging bucket in Cloud Storage)
    raise ValueError(f'--runner={runner}: Apache Beam could not check its options ('
                     f'{type(e).__name__}: {" ".join(str(e).split())[:240]}); check that the '
                     'services they name can be reached (Dataflow: Cloud Storage, a gs:// '
                     '--temp_location)') from None
  if wrong:  # (what the pipeline would say when it starts, after the vocabulary)
    raise ValueError(f'--runner={runner}: Apache Beam finds its options incomplete or wrong ('
                     f'{"; ".join(" ".join(w.split()) for w in wrong)[:400]}); give the options '
                     'it names')
  _reachable(given)
  return given


def _parsed(given, **kwargs) -> dict:
  """`given`'s options as Beam parses them; ValueError (one sentence) for a value of the wrong
  type, where Beam's parser would print its usage of every option and exit."""
  printed = io.StringIO()
  try:
    with contextlib.redirect_stderr(printed):
      return given.get_all_options(**kwargs)
  except SystemExit:
    said = [l for l in printed.getvalue().splitlines() if ': error: ' in l]
    why = said[-1].split(': error: ', 1)[1] if said else 'a value it cannot parse'
    raise ValueError(f'Apache Beam refuses its options: {why}; give the option a value of its '
                     'type (python -m apache_beam.options.pipeline_options lists them)') from None


def _reachable(given):
  """ValueError (one sentence) where the runner's job service (--job_endpoint, --flink_master,
  --spark_master_url: host:port) refuses a connection within 10 s: a pipeline would wait on it
  for minutes."""
  every = _parsed(given)
  for option in ('job_endpoint', 'flink_master', 'spark_master_url'):
    where = str(every.get(option) or '')
    address = where.split('://')[-1].split('/')[0]
    host, _, port = address.rpartition(':')
    if not port.isdigit() or not host:  # ('[auto]', '[local]', 'embed': started by Beam itself)
      continue
    try:
      socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as e:
      raise ValueError(f'--{option}={where} cannot be reached ({e.strerror or e}); start the job '
                       'service there, or give the address where it listens') from None


def _write_train(index: int, out_dir: str, settings: records.Settings) -> int:
  prepare.write_parts(out_dir, settings, [index], log=lambda line: print(line, flush=True),
                      name=f'train shard {index}')
  return index


def _join_eval(index: int, out_dir: str, settings: records.Settings, parts: int, written) -> int:
  del written  # (there to order the joins after every train shard)
  prepare.join_eval_shards(out_dir, settings, parts, [index])
  return index


def writer(runner: str, args: list[str]) -> Callable:
  """prepare.records_folder's `writer` on Beam's `runner` with Beam's flags `args`, checked now:
  ValueError (one sentence) for Beam not installed or a flag it does not know."""
  pipeline_options = options(runner, args)
  return lambda out_dir, settings, train, joined, parts, log: write(
      out_dir, settings, train, joined, parts, runner, pipeline_options, log)


def end_workers(marker: str = 'sdk_worker_main'):
  """Kills this process's descendants running Beam's worker (`marker` in their command line): a
  failed pipeline's workers would otherwise outlive the command and print after its last line.
  Without /proc: nothing."""
  if not os.path.isdir('/proc'):
    return
  parents, commands = {}, {}
  for entry in os.listdir('/proc'):
    try:
      with open(f'/proc/{entry}/stat') as f:
        parents[int(entry)] = int(f.read().rsplit(')', 1)[1].split()[1])
      with open(f'/proc/{entry}/cmdline', 'rb') as f:
        commands[int(entry)] = f.read()
    except (OSError, IndexError, ValueError):
      continue  # not a process, or one that ended meanwhile
  mine = {os.getpid()}
  while True:
    more = {pid for pid, parent in parents.items() if parent in mine} - mine
    if not more:
      break
    mine |= more
  for pid in mine - {os.getpid()}:
    if marker.encode() in commands.get(pid, b''):
      with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


class _WorkerWatch:
  """While a pipeline runs: a worker process of the DirectRunner that ends with an error (killed,
  e.g. for memory) is reported by Beam in the thread that started it (local_job_service's
  `RuntimeError('Worker subprocess exited with return code 137')`), which ends that thread alone:
  the pipeline may then wait forever for the bundle the worker held. Such an exception in any
  thread (Python's `threading.excepthook`; the hook before it still prints the traceback)
  interrupts the command's main thread, with `lost` its message; where the main thread does not
  leave the pipeline within `grace_s` (blocked where an interrupt does not reach it), the
  process ends with `sentence(lost)` on stderr and exit status 2, as a one-sentence error does."""

  def __init__(self, sentence: Callable[[str], str], grace_s: float = 10.0):
    self.lost = ''
    self._sentence, self._grace_s = sentence, grace_s
    self._before = threading.excepthook
    self._done = threading.Event()

  def __enter__(self):
    threading.excepthook = self._hook
    return self

  def __exit__(self, *exc):
    self._done.set()
    threading.excepthook = self._before
    return False

  def _hook(self, args):
    self._before(args)
    said = str(args.exc_value)
    if 'exited with return code' in said and not self.lost:
      self.lost = said
      _thread.interrupt_main()
      threading.Thread(target=self._end_if_stuck, daemon=True).start()

  def _end_if_stuck(self):
    if self._done.wait(self._grace_s):
      return
    end_workers()
    sys.stderr.write(f'error: {self._sentence(self.lost)}\n')
    sys.stderr.flush()
    os._exit(2)


def write(out_dir: str, settings: records.Settings, train: list[int], joined: list[int],
          parts: int, runner: str, pipeline_options, log: Callable[[str], None]):
  """Writes the train shards `train` and then the eval shards `joined` of `out_dir` (a folder
  begun by prepare.records_folder: its plan and vocabulary in place) as one Beam pipeline run by
  `runner` with `pipeline_options`; ValueError (one sentence) for a runner that is unknown, not
  installed or not reachable."""
  beam = _beam()
  log(f'writing {len(train)} train and {len(joined)} eval shard(s) to {out_dir} on Apache Beam '
      f'({runner})')
  failed = lambda said: (f'--runner={runner}: the pipeline failed ({said}); the shards it '
                         'finished are kept: run the same command again to build the rest (a '
                         'worker killed for memory: fewer workers per machine)')
  watch = _WorkerWatch(failed)
  try:
    with watch, beam.Pipeline(options=pipeline_options) as p:
      written = (p | 'train shards' >> beam.Create(train) | 'spread' >> beam.Reshuffle()
                 | 'write train shards' >> beam.Map(_write_train, out_dir, settings))
      _ = (p | 'eval shards' >> beam.Create(joined)
           | 'join eval shards' >> beam.Map(_join_eval, out_dir, settings, parts,
                                            beam.pvalue.AsList(written)))
  except ValueError as e:
    if 'validation' in str(e).lower() or 'Missing' in str(e):
      raise ValueError(f'--runner={runner}: {" ".join(str(e).split())[:300]}; give the options '
                       'it names') from None
    raise
  except ImportError as e:
    raise ValueError(f'--runner={runner} needs a part of Apache Beam that is not installed '
                     f'({e}); pip install "apache-beam[gcp]" for Dataflow') from None
  except KeyboardInterrupt:
    if not watch.lost:
      raise
    end_workers()
    raise ValueError(failed(watch.lost)) from None
  except Exception as e:  # a worker that died ('Channel closed prematurely'), a failed bundle
    said = ' '.join(str(e).split()).rsplit('Traceback', 1)[-1].strip()[-300:]
    end_workers()
    raise ValueError(failed(f'{type(e).__name__}: {said}')) from None
