"""Our vocabulary as a tokenizer that HF transformers' `AutoTokenizer` loads, with the same ids.

A `tokenizer.json` (HF `tokenizers`) is written for both kinds of vocabulary:
- WordPiece `vocab.txt`: the very tokenizer we encode with (BERT normalizer, pre-tokenizer,
  WordPiece), plus `[CLS] A [SEP] B [SEP]` post-processing; `vocab.txt` is copied too.
- SentencePiece `.model`: the Unigram tokenizer we encode with (tokenizer.unigram_tokenizer: the
  same pieces, scores and normalization); the `.model` file is copied too (as `vocab.model`, what
  `launch/train.py` and `launch/finetune.py` read back).
- an HF `tokenizer.json` (a released model's, read as it is): itself, with the templates.

The ids equal ours on any text that does not spell a special token literally: HF tokenizers turn
a literal "[MASK]" (or [CLS], [SEP], [PAD], [UNK]) in the text into that token, while our
SentencePiece reader treats it as ordinary characters.
"""

import json

from tokenizers import AddedToken, Tokenizer, processors

from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.storage import fs

_SPECIAL_FIELDS = {'pad_token': '[PAD]', 'unk_token': '[UNK]', 'cls_token': '[CLS]',
                   'sep_token': '[SEP]', 'mask_token': '[MASK]'}


def _wordpiece_tokenizer(ours: tokenizer_lib.WordPieceTokenizer):
  return Tokenizer.from_str(ours._tok._tokenizer.to_str())  # a copy


def hf_tokenizer(ours):
  """A `tokenizers.Tokenizer` with our ids, [CLS]/[SEP] templates and special tokens."""
  if isinstance(ours, tokenizer_lib.WordPieceTokenizer):
    tok = _wordpiece_tokenizer(ours)
  elif isinstance(ours, tokenizer_lib.JsonTokenizer):  # the file's own, a copy
    tok = Tokenizer.from_str(ours._tok.to_str())
  else:  # the very tokenizer we encode with (tokenizer.unigram_tokenizer), a copy
    tok = Tokenizer.from_str(ours.unigram.to_str())
  s = ours.special
  tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                          for t in tokenizer_lib.SPECIAL_TOKENS])
  tok.post_processor = processors.TemplateProcessing(
      single='[CLS] $A [SEP]', pair='[CLS] $A [SEP] $B:1 [SEP]:1',
      special_tokens=[('[CLS]', s.cls), ('[SEP]', s.sep)])
  return tok


def write(ours, folder: str, lower_case: bool, max_length: int, token_types: bool = True):
  """tokenizer.json, tokenizer_config.json, special_tokens_map.json and our vocabulary file;
  `token_types`: whether the model takes token_type_ids (ModernBert's do not)."""
  fs.write_atomic(fs.join(folder, 'tokenizer.json'), hf_tokenizer(ours).to_str())
  if ours.file_name != 'tokenizer.json':
    fs.copyfile(ours.path, fs.join(folder, ours.file_name))
  with fs.open(fs.join(folder, 'tokenizer_config.json'), 'w') as f:
    json.dump({'tokenizer_class': 'PreTrainedTokenizerFast', 'do_lower_case': lower_case,
               'model_max_length': max_length,
               'model_input_names': ['input_ids', 'token_type_ids', 'attention_mask'] if
               token_types else ['input_ids', 'attention_mask'],
               **_SPECIAL_FIELDS}, f, indent=2)
  with fs.open(fs.join(folder, 'special_tokens_map.json'), 'w') as f:
    json.dump(_SPECIAL_FIELDS, f, indent=2)


def find(folder: str) -> tuple[str | None, bool]:
  """(our vocabulary file in an HF or checkpoint folder or None, whether it lower-cases)."""
  lower_case = True
  config = fs.join(folder, 'tokenizer_config.json')
  if fs.isfile(config):
    with fs.open(config) as f:
      lower_case = bool(json.load(f).get('do_lower_case', True))
  for name in ('vocab.model', 'spiece.model', 'vocab.txt', 'tokenizer.json'):
    if fs.isfile(fs.join(folder, name)):
      return fs.join(folder, name), lower_case
  return None, lower_case
