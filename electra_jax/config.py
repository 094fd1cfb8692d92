"""The one pre-training config: every field, its default and what it means.

Size presets in `configs/` start from `default_config()` and set their whole column of the reference
table. Derived fields (FFN width, heads, max predictions per sequence, decay steps, eval batch) are
FieldReferences computed from their source (`ref + 0`, never the source's own reference): an
override of the source reaches them, and setting a derived field never changes its source.
"""

import ml_collections


def _model_fields(c: ml_collections.ConfigDict):
  """config.model: the two networks' shapes, precision and kernels."""
  # ---- model: both networks are BERT-style post-LayerNorm encoders -------------------------------
  m = c.model = ml_collections.ConfigDict()
  m.vocab_size = 30522  # rows of the shared word-embedding table; must equal the tokenizer's size
  m.embedding_size = 128  # E; an `embeddings_project` E -> hidden follows when E != hidden
  m.hidden_size = 256  # H of the discriminator
  m.num_layers = 12  # discriminator depth
  m.num_heads = m.get_ref('hidden_size') // 64  # attention heads (head size 64)
  m.intermediate_size = m.get_ref('hidden_size') * 4  # FFN width
  m.max_position_embeddings = 512  # rows of the position table
  m.type_vocab_size = 2  # segment (token type) ids
  m.dropout_rate = 0.1  # dropout on embeddings and hidden states
  m.attention_dropout_rate = 0.1  # dropout on attention probabilities
  m.layer_norm_eps = 1e-12  # LayerNorm epsilon
  m.initializer_range = 0.02  # stddev of the truncated normal init (cut at 2 stddev, as TF1)
  m.dtype = 'auto'  # activations / matmul inputs: bfloat16 or float32; auto: bfloat16 on TPU/GPU
  m.param_dtype = 'float32'  # stored parameters and optimizer state
  m.attention = 'auto'  # 'fused': jax.nn.dot_product_attention (cuDNN flash attention on GPU),
  #   used where no attention dropout is active; 'explicit': einsum + softmax; 'auto': fused on
  #   GPU/TPU with 16-bit activations, explicit on CPU (where XLA's fused form is slower)
  m.remat = False  # rematerialization: recompute each layer's activations in the backward pass
  #   (about 1/3 more compute, activation memory of one layer instead of all; see microbatches)
  m.disc_bias_init = 0.0  # initial bias of the replaced-token logit (the paper: 0, i.e. a 50% prior;
  #   log(p / (1 - p)) starts the discriminator at the replaced share p instead)
  m.generator = 'separate'  # 'separate' | 'tied' (generator == discriminator) | 'uniform' (no net)
  #   | 'two_tower' (ELECTRIC's cloze model: a left-to-right and a right-to-left tower)
  m.generator_hidden_fraction = 0.25  # generator width as a fraction of hidden (also FFN, heads)
  m.generator_layers_fraction = 1.0  # generator depth as a fraction of num_layers
  m.untied_generator_embeddings = False  # True: the generator gets its own embedding module
  m.decoder_rows = 'all'  # word-table rows the tied MLM decoder's softmax updates: 'all' (the
  #   original) or 'batch' (the batch's tokens'; docs/short_pretraining.md)
  m.discriminator_mlm = False  # an MLM head on the discriminator (set by the objectives needing it)
  m.gdes = False  # DeBERTa-v3's gradient-disentangled embedding sharing: the discriminator reads
  #   stop_gradient(word table) + its own zero-initialized residual table; the generator owns the
  #   table. Embedding sharing (False, the original) and no sharing (untied_generator_embeddings)
  #   are the alternatives.


def _objective_fields(c: ml_collections.ConfigDict):
  """config.objective: the pre-training objective."""
  # ---- objective: replaced token detection ---------------------------------------------------------
  o = c.objective = ml_collections.ConfigDict()
  o.name = 'electra'  # electra | electra_15 | mlm | replace_mlm | all_tokens_mlm | electric
  o.mask_prob = 0.15  # fraction of real tokens selected per example
  o.mask_token_prob = 0.85  # a selected slot shows [MASK] with this probability, else its token
  o.random_token_prob = 0.0  # ... or a random token with this one (BERT: 0.8 / 0.1 = 80/10/10)
  o.sample_without_replacement = False  # False: positions drawn with replacement (the original)
  o.gen_weight = 1.0  # weight of the generator's MLM loss
  o.disc_weight = 50.0  # weight of the discriminator's replaced-token loss
  o.temperature = 1.0  # generator sampling temperature
  o.disallow_correct = False  # True: the sample can never be the original token


def _optimizer_fields(c: ml_collections.ConfigDict):
  """config.optimizer: AdamW and its schedule."""
  # ---- optimizer: AdamW as in the original release -------------------------------------------------
  opt = c.optimizer = ml_collections.ConfigDict()
  opt.learning_rate = 5e-4  # peak learning rate
  opt.warmup_steps = 10_000  # linear warmup length
  opt.decay_power = 1.0  # polynomial decay power (1.0: linear to 0 at train_steps)
  opt.schedule = 'original'  # 'original': peak*decay*warmup multiplied | 'warmup_then_decay'
  opt.decay_steps = c.get_ref('train_steps') + 0  # steps over which the lr decays to 0
  opt.b1 = 0.9  # Adam beta1
  opt.b2 = 0.999  # Adam beta2
  opt.eps = 1e-6  # Adam epsilon
  opt.bias_correction = False  # the original Adam has no bias correction
  opt.weight_decay = 0.01  # decoupled, multiplied by lr; not on LayerNorm parameters and biases
  opt.grad_clip_norm = 1.0  # global-norm clip over all parameters; 0 disables


