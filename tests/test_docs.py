"""The README, WORKSPACE.md and docs/ name only what exists: every relative link leads to a file,
and every launch flag and config field in a command (or named alone) is one the scripts and the
config files define."""

import functools
import glob
import importlib.util
import os
import re
import subprocess

from conftest import ROOT
import pytest

from electra_jax import UserError
from electra_jax.config import files as config_reading
from electra_jax.data import records

pytestmark = pytest.mark.fast

PAGES = sorted([os.path.join(ROOT, 'README.md'), os.path.join(ROOT, 'WORKSPACE.md')] +
               glob.glob(os.path.join(ROOT, 'docs', '*.md')))
MISTYPED = {'disc_wieght'}  # pretraining.md's example of a field name with a typo, and its answer
# absl's own flags, and cli.HELP's --help_config (every command's)
ABSL = {'help', 'helpfull', 'helpshort', 'flagfile', 'undefok', 'only_check_args', 'help_config'}
# a command: launch/<script>.py, or a lab command run from the checkout (python -m
# benchmarks.<script>)
SCRIPT = re.compile(r'launch/(\w+)\.py|-m benchmarks\.(\w+)')
FLAG = re.compile(r'(?<![\w-])--([a-z][a-z0-9_]*(?:\.[A-Za-z0-9_]+)*)')


@functools.cache
def script_path(command: str) -> str:
  """'launch/train.py' (or 'benchmarks/benchmark.py') of the command that starts `command`."""
  found = SCRIPT.match(command)
  return f'launch/{found.group(1)}.py' if found.group(1) else f'benchmarks/{found.group(2)}.py'


@functools.cache
def script_flags(script: str) -> dict:
  """{flag: the default config file or None} of the script at `script` (launch/<name>.py), read
  from its source (and the flags electra_jax/cli.py defines for every script that runs through
  it)."""
  source = open(os.path.join(ROOT, script)).read()
  defined = {name: None for name in re.findall(r"DEFINE_\w+\(\s*'(\w+)'", source)}
  if 'cli.run(' in source:
    shared = open(os.path.join(ROOT, 'electra_jax', 'cli.py')).read()
    defined.update((name, None) for name in re.findall(r"DEFINE_\w+\(\s*'(\w+)'", shared))
  defined.update((name, None) for name in re.findall(r"add_argument\('--(\w+)'", source))
  declared = re.search(r"declared_flags\(records\.declarations\(\)(?:, only=\(([^)]*)\))?", source)
  if declared:  # the records' settings, as data/records.py declares them
    only = re.findall(r"'(\w+)'", declared.group(1) or '')
    defined.update((name, None) for name in records.declarations() if not only or name in only)
  for name, default in re.findall(r"define_config_file\(\s*'(\w+)',\s*(None|'[^']*'|"
                                  r"os\.path\.join\(_ROOT[^)]*\))", source):
    parts = re.findall(r"'([^']*)'", default)  # a path, or os.path.join(_ROOT, 'a', 'b.py')
    defined[name] = os.path.join(*parts) if parts else None
  return defined


def config_files(script: str) -> set:
  """The flags of a script that take a config file."""
  source = open(os.path.join(ROOT, script)).read()
  return set(re.findall(r"(?:DEFINE_config_file|define_config_file)\(\s*'(\w+)'", source))


def commands(text: str) -> list[str]:
  """Each command line of the page's code blocks and inline code, continuation lines joined; one
  entry per launch script named (a launcher's command after `--` is its own entry)."""
  lines, block = [], []
  for line in text.split('\n'):
    if line.startswith('    ') or (block and block[-1].endswith('\\')):
      block.append(line.strip())
      if not line.rstrip().endswith('\\'):
        lines.append(' '.join(l.rstrip('\\') for l in block))
        block = []
    else:
      lines += re.findall(r'`([^`]*(?:launch/|-m benchmarks\.)[^`]*)`', line)
  out = []
  for line in lines:
    line = line.split(' #')[0]
    starts = [m.start() for m in SCRIPT.finditer(line)]
    out += [line[a:b] for a, b in zip(starts, starts[1:] + [len(line)])]
  return out


@functools.cache
def fields(spec: str, name: str) -> frozenset:
  return frozenset(config_reading.config_paths(config_reading.load_config_file(spec, name)))


def check_override(spec: str, name: str, field: str) -> str | None:
  """None when --<name>.<field> is a field of the config `spec` (or names one alone)."""
  try:
    config_reading.field_path(dict.fromkeys(fields(spec, name)), field, name)
  except UserError as e:
    return str(e)
  return None


