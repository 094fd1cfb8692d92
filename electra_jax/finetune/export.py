"""A fine-tuning's model as an HF transformers folder (one seed): ElectraForSequenceClassification
([CLS]), ElectraForTokenClassification, ElectraForMultipleChoice, or the class of a mean-pooled or
SQuAD head shipped in the folder (convert/hf_code.py), each kind converting its head
(kinds/interface.py `to_hf`); and the check of an export on the fine-tuning's own dev file through
HF's pipeline. launch/export.py.
"""

import logging

import numpy as np

from electra_jax import UserError, user_errors
from electra_jax.convert import hf, hf_code, hf_folder
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.finetune import config as config_lib
from electra_jax.finetune import predict
from electra_jax.finetune import pretrained as pretrained_lib
from electra_jax.finetune.kinds import registry
from electra_jax.storage import fs
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import workdir as workdir_lib

# What an export's check allows between our outputs and HF's (float32 on both sides).
TOLERANCE = 1e-4


def export(config, workdir: str, out: str, step: int | None, seed: int | None,
           log, allow_unfinished: bool = False) -> hf_folder.Exported:
  """Seed `seed` (None: the best by its first dev score) of the fine-tuning in `workdir` (its
  config `config`), its checkpoint `step` (None: the latest), as an HF folder `out`. A
  fine-tuning still running is refused, and one that has not finished unless
  `allow_unfinished`."""
  workdir_lib.check_free(workdir)
  predict.check_finished(workdir, config, allow_unfinished, 'export')
  named = registry.named(config.task)
  registry.get(named.kind if named else config.task.kind).check_export(config, workdir)
  pooling = config.pooling
  seeds = sorted(int(n.split('_')[1]) for n in fs.listdir(workdir) if n.startswith('seed_'))
  if not seeds:
    raise UserError(f'{workdir} holds no fine-tuning (no seed_<k> folder); run launch/finetune.py '
                    'first')
  if seed is None:
    seed = predict.choose_seeds(workdir, seeds, 'best')[0][0]  # (by the first dev score)
  elif seed not in seeds:
    raise UserError(f'--seed {seed} is not among the fine-tunings in {workdir} ({seeds})')
  pretrained = (pretrained_lib.saved(workdir) or  # (workdirs written before it was kept:)
                pretrained_lib.load(config.init, from_scratch=True, log=log))
  with user_errors(ValueError, FileNotFoundError):  # (a vocabulary damaged or gone)
    tokenizer = tokenizer_lib.load_tokenizer(pretrained.vocab, pretrained.lower_case)
  step, state, meta = checkpoint_lib.read_kept(fs.join(workdir, f'seed_{seed}', 'checkpoints'),
                                                step, 'fine-tuning')
  if meta.get('kind') is None:
    raise UserError(f'{workdir}/seed_{seed} was saved without its task kind; fine-tune again to '
                    'export it')
  kind = registry.get(meta['kind'])
  cfg = pretrained.model_cfg
  params = state['params']
  state, fields = kind.to_hf(params, cfg, kind.exported_labels(meta),
                             config_lib.dropout_rate(config, cfg), pooling, config)
  state = kind.in_units(state, meta)
  hf_folder.write_model(out, state, {**hf.hf_config(cfg, 'discriminator'), **fields}, tokenizer,
               pretrained.lower_case, cfg, token_types=kind.reads_segments)
  if 'auto_map' in fields:  # a class HF transformers lacks: its code beside the weights
    hf_code.write(out)
  log(f'exported seed {seed} (step {step}) of {workdir}: {fields["architectures"][0]}'
      + (f', {fields["num_labels"]} output(s)' if 'num_labels' in fields else '')
      + (f' (its code in {hf_code.MODULE}.py: load it with trust_remote_code=True)'
         if 'auto_map' in fields else ''))
  return hf_folder.Exported([out], cfg, params, tokenizer, meta['kind'], pooling, config, meta)


