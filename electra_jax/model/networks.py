"""ELECTRA's networks as Flax Linen modules. No training logic lives here.

Parameter tree of `Electra` (names chosen to map one-to-one onto the original and HF checkpoints):

    embeddings/{word_embeddings, position_embeddings, token_type_embeddings, LayerNorm}  (shared)
    discriminator/{embeddings_project?, layer_0 .. layer_{L-1}}
    discriminator_predictions/{dense, dense_prediction}
    generator/{embeddings_project?, layer_0 ..}          (the generator's own encoder(s):
    cloze_ltr/..., cloze_rtl/...                          model/generators.py, by its shape)
    generator_embeddings/...                             (untied generator embeddings only)
    generator_predictions/{dense, LayerNorm, output_bias}
    discriminator_mlm/{dense, LayerNorm, output_bias}    (Replace / All-Tokens MLM objectives only)
    correction_head/{dense?, output_bias}                (COCO-LM only, with
    sequence_head/{dense, LayerNorm}                      discriminator_predictions its copy head)
    generator_mixture/kernel [K, H]                      (AMOS only: a mixture logit per exit)
    embeddings_residual                                  (GDES only: the discriminator's word table
                                                          is stop_gradient(word_embeddings) + it)

A layer is post-LayerNorm BERT: {query, key, value, attention_output, attention_LayerNorm,
intermediate, output, output_LayerNorm}; with `model.backbone='modern'`, ModernBERT's
(model/modern.py: {attn_norm, Wqkv, Wo, mlp_norm, Wi, mlp_Wo}, each encoder ending in a
`final_norm`), the embeddings {word_embeddings, LayerNorm} alone, and the heads' dense layers and
LayerNorms without biases. Matmuls run in `dtype`; attention softmax, the generator's
vocabulary logits and the discriminator's logits are float32.
"""

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from electra_jax.model import attention as attention_lib
from electra_jax.model import attention_masks
from electra_jax.model import modern
from electra_jax.model.config import ModelConfig
from electra_jax.model.layers import (Dense, Dropout, LayerNorm, dropout_words, gelu_for,
                                      low_precision_matmul, small_table_lookup,
                                      straight_through_rows, truncated_normal)


class Embeddings(nn.Module):
  """Word + token-type + position embeddings, then LayerNorm and dropout (the modern backbone:
  the word embeddings alone, then a LayerNorm without bias: positions are rotary, in the
  layers)."""
  cfg: ModelConfig
  embedding_size: int

  def setup(self):
    cfg, dt = self.cfg, jnp.dtype(self.cfg.param_dtype)
    init = truncated_normal(cfg.initializer_range)
    self.word_embeddings = self.param('word_embeddings', init,
                                      (cfg.vocab_size, self.embedding_size), dt)
    if not cfg.modern:
      self.position_embeddings = self.param('position_embeddings', init,
                                            (cfg.max_position_embeddings, self.embedding_size), dt)
      self.token_type_embeddings = self.param('token_type_embeddings', init,
                                              (cfg.type_vocab_size, self.embedding_size), dt)
    self.LayerNorm = LayerNorm(epsilon=cfg.layer_norm_eps, dtype=cfg.dtype, param_dtype=dt,
                               use_bias=not cfg.modern)
    self.dropout = Dropout(cfg.dropout_rate, cfg.writes_for_backward)

  def __call__(self, input_ids, segment_ids, deterministic: bool, residual=None, positions=None,
               soft=None):
    """With `residual` (GDES), the word table is stop_gradient(table) + residual. `positions`
    ([B, L]; default 0, 1, ... in every row): each token's position in its own sequence, which a
    row packing several sequences starts again at each. `soft` (AMOS: slots [B, N], samples
    [B, N, V]): at each slot's position the word vector is its sample @ table, a straight-through
    one-hot whose value is that of the token the ids hold there: the lookup's value, and a
    gradient that reaches the sample (each slot's sample scaled by its share of the position)."""
    length = input_ids.shape[-1]
    table = self.word_embeddings
    if residual is not None:
      table = jax.lax.stop_gradient(table) + residual
    x = jnp.take(table, input_ids, axis=0)
    if soft is not None:  # + (sample - its value) @ table: zero, with the sample's gradient
      slots, sample = soft
      vectors = straight_through_rows(sample, jax.lax.stop_gradient(table)).astype(x.dtype)
      x = x + jax.vmap(lambda p, v: jnp.zeros((length, v.shape[-1]), v.dtype).at[p].add(v))(
          slots, vectors)
    if not self.cfg.modern:  # (the modern backbone: no token types; rotary positions, in layers)
      x = x + small_table_lookup(self.token_type_embeddings, segment_ids)
      x = x + (self.position_embeddings[None, :length] if positions is None
               else jnp.take(self.position_embeddings, positions, axis=0))
    flat = x.reshape(-1, x.shape[-1])  # reductions over one axis in the backward (TransformerLayer)
    return self.dropout(self.LayerNorm(flat), deterministic=deterministic).reshape(x.shape)

  def table(self):
    return self.word_embeddings