def test_every_relative_link_leads_to_a_file():
  missing = []
  for page in PAGES:
    text = open(page).read()
    for target in re.findall(r'\]\(([^)\s]+)\)', text):
      path = target.split('#')[0]
      if not path or re.match(r'^[a-z]+:', path):
        continue
      if not os.path.exists(os.path.join(os.path.dirname(page), path)):
        missing.append(f'{os.path.relpath(page, ROOT)}: {target}')
  assert not missing, missing


def _beam_options(command: str) -> set:
  """The flags of a command with --runner that are Apache Beam's pipeline options (where Beam is
  installed: the test extra; elsewhere every flag of such a command is taken to be one)."""
  flags = [t for t in command.split() if t.startswith('--')]
  names = {f[2:].partition('=')[0] for f in flags}
  if importlib.util.find_spec('apache_beam') is None:
    return names
  from apache_beam.options import pipeline_options
  given = pipeline_options.PipelineOptions(flags)
  return names - (set(given.get_all_options(retain_unknown_options=True)) -
                  set(given.get_all_options()))


def test_every_launch_flag_and_config_field_in_a_command_exists():
  wrong, seen = [], 0
  for page in PAGES:
    for command in commands(open(page).read()):
      script = script_path(command)
      if not os.path.exists(os.path.join(ROOT, script)):
        wrong.append(f'{os.path.relpath(page, ROOT)}: {script} does not exist')
        continue
      defined = script_flags(script)
      for name in config_files(script):  # a config file a command names exists
        given = re.search(rf'--{name}=([^\s:]+)', command.split(' -- ')[0])
        if given and not re.search(r'[$<>\[]', given.group(1)) and not os.path.exists(
            os.path.join(ROOT, given.group(1))):
          wrong.append(f'{os.path.relpath(page, ROOT)}: {script} --{name}='
                       f'{given.group(1)}: no such file')
      beam = _beam_options(command) if '--runner=' in command else set()
      for flag in FLAG.findall(command.split(' -- ')[0]):
        seen += 1
        name, _, field = flag.partition('.')
        where = f'{os.path.relpath(page, ROOT)}: {script} --{flag}'
        if name not in defined and name not in ABSL and name not in beam:
          wrong.append(f'{where}: no such flag')
        elif field and name in config_files(script):
          given = re.search(rf'--{name}=(\S+)', command)
          spec = given.group(1) if given else defined[name]
          if spec and not re.search(r'[$<>\[]', spec):
            if error := check_override(os.path.join(ROOT, spec), name, field):
              wrong.append(f'{where}: {error}')
  assert seen > 100, seen  # the pages' commands were found
  assert not wrong, '\n'.join(wrong)


def test_every_config_field_named_alone_is_a_field():
  """`--config.<field>` in the prose (no script beside it) is a field of the pre-training or the
  fine-tuning config."""
  known = (fields(os.path.join(ROOT, 'configs', 'tiny.py'), 'config') |
           fields(os.path.join(ROOT, 'configs', 'finetune', 'own.py'), 'config'))
  leaves = {k.rsplit('.', 1)[-1] for k in known}
  wrong = []
  for page in PAGES:
    for flag in re.findall(r'--config\.([A-Za-z0-9_.]+[A-Za-z0-9_])', open(page).read()):
      if flag not in known and flag not in leaves and flag not in MISTYPED:
        wrong.append(f'{os.path.relpath(page, ROOT)}: --config.{flag}')
  assert not wrong, sorted(set(wrong))


def test_measured_holds_the_current_figures_and_leaves_history_to_git():
  """docs/measured.md is the current figure of each measurement, not a notebook: at most 400
  lines, no line past 1,400 characters (a table cell holds a figure, not its story), and every
  commit it names is one of this repository's (where the history is)."""
  path = os.path.join(ROOT, 'docs', 'measured.md')
  lines = open(path).read().split('\n')
  assert len(lines) <= 401, f'docs/measured.md has {len(lines)} lines'  # (the final newline's)
  longest = max(lines, key=len)
  assert len(longest) <= 1400, longest[:200]
  shallow = subprocess.run(['git', '-C', ROOT, 'rev-parse', '--is-shallow-repository'],
                           capture_output=True, text=True).stdout.strip()
  if shallow == 'false':  # a checkout with its history (not an sdist, not a shallow clone)
    commit = r'\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7}\b'  # 7 hex digits, not a number
    named = set(re.findall(commit, '\n'.join(lines)))
    assert len(named) > 20, named  # the commits were found
    known = subprocess.run(['git', '-C', ROOT, 'cat-file', '--batch-check'], input='\n'.join(
        sorted(named)), capture_output=True, text=True, check=True).stdout
    assert 'missing' not in known, [l for l in known.split('\n') if 'missing' in l]
