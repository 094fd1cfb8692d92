"""The data's fields of the pre-training config, declared once: the corpus, its tokenizer, the
records and the batches (`DATA`, the config's `data` section), and the vocabulary's size, which the
model's word table shares (`VOCAB_SIZE`, declared in model/config.py's ModelConfig as this)."""

from electra_jax.fields import AT_LEAST_1, AT_LEAST_0, Derived, Field as F, Section, at_least
from electra_jax.fields import inside, one_of

VOCAB_SIZE = F(30522, "rows of the shared word-embedding table; must equal the tokenizer's size",
               AT_LEAST_1, init_from='adopt')

DATA = Section(doc='the corpus, its tokenizer, records and batches', fields=dict(
    corpus=F('builtin', "'builtin' (Python's own docs) or a file, folder or glob: .txt .gz .jsonl"),
    text_field=F('text', 'the field of a .jsonl object that holds its text'),
    records=F('', "a prepared records folder; '' builds one under <workdir>/data from `corpus`"),
    vocab=F('', "a SentencePiece .model or WordPiece vocab.txt; '' trains one on the corpus"),
    lower_case=F(True, "lower-case text (in the tokenizer's normalizer)", one_of(False, True)),
    max_seq_length=F(128, 'tokens per example, [CLS] and [SEP]s included', at_least(3)),
    pack_documents=F(False, 'records of rows filled with whole documents, one after the other, '
                     'each [CLS] doc [SEP] with its own positions and attention '
                     "(data/examples.py's DocumentPacker; the modern backbone's long rows) instead "
                     "of the original's [CLS] A [SEP] B [SEP] examples", one_of(False, True)),
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
