"""The model's FLOPs: the paper's accounting (to compare with its compute figures) and what our
encoders multiply (for MFU).

`paper_train_flops` follows the accounting of the ELECTRA paper (its Table 1 and 8 compute column):
every operation counts (matmul = 2 * m * n * k, softmax 5, LayerNorm 5, GELU 8, dropout 4 per
element), the backward pass costs as much as the forward, embedding lookups are dense one-hot
matmuls, and the generator's output softmax is charged for a fixed 15.625% of the positions.

`encoder_matmuls` counts what our encoders multiply (lookups free), the part of a pre-training
step's model FLOPs (pretraining/step_flops.py, with its objective's heads) and of a fine-tuning's
that the network's size decides.
"""

from electra_jax.model.networks import ModelConfig

_SOFTMAX, _LAYER_NORM, _GELU, _DROPOUT = 5, 5, 8, 4


def _paper_block(h, s, inter, heads):
  """Forward FLOPs of one transformer layer over a sequence of s tokens (paper's accounting)."""
  per_token = (3 * 2 * h * h + 3 * h  # query, key, value
               + 2 * h * s + (_SOFTMAX + _DROPOUT + 1) * heads * s  # scores, softmax, scale
               + 2 * h * s  # weighted sum of values
               + 2 * h * h + h + _DROPOUT * h + h + _LAYER_NORM  # attention output
               + 2 * h * inter + _GELU * inter + inter  # intermediate
               + 2 * h * inter + h + _DROPOUT * h + h + _LAYER_NORM * h)  # output
  return per_token * s


def _paper_inputs(h, e, s, v):
  per_token = 2 * e * v + 2 * e * (s + 2) + 2 * e + _LAYER_NORM * e + _DROPOUT * e
  if e != h:
    per_token += 2 * h * e + h
  return per_token * s


def _paper_mlm_output(h, e, s, v, frac):
  per_token = (2 * e * v + 2 * h * e + e + _GELU * e + _LAYER_NORM * e + _SOFTMAX * v + 2 * v)
  return frac * per_token * s


def _paper_rtd_output(h, s):
  return (2 * h * h + h + _GELU * h + 2 * h) * s


def paper_train_flops(cfg: ModelConfig, seq_len: int, batch_size: int, steps: float,
                      output_frac: float = 0.15625) -> float:
  """Total pre-training FLOPs of ELECTRA by the paper's accounting."""
  h, e, v, s = cfg.hidden_size, cfg.embedding_size, cfg.vocab_size, seq_len
  disc = (cfg.num_layers * _paper_block(h, s, cfg.intermediate_size, max(h // 64, 1))
          + _paper_inputs(h, e, s, v) + _paper_rtd_output(h, s))
  gen = 0.0
  if cfg.generator_shape.network:
    hg = cfg.generator_hidden_size
    eg = hg if cfg.untied_generator_embeddings else e
    gen = (cfg.generator_num_layers * _paper_block(hg, s, 4 * hg, max(hg // 64, 1))
           + _paper_inputs(hg, eg, s, v) + _paper_mlm_output(hg, eg, s, v, output_frac))
  return 2.0 * batch_size * steps * (disc + gen)


def encoder_matmuls(h, layers, inter, e, s):
  """Forward matmul FLOPs of an encoder of `layers` layers (width h, FFN inter, embeddings e
  projected to h where they differ) over one example of s tokens."""
  per_token = layers * (2 * 4 * h * h + 2 * 2 * h * inter + 2 * 2 * h * s)
  if e != h:
    per_token += 2 * e * h
  return per_token * s


def modern_encoder_matmuls(cfg: ModelConfig):
  """`encoder_matmuls` for the modern backbone of `cfg` (same arguments): the query, key and value
  and the output (8 h^2 a token), GeGLU's two halves in and one out (6 h inter), and attention
  over the whole sequence in global layers, over the window (at most local_window + 1 keys) in
  local ones."""
  def count(h, layers, inter, e, s):
    window = min(s, 2 * (cfg.local_window // 2) + 1)
    keys = sum(s if cfg.is_global(i) else window for i in range(layers))
    return (layers * (2 * 4 * h * h + 2 * 3 * h * inter) + 2 * 2 * h * keys) * s
  return count


def matmuls_of(cfg: ModelConfig):
  """The encoder FLOPs counter of `cfg`'s backbone (`encoder_matmuls`' arguments)."""
  return modern_encoder_matmuls(cfg) if cfg.modern else encoder_matmuls


def encoder_forward_flops(cfg: ModelConfig, seq_len: int) -> float:
  """Matmul FLOPs of one example's forward pass through the discriminator's encoder."""
  return float(matmuls_of(cfg)(cfg.hidden_size, cfg.num_layers, cfg.intermediate_size,
                               cfg.embedding_size, seq_len))