class TransformerLayer(nn.Module):
  """One post-LayerNorm BERT layer: self-attention and a GELU feed-forward block."""
  cfg: ModelConfig
  hidden_size: int
  num_heads: int
  intermediate_size: int

  direction: str = ''  # '' every key, 'ltr' / 'rtl' keys up to / from the query (ELECTRIC)

  @nn.compact
  def __call__(self, x, input_mask, deterministic: bool):
    """x: [B, L, H]; `input_mask`: [B, L], 1 for the keys a query may attend to (real tokens).

    Inside, the tokens are one axis ([B * L, H]; a free reshape, and dropout's bits are indexed by
    position in the flat array, so the masks are the same): the gradients of biases and LayerNorm
    parameters are then reductions over one leading axis, which XLA's GPU backend reads in place,
    where over [B, L] it first copied the tensor into a batch-minor layout (docs/measured.md).
    """
    cfg = self.cfg
    batch, length, _ = x.shape
    x = x.reshape(batch * length, x.shape[-1])
    dense = lambda n, name: Dense(n, cfg, name=name)
    head = self.hidden_size // self.num_heads
    # the dropout mask of the probabilities is a hash of these words and (row, head, query, key)
    rate = 0.0 if deterministic else cfg.attention_dropout_rate
    words = dropout_words(self) if rate > 0 else None
    split = lambda y: y.reshape(batch, length, self.num_heads, head)
    # (the query's and value's bias gradients: the attention kernel's written bfloat16 outputs
    # summed over the tokens by a matmul on TPUs, layers.low_precision_dense)
    q = split(Dense(self.hidden_size, cfg, name='query', bias_by_matmul=True)(x))
    # The key's bias adds q . b to every score of a query: a constant per row, which the softmax
    # removes (also under the mask and before dropout). It stays a parameter (checkpoints, HF,
    # the original's weights) and is not computed: the outputs are the same, and its gradient,
    # zero in exact arithmetic, is exactly zero instead of rounding noise (and costs no pass over
    # the keys' gradient).
    k = split(dense(self.hidden_size, 'key')(x, add_bias=False))
    v = split(Dense(self.hidden_size, cfg, name='value', bias_by_matmul=True)(x))
    context = attention_lib.attend(cfg, q, k, v, input_mask, direction=self.direction,
                                   deterministic=deterministic, words=words,
                                   initializing=self.is_initializing())
    attended = dense(self.hidden_size, 'attention_output')(context.reshape(batch * length, -1))
    return self._feed_forward(x, attended, batch, length, deterministic)

  def _feed_forward(self, x, attended, batch, length, deterministic):
    """The residual, LayerNorm and feed-forward block after attention, on tokens [B * L, H]."""
    cfg = self.cfg
    dense = lambda n, name: Dense(n, cfg, name=name)
    norm = lambda name: LayerNorm(epsilon=cfg.layer_norm_eps, dtype=cfg.dtype,
                                  param_dtype=cfg.param_dtype, name=name)
    drop = lambda y, name: Dropout(cfg.dropout_rate, cfg.writes_for_backward, name=name)(
        y, deterministic=deterministic)
    x = norm('attention_LayerNorm')(x + drop(attended, 'attention_dropout'))
    inner = gelu_for(cfg)(dense(self.intermediate_size, 'intermediate')(x))
    out = dense(self.hidden_size, 'output')(inner)
    return norm('output_LayerNorm')(x + drop(out, 'output_dropout')).reshape(batch, length, -1)


