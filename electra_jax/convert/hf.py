"""Our parameters <-> HF transformers' ElectraForPreTraining / ElectraForMaskedLM state dicts.

One table of (our path, HF name, transposed) pairs serves both directions, so a round trip is exact.
Dense kernels are [in, out] here and [out, in] in PyTorch; LayerNorm's `scale` is HF's `weight`.
The generator shares the embedding table (and the decoder is that table, as in HF's tied
`generator_lm_head`); with `generator='tied'` its encoder is the discriminator's.
"""


import json

from safetensors.numpy import load
from safetensors.numpy import save
import jax
import numpy as np

from electra_jax.model import networks as model_lib
from electra_jax.storage import fs

# Our layer's modules -> HF's names under encoder.layer.<i>.
_LAYER = {'query': 'attention.self.query', 'key': 'attention.self.key',
          'value': 'attention.self.value', 'attention_output': 'attention.output.dense',
          'attention_LayerNorm': 'attention.output.LayerNorm', 'intermediate': 'intermediate.dense',
          'output': 'output.dense', 'output_LayerNorm': 'output.LayerNorm'}
_LEAF = {'kernel': ('weight', True), 'bias': ('bias', False), 'scale': ('weight', False)}


def _module(ours: tuple, hf: str, leaves=('kernel', 'bias')) -> list[tuple]:
  return [(ours + (leaf,), f'{hf}.{_LEAF[leaf][0]}', _LEAF[leaf][1]) for leaf in leaves]


def _embeddings(ours: str, width: int, hidden: int, encoder: str, layers: int) -> list[tuple]:
  rows = [((ours, 'word_embeddings'), 'electra.embeddings.word_embeddings.weight', False),
          ((ours, 'position_embeddings'), 'electra.embeddings.position_embeddings.weight', False),
          ((ours, 'token_type_embeddings'), 'electra.embeddings.token_type_embeddings.weight',
           False)]
  rows += _module((ours, 'LayerNorm'), 'electra.embeddings.LayerNorm', ('scale', 'bias'))
  if width != hidden:
    rows += _module((encoder, 'embeddings_project'), 'electra.embeddings_project')
  for i in range(layers):
    for name, hf in _LAYER.items():
      leaves = ('scale', 'bias') if 'LayerNorm' in name else ('kernel', 'bias')
      rows += _module((encoder, f'layer_{i}', name), f'electra.encoder.layer.{i}.{hf}', leaves)
  return rows


def _detection_head() -> list[tuple]:
  return (_module(('discriminator_predictions', 'dense'), 'discriminator_predictions.dense')
          + _module(('discriminator_predictions', 'dense_prediction'),
                    'discriminator_predictions.dense_prediction'))


# The modern backbone (model/modern.py) -> HF's ModernBert names under model.layers.<i>.
_MODERN_LAYER = {'attn_norm': 'attn_norm', 'Wqkv': 'attn.Wqkv', 'Wo': 'attn.Wo',
                 'mlp_norm': 'mlp_norm', 'Wi': 'mlp.Wi', 'mlp_Wo': 'mlp.Wo'}
MODERN_TIED = 'decoder.weight'  # ModernBertForMaskedLM's decoder, tied to the word embeddings


def _modern_encoder(embeddings: str, encoder: str, layers: int) -> list[tuple]:
  rows = [((embeddings, 'word_embeddings'), 'model.embeddings.tok_embeddings.weight', False)]
  rows += _module((embeddings, 'LayerNorm'), 'model.embeddings.norm', ('scale',))
  for i in range(layers):
    for name, hf in _MODERN_LAYER.items():
      if name == 'attn_norm' and i == 0:
        continue  # HF's layer 0 has none (an identity)
      leaves = ('scale',) if 'norm' in name else ('kernel',)
      rows += _module((encoder, f'layer_{i}', name), f'model.layers.{i}.{hf}', leaves)
  return rows + _module((encoder, 'final_norm'), 'model.final_norm', ('scale',))


