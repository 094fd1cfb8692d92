"""What every launch script shares: flag parsing whose errors read as one sentence, and an exit
code.

A mistake the user can fix (unknown config key, bad value, missing file, ...) prints
`error: <one sentence>` on stderr and exits with status 2; nothing is left half-written.
"""

import errno
import functools
import gc
import importlib.util
import os
import re
import signal
import sys
import traceback
from typing import Callable

from absl import app
from absl import flags
from absl import logging

from electra_jax import Stopped, UserError
from electra_jax import fields as fields_lib
from electra_jax.config import files as config_files
from electra_jax.config import pretraining as pretraining_config
from electra_jax.finetune import config as finetune_config
from electra_jax.hardware import compile_cache
from electra_jax.platform import host_memory, private
from electra_jax.storage import fs

_COMPILATION_CACHE = flags.DEFINE_string(
    'compilation_cache', compile_cache.DEFAULT_ROOT,
    'where compiled programs are kept for the next run that compiles them (JAX\'s persistent '
    'cache, keyed by the program, the jax version and the devices; a folder per jax version and '
    'host under it); \'\' turns it off; JAX_COMPILATION_CACHE_DIR, where set, is used instead')


def _standard_streams():
  """A standard output or error that was closed (`command >&-`) goes to /dev/null: the lines are
  dropped, and no file the run opens takes its descriptor (C libraries still write there)."""
  for fd, name in ((1, 'stdout'), (2, 'stderr')):
    try:
      os.fstat(fd)
    except OSError:
      null = os.open(os.devnull, os.O_WRONLY)
      if null != fd:
        os.dup2(null, fd)
        os.close(null)
      setattr(sys, name, open(fd, 'w', closefd=False))


_standard_streams()


def _explain(error: BaseException) -> str:
  """One sentence for a flag absl refused (its parsers' messages, pinned by tests)."""
  text = ' '.join(str(error).split())
  if text.startswith('invalid literal for int()'):
    return 'give an integer'
  if text.startswith('could not convert string to float'):
    return 'give a number'
  return text


class ConfigFile:
  """A flag naming a config file (`path[:variant]`, the file's get_config(variant)) and the
  command line's `--<name>.<field>=<value>` overrides of it, read once when the flags are parsed:
  `.value` is the config (locked: no new fields), `.overridden` the full paths set."""

  def __init__(self, name: str, default: str | None, help_text: str, kind: str):
    self.name, self.kind = name, kind
    self.file = flags.DEFINE_string(name, default, help_text, module_name=sys.argv[0])
    self.value = None
    self.overridden: list[str] = []
    self._overrides: list[str] = []

  @property
  def present(self) -> bool:
    """Whether the command line names the file (rather than the flag's default)."""
    return bool(flags.FLAGS[self.name].present)

  def load(self, overrides: list[str]):
    spec = self.file.value
    if spec is None and overrides:
      raise UserError(
          f'--{self.name}.{overrides[0]} sets a field of the --{self.name} file, and the command '
          f'names none; give --{self.name}=<its file> too' + (
              ', or predict on a new file with launch/predict.py --workdir=<the fine-tuning> '
              '--input=<the file>' if flags.FLAGS.get_flag_value('mode', None) == 'predict'
              else ''))
    if spec is not None:
      self.value, self.overridden = config_files.config_from(spec, overrides, self.name,
                                                             self.kind)
      self._overrides = list(overrides)

  def variant(self, variant: str):
    """The same file's `variant` (its get_config(variant)) with the same overrides."""
    path = (self.file.value or '').partition(':')[0]
    return config_files.config_from(f'{path}:{variant}', self._overrides, self.name,
                                    self.kind)[0]


_CONFIG_FILES: dict[str, ConfigFile] = {}


def define_config_file(name: str, default: str | None, help_text: str,
                       kind: str = 'pre-training') -> ConfigFile:
  """A --<name> flag taking a config file of `kind` ('pre-training' or 'fine-tuning': a file of
  the other kind is one sentence) and its --<name>.<field> overrides (ConfigFile)."""
  _CONFIG_FILES[name] = ConfigFile(name, default, help_text, kind)
  return _CONFIG_FILES[name]


# absl's help flags (which exit 1) and ours: each prints and ends the command with status 0
HELP = ('--help', '-help', '-h', '-?', '--helpshort', '--helpfull', '--help_config')


