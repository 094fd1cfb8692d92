"""A fine-tuning's model on new data: launch/predict.py.

    <workdir>/config.json (the task's columns, lengths, packing) + --init's vocabulary
    + a seed's checkpoint (its task: kind, labels, scale, tag scheme)     the median seed, or asked
    -> the new file read as training reads its files (kind.read_new)      CSV, TSV, JSON lines,
                                                                          CoNLL, SQuAD JSON
    -> encoded and packed as the dev split is -> the head's outputs (batches.predict)
    -> per example its prediction and confidence (kind.predicted)
    -> OUTPUT, in the input's order, written whole (never over an earlier one unless asked)

Where the file has labels, the predictions are also scored as the dev split is.
"""

import dataclasses
import os
import statistics
import time

from electra_jax import UserError, user_errors
from electra_jax.apps import prediction_files
from electra_jax.apps.prediction_files import check_output, output_path
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.finetune import batches
from electra_jax.finetune import config as config_lib
from electra_jax.finetune import pretrained as pretrained_lib
from electra_jax.finetune import run as run_lib
from electra_jax.finetune.inputs import tasks as tasks_lib
from electra_jax.finetune.kinds import registry
from electra_jax.storage import fs
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import partitioning
from electra_jax.train import workdir as workdir_lib



def seeds_of(workdir: str) -> list[int]:
  """The seeds whose fine-tuning `workdir` holds (a seed_<k> folder with a checkpoint)."""
  return sorted(int(n.split('_')[1]) for n in fs.listdir(workdir)
                if n.startswith('seed_') and n.split('_')[1].isdigit()
                and fs.isdir(fs.join(workdir, n, 'checkpoints')))


def unfinished(workdir: str, cfg) -> str:
  """'' where every seed of the fine-tuning in `workdir` (its config `cfg`: seed, num_seeds)
  reached its last step; else each seed's state ('seed 0 at step 400 of 2,400, seed 1 never
  started'). Checkpoints saved before they carried `total_steps` count as finished where
  results.json (written once every seed has) lists their seed."""
  listed = set()
  path = fs.join(workdir, 'results.json')
  if fs.isfile(path):
    listed = {row.get('seed') for row in fs.read_json(
        path, 'run the fine-tuning again to rewrite it', want=dict).get('seeds', [])}
  states, behind = [], False
  for seed in range(cfg.seed, cfg.seed + cfg.num_seeds):
    folder = fs.join(workdir, f'seed_{seed}', 'checkpoints')
    ckpt = checkpoint_lib.Checkpointer(folder) if fs.isdir(folder) else None
    try:
      step = ckpt.latest_step() if ckpt else None
      total = ckpt.meta(step).get('total_steps') if ckpt and step is not None else None
    finally:
      if ckpt:
        ckpt.close()
    if step is None:
      states.append(f'seed {seed} never started')
    elif (step < total) if total else seed not in listed:
      states.append(f'seed {seed} at step {step:,}' + (f' of {total:,}' if total else ''))
    else:
      states.append(f'seed {seed} finished')
      continue
    behind = True
  return ', '.join(states) if behind else ''


def check_finished(workdir: str, cfg, allow: bool, what: str):
  """Refuses (UserError) a fine-tuning that has not finished (`unfinished`) unless `allow`."""
  state = '' if allow else unfinished(workdir, cfg)
  if state:
    raise UserError(f'{workdir} holds an unfinished fine-tuning ({state}); finish it (its '
                    f'launch/finetune.py command again, with --workdir={workdir}, resumes it), or '
                    f'add --allow_unfinished to {what} with what it holds')


