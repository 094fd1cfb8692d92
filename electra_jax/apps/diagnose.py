"""What a pre-training has done to the discriminator: statistics of its representations, per layer,
at each kept checkpoint against the same model's random initial weights.

    pre-training workdir -> config, records, the kept checkpoints (+ the initial weights, step 0)
    -> held-out batches through the discriminator (no dropout), each layer's output captured
    -> per layer: vector norms, anisotropy (mean cosine between different vectors), effective rank,
       attention entropy; weight norms -> one row per (step, layer) -> diagnose.json / a table

Why: a short pre-training can leave the discriminator worse to fine-tune than random weights; a
collapsed representation (every token's vector alike: anisotropy near 1, a low effective rank) or
attention that no longer looks anywhere in particular (entropy near its maximum) shows where.

With a classification task (`probe`: a task's name, or a folder of train.csv and dev.csv such as a
task of benchmarks/build_tasks.py's suite): a linear probe per layer, a softmax regression trained
on the frozen mean of the real tokens' vectors (and on the last layer's [CLS] vector) of the task's
train split, scored on its dev split. Better probe accuracy than the random weights' means the
pre-trained features carry more of the task; a fine-tuned score below random weights' despite it
means the fine-tuning, not the features, falls short.
"""

import functools
import json
import math
from typing import Any

from flax.traverse_util import flatten_dict
import jax
import jax.numpy as jnp
import numpy as np
import optax

from electra_jax import UserError, user_errors
from electra_jax.config import pretraining as config_lib
from electra_jax.data import input_pipeline
from electra_jax.data import records as records_lib
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.finetune import config as finetune_config
from electra_jax.finetune.kinds import registry
from electra_jax.model import attention_masks
from electra_jax.model import modern
from electra_jax.model import networks as model_lib
from electra_jax.pretraining import setup as pretrain_setup
from electra_jax.storage import fs
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import step as step_lib
from electra_jax.train import workdir as workdir_lib

STATS = ('norm', 'cosine', 'rank', 'cls_cosine', 'cls_rank', 'attention_entropy', 'weight_norm')


def effective_rank(x: np.ndarray) -> float:
  """exp(entropy of the normalized singular values) of the centered rows of `x` (Roy & Vetterli
  2007): the number of directions the vectors spread over, 1 to min(rows, width)."""
  scale = max(float(np.abs(x).max()), 1e-30)
  x = x - x.mean(0, keepdims=True)
  s = np.linalg.svd(x.astype(np.float64), compute_uv=False)
  if s.sum() <= 1e-9 * scale:  # every vector the same: one direction
    return 1.0
  p = s / s.sum()
  p = p[p > 0]
  return float(np.exp(-(p * np.log(p)).sum()))


def mean_cosine(x: np.ndarray) -> float:
  """The mean cosine similarity between different rows of `x` (anisotropy: 0 for directions
  spread evenly, 1 when every vector points the same way)."""
  unit = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
  n = len(unit)
  total = unit.sum(0)
  return float((total @ total - n) / max(n * (n - 1), 1))


def attention_entropy(q: np.ndarray, k: np.ndarray, mask: np.ndarray, window: int = 0) -> float:
  """Mean entropy of the attention of real queries over the keys each may see, as a share of its
  maximum (log of the number of those keys): 1 is uniform attention, 0 attention to one key.
  `mask` is numbered as the model's (a row packing several sequences: each its own number) and
  `window` a local layer's (0: none): the keys a query sees are the model's (masks.visible)."""
  d = q.shape[-1]
  length = mask.shape[-1]
  same = (mask[:, :, None] == mask[:, None, :]) & (mask[:, None, :] > 0)  # [B, Q, K]
  allowed = np.asarray(attention_masks.visible(same, np.arange(length)[:, None],
                                               np.arange(length)[None, :], window=window))
  scores = np.einsum('bqhd,bkhd->bhqk', q, k) / math.sqrt(d)
  scores = np.where(allowed[:, None], scores, -1e30)
  scores = scores - scores.max(-1, keepdims=True)
  p = np.exp(scores)
  p = p / p.sum(-1, keepdims=True)
  entropy = -(p * np.log(np.maximum(p, 1e-30))).sum(-1)  # [B, H, Q]
  keys = allowed.sum(-1).astype(np.float64)[:, None]  # [B, 1, Q]
  share = entropy / np.maximum(np.log(np.maximum(keys, 2.0)), 1e-12)
  real = np.broadcast_to(mask[:, None, :] > 0, share.shape)
  return float(share[real].mean())


