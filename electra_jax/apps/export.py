"""A workdir -> folders that HF transformers' `from_pretrained` and `AutoTokenizer` load.

    pre-training workdir -> OUT/discriminator (ElectraForPreTraining)   `_pretraining`
     (or an original         OUT/generator     (ElectraForMaskedLM)     convert/sources.py
     TF checkpoint)
    fine-tuning workdir  -> OUT of one seed: ElectraForSequenceClassification ([CLS]),
                            ElectraForTokenClassification, ElectraForMultipleChoice, or the
                            class of a mean-pooled or SQuAD head shipped in the folder
                            (`_finetuning`; checked on its dev file: `check_dev`)

Each folder holds config.json, model.safetensors (float32) and the tokenizer (convert/hf_folder.py).
This module tells the workdirs apart, writes the output whole (to OUT.partial, renamed when
complete: an interrupted export leaves no folder that looks finished; into a bucket: uploaded, each
config.json last) and checks an export in HF transformers against our model (`verify`).
"""

import contextlib
import importlib.util
import logging
import os
import tempfile

import numpy as np

from electra_jax import UserError, user_errors
from electra_jax.apps import onnx_export
from electra_jax.apps import predict
from electra_jax.config import pretraining as config_lib
from electra_jax.convert import hf, hf_code, hf_folder, original, sources
from electra_jax.convert.hf_folder import Exported
from electra_jax.data import corpus
from electra_jax.data import records as records_lib
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.finetune import config as finetune_config
from electra_jax.finetune import pretrained as pretrained_lib
from electra_jax.finetune.kinds import registry
from electra_jax.model import networks as model_lib
from electra_jax.storage import fs
from electra_jax.train import checkpoint as checkpoint_lib
from electra_jax.train import workdir as workdir_lib


def _read_config(workdir: str) -> dict:
  path = fs.join(workdir, 'config.json')
  if not fs.isfile(path):
    raise UserError(f'{workdir} is not a workdir of launch/train.py or launch/finetune.py (it has '
                    'no config.json); give the --workdir of a run')
  return workdir_lib.read_config(workdir)


def out_folder(out: str) -> str:
  """The folder `out` names (a local one as its real path: through a symbolic link, `.` as the
  current folder), checked to be new or an empty folder; one sentence otherwise."""
  if not fs.remote(out):
    if why := fs.broken_link(out):
      raise UserError(f'--out {out} is a symbolic link that leads nowhere ({why}); give a new '
                      'folder, or a link to an empty one (nothing was written)')
    out = os.path.realpath(out)
    if os.path.isdir(out):  # an export killed while it wrote into this folder: its part goes
      for name in os.listdir(out):
        if name.startswith('.export.partial-'):
          fs.rmtree(os.path.join(out, name), ignore_errors=True)
  if fs.exists(out) and (not fs.isdir(out) or fs.listdir(out)):
    raise UserError(f'--out {out} {"is a file" if not fs.isdir(out) else "exists and is not empty"}'
                    '; give a new folder (nothing was written)')
  return out


def export(workdir: str, out: str, step: int | None = None, seed: int | None = None,
           log=print, allow_unfinished: bool = False, onnx: bool = False) -> Exported:
  """Writes the HF folders of `workdir`'s checkpoint (latest, or `step`) under `out` (a new
  folder, or an empty one: then into it, config.json last, so the folder stays the one it was);
  `onnx`: each with its ONNX graph too (onnx/model.onnx: apps/onnx_export.py)."""
  if onnx:
    onnx_export.check_can_export()
  out = out_folder(out)
  config = _read_config(workdir) if not _original(workdir) else {}
  # written whole under <out>.partial (inside an empty OUT that exists), then moved; for a bucket,
  # built in a local folder and uploaded with each config.json last, so a folder from_pretrained
  # can open is a complete one
  into = not fs.remote(out) and fs.isdir(out)
  partial = (tempfile.mkdtemp(prefix='electra_export_') if fs.remote(out) else
             os.path.join(out, f'.export.partial-{os.getpid()}') if into else out + '.partial')
  fs.rmtree(partial, ignore_errors=True)
  fs.makedirs(partial)
  try:
    if not config:
      done = sources.export_original(workdir, partial, log)
    elif 'objective' in config:
      if seed is not None:
        raise UserError(f'--seed picks one of a fine-tuning\'s seeds, and {workdir} is a '
                        'pre-training (one model); leave --seed out')
      with user_errors(ValueError):
        pretraining = config_lib.from_json(config)
      done = _pretraining(pretraining, workdir, partial, step, log)
    elif 'task' in config and 'init' in config:
      done = _finetuning(finetune_config.parse(config), workdir, partial, step, seed, log,
                         allow_unfinished)
    else:
      raise UserError(f'{workdir}/config.json is not the config of an electra_jax run; give the '
                      '--workdir of launch/train.py or launch/finetune.py')
    for folder in done.folders if onnx else ():
      _write_onnx(done, folder, _moved(folder, partial, out), log)
    if fs.remote(out):
      _upload(partial, out)
      fs.rmtree(partial)
    elif into:  # (the folder stays: a link to it, a shell inside it still see it)
      for name in sorted(os.listdir(partial), key=lambda n: n == 'config.json'):
        os.replace(os.path.join(partial, name), os.path.join(out, name))
      os.rmdir(partial)
    else:
      fs.replace(partial, out)
  except fs.DiskFull as e:  # one sentence for the whole export: at least what was written so far
    written = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(partial)
                  for n in names)
    fs.rmtree(partial, ignore_errors=True)
    free = fs.free_bytes(out)
    raise UserError(f'the disk holding {os.path.dirname(os.path.abspath(out))} is full: the '
                    f'export takes at least {fs.size_text(written + e.size)}' +
                    (f' and {fs.size_text(free)} are free' if free is not None else '') +
                    '; nothing was written: free some space and run the same command '
                    'again') from None
  except BaseException:
    fs.rmtree(partial, ignore_errors=True)
    raise
  done.folders = [_moved(w, partial, out) for w in done.folders]
  return done


