"""TensorFlow Datasets on a fresh install: a dataset is downloaded, prepared and read (a tiny
builder whose file a server on 127.0.0.1 serves), and a download that finds no network is one
sentence that leaves nothing behind, in the data folder or the workdir (the README's GLUE command).
"""

import functools
import http.server
import os
import tempfile
import threading

import pytest

from conftest import ROOT, load_config
from electra_jax import UserError
from electra_jax.data import corpus as corpus_lib
from electra_jax.data import tfds as tfds_lib
from electra_jax.storage import tf_import

tfds = tf_import.datasets()

TEXT = ('The first document has two sentences. It is short.\n\n'
        'The second document is here. It has its own words.\n')


class ElectraTinyText(tfds.core.GeneratorBasedBuilder):
  """One text file, downloaded from `URL`, one document per paragraph."""
  VERSION = tfds.core.Version('1.0.0')
  URL = ''

  def _info(self):
    features = tfds.features.FeaturesDict({'text': tfds.features.Text()})
    return tfds.core.DatasetInfo(builder=self, features=features)

  def _split_generators(self, dl_manager):
    return {'train': self._generate_examples(dl_manager.download(self.URL))}

  def _generate_examples(self, path):
    with open(path, encoding='utf-8') as f:
      for i, paragraph in enumerate(f.read().split('\n\n')):
        yield i, {'text': paragraph}


@pytest.fixture()
def server(tmp_path):
  """An HTTP server on 127.0.0.1 serving a folder holding corpus.txt; yields its address."""
  served = tmp_path / 'served'
  served.mkdir()
  (served / 'corpus.txt').write_text(TEXT)
  handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
  httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
  thread = threading.Thread(target=httpd.serve_forever, daemon=True)
  thread.start()
  yield f'http://127.0.0.1:{httpd.server_address[1]}'
  httpd.shutdown()
  httpd.server_close()


def _offline(monkeypatch):
  """No connection leaves this process: every request goes to a proxy port nobody listens on,
  and TFDS's downloader gives up at the first refusal instead of after ten retries (3.4 min)."""
  from tensorflow_datasets.core.download import downloader
  for name in ('NO_PROXY', 'no_proxy'):
    monkeypatch.delenv(name, raising=False)
  for name in ('HTTPS_PROXY', 'https_proxy', 'HTTP_PROXY', 'http_proxy'):
    monkeypatch.setenv(name, 'http://127.0.0.1:9')
  monkeypatch.setattr(downloader, 'MAX_RETRIES', 0)


def _tfds_temporary_folders() -> set:
  return {n for n in os.listdir(tempfile.gettempdir()) if 'tfds' in n}


@pytest.mark.fast
def test_a_tfds_corpus_is_downloaded_prepared_and_read(tmp_path, server, monkeypatch):
  monkeypatch.setattr(ElectraTinyText, 'URL', f'{server}/corpus.txt')
  source = corpus_lib.Source('tfds:electra_tiny_text', tfds_data_dir=str(tmp_path / 'tfds'))
  documents = list(source.documents())
  assert documents == [['The first document has two sentences.', 'It is short.'],
                       ['The second document is here.', 'It has its own words.']]


@pytest.mark.fast
def test_a_tfds_corpus_without_a_network_is_one_sentence_and_leaves_nothing(tmp_path,
                                                                             monkeypatch):
  _offline(monkeypatch)
  monkeypatch.setattr(ElectraTinyText, 'URL', 'https://example.org/corpus.txt')
  data_dir = tmp_path / 'tfds'
  temporary = _tfds_temporary_folders()
  source = corpus_lib.Source('tfds:electra_tiny_text', tfds_data_dir=str(data_dir))
  with pytest.raises(ValueError, match=r'^TFDS could not download electra_tiny_text: no connection '
                                       r'to example.org from this machine; prepare it where there '
                                       r'is one .* set TFDS_DATA_DIR=DIR$'):
    list(source.documents())
  assert not data_dir.exists() and _tfds_temporary_folders() == temporary


def test_the_readme_glue_command_without_a_network_is_one_sentence_and_leaves_nothing(
    tmp_path, monkeypatch, pretrained):
  """Said at once: TFDS is not asked to download (its retries took 3.4 min) when none of the
  dataset's hosts answers; nothing is left in the data folder, the workdir or the system's
  temporary folder."""
  from electra_jax.finetune import run
  _offline(monkeypatch)
  load = tfds.load
  def looks_only(*args, download=True, **kwargs):  # whether it is prepared, yes; a download, no
    if download:
      raise RuntimeError(f'tfds.load{args} was asked to download')
    return load(*args, download=False, **kwargs)
  monkeypatch.setattr(tfds, 'load', looks_only)
  temporary = _tfds_temporary_folders()
  cfg = load_config(os.path.join(ROOT, 'configs', 'finetune', 'glue.py'))
  data_dir, workdir = tmp_path / 'tfds', tmp_path / 'glue_sst2'
  data_dir.mkdir()
  (data_dir / 'kept.txt').write_text('a file of the user')
  cfg.init, cfg.task.tfds_data_dir = pretrained, str(data_dir)
  with pytest.raises(UserError, match=r'^TFDS could not download glue/sst2: no connection to '
                                      r'dl.fbaipublicfiles.com from this machine; .*'
                                      r'--config.task.tfds_data_dir .*--config.task.glue_dir$'):
    run.finetune(cfg, str(workdir), log=lambda *_: None)
  assert not workdir.exists()
  assert sorted(os.listdir(data_dir)) == ['kept.txt']
  assert _tfds_temporary_folders() == temporary


@pytest.mark.fast
def test_a_failed_attempt_leaves_no_folder_of_tfds_in_the_temporary_folder(tmp_path, monkeypatch):
  """TFDS makes a `tmp*tfds` folder in TMPDIR (or the system's temporary folder) on each try to
  copy a prepared dataset's description from its bucket, whether the load fails or not."""
  (tmp_path / 'tmp').mkdir()
  monkeypatch.setenv('TMPDIR', str(tmp_path / 'tmp'))
  monkeypatch.setattr(tempfile, 'tempdir', None)  # (gettempdir reads TMPDIR again)
  outcome = {}
  def load(*args, download=True, **kwargs):
    tempfile.mkdtemp('tfds')  # dataset_info.initialize_from_bucket's
    if not download:
      raise AssertionError('not prepared')
    if outcome.get('fail'):
      raise ConnectionError("HTTPSConnectionPool(host='storage.googleapis.com', port=443)")
    return 'a dataset'
  monkeypatch.setattr(tfds, 'load', load)
  monkeypatch.setattr(tfds_lib, '_check_reachable', lambda *args: None)
  assert tfds_lib.load('glue/sst2', 'train', str(tmp_path / 'tfds'), 'hint') == 'a dataset'
  assert os.listdir(tmp_path / 'tmp') == []
  outcome['fail'] = True
  with pytest.raises(ValueError, match=r'^TFDS could not download glue/sst2: no connection to '
                                       r'storage.googleapis.com from this machine'):
    tfds_lib.load('glue/sst2', 'train', str(tmp_path / 'tfds'), 'point at it')
  assert os.listdir(tmp_path / 'tmp') == []
