"""The model's typed config: both networks are encoders of one backbone (`backbone`): BERT's
post-LayerNorm blocks (the original), or ModernBERT's (pre-norm without biases, rotary positions,
GeGLU, local and global attention: model/modern.py).

`ModelConfig` is a frozen dataclass whose fields are declared here once (default, meaning, valid
values, and what a run starting from other weights must share with them: `init_from`); the
pre-training config's `model` section is made from it (`MODEL`), and a config checks itself once,
when constructed. Besides the declared fields, where it is compiled for:

  platform: the devices ('tpu', 'gpu', 'cpu'); '' : JAX's default backend when made. A run
    compiling for a TPU slice from a CPU host sets 'tpu'.
  writes_for_backward: whether the forward pass writes GELU's derivative and the dropout masks
    for the backward pass (True) or the backward recomputes them beside its matmuls (False): the
    chip's choice (platform/chips.py, given by the run); None: True on CPUs, else False.

dtype 'auto' becomes bfloat16 on TPUs and GPUs and float32 on CPUs when the config is made.
"""

import dataclasses

import jax

from electra_jax import fields
from electra_jax.data.config import VOCAB_SIZE
from electra_jax.fields import AT_LEAST_1, at_least, declare, inside, one_of, positive
from electra_jax.model import attention as attention_lib
from electra_jax.model import generators
from electra_jax.platform import backends

_SEEN_BY_PROGRAMS = ('platform', 'writes_for_backward')


