"""Fine-tuning: the pre-training `train_step` and mesh with a task head, K seeds, a results table.

    pre-training workdir -> discriminator parameters, vocabulary, model config  (pretrained.py)
    task -> examples -> encoded arrays         (inputs/tasks.py, the task's kind: kinds/registry.py)
    -> shuffled global batches (seed, epoch)                                   (batches.py)
    -> step_lib.train_step (the pre-training step: loss, clip, layer-wise AdamW, NaN guard)
    -> dev predictions -> scores per seed -> median -> results.md / .json       (results.py)
    (--config.search: that for each of a few recipes, the best dev median kept: apps/search.py)

Nothing here depends on the kind of task: its module (classification.py, regression.py, tagging.py,
qa.py, multiple_choice.py) encodes, builds the head and its loss, scores and writes predictions.
"""

import dataclasses
import functools
import json
import time

import jax

from electra_jax import UserError, user_errors
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.finetune import baseline as baseline_lib
from electra_jax.finetune import batches
from electra_jax.finetune import config as config_lib
from electra_jax.finetune import pretrained as pretrained_lib
from electra_jax.finetune import probe as probe_lib
from electra_jax.finetune import results as results_lib
from electra_jax.finetune.inputs import packing
from electra_jax.finetune.inputs import tasks as tasks_lib
from electra_jax.finetune.kinds import heads
from electra_jax.finetune.kinds import registry
from electra_jax.hardware import compile_cache
from electra_jax.storage import fs
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import logs as logs_lib
from electra_jax.train import loop as loop_lib
from electra_jax.train import model_view
from electra_jax.train import optim
from electra_jax.train import partitioning
from electra_jax.train import step as step_lib
from electra_jax.train import workdir as workdir_lib


def make_setup(cfg, resolved: config_lib.Resolved, pretrained: pretrained_lib.Pretrained, task,
               kind, seed: int) -> step_lib.Setup:
  """The task's model, loss and optimizer (layer-wise decay, the word table's factor) as the
  train step takes them, from the run's `resolved` (config_lib.resolve: derived once per run)."""
  rate = resolved.dropout_rate
  model_cfg = dataclasses.replace(pretrained.model_cfg, dropout_rate=rate,
                                  attention_dropout_rate=rate)
  model = kind.model(model_cfg, task, cfg, rate)
  init = lambda key, given=None: heads.init_params(model, key, pretrained=given,
                                                   reinit=resolved.reinit, shape=kind.init_shape)
  o = cfg.optimizer
  shapes = jax.eval_shape(init, jax.random.key(0))
  factors = optim.layerwise_multipliers(shapes, model_cfg.num_layers, resolved.layerwise_decay,
                                        o.layerwise_decay_rule)
  factors = optim.with_word_table_factor(factors, o.word_table_lr)
  tx, schedule = optim.make_optimizer(resolved.optimizer, lr_factors=factors)
  return step_lib.Setup(model_cfg=model_cfg, model=model, tx=tx, schedule=schedule,
                        loss_fn=functools.partial(kind.loss, model=model, task=task), seed=seed,
                        init_params=init,
                        check_update=not optim.bounds_updates(resolved.optimizer),
                        param_shapes=shapes,
                        init_args=() if pretrained.params is None else (pretrained.params,))


