"""Our parameters <-> HF transformers' ElectraForPreTraining / ElectraForMaskedLM state dicts.

One table of (our path, HF name, transposed) pairs serves both directions, so a round trip is exact.
Dense kernels are [in, out] here and [out, in] in PyTorch; LayerNorm's `scale` is HF's `weight`.
The generator shares the embedding table (and the decoder is that table, as in HF's tied
`generator_lm_head`); with `generator='tied'` its encoder is the discriminator's.
"""

import numpy as np

from electra_jax import model as model_lib

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


def table(cfg: model_lib.ModelConfig, network: str) -> list[tuple]:
  """(our parameter path, HF state-dict name, transposed) for 'discriminator' or 'generator'."""
  if network == 'discriminator':
    rows = _embeddings('embeddings', cfg.embedding_size, cfg.hidden_size, 'discriminator',
                       cfg.num_layers)
    rows += _module(('discriminator_predictions', 'dense'), 'discriminator_predictions.dense')
    rows += _module(('discriminator_predictions', 'dense_prediction'),
                    'discriminator_predictions.dense_prediction')
    return rows
  if cfg.generator == 'uniform':
    raise ValueError("model.generator is 'uniform': there is no generator network to convert")
  embeddings = 'generator_embeddings' if cfg.untied_generator_embeddings else 'embeddings'
  width = cfg.generator_hidden_size if cfg.untied_generator_embeddings else cfg.embedding_size
  encoder = 'generator' if cfg.generator == 'separate' else 'discriminator'
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
  return out


def from_hf(states: dict[str, dict], cfg: model_lib.ModelConfig) -> dict:
  """Our parameter tree from HF state dicts {'discriminator': ..., 'generator': ...}.

  Every parameter of `cfg`'s model must come from one of them; a missing name or another shape is
  an error naming it.
  """
  import jax  # pylint: disable=import-outside-toplevel
  shapes = jax.eval_shape(lambda k: model_lib.init_params(cfg, k), jax.random.key(0))
  params = _unfreeze(shapes)
  filled = set()
  for network, state in states.items():
    for ours, hf, transposed in table(cfg, network):
      if hf not in state:
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
  missing = [p for p in _paths(shapes) if p not in filled]
  if missing:
    raise ValueError(f'{len(missing)} parameter(s) were not converted, e.g. '
                     f'{"/".join(missing[0])}; give both the discriminator and the generator')
  return params


def _unfreeze(tree):
  return {k: _unfreeze(v) for k, v in tree.items()} if isinstance(tree, dict) else None


def _paths(tree, prefix=()):
  if not isinstance(tree, dict):
    return [prefix]
  return [p for k, v in tree.items() for p in _paths(v, prefix + (k,))]


def hf_config(cfg: model_lib.ModelConfig, network: str) -> dict:
  """The `ElectraConfig` fields of our `network`."""
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
