"""Shared fixtures. Eight fake CPU devices are set up before JAX loads, so sharded code is
tested."""

import contextlib
import importlib.util
import os
import re
import subprocess
import sys

# The tests compile XLA's CPU code for speed of compiling: LLVM at optimization level 0, without the
# fusion emitters, loop unrolling or the SLP vectorizer. The test model's train step compiles in
# 2.5-3.5 s instead of 8.6-9.2 s and computes the same loss to the bit (tests/compile_time.py); the
# suite spends about half its time compiling. (These flags once stalled the SQuAD 2.0 fine-tuning
# test in an all-reduce: that was steps queued ahead on the 8 fake devices, which loop.queue_ahead
# no longer does.) PYTEST_XLA_DEFAULTS=1 compiles with XLA's defaults, as runs do; XLA_FLAGS of your
# own come after these (XLA takes a flag's last value). Child processes inherit them; those that set
# XLA_FLAGS themselves start from TEST_XLA_FLAGS.
# XLA aborts the process on a flag it does not know, and its releases drop flags (jax 0.12's XLA
# has no --xla_cpu_use_fusion_emitters): the flags are tried in a child first, and those the
# installed XLA refuses are left out (once a session: the workers and children inherit the answer).


def known_to_xla(flags: str) -> str:
  """`flags` without those the installed XLA does not know (it names them all as it aborts)."""
  kept = flags.split()
  for _ in range(3):
    out = subprocess.run([sys.executable, '-c', 'import jax; jax.devices("cpu")'],
                         env={**os.environ, 'XLA_FLAGS': ' '.join(kept), 'JAX_PLATFORMS': 'cpu'},
                         capture_output=True, text=True, timeout=300, check=False)
    unknown = re.search(r'Unknown flags? in XLA_FLAGS: (.*)', out.stderr)
    if out.returncode == 0 or not unknown:
      assert out.returncode == 0, f'JAX did not start with XLA_FLAGS={kept}: {out.stderr[-2000:]}'
      return ' '.join(kept)
    kept = [f for f in kept if f not in unknown.group(1).split()]
  raise AssertionError(f'XLA kept refusing flags of {flags!r}: {out.stderr[-2000:]}')


if os.environ.get('PYTEST_XLA_DEFAULTS') == '1':
  TEST_XLA_FLAGS = ''
elif 'ELECTRA_TEST_XLA_FLAGS' in os.environ:  # a worker, or a child, of a session that tried them
  TEST_XLA_FLAGS = os.environ['ELECTRA_TEST_XLA_FLAGS']
else:
  TEST_XLA_FLAGS = os.environ['ELECTRA_TEST_XLA_FLAGS'] = known_to_xla(
      '--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false '
      '--xla_backend_extra_options=xla_cpu_disable_loop_unrolling,xla_cpu_disable_slp_vectorizer')
os.environ['XLA_FLAGS'] = ' '.join(filter(None, [TEST_XLA_FLAGS, os.environ.get('XLA_FLAGS'),
                                                 '--xla_force_host_platform_device_count=8']))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# Every wing's test folder on the path: a wing's tests use helpers of another's (the synthetic
# task of test_finetune, the step watcher of test_train), also when run alone
# (`pytest tests/tools`).
sys.path.extend(sorted(e.path for e in os.scandir(os.path.dirname(os.path.abspath(__file__)))
                       if e.is_dir() and not e.name.startswith(('_', '.'))))

import jax
import pytest

import xdist_once
from electra_jax.config.pretraining import parse
from electra_jax import cli
from electra_jax.config.pretraining import default_config
from electra_jax.data import prepare as prepare_lib
from electra_jax.data import records
from electra_jax.platform import host_memory

host_memory.keep_freed()  # as the launch scripts do, before JAX's backend starts its threads
assert jax.device_count() == 8, 'tests expect 8 fake CPU devices (XLA_FLAGS was set too late)'
# Many tests compile the same small programs: a persistent cache compiles each once per session.
jax.config.update('jax_compilation_cache_dir', os.path.join(
    os.environ.get('PYTEST_JAX_CACHE', '/tmp'), f'electra_jax_test_cache_{os.getuid()}'))
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
cli.fewer_collections()  # as the launch scripts do: tracing is the Python side of each compile

