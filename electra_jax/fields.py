"""Config fields declared once: each field's default, meaning, valid values and role.

A wing's typed config is a frozen dataclass whose fields are `declare`d in its own file
(model/config.py's ModelConfig, objectives/config.py's ObjectiveConfig); a config the command line
sets is a tree of `Section`s of such declarations (`section_of` a dataclass, or `Field`s written
out: config/pretraining.py for pre-training, finetune/config.py for fine-tuning). From it come the
ml_collections config (`build`), the checks of every value and the refusal of unknown keys
(`check`), and the rules of a run that resumes in its workdir or starts from other weights
(`paths`, `same_run_diffs`).
"""

import dataclasses
import difflib
import json
import math
import textwrap
from typing import Any, Callable

import ml_collections


@dataclasses.dataclass(frozen=True)
class Derived:
  """A default computed from other fields as a FieldReference: `source(root config)` returns
  e.g. `root.model.get_ref('hidden_size') // 64`. An override of the source reaches it; setting
  the derived field never changes its source."""
  source: Callable


@dataclasses.dataclass(frozen=True)
class Field:
  default: Any  # the value, or a Derived
  doc: str  # what it means
  valid: Callable | None = None  # (value) -> None, or the end of a sentence saying what is valid
  resume: str = ''  # 'same': a run resuming in its workdir must have the value it had; 'free': it
  #   may change (how a run is computed or reported, not what); '' : the section's rule
  init_from: str = ''  # model fields: 'same' (a run starting from other weights must have theirs),
  #   'adopt' (it takes theirs, logged), '' (its own)
  field_type: type | None = None  # the type of a field whose default is None


@dataclasses.dataclass(frozen=True)
class Section:
  fields: dict  # {name: Field | Section}
  resume: str = 'same'  # the rule of its fields that do not give their own
  doc: str = ''


# ---- what a value may be ----------------------------------------------------------------------

def _number(v) -> bool:
  return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def at_least(low):
  return lambda v: None if _number(v) and v >= low else f'it must be a number of at least {low}'


def positive(v):
  return None if _number(v) and v > 0 else 'it must be a positive number'


def inside(low, high, low_in: bool, high_in: bool):
  bounds = f'{"[" if low_in else "("}{low}, {high}{"]" if high_in else ")"}'
  def valid(v):
    ok = _number(v) and (low <= v if low_in else low < v) and (v <= high if high_in else v < high)
    return None if ok else f'it must lie in {bounds}'
  return valid


MAX_SEED = 2**31 - 1  # the programs take the seed as an int32 (SentencePiece's trainer, a uint32)


def seed(v):
  """A seed every consumer of it takes: a whole number in [0, 2**31 - 1]."""
  return None if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_SEED else (
      f'a seed is a whole number from 0 to {MAX_SEED} (a 32-bit integer)')


AT_LEAST_1, AT_LEAST_0, FRACTION = at_least(1), at_least(0), inside(0, 1, True, True)


def rule(ok: Callable, want: str):
  """Valid where `ok(value)` (a finite number passed to it); else 'give <want>'."""
  return lambda v: None if _number(v) and ok(v) else f'give {want}'


def one_of(*choices):
  """One of `choices`; a single callable argument gives them when called (a registry)."""
  def valid(v):
    allowed = tuple(choices[0]()) if len(choices) == 1 and callable(choices[0]) else choices
    return None if v in allowed else f'use one of {", ".join(repr(a) for a in allowed)}'
  return valid


# ---- the config made from the declaration -----------------------------------------------------

def build(section: Section) -> ml_collections.ConfigDict:
  """The ml_collections config of `section` with every default (derived fields as references)."""
  root = _plain(section)
  for path, f in walk(section):
    if isinstance(f.default, Derived):
      *parents, name = path.split('.')
      node = root
      for p in parents:
        node = node[p]
      node[name] = f.default.source(root)
  return root


def _plain(section: Section) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  for name, f in section.fields.items():
    if isinstance(f, Section):
      c[name] = _plain(f)
    elif f.field_type is not None:
      c[name] = ml_collections.FieldReference(f.default, field_type=f.field_type)
    elif not isinstance(f.default, Derived):
      c[name] = f.default
  return c


def walk(section: Section, prefix: str = '', resume: str = ''):
  """(dotted path, Field) of every field, with `resume` resolved from the sections."""
  rule = section.resume or resume
  for name, f in section.fields.items():
    if isinstance(f, Section):
      yield from walk(f, f'{prefix}{name}.', rule)
    else:
      yield f'{prefix}{name}', dataclasses.replace(f, resume=f.resume or rule)


def help_text(section: Section, prefix: str = '', width: int = 100) -> str:
  """Every field of `section` (a command's --help_config): its dotted path, default and meaning,
  under each section's heading."""
  lines = []
  for name, f in section.fields.items():
    if isinstance(f, Section):
      lines += ['', f'{prefix}{name}: {f.doc}' if f.doc else f'{prefix}{name}:']
      lines.append(help_text(f, f'{prefix}{name}.', width))
      continue
    default = ('derived from other fields' if isinstance(f.default, Derived) else
               repr(f.default))
    lines.append(f'  {prefix}{name} = {default}')
    lines += textwrap.wrap(f.doc, width, initial_indent=' ' * 6, subsequent_indent=' ' * 6)
  return '\n'.join(lines)


