"""The discriminator as a zero-shot classifier (Ni and Kao 2022, Xia et al. 2022): each class's
label word is filled into a template after the text, `[CLS] text [SEP] template(word) [SEP]`, and
the pre-trained replaced-token-detection head scores it; the class whose word looks least
replaced wins. No training and no new parameter: only the head every ELECTRA pre-training trains.

    python launch/zeroshot.py --init=<a pre-training, an HF folder, an original checkpoint>
        --config=configs/finetune/<task>.py --template='It was {label}.'
        --label_words=pos=great,neg=terrible
        -> Prompt.parse -> encode (the template's ids once per class, the label word's tokens
           found in them) -> detection logits (one pass of the discriminator per class)
           -> class_logits (a word of several tokens: the mean of its tokens' logits, Xia et al.)
           -> the class with the lowest mean "replaced" logit

A pair task's two texts (MNLI's premise and hypothesis) are joined by a space in the first
segment: the template is the second.
"""

import collections
import dataclasses
import functools
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from electra_jax import UserError, user_errors
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.data.tokenizer import SpecialIds
from electra_jax.finetune import config as finetune_config
from electra_jax.finetune import pretrained as pretrained_lib
from electra_jax.finetune.kinds import registry
from electra_jax.model import networks as model_lib

SLOT = '{label}'

# The prompts a task gets when the command gives none: {task name: (template, label words)}.
# SST-2's is Ni and Kao's; CoLA's and the built-in tasks' are this package's choice (the words of
# the topic task are its classes' names, or the word its passages use most for one).
DEFAULTS = {
    'sst2': ('This movie is {label}!', '0=terrible,1=great'),
    'cola': ('This sentence is {label}.', '0=wrong,1=correct'),
    'builtin': ('{label}.', 'next=yes,random=no'),
    'builtin_topic': ('This is about {label}.', 'asyncio=asyncio,concurrency=threads,email=email,'
                      'importing=import,logging=logging,numbers=numbers,testing=tests,web=web,'
                      'xml=xml'),
}


@dataclasses.dataclass(frozen=True)
class Prompt:
  template: str  # a sentence holding '{label}' once, e.g. 'It was {label}.'
  label_words: dict  # {class name: its label word (one or more tokens)}, in the task's order

  @classmethod
  def parse(cls, template: str, label_words: str, labels: Sequence[str] = ()) -> 'Prompt':
    """A prompt from the command line's `--template` and `--label_words=pos=great,neg=terrible`,
    its words in the order of `labels` (the task's classes, each given a word) when given;
    ValueError (one sentence) for a template without one '{label}', an entry that is not
    `class=word`, a class named twice, missing or not among `labels`."""
    if template.count(SLOT) != 1:
      raise ValueError(f'--template={template!r} must hold {SLOT} exactly once, where each '
                       "class's label word goes, e.g. --template='It was {label}.'")
    words: dict = {}
    for entry in filter(None, (e.strip() for e in label_words.split(','))):
      label, _, word = entry.partition('=')
      label, word = label.strip(), word.strip()
      if not label or not word:
        raise ValueError(f'--label_words: {entry!r} is not class=word; give each class its word, '
                         'e.g. --label_words=pos=great,neg=terrible')
      if label in words:
        raise ValueError(f'--label_words names class {label!r} twice; give each class one word')
      words[label] = word
    if len(words) < 2:
      raise ValueError('--label_words gives fewer than two classes; give each class its word, '
                       'e.g. --label_words=pos=great,neg=terrible')
    if labels:
      unknown = [l for l in words if l not in labels]
      missing = [l for l in labels if l not in words]
      if unknown or missing:
        raise ValueError(
            f'--label_words names {", ".join(map(repr, unknown)) or "no unknown class"} and '
            f'leaves out {", ".join(map(repr, missing)) or "no class"}; the task\'s classes are '
            f'{", ".join(map(str, labels))}: give each its word')
      words = {l: words[l] for l in labels}
    return cls(template, words)


