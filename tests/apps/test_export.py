"""Where an export goes: a new folder, an empty one (a symbolic link to it, the current folder:
into it, the folder kept), never a link that leads nowhere; --check asked of a machine without HF
transformers refused before anything is written."""

import json
import os
import subprocess
import sys

import pytest

from conftest import CHILD_ENV, HAS_ONNX, ROOT
from electra_jax import UserError
from electra_jax.apps import export as export_lib


def _quiet(*_):
  pass


def test_an_export_into_links_and_the_current_folder_or_refused_for_a_link_to_nowhere(
    tmp_path, pretrained, monkeypatch):
  target = tmp_path / 'target'
  target.mkdir()
  os.symlink(target, tmp_path / 'link')
  done = export_lib.export(pretrained, str(tmp_path / 'link'), log=_quiet)
  assert done.folders == [str(target / 'discriminator'), str(target / 'generator')]
  assert os.path.islink(tmp_path / 'link') and sorted(os.listdir(target)) == [
      'discriminator', 'generator']
  assert os.path.isfile(tmp_path / 'link' / 'discriminator' / 'config.json')
  os.symlink(tmp_path / 'nowhere', tmp_path / 'dangling')
  os.symlink(tmp_path / 'loop_b', tmp_path / 'loop_a')
  os.symlink(tmp_path / 'loop_a', tmp_path / 'loop_b')
  for name, why in (('dangling', 'No such file or directory: .*nowhere'),
                    ('loop_a', 'a loop of links: .*loop_b')):
    with pytest.raises(UserError, match=rf'^--out .*{name} is a symbolic link that leads nowhere '
                       rf'\({why}\); give a new folder, or a link to an empty one'):
      export_lib.export(pretrained, str(tmp_path / name), log=_quiet)
  assert not os.path.exists(tmp_path / 'nowhere')
  here = tmp_path / 'here'
  here.mkdir()
  inode = os.stat(here).st_ino
  monkeypatch.chdir(here)
  done = export_lib.export(pretrained, '.', log=_quiet)
  assert os.stat(here).st_ino == inode and sorted(os.listdir(here)) == ['discriminator',
                                                                        'generator']
  assert done.folders == [str(here / 'discriminator'), str(here / 'generator')]
  assert sorted(os.listdir(tmp_path)) == ['dangling', 'here', 'link', 'loop_a', 'loop_b',
                                          'target']
  with pytest.raises(UserError, match=r'exists and is not empty; give a new folder'):
    export_lib.export(pretrained, '.', log=_quiet)


@pytest.mark.fast
@pytest.mark.parametrize('flag, missing, message', [
    ('--check', ('transformers', 'torch'),
     'error: --check loads the export in HF transformers, and torch and transformers are not '
     'installed; pip install -e ".[test]" (torch==2.13.0 and transformers), or leave --check out '
     '(nothing was written)'),
    ('--onnx', ('onnx', 'onnxscript', 'onnxruntime', 'torch', 'transformers'),
     "error: --onnx writes the model through PyTorch's ONNX exporter and checks it in ONNX "
     'Runtime, and onnx, onnxscript, onnxruntime, torch, transformers are not installed; pip '
     'install -e ".[onnx]", or leave --onnx out (nothing was written)')])
def test_check_without_transformers_is_refused_before_the_export_is_written(tmp_path, flag,
                                                                           missing, message):
  """The command then runs whole once they are installed (it used to write the export and stop,
  and the same command after `pip install` was refused for the folder it had written)."""
  out = tmp_path / 'hf'
  workdir = tmp_path / 'run'
  workdir.mkdir()
  (workdir / 'config.json').write_text('{}')
  code = ('import runpy, sys\n'
          + ''.join(f'sys.modules["{m}"] = None\n' for m in missing)  # as where not installed
          + f'sys.argv = ["export.py", "--workdir={workdir}", "--out={out}", "{flag}"]\n'
          f'runpy.run_path({os.path.join(ROOT, "launch", "export.py")!r}, run_name="__main__")\n')
  done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=ROOT,
                        env=CHILD_ENV, timeout=300, check=False)
  assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == message, (
      done.stderr[-2000:])
  assert not out.exists()


@pytest.mark.fast
@pytest.mark.skipif(not HAS_ONNX, reason='needs the onnx extra (in the test extra)')
def test_predictions_from_an_onnx_folder_refuse_what_it_cannot_serve(tmp_path):
  """launch/predict_onnx.py: one sentence and exit 2 for a folder that is no export, the export
  of a pre-training, of a kind its loop does not serve, or without its ONNX graph; nothing
  written."""
  dev = tmp_path / 'dev.csv'
  dev.write_text('text,label\na cat,yes\n')
  folder = tmp_path / 'model'
  folder.mkdir()
  config = folder / 'config.json'
  inputs = {'text_a': 'text', 'text_b': '', 'label': 'label', 'header': True,
            'max_seq_length': 32}
  for written, message in [
      (None, f'--model {folder} holds no config.json; give the --out folder of launch/export.py '
             '--onnx of a fine-tuning'),
      ({'architectures': ['ElectraForPreTraining']},
       f'{folder} is not the export of a fine-tuning (its config.json names no '
       'electra_jax_inputs); export the fine-tuning\'s workdir with launch/export.py --onnx, then '
       'predict from that folder'),
      ({'electra_jax_inputs': {**inputs, 'kind': 'tagging', 'outputs': ''}},
       f'{folder} holds a tagging model, and predictions from its ONNX graph alone serve '
       "classification and regression; predict with launch/predict.py from its fine-tuning's "
       'workdir'),
      ({'electra_jax_inputs': {**inputs, 'kind': 'classification', 'outputs': 'classes'}},
       f'{folder / "onnx" / "model.onnx"} does not exist; export the fine-tuning with '
       'launch/export.py --onnx')]:
    if written is not None:
      config.write_text(json.dumps(written))
    done = subprocess.run([sys.executable, os.path.join(ROOT, 'launch', 'predict_onnx.py'),
                           f'--model={folder}', f'--input={dev}'], capture_output=True,
                          text=True, cwd=ROOT, env=CHILD_ENV, timeout=300, check=False)
    assert done.returncode == 2 and done.stderr.strip() == f'error: {message}', done.stderr
    assert sorted(os.listdir(folder)) == (['config.json'] if written else [])
