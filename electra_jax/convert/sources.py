"""Weights made elsewhere -> our parameters, for `--config.init_from` (pre-training) and `--init`
(fine-tuning).

    open_source(path) -> Source: the model's sizes read from its files (the generator's width and
    depth too), its vocabulary, and `params(cfg, fill)`, our parameter tree.
    export_original(path, out) -> HF folders of an original TF checkpoint (launch/export.py).

A source is an HF transformers folder (a discriminator, e.g. ElectraForPreTraining, ElectraModel or
a task model; optionally with its generator, ElectraForMaskedLM), the folder launch/export.py writes
(`discriminator/` and `generator/`) or a checkpoint of the original TensorFlow release. The workdir
of another electra_jax pre-training run is read by pretraining/init_from.py, which gives the same
Source.

A padded vocabulary (an embedding table with more rows than the vocabulary has entries, e.g.
rounded up for TPUs) is cut to the vocabulary: the extra rows are never produced by the tokenizer,
and the generator could otherwise sample them.
"""

import dataclasses
from typing import Callable

import numpy as np

from electra_jax import UserError
from electra_jax.convert import hf
from electra_jax.convert import hf_folder
from electra_jax.convert import original
from electra_jax.convert import vocab as vocab_lib
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.model import networks as model_lib
from electra_jax.storage import fs

_ROWS = ('word_embeddings', 'output_bias')  # parameters with one row per vocabulary entry


@dataclasses.dataclass
class Source:
  path: str
  kind: str  # in words, for messages
  fields: dict  # ModelConfig fields read from the files (vocab_size: the vocabulary's entries)
  vocab: str | None  # our vocabulary file (vocab.txt / .model), when the source has one
  lower_case: bool
  table_rows: int  # rows of the stored word-embedding table
  has_generator: bool
  has_head: bool  # the discriminator's detection head
  notes: list  # facts worth a log line
  _read: Callable  # (cfg at table_rows, fill) -> parameters

  def params(self, cfg: model_lib.ModelConfig, fill=None) -> dict:
    """Our parameters of `cfg` (whose sizes must be the source's); the generator and heads the
    source lacks come from `fill` (fresh initial parameters), or are an error without it."""
    rows = self.table_rows
    if fill is not None:
      fill = _map_rows(fill, lambda x: np.pad(np.asarray(x, np.float32),
                                              [(0, rows - x.shape[0])] + [(0, 0)] * (x.ndim - 1)))
    params = self._read(dataclasses.replace(cfg, vocab_size=rows), fill)
    return _map_rows(params, lambda x: x[:cfg.vocab_size])

  def describe(self) -> str:
    parts = [] if self.has_generator else ['generator: fresh weights']
    if not self.has_head:
      parts.append('detection head: fresh weights')
    return f'{self.kind} {self.path}' + (f' ({"; ".join(parts)})' if parts else '')


def _map_rows(tree, fn, name=''):
  if isinstance(tree, dict):
    return {k: _map_rows(v, fn, k) for k, v in tree.items()}
  return fn(tree) if name in _ROWS else tree


def _prefixed(state: dict, prefix: str = 'electra.') -> dict:
  """The base models (ElectraModel, ModernBertModel) save their weights without the prefix
  (`electra.`, `model.`) of the models with heads."""
  if any(k.startswith(prefix) for k in state):
    return state
  return {f'{prefix}{k}': v for k, v in state.items()}


def _open_hf(path: str, generator: str) -> Source:
  disc_dir, gen_dir = path, generator or None
  if fs.isfile(fs.join(path, 'discriminator', 'config.json')):  # launch/export.py's
    disc_dir = fs.join(path, 'discriminator')
    if gen_dir is None and fs.isfile(fs.join(path, 'generator', 'config.json')):
      gen_dir = fs.join(path, 'generator')
  config, state = hf.read_folder(disc_dir)
  if config['model_type'] == 'modernbert':
    return _open_modern(path, disc_dir, gen_dir, config, state)
  if 'ElectraForMaskedLM' in (config.get('architectures') or []):
    raise ValueError(f'{disc_dir} holds an ELECTRA generator (ElectraForMaskedLM); give the '
                     'discriminator\'s folder (in pre-training, this one may be its '
                     '--config.init_generator)')
  state = _prefixed(state)
  notes, gen_config, states = [], None, {'discriminator': state}
  if gen_dir:
    gen_config, gen_state = hf.read_folder(gen_dir)
    if 'ElectraForMaskedLM' not in (gen_config.get('architectures') or ['ElectraForMaskedLM']):
      raise ValueError(f'{gen_dir} holds {gen_config["architectures"]}, not an ELECTRA generator '
                       '(ElectraForMaskedLM)')
    states['generator'] = gen_state = _prefixed(gen_state)
    name = 'electra.embeddings.word_embeddings.weight'
    mine, theirs = state.get(name), gen_state.get(name)
    if mine is not None and theirs is not None and mine.shape == theirs.shape:
      diff = float(np.max(np.abs(np.asarray(mine, np.float32) - np.asarray(theirs, np.float32))))
      if diff:
        notes.append(f'the generator\'s copy of the shared embeddings differs from the '
                     f'discriminator\'s (max |difference| {diff:.3g}); the discriminator\'s is '
                     'used, as the two networks share one embedding module here')
  rows = config['vocab_size']
  fields = hf.model_fields(config, gen_config)
  vocab, lower_case = vocab_lib.find(disc_dir)
  if vocab is None and gen_dir:
    vocab, lower_case = vocab_lib.find(gen_dir)
  return Source(path, 'HF transformers folder', fields, vocab, lower_case, rows,
                gen_dir is not None,
                'discriminator_predictions.dense.weight' in state, notes,
                lambda cfg, fill: hf.from_hf(states, cfg, fill))