def _find(ids: list, word: list) -> int:
  """The start of the last occurrence of `word` in `ids`, or -1."""
  for start in range(len(ids) - len(word), -1, -1):
    if ids[start:start + len(word)] == word:
      return start
  return -1


def template_ids(tokenizer, prompt: Prompt) -> list[tuple[list, int, int]]:
  """Per class: (the filled template's ids, where its label word's tokens start, how many).

  The template is tokenized whole, as the model reads it; where the word's own tokens do not
  appear in it (a tokenizer that joins the word with what follows), the three parts are
  tokenized apart and joined."""
  out = []
  before, after = prompt.template.split(SLOT)
  for word in prompt.label_words.values():
    own = tokenizer.encode(word)
    if not own:
      raise ValueError(f'the label word {word!r} has no tokens in this vocabulary; choose another')
    ids = tokenizer.encode(before + word + after)
    start = _find(ids, own)
    if start < 0:
      head = tokenizer.encode(before) if before.strip() else []
      ids, start = head + own + (tokenizer.encode(after) if after.strip() else []), len(head)
    out.append((ids, start, len(own)))
  return out


def encode(tokenizer, special: SpecialIds, texts: Sequence[str], prompt: Prompt,
           max_length: int) -> dict:
  """The discriminator's inputs for every text and class, [N, C, max_length] each:
  `input_ids`, `segment_ids`, `input_mask`, and `word_mask` (1 at the label word's tokens). A text
  too long is cut from its end so that the template always fits."""
  filled = template_ids(tokenizer, prompt)
  longest = max(len(ids) for ids, _, _ in filled)
  if longest + 3 > max_length:
    raise ValueError(f'the template with its longest label word takes {longest} tokens, and '
                     f'max_seq_length={max_length} leaves {max_length - 3} beside [CLS] and two '
                     '[SEP]; give a longer max_seq_length or a shorter template')
  n, c = len(texts), len(filled)
  out = {k: np.zeros((n, c, max_length), np.int32)
         for k in ('input_ids', 'segment_ids', 'input_mask', 'word_mask')}
  for i, text_ids in enumerate(tokenizer.encode_batch(list(texts))):
    for j, (ids, start, length) in enumerate(filled):
      text_ids_j = text_ids[:max_length - 3 - len(ids)]
      row = [special.cls, *text_ids_j, special.sep, *ids, special.sep]
      first = len(text_ids_j) + 2  # where the template starts
      out['input_ids'][i, j, :len(row)] = row
      out['segment_ids'][i, j, first:len(row)] = 1
      out['input_mask'][i, j, :len(row)] = 1
      out['word_mask'][i, j, first + start:first + start + length] = 1
  return out


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
  if not registry.get(task.kind).prompted:
    raise UserError(f'zero-shot prompting picks a class of a text, and task {task.name} is '
                    f'{task.kind}; give a classification task')
  if not template:
    if task.name not in DEFAULTS:
      raise UserError(f'task {task.name} has no default prompt; give --template (a sentence with '
                      "{label}, e.g. 'It was {label}.') and --label_words (class=word for each of "
                      f'{", ".join(map(str, task.labels))})')
    template, label_words = DEFAULTS[task.name]
  with user_errors(ValueError):
    prompt = Prompt.parse(template, label_words, task.labels)
  split = task.dev_splits[0]
  examples = [e for e in splits.get(split, []) if e.label is not None]
  if not examples:
    raise UserError(f'task {task.name} has no labelled {split} examples to score; give its '
                    f'{split} file (--config.task.{split}=<file>)')
  majority = collections.Counter(e.label for e in splits.get('train', examples)).most_common(1)
  return prompt, split, examples, majority[0][0]


def _texts(examples) -> list[str]:
  return [e.text_a if e.text_b is None else f'{e.text_a} {e.text_b}' for e in examples]