class Encoder(nn.Module):
  """One network: `embeddings_project` (when widths differ) and a stack of layers.

  `direction` 'ltr' / 'rtl' lets each position attend only to itself and the positions to its
  left / right (the towers of ELECTRIC's cloze model); '' attends everywhere."""
  cfg: ModelConfig
  hidden_size: int
  num_layers: int
  num_heads: int
  intermediate_size: int
  direction: str = ''

  @nn.compact
  def __call__(self, embedded, input_mask, deterministic: bool, exits: tuple[int, ...] = (),
               positions=None):
    """The last layer's hidden states [B, L, H]; with `exits` (AMOS: layer counts, ascending), a
    tuple of the hidden states after each of those layers instead, the input of the layer after
    each exit detached (an exit's loss trains only the layers since the previous one).
    `positions` ([B, L]): each token's position in its own sequence, which the modern backbone's
    rotary positions read (the BERT backbone's are added to the embeddings); None: counted from
    the start of each sequence `input_mask` numbers (0, 1, ... in a row of one sequence; a row of
    packed documents counts each from its own [CLS])."""
    cfg = self.cfg
    x = embedded
    if cfg.modern and positions is None:
      positions = attention_masks.sequence_positions(input_mask)
    if x.shape[-1] != self.hidden_size:  # (a modern generator narrower than a shared table)
      x = Dense(self.hidden_size, cfg, name='embeddings_project', use_bias=not cfg.modern)(x)
    # remat: keep only each layer's input for the backward pass and recompute the rest (about a
    # third more compute for the activation memory of one layer instead of all)
    states = []
    norm: Any = lambda x: x
    if cfg.modern:
      modern_layer: Any = (nn.remat(modern.ModernLayer, static_argnums=(3,)) if cfg.remat
                           else modern.ModernLayer)
      norm = modern.final_norm(cfg)
      run = lambda i, x: modern_layer(
          cfg, self.hidden_size, self.num_heads, self.intermediate_size, i, self.direction,
          name=f'layer_{i}')(x, input_mask, deterministic, positions)
    else:
      layer: Any = (nn.remat(TransformerLayer, static_argnums=(3,)) if cfg.remat
                    else TransformerLayer)
      run = lambda i, x: layer(cfg, self.hidden_size, self.num_heads, self.intermediate_size,
                               self.direction, name=f'layer_{i}')(x, input_mask, deterministic)
    for i in range(self.num_layers):
      if i in exits:
        x = jax.lax.stop_gradient(x)
      x = run(i, x)
      if i + 1 in exits:
        states.append(norm(x))
    return tuple(states) if exits else norm(x)


def transform(cfg: ModelConfig, hidden, width: int, norm: bool = True):
  """dense(width, GELU) then, where `norm`, a LayerNorm (the modern backbone's both without
  biases: HF's ModernBertPredictionHead): the heads' first part, created in the calling module
  as its `dense` and `LayerNorm`."""
  h = gelu_for(cfg)(Dense(width, cfg, name='dense', use_bias=not cfg.modern)(hidden))
  if not norm:
    return h
  return LayerNorm(epsilon=cfg.layer_norm_eps, dtype=cfg.dtype, param_dtype=cfg.param_dtype,
                   use_bias=not cfg.modern, name='LayerNorm')(h)


class DiscriminatorHead(nn.Module):
  """dense(H, gelu) -> dense(1): one float32 logit per token (1 = replaced); the modern backbone:
  dense(H, gelu, no bias) -> LayerNorm (no bias) -> dense(1), HF's ModernBert token head.

  The logit's bias starts at `cfg.disc_bias_init` (the paper: 0, a 50% prior of "replaced").
  """
  cfg: ModelConfig

  @nn.compact
  def __call__(self, hidden):
    cfg = self.cfg  # the modern one: HF's ModernBertForTokenClassification with one label
    h = transform(cfg, hidden, cfg.hidden_size, norm=cfg.modern)
    return Dense(1, cfg, name='dense_prediction', bias_init=cfg.disc_bias_init)(h)[..., 0].astype(
        jnp.float32)


class TaskHead(nn.Module):
  """The modern backbone's fine-tuning head before its classifier, as every ModernBertFor* class
  has it: dense(H, GELU) -> LayerNorm, without biases, in float32. A fine-tuning starts it from
  the pre-trained detection head's (or MLM head's) `dense` and `LayerNorm`, as HF's classes load
  their `head` from a pre-trained ModernBERT."""
  cfg: ModelConfig

  @nn.compact
  def __call__(self, hidden):
    cfg = dataclasses.replace(self.cfg, dtype='float32')
    return transform(cfg, hidden.astype(jnp.float32), cfg.hidden_size)


class GeneratorHead(nn.Module):
  """dense(E, gelu) -> LayerNorm -> tied decoder (the word table, transposed) + own bias."""
  cfg: ModelConfig

  @nn.compact
  def __call__(self, hidden, table, rows=None):
    """`rows` ([V] bool, optional): the decoder's gradient reaches only these rows of `table`."""
    cfg = self.cfg
    if rows is not None:
      table = jnp.where(rows[:, None], table, jax.lax.stop_gradient(table))
    h = transform(cfg, hidden, table.shape[1])
    bias = self.param('output_bias', nn.initializers.zeros, (cfg.vocab_size,), cfg.param_dtype)
    table = table.astype(h.dtype)
    if h.dtype == jnp.float32:
      logits = jnp.einsum('bne,ve->bnv', h, table, preferred_element_type=jnp.float32)
    else:
      logits = low_precision_matmul(h, table.T, True)
    return logits + bias.astype(jnp.float32)