def _modern_table(cfg: model_lib.ModelConfig, network: str) -> list[tuple]:
  """ModernBertForTokenClassification (one label: the detection head) for the discriminator,
  ModernBertForMaskedLM for the generator."""
  if network == 'discriminator':
    return (_modern_encoder('embeddings', 'discriminator', cfg.num_layers)
            + _module(('discriminator_predictions', 'dense'), 'head.dense', ('kernel',))
            + _module(('discriminator_predictions', 'LayerNorm'), 'head.norm', ('scale',))
            + _module(('discriminator_predictions', 'dense_prediction'), 'classifier'))
  embeddings = 'generator_embeddings' if cfg.untied_generator_embeddings else 'embeddings'
  encoder = cfg.generator_shape.hf_encoder
  assert encoder is not None  # (table: generator_problem)
  return (_modern_encoder(embeddings, encoder, cfg.generator_num_layers)
          + _module(('generator_predictions', 'dense'), 'head.dense', ('kernel',))
          + _module(('generator_predictions', 'LayerNorm'), 'head.norm', ('scale',))
          + [(('generator_predictions', 'output_bias'), 'decoder.bias', False),
             ((embeddings, 'word_embeddings'), MODERN_TIED, False)])


def generator_problem(cfg: model_lib.ModelConfig) -> str:
  """Why no HF transformers class holds the generator of `cfg` ('' : one does)."""
  if cfg.generator_shape.hf_encoder is None:
    return f'model.generator is {cfg.generator}: no HF transformers class holds it'
  if cfg.modern and cfg.generator_shape.embedding_width(cfg) != cfg.generator_hidden_size:
    return (f'the generator ({cfg.generator_hidden_size} wide) reads the shared '
            f'{cfg.embedding_size}-wide word table through a projection, which '
            'ModernBertForMaskedLM has no place for (model.untied_generator_embeddings=True '
            'gives it a table of its own width)')
  return ''


def table(cfg: model_lib.ModelConfig, network: str) -> list[tuple]:
  """(our parameter path, HF state-dict name, transposed) for 'discriminator' or 'generator'."""
  problem = generator_problem(cfg) if network == 'generator' else ''
  if problem:
    raise ValueError(problem)
  if cfg.modern:
    return _modern_table(cfg, network)
  if network == 'discriminator':
    rows = _embeddings('embeddings', cfg.embedding_size, cfg.hidden_size, 'discriminator',
                       cfg.num_layers)
    return rows + _detection_head()
  encoder = cfg.generator_shape.hf_encoder
  assert encoder is not None  # (generator_problem)
  embeddings = 'generator_embeddings' if cfg.untied_generator_embeddings else 'embeddings'
  width = cfg.generator_shape.embedding_width(cfg)
  rows = _embeddings(embeddings, width, cfg.generator_hidden_size, encoder,
                     cfg.generator_num_layers)
  rows += _module(('generator_predictions', 'dense'), 'generator_predictions.dense')
  rows += _module(('generator_predictions', 'LayerNorm'), 'generator_predictions.LayerNorm',
                  ('scale', 'bias'))
  rows += [(('generator_predictions', 'output_bias'), 'generator_lm_head.bias', False),
           ((embeddings, 'word_embeddings'), 'generator_lm_head.weight', False)]
  return rows


