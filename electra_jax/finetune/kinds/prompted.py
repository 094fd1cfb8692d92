"""Prompt-based fine-tuning of the discriminator (Xia et al. 2022, "Prompting ELECTRA"): a
classification task whose every example is read once per class, the class's label word filled
into a template (finetune/inputs/prompts.py), each word scored by the pre-trained detection head.
No new parameter: the head trains with its own binary loss at the word (the right class's word
"original", every other class's "replaced", a sigmoid cross-entropy at each), and the class whose
word looks least replaced wins, as in zero-shot prompting (apps/zeroshot.py): before its first
step, a prompted fine-tuning predicts what the zero-shot command does.

    --config.task.kind=prompted [--config.prompt.template='It was {label}.'
                                 --config.prompt.label_words=pos=great,neg=terrible]
    (any classification task, named or your own files; '' prompt: the task's default)

The head's output per class is the word's "originality", minus its mean "replaced" logit over
its tokens: softmax over the classes gives the probabilities predictions report. Exported as
HF's ElectraForPreTraining (the discriminator and its head), the prompt in its config.json.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from electra_jax import UserError, user_errors
from electra_jax.convert import hf
from electra_jax.finetune.inputs import encode as encode_lib
from electra_jax.finetune.inputs import prompts
from electra_jax.finetune.inputs import tasks as tasks_lib
from electra_jax.finetune.kinds import classification
from electra_jax.model import networks as model_lib
from electra_jax.train import metrics as metrics_lib


class PromptScorer(nn.Module):
  """The discriminator and its detection head: the mean "replaced" logit over each sequence's
  label-word tokens (`word_mask`), negated (float32). [B, L] inputs: [B, 1]; rows that pack
  several sequences (`starts` given, finetune/inputs/packing.py): [B, S, 1], each sequence's own
  tokens (numbered by `input_mask`); [N, C, L]: [N, C]. `tokens`: the head's logit at every token
  instead ([B, L]: what HF's ElectraForPreTraining gives). Parameter names are pre-training's."""
  cfg: model_lib.ModelConfig
  tokens: bool = False

  def setup(self):
    cfg = self.cfg
    self.embeddings = model_lib.Embeddings(cfg, cfg.embedding_size)
    self.discriminator = model_lib.Encoder(cfg, cfg.hidden_size, cfg.num_layers, cfg.num_heads,
                                           cfg.intermediate_size)
    self.discriminator_predictions = model_lib.DiscriminatorHead(cfg)

  def __call__(self, input_ids, segment_ids, input_mask, deterministic: bool = True,
               positions=None, starts=None, word_mask=None):
    if input_ids.ndim == 3:  # [N, C, L]: every class of every example
      n, c, length = input_ids.shape
      flat = lambda x: None if x is None else x.reshape(n * c, length)
      return self(flat(input_ids), flat(segment_ids), flat(input_mask), deterministic,
                  word_mask=flat(word_mask)).reshape(n, c)
    hidden = self.discriminator(self.embeddings(input_ids, segment_ids, deterministic,
                                                positions=positions), input_mask, deterministic,
                                positions=positions)
    replaced = self.discriminator_predictions(hidden)  # [B, L] float32
    if self.tokens:
      return replaced
    word = (input_mask > 0 if word_mask is None else word_mask > 0).astype(jnp.float32)
    if starts is None:  # a sequence a row
      return (-jnp.sum(replaced * word, -1) / jnp.maximum(jnp.sum(word, -1), 1.0))[:, None]
    # [B, L, S]: token t is a word token of sequence s
    member = (input_mask[..., None] == jnp.arange(1, starts.shape[-1] + 1)) * word[..., None]
    total = jnp.einsum('bl,bls->bs', replaced, member)
    return (-total / jnp.maximum(jnp.sum(member, 1), 1.0))[..., None]


def prompt_loss(scores, labels):
  """The head's binary loss at the label words (Xia et al.): `scores` [X, C] the words'
  originality logits, `labels` [X] the right class (-1: no example); the mean sigmoid
  cross-entropy over the classes of each example, the right one's target "original" (1), the
  others' "replaced" (0), averaged over the examples; and the accuracy of the most original."""
  weights = (labels >= 0).astype(jnp.float32)
  targets = jax.nn.one_hot(jnp.maximum(labels, 0), scores.shape[-1])
  per_example = optax.sigmoid_binary_cross_entropy(scores, targets).mean(-1)
  loss = jnp.sum(per_example * weights) / jnp.maximum(jnp.sum(weights), 1.0)
  correct = (jnp.argmax(scores, -1) == jnp.maximum(labels, 0)).astype(jnp.float32) * weights
  return loss, {'loss': metrics_lib.ratio(loss, 1.0),
                'accuracy': metrics_lib.ratio(correct, weights)}


class Prompted(classification.Classification):
  name = 'prompted'
  own_data = 'a text (pair) and its class per row, each class given a label word'
  hf_class = 'ElectraForPreTraining'
  hf_pipeline = ''  # (HF has no pipeline that prompts a discriminator)
  onnx_rows = ''  # (its graph gives detection logits, which its prompt's words decode)
  init_shape = (1, 2, 8)
  token_inputs = ('word_mask',)
  reads_head = True

  def prompt(self, task, cfg) -> prompts.Prompt:
    """The fine-tuning config's prompt for `task` (its default where the config gives none)."""
    with user_errors(ValueError):
      return prompts.for_task(task.name, cfg.prompt.template, cfg.prompt.label_words,
                              task.labels)

  def model(self, model_cfg, task, cfg, rate: float):
    del task, cfg, rate  # (the encoder's dropout is the model config's)
    return PromptScorer(model_cfg)

  def sequences(self, task) -> int:
    return len(task.labels)

  def encode(self, task, examples: list, tokenizer, max_len: int, train: bool, cfg=None):
    """Every example once per class, its word filled in: [N, C, L] arrays and the word's mask."""
    if train and task.swap_pairs:
      examples = encode_lib.swapped(examples)
    with user_errors(ValueError):
      rows = prompts.encode(tokenizer, tokenizer.special, [(e.text_a, e.text_b) for e in examples],
                            self.prompt(task, cfg), max_len)
    return encode_lib.Encoded(rows.input_ids, rows.segment_ids, rows.input_mask,
                              self.targets(task, examples), rows.truncated,
                              token_inputs={'word_mask': rows.word_mask})

  def notes(self, split: str, data, examples: list, max_len: int) -> list[str]:
    if not data.truncated:
      return []
    return [f'{split}: {data.truncated} of {len(data)} examples cut to fit {max_len} tokens with '
            'the prompt (the text loses its last tokens, the longer of a pair first)']

  def loss(self, params, batch, rng, deterministic=False, *, model, task):
    scores = classification.example_logits(params, batch, rng, deterministic, model)[..., 0]
    return prompt_loss(scores, batch['labels'])

  def check(self, cfg, splits: dict):
    if cfg.head_init == 'probe':
      raise UserError("head_init='probe' fits a new head on the encoder's features, and a "
                      'prompted fine-tuning trains the pre-trained detection head; use '
                      '--config.head_init=random (it keeps that head) or task.kind=classification')
    super().check(cfg, splits)

  def describe(self, cfg) -> str:
    if not cfg.prompt.template:
      return ", the task's default prompt"
    return f', prompt {cfg.prompt.template!r} with {cfg.prompt.label_words}'

  def check_model(self, model_cfg, outputs: int, pooling: str = 'cls', cfg=None):
    return PromptScorer(model_cfg, tokens=True)

  def compared(self, mask):
    return mask > 0  # (every real token's detection logit)

  def to_hf(self, params, model_cfg, labels: list[str], dropout: float,
            pooling: str = 'cls', cfg=None) -> tuple[dict, dict]:
    """ElectraForPreTraining (the modern backbone: ModernBertForTokenClassification with one
    label): the discriminator and its detection head as pre-training exports them; the classes
    and their prompt in the config (`electra_jax_prompt`), what prompts it the same way again."""
    state = {**hf.encoder_to_hf(params, model_cfg), **hf.detection_head_to_hf(params, model_cfg)}
    fields = {'architectures': [self.hf_class], **hf.labelled(labels)}
    if model_cfg.modern:  # ModernBertForTokenClassification, one output (the classes: the prompt's)
      fields = {'architectures': ['ModernBertForTokenClassification'],
                **hf.labelled(['replaced'])}
    if cfg is not None:
      task = tasks_lib.Task(cfg.task.name, self.name, tuple(labels), ())
      prompt = self.prompt(task, cfg)
      fields['electra_jax_prompt'] = {'template': prompt.template,
                                      'label_words': prompt.label_words}
    return state, fields

  def hf_inputs(self, ids, segments, mask) -> tuple:
    return ids, segments, mask

  def hf_array(self, output) -> np.ndarray:
    logits = output.logits.numpy()  # (ModernBertForTokenClassification's: [B, L, 1])
    return logits[..., 0] if logits.ndim == 3 else logits

  def our_array(self, outputs) -> np.ndarray:
    return np.asarray(outputs)


KIND = Prompted()
