"""The discriminator as a zero-shot classifier (Ni and Kao 2022, Xia et al. 2022): each class's
label word is filled into a template after the text, `[CLS] text [SEP] template(word) [SEP]`, and
the pre-trained replaced-token-detection head scores it; the class whose word looks least
replaced wins. No training and no new parameter: only the head every ELECTRA pre-training trains.

    python launch/zeroshot.py --init=<a pre-training, an HF folder, an original checkpoint>
        --config=configs/finetune/<task>.py --template='It was {label}.'
        --label_words=pos=great,neg=terrible
        -> prompts.for_task -> prompts.encode (a sequence per class, the label word's tokens
           marked: finetune/inputs/prompts.py) -> detection logits (one pass of the
           discriminator per class) -> class_logits (a word of several tokens: the mean of its
           tokens' logits, Xia et al.) -> the class with the lowest mean "replaced" logit

The template goes after the text ('It was {label}.': a pair's texts joined by a space) or around
the texts ('{a}? {label}, {b}': the pair tasks' default), as prompts.py says.
"""

import collections
import dataclasses
import functools
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from electra_jax import UserError, user_errors
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.finetune import config as finetune_config
from electra_jax.finetune import pretrained as pretrained_lib
from electra_jax.finetune.inputs import prompts
from electra_jax.finetune.kinds import registry
from electra_jax.model import networks as model_lib
from electra_jax.storage import fs

def class_logits(detection_logits, word_mask):
  """The mean "replaced" logit of each class's label word over its tokens: [..., C, L] -> [..., C]
  (lower: the word looks more original, the class more likely)."""
  word_mask = word_mask.astype(detection_logits.dtype)
  return (detection_logits * word_mask).sum(-1) / word_mask.sum(-1)


def choose(scores) -> np.ndarray:
  """The class of each text from `predict`'s scores: the one whose word looks least replaced."""
  return np.asarray(scores).argmin(-1)


@functools.partial(jax.jit, static_argnums=0)
def _scores(model_cfg: model_lib.ModelConfig, params, batch):
  n, c, length = batch['input_ids'].shape
  flat = {k: v.reshape(n * c, length) for k, v in batch.items()}
  logits: jax.Array = model_lib.Electra(model_cfg).apply(  # type: ignore[assignment]
      {'params': params}, flat['input_ids'], flat['segment_ids'], flat['input_mask'],
      method=model_lib.Electra.discriminator_logits)
  return class_logits(logits.reshape(n, c, length), batch['word_mask'])


def predict(model_cfg: model_lib.ModelConfig, params: dict, inputs: dict,
            batch_size: int = 32) -> np.ndarray:
  """The mean "replaced" logit of every class for every text ([N, C]) from `encode`'s inputs, run
  `batch_size` texts at a time (the last batch padded to that size: one compiled program).
  `params`: the embeddings, the discriminator and its detection head."""
  n = inputs['input_ids'].shape[0]
  batch_size = max(1, min(batch_size, n))  # (a batch larger than the texts: one of them all)
  out = []
  for start in range(0, n, batch_size):
    part = {k: v[start:start + batch_size] for k, v in inputs.items()}
    pad = batch_size - part['input_ids'].shape[0]
    if pad:  # (the last text again: its scores are dropped)
      part = {k: np.concatenate([v, np.repeat(v[-1:], pad, 0)]) for k, v in part.items()}
    out.append(np.asarray(_scores(model_cfg, params, jax.tree.map(jnp.asarray, part)))[
        :batch_size - pad])
  return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


def _prompted_dev(task, splits, template: str, label_words: str):
  """(the prompt, the labelled examples of `task`'s first dev split, its majority class (the
  train split's most frequent label)); UserError for a task that is not a classification or
  has none."""
  if not registry.get(task.kind).text_classes:
    raise UserError(f'zero-shot prompting picks a class of a text, and task {task.name} is '
                    f'{task.kind}; give a classification task')
  with user_errors(ValueError):
    prompt = prompts.for_task(task.name, template, label_words, task.labels)
  split = task.dev_splits[0]
  examples = [e for e in splits.get(split, []) if e.label is not None]
  if not examples:
    raise UserError(f'task {task.name} has no labelled {split} examples to score; give its '
                    f'{split} file (--config.task.{split}=<file>)')
  majority = collections.Counter(e.label for e in splits.get('train', examples)).most_common(1)
  return prompt, split, examples, majority[0][0]


def _pairs(examples) -> list[tuple]:
  return [(e.text_a, e.text_b) for e in examples]