BACKBONES = ('bert', 'modern')


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  backbone: str = declare('bert', "the encoders' blocks: 'bert' (ELECTRA's: post-LayerNorm, a "
                          'learned position table and token types, GELU feed-forward) or '
                          "'modern' (ModernBERT's: embeddings then a LayerNorm, pre-norm blocks "
                          'with a final norm, no biases, rotary positions, GeGLU, every '
                          '`global_every`-th layer global and the others a window of '
                          '`local_window` tokens; model/modern.py)', one_of(*BACKBONES),
                          init_from='same')
  vocab_size: int = dataclasses.field(default=VOCAB_SIZE.default,
                                      metadata={'declared': VOCAB_SIZE})
  embedding_size: int = declare(128, 'E; an `embeddings_project` E -> hidden follows when E != '
                                'hidden', AT_LEAST_1, init_from='same')
  hidden_size: int = declare(256, 'H of the discriminator', AT_LEAST_1, init_from='same')
  num_layers: int = declare(12, 'discriminator depth', AT_LEAST_1, init_from='same')
  num_heads: int = declare(4, 'attention heads (head size 64)', AT_LEAST_1, init_from='same',
                           derived=lambda c: c.model.get_ref('hidden_size') // 64)
  intermediate_size: int = declare(1024, 'FFN width', AT_LEAST_1, init_from='same',
                                   derived=lambda c: c.model.get_ref('hidden_size') * 4)
  max_position_embeddings: int = declare(512, 'rows of the position table', AT_LEAST_1,
                                         init_from='same')
  type_vocab_size: int = declare(2, 'segment (token type) ids', AT_LEAST_1, init_from='same')
  dropout_rate: float = declare(0.1, 'dropout on embeddings and hidden states',
                                inside(0, 1, True, False))
  attention_dropout_rate: float = declare(0.1, 'dropout on attention probabilities',
                                          inside(0, 1, True, False))
  layer_norm_eps: float = declare(1e-12, 'LayerNorm epsilon', positive, init_from='adopt')
  initializer_range: float = declare(0.02, 'stddev of the truncated normal init (cut at 2 '
                                     'stddev, as TF1)', positive)
  dtype: str = declare('auto', 'activations / matmul inputs: bfloat16 or float32; auto: bfloat16 '
                       'on TPU/GPU, float32 on CPU',
                       one_of('auto', 'bfloat16', 'float32', 'float16'))
  param_dtype: str = declare('float32', 'stored parameters and optimizer state',
                             one_of('float32', 'bfloat16', 'float16'))
  attention: str = declare('auto', "the attention path, a name of model/attention.py's registry "
                           "(which checks it): 'explicit' einsum + softmax; 'pallas' the flash "
                           "kernel; 'splash' JAX's splash kernel (TPUs) and 'fused' "
                           "jax.nn.dot_product_attention (XLA's product) where no "
                           "attention dropout is active; 'auto': the fastest for the shape and "
                           'platform', resume='free')
  remat: bool = declare(False, "rematerialization: recompute each layer's activations in the "
                        'backward pass (about 1/3 more compute, activation memory of one layer '
                        'instead of all; see microbatches)', one_of(False, True), resume='free')
  disc_bias_init: float = declare(0.0, "initial bias of the replaced-token logit (the paper: 0, "
                                  'i.e. a 50% prior; log(p / (1 - p)) starts the discriminator '
                                  'at the replaced share p)')
  generator: str = declare('separate', "the generator's shape, a name of model/generators.py's "
                           "table (which checks it): 'separate' | 'tied' (generator == "
                           "discriminator) | 'uniform' (no net) | 'two_tower' (ELECTRIC's cloze "
                           "model: a left-to-right and a right-to-left tower)", init_from='adopt')
  generator_hidden_fraction: float = declare(0.25, 'generator width as a fraction of hidden (also '
                                             'FFN, heads)', positive, init_from='adopt')
  generator_layers_fraction: float = declare(1.0, 'generator depth as a fraction of num_layers',
                                             positive, init_from='adopt')
  untied_generator_embeddings: bool = declare(False, 'True: the generator gets its own embedding '
                                              'module', one_of(False, True), init_from='adopt')
  decoder_rows: str = declare('all', "word-table rows the tied MLM decoder's softmax updates: "
                              "'all' (the original) or 'batch' (the batch's tokens'; "
                              'docs/short_pretraining.md)', one_of('all', 'batch'))
  discriminator_mlm: bool = declare(False, 'an MLM head on the discriminator (set by the '
                                    'objectives needing it)', one_of(False, True))
  cocolm_heads: bool = declare(False, "COCO-LM's heads on the discriminator: the correction head "
                               '(the tied word table and a bias at the masked positions) and the '
                               'sequence head ([CLS] -> dense -> GELU -> LayerNorm); set by the '
                               'objective needing them', one_of(False, True))
  amos_exits: bool = declare(False, "AMOS's multi-exit generator: exits after 1/2, 3/4 and all "
                             "of the generator's layers (Base's 8: 4, 6, 8), the input of the "
                             "block after each exit detached, one shared MLM head, a mixture "
                             'logit per exit; set by the objective needing it', one_of(False, True))
  gdes: bool = declare(False, "DeBERTa-v3's gradient-disentangled embedding sharing: the "
                       'discriminator reads stop_gradient(word table) + its own '
                       'zero-initialized residual table; the generator owns the table. Embedding '
                       'sharing (False, the original) and no sharing (untied_generator_embeddings)'
                       ' are the alternatives', one_of(False, True))
  global_every: int = declare(3, "modern backbone: layer i attends globally where i % "
                              "global_every == 0 (ModernBERT: 3, the first layer included), the "
                              'others over their window; 0: every layer local', at_least(0),
                              init_from='same')
  local_window: int = declare(128, 'modern backbone: the window of a local layer, in tokens '
                              '(a query sees the keys within local_window / 2 on each side)',
                              at_least(2), init_from='same')
  rope_theta_global: float = declare(160_000.0, "modern backbone: the rotary positions' base in "
                                     'global layers', positive, init_from='same')
  rope_theta_local: float = declare(10_000.0, "modern backbone: the rotary positions' base in "
                                    'local layers', positive, init_from='same')
  platform: str = ''
  writes_for_backward: bool | None = None

  def __post_init__(self):
    backend = self.platform or jax.default_backend()
    if self.dtype == 'auto':
      object.__setattr__(self, 'dtype', backends.auto_dtype(backend))
    if self.writes_for_backward is None:
      object.__setattr__(self, 'writes_for_backward', backend == 'cpu')
    self.validate()

  @classmethod
  def from_config(cls, model_cfg, platform: str = '', writes_for_backward: bool | None = None):
    """The model's config from `config.model` (or a dict of some of its fields: the others at
    their defaults; or a config's fields, whose platform and writes_for_backward these arguments
    replace) for `platform` ('' : JAX's default backend); ValueError for an unknown field or a
    value outside its range."""
    values = {k: v for k, v in model_cfg.items() if k not in (*_SEEN_BY_PROGRAMS, 'chip')}
    return fields.typed(cls, values, MODEL, 'model.', platform=platform,
                        writes_for_backward=writes_for_backward)

  def validate(self):
    """ValueError (one sentence): a field outside its declared range, or fields that do not fit
    together."""
    fields.check_typed(self, MODEL, 'model.')
    if self.attention not in attention_lib.choices():
      raise ValueError(f'model.attention is {self.attention!r}; use one of '
                       f'{", ".join(repr(a) for a in attention_lib.choices())}')
    if self.hidden_size % self.num_heads:
      raise ValueError(f'model.hidden_size {self.hidden_size} is not a multiple of '
                       f'model.num_heads {self.num_heads}')
    generators.get(self.generator).validate(self)
    if self.modern:
      self._validate_modern()
    if self.amos_exits and not self.generator_shape.exits:
      raise ValueError(f'model.amos_exits reads exits of a generator encoder of its own; '
                       f'model.generator is {self.generator!r}: set it to separate')

  def _validate_modern(self):
    if self.embedding_size != self.hidden_size:
      raise ValueError(f'the modern backbone reads embeddings of its own width: set '
                       f'model.embedding_size to model.hidden_size ({self.hidden_size}), not '
                       f'{self.embedding_size}')
    if (self.hidden_size // self.num_heads) % 2:
      raise ValueError(f'rotary positions rotate pairs of features: the head size '
                       f'{self.hidden_size // self.num_heads} must be even')

  @property
  def modern(self) -> bool:
    """Whether the encoders are ModernBERT's blocks (`backbone`)."""
    return self.backbone == 'modern'

  def is_global(self, layer: int) -> bool:
    """Whether `layer` of a modern encoder attends over the whole sequence (the rest: a window)."""
    return bool(self.global_every) and layer % self.global_every == 0

  @property
  def generator_exits(self) -> tuple[int, ...]:
    """The generator layers after which an exit reads (amos_exits; else the last alone):
    round(G / 2), round(3 G / 4) and G of its G layers, each at least 1, without repeats."""
    depth = self.generator_num_layers
    if not self.amos_exits:
      return (depth,)
    return tuple(sorted({max(1, round(depth / 2)), max(1, round(3 * depth / 4)), depth}))

  @property
  def generator_shape(self) -> generators.Generator:
    """The generator's shape (model/generators.py), what the code asks about the generator."""
    return generators.get(self.generator)

  @property
  def generator_hidden_size(self) -> int:
    return self.generator_shape.size(self).hidden

  @property
  def generator_num_layers(self) -> int:
    return self.generator_shape.size(self).layers

  @property
  def generator_num_heads(self) -> int:
    return self.generator_shape.size(self).heads

  @property
  def generator_intermediate_size(self) -> int:
    return self.generator_shape.size(self).intermediate


MODEL = fields.section_of(ModelConfig, doc="the two networks' shapes, precision and kernels")
