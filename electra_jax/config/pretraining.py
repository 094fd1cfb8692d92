"""The one pre-training config: the run's own fields, declared here, and each wing's section,
declared by its wing (model/config.py, objectives/config.py, train/config.py, data/config.py):
every field's default, meaning, range and role, once.

Size presets in `configs/` start from `default_config()` and set their whole column of the reference
table. Derived fields (FFN width, heads, max predictions per sequence, decay steps, eval batch) are
FieldReferences computed from their source (`ref + 0`, never the source's own reference): an
override of the source reaches them, and setting a derived field never changes its source.

From `CONFIG` come the config itself (`default_config`), the checks of every value with the refusal
of unknown keys (`check`), what a run resuming in its workdir must keep (`resume: same`; the model,
objective and data sections and the seed, but for how the model is computed) and what a run starting
from other weights must share with them or takes from them (`init_from`). The model's and the
objective's typed configs (model.config.ModelConfig, objectives.config.ObjectiveConfig) are the
dataclasses their sections are made from. See electra_jax/fields.py.
"""

from electra_jax import fields
from electra_jax.data.config import DATA
from electra_jax.fields import AT_LEAST_0, AT_LEAST_1, Field as F, Section, one_of
from electra_jax.model.config import MODEL
from electra_jax.objectives.config import OBJECTIVE
from electra_jax.train.config import OPTIMIZER

CONFIG = Section(resume='free', fields=dict(
    seed=fields.SEED,
    train_steps=F(1_000_000, 'optimizer steps', AT_LEAST_1),
    log_every=F(100, 'steps between progress lines / metric records (the only device reads)',
                AT_LEAST_1),
    eval_every=F(0, 'steps between held-out evaluations; 0: only at the end', AT_LEAST_0),
    eval_batches=F(20, 'batches per held-out evaluation', AT_LEAST_1),
    save_every=F(0, 'steps between checkpoints; 0: only at the end', AT_LEAST_0),
    keep_checkpoints=F(3, 'the latest checkpoints kept on disk', AT_LEAST_1),
    keep_best=F('', "a held-out metric (e.g. 'disc_auc'): also keep the checkpoint best by it"),
    microbatches=F(0, 'gradient accumulation: the global batch in this many sequential parts (same '
                   "loss and gradient); 0: the fewest whose step fits the device's memory (1 on "
                   'CPUs)', AT_LEAST_0),
    fsdp=F(None, 'True: state split over the devices (FSDP, partitioning.py); False: replicated; '
           'None (auto): split on TPU slices only', one_of(None, False, True), field_type=bool),
    nonfinite=F('stop', "a NaN/Inf loss or gradient norm: 'stop' the run, or 'skip' such steps",
                one_of('stop', 'skip')),
    init_from=F('', 'start from other weights: an HF folder, launch/export.py\'s, an original '
                'checkpoint'),
    init_generator=F('', "with an HF discriminator folder: its generator's folder ('' : fresh)"),
    model=MODEL, objective=OBJECTIVE, optimizer=OPTIMIZER, data=DATA,
))


def default_config():
  """The config with every default (an ml_collections.ConfigDict)."""
  return fields.build(CONFIG)


def complete(saved):
  """A run's config.json (a dict) or a ConfigDict with the fields it lacks at their defaults (what
  the version that wrote it computed), as a ConfigDict."""
  return fields.complete(CONFIG, saved)


def check(config):
  """Raises ValueError (one sentence) for the first unknown key or field outside its range, then
  for values that do not fit together."""
  fields.check(CONFIG, config)
  o = config.objective
  if o.mask_token_prob + o.random_token_prob > 1:
    raise ValueError(f'objective.mask_token_prob + random_token_prob is '
                     f'{o.mask_token_prob + o.random_token_prob}; they must add up to at most 1')
