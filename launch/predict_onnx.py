"""Predict on a new file from an ONNX export alone: ONNX Runtime, no JAX, PyTorch or TensorFlow.

    python launch/export.py --workdir=/tmp/mine --out=/tmp/mine_onnx --onnx
    python launch/predict_onnx.py --model=/tmp/mine_onnx --input=new.csv
        -> /tmp/mine_onnx/predictions/new.csv: index, the input's columns, prediction,
           p(<each class>): the columns of launch/predict.py from the workdir

--model is the --out folder of launch/export.py --onnx of a classification or regression
fine-tuning: its config.json says how to read the file (the fine-tuning's columns and length), its
tokenizer.json tokenizes, its onnx/model.onnx predicts. The command imports only ONNX Runtime, HF
tokenizers, NumPy and the package's file reading (launch/predict.py's flags load JAX), so it runs
where none of the training stack is installed: pip install onnxruntime tokenizers numpy, and this
package without its dependencies. An existing output is kept unless --overwrite; the input is never
replaced.
"""

import argparse
import sys

from electra_jax import UserError
from electra_jax.apps import onnx_predict


def main(argv=None) -> int:
  """One sentence and exit 2 for a mistake, 130 when interrupted."""
  parser = argparse.ArgumentParser(prog='predict_onnx.py', description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--model', required=True, help='the --out folder of launch/export.py --onnx '
                      'of a fine-tuning')
  parser.add_argument('--input', required=True, help='the file to predict on (.csv, .tsv, .jsonl),'
                      ' read as the fine-tuning read its files')
  parser.add_argument('--output', help="the predictions' file (default: <model>/predictions/<the "
                      "input's name>; .tsv, .csv or .jsonl)")
  parser.add_argument('--overwrite', action='store_true', help='replace an existing --output')
  parser.add_argument('--batch_size', type=int, default=32, help='rows a call of the graph')
  args = parser.parse_args(argv)
  try:
    if args.batch_size < 1:
      raise UserError(f'--batch_size is {args.batch_size}; give a positive number of rows')
    onnx_predict.predict(args.model, args.input, args.output, args.overwrite, args.batch_size,
                         log=lambda line: print(line, flush=True))
  except UserError as e:
    print(f'error: {e}', file=sys.stderr, flush=True)
    return 2
  except KeyboardInterrupt:
    print('interrupted: nothing was written', file=sys.stderr, flush=True)
    return 130
  return 0


if __name__ == '__main__':
  sys.exit(main())
