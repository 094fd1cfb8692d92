"""Where bytes live: local and remote files (gs:// and the schemes TensorFlow knows), and the one
module that imports TensorFlow."""
