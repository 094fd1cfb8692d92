"""electra_jax: pre-train, fine-tune and export ELECTRA text encoders with JAX and Flax."""

import contextlib

__version__ = '0.1.0'


class UserError(Exception):
  """A problem the user can fix; its message is one sentence that names the fix."""


class Stopped(KeyboardInterrupt):
  """A run stopped early by SIGTERM, Ctrl-C or the preemption service, saved at `step`: the same
  command continues it. Raised (not returned) so that nothing after the run goes on with
  half-trained weights (a comparison's fine-tunings, the next command of `train && export`); the
  command line exits 128 + the signal's number (143, or 130 for Ctrl-C), so that a scheduler or a
  shell tells it from a run that finished."""

  def __init__(self, signal_name: str, step: int):
    super().__init__(signal_name, step)
    self.signal, self.step = signal_name, step

  @property
  def exit_code(self) -> int:
    return 130 if self.signal == 'SIGINT' else 143


@contextlib.contextmanager
def user_errors(*types: type[Exception]):
  """Inside it, an exception of `types` (library errors whose message is already the sentence the
  user needs) becomes a UserError with that message."""
  try:
    yield
  except types as e:
    raise UserError(str(e)) from None
