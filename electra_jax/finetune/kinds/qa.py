"""Extractive question answering (SQuAD 1.1 and 2.0): ELECTRA's span head (the end conditioned on
the start, SQuAD 2.0's answerability), trained on the gold span, decoded to answer text over the
sliding windows, scored by the official exact match and F1; exported as the class an export ships
(convert/hf_code.py: no HF transformers class holds this head).
"""

import json

import flax.linen as nn
import numpy as np
import jax
import jax.numpy as jnp
import optax

from electra_jax.convert import hf
from electra_jax.convert import hf_code
from electra_jax.finetune.inputs import squad
from electra_jax.finetune.kinds import interface as kinds
from electra_jax.model import networks as model_lib
from electra_jax.train import metrics as metrics_lib
from electra_jax.storage import fs


class QuestionAnswering(nn.Module):
  """SQuAD's head: start logits; end logits conditioned on the start (the start token's hidden
  state concatenated to every token's, dense 512 + GELU, LayerNorm, dense 1); for SQuAD 2.0 an
  answerability logit from [CLS] and the start-probability-weighted hidden state.

  Spans may only start and end on context tokens or on [CLS] (position 0: "no answer here"). With
  `start_positions` (training) the end is conditioned on the gold start; without, on each of the
  `start_top` best starts.
  """
  cfg: model_lib.ModelConfig
  answerable: bool = False
  start_top: int = 5
  width: int = 512

  def setup(self):
    cfg = self.cfg
    self.embeddings = model_lib.Embeddings(cfg, cfg.embedding_size)
    self.discriminator = model_lib.Encoder(cfg, cfg.hidden_size, cfg.num_layers, cfg.num_heads,
                                           cfg.intermediate_size)
    dense = lambda n: nn.Dense(n, kernel_init=nn.initializers.glorot_uniform(), dtype=jnp.float32,
                               param_dtype=cfg.param_dtype)
    self.start_dense, self.end_dense, self.end_output = dense(1), dense(self.width), dense(1)
    self.end_norm = nn.LayerNorm(epsilon=cfg.layer_norm_eps, param_dtype=cfg.param_dtype)
    self.answer_dense, self.answer_output = dense(self.width), dense(1)

  def __call__(self, input_ids, segment_ids, input_mask, deterministic: bool = True,
               start_positions=None):
    h = self.discriminator(self.embeddings(input_ids, segment_ids, deterministic), input_mask,
                           deterministic).astype(jnp.float32)
    length = h.shape[1]
    allowed = ((segment_ids == 1) & (input_mask > 0)) | (jnp.arange(length) == 0)[None]
    mask = lambda x: jnp.where(allowed.reshape(allowed.shape[:1] + (1,) * (x.ndim - 2) +
                                               allowed.shape[1:]), x, -1e4)
    start_logits = mask(self.start_dense(h)[..., 0])
    if start_positions is not None:
      starts = start_positions[:, None]
    else:
      starts = jax.lax.top_k(start_logits, min(self.start_top, length))[1]
    start_h = jnp.take_along_axis(h, starts[..., None], axis=1)  # [B, K, H]
    k = starts.shape[1]
    pair = jnp.concatenate([jnp.broadcast_to(h[:, None], (h.shape[0], k) + h.shape[1:]),
                            jnp.broadcast_to(start_h[:, :, None], (h.shape[0], k, length,
                                                                   h.shape[2]))], -1)
    end = self.end_norm(nn.gelu(self.end_dense(pair), approximate=False))
    end_logits = mask(self.end_output(end)[..., 0])  # [B, K, L]
    out = {'start_logits': start_logits, 'start_top': starts, 'end_logits': end_logits}
    if self.answerable:
      weights = jax.nn.softmax(start_logits, axis=-1)
      summary = jnp.einsum('bl,blh->bh', weights, h)
      x = nn.gelu(self.answer_dense(jnp.concatenate([summary, h[:, 0]], -1)), approximate=False)
      out['null_logit'] = self.answer_output(x)[:, 0]
    return out


def qa_loss(params, batch, rng, deterministic=False, *, model, task):
  """Mean of the start and end cross-entropies (end given the gold start), plus half the
  answerability log-loss for SQuAD 2.0 (the original's weighting)."""
  del task  # the head knows whether it is SQuAD 2.0
  out = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                    batch['input_mask'], deterministic, batch['start_positions'],
                    rngs={'dropout': rng})
  start = optax.softmax_cross_entropy_with_integer_labels(out['start_logits'],
                                                          batch['start_positions'])
  end = optax.softmax_cross_entropy_with_integer_labels(out['end_logits'][:, 0],
                                                        batch['end_positions'])
  loss = jnp.mean(start + end) / 2
  metrics = {}
  if 'null_logit' in out:
    null = optax.sigmoid_binary_cross_entropy(out['null_logit'], batch['impossible'])
    loss = loss + 0.5 * jnp.mean(null)
    metrics['null_loss'] = metrics_lib.ratio(jnp.mean(null), 1.0)
  return loss, {'loss': metrics_lib.ratio(loss, 1.0), **metrics}


def answers(cfg, out: dict, feats, questions: list, scored: bool = False) -> dict:
  """{question id: answer text} from the head's outputs over the questions' windows (`scored`:
  with the answer's probability, squad.decode)."""
  return squad.decode(questions, feats, out['start_logits'], out['start_top'], out['end_logits'],
                      out.get('null_logit'), n_best=cfg.qa.n_best,
                      max_answer_tokens=cfg.qa.max_answer_length,
                      null_threshold=cfg.qa.null_threshold, scored=scored)


