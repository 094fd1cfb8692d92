"""The model's view for the devices a run has, decided once before anything is initialized or
compiled: pre-training, fine-tuning and --topology alike."""

from electra_jax import user_errors
from electra_jax.model import attention as attention_lib
from electra_jax.model import networks as model_lib
from electra_jax.platform import chips
from electra_jax.train import distributed


def model_for_devices(model_fields, platform: str, chip: str, length: int, checked: bool = True,
                      log=print) -> model_lib.ModelConfig:
  """The model's view for a run on `platform` (devices of kind `chip`) at `length` tokens, from
  `config.model` or a view's fields: dtype 'auto' and attention 'auto' decided (the attention
  paths checked at the run's shape on the device when `checked`; every process takes one
  verdict), the chip's recompute choice (platform/chips.py), the attention line logged."""
  with user_errors(ValueError):
    model_cfg = model_lib.ModelConfig.from_config(
        model_fields, platform, chips.writes_for_backward(platform, chip))
  return with_attention(model_cfg, length, checked, log)


def with_attention(model_cfg: model_lib.ModelConfig, length: int, checked: bool = True,
                   log=print) -> model_lib.ModelConfig:
  """`model_cfg` (made for the run's devices) with attention 'auto' decided at `length` tokens
  (the paths checked on the device when `checked`; every process takes one verdict), the
  attention line logged."""
  with user_errors(ValueError):
    model_cfg, note = attention_lib.resolve(
        model_cfg, length, checked, agree=lambda ok: distributed.all_agree(ok, 'attention_kernel'))
  if note:
    log(note)
  return model_cfg
