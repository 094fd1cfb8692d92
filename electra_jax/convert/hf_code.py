"""Model classes that HF transformers lacks, shipped in an export's folder as
`modeling_electra_jax.py` and loaded with `trust_remote_code=True` (its `auto_map` names them for
the Auto classes and `pipeline`): ELECTRA's discriminator with a head on the MEAN of the real
tokens' hidden states (a fine-tuning with pooling='mean'), for sequence classification (and
regression) and for multiple choice; and ELECTRA's SQuAD head (the end conditioned on the start,
SQuAD 2.0's answerability), on ELECTRA's discriminator or on ModernBERT (the modern backbone). HF's
own classes read [CLS] (ElectraForSequenceClassification), average the padding too
(SequenceSummary's 'mean') or score the end apart from the start (Electra- and
ModernBertForQuestionAnswering), so none computes these heads.
"""

from electra_jax.storage import fs

MODULE = 'modeling_electra_jax'

SOURCE = '''"""ELECTRA with a head on the mean of the real tokens' hidden states, as electra_jax
fine-tunes it with pooling='mean': the discriminator, the mean over the tokens the attention mask
keeps ([CLS] and [SEP] included), dropout, one dense layer. Written by electra_jax's export."""

import torch
from torch import nn
from transformers import ElectraModel, ElectraPreTrainedModel
from transformers.modeling_outputs import MultipleChoiceModelOutput, SequenceClassifierOutput


def _mean_of_real_tokens(hidden, attention_mask):
  if attention_mask is None:
    attention_mask = torch.ones(hidden.shape[:2], device=hidden.device)
  weights = attention_mask.to(hidden.dtype).unsqueeze(-1)
  return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


class _MeanPooled(ElectraPreTrainedModel):

  def __init__(self, config, outputs):
    super().__init__(config)
    self.electra = ElectraModel(config)
    rate = getattr(config, 'classifier_dropout', None)
    self.dropout = nn.Dropout(config.hidden_dropout_prob if rate is None else rate)
    self.classifier = nn.Linear(config.hidden_size, outputs)
    self.post_init()

  def _logits(self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
              **kwargs):
    out = self.electra(input_ids=input_ids, attention_mask=attention_mask,
                       token_type_ids=token_type_ids, position_ids=position_ids,
                       inputs_embeds=inputs_embeds, **kwargs)
    pooled = _mean_of_real_tokens(out[0], attention_mask)
    return self.classifier(self.dropout(pooled)), out


class ElectraMeanPooledForSequenceClassification(_MeanPooled):

  def __init__(self, config):
    super().__init__(config, config.num_labels)
    self.num_labels = config.num_labels

  def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
              inputs_embeds=None, labels=None, **kwargs):
    kwargs.pop('return_dict', None)
    logits, out = self._logits(input_ids, attention_mask, token_type_ids, position_ids,
                               inputs_embeds, **kwargs)
    loss = None
    if labels is not None:
      if self.config.problem_type == 'regression' or self.num_labels == 1:
        loss = nn.functional.mse_loss(logits.squeeze(-1), labels.to(logits.dtype))
      else:
        loss = nn.functional.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
    return SequenceClassifierOutput(loss=loss, logits=logits,
                                    hidden_states=getattr(out, 'hidden_states', None),
                                    attentions=getattr(out, 'attentions', None))


class ElectraMeanPooledForMultipleChoice(_MeanPooled):

  def __init__(self, config):
    super().__init__(config, 1)

  def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
              inputs_embeds=None, labels=None, **kwargs):
    kwargs.pop('return_dict', None)
    first = input_ids if input_ids is not None else inputs_embeds
    choices = first.shape[1]
    flat = lambda x: None if x is None else x.reshape((-1,) + tuple(x.shape[2:]))
    logits, out = self._logits(flat(input_ids), flat(attention_mask), flat(token_type_ids),
                               flat(position_ids), flat(inputs_embeds), **kwargs)
    logits = logits.view(-1, choices)
    loss = None if labels is None else nn.functional.cross_entropy(logits, labels)
    return MultipleChoiceModelOutput(loss=loss, logits=logits,
                                     hidden_states=getattr(out, 'hidden_states', None),
                                     attentions=getattr(out, 'attentions', None))
'''