WORDS = ('the cat sat on a mat while dogs ran past green trees near old stone walls and birds sang '
         'songs about rivers that flow into deep blue seas under bright summer skies where quiet '
         'people walk slowly through narrow streets carrying heavy baskets of fresh bread cheese '
         'apples and warm soup for their hungry children who play games with wooden toys beside '
         'small fires during long winter evenings when snow covers every roof in the village '
         'kings build castles merchants sell silk farmers plant wheat sailors mend ropes painters '
         'mix colours doctors heal wounds teachers explain numbers poets write verses').split()


# The fast subset (pytest -m fast) is the edit loop's: none of its tests pre-trains (the session's
# pre-trained workdir, and what is made from it, take most of a minute); short child processes
# (a launch script's one-line error, a signal) are allowed.
PRE_TRAINED_FIXTURES = ('pretrained',)


# The bound on one test (pytest-timeout: setup.cfg's `timeout` for every test, this for a fast one,
# whose subset is the edit loop's): a test past it has its threads' stacks printed and its worker
# ended, and is reported failed; the run goes on (xdist_once.py: the test is not run again).
FAST_TIMEOUT_S = 240


def pytest_collection_modifyitems(config, items):
  """Refuses a `fast` test that needs a pre-training (its fixtures, and theirs); bounds each fast
  test by FAST_TIMEOUT_S (unless it states its own)."""
  del config
  heavy = [item.nodeid for item in items if item.get_closest_marker('fast')
           and set(PRE_TRAINED_FIXTURES) & set(getattr(item, 'fixturenames', ()))]
  if heavy:
    raise pytest.UsageError(f'tests marked fast need a pre-training ({", ".join(heavy[:5])}); '
                            'take the fast mark off them, or the pre-trained fixture')
  for item in items:
    if item.get_closest_marker('fast') and not item.get_closest_marker('timeout'):
      item.add_marker(pytest.mark.timeout(FAST_TIMEOUT_S))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
  """A test that ends its worker (a crash, a timeout) is reported once, not run again."""
  return xdist_once.make_scheduler(config, log)


_FAULTS_NOT_RUN = []  # (test, why) of the fault tests this run skipped


def pytest_runtest_logreport(report):
  if report.skipped and 'fault' in report.keywords:
    reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    _FAULTS_NOT_RUN.append((report.nodeid, reason.removeprefix('Skipped: ')))


def pytest_terminal_summary(terminalreporter):
  """A fault test (a full disk, a read-only folder: made for real, in a namespace of its own) that
  could not run here is named at the end: the run passes without it, so it says so."""
  if _FAULTS_NOT_RUN:
    terminalreporter.write_sep('!', f'{len(_FAULTS_NOT_RUN)} fault test(s) did not run on this '
                               'machine: what they check is unchecked here', red=True)
    for nodeid, reason in _FAULTS_NOT_RUN:
      terminalreporter.write_line(f'  {nodeid}: {reason}')


def write_corpus(path: str, num_docs: int = 60, seed: int = 0):
  """A small text corpus: documents of sentences, blank lines between documents."""
  import random
  rng = random.Random(seed)
  with open(path, 'w') as f:
    for d in range(num_docs):
      for _ in range(rng.randint(2, 12)):
        f.write(' '.join(rng.choice(WORDS) for _ in range(rng.randint(3, 14))).capitalize() +
                f' number {d}.\n')
      f.write('\n')
  return path


# The test model and its optimizer: test_config() and the config files of launched processes
# (run_config_file) both take these, so one compiled train step serves the test process and its
# children. The decay horizon is fixed: the schedule's constants are part of the compiled step, so
# runs of any length (and resumed runs that train longer) share one program.
TEST_MODEL = {
    'model': dict(vocab_size=96, embedding_size=16, hidden_size=32, num_layers=1,
                  max_position_embeddings=32, num_heads=2, generator_hidden_fraction=0.5),
    'data': dict(max_seq_length=32, batch_size=16, shuffle_buffer=100),
    'optimizer': dict(learning_rate=1e-3, warmup_steps=2, decay_steps=1000),
}