class CorrectionHead(nn.Module):
  """COCO-LM's correction head: the hidden state onto the tied word table plus a bias, with no
  transform layer (a dense H -> E only where the widths differ, which COCO-LM's sizes never do)."""
  cfg: ModelConfig

  @nn.compact
  def __call__(self, hidden, table):
    cfg = self.cfg
    if hidden.shape[-1] != table.shape[1]:
      hidden = Dense(table.shape[1], cfg, name='dense')(hidden)
    bias = self.param('output_bias', nn.initializers.zeros, (cfg.vocab_size,), cfg.param_dtype)
    logits = jnp.einsum('bne,ve->bnv', hidden, table.astype(hidden.dtype),
                        preferred_element_type=jnp.float32)
    return logits + bias.astype(jnp.float32)


class SequenceHead(nn.Module):
  """COCO-LM's sequence head: [CLS]'s hidden state -> dense(H) -> GELU -> LayerNorm, float32."""
  cfg: ModelConfig

  @nn.compact
  def __call__(self, first):
    cfg = self.cfg
    h = gelu_for(cfg)(Dense(cfg.hidden_size, cfg, name='dense')(first))
    return LayerNorm(epsilon=cfg.layer_norm_eps, dtype=cfg.dtype, param_dtype=cfg.param_dtype,
                     name='LayerNorm')(h).astype(jnp.float32)


class ExitMixture(nn.Module):
  """AMOS's mixture logits: one Linear(H, 1) without a bias per exit, float32 ([K, B, N, H] ->
  [B, N, K])."""
  cfg: ModelConfig

  @nn.compact
  def __call__(self, states):
    cfg = self.cfg
    kernel = self.param('kernel', truncated_normal(cfg.initializer_range),
                        (len(cfg.generator_exits), states.shape[-1]), jnp.dtype(cfg.param_dtype))
    return jnp.einsum('kbnh,kh->bnk', states.astype(jnp.float32), kernel.astype(jnp.float32))


