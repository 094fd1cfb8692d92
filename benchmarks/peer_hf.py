"""The peer of `benchmarks/benchmark.py --peer=hf`: the same ELECTRA train step in PyTorch, with HF
transformers' ELECTRA modules, as a competent PyTorch user would write it.

Same sizes, batch, masking (the original's: 15% of the tokens, 85% of them [MASK]), generator
logits only at the masked positions, Gumbel-max sampling, replacement, losses (MLM + 50 x
detection), AdamW (weight decay 0.01, eps 1e-6) and clipping at global norm 1, dropout on (train
mode); the generator shares the discriminator's embeddings. On a GPU (spec 'device': 'cuda') it
runs there with bf16 autocast, SDPA attention (flash attention with dropout) and the fused AdamW;
on the CPU bf16 runs under CPU autocast. With spec 'compile' the forward pass and losses run under
`torch.compile` (the backward pass is compiled with them by AOTAutograd).

Run as a child process: it builds the model, warms up, then for each line `run STEPS` read from
stdin times STEPS steps and answers one JSON line, so the parent can alternate its own runs with
the peer's on a shared machine. `maxbatch` (GPU only) answers the largest batch (a multiple of 8)
whose step runs without running out of memory.
"""

import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import transformers


def _configs(spec: dict):
  common = dict(vocab_size=spec['vocab_size'], embedding_size=spec['embedding_size'],
                max_position_embeddings=spec['max_position_embeddings'],
                type_vocab_size=spec['type_vocab_size'], hidden_dropout_prob=spec['dropout_rate'],
                attention_probs_dropout_prob=spec['attention_dropout_rate'],
                layer_norm_eps=spec['layer_norm_eps'], hidden_act='gelu',
                attn_implementation='sdpa')
  disc = transformers.ElectraConfig(hidden_size=spec['hidden_size'],
                                    num_hidden_layers=spec['num_layers'],
                                    num_attention_heads=spec['num_heads'],
                                    intermediate_size=spec['intermediate_size'], **common)
  gen = transformers.ElectraConfig(hidden_size=spec['generator_hidden_size'],
                                   num_hidden_layers=spec['generator_num_layers'],
                                   num_attention_heads=spec['generator_num_heads'],
                                   intermediate_size=4 * spec['generator_hidden_size'], **common)
  return disc, gen