def with_fields(c, overrides: dict):
  """`c` with each dotted field of `overrides` set ({'model.num_layers': 2, ...})."""
  for key, value in overrides.items():
    target = c
    *path, last = key.split('.')
    for p in path:
      target = target[p]
    setattr(target, last, value)
  return c


def test_config(**overrides):
  """A very small pre-training config (fast to compile) for unit and integration tests."""
  c = default_config()
  for section, values in TEST_MODEL.items():
    c[section].update(**values)
  c.data.eval_fraction = 0.2
  c.train_steps = 4
  c.log_every = 2
  c.eval_batches = 2
  return with_fields(c, overrides)


test_config.__test__ = False  # not a test


# The objectives' tests train without dropout on batches of 32: the microbatching test, the learning
# test and the end-to-end runs of other objectives compile one step per objective between them.
OBJECTIVE_RUN = {'model.dropout_rate': 0.0, 'model.attention_dropout_rate': 0.0,
                 'data.batch_size': 32, 'optimizer.warmup_steps': 0,
                 'optimizer.learning_rate': 2e-3}


# The test model on the modern backbone: two layers (global, local), a window of 8 of the 32
# tokens, a generator reading the shared table through a projection (the objectives that ask for
# a generator as wide as the discriminator get none).
MODERN = {'model.backbone': 'modern', 'model.embedding_size': 32, 'model.num_layers': 2,
          'model.local_window': 8, 'model.layer_norm_eps': 1e-5}


def objective_config(name: str, **overrides):
  """test_config() with OBJECTIVE_RUN and `overrides`, trained with objective `name`, the model
  fitted to it."""
  from electra_jax.objectives import registry as objectives
  c = test_config(**{'objective.name': name, **OBJECTIVE_RUN, **overrides})
  return objectives.fit_model_config(c, lambda *_: None)


def cat_texts(path, n: int, seed: int) -> str:
  """A CSV of `n` texts of 1-4 of WORDS, labelled 'yes' where 'cat' is among them (a task a
  short fine-tuning learns); its path."""
  import numpy as np
  rng = np.random.default_rng(seed)
  others = [w for w in WORDS if w != 'cat']
  with open(path, 'w') as f:
    f.write('text,label\n')
    for _ in range(n):
      words = list(rng.choice(others, int(rng.integers(1, 4))))
      if rng.random() < 0.5:
        words.insert(int(rng.integers(len(words) + 1)), 'cat')
      f.write(f'{" ".join(words)},{"yes" if "cat" in words else "no"}\n')
  return str(path)


def topic_dev_examples(seed: int = 0) -> int:
  """The dev examples of the built-in topic task for a pre-training of `seed`: passages of the
  running Python's own documentation, so their number differs between Pythons (565 on 3.11)."""
  from electra_jax.finetune.inputs import tasks
  return len(tasks.load_builtin_topic(seed)['dev'])


def squared_norm(tree) -> float:
  """The sum of squares of every entry of a tree of arrays, in float64 (0 exactly: no gradient)."""
  import numpy as np
  return float(sum(np.sum(np.square(np.asarray(x, np.float64))) for x in jax.tree.leaves(tree)))


def assert_same_states(config, workdirs, step: int, message: str = ''):
  """The train states the runs of `config` in `workdirs` saved at `step` are bit-identical."""
  import numpy as np
  from electra_jax.data.tokenizer import SPECIAL
  from electra_jax.pretraining import setup as pretrain_setup
  from electra_jax.storage import fs
  from electra_jax.train import checkpoint as checkpoint_lib
  from electra_jax.train import step as step_lib
  setup = pretrain_setup.build_setup(parse(config), SPECIAL)
  states = []
  for workdir in workdirs:
    ckpt = checkpoint_lib.Checkpointer(fs.join(workdir, 'checkpoints'))
    states.append(ckpt.restore(step, jax.jit(lambda: step_lib.init_state(setup))())[0])
    ckpt.close()
  for other in states[1:]:
    for a, b in zip(jax.tree.leaves(states[0]), jax.tree.leaves(other)):
      np.testing.assert_array_equal(a, b, err_msg=message)


