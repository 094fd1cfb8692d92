"""The step's setup of a pre-training (train/step.py's `Setup` with its objective): the model,
the objective's loss and draws, the optimizer, the microbatches and the split of the state."""

import dataclasses
import functools

from electra_jax.config import pretraining as config_lib
from electra_jax.data.tokenizer import SpecialIds
from electra_jax.model import networks as model_lib
from electra_jax.objectives import common as objective_common
from electra_jax.objectives import registry as objectives
from electra_jax.train import optim
from electra_jax.train import step as step_lib


@dataclasses.dataclass(frozen=True)
class Setup(step_lib.Setup):
  """A pre-training's setup: the engine's, and the objective's view of the config and the
  vocabulary's special ids it was built with."""
  objective_cfg: objective_common.ObjectiveConfig | None = None
  special: SpecialIds | None = None


def build_setup(cfg: config_lib.PretrainingConfig, special: SpecialIds,
                model_cfg: model_lib.ModelConfig | None = None) -> Setup:
  """The setup of the pre-training `cfg` (typed for its devices: config/pretraining.py `parse`).
  `model_cfg`: the model's view decided for the run (its attention path resolved), else cfg's.
  `microbatches=0` (auto) builds one part; the run picks the number (aot.fit_microbatches)."""
  model_cfg = model_cfg or cfg.model
  objective_cfg = cfg.objective
  model = model_lib.Electra(model_cfg)
  tx, schedule = optim.make_optimizer(cfg.optimizer)
  objective = objectives.get(cfg.objective.name).loss

  def loss_fn(params, batch, rng, deterministic=False, draws=None):
    return objective(params, batch, rng, model=model, cfg=objective_cfg, special=special,
                     deterministic=deterministic, draws=draws)

  def draw(rng, batch):
    return objective_common.draw(rng, batch, objective_cfg, special, model_cfg.vocab_size)

  return Setup(model_cfg=model_cfg, model=model, tx=tx, schedule=schedule, loss_fn=loss_fn,
               seed=cfg.seed, init_params=functools.partial(model_lib.init_params, model_cfg),
               objective_cfg=objective_cfg, special=special, draw=draw,
               microbatches=max(1, cfg.microbatches), fsdp=cfg.fsdp,
               check_update=not optim.bounds_updates(cfg.optimizer))
