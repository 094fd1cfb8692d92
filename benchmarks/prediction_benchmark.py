r"""Rows/s of the three ways to predict on one file, in one process, on this CPU:
launch/predict.py's (the fine-tuning's workdir, JAX), HF transformers' pipeline on the export
(PyTorch), and ONNX Runtime on its graph (launch/predict_onnx.py's loop). Each way runs --repeats
times, alternating, tokenizing included, the median reported (JAX's first run compiles: its median
is the warm one).

    python launch/export.py --workdir=/tmp/mine --out=/tmp/mine_onnx --onnx
    python -m benchmarks.prediction_benchmark --workdir=/tmp/mine --export=/tmp/mine_onnx \
        --input=new.csv

The three outputs agree row by row (the same prediction on every row; checked here, and by the
export's --check).
"""

import csv
import json
import os
import statistics
import tempfile
import time

from absl import flags

from electra_jax import cli
from electra_jax.apps import onnx_predict
from electra_jax.apps import predict
from electra_jax.finetune.inputs import files

_WORKDIR = flags.DEFINE_string('workdir', None, 'a classification or regression fine-tuning')
_EXPORT = flags.DEFINE_string('export', None, 'its launch/export.py --onnx folder')
_INPUT = flags.DEFINE_string('input', None, 'the file (.csv, .tsv, .jsonl) predicted')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'runs of each way', lower_bound=1)
_BATCH = flags.DEFINE_integer('batch_size', 32, "HF's pipeline and ONNX Runtime's rows a call "
                              "(launch/predict.py: the fine-tuning's eval_batch_size)",
                              lower_bound=1)
flags.mark_flags_as_required(['workdir', 'export', 'input'])


def _ours(out: str) -> tuple[float, list[str]]:
  done = predict.predict(_WORKDIR.value, _INPUT.value, out, overwrite=True, log=lambda *_: None)
  return done['predicting_s'], _predictions(out)


def _onnx(out: str) -> tuple[float, list[str]]:
  done = onnx_predict.predict(_EXPORT.value, _INPUT.value, out, overwrite=True,
                              batch_size=_BATCH.value, log=lambda *_: None)
  return done['predicting_s'], _predictions(out)


def _hf(pipe, inputs: dict, regression: bool) -> tuple[float, list[str]]:
  examples = files.read_table(_INPUT.value, inputs['text_a'], inputs['text_b'] or None,
                              inputs['label'], labelled=None, header=inputs['header'],
                              numeric=regression, log=lambda *_: None)
  texts = [{'text': e.text_a, 'text_pair': e.text_b} if e.text_b else e.text_a for e in examples]
  t = time.perf_counter()
  out = pipe(texts, batch_size=_BATCH.value, truncation=True,
             max_length=inputs['max_seq_length'], **({'function_to_apply': 'none'}
                                                     if regression else {}))
  seconds = time.perf_counter() - t
  return seconds, [f'{o["score"]:.3f}' if regression else o['label'] for o in out]


def _predictions(path: str) -> list[str]:
  with open(path, newline='', encoding='utf-8') as f:
    rows = list(csv.reader(f))
  column = rows[0].index('prediction')
  return [r[column] for r in rows[1:]]


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f'unexpected arguments {argv[1:]}')
  cli.check_paths(_WORKDIR.value, _EXPORT.value, _INPUT.value)
  import transformers
  transformers.logging.set_verbosity(transformers.logging.CRITICAL)  # (the pipeline's note
  #                                                   that it does not list the class it runs)
  with open(os.path.join(_EXPORT.value, 'config.json')) as f:
    inputs = json.load(f).get('electra_jax_inputs') or {}
  if inputs.get('outputs') not in onnx_predict.SERVED:
    raise cli.UserError(f'--export {_EXPORT.value} is not the --onnx export of a classification '
                        'or regression fine-tuning; export one with launch/export.py --onnx')
  regression = inputs['outputs'] == 'number'
  pipe = transformers.pipeline('text-classification', model=_EXPORT.value,
                               trust_remote_code=True, device='cpu')
  seconds: dict[str, list[float]] = {'predict.py (JAX)': [], 'HF pipeline (PyTorch)': [],
                                     'ONNX Runtime': []}
  with tempfile.TemporaryDirectory() as tmp:
    for _ in range(_REPEATS.value):
      got = {}
      for name, run in (('predict.py (JAX)', lambda: _ours(os.path.join(tmp, 'ours.csv'))),
                        ('HF pipeline (PyTorch)', lambda: _hf(pipe, inputs, regression)),
                        ('ONNX Runtime', lambda: _onnx(os.path.join(tmp, 'onnx.csv')))):
        s, got[name] = run()
        seconds[name].append(s)
      if not regression:
        same = [sum(a == b for a, b in zip(got['predict.py (JAX)'], g)) for g in got.values()]
        assert min(same) == len(got['ONNX Runtime']), same
  rows = len(got['ONNX Runtime'])
  print(f'{_INPUT.value}: {rows:,} rows, {_REPEATS.value} runs of each way, batch '
        f'{_BATCH.value} (tokenizing included; the median run)')
  for name, runs in seconds.items():
    median = statistics.median(runs)
    print(f'  {name:24s} {rows / median:9,.0f} rows/s  ({median:.2f} s; runs '
          f'{", ".join(f"{r:.2f}" for r in runs)})')
  if not regression:
    print('  the same prediction on every row, in each run')


if __name__ == '__main__':
  cli.run(main)