def probe(pretraining, vocab: str, lower_case: bool, log=print):
  """The zero-shot accuracy a pre-training scores at every held-out evaluation: the dev split of
  `pretraining.zeroshot_task` (a task with a default prompt) read, tokenized with the run's
  vocabulary and encoded at the run's sequence length once; returns (model config, params) ->
  accuracy. UserError for a task without a default prompt."""
  if pretraining.zeroshot_task not in DEFAULTS:
    raise UserError(f'zeroshot_task is {pretraining.zeroshot_task!r}, which has no default prompt;'
                    f' use one of {", ".join(DEFAULTS)}')
  task_cfg = finetune_config.default_config().task
  task_cfg.name = pretraining.zeroshot_task
  task, splits = registry.load(task_cfg, pretraining, log)
  prompt, split, examples, majority = _prompted_dev(task, splits, '', '')
  tokenizer = tokenizer_lib.load_tokenizer(vocab, lower_case)
  with user_errors(ValueError):
    inputs = encode(tokenizer, tokenizer.special, _texts(examples), prompt,
                    pretraining.data.max_seq_length)
  labels = list(prompt.label_words)
  truth = np.array([labels.index(e.label) for e in examples])
  log(f'zero-shot {task.name} at every evaluation: {len(examples):,} {split} examples x '
      f'{len(labels)} classes (majority class {majority!r}: '
      f'{100 * float((truth == labels.index(majority)).mean()):.1f}%)')
  return lambda model_cfg, params: float((choose(predict(model_cfg, params, inputs)) == truth
                                          ).mean())


def evaluate(cfg, init: str, template: str = '', label_words: str = '', batch_size: int = 32,
             log=print) -> dict:
  """The zero-shot accuracy of `init`'s discriminator (a pre-training workdir, an HF folder, an
  original checkpoint) on the first dev split of the fine-tuning config `cfg`'s task, beside the
  majority class's (the train split's most frequent label); logged and returned. No template and
  words: the task's default prompt (DEFAULTS)."""
  start = time.perf_counter()
  if bool(template) != bool(label_words):
    raise UserError('--template and --label_words go together: give both, or neither for a task '
                    f'that has a default prompt ({", ".join(DEFAULTS)})')
  if template:
    with user_errors(ValueError):  # the template and the words' form, before anything is read
      Prompt.parse(template, label_words)
  pretrained = pretrained_lib.load(init, log=log, step=cfg.init_step, head=True)
  task, splits = registry.load(cfg.task, pretrained.config, log)
  prompt, split, examples, majority = _prompted_dev(task, splits, template, label_words)
  template = prompt.template
  tokenizer = tokenizer_lib.load_tokenizer(pretrained.vocab, pretrained.lower_case)
  texts = _texts(examples)
  words = ', '.join(f'{k}={v!r}' for k, v in prompt.label_words.items())
  log(f'zero-shot {task.name}: {len(texts):,} {split} examples x {len(prompt.label_words)} '
      f'classes, template {template!r}, label words {words}')
  with user_errors(ValueError):
    inputs = encode(tokenizer, tokenizer.special, texts, prompt, cfg.max_seq_length)
  labels = list(prompt.label_words)
  assert pretrained.params is not None  # (read with the head: not from scratch)
  chosen = choose(predict(pretrained.model_cfg, pretrained.params, inputs, batch_size))
  truth = np.array([labels.index(e.label) for e in examples])
  out = {'task': task.name, 'split': split, 'examples': len(texts),
         'accuracy': float((chosen == truth).mean()),
         'majority_class': majority,
         'majority_accuracy': float((truth == labels.index(majority)).mean()),
         'predicted': {l: int((chosen == i).sum()) for i, l in enumerate(labels)}}
  log(f'zero-shot {task.name} {split}: accuracy {100 * out["accuracy"]:.1f}% (majority class '
      f'{out["majority_class"]!r}: {100 * out["majority_accuracy"]:.1f}%); predicted '
      + ', '.join(f'{l} {n:,}' for l, n in out['predicted'].items())
      + f'; {time.perf_counter() - start:.0f} s')
  return out
