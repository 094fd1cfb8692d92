"""electra_jax: pre-train, fine-tune and export ELECTRA text encoders with JAX and Flax."""

import contextlib

__version__ = '0.1.0'


class UserError(Exception):
  """A problem the user can fix; its message is one sentence that names the fix."""


@contextlib.contextmanager
def user_errors(*types: type[Exception]):
  """Inside it, an exception of `types` (library errors whose message is already the sentence the
  user needs) becomes a UserError with that message."""
  try:
    yield
  except types as e:
    raise UserError(str(e)) from None