def _help(asked: str):
  """The command's help (its docstring and flags; --helpfull: every module's flags) or, for
  --help_config, every field its config files declare, with its default and meaning."""
  if asked == '--help_config':
    if not _CONFIG_FILES:
      print(f'{os.path.basename(sys.argv[0])} takes no config file: --help lists its flags')
    for name, config_file in _CONFIG_FILES.items():
      section = (finetune_config.CONFIG if config_file.kind == 'fine-tuning' else
                 pretraining_config.CONFIG)
      print(f'--{name} ({config_file.kind} config): each field is set by --{name}.<field>=<value>'
            ' (or by its own name where only one section has it); the defaults below are '
            f'before the file sets its own\n')
      print(fields_lib.help_text(section))
    return
  app.usage(shorthelp=asked != '--helpfull', writeto_stdout=True)
  if _CONFIG_FILES:
    print(f'\n--help_config lists every field of {", ".join(f"--{n}" for n in _CONFIG_FILES)} '
          'with its default and meaning.')


def declared_flags(declarations: dict, only: tuple = (), **own_defaults) -> dict:
  """absl flags of declared settings ({name: config.fields.Field}; `only` those named): each
  named after its field, its help the declaration's meaning, its default the declaration's or,
  where a command states its own in `own_defaults`, that one. {name: the flag's holder}."""
  define: dict[type, Callable] = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer,
                                  float: flags.DEFINE_float, str: flags.DEFINE_string}
  holders = {}
  for name, field in declarations.items():
    if only and name not in only:
      continue
    default = own_defaults.pop(name, field.default)
    holders[name] = define[type(field.default)](name, default, field.doc, module_name=sys.argv[0])
    if field.valid:  # the declaration's range, checked as the flags are parsed
      flags.register_validator(name, functools.partial(_declared_value, field.valid))
  if own_defaults:
    raise ValueError(f'no declared setting named {", ".join(own_defaults)}')
  return holders


def _declared_value(valid, value) -> bool:
  problem = valid(value)
  if problem:  # (absl names the flag and its value before it)
    raise flags.ValidationError(problem)
  return True


_PASS_ON = False  # (set by pass_on_unknown_flags)


def pass_on_unknown_flags():
  """A command whose unknown flags reach its `main` among its arguments (to pass them on, e.g.
  Apache Beam's pipeline options), instead of ending it in one sentence."""
  global _PASS_ON
  _PASS_ON = True


def _home(arg: str) -> str:
  """`--flag=~/x` with `~` expanded as the shell expands `--flag ~/x` (bash leaves a `~` after
  `=` as it is, and the run would write into a folder named `~` of the current folder)."""
  match = re.match(r'(--[\w.-]+=)(~[^/]*)(/.*)?$', arg)
  if not match:
    return arg
  home = os.path.expanduser(match.group(2))
  return arg if home == match.group(2) else match.group(1) + home + (match.group(3) or '')


def _parse(argv: list[str]) -> list[str]:
  """absl's flags parsed, then each config file read with its overrides; one sentence, exit 2."""
  overrides: dict[str, list[str]] = {name: [] for name in _CONFIG_FILES}
  argv = argv[:1] + [_home(a) for a in argv[1:]]
  asked = next((a for a in argv[1:] if a in HELP), None)
  if asked:
    _help(asked)
    sys.exit(0)
  rest = argv[:1]
  for i, arg in enumerate(argv[1:], 1):
    if arg == '--':
      rest += argv[i:]
      break
    name = arg[2:].split('=', 1)[0].split('.', 1)[0] if arg.startswith('--') else ''
    if name in overrides and arg[2:].startswith(name + '.'):
      overrides[name].append(arg[len(name) + 3:])
    else:
      rest.append(arg)
  try:
    rest = flags.FLAGS(rest, known_only=_PASS_ON)
    for name, given in overrides.items():
      _CONFIG_FILES[name].load(given)
    return rest
  except UserError as e:
    print(f'error: {e}', file=sys.stderr)
  except flags.Error as e:
    cause = e.__cause__ or e.__context__
    text = _explain(cause) if cause else str(e)
    named = re.match(r'flag (--[\w.]+)=(.*?): ', str(e))  # (absl's "flag --x=v: why")
    if named and named.group(1) not in text:  # (an enum's message names no flag)
      text = f'{named.group(1)}={named.group(2)}: {text}'
    print(f'error: {text}', file=sys.stderr)
  sys.exit(2)


