"""The pre-training optimizer: the original's AdamW, its learning-rate schedule and decay mask.

Original behaviour (the defaults):
- Adam with beta 0.9/0.999, eps 1e-6 and NO bias correction: u = m / (sqrt(v) + eps);
- decoupled weight decay 0.01 added to u (so multiplied by the learning rate), not applied to
  LayerNorm parameters or biases (embedding tables are decayed);
- one global-norm clip at 1.0 over all gradients, before Adam;
- lr(t) = peak * (1 - min(t, T) / T) ** power * min(1, t / W): the warmup factor multiplies the
  decay, so the top is peak * (1 - W / T), reached at t = W.
Switches: `bias_correction` (standard Adam), `schedule='warmup_then_decay'` (up to the peak over W,
then decay to 0 over the remaining T - W steps), `schedule='trapezoid'` (up to the peak over W,
constant, then (1 - x) ** power down to 0 over the last `cooldown_fraction` of T: the modern
encoders' warm-up, stable, decay).

Fine-tuning adds layer-wise learning-rate decay (`layerwise_multipliers`): the head learns at the
full rate, each layer below at `decay` times the one above, the embeddings below the bottom layer.
"""

import re
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from electra_jax.train.config import SCHEDULES, OptimizerConfig

_NO_DECAY = re.compile(r'LayerNorm|layer_norm|bias')


class AdamState(NamedTuple):
  mu: optax.Updates
  nu: optax.Updates


def scale_by_adam_without_bias_correction(b1: float, b2: float, eps: float):
  """Adam's update direction m / (sqrt(v) + eps) with raw (uncorrected) moment estimates."""

  def init(params):
    zeros = lambda p: jnp.zeros_like(p, jnp.float32)
    return AdamState(jax.tree.map(zeros, params), jax.tree.map(zeros, params))

  def update(grads, state, params=None):
    del params
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g.astype(jnp.float32), state.mu, grads)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g.astype(jnp.float32)),
                      state.nu, grads)
    updates = jax.tree.map(lambda m, v, g: (m / (jnp.sqrt(v) + eps)).astype(g.dtype), mu, nu,
                           grads)
    return updates, AdamState(mu, nu)

  return optax.GradientTransformation(init, update)


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformationExtraArgs:
  """optax.clip_by_global_norm (the same arithmetic), taking the gradients' norm from the caller
  when it has one (`tx.update(..., global_norm=n)`): the train step computes the norm once for its
  NaN guard, and its update branch would otherwise sum the squares of every leaf again (one small
  kernel per parameter on a GPU)."""

  def update(updates, state, params=None, *, global_norm=None, **extra_args):
    del params, extra_args
    g_norm = optax.tree.norm(updates) if global_norm is None else global_norm
    trigger = jnp.squeeze(g_norm < max_norm)
    clip = lambda t: jax.lax.select(trigger, t, (t / g_norm.astype(t.dtype)) * max_norm)
    return jax.tree.map(clip, updates), state

  return optax.GradientTransformationExtraArgs(lambda _: optax.EmptyState(), update)


def bounds_updates(opt_cfg) -> bool:
  """Whether a finite gradient norm makes every update of `make_optimizer(opt_cfg)` finite, so
  the train step need not compute the update's norm to guard against a non-finite one.

  It does when the gradients are clipped before Adam: every clipped entry is at most
  `grad_clip_norm`, so Adam's moments stay bounded and m / (sqrt(v) + eps) is at most about
  `grad_clip_norm / eps` (eps is positive; from 1e-30 up it is a normal float32 that no device
  flushes to zero, which would make 0 / 0 of a parameter that never had a gradient); weight decay,
  the schedule and the learning-rate factors are finite products of finite parameters."""
  return opt_cfg.grad_clip_norm > 0 and opt_cfg.eps >= 1e-30


def learning_rate_schedule(peak: float, warmup_steps: int, decay_steps: int, power: float = 1.0,
                           kind: str = 'original', cooldown_fraction: float = 0.1):
  """lr as a function of the number of updates already applied (0 for the first update)."""
  if kind not in SCHEDULES:
    raise ValueError(f"optimizer.schedule is {kind!r}; use one of {', '.join(SCHEDULES)}")
  if decay_steps <= 0:
    raise ValueError(f'optimizer.decay_steps must be positive, not {decay_steps}')

  def schedule(step):
    t = jnp.asarray(step, jnp.float32)
    warmup = jnp.minimum(1.0, t / warmup_steps) if warmup_steps > 0 else 1.0
    if kind == 'original':
      decay = (1.0 - jnp.minimum(t, decay_steps) / decay_steps) ** power
    elif kind == 'trapezoid':
      cooldown = max(round(cooldown_fraction * decay_steps), 1)
      decay = (1.0 - jnp.clip(t - (decay_steps - cooldown), 0, cooldown) / cooldown) ** power
    else:
      span = max(decay_steps - warmup_steps, 1)
      decay = (1.0 - jnp.clip(t - warmup_steps, 0, span) / span) ** power
    return peak * decay * warmup

  return schedule