def _open_modern(path: str, disc_dir: str, gen_dir: str | None, config: dict,
                 state: dict) -> Source:
  """An HF ModernBERT folder: a released model (ModernBertForMaskedLM, or any ModernBert class)
  gives the discriminator its encoder, the detection head starting fresh (an MLM head predicts
  words, not replacements); launch/export.py's discriminator (ModernBertForTokenClassification
  with one label) gives its detection head too. A generator comes from `gen_dir` alone."""
  architecture = (config.get('architectures') or ['ModernBertModel'])[0]
  has_head = (architecture == 'ModernBertForTokenClassification'
              and len(config.get('id2label') or {}) == 1)
  state = _prefixed(state, 'model.')
  notes = []
  if not has_head:
    state = {k: v for k, v in state.items() if k.startswith('model.')}
    notes.append(f'the discriminator starts from the encoder of {architecture} (its head left '
                 'out)')
  states, gen_config = {'discriminator': state}, None
  if gen_dir:
    gen_config, gen_state = hf.read_folder(gen_dir)
    if (gen_config['model_type'], gen_config.get('architectures')) != (
        'modernbert', ['ModernBertForMaskedLM']):
      raise ValueError(f'{gen_dir} holds {gen_config.get("architectures")}, not a ModernBERT '
                       'generator (ModernBertForMaskedLM); give one of the same backbone, '
                       'narrower')
    states['generator'] = _prefixed(gen_state, 'model.')
  vocab, lower_case = vocab_lib.find(disc_dir)
  return Source(path, 'HF transformers folder (ModernBERT)', hf.model_fields(config, gen_config),
                vocab, lower_case, config['vocab_size'], gen_dir is not None, has_head, notes,
                lambda cfg, fill: hf.from_hf(states, cfg, fill))


def _open_original(prefix: str) -> Source:
  shapes = original.read_shapes(prefix)
  fields = original.model_fields(shapes, prefix)
  vocab, lower_case = vocab_lib.find(fs.dirname(prefix) or '.')
  return Source(prefix, 'original TensorFlow checkpoint', fields, vocab, lower_case,
                fields['vocab_size'], 'generator' in fields,
                'discriminator_predictions/dense/kernel' in shapes, [],
                lambda cfg, fill: original.read_params(prefix, cfg, fill))


def open_source(path: str, generator: str = '', vocab: str = '') -> Source:
  """The model at `path`; `generator`: an HF generator folder for a lone discriminator folder;
  `vocab`: a vocabulary file to use instead of the one found beside the weights."""
  if not fs.exists(path) and not fs.exists(path + '.index'):
    raise FileNotFoundError(f'{path} does not exist; give an HF transformers folder, a folder '
                            'written by launch/export.py, or an original TensorFlow checkpoint')
  if generator and not fs.isdir(generator):
    raise FileNotFoundError(f'the generator folder {generator} does not exist')
  if (fs.isfile(fs.join(path, 'config.json'))
      or fs.isfile(fs.join(path, 'discriminator', 'config.json'))):
    source = _open_hf(path, generator)
  else:
    prefix = original.checkpoint_prefix(path)
    if prefix is None:
      raise ValueError(f'{path} holds no model: it is neither an HF transformers folder '
                       '(config.json and model.safetensors), nor an original TensorFlow checkpoint '
                       '(*.index), nor the workdir of a launch/train.py run')
    source = _open_original(prefix)
  if vocab:
    source.vocab = vocab
  if source.vocab:
    size = tokenizer_lib.load_tokenizer(source.vocab, source.lower_case).vocab_size
    if size > source.table_rows:
      raise ValueError(f'the vocabulary {source.vocab} has {size} entries but the embedding table '
                       f'of {path} has {source.table_rows} rows; give the vocabulary the model was '
                       'trained with')
    if size < source.table_rows:
      source.notes.append(f'the embedding table has {source.table_rows} rows for a vocabulary of '
                          f'{size}: the {source.table_rows - size} padding rows are dropped')
    source.fields['vocab_size'] = size
  return source


def export_original(path: str, out: str, log) -> hf_folder.Exported:
  """An original TensorFlow checkpoint as HF folders under `out`, as a pre-training is exported."""
  try:
    source = open_source(path)
  except (ValueError, FileNotFoundError) as e:
    raise UserError(str(e)) from None
  if source.vocab is None:
    raise UserError(f'{path} has no vocab.txt beside the checkpoint; copy the vocabulary it was '
                    'trained with there')
  for note in source.notes:
    log(note)
  fields = {'num_heads': max(1, source.fields['hidden_size'] // 64),
            'generator': 'uniform', **source.fields}  # 'uniform': no generator in the checkpoint
  cfg = model_lib.ModelConfig.from_config(fields)
  tokenizer = tokenizer_lib.load_tokenizer(source.vocab, source.lower_case)
  try:
    params = source.params(cfg)
  except ValueError as e:
    raise UserError(str(e)) from None
  written = hf_folder.write_networks(out, params, cfg, tokenizer, source.lower_case,
                                     ('discriminator', 'generator')[:2 if source.has_generator
                                                                    else 1])
  log(f'exported {source.path}')
  return hf_folder.Exported(written, cfg, params, tokenizer, 'pretraining')
