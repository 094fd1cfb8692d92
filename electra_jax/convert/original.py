"""Checkpoints of the original TensorFlow release -> our parameters.

The released zips hold a TF1 checkpoint (`<name>.index`, `<name>.data-*`, a `checkpoint` file) and
`vocab.txt`. Variable names follow TF1 scopes (reference section 8): `electra/...` is the
discriminator and the shared embeddings, `generator/...` the generator's encoder (and its
embeddings when untied), `*_predictions/...` the heads. Kernels are [in, out] there as here, so
values are taken as they are. Adam slots (`*/adam_m`, `*/adam_v`) and `global_step` are ignored:
continued pre-training starts a fresh optimizer.

Every size is read from the shapes (the generator's width and depth too: ELECTRA-Small++ has a
full-width generator), except the number of attention heads, which a checkpoint does not record:
the config's, by default width / 64 as in every released model.
"""

import re

import jax
import numpy as np

from electra_jax.convert import hf
from electra_jax.model import networks as model_lib
from electra_jax.storage import fs
from electra_jax.storage import tf_import

# Our layer's modules -> the original's scopes under encoder/layer_<i>.
_LAYER = {'query': 'attention/self/query', 'key': 'attention/self/key',
          'value': 'attention/self/value', 'attention_output': 'attention/output/dense',
          'attention_LayerNorm': 'attention/output/LayerNorm', 'intermediate': 'intermediate/dense',
          'output': 'output/dense', 'output_LayerNorm': 'output/LayerNorm'}
_LEAF = {'kernel': 'kernel', 'bias': 'bias'}
_NORM_LEAF = {'scale': 'gamma', 'bias': 'beta'}
_SCOPE = {'discriminator': 'electra', 'generator': 'generator', 'embeddings': 'electra/embeddings',
          'generator_embeddings': 'generator/embeddings'}
_HEAD = {'dense': 'dense', 'dense_prediction': 'dense_1', 'LayerNorm': 'LayerNorm'}


def variable_name(path: tuple) -> str:
  """The original's variable name of our parameter `path`."""
  top, *rest = path
  leaf_map = _NORM_LEAF if any('LayerNorm' in p for p in path) else _LEAF
  if top in ('embeddings', 'generator_embeddings'):
    if rest[0] == 'LayerNorm':
      return f'{_SCOPE[top]}/LayerNorm/{_NORM_LEAF[rest[1]]}'
    return f'{_SCOPE[top]}/{rest[0]}'
  if top in ('discriminator', 'generator'):
    if rest[0] == 'embeddings_project':
      return f'{_SCOPE[top]}/embeddings_project/{_LEAF[rest[1]]}'
    return f'{_SCOPE[top]}/encoder/{rest[0]}/{_LAYER[rest[1]]}/{leaf_map[rest[2]]}'
  if top == 'generator_predictions' and rest[0] == 'output_bias':
    return 'generator_predictions/output_bias'
  return f'{top}/{_HEAD[rest[0]]}/{leaf_map[rest[1]]}'


def checkpoint_prefix(path: str) -> str | None:
  """The checkpoint prefix that `path` names (a prefix, its .index file, or a folder), or None."""
  if path.endswith('.index') and fs.isfile(path):
    return path[:-len('.index')]
  if fs.isfile(path + '.index'):
    return path
  if fs.isdir(path):
    tf = tf_import.tensorflow()
    latest = tf.train.latest_checkpoint(path)
    if latest:
      return latest
    indexes = sorted(n for n in fs.listdir(path) if n.endswith('.index'))
    if indexes:
      return fs.join(path, indexes[-1][:-len('.index')])
  return None


def read_shapes(prefix: str) -> dict[str, tuple]:
  tf = tf_import.tensorflow()
  return {k: tuple(v) for k, v in tf.train.load_checkpoint(prefix)
          .get_variable_to_shape_map().items()}


def _layers(shapes: dict, scope: str) -> list[int]:
  found = (re.fullmatch(rf'{scope}/encoder/layer_(\d+)/attention/self/query/kernel', k)
           for k in shapes)
  return sorted(int(m.group(1)) for m in found if m)


def model_fields(shapes: dict[str, tuple], prefix: str = 'the checkpoint') -> dict:
  """Our ModelConfig fields from the variable shapes of an original checkpoint."""
  word = shapes.get('electra/embeddings/word_embeddings')
  layers = _layers(shapes, 'electra')
  if word is None or not layers:
    raise ValueError(f'{prefix} is not an ELECTRA checkpoint of the original release (it has no '
                     'electra/embeddings/word_embeddings or electra/encoder/layer_0); give the '
                     'folder of a released model (e.g. electra_small/) or its checkpoint prefix')
  hidden = shapes['electra/encoder/layer_0/attention/self/query/kernel'][1]
  fields = {'vocab_size': word[0], 'embedding_size': word[1], 'hidden_size': hidden,
            'num_layers': len(layers),  # heads: not in the checkpoint; the config's (H / 64)
            'intermediate_size': shapes['electra/encoder/layer_0/intermediate/dense/kernel'][1],
            'max_position_embeddings': shapes['electra/embeddings/position_embeddings'][0],
            'type_vocab_size': shapes['electra/embeddings/token_type_embeddings'][0]}
  gen_layers = _layers(shapes, 'generator')
  if gen_layers:
    width = shapes['generator/encoder/layer_0/attention/self/query/kernel'][1]
    fields.update(generator='separate', generator_hidden_fraction=width / hidden,
                  generator_layers_fraction=len(gen_layers) / len(layers),
                  untied_generator_embeddings='generator/embeddings/word_embeddings' in shapes)
  elif 'generator_predictions/output_bias' in shapes:
    fields['generator'] = 'tied'  # the generator is the discriminator
  return fields


def read_params(prefix: str, cfg: model_lib.ModelConfig, fill=None) -> dict:
  """Our parameter tree from the checkpoint; the heads and generator it lacks come from `fill`
  (hf.FILLABLE; else an error names them). Another shape than `cfg`'s is an error naming it."""
  tf = tf_import.tensorflow()
  reader = tf.train.load_checkpoint(prefix)
  stored = reader.get_variable_to_shape_map()
  shapes = jax.eval_shape(lambda k: model_lib.init_params(cfg, k), jax.random.key(0))
  flat, treedef = jax.tree_util.tree_flatten_with_path(shapes)
  values = []
  for path, leaf in flat:
    ours = tuple(k.key for k in path)
    name = variable_name(ours)
    if name not in stored:
      if fill is None or ours[0] not in hf.FILLABLE:
        raise ValueError(f'{prefix} has no variable {name}; is it an ELECTRA checkpoint of this '
                         'size?')
      values.append(np.asarray(_get(fill, ours), np.float32))
      continue
    if tuple(stored[name]) != tuple(leaf.shape):
      raise ValueError(f'the checkpoint variable {name} has shape {tuple(stored[name])}, the '
                       f'config wants {tuple(leaf.shape)}; set the model config to the '
                       "checkpoint's sizes")
    values.append(np.asarray(reader.get_tensor(name), np.float32))
  return _to_dicts(jax.tree_util.tree_unflatten(treedef, values))


def _get(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def _to_dicts(tree):
  return ({k: _to_dicts(v) for k, v in tree.items()} if hasattr(tree, 'items') else tree)