def declared(section: Section) -> dict:
  return dict(walk(section))


def paths(section: Section, **role) -> tuple:
  """The dotted paths whose Field has every attribute of `role` (e.g. init_from='adopt')."""
  return tuple(p for p, f in walk(section) if all(getattr(f, k) == v for k, v in role.items()))


def flatten(config, prefix: str = '') -> dict:
  """{dotted path: value} of a ConfigDict or a dict (as config.json holds it)."""
  out = {}
  for key, value in config.items():
    if isinstance(value, (dict, ml_collections.ConfigDict)):
      out.update(flatten(value, f'{prefix}{key}.'))
    else:
      out[f'{prefix}{key}'] = value
  return out


def check(section: Section, config, what: str = 'config', prefix: str = ''):
  """ValueError (one sentence) for the first unknown key or value outside its declared range.
  `prefix`: where `section` lies in its config (how paths are named in the sentence)."""
  fields = {prefix + p: f for p, f in walk(section)}
  values = flatten(config, prefix)
  for path in values:
    if path not in fields:
      parent = path.rsplit('.', 1)[0] + '.' if '.' in path else ''
      known = sorted(p[len(parent):] for p in fields if p.startswith(parent)
                     and '.' not in p[len(parent):])
      close = difflib.get_close_matches(path[len(parent):], known, n=1)
      raise ValueError(f'{path} is not a field of the {what}; ' + (
          f'did you mean {parent}{close[0]}?' if close else
          f'remove it (the fields there: {", ".join(known)})'))
  for path, f in fields.items():  # in the order they are declared: sources before derived
    problem = path in values and f.valid and f.valid(values[path])
    if problem:
      raise ValueError(f'{path} is {values[path]!r}; {problem}')


def same_run_diffs(section: Section, before: dict, after: dict) -> list[str]:
  """'path old -> new' for each field whose `resume` rule is 'same' and whose value differs
  between two config.json dicts. A field `before` lacks (added since) counts as its default; a
  field no longer declared counts as different."""
  defaults = flatten(json_default(section))
  fields = declared(section)
  old, new = flatten(before), flatten(after)
  diffs = []
  for path in sorted(set(old) | set(new)):
    if path in fields and fields[path].resume != 'same':
      continue
    was = old.get(path, defaults.get(path))
    if was != new.get(path):
      diffs.append(f'{path} {was!r} -> {new.get(path)!r}')
  return diffs


def complete(section: Section, saved) -> ml_collections.ConfigDict:
  """`saved` (a ConfigDict, or a dict as config.json holds it) with the fields it lacks at their
  defaults: what an earlier version computed, since a field's default keeps its behaviour."""
  values = json.loads(saved.to_json()) if isinstance(saved, ml_collections.ConfigDict) else saved
  return ml_collections.ConfigDict(with_defaults(section, values))


def with_defaults(section: Section, saved: dict) -> dict:
  """`saved` (a dict as config.json holds it) with the fields it lacks at their defaults, as a
  new dict."""
  return _with_defaults(json_default(section), saved)


def _with_defaults(defaults: dict, saved: dict) -> dict:
  return {**defaults, **{k: _with_defaults(defaults[k], v) if isinstance(v, dict) and isinstance(
      defaults.get(k), dict) else v for k, v in saved.items()}}


def json_default(section: Section) -> dict:
  return json.loads(build(section).to_json())


# ---- typed configs: frozen dataclasses whose fields are declared --------------------------------

def declare(default, doc: str, valid: Callable | None = None, *, resume: str = '',
            init_from: str = '', derived: Callable | None = None, field_type: type | None = None):
  """A field of a typed config, declared: `default` its value as written (a derived field's, as
  derived from the other defaults: `derived(root config)` gives the reference that follows its
  sources in the command line's config); the rest as `Field`'s."""
  return dataclasses.field(default=default, metadata={'declared': Field(
      Derived(derived) if derived else default, doc, valid, resume, init_from, field_type)})


def redeclared(declared: Field):
  """A field of a typed config declared elsewhere already (its default, meaning and range)."""
  return dataclasses.field(default=declared.default, metadata={'declared': declared})


def section_of(cls, doc: str = '', resume: str = 'same') -> Section:
  """The Section of a typed config: its declared fields, in their order (the others, such as
  where a model is compiled for, are the program's, not the command line's)."""
  return Section(fields={f.name: f.metadata['declared'] for f in dataclasses.fields(cls)
                         if 'declared' in f.metadata}, doc=doc, resume=resume)


def check_typed(value, section: Section, prefix: str):
  """ValueError (one sentence) for the first declared field of the dataclass `value` outside its
  range: a typed config checks itself once, when constructed."""
  check(section, {name: getattr(value, name) for name in section.fields}, prefix.rstrip('.'),
        prefix)


def typed(cls, values, section: Section, prefix: str, **extra):
  """`cls(**values, **extra)` (values: a ConfigDict section or a dict of some of its fields, the
  others at their defaults), or ValueError (one sentence) for a key that is not a field of it."""
  values = dict(values.items())
  unknown = set(values) - set(section.fields)
  if unknown:
    check(section, {k: values[k] for k in sorted(unknown)}, prefix.rstrip('.'), prefix=prefix)
  return cls(**values, **extra)


SEED = Field(0, 'every random choice comes from a key derived from (seed, step)', seed,
             resume='same')