class Electra(nn.Module):
  """Generator and discriminator over one shared embedding module."""
  cfg: ModelConfig

  def setup(self):
    cfg = self.cfg
    self.embeddings = Embeddings(cfg, cfg.embedding_size)
    self.discriminator = Encoder(cfg, cfg.hidden_size, cfg.num_layers, cfg.num_heads,
                                 cfg.intermediate_size)
    self.discriminator_predictions = DiscriminatorHead(cfg)
    if cfg.gdes:  # the discriminator's own part of the word table, zero at the start
      self.embeddings_residual = self.param('embeddings_residual', nn.initializers.zeros,
                                            (cfg.vocab_size, cfg.embedding_size),
                                            jnp.dtype(cfg.param_dtype))
    if cfg.discriminator_mlm:
      self.discriminator_mlm = GeneratorHead(cfg)
    if cfg.cocolm_heads:
      self.correction_head = CorrectionHead(cfg)
      self.sequence_head = SequenceHead(cfg)
    shape = cfg.generator_shape
    if not shape.network:
      return
    if cfg.untied_generator_embeddings:
      self.generator_embeddings = Embeddings(cfg, cfg.generator_hidden_size)
    size = shape.size(cfg)
    shape.build(self, lambda direction: Encoder(cfg, size.hidden, size.layers, size.heads,
                                                size.intermediate, direction))
    self.generator_predictions = GeneratorHead(cfg)
    if cfg.amos_exits:
      self.generator_mixture = ExitMixture(cfg)

  def discriminator_hidden(self, input_ids, segment_ids, input_mask, deterministic=True,
                           soft=None):
    """The discriminator's final hidden states [B, L, H] (what fine-tuning builds on); `soft`:
    straight-through samples at slots (`Embeddings`)."""
    residual = self.embeddings_residual if self.cfg.gdes else None
    x = self.embeddings(input_ids, segment_ids, deterministic, residual, soft=soft)
    return self.discriminator(x, input_mask, deterministic)

  def discriminator_logits(self, input_ids, segment_ids, input_mask, deterministic=True,
                           soft=None):
    """Per-token replaced/original logits [B, L], float32."""
    hidden = self.discriminator_hidden(input_ids, segment_ids, input_mask, deterministic, soft)
    return self.discriminator_predictions(hidden)

  def discriminator_mlm_logits(self, input_ids, segment_ids, input_mask, positions,
                               deterministic=True):
    """(vocabulary logits [B, N, V] of the discriminator's MLM head at `positions`, per-token
    detection logits [B, L]), from one pass of the discriminator (`discriminator_mlm` only)."""
    hidden = self.discriminator_hidden(input_ids, segment_ids, input_mask, deterministic)
    chosen = jnp.take_along_axis(hidden, positions[..., None], axis=1)
    return (self.discriminator_mlm(chosen, self.embeddings.table()),
            self.discriminator_predictions(hidden))

  def corrective_outputs(self, input_ids, segment_ids, input_mask, positions,
                         deterministic=True):
    """COCO-LM's main pass (`cocolm_heads` only): (the detection head's per-token logits [B, L]:
    the copy head, "replaced" its positive class; the correction head's vocabulary logits
    [B, N, V] at `positions`; the sequence embedding [B, H] of [CLS])."""
    hidden = self.discriminator_hidden(input_ids, segment_ids, input_mask, deterministic)
    chosen = jnp.take_along_axis(hidden, positions[..., None], axis=1)
    return (self.discriminator_predictions(hidden),
            self.correction_head(chosen, self.embeddings.table()),
            self.sequence_head(hidden[:, 0]))

  def sequence_embedding(self, input_ids, segment_ids, input_mask, deterministic=True):
    """The sequence head's embedding [B, H] of [CLS] (`cocolm_heads` only)."""
    hidden = self.discriminator_hidden(input_ids, segment_ids, input_mask, deterministic)
    return self.sequence_head(hidden[:, 0])

  def generator_logits(self, input_ids, segment_ids, input_mask, positions, deterministic=True,
                       rows=None):
    """Vocabulary logits [B, N, V] (float32) at the N `positions` of each sequence only; `rows`
    ([V] bool): the word-table rows the decoder updates (`decoder_rows`)."""
    cfg = self.cfg
    if not cfg.generator_shape.network:  # every entry equally likely
      return jnp.zeros(positions.shape + (cfg.vocab_size,), jnp.float32)
    embeddings = self.generator_embeddings if cfg.untied_generator_embeddings else self.embeddings
    embedded = embeddings(input_ids, segment_ids, deterministic)
    hidden = cfg.generator_shape.hidden(self, embedded, input_mask, deterministic)
    hidden = jnp.take_along_axis(hidden, positions[..., None], axis=1)
    return self.generator_predictions(hidden, embeddings.table(), rows)

  def generator_exit_logits(self, input_ids, segment_ids, input_mask, positions,
                            deterministic=True, rows=None):
    """AMOS's generator (`amos_exits` only): (vocabulary logits [K, B, N, V] of the shared MLM
    head at the K exits, mixture logits [B, N, K]), both float32, at the N `positions`."""
    cfg = self.cfg
    embedded = self.embeddings(input_ids, segment_ids, deterministic)
    states = self.generator(embedded, input_mask, deterministic, exits=cfg.generator_exits)
    chosen = [jnp.take_along_axis(h, positions[..., None], axis=1) for h in states]
    logits = jnp.stack([self.generator_predictions(h, self.embeddings.table(), rows)
                        for h in chosen])
    return logits, self.generator_mixture(jnp.stack(chosen))

  def __call__(self, input_ids, segment_ids, input_mask, positions, deterministic=True):
    """Runs both networks (used to create every parameter)."""
    if self.cfg.amos_exits:
      self.generator_exit_logits(input_ids, segment_ids, input_mask, positions, deterministic)
    if self.cfg.discriminator_mlm:
      self.discriminator_mlm_logits(input_ids, segment_ids, input_mask, positions, deterministic)
    if self.cfg.cocolm_heads:
      self.corrective_outputs(input_ids, segment_ids, input_mask, positions, deterministic)
    return (self.generator_logits(input_ids, segment_ids, input_mask, positions, deterministic),
            self.discriminator_logits(input_ids, segment_ids, input_mask, deterministic))


@functools.partial(jax.jit, static_argnums=(0, 2, 3))  # one program, not an eager op at a time
def init_params(cfg: ModelConfig, rng, seq_len: int = 8, num_predictions: int = 2) -> Any:
  """Fresh parameters for `Electra(cfg)` (shape-only under `jax.eval_shape`)."""
  ids = jnp.zeros((1, seq_len), jnp.int32)
  positions = jnp.zeros((1, num_predictions), jnp.int32)
  return Electra(cfg).init(rng, ids, ids, ids + 1, positions)['params']
