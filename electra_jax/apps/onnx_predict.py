"""Predictions on a new file from an exported folder alone, in ONNX Runtime: no JAX, PyTorch or
TensorFlow is imported (launch/predict_onnx.py).

    folder/config.json        id2label, `electra_jax_inputs` (the kind, the columns, the length)
    folder/tokenizer.json     HF tokenizers: our ids, [CLS] a [SEP] b [SEP], token types
    folder/onnx/model.onnx    launch/export.py --onnx
    -> a table of the input's rows, the prediction and each class's probability: the columns of
       launch/predict.py from the fine-tuning's workdir (apps/prediction_files.py)

The file is read as launch/predict.py reads it (finetune/inputs/files.py), each text cut to the
fine-tuning's length as the HF tokenizer cuts a pair (the longer text first, as ours), and the
rows batched by length (each batch padded to its longest row). Classification and regression.
"""

import os
import time
import types

import numpy as np
import onnxruntime
import tokenizers

from electra_jax import UserError
from electra_jax.apps import prediction_files
from electra_jax.finetune.inputs import files
from electra_jax.storage import fs

SERVED = ('classes', 'number')  # a row's output: a logit per class, or a number (Kind.onnx_rows)


def predict(folder: str, input_path: str, output: str | None = None, overwrite: bool = False,
            batch_size: int = 32, log=print) -> dict:
  """Writes the predictions of the ONNX graph in `folder` (launch/export.py --onnx of a
  fine-tuning) for the rows of `input_path`; returns {'outputs', 'examples', 'predicting_s'}."""
  config, inputs = _config(folder)
  session = _session(folder)
  out = prediction_files.output_path(folder, input_path, output, 'table')
  prediction_files.check_output(out, input_path, overwrite)
  regression = inputs['outputs'] == 'number'
  try:
    prediction_files.check_columns(input_path, types.SimpleNamespace(choices='', **inputs))
    examples = files.read_table(input_path, inputs['text_a'], inputs['text_b'] or None,
                                inputs['label'], labelled=None, header=inputs['header'],
                                numeric=regression, log=log)
  except (ValueError, FileNotFoundError) as e:
    raise UserError(str(e)) from None
  tokenizer = tokenizers.Tokenizer.from_file(os.path.join(folder, 'tokenizer.json'))
  tokenizer.enable_truncation(inputs['max_seq_length'], strategy='longest_first')
  log(f'{input_path}: {len(examples):,} example{"s" * (len(examples) != 1)} | {inputs["kind"]} '
      f'in ONNX Runtime from {folder}')
  t = time.perf_counter()
  outputs = _outputs(session, tokenizer, examples, batch_size, config.get('pad_token_id') or 0)
  rows: list[dict]
  if regression:
    rows = [{'prediction': float(v)} for v in outputs[:, 0]]
  else:
    names = [config['id2label'][str(i)] for i in range(outputs.shape[-1])]
    shifted = np.exp(outputs - outputs.max(-1, keepdims=True))
    probabilities = shifted / shifted.sum(-1, keepdims=True)
    rows = [{'prediction': names[int(np.argmax(p))], 'probabilities': dict(zip(names, map(
        float, p)))} for p in probabilities]
  seconds = time.perf_counter() - t  # (tokenizing counts: HF's pipeline does it too)
  fs.write_atomic(out, prediction_files.table_text(out, rows, input_path, inputs['header']),
                  replace=overwrite)
  log(f'{len(rows):,} predictions -> {out} | {len(rows) / max(seconds, 1e-9):,.0f}/s tokenizing '
      f'and predicting ({seconds:.2f} s)')
  return {'outputs': [out], 'examples': len(rows), 'predicting_s': seconds}


def _config(folder: str) -> tuple[dict, dict]:
  """(config.json, its electra_jax_inputs) of an exported fine-tuning that ONNX prediction serves;
  one sentence for any other folder."""
  path = os.path.join(folder, 'config.json')
  if not os.path.isfile(path):
    raise UserError(f'--model {folder} holds no config.json; give the --out folder of '
                    'launch/export.py --onnx of a fine-tuning')
  config = fs.read_json(path, 'export the fine-tuning again', want=dict)
  inputs = config.get('electra_jax_inputs')
  if not isinstance(inputs, dict):
    raise UserError(f'{folder} is not the export of a fine-tuning (its config.json names no '
                    'electra_jax_inputs); export the fine-tuning\'s workdir with launch/export.py '
                    '--onnx, then predict from that folder')
  if inputs.get('outputs') not in SERVED:
    raise UserError(f'{folder} holds a {inputs.get("kind")} model, and predictions from its ONNX '
                    'graph alone serve classification and regression; predict with '
                    'launch/predict.py from its fine-tuning\'s workdir')
  return config, inputs


def _session(folder: str):
  path = os.path.join(folder, 'onnx', 'model.onnx')
  if not os.path.isfile(path):
    raise UserError(f'{path} does not exist; export the fine-tuning with launch/export.py --onnx')
  options = onnxruntime.SessionOptions()
  options.log_severity_level = 3
  return onnxruntime.InferenceSession(path, options, providers=['CPUExecutionProvider'])


def _outputs(session, tokenizer, examples: list, batch_size: int, pad: int) -> np.ndarray:
  """The graph's first output for each example, in the examples' order: rows batched by length,
  each batch padded to its longest."""
  encoded = tokenizer.encode_batch([(e.text_a, e.text_b) if e.text_b else e.text_a
                                    for e in examples])
  wanted = {i.name for i in session.get_inputs()}
  order = np.argsort([len(e.ids) for e in encoded], kind='stable')
  out: list = [None] * len(encoded)
  for start in range(0, len(order), batch_size):
    chosen = order[start:start + batch_size]
    width = max(len(encoded[i].ids) for i in chosen)
    arrays = {'input_ids': np.full((len(chosen), width), pad, np.int64),
              'token_type_ids': np.zeros((len(chosen), width), np.int64),
              'attention_mask': np.zeros((len(chosen), width), np.int64)}
    for row, i in enumerate(chosen):
      e = encoded[i]
      arrays['input_ids'][row, :len(e.ids)] = e.ids
      arrays['token_type_ids'][row, :len(e.ids)] = e.type_ids
      arrays['attention_mask'][row, :len(e.ids)] = 1
    logits = session.run(None, {k: v for k, v in arrays.items() if k in wanted})[0]
    for row, i in enumerate(chosen):
      out[i] = logits[row]
  return np.stack(out) if out else np.zeros((0, 1), np.float32)
