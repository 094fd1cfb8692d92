"""The one pre-training config, declared once: every field's default, meaning, range and role.

Size presets in `configs/` start from `default_config()` and set their whole column of the reference
table. Derived fields (FFN width, heads, max predictions per sequence, decay steps, eval batch) are
FieldReferences computed from their source (`ref + 0`, never the source's own reference): an
override of the source reaches them, and setting a derived field never changes its source.

From `CONFIG` come the config itself (`default_config`), the checks of every value with the refusal
of unknown keys (`check`), what a run resuming in its workdir must keep (`resume: same`; the model,
objective and data sections and the seed, but for how the model is computed) and what a run starting
from other weights must share with them or takes from them (`init_from`), and the model's and the
objective's views (model.networks.ModelConfig, objectives.common.ObjectiveConfig). See
electra_jax/config/fields.py.
"""

from electra_jax.config import fields
from electra_jax.config.fields import Derived, Field as F, Section, at_least, inside, one_of
from electra_jax.config.fields import positive, rule

AT_LEAST_1, AT_LEAST_0, FRACTION = at_least(1), at_least(0), inside(0, 1, True, True)



# ---- model: both networks are BERT-style post-LayerNorm encoders ---------------------------------
MODEL = Section(doc="the two networks' shapes, precision and kernels", fields=dict(
    vocab_size=F(30522, "rows of the shared word-embedding table; must equal the tokenizer's size",
                 AT_LEAST_1, init_from='adopt'),
    embedding_size=F(128, 'E; an `embeddings_project` E -> hidden follows when E != hidden',
                     AT_LEAST_1, init_from='same'),
    hidden_size=F(256, 'H of the discriminator', AT_LEAST_1, init_from='same'),
    num_layers=F(12, 'discriminator depth', AT_LEAST_1, init_from='same'),
    num_heads=F(Derived(lambda c: c.model.get_ref('hidden_size') // 64),
                'attention heads (head size 64)', AT_LEAST_1, init_from='same'),
    intermediate_size=F(Derived(lambda c: c.model.get_ref('hidden_size') * 4), 'FFN width',
                        AT_LEAST_1, init_from='same'),
    max_position_embeddings=F(512, 'rows of the position table', AT_LEAST_1, init_from='same'),
    type_vocab_size=F(2, 'segment (token type) ids', AT_LEAST_1, init_from='same'),
    dropout_rate=F(0.1, 'dropout on embeddings and hidden states', inside(0, 1, True, False)),
    attention_dropout_rate=F(0.1, 'dropout on attention probabilities', inside(0, 1, True, False)),
    layer_norm_eps=F(1e-12, 'LayerNorm epsilon', positive, init_from='adopt'),
    initializer_range=F(0.02, 'stddev of the truncated normal init (cut at 2 stddev, as TF1)',
                        positive),
    dtype=F('auto', 'activations / matmul inputs: bfloat16 or float32; auto: bfloat16 on TPU/GPU, '
            'float32 on CPU', one_of('auto', 'bfloat16', 'float32', 'float16')),
    param_dtype=F('float32', 'stored parameters and optimizer state',
                  one_of('float32', 'bfloat16', 'float16')),
    attention=F('auto', "the attention path, a name of model/attention.py's registry (which "
                "checks it): 'explicit' einsum + softmax; 'pallas' the flash kernel; 'fused' "
                'jax.nn.dot_product_attention (cuDNN on GPU) where no attention dropout is active; '
                "'auto': the fastest for the shape and platform", resume='free'),
    remat=F(False, "rematerialization: recompute each layer's activations in the backward pass "
            '(about 1/3 more compute, activation memory of one layer instead of all; see '
            'microbatches)', one_of(False, True), resume='free'),
    disc_bias_init=F(0.0, "initial bias of the replaced-token logit (the paper: 0, i.e. a 50% "
                     'prior; log(p / (1 - p)) starts the discriminator at the replaced share p)'),
    generator=F('separate', "the generator's shape, a name of model/generators.py's table (which "
                "checks it): 'separate' | 'tied' (generator == discriminator) | 'uniform' (no "
                "net) | 'two_tower' (ELECTRIC's cloze model: a left-to-right and a right-to-left "
                'tower)', init_from='adopt'),
    generator_hidden_fraction=F(0.25, 'generator width as a fraction of hidden (also FFN, heads)',
                                positive, init_from='adopt'),
    generator_layers_fraction=F(1.0, 'generator depth as a fraction of num_layers', positive,
                                init_from='adopt'),
    untied_generator_embeddings=F(False, 'True: the generator gets its own embedding module',
                                  one_of(False, True), init_from='adopt'),
    decoder_rows=F('all', "word-table rows the tied MLM decoder's softmax updates: 'all' (the "
                   "original) or 'batch' (the batch's tokens'; docs/short_pretraining.md)",
                   one_of('all', 'batch')),
    discriminator_mlm=F(False, 'an MLM head on the discriminator (set by the objectives needing '
                        'it)', one_of(False, True)),
    gdes=F(False, "DeBERTa-v3's gradient-disentangled embedding sharing: the discriminator reads "
           'stop_gradient(word table) + its own zero-initialized residual table; the generator '
           'owns the table. Embedding sharing (False, the original) and no sharing '
           '(untied_generator_embeddings) are the alternatives', one_of(False, True)),
))

# ---- objective: replaced token detection -------------------------------------------------------
OBJECTIVE = Section(doc='the pre-training objective', fields=dict(
    name=F('electra', 'electra | electra_15 | mlm | replace_mlm | all_tokens_mlm | electric: a '
           "name in objectives/registry.py's table (objectives.get refuses others, naming them)"),
    mask_prob=F(0.15, 'fraction of real tokens selected per example', inside(0, 1, False, True)),
    mask_token_prob=F(0.85, 'a selected slot shows [MASK] with this probability, else its token',
                      FRACTION),
    random_token_prob=F(0.0, '... or a random token with this one (BERT: 0.8 / 0.1 = 80/10/10)',
                        FRACTION),
    sample_without_replacement=F(False, 'False: positions drawn with replacement (the original)',
                                 one_of(False, True)),
    gen_weight=F(1.0, "weight of the generator's MLM loss", AT_LEAST_0),
    disc_weight=F(50.0, "weight of the discriminator's replaced-token loss", AT_LEAST_0),
    temperature=F(1.0, 'generator sampling temperature', positive),
    disallow_correct=F(False, 'True: the sample can never be the original token',
                       one_of(False, True)),
    max_predictions=F(Derived(lambda c: ((c.objective.get_ref('mask_prob') + 0.005)
                                         * c.data.get_ref('max_seq_length')).to_int()),
                      'N: prediction slots per sequence, int((mask_prob + 0.005) * '
                      'max_seq_length) as the original'),
))

# ---- optimizer: AdamW as in the original release; may change when a run resumes ---------------
OPTIMIZER = Section(doc='AdamW and its schedule', resume='free', fields=dict(
    learning_rate=F(5e-4, 'peak learning rate (NaN would turn every parameter into NaN at the '
                    'first step while the loss and gradients stay finite; a negative one climbs the '
                    'loss)', rule(lambda x: x > 0, 'a positive number, e.g. 5e-4')),
    warmup_steps=F(10_000, 'linear warmup length', rule(lambda x: x >= 0, '0 or more steps')),
    decay_power=F(1.0, 'polynomial decay power (1.0: linear to 0 at train_steps)',
                  rule(lambda x: x >= 0, '0 (constant) or more, e.g. 1.0')),
    schedule=F('original', "'original': peak*decay*warmup multiplied | 'warmup_then_decay'",
               one_of('original', 'warmup_then_decay')),
    decay_steps=F(Derived(lambda c: c.get_ref('train_steps') + 0),
                  'steps over which the lr decays to 0', AT_LEAST_1),
    b1=F(0.9, 'Adam beta1', rule(lambda x: 0 <= x < 1, 'in [0, 1), e.g. 0.9')),
    b2=F(0.999, 'Adam beta2', rule(lambda x: 0 <= x < 1, 'in [0, 1), e.g. 0.999')),
    eps=F(1e-6, 'Adam epsilon', rule(lambda x: x > 0, 'a positive number, e.g. 1e-6')),
    bias_correction=F(False, 'the original Adam has no bias correction', one_of(False, True)),
    weight_decay=F(0.01, 'decoupled, multiplied by lr; not on LayerNorm parameters and biases',
                   rule(lambda x: x >= 0, '0 or more, e.g. 0.01')),
    grad_clip_norm=F(1.0, 'global-norm clip over all parameters; 0 disables',
                     rule(lambda x: x >= 0, '0 (no clipping) or more')),
))

# ---- data ----------------------------------------------------------------------------------------
DATA = Section(doc='the corpus, its tokenizer, records and batches', fields=dict(
    corpus=F('builtin', "'builtin' (Python's own docs) or a file, folder or glob: .txt .gz .jsonl"),
    text_field=F('text', 'the field of a .jsonl object that holds its text'),
    records=F('', "a prepared records folder; '' builds one under <workdir>/data from `corpus`"),
    vocab=F('', "a SentencePiece .model or WordPiece vocab.txt; '' trains one on the corpus"),
    lower_case=F(True, "lower-case text (in the tokenizer's normalizer)", one_of(False, True)),
    max_seq_length=F(128, 'tokens per example, [CLS] and [SEP]s included', at_least(3)),
    batch_size=F(128, 'global batch (all devices, all processes)', AT_LEAST_1),
    eval_batch_size=F(Derived(lambda c: c.data.get_ref('batch_size') + 0),
                      'global batch of held-out evaluation', AT_LEAST_1),
    eval_fraction=F(0.02, 'share of documents held out for evaluation when building records',
                    inside(0, 1, False, False)),
    shuffle_buffer=F(10_000, 'examples in the shuffle buffers (all readers together)', AT_LEAST_1),
    readers=F(0, "input readers of the train split, each reading its own shard files and giving "
              'batch / readers rows of every batch; 0: the most shard files that divide the '
              'batch. The batches depend on it, never on the number of processes (which must '
              'divide it)', AT_LEAST_0),
    num_shards=F(4, 'train shard files when records are built from `corpus` (>= readers)',
                 AT_LEAST_1),
    num_eval_shards=F(1, 'held-out shard files when records are built', AT_LEAST_1),
))

CONFIG = Section(resume='free', fields=dict(
    seed=F(0, 'every random choice comes from a key derived from (seed, step)', fields.seed,
           resume='same'),
    train_steps=F(1_000_000, 'optimizer steps', AT_LEAST_1),
    log_every=F(100, 'steps between progress lines / metric records (the only device reads)',
                AT_LEAST_1),
    eval_every=F(0, 'steps between held-out evaluations; 0: only at the end', AT_LEAST_0),
    eval_batches=F(20, 'batches per held-out evaluation', AT_LEAST_1),
    save_every=F(0, 'steps between checkpoints; 0: only at the end', AT_LEAST_0),
    keep_checkpoints=F(3, 'the latest checkpoints kept on disk', AT_LEAST_1),
    keep_best=F('', "a held-out metric (e.g. 'disc_auc'): also keep the checkpoint best by it"),
    microbatches=F(0, 'gradient accumulation: the global batch in this many sequential parts (same '
                   "loss and gradient); 0: the fewest whose step fits the device's memory (1 on "
                   'CPUs)', AT_LEAST_0),
    fsdp=F(None, 'True: state split over the devices (FSDP, partitioning.py); False: replicated; '
           'None (auto): split on TPU slices only', one_of(None, False, True), field_type=bool),
    nonfinite=F('stop', "a NaN/Inf loss or gradient norm: 'stop' the run, or 'skip' such steps",
                one_of('stop', 'skip')),
    init_from=F('', 'start from other weights: an HF folder, launch/export.py\'s, an original '
                'checkpoint'),
    init_generator=F('', "with an HF discriminator folder: its generator's folder ('' : fresh)"),
    model=MODEL, objective=OBJECTIVE, optimizer=OPTIMIZER, data=DATA,
))


def default_config():
  """The config with every default (an ml_collections.ConfigDict)."""
  return fields.build(CONFIG)


def complete(saved):
  """A run's config.json (a dict) or a ConfigDict with the fields it lacks at their defaults (what
  the version that wrote it computed), as a ConfigDict."""
  return fields.complete(CONFIG, saved)


def check(config):
  """Raises ValueError (one sentence) for the first unknown key or field outside its range, then
  for values that do not fit together."""
  fields.check(CONFIG, config)
  o = config.objective
  if o.mask_token_prob + o.random_token_prob > 1:
    raise ValueError(f'objective.mask_token_prob + random_token_prob is '
                     f'{o.mask_token_prob + o.random_token_prob}; they must add up to at most 1')