def record_config_reads(monkeypatch, module, edge: str, which=lambda config: True) -> dict:
  """Records every read of an ml_collections config that `which(config)` accepts by a function of
  the package, by that function ('file:function'), while `module.<edge>` (the function that types
  the config) has not yet returned ('edge') and after ('below'); each call of the edge starts the
  'edge' phase again. Returns {'edge': set, 'below': set}."""
  import ml_collections
  package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + '/electra_jax'
  readers: dict[str, set] = {'edge': set(), 'below': set()}
  phase = ['edge']

  def recorded(name):
    real = getattr(ml_collections.ConfigDict, name)

    def read(self, *args, **kwargs):
      code = sys._getframe(1).f_code
      if code.co_filename.startswith(package) and which(self):
        readers[phase[0]].add(f'{os.path.relpath(code.co_filename, package)}:{code.co_name}')
      return real(self, *args, **kwargs)
    return read

  for name in ('__getattr__', '__getitem__', '__contains__', 'items', 'keys', 'get', 'to_json',
               'to_dict', 'copy_and_resolve_references'):
    monkeypatch.setattr(ml_collections.ConfigDict, name, recorded(name))
  typing = getattr(module, edge)

  def typed_once(*args, **kwargs):
    phase[0] = 'edge'
    out = typing(*args, **kwargs)
    phase[0] = 'below'
    return out
  monkeypatch.setattr(module, edge, typed_once)
  return readers


def poisoned_setup(config, bad_steps, build=None):
  """The real setup of `config` (typed: config/pretraining.py's parse), with a loss that is NaN at
  the given (1-based) training steps (the tests that need a non-finite step all poison step 3: one
  compiled program serves them)."""
  import dataclasses
  import jax.numpy as jnp
  from electra_jax.pretraining import setup as pretrain_setup
  from electra_jax.train import step as step_lib
  from electra_jax.data.tokenizer import SPECIAL
  setup = (build or pretrain_setup.build_setup)(config, SPECIAL)
  train_key = step_lib._keys(config.seed)[1]
  bad = jnp.stack([jax.random.key_data(jax.random.fold_in(train_key, s - 1)) for s in bad_steps])

  def loss_fn(params, batch, rng, deterministic=False):
    loss, sums = setup.loss_fn(params, batch, rng, deterministic)
    hit = jnp.any(jnp.all(bad == jax.random.key_data(rng), axis=-1))
    return jnp.where(hit, jnp.nan, loss), sums

  return dataclasses.replace(setup, loss_fn=loss_fn)


@contextlib.contextmanager
def cpu_burner(per_core: int = 2):
  """Loads the machine as a shared host is loaded: `per_core` spinning processes per core."""
  procs = [subprocess.Popen([sys.executable, '-c', 'while True: pass'])
           for _ in range(per_core * (os.cpu_count() or 1))]
  try:
    yield
  finally:
    for p in procs:
      p.kill()
      p.wait()


def run_config_file(tmp_path, records_dir, **fields):
  """A config file for launch/train.py: TEST_MODEL on `records_dir`, with `fields` set (its train
  step is test_config()'s: one compilation serves both)."""
  path = tmp_path / f'run_config_{len(list(tmp_path.glob("run_config*.py")))}.py'
  lines = ['from electra_jax.config import default_config', 'def get_config():',
           '  c = default_config()',
           *(f'  c.{section}.update(**{values!r})' for section, values in TEST_MODEL.items()),
           f'  c.data.records = {records_dir!r}', '  c.update(log_every=1, eval_batches=1)',
           f'  c.update(**{fields!r})', '  return c']
  path.write_text('\n'.join(lines) + '\n')
  return path


def script(name: str) -> list[str]:
  """The command line that runs `name` ('train.py'): launch/'s script, or the lab's module
  (benchmarks/, run from the checkout: `python -m benchmarks.<name>`, in a process whose working
  folder is ROOT)."""
  if os.path.exists(os.path.join(ROOT, 'launch', name)):
    return [sys.executable, os.path.join(ROOT, 'launch', name)]
  assert os.path.exists(os.path.join(ROOT, 'benchmarks', name)), name
  return [sys.executable, '-m', f'benchmarks.{name[:-3]}']


