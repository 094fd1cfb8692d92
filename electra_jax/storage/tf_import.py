"""The one module that imports TensorFlow (and TensorFlow Datasets): on first use, quietly, and
off the accelerators, which belong to JAX. TensorFlow only reads and writes data here: tf.data,
TFRecord files, tf.io.gfile for buckets, original TF checkpoints, TFDS's datasets (data/tfds.py)."""

import functools
import os
import sys


@functools.cache
def tensorflow():
  """The `tensorflow` module, set up once per process."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '0')
  # `import tensorflow` also imports Keras (and scikit-learn through it) eagerly, 3-4 s of every
  # process's start that reading data never uses: Keras is kept out while TensorFlow loads and
  # left importable afterwards (`tf.keras` and `import keras` still load it when asked for).
  keep_out = 'tensorflow' not in sys.modules and 'keras' not in sys.modules
  if keep_out:
    sys.modules['keras'] = None
  try:
    import tensorflow as tf
  finally:
    if keep_out and sys.modules.get('keras', 0) is None:
      del sys.modules['keras']
  tf.config.set_visible_devices([], 'GPU')
  # Triton's compiled core (the `triton` package torch imports where it is installed, as with
  # torch's CUDA builds: torch._dynamo, through transformers) and TensorFlow's both carry LLVM, and
  # importing Triton's after TensorFlow's ends the process in a segmentation fault (TensorFlow
  # 2.21, Triton 3.7). A process that has TensorFlow therefore has no Triton: torch takes it for
  # absent and runs without it (the GPU kernels it compiles: torch.compile on a GPU, which no
  # process with our data reading uses). One that imported Triton first keeps it: that order works.
  if 'triton' not in sys.modules:
    sys.modules['triton'] = None
  return tf


def datasets():
  """The `tensorflow_datasets` module, TensorFlow set up first."""
  tensorflow()
  import tensorflow_datasets as tfds
  return tfds
