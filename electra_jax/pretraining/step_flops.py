"""The model FLOPs of a pre-training step, behind its MFU: what the step multiplies (the
vocabulary projection only at the N prediction slots, lookups free), with the usual backward = 2 x
forward, for the main network, its objective's heads and, where it has one, the generator."""

from electra_jax.model import flops
from electra_jax.model.networks import ModelConfig
from electra_jax.objectives import registry as objectives
from electra_jax.objectives.config import ObjectiveConfig


def step_matmul_flops(cfg: ModelConfig, seq_len: int, batch_size: int,
                      num_predictions: int, objective: str = 'electra',
                      objective_cfg: ObjectiveConfig | None = None) -> float:
  """Matmul FLOPs of one train step (forward + backward = 3 x forward) of `objective`: the main
  network, its heads (the objective's `head_flops`), where it has one the generator, and the
  further passes its `extra_flops` counts (from `objective_cfg`'s fields; None: their defaults)."""
  h, e, v, s, n = cfg.hidden_size, cfg.embedding_size, cfg.vocab_size, seq_len, num_predictions
  entry = objectives.get(objective)
  encoder = flops.matmuls_of(cfg)
  fwd = encoder(h, cfg.num_layers, cfg.intermediate_size, e, s)
  fwd += entry.head_flops(h, e, v, s, n)
  if entry.generator:  # the generator's encoder(s) and MLM head, by its shape
    fwd += cfg.generator_shape.forward_flops(cfg, s, n, encoder)
  extra = 0.0
  if entry.extra_flops:
    extra = entry.extra_flops(cfg, objective_cfg or ObjectiveConfig(), s, n, encoder)
  return batch_size * (3.0 * fwd + extra)
