"""The discriminator encoder with a task head.

The encoder's parameters carry pre-training's names (`embeddings`, `discriminator`), so a pre-trained
discriminator drops in unchanged; the generator is not used.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from electra_jax import model as model_lib


class Classifier(nn.Module):
  """[CLS] hidden state -> dropout -> dense (glorot-uniform): `num_outputs` float32 logits.

  One output with a squared-error loss is the regression head (STS-B). `per_token`: the same head
  on every token's hidden state ([B, L, num_outputs], tagging).
  """
  cfg: model_lib.ModelConfig
  num_outputs: int
  head_dropout_rate: float = 0.1
  per_token: bool = False

  def setup(self):
    cfg = self.cfg
    self.embeddings = model_lib.Embeddings(cfg, cfg.embedding_size)
    self.discriminator = model_lib.Encoder(cfg, cfg.hidden_size, cfg.num_layers, cfg.num_heads,
                                           cfg.intermediate_size)
    self.dropout = nn.Dropout(self.head_dropout_rate)
    self.classifier = nn.Dense(self.num_outputs, kernel_init=nn.initializers.glorot_uniform(),
                               dtype=jnp.float32, param_dtype=cfg.param_dtype)

  def __call__(self, input_ids, segment_ids, input_mask, deterministic: bool = True):
    hidden = self.discriminator(self.embeddings(input_ids, segment_ids, deterministic), input_mask,
                                deterministic)
    chosen = hidden if self.per_token else hidden[:, 0]
    return self.classifier(self.dropout(chosen.astype(jnp.float32), deterministic=deterministic))


def init_params(model: Classifier, key, pretrained=None):
  """Fresh head (and encoder, unless `pretrained` parameters of pre-training give it)."""
  ids = jnp.zeros((1, 8), jnp.int32)
  params = model.init(key, ids, ids, ids + 1)['params']
  if pretrained is not None:
    params = dict(params)
    for name in ('embeddings', 'discriminator'):
      fresh = jax.tree.map(jnp.shape, params[name])
      given = jax.tree.map(jnp.shape, pretrained[name])
      if fresh != given:
        raise ValueError(f'the pre-trained {name} parameters do not fit the model config')
      params[name] = jax.tree.map(lambda p, f: jnp.asarray(p, f.dtype), pretrained[name],
                                  params[name])
  return params
