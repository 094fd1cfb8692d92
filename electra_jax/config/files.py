"""A config file read: `get_config(variant)` of a Python file, and the command line's
`<field>=<value>` overrides set on it (a field named by its full path or by its name alone), each
mistake one sentence naming the fix (UserError). The launch scripts' --config flags
(cli.define_config_file) read their files here, once."""

import ast
import difflib
import functools
import importlib.util
import inspect
import os
import re
import traceback
from typing import Any, Callable

from absl import flags
import ml_collections

from electra_jax import UserError


def config_from(spec: str, overrides=(), name: str = 'config', kind: str = ''):
  """(the config of file `spec` with each `field=value` of `overrides` set, the full paths set).

  A field named without its section (`disc_weight=50`) is its one full path
  (`objective.disc_weight`); the value is read as the field's type reads it (a bare field is a
  bool's true); an unknown field, a field of several sections or a value of the wrong type is one
  sentence naming the fix (UserError). Derived fields follow their sources (FieldReferences).
  `kind` ('pre-training', 'fine-tuning'): a file of the other kind is refused first."""
  config = load_config_file(spec, name)
  if kind:
    require_config(config, kind, f'--{name}')
  fields = config_paths(config)
  done = []
  for given in overrides:
    key, has_value, text = given.partition('=')
    path = field_path(fields, key, name)
    *parents, leaf = path.split('.')
    section = functools.reduce(lambda c, k: c[k], parents, config)
    value = _typed(f'--{name}.{given}', path, fields[path], text if has_value else None)
    try:
      section[leaf] = value
    except (TypeError, ValueError) as e:
      raise UserError(f'--{name}.{given}: {" ".join(str(e).split())}') from None
    done.append(path)
  config.lock()
  return config, done


def field_path(fields: dict, key: str, name: str = 'config') -> str:
  """The full path of the field `key` names among `fields` ({path: value}, config_paths), or one
  sentence (UserError) naming the fix."""
  if key in fields:
    return key
  leaves = [p for p, v in fields.items() if not hasattr(v, 'items')]
  owners = [p for p in leaves if p.endswith('.' + key)]
  if len(owners) == 1:
    return owners[0]
  if owners:
    raise UserError(f'--{name}.{key} is a field of several sections ({", ".join(owners)}); name '
                    f'one, e.g. --{name}.{owners[0]}')
  candidates = leaves + [p.rsplit('.', 1)[-1] for p in leaves]
  close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.7)
  full = [p for p in leaves if close and (p == close[0] or p.endswith('.' + close[0]))]
  hint = (f'; did you mean --{name}.{full[0]}?' if len(full) == 1 else
          f'; the fields are declared in electra_jax/*/config.py (or the file of --{name})')
  raise UserError(f'unknown config field {key!r}{hint}')


def _typed(given: str, path: str, old, text: str | None):
  """`text` read as a value of the type of the field `path` holds (`old`), or one sentence."""
  if hasattr(old, 'items'):
    raise UserError(f'{given}: {path} is a section; set one of its fields, e.g. '
                    f'--{given.split(".", 1)[0][2:]}.{path}.{next(iter(old.keys()), "<field>")}')
  if text is None:
    if isinstance(old, bool):
      return True
    raise UserError(f'{given}: give {path} a value ({given}=<value>)')
  readers: tuple[tuple[Any, str, Callable[[str], Any]], ...] = (
      (bool, 'true or false', flags.BooleanParser().parse), (int, 'an integer', _integer),
      (float, 'a number', float), (str, 'a string', str),
      ((tuple, list), 'a Python literal such as (1, 2)', _literal))
  for kind, words, read in readers:
    if isinstance(old, kind):
      try:
        return (type(old) if isinstance(old, (tuple, list)) else (lambda v: v))(read(text))
      except (ValueError, SyntaxError, TypeError):
        raise UserError(f'{given}: {path} takes {words}') from None
  raise UserError(f'{given}: {path} holds a {type(old).__name__}, which the command line cannot '
                  'set; set it in the config file')


def _integer(text: str) -> int:
  if not re.fullmatch(r'[+-]?\d[\d_]*', text.strip()):
    raise ValueError(text)
  return int(text)