SOURCE += '''

from dataclasses import dataclass
from typing import Optional

from transformers.modeling_outputs import QuestionAnsweringModelOutput


@dataclass
class ElectraSquadOutput(QuestionAnsweringModelOutput):
  """start_logits [B, L]; end_logits [B, L] given the best start (what HF's question-answering
  pipeline reads); start_top [B, K] the K best starts and end_logits_top [B, K, L] the end
  logits given each (what ELECTRA's decoding reads); null_logit [B]: the log-odds that the window
  holds no answer (SQuAD 2.0)."""
  start_top: Optional[torch.LongTensor] = None
  end_logits_top: Optional[torch.FloatTensor] = None
  null_logit: Optional[torch.FloatTensor] = None


class _SquadHead:
  """ELECTRA's SQuAD head, as electra_jax fine-tunes it, on the hidden states of the encoder a
  class's `_encode` runs: start logits; end logits conditioned on the start (its hidden state
  concatenated to every token's, dense + exact GELU, LayerNorm, dense 1) for each of the
  `start_top` best starts; for SQuAD 2.0 an answerability logit from [CLS] and the
  start-probability-weighted hidden state. Spans start and end on the second segment's real tokens
  or on [CLS] (position 0: no answer)."""
  def _build_head(self, config):
    width, h = config.qa_width, config.hidden_size
    eps = getattr(config, 'layer_norm_eps', None) or config.norm_eps  # (ModernBert's name)
    self.start_dense = nn.Linear(h, 1)
    self.end_dense, self.end_output = nn.Linear(2 * h, width), nn.Linear(width, 1)
    self.end_norm = nn.LayerNorm(width, eps=eps)
    if config.answerable:
      self.answer_dense, self.answer_output = nn.Linear(2 * h, width), nn.Linear(width, 1)

  def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
              inputs_embeds=None, start_positions=None, end_positions=None, **kwargs):
    kwargs.pop('return_dict', None)
    out = self._encode(input_ids=input_ids, attention_mask=attention_mask,
                       token_type_ids=token_type_ids, position_ids=position_ids,
                       inputs_embeds=inputs_embeds, **kwargs)
    h = out[0].float()
    batch, length = h.shape[:2]
    mask = torch.ones(batch, length, device=h.device) if attention_mask is None else attention_mask
    segments = torch.zeros_like(mask) if token_type_ids is None else token_type_ids
    allowed = ((segments == 1) & (mask > 0)) | (torch.arange(length, device=h.device) == 0)[None]
    fill = lambda x, a: torch.where(a, x, torch.full_like(x, -1e4))
    start_logits = fill(self.start_dense(h)[..., 0], allowed)
    starts = torch.topk(start_logits, min(self.config.start_top, length), dim=-1).indices
    start_h = torch.gather(h, 1, starts[..., None].expand(-1, -1, h.shape[-1]))  # [B, K, H]
    k = starts.shape[1]
    pair = torch.cat([h[:, None].expand(batch, k, length, h.shape[-1]),
                      start_h[:, :, None].expand(batch, k, length, h.shape[-1])], -1)
    end = self.end_norm(nn.functional.gelu(self.end_dense(pair)))
    end_logits = fill(self.end_output(end)[..., 0], allowed[:, None])  # [B, K, L]
    null = None
    if self.config.answerable:
      summary = torch.einsum('bl,blh->bh', torch.softmax(start_logits, -1), h)
      x = nn.functional.gelu(self.answer_dense(torch.cat([summary, h[:, 0]], -1)))
      null = self.answer_output(x)[:, 0]
    loss = None
    if start_positions is not None and end_positions is not None:
      loss = (nn.functional.cross_entropy(start_logits, start_positions)
              + nn.functional.cross_entropy(end_logits[:, 0], end_positions)) / 2
    return ElectraSquadOutput(loss=loss, start_logits=start_logits, end_logits=end_logits[:, 0],
                              start_top=starts, end_logits_top=end_logits, null_logit=null,
                              hidden_states=getattr(out, 'hidden_states', None),
                              attentions=getattr(out, 'attentions', None))


class ElectraSquadForQuestionAnswering(_SquadHead, ElectraPreTrainedModel):
  """ELECTRA's discriminator with its SQuAD head (_SquadHead)."""
  def __init__(self, config):
    super().__init__(config)
    self.electra = ElectraModel(config)
    self._build_head(config)
    self.post_init()

  def _encode(self, **inputs):
    return self.electra(**inputs)


try:  # (transformers from 4.48 on)
  from transformers import ModernBertModel, ModernBertPreTrainedModel
except ImportError:
  ModernBertPreTrainedModel = None

if ModernBertPreTrainedModel is not None:
  class ModernBertSquadForQuestionAnswering(_SquadHead, ModernBertPreTrainedModel):
    """ModernBERT with ELECTRA's SQuAD head (_SquadHead), as electra_jax fine-tunes the modern
    backbone: the encoder takes no token types; the head reads them (the context is segment 1)."""
    def __init__(self, config):
      super().__init__(config)
      self.model = ModernBertModel(config)
      self._build_head(config)
      self.post_init()

    def _encode(self, token_type_ids=None, **inputs):
      return self.model(**inputs)
'''

# The classes, by the Auto class each is loaded with.
CLASSES = {'AutoModelForSequenceClassification': 'ElectraMeanPooledForSequenceClassification',
           'AutoModelForMultipleChoice': 'ElectraMeanPooledForMultipleChoice',
           'AutoModelForQuestionAnswering': 'ElectraSquadForQuestionAnswering'}
MODERN_CLASSES = {'AutoModelForQuestionAnswering': 'ModernBertSquadForQuestionAnswering'}


def shipped(auto: str, modern: bool = False) -> dict:
  """The config fields of an export whose class the folder ships (`auto`: the Auto class it is
  loaded with; `modern`: the modern backbone's class)."""
  name = (MODERN_CLASSES if modern else CLASSES)[auto]
  return {'architectures': [name], 'auto_map': {auto: f'{MODULE}.{name}'}}


def mean_pooled(auto: str) -> dict:
  """The config fields of an export whose head reads the mean of the tokens."""
  return {**shipped(auto), 'pooling': 'mean'}


def write(folder: str):
  """The classes' module, beside the export's config.json."""
  fs.write_atomic(fs.join(folder, f'{MODULE}.py'), SOURCE)
