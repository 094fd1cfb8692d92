"""electra_jax: pre-train, fine-tune and export ELECTRA text encoders with JAX and Flax."""

__version__ = '0.1.0'


class UserError(Exception):
  """A problem the user can fix; its message is one sentence that names the fix."""