def storage_error(e: OSError, path: str | None = None) -> str:
  """One sentence for a file-system error about a local path or a bucket, naming the fix."""
  path = path or e.filename or ''
  where = fs.bucket(path)
  reason = e.strerror or str(e)
  if isinstance(e, PermissionError) and where.startswith('gs://'):
    return (f'cannot access {path}: {reason}; run `gcloud auth application-default login` or set '
            'GOOGLE_APPLICATION_CREDENTIALS to a service account key file (on a Cloud TPU or '
            'Compute Engine VM the VM\'s service account is used; give it access to the bucket)')
  if isinstance(e, FileNotFoundError) and where and 'bucket' in reason:
    return (f'{reason} ({path}); create it (`gcloud storage buckets create {where}`) or fix the '
            'path')
  return f'cannot use {path}: {reason}'


def _strings(value):
  if isinstance(value, str):
    yield value
  elif hasattr(value, 'items'):
    for v in value.values():
      yield from _strings(v)


def check_paths(*paths):
  """One sentence and exit 2 when a bucket among `paths` (strings or configs, whose string fields
  are looked at) cannot be used: no credentials, no such bucket. Checked before anything is
  written; each bucket once."""
  seen = set()
  for path in (s for p in paths for s in _strings(p)):
    if fs.remote(path) and fs.bucket(path) not in seen:
      seen.add(fs.bucket(path))
      try:
        fs.check_access(path)
      except OSError as e:
        raise UserError(storage_error(e, path)) from None


def out_folder(path: str, flag: str = '--out'):
  """Makes the output folder `path` of a command, or one sentence on why it cannot be (a file is
  there, it cannot be written)."""
  if fs.exists(path) and not fs.isdir(path):
    raise UserError(f'{flag} {path} is a file; give a folder (new, or one to write into)')
  try:
    fs.makedirs(path, exist_ok=True)
  except OSError as e:
    raise UserError(f'cannot make {flag} {path} ({e.strerror or e}); choose a folder you can '
                    'write to') from None


def exit_now(code: int, together: bool = False):
  """Ends the process at once with `code`, output flushed.

  Everything a command writes is complete when it returns or fails (checkpoints are waited for),
  so the interpreter's teardown (tf.data and Orbax threads, the runtime) adds nothing but time: on
  a loaded machine it took up to a minute after a preemption's checkpoint, longer than a spot VM's
  notice, and after an error a leftover thread could hold the process. Several processes leave the
  coordination service together after a success, and after a stop that every process made at one
  step (`together`), so none sees the other vanish."""
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass
  jax = sys.modules.get('jax')  # (a command that never needed JAX does not load it to exit)
  if (code == 0 or together) and jax is not None:
    try:
      if jax.process_count() > 1:
        jax.distributed.shutdown()
    except Exception:
      pass
  if 'multiprocessing' in sys.modules:  # worker pools' semaphores released (else the resource
    try:  # tracker warns of leaked ones): what the interpreter's exit would run for them
      sys.modules['multiprocessing'].util._exit_function()
    except Exception:
      pass
  os._exit(code)


def fewer_collections():
  """Python's cycle collector walks every tracked object at each full collection; after importing
  JAX and TensorFlow those are hundreds of thousands of objects that are never garbage, and tracing
  a step allocates fast enough to trigger many collections (tracing takes about a third longer
  with the defaults: docs/measured.md). Young garbage is still collected, in batches of 10,000
  allocations."""
  gc.set_threshold(10_000, 10, 10)


class Terminated(KeyboardInterrupt):
  """SIGTERM outside the training loop: stopped like Ctrl-C, what is complete kept."""


def _terminate(signum, frame):
  del signum, frame
  raise Terminated()


def quiet_tpu_runtime():
  """On a machine without TPU chips where libtpu is installed (the .[tpu] extra), JAX still loads
  it, and it prints a page of warnings about the TPU environment it cannot find before JAX goes on
  with the CPU or GPU. One host's settings keep it quiet; no TPU exists to use either way."""
  if os.environ.get('JAX_PLATFORMS') or importlib.util.find_spec('libtpu') is None:
    return
  if private.hardware_utils is None:  # (another JAX: its own warnings stay)
    return
  try:  # JAX's own TPU probe
    chips = private.hardware_utils.num_available_tpu_chips_and_device_id()[0]
  except AttributeError:  # (the probe moved or changed)
    return
  if chips == 0:
    os.environ.setdefault('TPU_WORKER_HOSTNAMES', 'localhost')
    os.environ.setdefault('TPU_HOST_BOUNDS', '1,1,1')