def layer_stats(hidden: np.ndarray, mask: np.ndarray, max_tokens: int = 2048) -> dict:
  """Norm, anisotropy and effective rank of the real tokens' vectors and of the [CLS] vectors."""
  tokens = hidden[mask > 0].astype(np.float64)
  if len(tokens) > max_tokens:
    tokens = tokens[np.random.default_rng(0).choice(len(tokens), max_tokens, replace=False)]
  cls = hidden[:, 0].astype(np.float64)
  return {'norm': float(np.linalg.norm(tokens, axis=-1).mean()), 'cosine': mean_cosine(tokens),
          'rank': effective_rank(tokens), 'cls_cosine': mean_cosine(cls),
          'cls_rank': effective_rank(cls)}


@functools.lru_cache(maxsize=4)
def _forward(model):
  """The discriminator without dropout, every layer's output and each layer's queries and keys
  captured (the modern backbone's: their joint projection, `Wqkv`)."""
  def run(params, batch):
    def wanted(module, method):
      path = module.path
      in_discriminator = len(path) >= 2 and path[0] == 'discriminator'
      return method == '__call__' and (
          in_discriminator and path[-1].startswith('layer_')
          or (in_discriminator and len(path) >= 3 and path[-1] in ('query', 'key', 'Wqkv'))
          or path == ('embeddings',))  # the embeddings' output (its own width)
    _, state = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                           batch['input_mask'], True, method=model_lib.Electra.discriminator_hidden,
                           capture_intermediates=wanted)
    return state['intermediates']
  return jax.jit(run)


def checkpoint_stats(model, model_cfg, params, batches: list[dict]) -> list[dict]:
  """One row per layer (0: the embeddings' output; the modern backbone's: each layer's residual
  stream, before the final norm) of `params` on `batches`."""
  captured = [jax.device_get(_forward(model)(params, b)) for b in batches]
  mask = np.concatenate([b['input_mask'] for b in batches])
  flat = [flatten_dict(c, sep='/') for c in captured]
  joined = {k: np.concatenate([np.asarray(f[k][0], np.float32) for f in flat]) for k in flat[0]}
  weights = flatten_dict(params['discriminator'], sep='/')
  rows = []
  for layer in range(model_cfg.num_layers + 1):
    name = 'embeddings/__call__' if layer == 0 else f'discriminator/layer_{layer - 1}/__call__'
    row = {'layer': layer, **layer_stats(joined[name], mask)}
    if layer:
      prefix = f'discriminator/layer_{layer - 1}'
      row['attention_entropy'] = attention_entropy(*_queries_keys(model_cfg, joined, prefix,
                                                                  layer - 1, mask),
                                                   mask, _window(model_cfg, layer - 1))
      row['weight_norm'] = float(np.sqrt(sum(
          np.sum(np.square(np.asarray(v, np.float64))) for k, v in weights.items()
          if k.startswith(f'layer_{layer - 1}/') and k.endswith('kernel'))))
    rows.append(row)
  return rows


def _window(cfg, index: int) -> int:
  return cfg.local_window if cfg.modern and not cfg.is_global(index) else 0