def probe(pretraining, vocab: str, lower_case: bool, log=print):
  """The zero-shot accuracy a pre-training scores at every held-out evaluation: the dev split of
  `pretraining.zeroshot_task` (a task with a default prompt) read, tokenized with the run's
  vocabulary and encoded at the run's sequence length once; returns (model config, params) ->
  accuracy. UserError for a task without a default prompt."""
  if pretraining.zeroshot_task not in prompts.DEFAULTS:
    raise UserError(f'zeroshot_task is {pretraining.zeroshot_task!r}, which has no default prompt;'
                    f' use one of {", ".join(prompts.DEFAULTS)}')
  task_cfg = finetune_config.TaskConfig(name=pretraining.zeroshot_task)
  task, splits = registry.load(task_cfg, pretraining, log)
  prompt, split, examples, majority = _prompted_dev(task, splits, '', '')
  tokenizer = tokenizer_lib.load_tokenizer(vocab, lower_case)
  with user_errors(ValueError):
    inputs = prompts.encode(tokenizer, tokenizer.special, _pairs(examples), prompt,
                            pretraining.data.max_seq_length).arrays()
  labels = list(prompt.label_words)
  truth = np.array([labels.index(e.label) for e in examples])
  log(f'zero-shot {task.name} at every evaluation: {len(examples):,} {split} examples x '
      f'{len(labels)} classes (majority class {majority!r}: '
      f'{100 * float((truth == labels.index(majority)).mean()):.1f}%)')
  return lambda model_cfg, params: float((choose(predict(model_cfg, params, inputs)) == truth
                                          ).mean())


def exported_prompt(folder: str) -> tuple[str, str]:
  """(template, label words) that the export of a prompted fine-tuning in `folder` carries in its
  config.json (`electra_jax_prompt`); ('', '') for any other folder."""
  path = fs.join(folder, 'config.json')
  if not fs.isfile(path):
    return '', ''
  try:
    with fs.open(path) as f:
      prompt = json.load(f).get('electra_jax_prompt') or {}
  except (ValueError, AttributeError):  # not a JSON object: its loader says what is wrong
    return '', ''
  words = prompt.get('label_words') or {}
  return prompt.get('template', ''), ','.join(f'{k}={v}' for k, v in words.items())


def evaluate(config, init: str, template: str = '', label_words: str = '', batch_size: int = 32,
             log=print) -> dict:
  """The zero-shot accuracy of `init`'s discriminator (a pre-training workdir, an HF folder, an
  original checkpoint) on the first dev split of the fine-tuning config `config`'s task (a config
  file's or a typed one; typed here), beside the
  majority class's (the train split's most frequent label); logged and returned. No template and
  words: the config's (prompt.template, prompt.label_words), else the one an export of a prompted
  fine-tuning carries, else the task's default (prompts.DEFAULTS)."""
  start = time.perf_counter()
  cfg = finetune_config.parse(config)
  if not template and not label_words:
    template, label_words = cfg.prompt.template, cfg.prompt.label_words
  if not template and not label_words:  # the prompt an export of a prompted fine-tuning carries
    template, label_words = exported_prompt(init)
  if template or label_words:
    with user_errors(ValueError):  # the template and the words' form, before anything is read
      prompts.for_task('', template, label_words, ())
  pretrained = pretrained_lib.load(init, log=log, step=cfg.init_step, head=True)
  task_cfg = cfg.task
  dev_only = not task_cfg.train and task_cfg.dev and registry.named(task_cfg) is None
  if dev_only:  # zero-shot trains nothing: the dev file alone gives the classes and the majority
    task_cfg = dataclasses.replace(task_cfg, train=task_cfg.dev)
    log(f'no train file: the classes and the majority class are those of the dev file '
        f'{task_cfg.dev}')
  with user_errors(ValueError):
    task, splits = registry.load(task_cfg, pretrained.config, log)
  prompt, split, examples, majority = _prompted_dev(task, splits, template, label_words)
  tokenizer = tokenizer_lib.load_tokenizer(pretrained.vocab, pretrained.lower_case)
  words = ', '.join(f'{k}={v!r}' for k, v in prompt.label_words.items())
  log(f'zero-shot {task.name}: {len(examples):,} {split} examples x {len(prompt.label_words)} '
      f'classes, template {prompt.template!r}, label words {words}')
  with user_errors(ValueError):
    inputs = prompts.encode(tokenizer, tokenizer.special, _pairs(examples), prompt,
                            cfg.max_seq_length).arrays()
  labels = list(prompt.label_words)
  assert pretrained.params is not None  # (read with the head: not from scratch)
  chosen = choose(predict(pretrained.model_cfg, pretrained.params, inputs, batch_size))
  truth = np.array([labels.index(e.label) for e in examples])
  out = {'task': task.name, 'split': split, 'examples': len(examples),
         'accuracy': float((chosen == truth).mean()),
         'majority_class': majority,
         'majority_accuracy': float((truth == labels.index(majority)).mean()),
         'predicted': {l: int((chosen == i).sum()) for i, l in enumerate(labels)}}
  log(f'zero-shot {task.name} {split}: accuracy {100 * out["accuracy"]:.1f}% (majority class '
      f'{out["majority_class"]!r}: {100 * out["majority_accuracy"]:.1f}%); predicted '
      + ', '.join(f'{l} {n:,}' for l, n in out['predicted'].items())
      + f'; {time.perf_counter() - start:.0f} s')
  return out
