"""What every launch script shares: flag parsing whose errors read as one sentence, and an exit code.

A mistake the user can fix (unknown config key, bad value, missing file, ...) prints
`error: <one sentence>` on stderr and exits with status 2; nothing is left half-written.
"""

import re
import sys

from absl import app
from absl import flags
from absl import logging

from electra_jax import UserError


def _explain(error: Exception) -> str:
  text = str(error).replace('\\n', '\n').replace("\\'", "'").strip('\'"')
  match = re.search(r'Did you mean "([^"]+)" instead of "([^"]+)"', text)
  if match:
    return f'unknown config field {match.group(2)!r}; did you mean {match.group(1)!r}?'
  match = re.search(r'Error whilst parsing config file.*\n(?:[A-Za-z]+Error): (.+?)\s*$', text,
                    re.S)
  if match:  # the config file's get_config raised: its own message is the sentence
    return ' '.join(match.group(1).split())
  match = re.match(r"^'?([A-Za-z_0-9]+)'?$", text)
  if isinstance(error, (AttributeError, KeyError)) and match:
    return f'unknown config field {match.group(1)!r}; see electra_jax/config.py for the fields'
  return ' '.join(text.split())


def _parse(argv):
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    cause = e.__cause__ or e.__context__
    print(f'error: {_explain(cause) if cause else e}', file=sys.stderr)
  except Exception as e:  # pylint: disable=broad-except
    print(f'error: {_explain(e)}', file=sys.stderr)
  sys.exit(2)


def run(main):
  """absl's app.run, with one-sentence errors for bad flags and for UserError."""
  def wrapped(argv):
    if not flags.FLAGS['verbosity'].present:  # library INFO chatter (Orbax, ...) only on request
      logging.set_verbosity(logging.WARNING)
    try:
      return main(argv)
    except UserError as e:
      print(f'error: {e}', file=sys.stderr)
      sys.exit(2)
    except KeyboardInterrupt:  # what is complete stays; a re-run continues from it
      print('interrupted: run the same command again to continue from what is complete',
            file=sys.stderr)
      sys.exit(130)
  app.run(wrapped, flags_parser=_parse)
