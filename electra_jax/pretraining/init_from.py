"""What a pre-training starts from (`init_from`): the workdir of another electra_jax pre-training
run (its latest checkpoint), or weights made elsewhere (convert/sources.py: an HF transformers
folder, launch/export.py's folder, an original TensorFlow checkpoint); both as a `Source`."""


import jax
import numpy as np

from electra_jax.config import pretraining as config_lib
from electra_jax.convert import sources
from electra_jax.data import records as records_lib
from electra_jax.model import generators
from electra_jax.model import networks as model_lib
from electra_jax.storage import fs
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import workdir as workdir_lib


def open_source(path: str, generator: str = '', vocab: str = '') -> sources.Source:
  """The model at `path` (see the module docstring); `generator` and `vocab` as
  convert.sources.open_source takes them, for weights made elsewhere."""
  if workdir_lib.kind_of(path) == 'pre-training':
    return _open_workdir(path)
  return sources.open_source(path, generator, vocab)


def _open_workdir(path: str) -> sources.Source:
  """The latest checkpoint of another electra_jax pre-training run."""
  config = config_lib.from_json(workdir_lib.read_config(path))
  _, _, vocab = records_lib.workdir_vocab(path, config)
  ckpt = checkpoint_lib.Checkpointer(fs.join(path, 'checkpoints'))
  try:
    step = ckpt.latest_step()
    if step is None:
      raise ValueError(f'{path} has no checkpoint yet; let its pre-training save one')
    params = jax.tree.map(np.asarray, ckpt.restore_arrays(step)[0]['params'])
  finally:
    ckpt.close()
  fields = {name: getattr(config.model, name) for name in config_lib.MODEL.fields
            if name not in ('dtype', 'param_dtype')}
  has_generator = generators.get(fields.get('generator', 'separate')).network

  def read(cfg, fill):
    del fill
    wanted = jax.eval_shape(lambda k: model_lib.init_params(cfg, k), jax.random.key(0))
    if jax.tree.map(np.shape, wanted) != jax.tree.map(np.shape, params):
      raise ValueError(f'the checkpoint of {path} holds a model of other shapes than the config')
    return params

  return sources.Source(fs.join(path, 'checkpoints', str(step)), 'electra_jax checkpoint', fields,
                vocab, config.data.lower_case, fields['vocab_size'], has_generator, True, [], read)