def _literal(text: str):
  value = ast.literal_eval(text)
  if not isinstance(value, (tuple, list)):
    raise TypeError(text)
  return value


def load_config_file(spec: str, name: str = 'config'):
  """get_config(variant) of a config file (`path[:variant]`), or one sentence (UserError) on what
  is wrong, naming the flag `--name`."""
  path, _, variant = spec.partition(':')
  if not os.path.isfile(path):
    folder = os.path.dirname(path) or '.'
    known = [os.path.join(os.path.dirname(path), n) for n in sorted(os.listdir(folder))
             if n.endswith('.py')] if os.path.isdir(folder) else []
    close = difflib.get_close_matches(path, known, n=1)
    hint = f'; did you mean {close[0]}?' if close else '; give a file such as configs/tiny.py'
    raise UserError(f'--{name}: the config file {path} does not exist{hint}')
  if not path.endswith('.py'):
    raise UserError(f'--{name}={spec}: {path} is not a config file (a Python file defining '
                    'get_config(), such as configs/tiny.py)')
  module_spec = importlib.util.spec_from_file_location('electra_jax_user_config', path)
  assert module_spec is not None and module_spec.loader is not None  # (a .py path always has one)
  module = importlib.util.module_from_spec(module_spec)
  try:
    module_spec.loader.exec_module(module)
  except SyntaxError as e:
    raise UserError(f'--{name}={spec}: line {e.lineno} of {path} is not Python ({e.msg}); fix '
                    'it') from None
  except Exception as e:  # (the config file's own code failed)
    raise UserError(_raised(name, spec, path, e)) from None
  if not callable(getattr(module, 'get_config', None)):
    raise UserError(f'--{name}={spec}: {path} defines no get_config(); a config file returns its '
                    'config from get_config() (see configs/tiny.py)')
  if variant and not inspect.signature(module.get_config).parameters:
    raise UserError(f'--{name}={spec}: {path} has no variants (its get_config() takes no '
                    f'argument); leave ":{variant}" out')
  try:
    config = module.get_config(variant) if variant else module.get_config()
  except (ValueError, TypeError) as e:
    raise UserError(f'--{name}={spec}: {e}') from None
  except Exception as e:
    raise UserError(_raised(name, spec, path, e)) from None
  if not isinstance(config, ml_collections.ConfigDict):
    raise UserError(f'--{name}={spec}: get_config() of {path} returned {type(config).__name__}, '
                    'not an ml_collections.ConfigDict; return the config (see configs/tiny.py)')
  return config


def _raised(name: str, spec: str, path: str, e: Exception) -> str:
  """One sentence for an error that a config file's own code raised, with its line there."""
  lines = [f.lineno for f in traceback.extract_tb(e.__traceback__)
           if os.path.abspath(f.filename) == os.path.abspath(path)]
  where = f'line {lines[-1]} of {path}' if lines else path
  return (f'--{name}={spec}: {where} raised {type(e).__name__}: {" ".join(str(e).split())[:200]}; '
          'fix the config file')


def config_paths(config, prefix: str = '') -> dict:
  """{dotted path: value} of every field and section of a ConfigDict."""
  out = {}
  for key, value in config.items():
    if value is None:  # a typed field whose default means auto (fsdp): its type's value stands in
      value = config.get_ref(key).get_type()()
    out[prefix + key] = value
    if hasattr(value, 'items'):
      out.update(config_paths(value, f'{prefix}{key}.'))
  return out


def require_config(config, kind: str, flag: str = '--config'):
  """Refuses a config file of the other kind: a fine-tuning config (it has a task section) where
  a pre-training config is wanted, or a pre-training config (an objective section) where a
  fine-tuning config is."""
  keys = set(config.keys()) if config is not None else set()
  if kind == 'pre-training' and 'task' in keys and 'objective' not in keys:
    raise UserError(f'{flag} is a fine-tuning config (it has a task section); give {flag} a '
                    'pre-training config such as configs/tiny.py')
  if kind == 'fine-tuning' and 'objective' in keys and 'task' not in keys:
    raise UserError(f'{flag} is a pre-training config (it has an objective section); give {flag} '
                    'a fine-tuning config, configs/finetune/*.py')
