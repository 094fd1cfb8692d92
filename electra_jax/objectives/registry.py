"""The pre-training objectives: a table of the modules that define them (each a tuple
`OBJECTIVES` of `common.Objective` entries), and what the rest of the code asks of them: the
objective by name, the compare tool's runs and columns, the model fields an objective needs, the
metric keep_best ranks by. A new objective is a module of this package, one line here and a preset
(configs/); its metrics are declared in its module.
"""

from electra_jax.objectives import amos, cocolm, electra, electric, mlm
from electra_jax.objectives.common import Objective

OBJECTIVES: dict[str, Objective] = {o.name: o for m in (electra, mlm, electric, cocolm, amos)
                                    for o in m.OBJECTIVES}
# model fields of heads (and exits) only some objectives train
HEADS = ('discriminator_mlm', 'cocolm_heads', 'amos_exits')


def runs() -> dict[str, tuple[str, dict]]:
  """The compare tool's runs: {run name: (objective name, {'model.<field>' or
  'objective.<field>': value})}, each objective and its variants."""
  out: dict[str, tuple[str, dict]] = {name: (name, {}) for name in OBJECTIVES}
  for o in OBJECTIVES.values():
    out.update({run: (o.name, overrides) for run, overrides in o.variants.items()})
  return out


def columns() -> dict[str, tuple[str, ...]]:
  """The compare tool's columns of held-out metrics: {column: the metrics shown in it}, in the
  order the objectives declare them."""
  out: dict[str, tuple[str, ...]] = {}
  for o in OBJECTIVES.values():
    for m in o.metrics:
      if m.column and m.name not in out.setdefault(m.column, ()):
        out[m.column] += (m.name,)
  return out


def ranking(objective: str, metric: str, extra: tuple = ()) -> str:
  """'min' or 'max': which way `metric` of `objective`, or of the `extra` metrics the run also
  scores, is better (keep_best; 'max' for none); ValueError naming those it may rank by."""
  if not metric:
    return 'max'
  ranked = {m.name: m.better for m in (*get(objective).metrics, *extra) if m.better}
  if metric not in ranked:
    raise ValueError(f'keep_best is {metric!r}, not a held-out metric of objective {objective}; '
                     f'use one of {", ".join(ranked)}, or \'\' to keep the latest only')
  return ranked[metric]


def fit_model_config(config, log=print):
  """A copy of `config` with the model fields `config.objective.name` needs (logged when they
  change; a value its entry gives as a function is that of the model's fields), and without the
  heads it does not train."""
  get(config.objective.name)
  config = config.copy_and_resolve_references()
  needs = OBJECTIVES[config.objective.name].model
  for key, value in needs.items():
    value = value(config.model) if callable(value) else value
    if config.model[key] != value:
      log(f'objective {config.objective.name}: model.{key} {config.model[key]!r} -> {value!r}')
      config.model[key] = value
  for head in HEADS:
    if config.model[head] and not needs.get(head, False):
      log(f'objective {config.objective.name}: model.{head} True -> False (unused)')
      config.model[head] = False
  return config


def get(name: str) -> Objective:
  """The objective registered as `name`; ValueError naming the others."""
  if name not in OBJECTIVES:
    raise ValueError(f'objective.name is {name!r}; available: {", ".join(OBJECTIVES)}')
  return OBJECTIVES[name]