class Step:
  """Masking, generator, Gumbel sampling, discriminator, losses, AdamW with clipping."""

  def __init__(self, spec: dict, batch: dict, dtype: str):
    torch.manual_seed(0)
    self.device = torch.device(spec.get('device', 'cpu'))
    disc_cfg, gen_cfg = _configs(spec)
    self.disc = transformers.ElectraForPreTraining(disc_cfg).to(self.device)
    self.gen = transformers.ElectraForMaskedLM(gen_cfg).to(self.device)
    self.gen.electra.embeddings = self.disc.electra.embeddings  # shared embeddings, as ELECTRA
    self.gen.generator_lm_head.weight = self.disc.electra.embeddings.word_embeddings.weight
    self.disc.train()
    self.gen.train()
    params = {id(p): p for p in list(self.disc.parameters()) + list(self.gen.parameters())}
    self.params = list(params.values())
    cuda = self.device.type == 'cuda'
    self.opt = torch.optim.AdamW(self.params, lr=5e-4, betas=(0.9, 0.999), eps=1e-6,
                                 weight_decay=0.01, fused=cuda)
    self.set_batch(batch)
    self.n = spec['max_predictions']
    self.mask_prob = spec['mask_prob']
    self.special = spec['special_ids']
    self.mask_id = spec['mask_id']
    self.autocast = dtype == 'bfloat16'
    self.losses = torch.compile(self._losses) if spec.get('compile') else self._losses

  def set_batch(self, batch: dict):
    to = lambda x: torch.from_numpy(x).long().to(self.device)
    self.ids, self.mask = to(batch['input_ids']), to(batch['input_mask'])
    self.segments = to(batch['segment_ids'])

  def _mask(self):
    ids, mask = self.ids, self.mask
    candidates = mask.bool()
    for i in self.special + [self.mask_id]:
      candidates &= ids != i
    count = torch.clamp(torch.round(mask.sum(-1) * self.mask_prob).long(), 1, self.n)
    weights = (torch.arange(self.n, device=ids.device)[None] < count[:, None]).float()
    positions = torch.multinomial(candidates.float(), self.n, replacement=True)
    positions = positions * weights.long()
    targets = torch.gather(ids, 1, positions)
    show_mask = (torch.rand(weights.shape, device=ids.device) < 0.85) & weights.bool()
    masked = ids.clone()
    rows = torch.arange(ids.shape[0], device=ids.device)[:, None].expand_as(positions)
    masked[rows[show_mask], positions[show_mask]] = self.mask_id
    return masked, positions, targets, weights

  def __call__(self):
    loss = self.losses(*self._mask())
    self.opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(self.params, 1.0)
    self.opt.step()
    return loss.detach()

  def _losses(self, masked, positions, targets, weights):
    with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
      hidden = self.gen.electra(masked, attention_mask=self.mask,
                                token_type_ids=self.segments).last_hidden_state
      chosen = torch.gather(hidden, 1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
      logits = self.gen.generator_lm_head(self.gen.generator_predictions(chosen)).float()
      nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                            reduction='none')
      mlm_loss = (nll * weights.reshape(-1)).sum() / (weights.sum() + 1e-6)
      with torch.no_grad():
        u = torch.rand_like(logits).clamp_(min=torch.finfo(torch.float32).tiny)
        sampled = torch.argmax(logits - torch.log(-torch.log(u)), -1)
        disc_ids = self.ids.clone()
        used = weights.bool()
        rows = torch.arange(self.ids.shape[0], device=self.ids.device)[:, None]
        disc_ids[rows.expand_as(positions)[used], positions[used]] = sampled[used]
        labels = (disc_ids != self.ids).float()
      disc_logits = self.disc(disc_ids, attention_mask=self.mask,
                              token_type_ids=self.segments).logits.float()
      per_token = F.binary_cross_entropy_with_logits(disc_logits, labels, reduction='none')
      disc_loss = (per_token * self.mask).sum() / self.mask.sum()
      return mlm_loss + 50.0 * disc_loss


def _sync(step):
  if step.device.type == 'cuda':
    torch.cuda.synchronize()


def _tiled(batch: dict, rows: int) -> dict:
  return {k: np.resize(v, (rows,) + v.shape[1:]) for k, v in batch.items()}


def max_batch(step, batch: dict, start: int = 8) -> int:
  """The largest multiple of 8 rows whose step runs on the GPU (doubling, then bisection)."""
  def fits(rows):
    try:
      step.set_batch(_tiled(batch, rows))
      step()
      _sync(step)
      return True
    except torch.OutOfMemoryError:
      return False
    finally:
      step.opt.zero_grad(set_to_none=True)
      torch.cuda.empty_cache()
  good, bad = 0, start
  while fits(bad):
    good, bad = bad, bad * 2
  while bad - good > 8:
    middle = (good + bad) // 16 * 8
    good, bad = (middle, bad) if fits(middle) else (good, middle)
  step.set_batch(batch)
  return good


def main():
  spec = json.loads(sys.argv[1])
  data = np.load(spec['batch'])
  torch.set_num_threads(spec.get('threads') or os.cpu_count())
  batch = {k: data[k] for k in data.files}
  step = Step(spec, batch, spec['dtype'])
  first_loss = float(step())
  for _ in range(spec.get('warmup', 2) - 1 + (2 if spec.get('compile') else 0)):
    step()
  _sync(step)
  print(json.dumps({'ready': True, 'torch': torch.__version__,
                    'transformers': transformers.__version__, 'first_loss': first_loss,
                    'device': torch.cuda.get_device_name() if step.device.type == 'cuda'
                    else 'cpu'}), flush=True)
  for line in sys.stdin:
    if line.startswith('maxbatch'):
      print(json.dumps({'max_batch': max_batch(step, batch)}), flush=True)
      continue
    steps = int(line.split()[1])
    _sync(step)
    t = time.perf_counter()
    for _ in range(steps):
      loss = step()
    _sync(step)
    elapsed = (time.perf_counter() - t) / steps
    loss = float(loss)
    print(json.dumps({'step_s': elapsed, 'loss': loss if math.isfinite(loss) else None}),
          flush=True)


if __name__ == '__main__':
  main()
