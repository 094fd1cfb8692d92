"""The discriminator encoder with a task head.

The encoder's parameters carry pre-training's names (`embeddings`, `discriminator`), so a pre-trained
discriminator drops in unchanged; the generator is not used.
"""

import flax.linen as nn
from flax import traverse_util
import jax
import jax.numpy as jnp

from electra_jax import model as model_lib


class Classifier(nn.Module):
  """[CLS] hidden state -> dropout -> dense (glorot-uniform): `num_outputs` float32 logits.

  One output with a squared-error loss is the regression head (STS-B). `per_token`: the same head
  on every token's hidden state ([B, L, num_outputs], tagging). `pooling='mean'`: the head reads
  the mean of the hidden states of the example's real tokens ([CLS] and [SEP]s included) instead
  of [CLS]'s alone.
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
    self.dropout = model_lib.Dropout(self.head_dropout_rate)
    self.classifier = nn.Dense(self.num_outputs, kernel_init=nn.initializers.glorot_uniform(),
                               dtype=jnp.float32, param_dtype=cfg.param_dtype)

  def __call__(self, input_ids, segment_ids, input_mask, deterministic: bool = True):
    hidden = self.discriminator(self.embeddings(input_ids, segment_ids, deterministic), input_mask,
                                deterministic)
    if self.per_token:
      chosen = hidden
    elif self.pooling == 'mean':
      weights = input_mask.astype(jnp.float32)[..., None]
      chosen = jnp.sum(hidden.astype(jnp.float32) * weights, 1) / jnp.maximum(
          jnp.sum(weights, 1), 1.0)
    else:
      chosen = hidden[:, 0]
    return self.classifier(self.dropout(chosen.astype(jnp.float32), deterministic=deterministic))


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


def init_params(model: Classifier, key, pretrained=None, reinit: tuple[str, ...] = ()):
  """Fresh head (and encoder, unless `pretrained` parameters of pre-training give it). The
  parameter paths in `reinit` (see `reinit_parts`) keep their fresh values even so."""
  ids = jnp.zeros((1, 8), jnp.int32)
  params = model.init(key, ids, ids + 1, ids + 1)['params']
  if pretrained is not None:
    fresh, params = params, dict(params)
    for name in ('embeddings', 'discriminator'):
      shapes = jax.tree.map(jnp.shape, params[name])
      given = jax.tree.map(jnp.shape, pretrained[name])
      if shapes != given:
        raise ValueError(f'the pre-trained {name} parameters do not fit the model config')
      params[name] = jax.tree.map(lambda p, f: jnp.asarray(p, f.dtype), pretrained[name],
                                  params[name])
    if reinit:
      flat = traverse_util.flatten_dict(params, sep='/')
      new = traverse_util.flatten_dict(fresh, sep='/')
      params = traverse_util.unflatten_dict(
          {k: new[k] if any(k == p or k.startswith(p + '/') for p in reinit) else v
           for k, v in flat.items()}, sep='/')
  return params


class QuestionAnswering(nn.Module):
  """SQuAD's head: start logits; end logits conditioned on the start (the start token's hidden
  state concatenated to every token's, dense 512 + GELU, LayerNorm, dense 1); for SQuAD 2.0 an
  answerability logit from [CLS] and the start-probability-weighted hidden state.

  Spans may only start and end on context tokens or on [CLS] (position 0: "no answer here"). With
  `start_positions` (training) the end is conditioned on the gold start; without, on each of the
  `start_top` best starts.
  """
  cfg: model_lib.ModelConfig
  answerable: bool = False
  start_top: int = 5
  width: int = 512

  def setup(self):
    cfg = self.cfg
    self.embeddings = model_lib.Embeddings(cfg, cfg.embedding_size)
    self.discriminator = model_lib.Encoder(cfg, cfg.hidden_size, cfg.num_layers, cfg.num_heads,
                                           cfg.intermediate_size)
    dense = lambda n: nn.Dense(n, kernel_init=nn.initializers.glorot_uniform(), dtype=jnp.float32,
                               param_dtype=cfg.param_dtype)
    self.start_dense, self.end_dense, self.end_output = dense(1), dense(self.width), dense(1)
    self.end_norm = nn.LayerNorm(epsilon=cfg.layer_norm_eps, param_dtype=cfg.param_dtype)
    self.answer_dense, self.answer_output = dense(self.width), dense(1)

  def __call__(self, input_ids, segment_ids, input_mask, deterministic: bool = True,
               start_positions=None):
    h = self.discriminator(self.embeddings(input_ids, segment_ids, deterministic), input_mask,
                           deterministic).astype(jnp.float32)
    length = h.shape[1]
    allowed = ((segment_ids == 1) & (input_mask > 0)) | (jnp.arange(length) == 0)[None]
    mask = lambda x: jnp.where(allowed.reshape(allowed.shape[:1] + (1,) * (x.ndim - 2) +
                                               allowed.shape[1:]), x, -1e4)
    start_logits = mask(self.start_dense(h)[..., 0])
    if start_positions is not None:
      starts = start_positions[:, None]
    else:
      starts = jax.lax.top_k(start_logits, min(self.start_top, length))[1]
    start_h = jnp.take_along_axis(h, starts[..., None], axis=1)  # [B, K, H]
    k = starts.shape[1]
    pair = jnp.concatenate([jnp.broadcast_to(h[:, None], (h.shape[0], k) + h.shape[1:]),
                            jnp.broadcast_to(start_h[:, :, None], (h.shape[0], k, length,
                                                                   h.shape[2]))], -1)
    end = self.end_norm(nn.gelu(self.end_dense(pair), approximate=False))
    end_logits = mask(self.end_output(end)[..., 0])  # [B, K, L]
    out = {'start_logits': start_logits, 'start_top': starts, 'end_logits': end_logits}
    if self.answerable:
      weights = jax.nn.softmax(start_logits, axis=-1)
      summary = jnp.einsum('bl,blh->bh', weights, h)
      x = nn.gelu(self.answer_dense(jnp.concatenate([summary, h[:, 0]], -1)), approximate=False)
      out['null_logit'] = self.answer_output(x)[:, 0]
    return out
