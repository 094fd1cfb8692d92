"""What a pre-training has done to the discriminator: statistics of its representations, per layer,
at each kept checkpoint against the same model's random initial weights.

    pre-training workdir -> config, records, the kept checkpoints (+ the initial weights, step 0)
    -> held-out batches through the discriminator (no dropout), each layer's output captured
    -> per layer: vector norms, anisotropy (mean cosine between different vectors), effective rank,
       attention entropy; weight norms -> one row per (step, layer) -> diagnose.json / a table

Why: a short pre-training can leave the discriminator worse to fine-tune than random weights; a
collapsed representation (every token's vector alike: anisotropy near 1, a low effective rank) or
attention that no longer looks anywhere in particular (entropy near its maximum) shows where.
"""

import functools
import json
import math

import jax
import ml_collections
import numpy as np
from flax.traverse_util import flatten_dict

from electra_jax import UserError
from electra_jax import user_errors
from electra_jax import checkpoint as checkpoint_lib
from electra_jax import fs
from electra_jax import input_pipeline
from electra_jax import model as model_lib
from electra_jax import records as records_lib
from electra_jax import step as step_lib
from electra_jax import tokenizer as tokenizer_lib

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


def attention_entropy(q: np.ndarray, k: np.ndarray, mask: np.ndarray) -> float:
  """Mean entropy of the attention of real queries over real keys, as a share of its maximum
  (log of the number of real keys): 1 is uniform attention, 0 attention to one key."""
  d = q.shape[-1]
  scores = np.einsum('bqhd,bkhd->bhqk', q, k) / math.sqrt(d)
  scores = np.where(mask[:, None, None, :] > 0, scores, -1e30)
  scores = scores - scores.max(-1, keepdims=True)
  p = np.exp(scores)
  p = p / p.sum(-1, keepdims=True)
  entropy = -(p * np.log(np.maximum(p, 1e-30))).sum(-1)  # [B, H, Q]
  keys = mask.sum(-1).astype(np.float64)  # [B]
  share = entropy / np.maximum(np.log(np.maximum(keys, 2.0)), 1e-12)[:, None, None]
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
  captured."""
  def run(params, batch):
    def wanted(module, method):
      path = module.path
      return method == '__call__' and (len(path) >= 2 and path[0] == 'discriminator' and path[-1].startswith('layer_')
              or (len(path) >= 3 and path[0] == 'discriminator' and path[-1] in ('query', 'key'))
              or path == ('embeddings',))  # the embeddings' output (its own width)
    _, state = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'],
                           batch['input_mask'], True, method=model_lib.Electra.discriminator_hidden,
                           capture_intermediates=wanted)
    return state['intermediates']
  return jax.jit(run)


def checkpoint_stats(model, model_cfg, params, batches: list[dict]) -> list[dict]:
  """One row per layer (0: the embeddings' output) of `params` on `batches`."""
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
      heads = model_cfg.num_heads
      split = lambda x: x.reshape(x.shape[0], x.shape[1], heads, -1)
      row['attention_entropy'] = attention_entropy(split(joined[f'{prefix}/query/__call__']),
                                                   split(joined[f'{prefix}/key/__call__']), mask)
      row['weight_norm'] = float(np.sqrt(sum(
          np.sum(np.square(np.asarray(v, np.float64))) for k, v in weights.items()
          if k.startswith(f'layer_{layer - 1}/') and k.endswith('kernel'))))
    rows.append(row)
  return rows


def diagnose(workdir: str, num_batches: int = 4, batch_size: int = 32, log=print) -> dict:
  """Statistics of the random initial weights and of every checkpoint kept in `workdir`, on the
  first `num_batches` held-out batches; written to <workdir>/diagnose.json and returned."""
  path = fs.join(workdir, 'config.json')
  if not fs.isfile(path):
    raise UserError(f'{workdir} is not a pre-training workdir (no config.json); give the '
                    '--workdir of launch/train.py')
  with fs.open(path) as f:
    config = ml_collections.ConfigDict(json.load(f))
  with user_errors(ValueError, FileNotFoundError):
    records_dir, meta, _ = records_lib.workdir_vocab(workdir, config)
  setup = step_lib.build_setup(config, tokenizer_lib.SpecialIds(**meta['special_ids']))
  dataset = input_pipeline.make_dataset(records_dir, 'eval', batch_size, shuffle=False)
  batches = [dict(b) for b in dataset.take(num_batches).as_numpy_iterator()]
  if not batches:
    raise UserError(f'the held-out split of {records_dir} has fewer than {batch_size} examples; '
                    'lower --batch_size')
  state = jax.jit(functools.partial(step_lib.init_state, setup))()
  ckpt = checkpoint_lib.Checkpointer(fs.join(workdir, 'checkpoints'))
  steps = [0] + ckpt.all_steps()
  out = {'workdir': workdir, 'examples': len(batches) * batch_size, 'steps': {}}
  try:
    for step in steps:
      params = state.params
      if step:
        with user_errors(ValueError):
          params = ckpt.restore(step, state)[0].params
      out['steps'][step] = checkpoint_stats(setup.model, setup.model_cfg, params, batches)
      log(format_step(step, out['steps'][step]))
  finally:
    ckpt.close()
  fs.write_atomic(fs.join(workdir, 'diagnose.json'), json.dumps(out, indent=1))
  return out


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
