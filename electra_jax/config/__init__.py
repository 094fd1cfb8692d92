"""The pre-training config built from the declared fields (pretraining.py), and config files read
with their overrides (files.py).

Config files written for earlier versions import `default_config` from here; it is looked up in
pretraining.py when asked for, so that importing a module of this package never imports another.
"""


def __getattr__(name: str):
  if name == 'default_config':  # (PEP 562: a module attribute computed when asked for)
    from electra_jax.config import pretraining
    return pretraining.default_config
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
