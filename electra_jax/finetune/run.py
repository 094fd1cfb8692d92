"""Fine-tuning: the pre-training `train_step` and mesh with a task head, K seeds, a results table.

    pre-training workdir -> discriminator parameters, vocabulary, model config
    task -> examples -> encoded arrays -> shuffled global batches (seed, epoch)
    -> step_lib.train_step (the same compiled step: loss, clip, AdamW with layer-wise decay, NaN guard)
    -> dev predictions -> scores per seed -> median -> results.md / results.json
"""

import dataclasses
import functools
import itertools
import json
import statistics
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from electra_jax import UserError
from electra_jax import user_errors
from electra_jax import checkpoint as checkpoint_lib
from electra_jax import config as config_defaults
from electra_jax import distributed
from electra_jax import fs
from electra_jax import loop as loop_lib
from electra_jax import metrics as metrics_lib
from electra_jax import model as model_lib
from electra_jax import optim
from electra_jax import partitioning
from electra_jax import records as records_lib
from electra_jax import step as step_lib
from electra_jax import tokenizer as tokenizer_lib
from electra_jax import workdir as workdir_lib
from electra_jax.finetune import baseline as baseline_lib
from electra_jax.finetune import config as config_lib
from electra_jax.finetune import encode as encode_lib
from electra_jax.finetune import heads
from electra_jax.finetune import scores
from electra_jax.finetune import squad
from electra_jax.finetune import tagging
from electra_jax.finetune import tasks as tasks_lib


# ================================================================================================
# The pre-trained model
# ================================================================================================

@dataclasses.dataclass
class Pretrained:
  model_cfg: model_lib.ModelConfig
  params: dict | None  # {'embeddings': ..., 'discriminator': ...}; None from scratch
  vocab: str
  lower_case: bool
  checkpoint: str
  config: ml_collections.ConfigDict | None  # of the pre-training run, when known


def load_pretrained(init: str, from_scratch: bool = False, log=print) -> Pretrained:
  """The discriminator, vocabulary and model config of `init`: the workdir of a pre-training run
  (its latest checkpoint), or weights made elsewhere (an HF transformers folder, a folder of
  launch/export.py, an original TensorFlow checkpoint; see electra_jax/convert/sources.py)."""
  if not init:
    raise UserError('init is empty; set --init to a pre-training workdir (the --workdir of '
                    'launch/train.py), an HF transformers folder or an original checkpoint')
  path = fs.join(init, 'config.json')
  config = None
  if fs.isfile(path) and fs.isdir(fs.join(init, 'checkpoints')):  # a pre-training workdir's
    config = workdir_lib.read_config(init)
  elif fs.isfile(path):
    with fs.open(path) as f:
      try:
        config = json.load(f)
      except ValueError:
        config = None  # not ours: the other sources say what is wrong with it
  if not (isinstance(config, dict) and 'objective' in config):
    return _load_source(init, from_scratch, log)
  config = ml_collections.ConfigDict(config)
  with user_errors(ValueError, FileNotFoundError):
    _, meta, vocab = records_lib.workdir_vocab(init, config)
  setup = step_lib.build_setup(config, tokenizer_lib.SpecialIds(**meta['special_ids']))
  params, where = None, 'random initial weights (from_scratch)'
  if not from_scratch:
    ckpt = checkpoint_lib.Checkpointer(fs.join(init, 'checkpoints'))
    if ckpt.latest_step() is None:
      raise UserError(f'{init} has no checkpoint yet; let its pre-training save one (it saves at '
                      'the end, at save_every steps and when stopped)')
    try:
      step, state, _ = ckpt.restore_latest(jax.jit(functools.partial(
          step_lib.init_state, setup))(), log)
    except ValueError as e:
      raise UserError(str(e)) from None
    finally:
      ckpt.close()
    params = {k: state.params[k] for k in ('embeddings', 'discriminator')}
    if 'embeddings_residual' in state.params:  # GDES: the discriminator's own word table
      params['embeddings'] = {**params['embeddings'], 'word_embeddings': (
          params['embeddings']['word_embeddings'] + state.params['embeddings_residual'])}
    where = fs.join(ckpt.directory, str(step))
  return Pretrained(setup.model_cfg, params, vocab, config.data.lower_case, where, config)