def finetune_one(cfg, resolved, pretrained, task, kind, data: dict, splits: dict, seed: int,
                 workdir: str, log, compared: dict | None = None) -> dict:
  """One fine-tuning on the training loop: resumed from its latest checkpoint in `workdir` (a
  re-run after a kill continues it; a finished one is only scored again), saved every
  `save_every` steps and when stopped, scored on the dev split(s) every `eval_every` steps with
  the best checkpoint by the task's first metric kept; returns the final dev scores. `compared`:
  the workdir's config.json, already compared with the run's config (check_same_finetuning)."""
  mesh = partitioning.make_mesh()
  cached = compile_cache.counts()
  train = data['train']
  total = resolved.total_steps
  setup = make_setup(cfg, resolved, pretrained, task, kind, seed)
  init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
  fs.makedirs(workdir, exist_ok=True)
  ckpt = checkpoint_lib.Checkpointer(fs.join(workdir, 'checkpoints'), keep=1,
                                     best_metric=task.metrics[0] if cfg.eval_every else '')
  with user_errors(ValueError):
    start, state, saved = ckpt.restore_latest(init_fn(), log, afresh=True)
  trained_on = tasks_lib.fingerprint(splits['train'])
  if start:
    _check_belongs(cfg.as_json, compared, saved, seed, trained_on,
                   f'{ckpt.directory}/{start}')
    log(f'seed {seed}: resumed from {ckpt.directory}/{start}')
  elif cfg.head_init == 'probe':  # the head a linear model fits on the frozen encoder
    state = probe_lib.start(cfg, task, kind, setup.model, state, data, splits, mesh, seed, log)
  scores_at = {}
  shown = tuple(m if i == 0 else f'{s}_{m}' for i, s in enumerate(
      s for s in task.dev_splits if s in data) for m in task.metrics)

  def evaluate_now(step, state):  # the first dev split's scores by their names (the curves'
    scores_at[step] = batches.split_scores(cfg, task, kind, setup.model, state.params, data,
                                           splits, mesh)
    return {(m if i == 0 else f'{s}_{m}'): v  # panels pair them with train's), the others named
            for i, (s, values) in enumerate(scores_at[step].items()) for m, v in values.items()}

  shapes, pack = (_train_shapes(cfg, train, seed, total, mesh, log if not start else None)
                  if kind.packs else (None, cfg.packing))
  rows = shapes.mean_rows if shapes is not None else cfg.batch_size
  loop_plan = loop_lib.Plan.of(cfg, total_steps=total, keep_best=bool(cfg.eval_every),
                               log_every=min(cfg.log_every, max(1, total // 10)),  # ten a seed
                               nonfinite='skip', tokens_per_step=round(rows * cfg.max_seq_length),
                               prefix=f'seed {seed} | ',
                               fields=('loss', 'accuracy', 'learning_rate'),
                               eval_fields=shown)
  meta = lambda step: {'step': step, 'task': task.name, 'kind': task.kind,
                       'labels': list(task.labels), 'label_scale': task.label_scale,
                       'label_offset': task.label_offset, 'tag_scheme': task.tag_scheme,
                       'seed': seed, 'total_steps': total,  # (finished: at total_steps)
                       'train_fingerprint': trained_on,
                       'config': cfg.as_json}  # what the run is: checked on resume
  stream = batches.train_batches(train, cfg.batch_size, seed, start,
                                 partitioning.batch_sharding(mesh), shapes, pack)
  with user_errors(checkpoint_lib.DiskFull):
    result = loop_lib.run(loop_plan, state, train_fn, stream, start, evaluate=evaluate_now,
                          ckpt=ckpt, meta=meta, log=log,
                          logs=logs_lib.Logs(workdir, tags={'seed': seed},
                                             panels=results_lib.panels(task)))
    best = ckpt.best_step()
    ckpt.close()
  if note := compile_cache.note(cached):
    log(f'seed {seed}: its programs compiled{note}')
  if skipped := int(jax.device_get(result.state.nonfinite_steps)):
    log(f'  warning: seed {seed}: {skipped} step(s) had a non-finite loss and were skipped; '
        'lower optimizer.learning_rate')
  out = {'seed': seed, 'steps': total, 'epochs': resolved.epochs, **scores_at[total],
         **batches.split_scores(cfg, task, kind, setup.model, result.state.params, data, splits,
                                mesh,
                                task.test_splits)}
  return {**out, 'best_step': best} if cfg.eval_every and best is not None else out


def total_steps(cfg, task, train) -> int:
  """The optimizer steps of one fine-tuning: its epochs over the train data in whole batches."""
  return max(1, int(round((cfg.epochs or task.epochs) * (len(train) // cfg.batch_size))))


def _check_belongs(as_json: dict, compared, saved: dict, seed: int, trained_on: str, where: str):
  """Refuses a checkpoint of another fine-tuning (copied in: another seed, config or train data),
  naming what differs. The config is compared once: a checkpoint saved with the config.json
  already compared with the run's (`compared`) is not compared again. Checkpoints of earlier
  versions carry less."""
  diffs = [f'seed {saved["seed"]} -> {seed}'] if saved.get('seed', seed) != seed else []
  if 'config' in saved and saved['config'] != compared:
    diffs += config_lib.same_run_diffs(saved['config'], as_json)
  if saved.get('train_fingerprint', trained_on) != trained_on:
    diffs.append('other train examples')
  diffs = list(dict.fromkeys(diffs))  # (the first seed's is the config's seed)
  if diffs:
    raise UserError(f'the checkpoint {where} belongs to another fine-tuning ({"; ".join(diffs)}); '
                    'move it out of the workdir, or resume it with its own config and data')


def _train_shapes(cfg, train, seed: int, total: int, mesh, log) -> tuple:
  """(the shapes of the run's train batches, whether they are packed): packed where it pays
  (packing.pays), else a row each; `log` (a new run's) is told which and how full the rows are."""
  pack = cfg.packing
  shapes = batches.train_shapes(train, cfg.batch_size, seed, total, pack, mesh, cfg.packing_shapes)
  padded = cfg.batch_size * packing.choices(train)
  say = log or (lambda line: None)
  if pack and not packing.pays(shapes.mean_rows, padded):  # rows nearly full: a row each
    say(f'seed {seed}: packing would take {shapes.mean_rows:.1f} of {padded} rows a step, and pays '
        f'at {int(packing.PAYS * padded)} or fewer: a row each')
    shapes, pack = batches.train_shapes(train, cfg.batch_size, seed, total, False, mesh), False
  say(f'seed {seed}: {packing_note(train, shapes, cfg, pack)}')
  return shapes, pack


def packing_note(train, shapes, cfg, pack: bool) -> str:
  """How full a run's rows are: the line its log gives."""
  layout = shapes.largest
  real = packing.lengths(train).sum() / len(train) * cfg.batch_size  # a step's tokens, on average
  padded = layout.examples * layout.choices  # rows without packing
  share = lambda rows: f'{100 * real / (rows * layout.length):.0f}%'
  if not pack:
    return (f'{padded} rows of {layout.length} tokens a step, {share(padded)} of their tokens real'
            + ('' if cfg.packing else ' (--config.packing=True packs the examples)'))
  counts = ', '.join(str(l.rows) for l in shapes.layouts)
  return (f'{layout.examples} examples a step packed in {shapes.mean_rows:.1f} rows of '
          f'{layout.length} tokens on average ({counts} rows: {len(shapes.layouts)} '
          f'shape{"s" if len(shapes.layouts) > 1 else ""}; room for {layout.slots} sequences a '
          'row), '
          f'{share(shapes.mean_rows)} of their tokens real; a row each, {padded} rows would be '
          f'{share(padded)}')


def restore_seed(cfg, resolved, pretrained, task, kind, seed_dir: str, seed: int):
  """(setup, state) of the fine-tuning saved in `seed_dir` (`resolved`: use_resolved's)."""
  ckpt = checkpoint_lib.Checkpointer(fs.join(seed_dir, 'checkpoints'))
  step = ckpt.latest_step()
  if step is None:
    ckpt.close()
    raise UserError(f'{seed_dir} holds no fine-tuned checkpoint; run --mode=train first')
  setup = make_setup(cfg, resolved, pretrained, task, kind, seed)
  init_fn, _, _ = step_lib.compile_steps(setup, partitioning.make_mesh())
  with user_errors(ValueError):
    try:
      _, state, meta = ckpt.restore_latest(init_fn())
    finally:
      ckpt.close()
  if meta.get('labels', list(task.labels)) != list(task.labels):
    raise UserError(f'{seed_dir} was fine-tuned with the labels {meta["labels"]}, not '
                    f'{list(task.labels)}; use the data it was trained on')
  return setup, state


def use_resolved(cfg, pretrained, task) -> config_lib.Resolved:
  """The resolved config of a run that uses saved fine-tunings (eval, predict): their model and
  optimizer as they were trained, whose state a restore reads (the schedule is unused: one step)."""
  return config_lib.resolve(cfg, task, pretrained.model_cfg, 1,
                            config_lib.check_for_model(cfg, pretrained.model_cfg))


MODES = ('train', 'eval', 'predict')
# What a fine-tuning writes in each seed's folder.
SEED_FOLDERS, SEED_FILES = ('checkpoints', 'tensorboard', 'predictions'), ('metrics.jsonl',
                                                                           'curves.png')


def check_mode(mode: str):
  if mode not in MODES:
    raise UserError(f'--mode is {mode!r}; use one of {", ".join(MODES)}')


def finetune(config, workdir: str, log=print, mode: str = 'train') -> dict:
  """Fine-tunes per `config` in `workdir`, `num_seeds` times; returns the results (also written).
  `config`: a config file's (an ml_collections config, the fields it lacks at their defaults) or
  a typed one: typed here, once (config_lib.parse), and everything below takes the typed config.

  mode 'eval' scores the fine-tunings saved in `workdir` on the dev split(s) again; 'predict'
  writes their predictions for the test split(s) under <workdir>/seed_<k>/predictions/.
  """
  check_mode(mode)
  mesh = partitioning.make_mesh()
  cfg = config_lib.parse(config, mesh)
  if cfg.search:
    raise UserError(f'search={cfg.search!r} names recipes to choose among, each a fine-tuning: '
                    'run it with launch/finetune.py (electra_jax/apps/search.py); this function '
                    'fine-tunes one recipe, with search left empty')
  saved = []
  if mode != 'train':
    saved = sorted((int(n.split('_')[1]), fs.join(workdir, n)) for n in (
        fs.listdir(workdir) if fs.isdir(workdir) else ()) if n.startswith('seed_'))
    if not saved:
      raise UserError(f'{workdir} holds no fine-tuning (no seed_<k> folder); run --mode=train '
                      'first, with this --workdir')
  workdir_lib.check_place(workdir)  # before the inputs are read
  workdir_lib.check_kind(workdir, 'fine-tuning')
  workdir_lib.check_free(workdir)
  with user_errors(ValueError):
    reads_head = registry.get(cfg.task.kind).reads_head
  pretrained = pretrained_lib.for_finetuning(cfg, mode, log, head=reads_head)
  with user_errors(ValueError, FileNotFoundError):
    task, splits = registry.load(cfg.task, pretrained.config, log)
  kind = registry.get(task.kind)  # (once: every step of the run is handed it)
  # the workdir is claimed once the inputs have been read (and, to train, encoded and checked)
  if mode != 'train':
    with workdir_lib.claim(workdir, 'fine-tuning', f'--mode={mode}'):
      return _use_saved(cfg, mode, pretrained, task, kind, splits, saved, workdir, mesh, log)
  reinit = config_lib.check_for_model(cfg, pretrained.model_cfg)
  draws = _draws(cfg, task, kind, splits, log)
  data = _encoded(cfg, pretrained, task, kind, draws[cfg.seed] if draws else splits, log)
  resolved = config_lib.resolve(cfg, task, pretrained.model_cfg,
                                total_steps(cfg, task, data['train']), reinit)  # derived once
  with workdir_lib.claim(workdir, 'fine-tuning'):
    return _finetune(cfg, resolved, workdir, log, pretrained, task, kind, splits, data, draws)


def _draws(cfg, task, kind, splits: dict, log) -> dict | None:
  """{seed: its splits} of a few-shot fine-tuning (task.shots): each seed's own draw of K train
  examples per class; None for one on the whole train split."""
  k = cfg.task.shots
  if not k:
    return None
  if not kind.text_classes:
    raise UserError(f'task.shots={k} draws {k} train examples of each class, and task '
                    f'{task.name} is {task.kind}; give a classification task, or leave '
                    'task.shots at 0')
  train = splits.get('train') or []
  counts = {l: sum(str(e.label) == l for e in train) for l in task.labels}
  if not all(counts.values()):
    raise UserError(f'task.shots={k}: the train split has no example of class '
                    f'{next(l for l, n in counts.items() if not n)!r}; every class needs one')
  short = {l: n for l, n in counts.items() if n < k}
  log(f'few-shot: each seed trains on its own draw of {k} examples per class '
      f'({sum(min(n, k) for n in counts.values()):,} of {len(train):,} train examples)'
      + (' (all of ' + ', '.join(f'{l!r}: {n}' for l, n in short.items()) + ')' if short else ''))
  return {seed: {**splits, 'train': tasks_lib.few_shot(train, task.labels, k, seed)}
          for seed in range(cfg.seed, cfg.seed + cfg.num_seeds)}


def _encoded(cfg, pretrained, task, kind, splits: dict, log) -> dict:
  """Each split of a task to train encoded as its kind's model takes it, checked first."""
  if 'train' not in splits:
    raise UserError('the task has no train split; set --config.task.train')
  kind.check(cfg, splits)
  for line in tasks_lib.overlap_notes(splits):
    log(line)
  tokenizer = tokenizer_lib.load_tokenizer(pretrained.vocab, lower_case=pretrained.lower_case)
  data = {}
  for split, examples in splits.items():
    data[split] = kind.encode(task, examples, tokenizer, cfg.max_seq_length, split == 'train', cfg)
    for line in kind.notes(split, data[split], examples, cfg.max_seq_length):
      log(line)
  if len(data['train']) < cfg.batch_size:
    raise UserError(f'the train data has {len(data["train"])} examples, fewer than one batch of '
                    f'{cfg.batch_size}; add data or lower --config.batch_size')
  return data


def _finetune(cfg, resolved, workdir: str, log, pretrained, task, kind, splits: dict,
              data: dict, draws: dict | None) -> dict:
  compared = config_lib.check_same_finetuning(cfg.as_json, workdir)
  workdir_lib.check_entries(workdir, files=('config.json', 'results.md', 'results.json',
                                            pretrained_lib.SAVED))
  for k in range(cfg.num_seeds):
    workdir_lib.check_entries(fs.join(workdir, f'seed_{cfg.seed + k}'), folders=SEED_FOLDERS,
                              files=SEED_FILES)
  scored = ', '.join(s for s in results_lib.scored(task) if s in data) or 'no split'
  log(f'{task.name}: {task.kind}, {kind.shape_of_outputs(task)}, scored by '
      f'{", ".join(task.metrics)} on {scored} | ' + ', '.join(f'{s} {len(d):,}' for s, d in
                                                              data.items()) +
      f' examples | from {pretrained.checkpoint}')
  log(config_lib.recipe(cfg, resolved, bool(pretrained.params)) + kind.describe(cfg))
  for warning in optim.schedule_warnings(
      resolved.optimizer, resolved.total_steps,
      f'optimizer.warmup_fraction={cfg.optimizer.warmup_fraction:g}',
      'warm up for a smaller share of the steps (the paper: 0.1)'):
    log(f'warning: {warning}')
  # every check passed: what the run is, and the model it starts from (predict and export read
  # them, and no longer need --init)
  fs.write_atomic(fs.join(workdir, 'config.json'), json.dumps(cfg.as_json, indent=2))
  pretrained_lib.save(pretrained, workdir)
  device = jax.devices()[0]  # one attention path for every host, checked at this length
  model_cfg = model_view.model_for_devices(dataclasses.asdict(pretrained.model_cfg),
                                           device.platform, device.device_kind, cfg.max_seq_length,
                                           log=log)
  pretrained = dataclasses.replace(pretrained, model_cfg=model_cfg)
  results = []
  tokenizer = tokenizer_lib.load_tokenizer(pretrained.vocab, lower_case=pretrained.lower_case)
  for k in range(cfg.num_seeds):
    seed = cfg.seed + k
    t = time.time()
    seed_splits, seed_data = splits, data
    if draws:  # (the first seed's draw is encoded in `data`)
      seed_splits = draws[seed]
      seed_data = data if k == 0 else {**data, 'train': kind.encode(
          task, seed_splits['train'], tokenizer, cfg.max_seq_length, True, cfg)}
    result = finetune_one(cfg, resolved, pretrained, task, kind, seed_data, seed_splits, seed,
                          fs.join(workdir, f'seed_{seed}'), log, compared)
    result['seconds'] = time.time() - t
    results.append(result)
    log(f'seed {seed}: ' + (' | '.join(f'{s} {m} {100 * v:.2f}' for s in results_lib.scored(task)
                                       if s in result for m, v in result[s].items())
                            or f'{result["steps"]} steps, not scored (no dev split)'))
  base = (baseline_lib.reported(task, kind, list(draws.values()) if draws else [splits], log)
          if cfg.baseline else None)
  return results_lib.write(task, results, pretrained.checkpoint, workdir, log, base)


def _use_saved(cfg, mode, pretrained, task, kind, splits, saved, workdir, mesh, log) -> dict:
  tokenizer = tokenizer_lib.load_tokenizer(pretrained.vocab, lower_case=pretrained.lower_case)
  wanted = [s for s in (results_lib.scored(task) if mode == 'eval' else splits) if s in splits and (
      mode == 'eval' or s.startswith('test') or (kind.predicts_dev and s == 'dev'))]
  if not wanted:
    split = 'dev' if mode == 'eval' else 'test'
    raise UserError(f'the task has no {split} split to {mode}; name its file with '
                    f'--config.task.{split}=FILE (plus --config and the flags of the fine-tuning)')
  data = {s: kind.encode(task, splits[s], tokenizer, cfg.max_seq_length, False, cfg)
          for s in wanted}
  results, written, resolved = [], [], use_resolved(cfg, pretrained, task)
  for seed, seed_dir in saved:
    setup, state = restore_seed(cfg, resolved, pretrained, task, kind, seed_dir, seed)
    if mode == 'eval':
      results.append({'seed': seed, **batches.split_scores(
          cfg, task, kind, setup.model, state.params, data, splits, mesh,
          results_lib.scored(task))})
      continue
    for split in wanted:
      logits = batches.predict(setup.model, state.params, data[split], cfg.eval_batch_size, mesh,
                               pack=batches.task_prediction_packing(cfg, kind, data[split]))
      written.append(kind.write_predictions(task, split, logits, splits[split],
                                            fs.join(seed_dir, 'predictions'), data[split], cfg))
      log(f'seed {seed}: {split} predictions ({len(splits[split]):,}) -> {written[-1]}')
  if mode == 'eval':
    return results_lib.write(task, results, f'the fine-tunings in {workdir}', workdir, log)
  return {'task': task.name, 'predictions': written}
