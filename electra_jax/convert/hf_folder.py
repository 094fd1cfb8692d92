"""An HF transformers folder written whole (config.json, model.safetensors, the tokenizer), and what
an export wrote: the folders, and the model of ours they came from, for the check against it."""

import dataclasses
from typing import Any

from electra_jax.convert import hf
from electra_jax.convert import vocab as vocab_lib
from electra_jax.model import networks as model_lib
from electra_jax.storage import fs


@dataclasses.dataclass
class Exported:
  folders: list[str]
  cfg: model_lib.ModelConfig
  params: Any  # our parameters that were exported (Electra's, or a fine-tuned Classifier's)
  tokenizer: Any
  kind: str  # 'pretraining' or the fine-tuned task's kind (finetune/kinds/interface.py)
  pooling: str = 'cls'  # a fine-tuned head's input ([CLS], or the mean of the tokens)
  config: Any = None  # a fine-tuning's config (its dev file is run through HF by verify)
  meta: dict | None = None  # the exported checkpoint's meta (its task)


def write_model(folder: str, state: dict, config: dict, tokenizer, lower_case: bool,
                cfg: model_lib.ModelConfig, token_types: bool = False):
  """HF's `state` (names -> float32 arrays) and `config` with our tokenizer, in `folder`; the
  tokenizer gives token types where the model takes them (ELECTRA's, or `token_types`)."""
  fs.makedirs(folder, exist_ok=True)
  config = {**config, **hf.special_ids(cfg, tokenizer.special)}
  hf.save_folder(folder, state, config)
  vocab_lib.write(tokenizer, folder, lower_case, cfg.max_position_embeddings,
                  token_types=token_types or not cfg.modern)


def write_networks(out: str, params, cfg: model_lib.ModelConfig, tokenizer, lower_case: bool,
                   networks=('discriminator', 'generator')) -> list[str]:
  """A pre-trained model's `networks` as HF folders `out/<network>` (ElectraForPreTraining,
  ElectraForMaskedLM); their paths."""
  written = []
  for network in networks:
    folder = fs.join(out, network)
    write_model(folder, hf.to_hf(params, cfg, network), hf.hf_config(cfg, network), tokenizer,
                lower_case, cfg)
    written.append(folder)
  return written