def _write_onnx(done: Exported, folder: str, shown: str, log):
  """<folder>/onnx/model.onnx of the HF model just written in `folder` (a local one), traced on a
  batch of 6 rows of 8 tokens (3 questions of 2 candidates for multiple choice)."""
  import transformers
  model = hf_model(transformers, folder).eval()
  names = transformers.AutoTokenizer.from_pretrained(folder).model_input_names
  ids = 1 + np.arange(48).reshape(6, 8) % (done.cfg.vocab_size - 1)
  segments, mask = np.zeros_like(ids), np.ones_like(ids)
  if done.kind != 'pretraining':
    ids, segments, mask = registry.get(done.kind).hf_inputs(ids, segments, mask)
  sample = {'input_ids': ids, 'token_type_ids': segments, 'attention_mask': mask}
  onnx_export.write(model, folder, list(names), {n: sample[n] for n in names}, log, shown)


def _moved(folder: str, partial: str, out: str) -> str:
  """Where `folder` (under `partial`) is now that `partial` became `out`."""
  rel = os.path.relpath(folder, partial)
  if not fs.remote(out):
    return os.path.normpath(os.path.join(out, rel))
  return out if rel == '.' else fs.join(out, *rel.split(os.sep))


def _upload(local: str, out: str):
  """Copies the local folder `local` to `out`, each folder's config.json after its other files."""
  for folder, _, files in os.walk(local):
    target = _moved(folder, local, out)
    for name in sorted(files, key=lambda n: n == 'config.json'):
      fs.copyfile(os.path.join(folder, name), fs.join(target, name))


def _original(path: str) -> bool:
  return (not fs.isfile(fs.join(path, 'config.json'))
          and original.checkpoint_prefix(path) is not None)


# ================================================================================================
# Checking an export against our own model
# ================================================================================================

def check_can_verify():
  """Refuses (UserError) --check where HF transformers or torch is not installed: asked before the
  export is written, so that the same command after installing them runs whole."""
  missing = [m for m in ('torch', 'transformers') if importlib.util.find_spec(m) is None]
  if missing:
    raise UserError(f'--check loads the export in HF transformers, and {" and ".join(missing)} '
                    f'{"is" if len(missing) == 1 else "are"} not installed; pip install -e '
                    '".[test]" (torch==2.13.0 and transformers), or leave --check out (nothing was '
                    'written)')


def verify(done: Exported, log=print, num_texts: int = 64) -> dict:
  """Loads the exported folders in HF transformers and compares with our model on pairs of
  sentences of the built-in corpus: token ids, and logits (max |difference|) on the same batch."""
  check_can_verify()
  import torch
  import transformers
  sentences = [s for doc in corpus.builtin_documents()[:1000] for s in doc][:2000]
  firsts, seconds = sentences[0:2 * num_texts:2], sentences[1:2 * num_texts:2]
  length = min(128, done.cfg.max_position_embeddings)
  result = {}
  for folder in done.folders:
    with _local_folder(folder) as local:
      result[fs.basename(folder)] = _compare(done, folder, local, transformers, torch, sentences,
                                             firsts, seconds, length, log)
      dev = check_dev(done, folder, local, transformers, log)
      if dev is not None:
        result[fs.basename(folder)]['dev'] = dev
  return result


