"""The discriminator encoder with a task head.

The encoder's parameters carry pre-training's names (`embeddings`, `discriminator`), so a
pre-trained discriminator drops in unchanged; the generator is not used.
"""

import flax.linen as nn
from flax import traverse_util
import jax
import jax.numpy as jnp

from electra_jax.model import layers
from electra_jax.model import networks as model_lib


class Classifier(nn.Module):
  """[CLS] hidden state -> dropout -> dense (glorot-uniform): `num_outputs` float32 logits; the
  modern backbone puts its TaskHead (dense, GELU, LayerNorm) before the dropout, as HF's
  ModernBertFor* classes do.

  One output with a squared-error loss is the regression head (STS-B). `per_token`: the same head
  on every token's hidden state ([B, L, num_outputs], tagging). `pooling='mean'`: the head reads
  the mean of the hidden states of the example's real tokens ([CLS] and [SEP]s included) instead
  of [CLS]'s alone.

  Rows that pack several sequences (finetune/inputs/packing.py) give `positions` (each token's in
  its sequence) and `starts` ([B, S]: where each sequence starts): the head then reads each sequence
  ([B, S, num_outputs]; per token as before), the mean over its own tokens (`input_mask` numbers
  them), exactly as in a row of its own.
  """
  cfg: model_lib.ModelConfig
  num_outputs: int
  head_dropout_rate: float = 0.1
  per_token: bool = False
  pooling: str = 'cls'

  def setup(self):
    cfg = self.cfg
    self.embeddings = model_lib.Embeddings(cfg, cfg.embedding_size)
    self.discriminator = model_lib.Encoder(cfg, cfg.hidden_size, cfg.num_layers, cfg.num_heads,
                                           cfg.intermediate_size)
    if cfg.modern:
      self.head = model_lib.TaskHead(cfg)
    self.dropout = layers.Dropout(self.head_dropout_rate)
    self.classifier = nn.Dense(self.num_outputs, kernel_init=nn.initializers.glorot_uniform(),
                               dtype=jnp.float32, param_dtype=cfg.param_dtype)

  def features(self, input_ids, segment_ids, input_mask, deterministic: bool = True,
               positions=None, starts=None):
    """What the classifier reads (float32): [CLS]'s hidden state, the mean over the real tokens,
    or every token's (per_token); of each packed sequence with `starts`; the modern backbone's
    through its TaskHead."""
    hidden = self.discriminator(self.embeddings(input_ids, segment_ids, deterministic,
                                                positions=positions), input_mask, deterministic,
                                positions=positions)
    if self.per_token:
      chosen = hidden
    elif starts is not None and self.pooling == 'mean':  # [B, L, S]: token t in sequence s
      member = (input_mask[..., None] == jnp.arange(1, starts.shape[-1] + 1)).astype(jnp.float32)
      chosen = jnp.einsum('bls,blh->bsh', member, hidden.astype(jnp.float32)) / jnp.maximum(
          jnp.sum(member, 1), 1.0)[..., None]
    elif starts is not None:
      chosen = jnp.take_along_axis(hidden, jnp.maximum(starts, 0)[..., None], axis=1)
    elif self.pooling == 'mean':
      weights = input_mask.astype(jnp.float32)[..., None]
      chosen = jnp.sum(hidden.astype(jnp.float32) * weights, 1) / jnp.maximum(
          jnp.sum(weights, 1), 1.0)
    else:
      chosen = hidden[:, 0]
    if self.cfg.modern:
      return self.head(chosen)
    return chosen.astype(jnp.float32)

  def __call__(self, input_ids, segment_ids, input_mask, deterministic: bool = True,
               positions=None, starts=None):
    chosen = self.features(input_ids, segment_ids, input_mask, deterministic, positions, starts)
    return self.classifier(self.dropout(chosen, deterministic=deterministic))


def per_example(outputs, slots):
  """[X, K, ...] of per-sequence outputs [R, S, ...] at each example's `slots` ([X, K] of
  row * S + slot; -1, an example that is not there, reads the first)."""
  flat = outputs.reshape((-1,) + outputs.shape[2:])
  return jnp.take(flat, jnp.maximum(slots, 0), axis=0)


def reinit_parts(spec: str, num_layers: int) -> tuple[str, ...]:
  """The parts named by `spec` ('embeddings', 'word_embeddings', 'layer_<i>', 'top', comma
  separated; '' for none) as parameter paths; ValueError naming the choices otherwise."""
  layers = [f'layer_{i}' for i in range(num_layers)]
  paths = {'embeddings': 'embeddings', 'word_embeddings': 'embeddings/word_embeddings',
           'top': f'discriminator/{layers[-1]}', **{n: f'discriminator/{n}' for n in layers}}
  names = [n.strip() for n in spec.split(',') if n.strip()]
  unknown = [n for n in names if n not in paths]
  if unknown:
    raise ValueError(f'reinit names {", ".join(map(repr, unknown))}, which this model does not '
                     f'have; use a comma-separated list of {", ".join(paths)}')
  return tuple(dict.fromkeys(paths[n] for n in names))


def init_params(model: nn.Module, key, pretrained=None, reinit: tuple[str, ...] = (),
                shape: tuple = (1, 8)):
  """Fresh head (and encoder, unless `pretrained` parameters of pre-training give it; and the
  pre-trained detection head, for a model that has one), initialized on inputs of `shape`. The
  parameter paths in `reinit` (see `reinit_parts`) keep their fresh values even so."""
  ids = jnp.zeros(shape, jnp.int32)
  params = model.init(key, ids, ids + 1, ids + 1)['params']
  if pretrained is not None:
    fresh, params = params, dict(params)
    # the encoder, and the detection head where the model has one (the prompted kind's)
    for name in ('embeddings', 'discriminator') + tuple(
        n for n in ('discriminator_predictions',) if n in params and n in pretrained):
      shapes = jax.tree.map(jnp.shape, params[name])
      given = jax.tree.map(jnp.shape, pretrained[name])
      if shapes != given:
        raise ValueError(f'the pre-trained {name} parameters do not fit the model config')
      params[name] = jax.tree.map(lambda p, f: jnp.asarray(p, f.dtype), pretrained[name],
                                  params[name])
    if 'head' in params:  # the modern TaskHead: as HF loads `head` from a pre-trained ModernBERT
      params['head'] = _pretrained_transform(pretrained, params['head'])
    if reinit:
      flat = traverse_util.flatten_dict(params, sep='/')
      new = traverse_util.flatten_dict(fresh, sep='/')
      params = traverse_util.unflatten_dict(
          {k: new[k] if any(k == p or k.startswith(p + '/') for p in reinit) else v
           for k, v in flat.items()}, sep='/')
  return params


def _pretrained_transform(pretrained, fresh):
  """The TaskHead's parameters from the pre-trained head of its shapes that holds a `dense` and a
  `LayerNorm`: the detection head's, else the MLM head's (a BERT-MLM pre-training); `fresh`
  where neither fits."""
  shapes = jax.tree.map(jnp.shape, fresh)
  for name in ('discriminator_predictions', 'generator_predictions'):
    head = pretrained.get(name, {})
    part = {k: head[k] for k in fresh if k in head}
    if part.keys() == fresh.keys() and jax.tree.map(jnp.shape, part) == shapes:
      return jax.tree.map(lambda p, f: jnp.asarray(p, f.dtype), part, fresh)
  return fresh
