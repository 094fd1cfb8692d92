"""The configs are declared once (electra_jax/fields.py): the views, checks and resume rules
follow."""

import dataclasses
import json

import pytest

from electra_jax import fields
from electra_jax.config import pretraining as config_lib
from electra_jax.finetune import config as ft_config
from electra_jax.model import networks as model_lib
from electra_jax.objectives import common as objective_common
from electra_jax.train import config as train_config


@pytest.mark.fast
def test_the_model_and_objective_views_are_the_declared_sections():
  c = config_lib.default_config().copy_and_resolve_references()
  model = {f.name: f.default for f in dataclasses.fields(model_lib.ModelConfig)}
  assert set(model) == set(c.model) | {'platform', 'writes_for_backward'}
  assert all(model[k] == c.model[k] for k in c.model)  # the same defaults, derived ones resolved
  objective = {f.name: f.default for f in dataclasses.fields(objective_common.ObjectiveConfig)}
  assert set(objective) == set(c.objective) | {'sampler'}
  assert all(objective[k] == c.objective[k] for k in c.objective)
  # a field declared in a typed config is its section's, in its place, and checked when made
  @dataclasses.dataclass(frozen=True)
  class Typed:
    size: int = fields.declare(3, 'a test field', fields.at_least(1), init_from='same')
    half: int = fields.declare(1, 'derived', derived=lambda c: c.typed.get_ref('size') // 2)
    where: str = ''  # (not declared: not the command line's)

    def __post_init__(self):
      fields.check_typed(self, fields.section_of(Typed), 'typed.')

  section = fields.section_of(Typed)
  assert list(section.fields) == ['size', 'half'] and section.fields['size'].init_from == 'same'
  built = fields.build(fields.Section(fields={'typed': section}))
  built.typed.size = 9
  assert built.typed.half == 4  # the derived default follows its source in the built config
  assert fields.typed(Typed, {'size': 5}, section, 'typed.') == Typed(5, 1)
  with pytest.raises(ValueError, match=r'typed.size is 0; it must be a number of at least 1'):
    Typed(0)
  with pytest.raises(ValueError, match='typed.sise is not a field of the typed; did you mean '
                     'typed.size?'):
    fields.typed(Typed, {'sise': 5}, section, 'typed.')
  with pytest.raises(ValueError, match=r'model.hidden_size is -1; it must be a number of at least'):
    model_lib.ModelConfig(hidden_size=-1)  # checked once, when made


@pytest.mark.fast
def test_the_finetuning_optimizer_is_the_pretraining_section_with_its_own_values(monkeypatch):
  """A fine-tuning's optimizer config is the typed one the pre-training's optimizer section is
  made from: its own value where it declares the field too, its schedule's where it sets one, the
  typed default otherwise (a field added there arrives without another line); it is checked when
  made, naming the field."""
  cfg = ft_config.default_config()
  cfg.optimizer.b2, cfg.optimizer.grad_clip_norm = 0.98, 0.5
  wide = type('Model', (), {'hidden_size': 768})()
  opt = ft_config.optimizer_config(cfg, wide, 1000)
  assert isinstance(opt, train_config.OptimizerConfig)
  assert {f.name for f in dataclasses.fields(opt)} == set(config_lib.OPTIMIZER.fields)
  assert (opt.b2, opt.grad_clip_norm, opt.weight_decay) == (0.98, 0.5, cfg.optimizer.weight_decay)
  assert (opt.learning_rate, opt.warmup_steps, opt.decay_steps) == (1e-4, 100, 1000)
  config_lib.default_config().optimizer.update(dataclasses.asdict(opt))  # values it accepts

  @dataclasses.dataclass(frozen=True)
  class Wider(train_config.OptimizerConfig):
    extra: int = fields.declare(7, 'a test field')

  monkeypatch.setattr(train_config, 'OptimizerConfig', Wider)
  assert ft_config.optimizer_config(cfg, wide, 1000).extra == 7
  cfg.optimizer.b2 = 1.0
  with pytest.raises(ValueError, match=r'optimizer\.b2 is 1\.0; give in \[0, 1\)'):
    ft_config.optimizer_config(cfg, wide, 1000)


@pytest.mark.fast
def test_unknown_keys_are_refused_never_dropped():
  c = config_lib.default_config()
  c.model.hidden_sise = 64  # a config file's typo: ConfigDict takes it
  with pytest.raises(ValueError, match='model.hidden_sise is not a field of the model; did you '
                     'mean model.hidden_size?'):  # (the typed section refuses it, once)
    config_lib.check(c)
  other = config_lib.default_config()
  other.data.colour = 3
  with pytest.raises(ValueError, match=r'data.colour is not a field of the data; remove it \(the '
                     r'fields there: batch_size, corpus, eval_batch_size, .*vocab\)'):
    config_lib.check(other)  # (the typed data section refuses it)
  other = config_lib.default_config()
  other.train_step = 3
  with pytest.raises(ValueError, match='train_step is not a field of the config; did you mean '
                     'train_steps?'):
    config_lib.check(other)
  with pytest.raises(ValueError, match='model.hidden_sise is not a field of the model'):
    model_lib.ModelConfig.from_config(c.model)
  with pytest.raises(ValueError, match='objective.rate is not a field of the objective'):
    objective_common.ObjectiveConfig.from_config({**config_lib.default_config().objective,
                                                  'rate': 1})
  ft = ft_config.default_config()
  ft.task.labels = 'a,b'
  with pytest.raises(ValueError, match='task.labels is not a field of the fine-tuning config'):
    fields.check(ft_config.CONFIG, ft, 'fine-tuning config')


@pytest.mark.fast
@pytest.mark.parametrize('path,value,message', [
    ('train_steps', 0, 'train_steps is 0; it must be a number of at least 1'),
    ('model.dropout_rate', 1.0, r'model.dropout_rate is 1.0; it must lie in \[0, 1\)'),
    ('model.dtype', 'int8', "model.dtype is 'int8'; use one of 'auto', 'bfloat16'"),
    ('model.attention', 'nowhere', "model.attention is 'nowhere'; use one of 'auto'"),
    ('objective.temperature', 0.0, 'objective.temperature is 0.0; it must be a positive number'),
    ('optimizer.b2', 1.0, r'optimizer.b2 is 1.0; give in \[0, 1\), e.g. 0.999'),
    ('nonfinite', 'ignore', "nonfinite is 'ignore'; use one of 'stop', 'skip'"),
    ('data.eval_fraction', 0.0, r'data.eval_fraction is 0.0; it must lie in \(0, 1\)'),
])
def test_each_declared_range_is_checked(path, value, message):
  c = config_lib.default_config()
  section, name = path.rsplit('.', 1) if '.' in path else ('', path)
  (c[section] if section else c)[name] = value
  with pytest.raises(ValueError, match=message):
    config_lib.check(c)
    model_lib.ModelConfig.from_config(c.model)  # (the attention paths are the model's registry)


@pytest.mark.fast
def test_the_resume_rules_come_from_the_declaration():
  before = json.loads(config_lib.default_config().to_json())
  def diffs(**changes):
    c = config_lib.default_config()
    for path, value in changes.items():
      section, name = path.split('__')
      c[section][name] = value
    return fields.same_run_diffs(config_lib.CONFIG, before, json.loads(c.to_json()))
  # how the model is computed, the schedule and the logging may change; what it computes may not
  assert diffs(model__remat=True, model__attention='explicit', optimizer__learning_rate=1e-3) == []
  assert diffs(model__hidden_size=64) == ['model.hidden_size 256 -> 64',
                                          'model.intermediate_size 1024 -> 256',
                                          'model.num_heads 4 -> 1']
  assert diffs(data__max_seq_length=64) == ['data.max_seq_length 128 -> 64',
                                            'objective.max_predictions 19 -> 9']
  # a field added since the run counts as its default; one no longer declared counts as a change
  older = json.loads(json.dumps(before))
  del older['model']['gdes']
  assert fields.same_run_diffs(config_lib.CONFIG, older, before) == []
  assert fields.same_run_diffs(config_lib.CONFIG, older, {**before, 'model': {
      **before['model'], 'gdes': True}}) == ['model.gdes False -> True']
  older['data']['gone'] = 1
  assert fields.same_run_diffs(config_lib.CONFIG, older, before) == ['data.gone 1 -> None']
  # init_from: what must match the weights, what is taken from them
  assert fields.paths(config_lib.MODEL, init_from='same') == (
      'backbone', 'embedding_size', 'hidden_size', 'num_layers', 'num_heads', 'intermediate_size',
      'max_position_embeddings', 'type_vocab_size', 'global_every', 'local_window',
      'rope_theta_global', 'rope_theta_local')
  assert 'vocab_size' in fields.paths(config_lib.MODEL, init_from='adopt')


@pytest.mark.fast
def test_a_finetuning_config_from_an_earlier_version_gets_the_defaults_it_lacks():
  saved = json.loads(ft_config.default_config().to_json())
  del saved['pooling'], saved['task']['choices']
  saved['seed'] = 3
  done = ft_config.complete(saved)
  assert (done.pooling, done.task.choices, done.seed) == ('cls', '', 3)
  fields.check(ft_config.CONFIG, done, 'fine-tuning config')
  assert fields.same_run_diffs(ft_config.CONFIG, saved, json.loads(done.to_json())) == []
  assert fields.same_run_diffs(ft_config.CONFIG, saved, {**json.loads(done.to_json()),
                                                         'num_seeds': 5, 'log_every': 7}) == []


@pytest.mark.fast
def test_every_finetuning_config_file_passes_the_checks():
  from conftest import ROOT, load_config
  import glob
  files = sorted(glob.glob(f'{ROOT}/configs/finetune/*.py'))
  assert len(files) >= 4
  for path in files:
    fields.check(ft_config.CONFIG, load_config(path), 'fine-tuning config')


@pytest.mark.fast
def test_own_data_recipe_returns_to_the_papers_by_the_flags_its_docstring_gives():
  """configs/finetune/own.py departs from the paper's recipe for short pre-trainings; the four
  flags it names for a model pre-trained at full length give back every recipe field's default."""
  from conftest import ROOT, load_config
  import ast
  import re
  path = f'{ROOT}/configs/finetune/own.py'
  with open(path, encoding='utf-8') as f:
    doc = ast.get_docstring(ast.parse(f.read()))
  own, paper = load_config(path), ft_config.default_config()
  recipe = lambda c: {k: v for k, v in fields.flatten(c).items() if not k.startswith('task.')}
  assert recipe(own) != recipe(paper)
  flags = re.findall(r'--config\.([\w.]+)=(\S+)', doc.split('add\n')[-1])
  assert len(flags) == 4
  for key, value in flags:
    *sections, last = key.split('.')
    target = own
    for s in sections:
      target = target[s]
    target[last] = type(target[last])(value)
  assert recipe(own) == recipe(paper)