def _data_fields(c: ml_collections.ConfigDict):
  """config.data: the corpus, its tokenizer, records and batches."""
  # ---- data ------------------------------------------------------------------------------------------
  d = c.data = ml_collections.ConfigDict()
  d.corpus = 'builtin'  # 'builtin' (Python's own docs) or a file, folder or glob: .txt .gz .jsonl
  d.text_field = 'text'  # the field of a .jsonl object that holds its text
  d.records = ''  # a prepared records folder; '' builds one under <workdir>/data from `corpus`
  d.vocab = ''  # a SentencePiece .model or WordPiece vocab.txt; '' trains one on the corpus
  d.lower_case = True  # lower-case text (in the tokenizer's normalizer)
  d.max_seq_length = 128  # tokens per example, [CLS] and [SEP]s included
  d.batch_size = 128  # global batch (all devices, all processes)
  d.eval_batch_size = d.get_ref('batch_size') + 0  # global batch of held-out evaluation
  d.eval_fraction = 0.02  # share of documents held out for evaluation when building records
  d.shuffle_buffer = 10_000  # examples in the shuffle buffers (all readers together)
  d.readers = 0  # input readers of the train split, each reading its own shard files and giving
  #   batch / readers rows of every batch; 0: the most shard files that divide the batch. The
  #   batches depend on it, never on the number of processes (which must divide it)
  d.num_shards = 4  # train shard files when records are built from `corpus` (>= readers)
  d.num_eval_shards = 1  # held-out shard files when records are built


def default_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0  # every random choice comes from a key derived from (seed, step)
  c.train_steps = 1_000_000  # optimizer steps
  c.log_every = 100  # steps between progress lines / metric records (the only device reads)
  c.eval_every = 0  # steps between held-out evaluations; 0: only at the end
  c.eval_batches = 20  # batches per held-out evaluation
  c.save_every = 0  # steps between checkpoints; 0: only at the end
  c.keep_checkpoints = 3  # the latest checkpoints kept on disk
  c.keep_best = ''  # a held-out metric (e.g. 'disc_auc'): also keep the checkpoint best by it
  c.microbatches = 0  # gradient accumulation: the global batch in this many sequential parts (same
  #   loss and gradient); 0: the fewest whose step fits the device's memory (1 on CPUs)
  c.fsdp = ml_collections.FieldReference(None, field_type=bool)  # True: state split over the
  #   devices (FSDP, partitioning.py); False: replicated; None (auto): split on TPU slices only
  c.nonfinite = 'stop'  # a NaN/Inf loss or gradient norm: 'stop' the run, or 'skip' such steps
  c.init_from = ''  # start from other weights: an HF folder, launch/export.py's, an original ckpt
  c.init_generator = ''  # with an HF discriminator folder: its generator's folder ('' : fresh)
  for fields in (_model_fields, _objective_fields, _optimizer_fields, _data_fields):
    fields(c)
  o, d = c.objective, c.data
  o.max_predictions = ((o.get_ref('mask_prob') + 0.005) * d.get_ref('max_seq_length')).to_int()
  # ^ N: prediction slots per sequence, int((mask_prob + 0.005) * max_seq_length) as the original
  return c


# Ranges the fields must lie in; checked before a run writes anything (`check`).
_AT_LEAST_1 = ('train_steps', 'log_every', 'eval_batches', 'keep_checkpoints',
               'data.batch_size', 'data.eval_batch_size', 'data.shuffle_buffer', 'data.num_shards',
               'data.num_eval_shards', 'model.vocab_size', 'model.embedding_size',
               'model.hidden_size', 'model.num_layers', 'model.num_heads',
               'model.intermediate_size', 'model.max_position_embeddings',
               'model.type_vocab_size')
_AT_LEAST_0 = ('seed', 'eval_every', 'save_every', 'data.readers', 'microbatches', 'objective.gen_weight',
               'objective.disc_weight')
_FRACTIONS = {  # (low, high, low included, high included)
    'data.eval_fraction': (0, 1, False, False), 'objective.mask_prob': (0, 1, False, True),
    'objective.mask_token_prob': (0, 1, True, True),
    'objective.random_token_prob': (0, 1, True, True),
    'model.dropout_rate': (0, 1, True, False), 'model.attention_dropout_rate': (0, 1, True, False),
}
_POSITIVE = ('objective.temperature', 'model.layer_norm_eps', 'model.initializer_range',
             'model.generator_hidden_fraction', 'model.generator_layers_fraction')


def _get(config, path: str):
  for part in path.split('.'):
    config = config[part]
  return config


def check(config):
  """Raises ValueError (one sentence) for the first field outside its range."""
  import math  # pylint: disable=import-outside-toplevel
  number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
  for path in _AT_LEAST_1 + _AT_LEAST_0:
    value, low = _get(config, path), 1 if path in _AT_LEAST_1 else 0
    if not number(value) or value < low:
      raise ValueError(f'{path} is {value!r}; it must be a number of at least {low}')
  for path, (low, high, low_in, high_in) in _FRACTIONS.items():
    value = _get(config, path)
    inside = number(value) and (low <= value if low_in else low < value) and (
        value <= high if high_in else value < high)
    if not inside:
      bounds = f'{"[" if low_in else "("}{low}, {high}{"]" if high_in else ")"}'
      raise ValueError(f'{path} is {value!r}; it must lie in {bounds}')
  for path in _POSITIVE:
    value = _get(config, path)
    if not number(value) or value <= 0:
      raise ValueError(f'{path} is {value!r}; it must be a positive number')
  o = config.objective
  if o.mask_token_prob + o.random_token_prob > 1:
    raise ValueError(f'objective.mask_token_prob + random_token_prob is '
                     f'{o.mask_token_prob + o.random_token_prob}; they must add up to at most 1')