def highest_rate(opt_cfg, steps: int) -> float:
  """The highest learning rate of a run of `steps` updates, as a share of the peak (the original
  schedule multiplies the warm-up by the decay: warming up over all of a run's steps reaches
  25%)."""
  schedule = learning_rate_schedule(1.0, opt_cfg.warmup_steps, opt_cfg.decay_steps,
                                    opt_cfg.decay_power, opt_cfg.schedule,
                                    opt_cfg.cooldown_fraction)
  t = np.unique(np.append(np.linspace(0, steps - 1, 10_001).round(),
                          min(opt_cfg.warmup_steps, steps - 1)))
  return float(np.max(np.asarray(schedule(t))))


def schedule_warnings(opt_cfg, steps: int, warmup: str, fix: str) -> list[str]:
  """Sentences for a schedule that cannot train as meant over `steps` updates: steps past the
  decay at learning rate 0, a warm-up (`warmup`: the field that sets it; `fix`: what to do) whose
  product with the decay never comes near the peak."""
  out = []
  if steps > opt_cfg.decay_steps:
    out.append(f'optimizer.decay_steps={opt_cfg.decay_steps} is below the {steps} training '
               f'steps: the learning rate is 0 from step {opt_cfg.decay_steps + 1} on, so the last '
               f'{steps - opt_cfg.decay_steps} steps change nothing; set decay_steps to the '
               'training steps (its default) or train fewer steps')
  top = highest_rate(opt_cfg, steps)
  if top < 0.5:
    out.append(f'the learning rate never rises above {top:.0%} of its peak '
               f'{opt_cfg.learning_rate:g}: {warmup} warms up over {opt_cfg.warmup_steps} of '
               f'{opt_cfg.decay_steps} steps, and the schedule {opt_cfg.schedule!r} multiplies the '
               f'warm-up by the decay; {fix}')
  return out


def _name(path) -> str:
  """A parameter's path in the tree as 'embeddings/word_embeddings'."""
  return '/'.join(str(getattr(k, 'key', k)) for k in path)


def weight_decay_mask(params):
  """True where weight decay applies: every parameter whose path names no LayerNorm or bias."""
  def decays(path, _):
    return _NO_DECAY.search(_name(path)) is None
  return jax.tree_util.tree_map_with_path(decays, params)


_LAYER = re.compile(r'(?:^|/)layer_(\d+)/')


def layer_depth(path: str, num_layers: int) -> int:
  """0 for the embeddings (and their projection), i + 1 for layer i, L + 1 for the head."""
  if path.startswith('embeddings/') or '/embeddings_project/' in f'/{path}':
    return 0
  if (m := _LAYER.search(path)) and path.startswith('discriminator/'):
    return int(m.group(1)) + 1
  return num_layers + 1


def layerwise_multipliers(params, num_layers: int, decay: float, rule: str = 'intended'):
  """Per-parameter learning-rate factors of layer-wise decay over an L-layer encoder.

  'intended': head x1, layer i (0 = bottom) x decay^(L - i), embeddings x decay^(L + 1).
  'original': the original code's off-by-one, which its published results used: head x1, layer i
  x decay^(L + 1 - i) (the top layer decay^2), embeddings x decay^(L + 2).
  """
  if rule not in ('intended', 'original'):
    raise ValueError(f"layerwise_decay_rule is {rule!r}; use 'intended' or 'original'")
  extra = 1 if rule == 'original' else 0
  def factor(path, _):
    depth = layer_depth(_name(path), num_layers)
    return 1.0 if depth == num_layers + 1 else decay ** (num_layers + 1 + extra - depth)
  return jax.tree_util.tree_map_with_path(factor, params)


def with_word_table_factor(factors, factor: float):
  """`factors` with the word table's entry (embeddings/word_embeddings) multiplied by `factor`."""
  def scaled(path, f):
    return f * factor if _name(path) == 'embeddings/word_embeddings' else f
  return jax.tree_util.tree_map_with_path(scaled, factors)


def scale_by_tree(factors) -> optax.GradientTransformation:
  """Multiplies each update by its own constant factor (a tree shaped like the parameters)."""
  def update(updates, state, params=None):
    del params
    return jax.tree.map(lambda u, f: u * jnp.asarray(f, u.dtype), updates, factors), state
  return optax.GradientTransformation(lambda _: optax.EmptyState(), update)


def make_optimizer(opt_cfg: OptimizerConfig,
                   lr_factors=None) -> tuple[optax.GradientTransformation, Callable]:
  """(optax transformation, learning-rate schedule) of `opt_cfg` (checked when it was made).

  `lr_factors` (a tree like the parameters, e.g. `layerwise_multipliers`) scales each parameter's
  learning rate, weight decay included (as the original does).
  """
  schedule = learning_rate_schedule(opt_cfg.learning_rate, opt_cfg.warmup_steps,
                                    opt_cfg.decay_steps, opt_cfg.decay_power, opt_cfg.schedule,
                                    opt_cfg.cooldown_fraction)
  if opt_cfg.bias_correction:
    adam = optax.scale_by_adam(opt_cfg.b1, opt_cfg.b2, opt_cfg.eps)
  else:
    adam = scale_by_adam_without_bias_correction(opt_cfg.b1, opt_cfg.b2, opt_cfg.eps)
  parts = [clip_by_global_norm(opt_cfg.grad_clip_norm)] if opt_cfg.grad_clip_norm else []
  parts += [adam,
            optax.add_decayed_weights(opt_cfg.weight_decay, mask=weight_decay_mask),
            optax.scale_by_learning_rate(schedule)]
  if lr_factors is not None:
    parts.append(scale_by_tree(lr_factors))
  return optax.chain(*parts), schedule