def choose_seeds(workdir: str, seeds: list[int], which: str) -> tuple[list[int], str]:
  """(the seeds to predict with, the sentence saying which): 'median' (the seed whose first dev
  score is the median of the seeds'; of an even number, the lower of the middle two), 'best',
  'all' or a seed's number."""
  if which == 'all':
    return seeds, f'each of the {len(seeds)} seeds ({", ".join(map(str, seeds))}), a file each'
  if which.isdigit():
    if int(which) not in seeds:
      raise UserError(f'--seed={which} is not among the fine-tunings in {workdir} ({seeds}); give '
                      'one of those, median, best or all')
    return [int(which)], f'seed {which}'
  if which not in ('median', 'best'):
    raise UserError(f'--seed={which!r}; give median, best, all or a seed\'s number')
  scores = {}
  path = fs.join(workdir, 'results.json')
  if fs.isfile(path):
    for row in fs.read_json(path, 'run the fine-tuning again to rewrite it', want=dict).get(
        'seeds', []):
      split = next(((s, v) for s, v in row.items() if isinstance(v, dict) and v), None)
      if split and row.get('seed') in seeds:
        metric, value = next(iter(split[1].items()))
        scores[row['seed']] = (value, f'{split[0]} {metric} {100 * value:.2f}')
  if not scores:
    return seeds[:1], f'seed {seeds[0]} (no dev scores to rank the {len(seeds)} seed(s) by)'
  ranked = sorted(scores, key=lambda s: scores[s][0])
  seed = (max(scores, key=lambda s: scores[s][0]) if which == 'best'  # (the first of a tie)
          else ranked[(len(ranked) - 1) // 2])
  median = statistics.median(v for v, _ in scores.values())
  return [seed], (f'seed {seed} ({scores[seed][1]}; the {which} of {len(ranked)} seed(s), whose '
                  f'median is {100 * median:.2f})')


def saved_task(cfg, meta: dict) -> tasks_lib.Task:
  """The task a seed was fine-tuned on, from its checkpoint's meta (no train file is read)."""
  named = registry.named(cfg.task)
  kind = meta.get('kind') or (named.kind if named else None)
  if kind is None:
    raise UserError('the fine-tuning was saved without its task kind; fine-tune it again to '
                    'predict with it')
  labels = tuple(str(x) for x in meta.get('labels', named.labels if named else ()))
  metrics = named.metrics if named else registry.get(kind).metrics(labels)
  return tasks_lib.Task(meta.get('task', cfg.task.name), kind, labels, metrics, ('dev',),
                        label_scale=meta.get('label_scale', 1.0),
                        label_offset=meta.get('label_offset', 0.0),
                        tag_scheme=meta.get('tag_scheme') or '')


def seed_path(path: str, seed: int) -> str:
  stem, ext = os.path.splitext(path)
  return f'{stem}.seed_{seed}{ext}'


def predict(workdir: str, input_path: str, output: str | None = None, seed: str = 'median',
            overwrite: bool = False, log=print, allow_unfinished: bool = False) -> dict:
  """Writes the predictions of `workdir`'s fine-tuning (the `seed` chosen: choose_seeds) for the
  examples of `input_path`; returns {'outputs': files written, 'seeds', 'scores' (where labelled),
  'examples', 'seconds'}. A fine-tuning that has not finished is refused unless
  `allow_unfinished`."""
  cfg = config_lib.saved_config(workdir, 'predict', then='predict with that one')
  seeds = seeds_of(workdir)
  if not seeds:
    raise UserError(f'{workdir} holds no fine-tuning (no seed_<k> folder with a checkpoint); run '
                    'launch/finetune.py with this --workdir first')
  workdir_lib.check_free(workdir)
  check_finished(workdir, cfg, allow_unfinished, 'predict')
  chosen, which = choose_seeds(workdir, seeds, seed)
  meta = _meta(workdir, chosen[0])
  task = saved_task(cfg, meta)
  kind = registry.get(task.kind)
  out = output_path(workdir, input_path, output, kind.prediction_format)
  outs = [out] if len(chosen) == 1 else [seed_path(out, s) for s in chosen]
  for path in outs:
    check_output(path, input_path, overwrite)
  columns = file_columns(cfg.task)
  with user_errors(ValueError, FileNotFoundError):
    if kind.prediction_format == 'table':
      prediction_files.check_columns(input_path, columns)
    examples = kind.read_new(columns, input_path, task, log)
    pretrained = (pretrained_lib.saved(workdir) or  # (workdirs written before it was kept:)
                  pretrained_lib.for_finetuning(cfg, 'predict', log))
  labelled = (any if kind.prediction_format == 'json' else all)(map(_labelled, examples))
  log(f'{input_path}: {len(examples):,} example{"s" * (len(examples) != 1)}'
      f'{" (labelled: scored too)" if labelled else ""}'
      f' | {task.name}: {task.kind}, predicted with {which}')
  with user_errors(ValueError, FileNotFoundError):  # (a vocabulary damaged or gone)
    tokenizer = tokenizer_lib.load_tokenizer(pretrained.vocab, lower_case=pretrained.lower_case)
  t = time.time()
  data = kind.encode(task, examples, tokenizer, cfg.max_seq_length, False, cfg)
  predicting = time.time() - t  # (tokenizing counts: HF's pipeline does it too)
  for line in kind.notes('input', data, examples, cfg.max_seq_length):
    log(line)
  mesh = partitioning.make_mesh()
  written, scores, resolved = [], {}, run_lib.use_resolved(cfg, pretrained, task)
  for s, path in zip(chosen, outs):
    setup, state = run_lib.restore_seed(cfg, resolved, pretrained, task, kind,
                                        fs.join(workdir, f'seed_{s}'), s)
    started = time.time()  # (the programs compile at the first call: counted here)
    outputs = batches.predict(setup.model, state.params, data, cfg.eval_batch_size, mesh,
                              pack=batches.task_prediction_packing(cfg, kind, data))
    predicting += time.time() - started
    rows = kind.predicted(task, outputs, data, examples, cfg)
    if labelled:
      scores[s] = kind.scores(task, outputs, data, examples, cfg)
    text = _text(kind.prediction_format, path, rows, examples, columns, input_path)
    try:
      fs.write_atomic(path, text, replace=overwrite)
    except FileExistsError:
      raise UserError(f'{path} was made by another command while these predictions were '
                      'computed, and is kept; give another --output, or --overwrite to replace '
                      'it') from None
    written.append(path)
    shown = ' | '.join(f'{m} {100 * v:.2f}' for m, v in scores.get(s, {}).items())
    log(f'seed {s}: {len(rows):,} predictions -> {path}' + (f' | {shown}' if shown else ''))
  seconds = time.time() - t
  n = len(examples) * len(chosen)
  log(f'{n:,} prediction{"s" * (n != 1)}: {n / max(predicting, 1e-9):,.0f}/s tokenizing and '
      f'predicting ({predicting:.2f} s, compiling included), {seconds:.1f} s with reading the '
      'checkpoint and writing')
  return {'outputs': written, 'seeds': chosen, 'scores': scores, 'examples': len(examples),
          'seconds': seconds, 'predicting_s': predicting}


def _meta(workdir: str, seed: int) -> dict:
  ckpt = checkpoint_lib.Checkpointer(fs.join(workdir, f'seed_{seed}', 'checkpoints'))
  try:
    step = ckpt.latest_step()
    if step is None:
      raise UserError(f'{workdir}/seed_{seed} holds no fine-tuned checkpoint; run '
                      'launch/finetune.py first')
    try:
      return ckpt.meta(step)
    except Exception as e:
      raise UserError(f'the checkpoint {ckpt.directory}/{step} cannot be read '
                      f'({checkpoint_lib.reason(e)}); run the fine-tuning again to rewrite it'
                      ) from None
  finally:
    ckpt.close()


def file_columns(task_cfg):
  """The task config whose columns a new file is read by: the fine-tuning's own (task.text_a,
  ...), or for a GLUE task (fine-tuned on TFDS's data or GLUE's folders) TFDS's feature names
  (sst2: sentence; mnli: premise, hypothesis) and `label`, in a file with a header row."""
  glue = tasks_lib.GLUE.get(task_cfg.name)
  if glue is None or task_cfg.train:
    return task_cfg
  return dataclasses.replace(task_cfg, text_a=glue.fields[0], label='label', header=True,
                             text_b=glue.fields[1] if len(glue.fields) > 1 else '')


def _labelled(example) -> bool:
  if hasattr(example, 'answers'):  # a SQuAD question
    return bool(example.answers)
  return example.label is not None


def _text(fmt: str, path: str, rows: list[dict], examples: list, task_cfg,
          input_path: str) -> str:
  """The predictions file: a table (.tsv / .csv / .jsonl) of index, every column of the input
  (its texts, an id, ...), the prediction and each output's probability; CoNLL lines of word, tag
  and probability; SQuAD's JSON of {id: {answer, probability}}."""
  if fmt == 'json':
    return fs.json_text({r['id']: {k: v for k, v in r.items() if k != 'id'} for r in rows},
                          indent=1, ensure_ascii=False)
  if fmt == 'conll':
    return ''.join(''.join(f'{w} {t} {"-" if p is None else f"{p:.4f}"}\n' for w, t, p in zip(
        r['words'], r['prediction'], r['probabilities'])) + '\n' for r in rows)
  return prediction_files.table_text(path, rows, input_path, task_cfg.header)


