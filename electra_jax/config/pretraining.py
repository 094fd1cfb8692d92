"""The one pre-training config: the run's own fields, declared here, and each wing's section,
declared by its wing (model/config.py, objectives/config.py, train/config.py, data/config.py):
every field's default, meaning, range and role, once.

Size presets in `configs/` start from `default_config()` and set their whole column of the reference
table. Derived fields (FFN width, heads, max predictions per sequence, decay steps, eval batch) are
FieldReferences computed from their source (`ref + 0`, never the source's own reference): an
override of the source reaches them, and setting a derived field never changes its source.

From `CONFIG` come the config the command line sets (`default_config`), the checks of every value
with the refusal of unknown keys, what a run resuming in its workdir must keep (`resume: same`; the
model, objective and data sections and the seed, but for how the model is computed) and what a run
starting from other weights must share with them or takes from them (`init_from`).
`PretrainingConfig` is the config typed: the run's own fields declared here and the wings' typed
configs (model.config.ModelConfig, objectives.config.ObjectiveConfig, train.config.OptimizerConfig,
data.config.DataConfig); `parse` makes it once, at the edge (pretraining/preflight.py's
`configure`), and nothing below reads the untyped one. See electra_jax/fields.py.
"""

import dataclasses
import json

from electra_jax import fields
from electra_jax.data.config import DATA, DataConfig
from electra_jax.fields import AT_LEAST_0, AT_LEAST_1, Section, declare, one_of
from electra_jax.model.config import MODEL, ModelConfig
from electra_jax.objectives.config import OBJECTIVE, ObjectiveConfig
from electra_jax.platform import chips
from electra_jax.train.config import OPTIMIZER, OptimizerConfig

@dataclasses.dataclass(frozen=True, kw_only=True)
class PretrainingConfig:
  """A pre-training's config, typed: the run's own fields (declared here), each wing's typed
  section, and `as_json`, the one serialization that config.json, the checkpoints' metadata and
  the resume checks all use. Made once, at the edge (`parse`): every field checked once, and
  everything below takes it alone (its own fields are checked there, each section's by its
  constructor)."""
  seed: int = fields.redeclared(fields.SEED)
  train_steps: int = declare(1_000_000, 'optimizer steps', AT_LEAST_1)
  log_every: int = declare(100, 'steps between progress lines / metric records (the only device '
                           'reads)', AT_LEAST_1)
  eval_every: int = declare(0, 'steps between held-out evaluations; 0: only at the end',
                            AT_LEAST_0)
  eval_batches: int = declare(20, 'batches per held-out evaluation', AT_LEAST_1)
  save_every: int = declare(0, 'steps between checkpoints; 0: only at the end', AT_LEAST_0)
  keep_checkpoints: int = declare(3, 'the latest checkpoints kept on disk', AT_LEAST_1)
  keep_best: str = declare('', "a held-out metric (e.g. 'disc_auc'): also keep the checkpoint "
                           'best by it')
  zeroshot_task: str = declare('', 'at every held-out evaluation, the discriminator prompted with '
                               "no training on this task's dev split (a task with a default "
                               "prompt: builtin_topic, builtin, GLUE's classification tasks but "
                               "WNLI; finetune/inputs/prompts.py): its accuracy, "
                               "'zeroshot_accuracy', is logged and plotted, and keep_best may "
                               "rank by it; '' : none")
  microbatches: int = declare(0, 'gradient accumulation: the global batch in this many sequential '
                              "parts (same loss and gradient); 0: the fewest whose step fits the "
                              "device's memory (1 on CPUs)", AT_LEAST_0)
  fsdp: bool | None = declare(None, 'True: state split over the devices (FSDP, partitioning.py); '
                              'False: replicated; None (auto): split on TPU slices only',
                              one_of(None, False, True), field_type=bool)
  nonfinite: str = declare('stop', "a NaN/Inf loss or gradient norm: 'stop' the run, or 'skip' "
                           'such steps', one_of('stop', 'skip'))
  init_from: str = declare('', "start from other weights: an HF folder, launch/export.py's, an "
                           'original checkpoint')
  init_generator: str = declare('', "with an HF discriminator folder: its generator's folder "
                                "('' : fresh)")
  model: ModelConfig  # for the run's devices: dtype and recompute decided (attention: model_view)
  objective: ObjectiveConfig
  optimizer: OptimizerConfig
  data: DataConfig
  as_json: dict = dataclasses.field(repr=False)


_OWN = fields.section_of(PretrainingConfig)
CONFIG = Section(resume='free', fields=dict(
    _OWN.fields, model=MODEL, objective=OBJECTIVE, optimizer=OPTIMIZER, data=DATA))


def default_config():
  """The config with every default (an ml_collections.ConfigDict)."""
  return fields.build(CONFIG)


def modern_backbone(c, *, layers: int, heads: int, inner: int, window: int = 128):
  """Turns preset `c` into its modern-backbone variant (model.backbone='modern', the `:modern`
  of configs/*.py): ModernBERT's block at the preset's width, `layers` deep with `heads` heads
  and a GeGLU of 2 x `inner`; no dropout, LayerNorm epsilon 1e-5, 8,192 positions, every third
  layer global and a `window`-token window in the others; the generator at the preset's
  fraction of the width with a word table of its own width (ModernBERT reads embeddings as wide
  as its layers); the trapezoid schedule (warm-up, constant, the last 10% decaying); records of
  rows packed with whole documents (data.pack_documents)."""
  width = c.model.hidden_size
  c.model.update(backbone='modern', embedding_size=width, num_layers=layers, num_heads=heads,
                 intermediate_size=inner, dropout_rate=0.0, attention_dropout_rate=0.0,
                 layer_norm_eps=1e-5, max_position_embeddings=8192, local_window=window,
                 untied_generator_embeddings=c.model.generator_hidden_fraction != 1)
  c.optimizer.schedule = 'trapezoid'
  c.data.pack_documents = True
  return c


def complete(saved):
  """A run's config.json (a dict) or a ConfigDict with the fields it lacks at their defaults (what
  the version that wrote it computed), as a ConfigDict."""
  return fields.complete(CONFIG, saved)


def parse(config, platform: str = '', chip: str = '') -> PretrainingConfig:
  """`config` (an ml_collections config: a file's, with the command line's overrides) typed for a
  run on `platform` (devices of kind `chip`; '' : JAX's default): ValueError (one sentence) for
  the first unknown key or field outside its range, or values that do not fit together."""
  fields.check(CONFIG, {k: v for k, v in config.items() if k not in _SECTIONS})  # the run's own
  writes = chips.writes_for_backward(platform, chip) if platform else None  # None: the backend's
  return PretrainingConfig(
      **{name: config[name] for name in _OWN.fields},
      model=ModelConfig.from_config(config.model, platform, writes),
      objective=ObjectiveConfig.from_config(config.objective, platform),
      optimizer=OptimizerConfig.from_config(config.optimizer),
      data=DataConfig.from_config(config.data),
      as_json=json.loads(config.to_json()))


_SECTIONS = tuple(name for name, f in CONFIG.fields.items() if isinstance(f, Section))


def from_json(saved) -> PretrainingConfig:
  """A run's config.json (a dict, of any version: the fields it lacks at their defaults, as that
  version computed them) typed for JAX's default backend."""
  return parse(complete(saved))


def check(config):
  """`parse`'s checks alone."""
  parse(config)