def _load_source(init: str, from_scratch: bool, log) -> Pretrained:
  from electra_jax.convert import sources  # pylint: disable=import-outside-toplevel
  with user_errors(ValueError, FileNotFoundError):
    source = sources.open_source(init)
    if source.vocab is None:
      raise ValueError(f'{init} has no vocabulary file (vocab.txt or a SentencePiece .model) '
                       'beside its weights; copy the one it was trained with there')
    config = config_defaults.default_config()
    # An original checkpoint does not record its heads: width / 64, as every released model.
    config.model.update({'num_heads': max(1, source.fields['hidden_size'] // 64), **source.fields})
    config.data.vocab, config.data.lower_case = source.vocab, source.lower_case
    model_cfg = model_lib.ModelConfig.from_config(config.model)
    params, where = None, 'random initial weights (from_scratch)'
    if not from_scratch:
      shapes = jax.eval_shape(lambda k: model_lib.init_params(model_cfg, k), jax.random.key(0))
      params = source.params(model_cfg, fill=jax.tree.map(
          lambda x: np.zeros(x.shape, np.float32), shapes))
      params = {k: params[k] for k in ('embeddings', 'discriminator')}
      where = source.describe().split(' (')[0]
      for note in source.notes:
        log(note)
  # The pre-training config is unknown: the builtin task uses its default held-out split.
  return Pretrained(model_cfg, params, source.vocab, source.lower_case, where, None)


# ================================================================================================
# One fine-tuning
# ================================================================================================

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


def task_loss(params, batch, rng, deterministic=False, *, model, task):
  """Mean cross-entropy over examples (classification) or scored tokens (tagging: each word's
  first token), or mean squared error (regression)."""
  logits = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                       batch['input_mask'], deterministic, rngs={'dropout': rng})
  labels = batch['labels']
  if task.kind == 'regression':
    loss = jnp.mean(jnp.square(logits[:, 0] - labels))
    return loss, {'loss': metrics_lib.ratio(loss, 1.0)}
  weights = (labels >= 0).astype(jnp.float32)
  labels = jnp.maximum(labels, 0)
  per_item = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
  loss = jnp.sum(per_item * weights) / jnp.maximum(jnp.sum(weights), 1.0)
  correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32) * weights
  return loss, {'loss': metrics_lib.ratio(loss, 1.0),
                'accuracy': metrics_lib.ratio(correct, weights)}


def make_setup(cfg, pretrained: Pretrained, task, total_steps: int, seed: int) -> step_lib.Setup:
  rate = config_lib.dropout_rate(cfg, pretrained.model_cfg)
  model_cfg = dataclasses.replace(pretrained.model_cfg, dropout_rate=rate,
                                  attention_dropout_rate=rate)
  if task.kind == 'qa':
    model = heads.QuestionAnswering(model_cfg, answerable=task.name == 'squad2',
                                    start_top=cfg.qa.start_top)
  else:
    model = heads.Classifier(model_cfg, 1 if task.kind == 'regression' else len(task.labels),
                             rate, per_token=task.kind == 'tagging',
                             pooling=cfg.get('pooling', 'cls'))
  init = functools.partial(heads.init_params, model, pretrained=pretrained.params,
                           reinit=heads.reinit_parts(cfg.get('reinit', ''), model_cfg.num_layers))
  o = cfg.optimizer
  decay = o.layerwise_decay or config_lib.paper_layerwise_decay(model_cfg.num_layers)
  factors = optim.layerwise_multipliers(jax.eval_shape(init, jax.random.key(0)),
                                        model_cfg.num_layers, decay, o.layerwise_decay_rule)
  factors = optim.with_word_table_factor(factors, o.get('word_table_lr', 1.0))
  opt_cfg = ml_collections.ConfigDict(dict(
      learning_rate=o.learning_rate or config_lib.paper_learning_rate(model_cfg.hidden_size),
      warmup_steps=int(o.warmup_fraction * total_steps), decay_steps=total_steps, decay_power=1.0,
      schedule='original', b1=o.b1, b2=o.b2, eps=o.eps, bias_correction=o.bias_correction,
      weight_decay=o.weight_decay, grad_clip_norm=o.grad_clip_norm))
  tx, schedule = optim.make_optimizer(opt_cfg, lr_factors=factors)
  loss_fn = functools.partial(qa_loss if task.kind == 'qa' else task_loss, model=model, task=task)
  return step_lib.Setup(model_cfg=model_cfg, model=model, tx=tx, schedule=schedule,
                        loss_fn=loss_fn, seed=seed, init_params=init)


def batch_shapes(task, rows: int, length: int, sharding) -> dict:
  """The abstract train batch of `task` (what `encode` gives, per row)."""
  shape = lambda dims, dtype: jax.ShapeDtypeStruct((rows,) + dims, dtype, sharding=sharding)
  batch = {k: shape((length,), jnp.int32) for k in _INPUTS}
  if task.kind == 'qa':
    batch.update(start_positions=shape((), jnp.int32), end_positions=shape((), jnp.int32),
                 impossible=shape((), jnp.float32))
  elif task.kind == 'tagging':
    batch['labels'] = shape((length,), jnp.int32)
  else:
    batch['labels'] = shape((), jnp.float32 if task.kind == 'regression' else jnp.int32)
  return batch


def compile_for_topology(cfg, slice_, log=print) -> dict:
  """Compiles the fine-tuning of `cfg` for the TPU slice `slice_` (topology.parse) on this machine:
  the model's sizes come from --init's config (no weights are read), a named task's shape from its
  definition (your own data: its train file, for the labels). Logs each program's memory per chip
  and the estimated step; returns 0 when all compile and fit, else raises UserError."""
  from electra_jax import aot  # pylint: disable=import-outside-toplevel
  with aot.no_persistent_cache():
    return _compile_for_topology(cfg, slice_, log)


def _compile_for_topology(cfg, slice_, log) -> dict:
  from electra_jax import aot  # pylint: disable=import-outside-toplevel
  from electra_jax import flops as flops_lib  # pylint: disable=import-outside-toplevel
  mesh = partitioning.make_mesh(slice_.devices())
  _check(cfg, mesh)
  pretrained = load_pretrained(cfg.init, True, log)
  task = tasks_lib.named_task(cfg.task)
  if task is None:
    with user_errors(ValueError, FileNotFoundError):
      task, _ = tasks_lib.load(cfg.task, pretrained.config, log)
  log(f'{slice_.describe()} | compiling here for the slice: no TPU used, no data read')
  with user_errors(ValueError):
    dtype = pretrained.config.model.dtype if pretrained.config is not None else 'auto'
    model_cfg = model_lib.ModelConfig.from_config(
        {**dataclasses.asdict(pretrained.model_cfg), 'dtype': dtype}, 'tpu')
    model_cfg, note = model_lib.resolve_attention(model_cfg, cfg.max_seq_length, checked=False)
  log(note)
  setup = make_setup(cfg, dataclasses.replace(pretrained, model_cfg=model_cfg), task, 1000,
                     cfg.seed)
  init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
  state = jax.eval_shape(init_fn)
  sharding = partitioning.batch_sharding(mesh)
  capacity, problems, report = slice_.hbm_bytes, [], {'slice': slice_.name, 'kind': task.kind}
  log(f'{task.name}: {task.kind} | batch {cfg.batch_size} x {cfg.max_seq_length}, evaluation '
      f'batch {cfg.eval_batch_size} | {model_cfg.dtype} activations')
  predict_fn = _predict_fn(setup.model, mesh)
  programs = (('init', init_fn.lower, None),
              ('train step', lambda: train_fn.lower(state, batch_shapes(
                  task, cfg.batch_size, cfg.max_seq_length, sharding)), state),
              ('prediction', lambda: predict_fn.lower(state.params, batch_shapes(
                  task, cfg.eval_batch_size, cfg.max_seq_length, sharding)), state.params))
  for name, lower, args in programs:
    compiled, seconds, error = aot.timed_compile(lower)
    if error:
      log(f'{name}: does not compile ({seconds:.0f} s): {error}')
      problems.append(f'the {name} does not compile ({error})')
      continue
    used = aot.memory(compiled, args)
    report[name] = {'memory': used, 'hlo': compiled.as_text()}
    fits = used.total <= aot.MARGIN * capacity
    log(f'{name}: compiled in {seconds:.0f} s | HBM per chip {used.describe(capacity)}'
        + ('' if fits else ' | does NOT fit'))
    if not fits:
      problems.append(f'the {name} needs {used.total / 2 ** 30:.1f} GiB per chip of '
                      f'{capacity / 2 ** 30:.0f}; lower the batch size')
    if name == 'train step':
      model_flops = 3 * cfg.batch_size * flops_lib.encoder_forward_flops(model_cfg,
                                                                         cfg.max_seq_length)
      lines, report['estimate'] = aot.estimate_lines(
          compiled, slice_.chip, slice_.chips, slice_.num_slices, model_flops,
          cfg.batch_size * cfg.max_seq_length, slice_.chips * slice_.num_slices)
      for line in lines:
        log(line)
  if problems:
    raise UserError('; '.join(problems))
  log(f'{slice_.label}: every program compiles and fits')
  return report


def _global_batch(arrays: dict, rows: np.ndarray, sharding) -> dict:
  """This process's share of the global batch `rows`, assembled into global jax.Arrays."""
  p, n = jax.process_index(), jax.process_count()
  local = rows.reshape(n, -1)[p]
  return {k: jax.make_array_from_process_local_data(sharding, v[local]) for k, v in arrays.items()}


_INPUTS = ('input_ids', 'segment_ids', 'input_mask')


@functools.lru_cache(maxsize=8)
def _predict_fn(model, mesh):
  """One compiled forward pass per (head, mesh): every split, seed and mode reuses it."""
  forward = lambda p, b: model.apply({'params': p}, b['input_ids'], b['segment_ids'],
                                    b['input_mask'], True)
  return jax.jit(partitioning.on_mesh(forward, mesh), out_shardings=partitioning.replicated(mesh))


def predict(model, params, data, batch_size: int, mesh):
  """The head's outputs for every example, in order, without dropout: logits [N, C] ([N, 1] for
  regression, [N, L, C] for tagging), or SQuAD's dict of arrays."""
  sharding = partitioning.batch_sharding(mesh)
  fn = _predict_fn(model, mesh)
  n = len(data)
  padded = -(-n // batch_size) * batch_size
  arrays = {k: v for k, v in data.arrays().items() if k in _INPUTS}
  arrays = {k: np.concatenate([v, np.zeros((padded - n,) + v.shape[1:], v.dtype)])
            for k, v in arrays.items()}
  arrays['input_mask'][n:, 0] = 1  # padding rows attend to one token (their logits are dropped)
  out = [jax.device_get(fn(params, _global_batch(arrays, np.arange(s, s + batch_size), sharding)))
         for s in range(0, padded, batch_size)]
  return jax.tree.map(lambda *parts: np.concatenate(parts)[:n], *out)


def word_tags(task, logits: np.ndarray, data: encode_lib.Encoded, examples: list) -> list[tuple]:
  """Tagging: each word's predicted tag (at its first token); 'O' for words cut by truncation."""
  ids = logits.argmax(-1)
  out = []
  for i, e in enumerate(examples):
    tags = [task.labels[t] for t in ids[i, data.word_positions[i]]]
    out.append(tuple(tags + ['O'] * (len(e.text_a) - len(tags))))
  return out


def qa_answers(cfg, task, out: dict, feats, questions: list) -> dict[str, str]:
  return squad.decode(questions, feats, out['start_logits'], out['start_top'], out['end_logits'],
                      out.get('null_logit'), n_best=cfg.qa.n_best,
                      max_answer_tokens=cfg.qa.max_answer_length,
                      null_threshold=cfg.qa.null_threshold)


def evaluate(task, logits, data, examples: list, cfg=None) -> dict:
  if task.kind == 'qa':
    return squad.scores(examples, qa_answers(cfg, task, logits, data, examples))
  if task.kind == 'tagging':
    return tagging.entity_scores([e.label for e in examples],
                                 word_tags(task, logits, data, examples))
  if task.kind == 'regression':
    predictions = logits[:, 0] * task.label_scale
    labels = data.labels * task.label_scale
  else:
    predictions, labels = logits.argmax(-1), data.labels
  return scores.compute(task.metrics, labels, predictions)


def finetune_one(cfg, pretrained, task, data: dict, splits: dict, seed: int, workdir: str,
                 log) -> dict:
  """One fine-tuning on the training loop: resumed from its latest checkpoint in `workdir` (a
  re-run after a kill continues it; a finished one is only scored again), saved every
  `save_every` steps and when stopped, scored on the dev split(s) every `eval_every` steps with
  the best checkpoint by the task's first metric kept; returns the final dev scores."""
  mesh = partitioning.make_mesh()
  train = data['train']
  steps_per_epoch = len(train) // cfg.batch_size
  epochs = cfg.epochs or task.epochs
  total = max(1, int(round(epochs * steps_per_epoch)))
  setup = make_setup(cfg, pretrained, task, total, seed)
  init_fn, train_fn, _ = step_lib.compile_steps(setup, mesh)
  fs.makedirs(workdir, exist_ok=True)
  ckpt = checkpoint_lib.Checkpointer(fs.join(workdir, 'checkpoints'), keep=1,
                                     best_metric=task.metrics[0] if cfg.eval_every else '')
  with user_errors(ValueError):
    start, state, _ = ckpt.restore_latest(init_fn(), log, afresh=True)
  if start:
    log(f'seed {seed}: resumed from {ckpt.directory}/{start}')
  scores_at = {}
  shown = tuple(m if i == 0 else f'{s}_{m}' for i, s in enumerate(
      s for s in task.dev_splits if s in data) for m in task.metrics)

  def evaluate_now(step, state):  # the first dev split's scores by their names (the curves'
    scores_at[step] = split_scores(cfg, task, setup.model, state.params, data, splits, mesh)
    return {(m if i == 0 else f'{s}_{m}'): v  # panels pair them with train's), the others named
            for i, (s, values) in enumerate(scores_at[step].items()) for m, v in values.items()}

  plan = loop_lib.Plan(total_steps=total, log_every=cfg.log_every, eval_every=cfg.eval_every,
                       save_every=cfg.save_every, keep_best=bool(cfg.eval_every), nonfinite='skip',
                       tokens_per_step=cfg.batch_size * cfg.max_seq_length, prefix=f'seed {seed} | ',
                       fields=('loss', 'accuracy', 'learning_rate'), eval_fields=shown)
  meta = lambda step: {'step': step, 'task': task.name, 'kind': task.kind,
                       'labels': list(task.labels)}
  panels = [('loss', 'loss'), ('accuracy', 'accuracy (train and dev)'),
            ('learning_rate', 'learning rate')] + [
                (m, f'{m} ({task.dev_splits[0]})') for m in task.metrics if m != 'accuracy']
  batches = _batches(train.arrays(), len(train), cfg.batch_size, seed, start,
                     partitioning.batch_sharding(mesh))
  with user_errors(checkpoint_lib.DiskFull):
    result = loop_lib.run(plan, state, train_fn, batches, start, evaluate=evaluate_now,
                          ckpt=ckpt, meta=meta, log=log,
                          logs=loop_lib.Logs(workdir, tags={'seed': seed}, panels=panels))
    if result.preempted:
      return {'seed': seed, 'preempted': result.preempted}
    best = ckpt.best_step()
    ckpt.close()
  skipped = int(jax.device_get(result.state.nonfinite_steps))
  if skipped:
    log(f'  warning: seed {seed}: {skipped} step(s) had a non-finite loss and were skipped; '
        'lower optimizer.learning_rate')
  out = {'seed': seed, 'steps': total, 'epochs': epochs, **scores_at[total],
         **split_scores(cfg, task, setup.model, result.state.params, data, splits, mesh,
                      task.test_splits)}
  if cfg.eval_every and best is not None:
    out['best_step'] = best
  return out


def _batches(arrays: dict, n: int, batch_size: int, seed: int, start: int, sharding):
  """The train batches after step `start`: epoch e visits the examples in an order drawn from
  (seed, e), so a resumed run continues the stream of an uninterrupted one."""
  steps_per_epoch = n // batch_size
  order, drawn = None, None
  for step in itertools.count(start + 1):
    epoch, index = divmod(step - 1, steps_per_epoch)
    if drawn != epoch:
      order, drawn = np.random.default_rng([seed, epoch]).permutation(n), epoch
    yield _global_batch(arrays, order[index * batch_size:(index + 1) * batch_size], sharding)


def split_scores(cfg, task, model, params, data: dict, splits: dict, mesh, names=None) -> dict:
  """{split: scores} of the dev splits, or of the splits `names` (labelled test splits)."""
  return {split: evaluate(task, predict(model, params, data[split], cfg.eval_batch_size, mesh),
                          data[split], splits[split], cfg)
          for split in (task.dev_splits if names is None else names) if split in data}


def encode(task, examples: list, tokenizer, max_len: int, train: bool, cfg=None):
  if task.kind == 'qa':
    return squad.make_features(examples, tokenizer, max_len, cfg.qa.doc_stride,
                               cfg.qa.max_query_length, train)
  if task.kind == 'tagging':
    return encode_lib.encode_tagged(examples, task, tokenizer, max_len)
  return encode_lib.encode(examples, task, tokenizer, max_len,
                           swap_pairs=train and task.swap_pairs)


def restore_seed(cfg, pretrained, task, seed_dir: str, seed: int):
  """(setup, state) of the fine-tuning saved in `seed_dir`."""
  ckpt = checkpoint_lib.Checkpointer(fs.join(seed_dir, 'checkpoints'))
  step = ckpt.latest_step()
  if step is None:
    ckpt.close()
    raise UserError(f'{seed_dir} holds no fine-tuned checkpoint; run --mode=train first')
  setup = make_setup(cfg, pretrained, task, step, seed)
  init_fn, _, _ = step_lib.compile_steps(setup, partitioning.make_mesh())
  try:
    _, state, meta = ckpt.restore_latest(init_fn())
  except ValueError as e:
    raise UserError(str(e)) from None
  finally:
    ckpt.close()
  if meta.get('labels', list(task.labels)) != list(task.labels):
    raise UserError(f'{seed_dir} was fine-tuned with the labels {meta["labels"]}, not '
                    f'{list(task.labels)}; use the data it was trained on')
  return setup, state


# Leaderboard file names of GLUE's test splits.
LEADERBOARD = {'cola': 'CoLA', 'sst2': 'SST-2', 'mrpc': 'MRPC', 'qqp': 'QQP', 'stsb': 'STS-B',
               'qnli': 'QNLI', 'rte': 'RTE', 'wnli': 'WNLI', 'mnli/test_matched': 'MNLI-m',
               'mnli/test_mismatched': 'MNLI-mm'}


def write_predictions(task, split: str, logits, examples: list, folder: str, data=None,
                      cfg=None) -> str:
  """GLUE test splits: the leaderboard's `<Task>.tsv` (index, prediction); tagging: CoNLL lines
  (word, predicted tag); other data: a TSV of index, prediction and the text(s)."""
  fs.makedirs(folder, exist_ok=True)
  if task.kind == 'qa':  # the official format: {question id: answer text}
    path = fs.join(folder, f'{split}_predictions.json')
    fs.write_atomic(path, json.dumps(qa_answers(cfg, task, logits, data, examples), indent=1,
                                     ensure_ascii=False))
    return path
  if task.kind == 'tagging':
    path = fs.join(folder, f'{split}_predictions.txt')
    fs.write_atomic(path, ''.join(''.join(f'{w} {t}\n' for w, t in zip(e.text_a, tags)) + '\n'
                                  for e, tags in zip(examples,
                                                     word_tags(task, logits, data, examples))))
    return path
  if task.kind == 'regression':
    values = [f'{v:.3f}' for v in logits[:, 0] * task.label_scale]
  else:
    values = [task.labels[i] for i in logits.argmax(-1)]
  name = LEADERBOARD.get(f'{task.name}/{split}', LEADERBOARD.get(task.name))
  glue = name is not None and split.startswith('test') and task.name in tasks_lib.GLUE
  path = fs.join(folder, f'{name}.tsv' if glue else f'{split}_predictions.tsv')
  lines = ['index\tprediction\n' if glue else 'index\tprediction\ttext_a\ttext_b\n']
  clean = lambda t: (t or '').replace('\t', ' ').replace('\n', ' ')
  for i, (e, v) in enumerate(zip(examples, values)):
    index = e.idx if e.idx is not None else i
    lines.append(f'{index}\t{v}\n' if glue else
                 f'{index}\t{v}\t{clean(e.text_a)}\t{clean(e.text_b)}\n')
  fs.write_atomic(path, ''.join(lines))
  return path


# ================================================================================================
# The command
# ================================================================================================

POOLINGS = ('cls', 'mean')


def _check(cfg, mesh):
  for what, value in (('batch_size', cfg.batch_size), ('eval_batch_size', cfg.eval_batch_size)):
    with user_errors(ValueError):
      partitioning.check_batch_size(value, mesh, what)
  if cfg.num_seeds < 1 or cfg.log_every < 1:
    raise UserError('num_seeds and log_every must be at least 1')
  if cfg.get('eval_every', 0) < 0 or cfg.get('save_every', 0) < 0:
    raise UserError('eval_every and save_every must be 0 (off) or more')
  if not (cfg.dropout_rate == -1 or 0 <= cfg.dropout_rate < 1):
    raise UserError(f'dropout_rate is {cfg.dropout_rate}; use a rate in [0, 1), or -1 for the '
                    'rate the model was pre-trained with')
  factor = cfg.optimizer.get('word_table_lr', 1.0)
  if not (isinstance(factor, (int, float)) and 0 < factor < float('inf')):
    raise UserError(f'optimizer.word_table_lr is {factor!r}; give a positive factor (1: '
                    'the same learning rate as the rest of the layer)')
  if cfg.get('pooling', 'cls') not in POOLINGS:
    raise UserError(f'pooling is {cfg.pooling!r}; use {" or ".join(POOLINGS)}')
  if cfg.task.get('max_train_examples', 0) < 0:
    raise UserError(f'task.max_train_examples is {cfg.task.max_train_examples}; give 0 (all) or '
                    'a number of examples')
  if cfg.max_seq_length < 3:
    raise UserError(f'max_seq_length={cfg.max_seq_length} leaves no room for text ([CLS] and '
                    '[SEP] take 2 tokens); raise it (the default is 128)')


# Fields that change how a fine-tuning is run or reported, not what it computes.
_MAY_CHANGE = ('num_seeds', 'log_every', 'eval_every', 'save_every', 'eval_batch_size',
               'baseline')


def _check_same_finetuning(cfg, workdir: str):
  """A re-run in a workdir holding fine-tunings continues them (a killed seed resumes, a finished
  one is scored again): refused when the config would compute something else."""
  path = fs.join(workdir, 'config.json')
  if not fs.isfile(path) or not any(n.startswith('seed_') for n in fs.listdir(workdir)):
    return
  with fs.open(path) as f:
    before = _with_defaults(json.loads(config_lib.default_config().to_json()), json.load(f))
  after = json.loads(cfg.to_json())
  diffs = [f'{k} {before.get(k)!r} -> {after.get(k)!r}' for k in sorted(set(before) | set(after))
           if k not in _MAY_CHANGE and before.get(k) != after.get(k)]
  if diffs:
    raise UserError(f'--workdir {workdir} holds fine-tunings with a different config '
                    f'({"; ".join(diffs)}); use a new --workdir, or the same config to continue')


def _with_defaults(defaults: dict, saved: dict) -> dict:
  """`saved` with the fields an earlier version did not have at their defaults (which is what
  that version computed)."""
  return {**defaults, **{k: _with_defaults(defaults[k], v) if isinstance(v, dict) and isinstance(
      defaults.get(k), dict) else v for k, v in saved.items()}}


def _scored(task) -> tuple:
  return task.dev_splits + task.test_splits


def _table(task, results: list[dict], base: dict | None = None) -> tuple[str, dict]:
  """(markdown table of the seeds, their median and the TF-IDF baseline `base`; the medians)."""
  splits = [s for s in _scored(task) if all(s in r for r in results)]
  columns = [(s, m) for s in splits for m in task.metrics]
  median = {f'{s}/{m}': statistics.median(r[s][m] for r in results) for s, m in columns}
  head = '| seed | ' + ' | '.join(f'{s} {m}' for s, m in columns) + ' |'
  lines = [head, '|' + '---|' * (len(columns) + 1)]
  for r in results:
    lines.append(f'| {r["seed"]} | ' + ' | '.join(f'{100 * r[s][m]:.2f}' for s, m in columns)
                 + ' |')
  lines.append('| **median** | ' + ' | '.join(f'**{100 * median[f"{s}/{m}"]:.2f}**'
                                                for s, m in columns) + ' |')
  if base:
    lines.append('| TF-IDF baseline | ' + ' | '.join(
        f'{100 * base[s][m]:.2f}' if s in base else '-' for s, m in columns) + ' |')
  return '\n'.join(lines) + '\n', median


MODES = ('train', 'eval', 'predict')


def finetune(cfg, workdir: str, log=print, mode: str = 'train') -> dict:
  """Fine-tunes per `cfg` in `workdir`, `num_seeds` times; returns the results (also written).

  mode 'eval' scores the fine-tunings saved in `workdir` on the dev split(s) again; 'predict'
  writes their predictions for the test split(s) under <workdir>/seed_<k>/predictions/.
  """
  if mode not in MODES:
    raise UserError(f'--mode is {mode!r}; use one of {", ".join(MODES)}')
  mesh = partitioning.make_mesh()
  _check(cfg, mesh)
  saved = []
  if mode != 'train':
    saved = sorted((int(n.split('_')[1]), fs.join(workdir, n)) for n in (
        fs.listdir(workdir) if fs.isdir(workdir) else ()) if n.startswith('seed_'))
    if not saved:
      raise UserError(f'{workdir} holds no fine-tuning (no seed_<k> folder); run --mode=train '
                      'first, with this --workdir')
  what = 'fine-tuning' if mode == 'train' else f'fine-tuning (--mode={mode})'
  with workdir_lib.claim(workdir, what):  # one run at a time in a workdir
    return _finetune(cfg, workdir, log, mode, mesh, saved)


def _finetune(cfg, workdir: str, log, mode: str, mesh, saved: list) -> dict:
  pretrained = load_pretrained(cfg.init, cfg.from_scratch or mode != 'train', log)
  with user_errors(ValueError, FileNotFoundError):
    task, splits = tasks_lib.load(cfg.task, pretrained.config, log)
  if mode != 'train':
    return _use_saved(cfg, mode, pretrained, task, splits, saved, workdir, mesh, log)
  if 'train' not in splits:
    raise UserError('the task has no train split; set --config.task.train')
  if task.kind in ('classification', 'regression') and cfg.max_seq_length < 5 and any(
      e.text_b for e in splits['train']):
    raise UserError(f'max_seq_length={cfg.max_seq_length} leaves a pair of texts no room ([CLS] '
                    'and two [SEP] take 3 tokens, each text needs one); raise it (the default '
                    'is 128)')
  tokenizer = tokenizer_lib.load_tokenizer(pretrained.vocab, lower_case=pretrained.lower_case)
  if cfg.max_seq_length > pretrained.model_cfg.max_position_embeddings:
    raise UserError(f'max_seq_length={cfg.max_seq_length} exceeds the model\'s '
                    f'{pretrained.model_cfg.max_position_embeddings} positions; lower it')
  with user_errors(ValueError):
    heads.reinit_parts(cfg.get('reinit', ''), pretrained.model_cfg.num_layers)
  data = {}
  for split, examples in splits.items():
    data[split] = encode(task, examples, tokenizer, cfg.max_seq_length, split == 'train', cfg)
    if getattr(data[split], 'truncated', 0):
      log(f'{split}: {data[split].truncated} of {len(data[split])} examples cut to '
          f'{cfg.max_seq_length} tokens (the longer text loses its last tokens first)')
    if getattr(data[split], 'skipped', 0):
      log(f'warning: {split}: {data[split].skipped} of {len(examples)} questions skipped: their '
          'answer text is not at its offset in the context')
  if len(data['train']) < cfg.batch_size:
    raise UserError(f'the train data has {len(data["train"])} examples, fewer than one batch of '
                    f'{cfg.batch_size}; add data or lower --config.batch_size')
  _check_same_finetuning(cfg, workdir)
  fs.makedirs(workdir, exist_ok=True)
  fs.write_atomic(fs.join(workdir, 'config.json'), cfg.to_json(indent=2))
  log(f'{task.name}: {task.kind}, {len(task.labels) or "one"} output(s), scored by '
      f'{", ".join(task.metrics)} on {", ".join(s for s in _scored(task) if s in data) or "no split"}'
      ' | ' + ', '.join(f'{s} {len(d):,}' for s, d in data.items()) +
      f' examples | from {pretrained.checkpoint}')
  m, o = pretrained.model_cfg, cfg.optimizer
  log(f'recipe: {cfg.epochs or task.epochs:g} epochs of batch {cfg.batch_size}, learning rate '
      f'{o.learning_rate or config_lib.paper_learning_rate(m.hidden_size):g}, layer-wise decay '
      f'{o.layerwise_decay or config_lib.paper_layerwise_decay(m.num_layers):g}, dropout '
      f'{config_lib.dropout_rate(cfg, m):g}'
      + (f', word table at {o.word_table_lr:g}x the learning rate'
         if o.get('word_table_lr', 1.0) != 1.0 else '')
      + ('' if task.kind in ('qa', 'tagging') else f', head on {cfg.get("pooling", "cls")}')
      + (f', re-initialized: {cfg.reinit}' if cfg.get('reinit', '') and pretrained.params else ''))
  with user_errors(ValueError):  # one path for every host, checked at this length
    model_cfg, note = model_lib.resolve_attention(
        pretrained.model_cfg, cfg.max_seq_length,
        agree=lambda ok: distributed.all_agree(ok, 'attention_kernel'))
  pretrained = dataclasses.replace(pretrained, model_cfg=model_cfg)
  if note:
    log(note)
  results = []
  for k in range(cfg.num_seeds):
    seed = cfg.seed + k
    t = time.time()
    result = finetune_one(cfg, pretrained, task, data, splits, seed,
                          fs.join(workdir, f'seed_{seed}'), log)
    if 'preempted' in result:  # saved; the same command continues this seed
      return {'task': task.name, 'preempted': result['preempted'], 'seed': seed}
    result['seconds'] = time.time() - t
    results.append(result)
    log(f'seed {seed}: ' + ' | '.join(f'{s} {m} {100 * v:.2f}' for s in _scored(task)
                                      if s in result for m, v in result[s].items()))
  base = None
  if cfg.get('baseline', True) and task.kind in baseline_lib.KINDS:
    t = time.time()
    base = baseline_lib.tfidf(task, splits)
    log(f'TF-IDF baseline (word and character n-grams, linear model; {time.time() - t:.0f} s): '
        + ' | '.join(f'{s} {m} {100 * v:.2f}' for s, scored in (base or {}).items()
                     for m, v in scored.items()))
  return _write_results(task, results, pretrained.checkpoint, workdir, log, base)


def _write_results(task, results, init: str, workdir: str, log, base: dict | None = None) -> dict:
  table, median = _table(task, results, base)
  summary = {'task': task.name, 'init': init, 'seeds': results, 'median': median}
  if base:
    summary['baseline'] = base
  fs.write_atomic(fs.join(workdir, 'results.json'), metrics_lib.dumps(summary, indent=2))
  fs.write_atomic(fs.join(workdir, 'results.md'),
                  f'# {task.name}, {len(results)} seed(s), from {init}\n\n{table}')
  log(table)
  metric = task.metrics[0]
  for split in _scored(task) if base else ():
    if split in base and f'{split}/{metric}' in median:
      log(baseline_lib.verdict(split, metric, median[f'{split}/{metric}'], base[split][metric]))
  return summary


def _use_saved(cfg, mode, pretrained, task, splits, saved, workdir, mesh, log) -> dict:
  tokenizer = tokenizer_lib.load_tokenizer(pretrained.vocab, lower_case=pretrained.lower_case)
  encoded = lambda split: encode(task, splits[split], tokenizer, cfg.max_seq_length, False, cfg)
  wanted = [s for s in (_scored(task) if mode == 'eval' else splits) if s in splits and (
      mode == 'eval' or s.startswith('test') or (task.kind == 'qa' and s == 'dev'))]
  if not wanted:
    split = 'dev' if mode == 'eval' else 'test'
    raise UserError(f'the task has no {split} split to {mode}; name its file with '
                    f'--config.task.{split}=FILE (plus --config and the flags of the fine-tuning)')
  data = {s: encoded(s) for s in wanted}
  results, written = [], []
  for seed, seed_dir in saved:
    setup, state = restore_seed(cfg, pretrained, task, seed_dir, seed)
    if mode == 'eval':
      results.append({'seed': seed, **split_scores(cfg, task, setup.model, state.params, data,
                                                 splits, mesh, _scored(task))})
      continue
    for split in wanted:
      logits = predict(setup.model, state.params, data[split], cfg.eval_batch_size, mesh)
      written.append(write_predictions(task, split, logits, splits[split],
                                       fs.join(seed_dir, 'predictions'), data[split], cfg))
      log(f'seed {seed}: {split} predictions ({len(splits[split]):,}) -> {written[-1]}')
  if mode == 'eval':
    return _write_results(task, results, f'the fine-tunings in {workdir}', workdir, log)
  return {'task': task.name, 'predictions': written}


def saved_config(workdir: str, mode: str) -> ml_collections.ConfigDict:
  """The config a fine-tuning workdir was trained with (for --mode=eval/predict without --config)."""
  path = fs.join(workdir, 'config.json')
  if mode != 'train' and not fs.isdir(workdir):
    raise UserError(f'--workdir {workdir} does not exist; give the --workdir of a fine-tuning '
                    '(launch/finetune.py --mode=train)')
  if mode == 'train' or not fs.isfile(path):
    raise UserError(f'--config is required ({path} does not exist); give the fine-tuning config' if
                    mode != 'train' else '--config is required for --mode=train; give a '
                    'configs/finetune/*.py file')
  config = fs.read_json(path, 'give the fine-tuning\'s config file with --config')
  if isinstance(config, dict) and 'objective' in config and 'task' not in config:
    raise UserError(f'{workdir} is a pre-training workdir (of launch/train.py); fine-tune it with '
                    f'--init={workdir} and a new --workdir, then use --mode={mode} on that one')
  return ml_collections.ConfigDict(config)
