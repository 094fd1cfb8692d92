"""The one module that imports TensorFlow (and TensorFlow Datasets): on first use, quietly, and
off the accelerators, which belong to JAX. TensorFlow only reads and writes data here: tf.data,
TFRecord files, tf.io.gfile for buckets, TensorBoard event files, original TF checkpoints."""

import os


def tensorflow():
  """The `tensorflow` module."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '0')
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
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