class ExtractiveQA(kinds.Kind):
  name = 'qa'
  packs = False  # a window is a row (up to 512 tokens, 128 apart: nothing to pack)
  reads_segments = True
  predicts_dev = True  # SQuAD's test answers are not public: predictions of dev are the result

  def load(self, cfg, log=print):
    raise ValueError('SQuAD-format files are read with task.name=squad1 or squad2 and task.train / '
                     'task.dev the JSON files, not with task.kind=qa')

  def model(self, model_cfg, task, cfg, rate: float):
    return QuestionAnswering(model_cfg, answerable=task.name == 'squad2',
                             start_top=cfg.qa.start_top)

  def loss(self, params, batch, rng, deterministic=False, *, model, task):
    return qa_loss(params, batch, rng, deterministic, model=model, task=task)

  def label_shapes(self, task, layout) -> dict:
    rows = layout.rows
    return {'start_positions': ((rows,), jnp.int32), 'end_positions': ((rows,), jnp.int32),
            'impossible': ((rows,), jnp.float32)}

  def batch_shapes(self, task, layout, sharding) -> dict:
    """A row per window, as `encode` gives them (SQuAD's windows are not packed)."""
    fields = {**{k: ((layout.rows, layout.length), jnp.int32) for k in kinds.INPUTS},
              **self.label_shapes(task, layout)}
    return {k: jax.ShapeDtypeStruct(dims, dtype, sharding=sharding)
            for k, (dims, dtype) in fields.items()}

  def encode(self, task, examples: list, tokenizer, max_len: int, train: bool, cfg=None):
    return squad.make_features(examples, tokenizer, max_len, cfg.qa.doc_stride,
                               cfg.qa.max_query_length, train)

  def notes(self, split: str, data, examples: list, max_len: int) -> list[str]:
    out = super().notes(split, data, examples, max_len)
    if getattr(data, 'skipped', 0):
      out.append(f'warning: {split}: {data.skipped} of {len(examples)} questions skipped: their '
                 'answer text is not at its offset in the context')
    return out

  def scores(self, task, outputs, data, examples: list, cfg=None) -> dict:
    return squad.scores(examples, answers(cfg, outputs, data, examples),
                        'v2.0' if task.name == 'squad2' else 'v1.1')

  def write_predictions(self, task, split: str, outputs, examples: list, folder: str, data=None,
                        cfg=None) -> str:
    """The official format: {question id: answer text}."""
    fs.makedirs(folder, exist_ok=True)
    path = fs.join(folder, f'{split}_predictions.json')
    fs.write_atomic(path, json.dumps(answers(cfg, outputs, data, examples), indent=1,
                                     ensure_ascii=False))
    return path

  prediction_format = 'json'

  def metrics(self, labels: tuple) -> tuple:
    return ('f1', 'exact')

  def shape_of_outputs(self, task) -> str:
    return 'an answer span' + (' or none' if task.name == 'squad2' else '')

  def read_new(self, cfg, path: str, task, log=print) -> list:
    return squad.read_json(path, 'v2.0' if task.name == 'squad2' else 'v1.1', questions_only=True)

  def predicted(self, task, outputs, data, examples: list, cfg=None) -> list[dict]:
    scored = answers(cfg, outputs, data, examples, scored=True)
    return [{'id': q.qid, 'prediction': scored[q.qid]['answer'],
             **{k: v for k, v in scored[q.qid].items() if k != 'answer'}} for q in examples]

  def check_model(self, model_cfg, outputs: int, pooling: str = 'cls', cfg=None):
    return QuestionAnswering(model_cfg, answerable=cfg.task.name == 'squad2',
                             start_top=cfg.qa.start_top)

  def to_hf(self, params, model_cfg, labels: list[str], dropout: float, pooling: str = 'cls',
            cfg=None) -> tuple[dict, dict]:
    """The class convert/hf_code.py ships (ELECTRA's or ModernBERT's encoder): our head's layers
    under their own names."""
    state = hf.encoder_to_hf(params, model_cfg)
    names = ['start_dense', 'end_dense', 'end_output'] + (
        ['answer_dense', 'answer_output'] if 'answer_dense' in params else [])
    for name in names:
      kernel, bias = hf.dense(params, name)
      state.update({f'{name}.weight': kernel.T, f'{name}.bias': bias})
    norm = params['end_norm']
    state.update({'end_norm.weight': np.asarray(norm['scale'], np.float32),
                  'end_norm.bias': np.asarray(norm['bias'], np.float32)})
    return state, {**hf_code.shipped('AutoModelForQuestionAnswering', model_cfg.modern),
                   'start_top': cfg.qa.start_top, 'answerable': 'answer_dense' in params,
                   'qa_width': params['end_output']['kernel'].shape[0]}

  def hf_array(self, output) -> np.ndarray:
    """The start logits, the end logits given each best start and the answerability logit, the
    positions no span may take (-1e4 on both sides) as 0."""
    parts = [output.start_logits, output.end_logits_top] + (
        [output.null_logit] if output.null_logit is not None else [])
    return self._flat([p.numpy() for p in parts])

  def our_array(self, outputs) -> np.ndarray:
    return self._flat([np.asarray(outputs[k]) for k in ('start_logits', 'end_logits',
                                                        'null_logit') if k in outputs])

  @staticmethod
  def _flat(parts) -> np.ndarray:
    flat = np.concatenate([p.reshape(p.shape[0], -1) for p in parts], -1)
    return np.where(flat <= -1e4 + 1, 0.0, flat)


KIND = ExtractiveQA()
