"""An exported HF folder -> ONNX, which ONNX Runtime runs without PyTorch or JAX.

    <folder>/config.json, tokenizer.json, ...    (launch/export.py's HF folder)
    <folder>/onnx/model.onnx                     (`write`: the layout of onnx-community's folders)

The way there: PyTorch's ONNX exporter (`torch.onnx.export`, its dynamo path, with onnxscript) run
on the model HF transformers loads from the folder, the class a user loads (HF's, or the class the
folder ships for a mean-pooled or SQuAD head), so the graph computes what the checked HF export
computes. The batch, the sequence and a multiple-choice model's number of candidates are dynamic;
the inputs are the tokenizer's (`input_ids`, `token_type_ids`
where the model reads segments, `attention_mask`), the outputs the HF model's, by their names
(`logits`; SQuAD's head: `start_logits`, `end_logits_top`, `null_logit` where it has one).
`outputs` runs a folder's model in ONNX Runtime.
"""

import contextlib
import importlib.util
import logging
import os
import types
import warnings

import numpy as np

from electra_jax import UserError

ONNX_FILE = os.path.join('onnx', 'model.onnx')
OPSET = 18
NEEDS = ('onnx', 'onnxscript', 'onnxruntime', 'torch', 'transformers')


def check_can_export():
  """Refuses (UserError) --onnx where what it needs is not installed: asked before anything is
  written."""
  missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
  if missing:
    verb = 'is' if len(missing) == 1 else 'are'
    raise UserError(f'--onnx writes the model through PyTorch\'s ONNX exporter and checks it in '
                    f'ONNX Runtime, and {", ".join(missing)} {verb} not installed; pip install -e '
                    '".[onnx]", or leave --onnx out (nothing was written)')


def write(model, folder: str, input_names: list[str], sample: dict, log=print,
          shown: str = '') -> str:
  """Writes `model` (an HF transformers model, as loaded from `folder`) to <folder>/onnx/model.onnx,
  traced on `sample` ({input name: int array}: a batch as the model takes it, of a shape the checks
  never use, each of its sizes distinct), batch, sequence (and candidates) dynamic; returns the
  file's path (logged as in `shown`, the folder where the file will be, where that is another)."""
  import torch
  output_names = _output_names(model, sample, torch)
  wrapped = _Named(model, output_names, torch)
  batch, sequence = torch.export.Dim('batch'), torch.export.Dim('sequence')
  choices = torch.export.Dim('choices')
  dims = lambda x: {0: batch, x.ndim - 1: sequence, **({1: choices} if x.ndim == 3 else {})}
  path = os.path.join(folder, ONNX_FILE)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  args = {name: torch.from_numpy(np.asarray(sample[name], np.int64)) for name in input_names}
  with warnings.catch_warnings(), _quiet_loggers('torch.onnx', 'torch.export', 'torch._dynamo'):
    warnings.simplefilter('ignore')
    program = torch.onnx.export(
        wrapped, (), kwargs=args, input_names=input_names, output_names=output_names,
        dynamic_shapes={name: dims(args[name]) for name in input_names}, opset_version=OPSET,
        dynamo=True, external_data=False, verbose=False)
  assert program is not None  # (the dynamo exporter returns its program)
  program.save(path)
  where = os.path.join(shown, ONNX_FILE) if shown else path
  log(f'{where}: inputs {", ".join(input_names)}; outputs {", ".join(output_names)} '
      f'({os.path.getsize(path) / 2**20:.1f} MiB, opset {OPSET})')
  return path


@contextlib.contextmanager
def _quiet_loggers(*names: str):
  """The exporter's own notes (operators of packages not installed, its steps) kept out of the
  command's output; its errors still raise."""
  loggers = [logging.getLogger(n) for n in names]
  levels = [l.level for l in loggers]
  for l in loggers:
    l.setLevel(logging.ERROR)
  try:
    yield
  finally:
    for l, level in zip(loggers, levels):
      l.setLevel(level)


def _output_names(model, sample: dict, torch) -> list[str]:
  """The names of the tensors the model returns (a ModelOutput's keys that are set)."""
  with torch.no_grad():
    out = model(**{k: torch.from_numpy(np.asarray(v, np.int64)) for k, v in sample.items()})
  return [k for k, v in out.items() if v is not None]


def _Named(model, names: list[str], torch):
  """`model` returning the tuple of its outputs `names` (what the exporter traces)."""

  class Named(torch.nn.Module):

    def __init__(self):
      super().__init__()
      self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids=None):
      segments = {} if token_type_ids is None else {'token_type_ids': token_type_ids}
      out = self.model(input_ids=input_ids, attention_mask=attention_mask, **segments)
      return tuple(out[n] for n in names)
  return Named().eval()


def session(folder: str):
  """ONNX Runtime's session of <folder>/onnx/model.onnx, on the CPU."""
  import onnxruntime
  path = os.path.join(folder, ONNX_FILE)
  if not os.path.isfile(path):
    raise UserError(f'{path} does not exist; export with launch/export.py --onnx')
  options = onnxruntime.SessionOptions()
  options.log_severity_level = 3
  return onnxruntime.InferenceSession(path, options, providers=['CPUExecutionProvider'])


def outputs(sess, inputs: dict):
  """The model's outputs on `inputs` ({name: int array}; the names the graph takes) as an object
  whose attributes are the outputs by name, torch-like (`.numpy()`), None for one it lacks: what
  the kinds' `hf_array` reads of an HF output."""
  wanted = [i.name for i in sess.get_inputs()]
  arrays = sess.run(None, {n: np.asarray(inputs[n], np.int64) for n in wanted})
  return _Outputs({o.name: a for o, a in zip(sess.get_outputs(), arrays)})


class _Outputs(types.SimpleNamespace):

  def __init__(self, arrays: dict):
    super().__init__(**{k: _Array(v) for k, v in arrays.items()})

  def __getattr__(self, name):  # (an output the model does not give)
    return None


class _Array(np.ndarray):
  """A numpy array that answers `.numpy()` as a torch tensor does."""

  def __new__(cls, array):
    return np.asarray(array).view(cls)

  def numpy(self) -> np.ndarray:
    return np.asarray(self)