def _queries_keys(cfg, captured: dict, prefix: str, index: int,
                  mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """A layer's queries and keys [B, L, heads, D] as its attention scores them: the modern
  backbone's split from `Wqkv` and turned by its rotary positions (each sequence's own)."""
  heads = cfg.num_heads
  if not cfg.modern:
    split = lambda x: x.reshape(*mask.shape, heads, -1)  # (the layers keep tokens flat)
    return split(captured[f'{prefix}/query/__call__']), split(captured[f'{prefix}/key/__call__'])
  qkv = captured[f'{prefix}/Wqkv/__call__'].reshape(*mask.shape, 3, heads, -1)
  positions = attention_masks.sequence_positions(jnp.asarray(mask))
  theta = cfg.rope_theta_global if cfg.is_global(index) else cfg.rope_theta_local
  q, k = (np.asarray(modern.rotary(jnp.asarray(qkv[:, :, i]), positions, theta)) for i in range(2))
  return q, k


def softmax_probe(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
                  test_y: np.ndarray, num_classes: int, steps: int = 500,
                  l2: float = 1e-3) -> float:
  """Accuracy on (test_x, test_y) of a softmax regression fitted to (train_x, train_y): features
  standardized by the train split's mean and std, full-batch Adam, a small L2 penalty."""
  mean, std = train_x.mean(0), train_x.std(0) + 1e-6
  x, t = (train_x - mean) / std, (test_x - mean) / std
  y = jax.nn.one_hot(train_y, num_classes)
  params = (jnp.zeros((x.shape[1], num_classes)), jnp.zeros(num_classes))
  loss = lambda p: (optax.softmax_cross_entropy(x @ p[0] + p[1], y).mean()
                    + l2 * jnp.sum(jnp.square(p[0])))
  tx = optax.adam(0.05)

  @jax.jit
  def fit(params):
    def body(_, carry):
      params, state = carry
      updates, state = tx.update(jax.grad(loss)(params), state, params)
      return optax.apply_updates(params, updates), state
    return jax.lax.fori_loop(0, steps, body, (params, tx.init(params)))[0]

  w, b = fit(params)
  return float(np.mean(np.asarray(jnp.argmax(t @ w + b, -1)) == test_y))


def pooled_features(model, model_cfg, params, data, batch_size: int) -> list[np.ndarray]:
  """Per layer (0: the embeddings' output) the mean of the real tokens' vectors of every example
  of `data` (finetune.encode.Encoded), then the last layer's [CLS] vectors."""
  names = ['embeddings/__call__'] + [f'discriminator/layer_{i}/__call__'
                                     for i in range(model_cfg.num_layers)]
  out = []
  for i in range(0, len(data), batch_size):
    batch = {k: getattr(data, k)[i:i + batch_size]
             for k in ('input_ids', 'segment_ids', 'input_mask')}
    captured = flatten_dict(jax.device_get(_forward(model)(params, batch)), sep='/')
    mask = batch['input_mask'][..., None].astype(np.float32)
    hidden = [np.asarray(captured[n][0], np.float32) for n in names]
    out.append([(h * mask).sum(1) / mask.sum(1) for h in hidden] + [hidden[-1][:, 0]])
  return [np.concatenate(parts) for parts in zip(*out)]


def _probe_data(config, workdir: str, task_name: str):
  """(task, {'train': Encoded, 'dev': Encoded}) of a classification task (a name, or a folder
  holding train.csv and dev.csv with `text` and `label` columns, as benchmarks/build_tasks.py writes
  them), encoded with the pre-training's vocabulary at its sequence length."""
  cfg = finetune_config.TaskConfig(name=task_name)
  if fs.isdir(task_name):  # your own files, read as a fine-tuning with own.py reads them
    cfg = finetune_config.TaskConfig(name='own', train=fs.join(task_name, 'train.csv'),
                                     dev=fs.join(task_name, 'dev.csv'))
  elif '/' in task_name:
    raise UserError(f'--probe={task_name} is no folder; give a folder holding train.csv and '
                    'dev.csv, or a task name (builtin, builtin_topic, a GLUE task)')
  with user_errors(ValueError, FileNotFoundError):
    try:
      task, splits = registry.load(cfg, config, log=lambda *_: None)
    except ValueError as e:
      raise ValueError(f'--probe={task_name}: {e}') from None
    kind = registry.get(task.kind)
    if kind.baseline != 'classes' or not {'train', 'dev'} <= set(splits):
      what = f'a {task.kind} task' + ('' if 'dev' in splits else ' without a dev split')
      raise ValueError(f'--probe={task_name} is {what}; the probe needs a classification task '
                       'with train and dev splits (builtin, builtin_topic, a GLUE classification '
                       'task, or a folder holding train.csv and dev.csv)')
    vocab = records_lib.workdir_vocab(workdir, config)[2]
  tokenizer = tokenizer_lib.load_tokenizer(vocab, lower_case=config.data.lower_case)
  return task, {s: kind.encode(task, splits[s], tokenizer, config.data.max_seq_length, False)
                for s in ('train', 'dev')}


def probe_rows(model, model_cfg, params, task, data: dict, batch_size: int) -> list[float]:
  """Dev accuracy of the linear probe on each layer's pooled features, then on [CLS]."""
  train = pooled_features(model, model_cfg, params, data['train'], max(batch_size, 64))
  dev = pooled_features(model, model_cfg, params, data['dev'], max(batch_size, 64))
  return [softmax_probe(a, data['train'].labels, b, data['dev'].labels, len(task.labels))
          for a, b in zip(train, dev)]


def diagnose(workdir: str, num_batches: int = 4, batch_size: int = 32, log=print,
             probe: str = '') -> dict:
  """Statistics of the random initial weights and of every checkpoint kept in `workdir`, on the
  first `num_batches` held-out batches (and, with `probe` a classification task's name, the linear
  probes' dev accuracy); written to <workdir>/diagnose.json and returned."""
  kind = workdir_lib.kind_of(workdir)
  if kind != 'pre-training':
    raise UserError(f'{workdir} is not a pre-training workdir ('
                    + (f'it holds a {kind}' if kind else 'no config.json') + '); give the '
                    '--workdir of launch/train.py')
  workdir_lib.require_checkpoint(workdir)
  with user_errors(ValueError, FileNotFoundError):
    config = config_lib.from_json(workdir_lib.read_config(workdir))
    records_dir, meta, _ = records_lib.workdir_vocab(workdir, config)
  setup = pretrain_setup.build_setup(config, tokenizer_lib.SpecialIds(**meta['special_ids']))
  dataset = input_pipeline.make_dataset(records_dir, 'eval', batch_size, shuffle=False)
  batches = [dict(b) for b in dataset.take(num_batches).as_numpy_iterator()]
  if not batches:
    raise UserError(f'the held-out split of {records_dir} has fewer than {batch_size} examples; '
                    'lower --batch_size')
  task, data = _probe_data(config, workdir, probe) if probe else (None, None)
  state = jax.jit(functools.partial(step_lib.init_state, setup))()
  ckpt = checkpoint_lib.Checkpointer(fs.join(workdir, 'checkpoints'))
  steps = [0] + ckpt.all_steps()
  out: dict[str, Any] = {'workdir': workdir, 'examples': len(batches) * batch_size, 'steps': {}}
  if probe:
    assert task is not None and data is not None
    out['probe'] = {'task': task.name, 'train': len(data['train']), 'dev': len(data['dev']),
                    'steps': {}}
  try:
    for step in steps:
      params = state.params
      if step:
        with user_errors(ValueError):
          params = ckpt.restore(step, state)[0].params
      out['steps'][step] = checkpoint_stats(setup.model, setup.model_cfg, params, batches)
      log(format_step(step, out['steps'][step]))
      if task is not None and data is not None:  # (a probe)
        out['probe']['steps'][step] = probe_rows(setup.model, setup.model_cfg, params, task, data,
                                                 batch_size)
        log(format_probe(step, out['probe']['steps'][step]))
  finally:
    ckpt.close()
  fs.write_atomic(fs.join(workdir, 'diagnose.json'), json.dumps(out, indent=1))
  return out


def format_probe(step: int, accuracies: list[float]) -> str:
  layers = ' | '.join(f'{"emb" if i == 0 else i}: {100 * a:.2f}'
                      for i, a in enumerate(accuracies[:-1]))
  return (f'probe, step {step:,}, dev accuracy of the mean per layer | {layers} | [CLS]: '
          f'{100 * accuracies[-1]:.2f}')


def format_step(step: int, rows: list[dict]) -> str:
  head = (f'step {step:,}' + (' (random initial weights)' if step == 0 else '') + '\n'
          '| layer | norm | anisotropy | eff. rank | [CLS] anisotropy | [CLS] eff. rank | '
          'attention entropy | weight norm |\n|---|---|---|---|---|---|---|---|')
  fmt = lambda r, k, f: f.format(r[k]) if k in r else '-'
  lines = [f'| {r["layer"] or "emb"} | {r["norm"]:.2f} | {r["cosine"]:.3f} | {r["rank"]:.1f} | '
           f'{r["cls_cosine"]:.3f} | {r["cls_rank"]:.1f} | '
           f'{fmt(r, "attention_entropy", "{:.3f}")} | {fmt(r, "weight_norm", "{:.1f}")} |'
           for r in rows]
  return '\n'.join([head] + lines)