def check_dev(done, folder, local, transformers, log) -> dict | None:
  """A fine-tuning's own dev file through HF's pipeline on the export, beside our predictions of
  it: the same label on every row, the outputs within TOLERANCE (in the export's units). None
  where the kind has no pipeline or the fine-tuning no dev file of its own."""
  kind = None if done.kind == 'pretraining' else registry.get(done.kind)
  t = done.config.task if done.config is not None else None
  if kind is None or t is None or not kind.hf_pipeline or not t.get('dev') or not fs.isfile(t.dev):
    return None
  if kind.hf_pipeline == 'token-classification':
    return _dev_through_token_pipeline(done, kind, folder, local, transformers, log)
  task = predict.saved_task(done.config, done.meta)
  examples = kind.read_new(t, t.dev, task, log=lambda line: None)
  length = done.config.max_seq_length
  data = kind.encode(task, examples, done.tokenizer, length, False, done.config)
  ours = _our_outputs(done, kind, len(task.labels) or 1, data)
  pipe = _quiet_pipeline(transformers, 'text-classification', local)
  texts = [{'text': e.text_a, 'text_pair': e.text_b} if e.text_b else e.text_a for e in examples]
  answers = pipe(texts, top_k=None, function_to_apply='none', truncation=True, max_length=length,
                 batch_size=32)
  names = [pipe.model.config.id2label[i] for i in range(pipe.model.config.num_labels)]
  theirs = kind.from_units(np.asarray([[{a['label']: a['score'] for a in row}[n] for n in names]
                                       for row in answers]), done.meta)  # (in the model's units)
  shown = lambda outputs: [r['prediction'] for r in kind.predicted(task, outputs, data, examples)]
  same = sum(a == b if task.labels else abs(a - b) <= TOLERANCE * task.label_scale
             for a, b in zip(shown(ours), shown(theirs)))
  diff = float(np.max(np.abs(ours - theirs)))
  of_range = '' if task.labels else " (of the targets' range)"
  log(f'{folder}: the dev file {t.dev} through pipeline("text-classification"): the same '
      f'{"label" if task.labels else "number"} as ours on {same} of {len(examples)} rows; max '
      f'|ours - HF| {diff:.2e}{of_range}')
  return {'rows': len(examples), 'same': int(same), 'max_abs_diff': diff,
          'agrees': same == len(examples) and diff <= TOLERANCE}


def _our_outputs(done, kind, outputs: int, data) -> np.ndarray:
  """Our model's outputs on encoded examples, 32 at a time, a row each (no packing: the layout
  HF's model takes)."""
  model = kind.check_model(done.cfg, outputs, done.pooling, done.config)
  return np.concatenate([np.asarray(model.apply(
      {'params': done.params}, data.input_ids[i:i + 32], data.segment_ids[i:i + 32],
      data.input_mask[i:i + 32])) for i in range(0, len(data.input_ids), 32)])


def _quiet_pipeline(transformers, task: str, local: str):
  """HF's pipeline `task` on the folder `local` (its line that it does not list a class shipped
  in the folder, "is not supported", silenced: the class runs through trust_remote_code)."""
  quiet = logging.getLogger('transformers.pipelines.base')
  level = quiet.level
  quiet.setLevel(logging.CRITICAL)
  try:
    return transformers.pipeline(task, model=local, tokenizer=local, trust_remote_code=True,
                                 device='cpu')
  finally:
    quiet.setLevel(level)


def _dev_through_token_pipeline(done, kind, folder, local, transformers, log) -> dict:
  """A tagging fine-tuning's dev sentences through pipeline('token-classification') on the
  export: each word's output at its first token (the name id2label gives it) against ours, and
  HF's logits on our token ids against ours. Sentences our encoding cut are left out."""
  import torch
  t = done.config.task
  task = predict.saved_task(done.config, done.meta)
  examples = kind.read_new(t, t.dev, task, log=lambda line: None)
  data = kind.encode(task, examples, done.tokenizer, done.config.max_seq_length, False, done.config)
  kept = [i for i, e in enumerate(examples) if len(data.word_positions[i]) == len(e.text_a)]
  ours = _our_outputs(done, kind, len(task.labels), data)
  pipe = _quiet_pipeline(transformers, 'token-classification', local)
  names = [pipe.model.config.id2label[i] for i in range(pipe.model.config.num_labels)]
  tagged = pipe([' '.join(examples[i].text_a) for i in kept], ignore_labels=[], batch_size=32)
  words = same = 0
  for i, tokens in zip(kept, tagged):
    theirs = {tok['index']: tok['entity'] for tok in tokens}
    for position in data.word_positions[i]:
      words += 1
      same += theirs.get(int(position)) == names[int(ours[i, position].argmax())]
  with torch.no_grad():
    logits = pipe.model(input_ids=torch.from_numpy(data.input_ids).long(),
                        attention_mask=torch.from_numpy(data.input_mask).long(),
                        token_type_ids=torch.from_numpy(data.segment_ids).long()).logits.numpy()
  real = data.input_mask > 0
  diff = float(np.max(np.abs(ours[real] - logits[real])))
  log(f'{folder}: the dev file {t.dev} through pipeline("token-classification"): the same tag as '
      f'ours on {same} of {words} words ({len(kept)} of {len(examples)} sentences, those not '
      f'cut); max |ours - HF| {diff:.2e}')
  return {'rows': words, 'same': int(same), 'max_abs_diff': diff,
          'agrees': same == words and diff <= TOLERANCE}
