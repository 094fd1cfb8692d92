"""Model classes that HF transformers lacks, shipped in an export's folder as `modeling_electra_jax.py`
and loaded with `trust_remote_code=True` (its `auto_map` names them for the Auto classes and
`pipeline`): ELECTRA's discriminator with a head on the MEAN of the real tokens' hidden states
(a fine-tuning with pooling='mean'), for sequence classification (and regression) and for
multiple choice. HF's own classes read [CLS] (ElectraForSequenceClassification) or average the
padding too (SequenceSummary's 'mean'), so neither computes this head.
"""

from electra_jax.storage import fs

MODULE = 'modeling_electra_jax'

SOURCE = '''"""ELECTRA with a head on the mean of the real tokens' hidden states, as electra_jax fine-tunes it
with pooling='mean': the discriminator, the mean over the tokens the attention mask keeps ([CLS]
and [SEP] included), dropout, one dense layer. Written by electra_jax's export."""

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

# The classes, by the Auto class each is loaded with.
CLASSES = {'AutoModelForSequenceClassification': 'ElectraMeanPooledForSequenceClassification',
           'AutoModelForMultipleChoice': 'ElectraMeanPooledForMultipleChoice'}


def mean_pooled(auto: str) -> dict:
  """The config fields of an export whose head reads the mean of the tokens (`auto`: the Auto
  class it is loaded with)."""
  return {'architectures': [CLASSES[auto]], 'auto_map': {auto: f'{MODULE}.{CLASSES[auto]}'},
          'pooling': 'mean'}


def write(folder: str):
  """The classes' module, beside the export's config.json."""
  fs.write_atomic(fs.join(folder, f'{MODULE}.py'), SOURCE)