def _get(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def to_hf(params, cfg: model_lib.ModelConfig, network: str) -> dict[str, np.ndarray]:
  """HF state dict (float32 numpy arrays) of our `network` ('discriminator' or 'generator')."""
  out = {}
  for ours, hf, transposed in table(cfg, network):
    value = np.asarray(_get(params, ours), np.float32)
    out[hf] = value.T if transposed else value
  if cfg.gdes and network == 'discriminator':  # what the discriminator reads: table + residual
    word = _word_table(cfg)
    out[word] = out[word] + np.asarray(params['embeddings_residual'], np.float32)
  return out


def _word_table(cfg: model_lib.ModelConfig) -> str:
  return ('model.embeddings.tok_embeddings.weight' if cfg.modern
          else 'electra.embeddings.word_embeddings.weight')


# What an import may take from fresh initial weights when the source lacks it (a discriminator
# without its generator, an encoder without the detection head); the encoder itself never.
FILLABLE = ('generator', 'generator_embeddings', 'generator_predictions',
            'discriminator_predictions')


def from_hf(states: dict[str, dict], cfg: model_lib.ModelConfig, fill=None) -> dict:
  """Our parameter tree from HF state dicts {'discriminator': ..., 'generator': ...}.

  Every parameter of `cfg`'s model comes from one of them; with `fill` (e.g. fresh initial
  parameters), the heads and the generator may come from it instead (FILLABLE). A parameter left
  over, a missing name or another shape is an error naming it.
  """
  shapes = jax.eval_shape(lambda k: model_lib.init_params(cfg, k), jax.random.key(0))
  params = _unfreeze(shapes)
  filled = set()
  for network, state in states.items():
    for ours, hf, transposed in table(cfg, network):
      if ours in filled:  # the shared embeddings: the discriminator's copy is the one taken
        continue
      if hf not in state:
        if hf in ('generator_lm_head.weight', MODERN_TIED):  # tied: often not stored
          continue
        if fill is not None and ours[0] in FILLABLE:  # e.g. ElectraModel: no detection head
          continue
        raise ValueError(f'the HF {network} has no parameter {hf}; is it an ELECTRA model of '
                         'this size?')
      value = np.asarray(state[hf], np.float32)
      want = tuple(_get(shapes, ours).shape)
      want = want[::-1] if transposed else want  # in HF's layout, as the message names HF's
      if value.shape != want:
        raise ValueError(f'the HF {network} parameter {hf} has shape {value.shape}, the config '
                         f'wants {want}; set the model config to the checkpoint\'s sizes')
      _get(params, ours[:-1])[ours[-1]] = value.T if transposed else value
      filled.add(ours)
  if cfg.gdes:  # the generator's table is the shared one; the discriminator's adds the residual
    word = _word_table(cfg)
    disc = np.asarray(states['discriminator'][word], np.float32)
    gen = np.asarray(states['generator'][word], np.float32) if 'generator' in states else disc
    params['embeddings']['word_embeddings'], params['embeddings_residual'] = gen, disc - gen
    filled.add(('embeddings_residual',))
  missing = [p for p in _paths(shapes) if p not in filled]
  required = [p for p in missing if fill is None or p[0] not in FILLABLE]
  if required:
    raise ValueError(f'{len(required)} parameter(s) were not converted, e.g. '
                     f'{"/".join(required[0])}; give both the discriminator and the generator')
  for path in missing:
    _get(params, path[:-1])[path[-1]] = np.asarray(_get(fill, path), np.float32)
  return params


def _unfreeze(tree):
  return {k: _unfreeze(v) for k, v in tree.items()} if isinstance(tree, dict) else None


def _paths(tree, prefix=()):
  if not isinstance(tree, dict):
    return [prefix]
  return [p for k, v in tree.items() for p in _paths(v, prefix + (k,))]


def _modern_config(cfg: model_lib.ModelConfig, network: str) -> dict:
  generator = network == 'generator'
  layers = cfg.generator_num_layers if generator else cfg.num_layers
  return {
      'model_type': 'modernbert',
      'architectures': ['ModernBertForMaskedLM' if generator else
                        'ModernBertForTokenClassification'],
      **({} if generator else labelled(['replaced'])),
      'vocab_size': cfg.vocab_size,
      'hidden_size': cfg.generator_hidden_size if generator else cfg.hidden_size,
      'intermediate_size': cfg.generator_intermediate_size if generator else cfg.intermediate_size,
      'num_hidden_layers': layers,
      'num_attention_heads': cfg.generator_num_heads if generator else cfg.num_heads,
      'hidden_activation': 'gelu', 'classifier_activation': 'gelu',
      'max_position_embeddings': cfg.max_position_embeddings,
      'norm_eps': cfg.layer_norm_eps, 'norm_bias': False, 'attention_bias': False,
      'mlp_bias': False, 'classifier_bias': False, 'decoder_bias': True,
      'layer_types': ['full_attention' if cfg.is_global(i) else 'sliding_attention'
                      for i in range(layers)],
      'local_attention': cfg.local_window,
      'rope_parameters': {
          'full_attention': {'rope_type': 'default', 'rope_theta': cfg.rope_theta_global},
          'sliding_attention': {'rope_type': 'default', 'rope_theta': cfg.rope_theta_local}},
      'embedding_dropout': cfg.dropout_rate, 'mlp_dropout': cfg.dropout_rate,
      'attention_dropout': cfg.attention_dropout_rate, 'classifier_dropout': cfg.dropout_rate,
      'initializer_range': cfg.initializer_range,
      'tie_word_embeddings': True,
  }


def special_ids(cfg: model_lib.ModelConfig, special) -> dict:
  """The config fields naming the special tokens' ids (`special`: the tokenizer's)."""
  if not cfg.modern:
    return {'pad_token_id': special.pad}
  return {'pad_token_id': special.pad, 'cls_token_id': special.cls, 'sep_token_id': special.sep,
          'bos_token_id': special.cls, 'eos_token_id': special.sep}


def hf_config(cfg: model_lib.ModelConfig, network: str) -> dict:
  """The `ElectraConfig` (the modern backbone: `ModernBertConfig`) fields of our `network`."""
  if cfg.modern:
    return _modern_config(cfg, network)
  generator = network == 'generator'
  hidden = cfg.generator_hidden_size if generator else cfg.hidden_size
  return {
      'model_type': 'electra',
      'architectures': ['ElectraForMaskedLM' if generator else 'ElectraForPreTraining'],
      'vocab_size': cfg.vocab_size,
      'embedding_size': (cfg.generator_hidden_size if generator and cfg.untied_generator_embeddings
                         else cfg.embedding_size),
      'hidden_size': hidden,
      'num_hidden_layers': cfg.generator_num_layers if generator else cfg.num_layers,
      'num_attention_heads': cfg.generator_num_heads if generator else cfg.num_heads,
      'intermediate_size': 4 * hidden if generator else cfg.intermediate_size,
      'hidden_act': 'gelu',
      'hidden_dropout_prob': cfg.dropout_rate,
      'attention_probs_dropout_prob': cfg.attention_dropout_rate,
      'max_position_embeddings': cfg.max_position_embeddings,
      'type_vocab_size': cfg.type_vocab_size,
      'initializer_range': cfg.initializer_range,
      'layer_norm_eps': cfg.layer_norm_eps,
  }


# ================================================================================================
# Folders: config.json + model.safetensors, as `from_pretrained` reads them
# ================================================================================================

def save_folder(folder: str, state: dict[str, np.ndarray], config: dict):
  """Writes `config.json` and `model.safetensors` (float32) into `folder`."""
  state = {k: np.ascontiguousarray(v, np.float32) for k, v in state.items()
           if k not in ('generator_lm_head.weight', MODERN_TIED)}  # tied, as HF saves them
  fs.write_atomic(fs.join(folder, 'model.safetensors'), save(state, metadata={'format': 'pt'}))
  fs.write_atomic(fs.join(folder, 'config.json'),
                  json.dumps({**config, 'torch_dtype': 'float32'}, indent=2))


def read_folder(folder: str) -> tuple[dict, dict[str, np.ndarray]]:
  """(config.json, state dict) of an HF ELECTRA folder (safetensors, or a PyTorch .bin)."""
  path = fs.join(folder, 'config.json')
  if not fs.isfile(path):
    raise FileNotFoundError(f'{folder} has no config.json; give a folder written by '
                            'save_pretrained (or by launch/export.py)')
  config = fs.read_json(path, 'copy the folder again, or save the model again with '
                             'save_pretrained')
  if not isinstance(config, dict):
    raise ValueError(f'{path} is not an HF model config (a JSON object); give a folder written by '
                     'save_pretrained (or by launch/export.py)')
  if config.get('model_type') not in ('electra', 'modernbert'):
    raise ValueError(f'{folder} holds a {config.get("model_type")!r} model '
                     f'({", ".join(config.get("architectures") or ["no architecture named"])}), '
                     'neither ELECTRA nor ModernBERT; give an ELECTRA discriminator or generator '
                     'folder, or a ModernBERT one')
  weights = fs.join(folder, 'model.safetensors')
  if fs.isfile(weights):
    try:
      state = load(fs.read_bytes(weights))
    except Exception as e:  # (safetensors' SafetensorError)
      raise ValueError(f'{weights} cannot be read ({" ".join(str(e).split())[:120]}): the file is '
                       'damaged or cut short; copy the folder again, or save the model again '
                       'with save_pretrained') from None
  elif fs.isfile(fs.join(folder, 'pytorch_model.bin')):
    try:
      import torch
    except ImportError:
      raise ValueError(f'{folder} holds PyTorch weights (pytorch_model.bin), which need torch to '
                       'read; install torch or save the model with safetensors') from None
    with fs.local_copy(fs.join(folder, 'pytorch_model.bin')) as local:
      state = {k: v.float().numpy() for k, v in torch.load(
          local, map_location='cpu', weights_only=True).items()}
  else:
    raise FileNotFoundError(f'{folder} has no model.safetensors (nor pytorch_model.bin); give a '
                            'folder written by save_pretrained (or by launch/export.py)')
  # Task models (ElectraForSequenceClassification, ...) hold the encoder under the same names.
  return config, state


def _global_every(config: dict) -> int:
  """model.global_every of a ModernBertConfig: its `global_attn_every_n_layers`, or the spacing
  of the full-attention layers its `layer_types` list (transformers 5's configs)."""
  layers = config['num_hidden_layers']
  kinds = config.get('layer_types')
  if not kinds:
    return int(config.get('global_attn_every_n_layers', 3))
  full = [i for i, kind in enumerate(kinds) if kind == 'full_attention']
  every = 0 if not full else (full[1] - full[0] if len(full) > 1 else layers)
  if full[:1] not in ([], [0]) or any((i in full) != (every > 0 and i % every == 0)
                                      for i in range(layers)):
    raise ValueError(f'the ModernBERT model attends globally in its layers {full}: here a layer '
                     'is global every model.global_every layers from the first (0: none), '
                     'which cannot give that pattern')
  return every


def _rope_theta(config: dict, kind: str, old: str, default: float) -> float:
  return float(((config.get('rope_parameters') or {}).get(kind) or {}).get(
      'rope_theta', config.get(old, default)))


def modern_fields(config: dict, generator: dict | None = None) -> dict:
  """Our ModelConfig fields (the modern backbone) from an HF ModernBert config.json (and a
  generator's, of the same backbone)."""
  biased = [k for k in ('norm_bias', 'attention_bias', 'mlp_bias', 'classifier_bias')
            if config.get(k)]
  if biased:
    raise ValueError(f'the ModernBERT model has biases ({", ".join(biased)}); the modern backbone '
                     'here has none (ModernBERT\'s released models neither)')
  for key in ('hidden_activation', 'classifier_activation'):
    if config.get(key, 'gelu') != 'gelu':
      raise ValueError(f'the ModernBERT model uses {key}={config[key]!r}; the modern backbone '
                       "here uses the exact 'gelu'")
  hidden = config['hidden_size']
  fields = {'backbone': 'modern', 'vocab_size': config['vocab_size'], 'embedding_size': hidden,
            'hidden_size': hidden, 'num_layers': config['num_hidden_layers'],
            'num_heads': config['num_attention_heads'],
            'intermediate_size': config['intermediate_size'],
            'max_position_embeddings': config['max_position_embeddings'],
            'layer_norm_eps': config.get('norm_eps', 1e-5),
            'local_window': config.get('local_attention', 128),
            'global_every': _global_every(config),
            'rope_theta_global': _rope_theta(config, 'full_attention', 'global_rope_theta',
                                             160_000.0),
            'rope_theta_local': _rope_theta(config, 'sliding_attention', 'local_rope_theta',
                                            10_000.0),
            'dropout_rate': config.get('mlp_dropout', 0.0),
            'attention_dropout_rate': config.get('attention_dropout', 0.0)}
  if generator is not None:
    fields.update(generator='separate',
                  generator_hidden_fraction=generator['hidden_size'] / hidden,
                  generator_layers_fraction=(generator['num_hidden_layers'] /
                                             config['num_hidden_layers']),
                  untied_generator_embeddings=True)
  return fields


def model_fields(config: dict, generator: dict | None = None) -> dict:
  """Our ModelConfig fields from an HF discriminator's (and its generator's) config.json."""
  if config.get('model_type') == 'modernbert':
    return modern_fields(config, generator)
  fields = {'vocab_size': config['vocab_size'], 'embedding_size': config['embedding_size'],
            'hidden_size': config['hidden_size'], 'num_layers': config['num_hidden_layers'],
            'num_heads': config['num_attention_heads'],
            'intermediate_size': config['intermediate_size'],
            'max_position_embeddings': config['max_position_embeddings'],
            'type_vocab_size': config['type_vocab_size'],
            'layer_norm_eps': config.get('layer_norm_eps', 1e-12),
            # the rates it was trained with (HF's defaults where the file has none): what a
            # fine-tuning's dropout_rate=-1 takes
            'dropout_rate': config.get('hidden_dropout_prob', 0.1),
            'attention_dropout_rate': config.get('attention_probs_dropout_prob', 0.1)}
  if config.get('hidden_act', 'gelu') != 'gelu':
    raise ValueError(f'the HF model uses hidden_act={config["hidden_act"]!r}; electra_jax models '
                     "use the exact 'gelu'")
  if generator is not None:
    hidden = generator['hidden_size']
    fields.update(generator='separate', generator_hidden_fraction=hidden / config['hidden_size'],
                  generator_layers_fraction=(generator['num_hidden_layers'] /
                                             config['num_hidden_layers']),
                  untied_generator_embeddings=(
                      generator['embedding_size'] != config['embedding_size']))
    heads = max(1, hidden // 64)
    if generator['num_attention_heads'] != heads:
      raise ValueError(f'the HF generator has {generator["num_attention_heads"]} attention heads; '
                       f'a generator of width {hidden} has {heads} here (width / 64, as the '
                       'original)')
  return fields


# ================================================================================================
# Fine-tuned heads
# ================================================================================================

# HF's ElectraClassificationHead is dropout -> dense(H, H) -> GELU -> dropout -> out_proj, where
# ours (and the original's) is dropout -> dense(H, labels). The export makes HF's extra dense the
# identity plus a shift per feature, larger than any value the encoder's last LayerNorm can output
# (|x_i| <= |gamma_i| sqrt(H - 1) + |beta_i|, as a normalized vector has norm sqrt(H)) by 6, where
# GELU is the identity in float32 (GELU(z) = z * Phi(z), Phi(6) = 1 - 1e-9); out_proj's bias takes
# the shift back out. HF's logits are then ours for every input, to float32 rounding.
_GELU_IS_IDENTITY_ABOVE = 6.0


def identity_shift(params, cfg: model_lib.ModelConfig) -> np.ndarray:
  """Per feature, a value that moves anything the encoder's last LayerNorm can output to where
  GELU is the identity in float32 (|gamma| sqrt(H - 1) + |beta|, plus 6)."""
  norm = params['discriminator'][f'layer_{cfg.num_layers - 1}']['output_LayerNorm']
  bound = (np.abs(np.asarray(norm['scale'], np.float64)) * np.sqrt(cfg.hidden_size - 1)
           + np.abs(np.asarray(norm['bias'], np.float64)))
  return bound + _GELU_IS_IDENTITY_ABOVE


def encoder_to_hf(params, cfg: model_lib.ModelConfig) -> dict[str, np.ndarray]:
  """HF names of the discriminator's embeddings and encoder (what every ELECTRA task model has)."""
  out = {}
  for ours, name, transposed in table(cfg, 'discriminator'):
    if ours[0] == 'discriminator_predictions':
      continue
    value = np.asarray(_get(params, ours), np.float32)
    out[name] = value.T if transposed else value
  return out


def detection_head_to_hf(params, cfg: model_lib.ModelConfig) -> dict[str, np.ndarray]:
  """HF names of the discriminator's detection head (ElectraForPreTraining's; the modern
  backbone's: ModernBertForTokenClassification's `head` and one-label `classifier`)."""
  out = {}
  rows = (_detection_head() if not cfg.modern else [
      r for r in _modern_table(cfg, 'discriminator') if r[0][0] == 'discriminator_predictions'])
  for ours, name, transposed in rows:
    value = np.asarray(_get(params, ours), np.float32)
    out[name] = value.T if transposed else value
  return out


def labelled(names: list[str]) -> dict:
  """HF config fields of a head whose outputs are named `names`."""
  return {'num_labels': len(names), 'id2label': dict(enumerate(names)),
          'label2id': {n: i for i, n in reversed(list(enumerate(names)))}}  # a name's first


def dense(params, name: str = 'classifier') -> tuple[np.ndarray, np.ndarray]:
  """(kernel [in, out], bias) of a head's dense layer, float32."""
  return (np.asarray(params[name]['kernel'], np.float32),
          np.asarray(params[name]['bias'], np.float32))


def dense_head_to_hf(params, cfg: model_lib.ModelConfig) -> dict[str, np.ndarray]:
  """The state dict of the encoder and a head that is one dense layer (`classifier`), as HF's
  token-classification and multiple-choice models name it; the modern backbone's TaskHead before
  it as every ModernBertFor* class's `head`."""
  kernel, bias = dense(params)
  out = {**encoder_to_hf(params, cfg), 'classifier.weight': kernel.T, 'classifier.bias': bias}
  if cfg.modern:
    out.update({'head.dense.weight': np.asarray(params['head']['dense']['kernel'], np.float32).T,
                'head.norm.weight': np.asarray(params['head']['LayerNorm']['scale'], np.float32)})
  return out


# A fine-tuned modern backbone: the ModernBertFor* class standing where ELECTRA's class stands.
MODERN_CLASSES = {'ElectraForSequenceClassification': 'ModernBertForSequenceClassification',
                  'ElectraForTokenClassification': 'ModernBertForTokenClassification',
                  'ElectraForMultipleChoice': 'ModernBertForMultipleChoice'}


def modern_task_to_hf(params, cfg: model_lib.ModelConfig, electra_class: str, pooling: str,
                      dropout: float, fields: dict) -> tuple[dict, dict]:
  """(state dict, config fields) of a fine-tuned modern backbone as the ModernBertFor* class of
  `electra_class`: the encoder, `head` (our TaskHead) and `classifier`; HF's classes pool the
  first token or the mean of the real tokens as ours do (`classifier_pooling`)."""
  return dense_head_to_hf(params, cfg), {
      **fields, 'architectures': [MODERN_CLASSES[electra_class]], 'classifier_pooling': pooling,
      'classifier_dropout': dropout}
