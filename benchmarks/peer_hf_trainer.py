"""The peer of `benchmarks/benchmark.py --mode=finetune --peer=hf` (and `hf-compile`): the same
fine-tuning with HF transformers' Trainer, set up as its documentation sets it up for short texts:
each batch padded to its longest row (DataCollatorWithPadding) and rows of similar length batched
together (`train_sampling_strategy='group_by_length'`, transformers 5; `group_by_length=True`
before); with `torch_compile` for `hf-compile`.

Same model sizes, examples (our tokenization, without the padding), batch size, dropout, AdamW
and learning rate; bf16 under CPU autocast where ours runs in bfloat16. Classification and
regression (ElectraForSequenceClassification) and tagging (ElectraForTokenClassification).

One Trainer trains through the whole benchmark, as ours does: its steps go on across the timed
runs, through its epochs' length-grouped batches in their order (a new Trainer for each run would
re-seed and time the same first batches every time: with length grouping, the longest of the
epoch). Run as a child process: it builds the model and answers one JSON line (with the loss of
the first batch at the random start); then, for each line `train STEPS` read from stdin, the
Trainer trains STEPS more steps and the child answers their examples per second (the Trainer
paused between runs, inside its step callback); for `predict` it predicts the dev examples
(Trainer.predict, each batch padded to its longest row) and answers the examples per second.
"""

import json
import os
import sys
import time

import numpy as np
import tokenizers
import torch
import transformers


class _Runs(transformers.TrainerCallback):
  """Pauses the Trainer after each run of steps and serves the parent's next request there:
  `predict` (answered at once) or `train STEPS` (the next run's length); the end of the input
  ends training."""

  def __init__(self, serve):
    self.serve, self.steps, self.left, self.start = serve, 0, 0, 0.0

  def begin(self, steps: int):
    """A run of `steps` steps, timed from now."""
    self.steps, self.left, self.start = steps, steps, time.perf_counter()

  def on_step_end(self, args, state, control, **kwargs):
    del args, kwargs
    self.left -= 1
    if self.left == 0:
      if not self.serve(time.perf_counter() - self.start, state.global_step):
        control.should_training_stop = True


def _examples(data, split: str, tagging: bool) -> list[dict]:
  """Each example without its padding, as the Trainer's datasets hold them."""
  ids, segments, mask = (data[f'{split}_{k}'] for k in ('input_ids', 'segment_ids', 'input_mask'))
  labels = data[f'{split}_labels']
  out = []
  for i in range(len(ids)):
    n = int(mask[i].sum())
    example = {'input_ids': ids[i, :n].tolist(), 'token_type_ids': segments[i, :n].tolist(),
               'attention_mask': [1] * n}
    # (tagging: -100 marks the tokens without a label, where ours has -1)
    example['labels'] = np.where(labels[i, :n] < 0, -100, labels[i, :n]).tolist() if tagging \
        else labels[i].item()
    out.append(example)
  return out


def _padding(pad_id: int):
  """A tokenizer whose one use is the collators' padding (the examples come tokenized)."""
  vocab = tokenizers.models.WordLevel({'[PAD]': pad_id}, unk_token='[PAD]')
  return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer(vocab),
                                              pad_token='[PAD]')


def main():
  answers, sys.stdout = sys.stdout, sys.stderr  # what the libraries print goes to stderr
  answer = lambda d: print(json.dumps(d), file=answers, flush=True)
  spec = json.loads(sys.argv[1])
  torch.set_num_threads(spec.get('threads') or os.cpu_count())
  data = np.load(spec['data'])
  cls = getattr(transformers, spec['hf_class'])  # ElectraFor{Sequence,Token}Classification
  tagging = cls is transformers.ElectraForTokenClassification
  config = transformers.ElectraConfig(**spec['hf_config'], num_labels=spec['num_labels'],
                                      attn_implementation='sdpa')
  if spec['regression']:
    config.problem_type = 'regression'
  torch.manual_seed(0)
  model = cls(config)
  train, dev = _examples(data, 'train', tagging), _examples(data, 'dev', tagging)
  collator = (transformers.DataCollatorForTokenClassification if tagging
              else transformers.DataCollatorWithPadding)(tokenizer=_padding(spec['pad_id']))
  common = dict(output_dir=spec['output_dir'], per_device_train_batch_size=spec['batch_size'],
                per_device_eval_batch_size=spec['eval_batch_size'],
                learning_rate=spec['learning_rate'], weight_decay=0.01, adam_epsilon=1e-6,
                max_grad_norm=1.0, bf16=spec['bf16'], use_cpu=True, report_to='none',
                save_strategy='no', logging_strategy='no', disable_tqdm=True, seed=0,
                dataloader_num_workers=0)
  fields = transformers.TrainingArguments.__dataclass_fields__
  grouping = ({'train_sampling_strategy': 'group_by_length'}
              if 'train_sampling_strategy' in fields else {'group_by_length': True})
  model.eval()
  with torch.no_grad():  # the loss of the first batch at the random start, as ours reports it
    first = model(**collator(train[:spec['batch_size']])).loss.item()
  model.train()
  answer({'ready': True, 'torch': torch.__version__, 'transformers': transformers.__version__,
          'grouping': grouping, 'first_loss': first})
  compiled = {'torch_compile': bool(spec.get('compile'))}
  predictor = transformers.Trainer(model=model, args=transformers.TrainingArguments(
      **common, **compiled, max_steps=1), data_collator=collator)

  def serve(seconds: float | None = None, step: int = 0) -> bool:
    """Answers the run just done (its `seconds`, the Trainer at `step`), then serves requests
    until the next run: False at the end of the input."""
    if seconds is not None:
      answer({'examples_per_s': runs.steps * spec['batch_size'] / seconds, 'step': step})
    for line in sys.stdin:
      if line.startswith('predict'):
        t = time.perf_counter()
        predictor.predict(dev)
        model.train()  # (predict left the model in eval mode)
        answer({'examples_per_s': len(dev) / (time.perf_counter() - t)})
        continue
      runs.begin(int(line.split()[1]))
      return True
    return False

  runs = _Runs(serve)
  if not serve():  # (predictions asked for before any training are served here)
    return
  args = transformers.TrainingArguments(**common, **compiled, **grouping,
                                        max_steps=spec['max_steps'])
  trainer = transformers.Trainer(model=model, args=args, train_dataset=train,
                                 data_collator=collator, callbacks=[runs])
  trainer.remove_callback(transformers.PrinterCallback)  # its summary line at the end
  runs.begin(runs.steps)  # (timed from the start of train(): the first run is the warm-up)
  trainer.train()


if __name__ == '__main__':
  main()