def hf_model(transformers, folder: str):
  """The model of an exported folder, as a user loads it: HF's class by its name, or the class
  the folder ships (its config's auto_map) through its Auto class with trust_remote_code."""
  config = transformers.AutoConfig.from_pretrained(folder)
  arch = config.architectures[0]
  auto = next((a for a, target in (getattr(config, 'auto_map', None) or {}).items()
               if target.endswith(f'.{arch}')), None)
  if auto is None:
    return getattr(transformers, arch).from_pretrained(folder)
  return getattr(transformers, auto).from_pretrained(folder, trust_remote_code=True)


@contextlib.contextmanager
def _local_folder(folder: str):
  """`folder`, or for a bucket a local copy of it (HF transformers reads local folders)."""
  if not fs.remote(folder):
    yield folder
    return
  with tempfile.TemporaryDirectory(prefix='electra_export_check_') as tmp:
    local = os.path.join(tmp, fs.basename(folder))
    fs.copytree(folder, local)
    yield local


def _compare(done, folder, local, transformers, torch, sentences, firsts, seconds, length,
             log) -> dict:
  """The export in `local` (a copy of `folder`) against our model: token ids and logits."""
  tok = transformers.AutoTokenizer.from_pretrained(local)
  same = sum(tok(t, add_special_tokens=False)['input_ids'] == done.tokenizer.encode(t)
             for t in sentences)
  batch = tok(firsts, seconds, padding=True, truncation=True, max_length=length,
              return_tensors='np')
  ids, mask = batch['input_ids'], batch['attention_mask']
  segments = batch.get('token_type_ids', np.zeros_like(ids))  # (a ModernBert takes none)
  kind = None if done.kind == 'pretraining' else registry.get(done.kind)
  if kind is not None:  # the batch as the task's model takes it
    ids, segments, mask = kind.hf_inputs(ids, segments, mask)
  config = transformers.AutoConfig.from_pretrained(local)
  arch = config.architectures[0]
  with torch.no_grad():
    inputs = {'input_ids': ids, 'token_type_ids': segments, 'attention_mask': mask}
    theirs = _in_our_units(done, kind, hf_model(transformers, local).eval()(**{
        name: torch.from_numpy(inputs[name]).long() for name in tok.model_input_names}))
  ours, real = _ours(done, kind, arch, theirs.shape[-1], ids, segments, mask)
  diff = float(np.max(np.abs(ours[real] - theirs[real])))
  largest = float(np.max(np.abs(theirs[real])))
  log(f'{folder}: {arch}: tokenizer ids equal ours on {same} of {len(sentences)} sentences; '
      f'logits on {len(firsts)} pairs ({ids.shape[-1]} tokens, padded): max |ours - HF| '
      f'{diff:.2e} (largest |logit| {largest:.1f})')
  out = {'same_ids': same, 'texts': len(sentences), 'max_abs_diff': diff,
         'max_abs_logit': largest}
  if fs.isfile(fs.join(local, onnx_export.ONNX_FILE)):
    out['onnx'] = _compare_onnx(done, kind, arch, folder, local, theirs.shape[-1], ids, segments,
                                mask, (ours, real), log)
  return out


def _in_our_units(done, kind, output) -> np.ndarray:
  """An HF model's output (or ONNX Runtime's, by the same names) as our model's array: the logits
  (a token head of one label: [B, L]), or the kind's (regression's in the model's own units)."""
  if kind is None:
    logits = output.logits.numpy()
    return logits[..., 0] if logits.ndim == 3 and logits.shape[-1] == 1 else logits
  return kind.from_units(kind.hf_array(output), done.meta or {})


def _ours(done, kind, arch: str, outputs: int, ids, segments, mask) -> tuple:
  """(our model's array on the batch, which of its entries are compared)."""
  if kind is None:
    positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
    gen, disc = model_lib.Electra(done.cfg).apply({'params': done.params}, ids, segments, mask,
                                                  positions)
    return np.asarray(gen if arch.endswith('ForMaskedLM') else disc), mask > 0  # (real tokens)
  model = kind.check_model(done.cfg, outputs, done.pooling, done.config)
  ours = kind.our_array(model.apply({'params': done.params}, ids, segments, mask))
  return ours, kind.compared(mask)