def _enable_compilation_cache():
  """--compilation_cache's folder, or JAX_COMPILATION_CACHE_DIR's, for this run. One that cannot be
  written to is a UserError where it was asked for; the default folder only warns, and the run
  compiles without the cache."""
  try:
    compile_cache.enable(_COMPILATION_CACHE.value)
    return
  except compile_cache.Unusable as e:
    problem = e
  if os.environ.get('JAX_COMPILATION_CACHE_DIR'):
    raise UserError(f'JAX_COMPILATION_CACHE_DIR={problem.path}: compiled programs cannot be kept '
                    f'there ({problem.why}); give it a folder this user can write to, or unset it')
  if flags.FLAGS['compilation_cache'].present:
    raise UserError(f'--compilation_cache={_COMPILATION_CACHE.value}: compiled programs cannot be '
                    f'kept in {problem.path} ({problem.why}); give a folder this user can write '
                    'to, or --compilation_cache= to compile without keeping them')
  print(f'warning: compiled programs cannot be kept in {problem.path} ({problem.why}); this run '
        'compiles every program (--compilation_cache=<folder> keeps them elsewhere)',
        file=sys.stderr)
  compile_cache.enable('')


def _run_folder(path: str) -> str:
  """The workdir (a folder with workdir.json) holding the local `path`, or ''; a path inside a
  run's workdir that cannot be written was writable when the run began there."""
  if fs.remote(path):
    return ''
  folder = os.path.dirname(os.path.abspath(path))
  for _ in range(4):
    if os.path.isfile(os.path.join(folder, 'workdir.json')):
      return folder
    folder = os.path.dirname(folder)
  return ''


def run(main):
  """absl's app.run, with one-sentence errors for bad flags and for UserError, and a prompt exit."""
  def wrapped(argv):
    fewer_collections()
    signal.signal(signal.SIGTERM, _terminate)  # (the training loop installs its own: it saves)
    if not ('topology' in flags.FLAGS and flags.FLAGS.topology):
      quiet_tpu_runtime()
    if not flags.FLAGS['verbosity'].present:  # library INFO chatter (Orbax, ...) only on request
      logging.set_verbosity(logging.WARNING)
      # Orbax's background threads log their failures (a full disk: five tracebacks) before the
      # save that meets them raises; that error is then reported here in one sentence.
      logging.get_absl_handler().addFilter(
          lambda record: not (record.levelno >= logging.ERROR and '/orbax/' in record.pathname))
    try:
      _enable_compilation_cache()
      main(argv)
    except UserError as e:
      print(f'error: {e}', file=sys.stderr)
      exit_now(2)
    except OSError as e:  # a bucket or a file out of reach: one sentence, not a traceback
      if fs.no_space(e):  # (fs.DiskFull: a whole-file write, which left nothing behind)
        print(f'error: {e.strerror}' if isinstance(e, fs.DiskFull) else
              f'error: the disk is full{f" (writing {e.filename})" if e.filename else ""}; free '
              'some space and run the same command again', file=sys.stderr)
        exit_now(2)
      if e.filename and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        run = _run_folder(str(e.filename))
        print(f'error: {e.filename}: {e.strerror.lower()}; ' + (
            f'give this user write access to {run} again and run the same command again to '
            'continue from what is complete' if run else
            'choose a place this user can write to (or read, for an input)'), file=sys.stderr)
        exit_now(2)
      if not (e.filename and fs.remote(str(e.filename))):
        traceback.print_exc()
        exit_now(1)
      print(f'error: {storage_error(e)}', file=sys.stderr)
      exit_now(2)
    except Stopped as e:  # a run saved where it stopped and said so; 128 + the signal's number
      exit_now(e.exit_code, together=True)
    except KeyboardInterrupt as e:  # what is complete stays; a re-run continues from it
      said = str(e) or 'run the same command again to continue from what is complete'
      print(f'{"stopped by SIGTERM" if isinstance(e, Terminated) else "interrupted"}: {said}',
            file=sys.stderr)
      exit_now(143 if isinstance(e, Terminated) else 130)
    except Exception:
      traceback.print_exc()
      exit_now(1)
    exit_now(0)
  host_memory.keep_freed()  # (on the CPU: before JAX's backend starts its threads)
  app.run(wrapped, flags_parser=_parse)