def launch_command(config_file, workdir):
  return [sys.executable, os.path.join(ROOT, 'launch', 'train.py'), f'--config={config_file}',
          f'--workdir={workdir}']


# The HF parity peers (torch, transformers) come with the test extra; without them (the newest
# JAX's run of .ci/run, on a Python where pip takes torch's CUDA build) their tests skip.
HAS_HF = all(importlib.util.find_spec(m) for m in ('torch', 'transformers'))
needs_hf = pytest.mark.skipif(not HAS_HF, reason='needs the test extra\'s torch and transformers: '
                              'pip install -e ".[test]"')
# ... and the ONNX export's (the onnx extra, in the test extra)
HAS_ONNX = HAS_HF and all(importlib.util.find_spec(m) for m in ('onnx', 'onnxscript',
                                                                 'onnxruntime'))


def assert_onnx_agrees(checked: dict):
  """What export.verify found of an export's ONNX graph in ONNX Runtime: our outputs within 1e-4
  at two shapes, neither the one the export traced (6 rows of 8 tokens; 3 x 2 for multiple
  choice)."""
  onnx = checked['onnx']
  assert onnx['agrees'] and onnx['max_abs_diff'] < 1e-4, onnx
  assert len(set(onnx['shapes'])) == 2 and not {'6x8', '3x2x8'} & set(onnx['shapes']), onnx

# Child processes share the session's compilation cache (each would otherwise compile afresh).
CHILD_ENV = {**os.environ, 'JAX_COMPILATION_CACHE_DIR': jax.config.jax_compilation_cache_dir,
              'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0'}


def load_config(path):
  import importlib.util
  spec = importlib.util.spec_from_file_location('run_config', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


@pytest.fixture(scope='session')
def corpus_file(tmp_path_factory):
  return write_corpus(str(tmp_path_factory.mktemp('corpus') / 'corpus.txt'))


@pytest.fixture(scope='session')
def records_dir(tmp_path_factory, corpus_file):
  """One records folder (SentencePiece vocab of 96, 32-token examples) shared by the session."""
  out = str(tmp_path_factory.mktemp('records') / 'data')
  c = test_config()
  prepare_lib.records_folder(records.Settings(source=corpus_file,
                                              max_seq_length=c.data.max_seq_length,
                                   eval_fraction=c.data.eval_fraction, num_shards=4,
                                   vocab_size=c.model.vocab_size), out, log=lambda *_: None)
  return out


@pytest.fixture(scope='session')
def pretrained(tmp_path_factory, records_dir):
  """A pre-training workdir of the test model (4 steps), what fine-tuning tests start from."""
  from electra_jax.pretraining import run as pretrain
  workdir = str(tmp_path_factory.mktemp('pretrained') / 'w')
  pretrain.train_and_evaluate(test_config(**{'data.records': records_dir}), workdir,
                              log=lambda *_: None)
  return workdir


def start_gcs_server(folder, bucket: str = 'electra-test'):
  """A GCS server on 127.0.0.1 (tests/gcs_server.py: the gcp-storage-emulator package) with the
  bucket gs://<bucket>, its files in `folder`: (its process, {'env': the environment under which
  every client reaches it})."""
  import json
  import subprocess
  import time
  ready = folder / 'ready.json'
  log = open(folder / 'server.log', 'w')
  proc = subprocess.Popen([sys.executable, os.path.join(ROOT, 'tests', 'gcs_server.py'),
                           f'--ready_file={ready}', f'--bucket={bucket}'],
                          stdout=log, stderr=subprocess.STDOUT)
  log.close()
  deadline = time.time() + 60
  while not ready.exists():
    assert proc.poll() is None, (folder / 'server.log').read_text()[-2000:]
    assert time.time() < deadline, 'the GCS server did not start within 60 s'
    time.sleep(0.1)
  return proc, json.loads(ready.read_text())


@pytest.fixture(scope='session')
def gcs_server(tmp_path_factory):
  """The session's GCS server (start_gcs_server) with the bucket gs://electra-test; yields the
  environment under which every client reaches it."""
  proc, info = start_gcs_server(tmp_path_factory.mktemp('gcs'))
  yield info
  proc.terminate()
  proc.wait()