def _compare_onnx(done, kind, arch: str, folder: str, local: str, outputs: int, ids, segments,
                  mask, ours_on_batch: tuple, log) -> dict:
  """The ONNX graph of `local` in ONNX Runtime against our model, at two shapes the export never
  traced: the check's batch (ours on it: `ours_on_batch`, _ours's), and its first 3 rows cut to
  the longest of them."""
  sess = onnx_export.session(local)
  worst, shapes = 0.0, []
  keep = int(mask[:3].reshape(-1, mask.shape[-1]).sum(-1).max())  # (padding on the right)
  for batch in ((ids, segments, mask), tuple(x[:3, ..., :keep] for x in (ids, segments, mask))):
    b_ids, b_segments, b_mask = batch
    theirs = _in_our_units(done, kind, onnx_export.outputs(sess, {
        'input_ids': b_ids, 'token_type_ids': b_segments, 'attention_mask': b_mask}))
    ours, real = (ours_on_batch if b_ids is ids else
                  _ours(done, kind, arch, outputs, b_ids, b_segments, b_mask))
    worst = max(worst, float(np.max(np.abs(ours[real] - theirs[real]))))
    shapes.append('x'.join(map(str, b_ids.shape)))
  log(f'{folder}: {onnx_export.ONNX_FILE} in ONNX Runtime at {" and ".join(shapes)}: max '
      f'|ours - ONNX| {worst:.2e}')
  return {'max_abs_diff': worst, 'shapes': shapes, 'agrees': worst <= TOLERANCE}


# ---- a pre-training: its networks as HF folders -----------------------------------------------

def _pretraining(pretraining: config_lib.PretrainingConfig, workdir: str, out: str,
                 step: int | None, log) -> hf_folder.Exported:
  """Checkpoint `step` (None: the latest) of the pre-training in `workdir` (its config
  `pretraining`) as HF folders under `out`."""
  workdir_lib.require_checkpoint(workdir)
  try:
    _, _, vocab = records_lib.workdir_vocab(workdir, pretraining)
  except (ValueError, FileNotFoundError) as e:
    raise UserError(str(e)) from None
  tokenizer = tokenizer_lib.load_tokenizer(vocab, pretraining.data.lower_case)
  cfg = pretraining.model
  step, state, _ = checkpoint_lib.read_kept(fs.join(workdir, 'checkpoints'), step, 'pre-training')
  networks = ['discriminator']
  problem = hf.generator_problem(cfg)
  if problem:
    log(f'{problem}; the discriminator alone is exported')
  else:
    networks.append('generator')
  written = hf_folder.write_networks(out, state['params'], cfg, tokenizer,
                                     pretraining.data.lower_case, networks)
  log(f'exported step {step} of {workdir}')
  return hf_folder.Exported(written, cfg, state['params'], tokenizer, 'pretraining')


# ---- a fine-tuning: one seed as an HF folder, checked on its dev file through HF's pipeline ----

# What an export's check allows between our outputs and HF's (float32 on both sides).
TOLERANCE = 1e-4


def _finetuning(config, workdir: str, out: str, step: int | None, seed: int | None,
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
                             finetune_config.dropout_rate(config, cfg), pooling, config)
  state = kind.in_units(state, meta)
  fields['electra_jax_inputs'] = _inputs(config, kind)
  hf_folder.write_model(out, state, {**hf.hf_config(cfg, 'discriminator'), **fields}, tokenizer,
               pretrained.lower_case, cfg, token_types=kind.reads_segments)
  if 'auto_map' in fields:  # a class HF transformers lacks: its code beside the weights
    hf_code.write(out)
  log(f'exported seed {seed} (step {step}) of {workdir}: {fields["architectures"][0]}'
      + (f', {fields["num_labels"]} output(s)' if 'num_labels' in fields else '')
      + (f' (its code in {hf_code.MODULE}.py: load it with trust_remote_code=True)'
         if 'auto_map' in fields else ''))
  return hf_folder.Exported([out], cfg, params, tokenizer, meta['kind'], pooling, config, meta)


def _inputs(config, kind) -> dict:
  """How a new file is read for the exported model, as launch/predict.py reads it from the
  workdir (apps/predict.py's file_columns): its kind and what a row's output is (`onnx_rows`),
  the columns of its texts and label, whether a table has a header row, and the fine-tuning's
  length (config.json's `electra_jax_inputs`: what launch/predict_onnx.py reads)."""
  t = predict.file_columns(config.task)
  return {'kind': kind.name, 'outputs': kind.onnx_rows, 'text_a': t.text_a, 'text_b': t.text_b,
          'label': t.label, 'header': t.header, 'max_seq_length': config.max_seq_length}


def check_dev(done, folder, local, transformers, log) -> dict | None:
  """A fine-tuning's own dev file through HF's pipeline on the export, beside our predictions of
  it: the same label on every row, the outputs within TOLERANCE (in the export's units). None
  where the kind has no pipeline or the fine-tuning no dev file of its own."""
  kind = None if done.kind == 'pretraining' else registry.get(done.kind)
  t = done.config.task if done.config is not None else None
  if kind is None or t is None or not kind.hf_pipeline or not t.dev or not fs.isfile(t.dev):
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
