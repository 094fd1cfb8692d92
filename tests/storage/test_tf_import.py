"""The one importer of TensorFlow: quiet, off the accelerators, and without Triton beside it
(Triton's compiled core imported after TensorFlow's ends the process in a segmentation fault:
TensorFlow 2.21 and Triton 3.7, pulled in by torch's CUDA builds through transformers)."""

import subprocess
import sys

import pytest

from conftest import CHILD_ENV, ROOT, needs_hf

AFTER_TENSORFLOW = '''
import importlib.util, sys
from electra_jax.storage import tf_import
tf = tf_import.tensorflow()
assert tf.config.get_visible_devices('GPU') == []
assert importlib.util.find_spec('triton') is None, 'triton importable beside TensorFlow'
try:
  import triton
except ImportError:
  pass
else:
  raise AssertionError('triton imported beside TensorFlow')
print('ok')
'''


def _child(code: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=ROOT,
                        env=CHILD_ENV, timeout=300, check=False)


@pytest.mark.fast
def test_a_process_with_tensorflow_has_no_triton_and_one_that_imported_it_first_keeps_it():
  done = _child(AFTER_TENSORFLOW)
  assert done.returncode == 0 and done.stdout.split() == ['ok'], done.stderr[-3000:]
  done = _child('import sys, types\nsys.modules["triton"] = types.ModuleType("triton")\n'
                'from electra_jax.storage import tf_import\ntf_import.tensorflow()\n'
                'import triton\nassert isinstance(triton, types.ModuleType)\nprint("ok")')
  assert done.returncode == 0 and done.stdout.split() == ['ok'], done.stderr[-3000:]


@needs_hf
@pytest.mark.fast
def test_transformers_electra_and_torch_dynamo_load_after_tensorflow():
  """The import that crashed the test workers on Python 3.12 (torch's CUDA build brings
  Triton): TensorFlow first, then HF's ELECTRA and torch._dynamo, in one process."""
  done = _child('from electra_jax.storage import tf_import\ntf_import.tensorflow()\n'
                'import torch._dynamo\nfrom transformers import ElectraForPreTraining\n'
                'print("ok")')
  assert done.returncode == 0 and done.stdout.split() == ['ok'], (done.returncode,
                                                                  done.stderr[-3000:])
