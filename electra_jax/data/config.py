"""The data's typed config, declared once: the corpus, its tokenizer, the records and the batches
(`DataConfig`, of which the pre-training config's `data` section is made: `DATA`), and the
vocabulary's size, which the model's word table shares (`VOCAB_SIZE`, declared in model/config.py's
ModelConfig as this)."""

import dataclasses

from electra_jax import fields
from electra_jax.fields import AT_LEAST_1, AT_LEAST_0, Field, at_least, declare, inside, one_of

VOCAB_SIZE = Field(30522, "rows of the shared word-embedding table; must equal the tokenizer's "
                   'size', AT_LEAST_1, init_from='adopt')


@dataclasses.dataclass(frozen=True)
class DataConfig:
  corpus: str = declare('builtin', "'builtin' (Python's own docs) or a file, folder or glob: .txt "
                        '.gz .jsonl')
  text_field: str = declare('text', 'the field of a .jsonl object that holds its text')
  records: str = declare('', "a prepared records folder; '' builds one under <workdir>/data from "
                         '`corpus`')
  vocab: str = declare('', "a SentencePiece .model or WordPiece vocab.txt; '' trains one on the "
                       'corpus')
  lower_case: bool = declare(True, "lower-case text (in the tokenizer's normalizer)",
                             one_of(False, True))
  max_seq_length: int = declare(128, 'tokens per example, [CLS] and [SEP]s included', at_least(3))
  pack_documents: bool = declare(False, 'records of rows filled with whole documents, one after '
                                 'the other, each [CLS] doc [SEP] with its own positions and '
                                 "attention (data/examples.py's DocumentPacker; the modern "
                                 "backbone's long rows) instead of the original's [CLS] A [SEP] "
                                 'B [SEP] examples', one_of(False, True))
  batch_size: int = declare(128, 'global batch (all devices, all processes)', AT_LEAST_1)
  eval_batch_size: int = declare(128, 'global batch of held-out evaluation', AT_LEAST_1,
                                 derived=lambda c: c.data.get_ref('batch_size') + 0)
  eval_fraction: float = declare(0.02, 'share of documents held out for evaluation when building '
                                 'records', inside(0, 1, False, False))
  shuffle_buffer: int = declare(10_000, 'examples in the shuffle buffers (all readers together)',
                                AT_LEAST_1)
  readers: int = declare(0, 'input readers of the train split, each reading its own shard files '
                         'and giving batch / readers rows of every batch; 0: the most shard files '
                         'that divide the batch. The batches depend on it, never on the number of '
                         'processes (which must divide it)', AT_LEAST_0)
  num_shards: int = declare(4, 'train shard files when records are built from `corpus` (>= '
                            'readers)', AT_LEAST_1)
  num_eval_shards: int = declare(1, 'held-out shard files when records are built', AT_LEAST_1)

  def __post_init__(self):
    fields.check_typed(self, DATA, 'data.')

  @classmethod
  def from_config(cls, data_cfg) -> 'DataConfig':
    """The data's config from `config.data` (or a dict of some of its fields: the others at their
    defaults); ValueError (one sentence) for an unknown field or a value outside its range."""
    return fields.typed(cls, data_cfg, DATA, 'data.')


DATA = fields.section_of(DataConfig, doc='the corpus, its tokenizer, records and batches')
