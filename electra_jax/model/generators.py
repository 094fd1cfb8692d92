"""The generator's shapes (`model.generator`): the network that fills the masked slots, and all the
rest of the code asks of it: its sizes, its layers inside `Electra`, its FLOPs, which HF class
holds it, the attention masks it needs and its name in a run's summary. One class per shape, one
table; a new shape is a class here and a line of `GENERATORS`.

    'separate'   an encoder of its own, `generator_hidden_fraction` of the width (the paper)
    'tied'       the discriminator itself: the generator *is* the discriminator (BERT's MLM)
    'uniform'    no network: every vocabulary entry equally likely (the paper's ablation)
    'two_tower'  ELECTRIC's cloze model: a left-to-right and a right-to-left tower, position t
                 read from the left tower at t - 1 and the right one at t + 1
"""

import dataclasses

import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Size:
  """A generator network's width, depth, heads and feed-forward width."""
  hidden: int
  layers: int
  heads: int
  intermediate: int


class Generator:
  """The interface, with the defaults of a network of its own (Separate)."""
  name = ''
  network = True  # False: no parameters and no forward pass (uniform)
  towers = 1  # encoders run over the input (two_tower: 2)
  hf_encoder: str | None = 'generator'  # which encoder HF's ElectraForMaskedLM holds; None: none
  summary = 'generator MLM'  # its loss in a run's summary
  directions: tuple[str, ...] = ('',)  # its encoders' attention masks ('ltr', 'rtl': one way)
  exits = False  # its one encoder of its own can read exits after inner layers (AMOS)

  def size(self, cfg) -> Size:
    """The paper's rule: a fraction of the width (heads of 64, feed-forward 4x: BERT's) and of
    the depth; the modern backbone's feed-forward keeps the discriminator's ratio to the width
    (ModernBERT-base's GeGLU: 2 x 1.5 H)."""
    hidden = int(round(cfg.hidden_size * cfg.generator_hidden_fraction))
    inner = (int(round(cfg.intermediate_size * hidden / cfg.hidden_size)) if cfg.modern
             else 4 * hidden)
    return Size(hidden, int(round(cfg.num_layers * cfg.generator_layers_fraction)),
                max(1, hidden // 64), inner)

  def embedding_width(self, cfg) -> int:
    """The width of the word table its encoder reads (its own, untied, or the shared one)."""
    return self.size(cfg).hidden if cfg.untied_generator_embeddings else cfg.embedding_size

  def validate(self, cfg):
    """ValueError (one sentence) for fields that do not fit this shape."""
    size = self.size(cfg)
    if size.hidden % size.heads:
      raise ValueError(f'the generator width {size.hidden} is not a multiple of its '
                       f'{size.heads} heads of 64; change model.generator_hidden_fraction')
    if cfg.gdes:
      self._gdes(cfg)

  def _gdes(self, cfg):
    raise ValueError('model.gdes re-parameterizes the discriminator\'s share of embeddings the '
                     'generator owns: it needs model.generator=separate and shared embeddings '
                     '(untied_generator_embeddings=False)')

  def build(self, electra, encoder):
    """Creates its encoders as attributes of the `Electra` module (in its `setup`); `encoder(
    direction)` makes one of this shape's size."""
    electra.generator = encoder('')

  def hidden(self, electra, embedded, input_mask, deterministic):
    """Its hidden states [B, L, H_head] at every position of the embedded input."""
    return electra.generator(embedded, input_mask, deterministic)

  def head_positions(self, seq_len: int, predictions: int) -> int:
    """Positions its MLM head reads per example in a step (the masked slots)."""
    return predictions

  def forward_flops(self, cfg, seq_len: int, predictions: int, encoder_flops) -> float:
    """Forward matmul FLOPs per example of its encoders and MLM head; `encoder_flops(hidden,
    layers, intermediate, embedding width, seq_len)` counts one encoder."""
    if not self.network:
      return 0.0
    size, width = self.size(cfg), self.embedding_width(cfg)
    head_in = self.towers * size.hidden
    return (self.towers * encoder_flops(size.hidden, size.layers, size.intermediate, width,
                                        seq_len)
            + self.head_positions(seq_len, predictions) * (2 * head_in * width
                                                            + 2 * width * cfg.vocab_size))


class Separate(Generator):
  name = 'separate'
  exits = True

  def _gdes(self, cfg):
    if cfg.untied_generator_embeddings:
      super()._gdes(cfg)


class Tied(Generator):
  name = 'tied'
  hf_encoder = 'discriminator'
  summary = 'MLM'

  def size(self, cfg) -> Size:
    return Size(cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.intermediate_size)

  def validate(self, cfg):
    if cfg.untied_generator_embeddings:
      raise ValueError('a tied generator (model.generator=tied) shares the embeddings too; set '
                       'model.untied_generator_embeddings=False')
    super().validate(cfg)

  def build(self, electra, encoder):
    del electra, encoder  # the discriminator's encoder

  def hidden(self, electra, embedded, input_mask, deterministic):
    return electra.discriminator(embedded, input_mask, deterministic)


class Uniform(Generator):
  name = 'uniform'
  network = False
  towers = 0
  hf_encoder = None

  def validate(self, cfg):
    if cfg.gdes:
      self._gdes(cfg)

  def build(self, electra, encoder):
    del electra, encoder

  def hidden(self, electra, embedded, input_mask, deterministic):
    raise NotImplementedError  # Electra.generator_logits gives uniform logits without a network


class TwoTower(Generator):
  name = 'two_tower'
  towers = 2
  hf_encoder = None
  summary = 'cloze model'
  directions = ('', 'ltr', 'rtl')

  def build(self, electra, encoder):
    electra.cloze_ltr, electra.cloze_rtl = encoder('ltr'), encoder('rtl')

  def hidden(self, electra, embedded, input_mask, deterministic):
    left = electra.cloze_ltr(embedded, input_mask, deterministic)
    right = electra.cloze_rtl(embedded, input_mask, deterministic)
    left = jnp.pad(left[:, :-1], ((0, 0), (1, 0), (0, 0)))
    right = jnp.pad(right[:, 1:], ((0, 0), (0, 1), (0, 0)))
    return jnp.concatenate([left, right], -1)

  def head_positions(self, seq_len: int, predictions: int) -> int:
    return seq_len  # ELECTRIC trains the cloze model at every position


GENERATORS = {g.name: g for g in (Separate(), Tied(), Uniform(), TwoTower())}


def get(name: str) -> Generator:
  """The shape registered as `name`; ValueError naming the others."""
  if name not in GENERATORS:
    raise ValueError(f'model.generator is {name!r}; use one of '
                     f'{", ".join(repr(g) for g in GENERATORS)}')
  return GENERATORS[name]
