"""The one module that imports TensorFlow (and TensorFlow Datasets): on first use, quietly, and
off the accelerators, which belong to JAX. TensorFlow only reads and writes data here: tf.data,
TFRecord files, tf.io.gfile for buckets, TensorBoard event files, original TF checkpoints."""

import os
import sys


def tensorflow():
  """The `tensorflow` module."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '0')
  # `import tensorflow` also imports Keras (and scikit-learn through it) eagerly, 3-4 s of every
  # process's start that reading data never uses: Keras is kept out while TensorFlow loads and
  # left importable afterwards (`tf.keras` and `import keras` still load it when asked for).
  keep_out = 'tensorflow' not in sys.modules and 'keras' not in sys.modules
  if keep_out:
    sys.modules['keras'] = None
  try:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
  finally:
    if keep_out and sys.modules.get('keras', 0) is None:
      del sys.modules['keras']
  tf.config.set_visible_devices([], 'GPU')
  return tf


def datasets():
  """The `tensorflow_datasets` module, TensorFlow set up first."""
  tensorflow()
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  return tfds


def summary_pb2():
  """TensorFlow's summary protocol buffers (TensorBoard's scalars without TensorBoard)."""
  tensorflow()
  from tensorflow.core.framework import summary_pb2 as pb2  # pylint: disable=import-outside-toplevel
  return pb2
