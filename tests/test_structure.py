"""The package's shape: wings that import only the wings below them, imports at the top of each
module (but for the few heavy or optional libraries named here), no import cycles (registries are
tables of imported modules, so their loops show), each module importable alone, one TensorFlow
importer, no function longer than a screen, a fine-tuning task's kind named only in its own
module, the config declared once."""

import ast
import os
import re
import subprocess
import sys

from conftest import HAS_HF, ROOT
import pytest

from electra_jax.finetune.kinds import registry
from electra_jax.model import generators

PACKAGE = os.path.join(ROOT, 'electra_jax')
TF_OWNER = 'electra_jax.storage.tf_import'


def _modules() -> dict[str, str]:
  """{module name: file} of the package."""
  found = {}
  for folder, _, files in os.walk(PACKAGE):
    for name in files:
      if name.endswith('.py'):
        path = os.path.join(folder, name)
        parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
        if parts[-1] == '__init__':
          parts.pop()
        found['.'.join(parts)] = path
  return found


def _lab_modules() -> dict[str, str]:
  """{'benchmarks.<module>': file} of the lab beside the package (benchmarks/)."""
  folder = os.path.join(ROOT, 'benchmarks')
  return {f'benchmarks.{n[:-3]}': os.path.join(folder, n) for n in sorted(os.listdir(folder))
          if n.endswith('.py') and n != '__init__.py'}


def _imports(path: str, modules: dict) -> list[tuple[str, int]]:
  """(imported name, line) for every import in the file, at any depth (lazy imports count)."""
  found = []
  for node in ast.walk(ast.parse(open(path).read())):
    if isinstance(node, ast.Import):
      found += [(a.name, node.lineno) for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      submodules = [f'{node.module}.{a.name}' for a in node.names
                    if f'{node.module}.{a.name}' in modules]
      if len(submodules) < len(node.names):  # a name of the module itself, not a submodule
        found.append((node.module, node.lineno))
      found += [(m, node.lineno) for m in submodules]
  return found


def _graph() -> dict[str, set]:
  modules = _modules()
  return {name: {m for m, _ in _imports(path, modules) if m in modules and m != 'electra_jax'
                 and m != name}
          for name, path in modules.items()}


@pytest.mark.fast
def test_the_import_graph_has_no_cycle():
  graph = _graph()
  # Tarjan's strongly connected components: any component of two or more modules is a cycle.
  index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

  def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on_stack.add(v)
    for w in graph[v]:
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        cycles.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  assert not cycles, f'modules that import each other (directly or around a circle): {cycles}'
  assert len(graph) > 30 and sum(map(len, graph.values())) > 60  # the graph was really read


def _python(script: str):
  """Runs `script` in a fresh Python process with the package on its path."""
  return subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, cwd=ROOT,
                        env={**os.environ, 'PYTHONPATH': ROOT}, timeout=600, check=False)


# The wings, lowest first: each imports only wings before it (and itself); the package's
# __init__ (UserError, Stopped) is below them all, cli.py above them all.
WINGS = ('storage', 'platform', 'fields', 'data', 'model', 'convert', 'hardware', 'train',
         'objectives', 'config', 'pretraining', 'finetune', 'apps', 'cli')

# Imports that stay inside functions, each for a reason: heavy libraries a run may never need
# (TensorFlow, behind storage/tf_import.py; scikit-learn and SciPy for scores and the TF-IDF
# baseline; matplotlib to draw), the test and onnx extras (torch, transformers, onnxruntime), and
# the one name the config package computes when asked for (PEP 562), and Orbax's private metadata
# store (platform/private.py: loaded by the checkpointer alone). The commands of launch/ import
# everything at the top.
LAZY = ('tensorflow', 'tensorflow_datasets', 'sklearn', 'scipy', 'matplotlib', 'torch',
        'transformers', 'onnxruntime', 'electra_jax.config.pretraining', 'orbax.checkpoint._src',
        'apache_beam')


def _wing(module: str) -> str | None:
  parts = module.split('.')
  return parts[1] if len(parts) > 1 and parts[0] == 'electra_jax' else None


@pytest.mark.fast
def test_each_wing_imports_only_the_wings_below_it():
  rank = {w: i for i, w in enumerate(WINGS)}
  modules = _modules()
  assert {_wing(m) for m in modules} - {None} == set(WINGS), sorted({_wing(m) for m in modules})
  upward = sorted(f'{name}:{line} -> {m}' for name, path in modules.items()
                  for m, line in _imports(path, modules)
                  if m in modules and _wing(name) and _wing(m)
                  and rank[_wing(m)] > rank[_wing(name)])
  assert not upward, f'imports into a wing above: {upward}'
  # What it looks for: a model module importing the training loop is found.
  planted = ast.parse('from electra_jax.train import loop\n')
  found = [(n.module, n.names[0].name) for n in ast.walk(planted) if isinstance(n, ast.ImportFrom)]
  assert rank[_wing(f'{found[0][0]}.{found[0][1]}')] > rank['model']


def _reached(graph: dict, start: str) -> set:
  seen, todo = set(), [start]
  while todo:
    module = todo.pop()
    if module not in seen:
      seen.add(module)
      todo += graph.get(module, ())
  return seen


@pytest.mark.fast
def test_the_engine_and_a_fine_tuning_reach_no_objective_and_nothing_of_pretraining():
  """Every module of train/ (the engine) and the fine-tuning's driver reach, through every import
  (lazy ones too), no pre-training objective (of objectives/, only the declaration of the
  objective's fields, which a pre-training's saved config holds) and
  nothing of pretraining/: a fine-tuning runs the engine with a setup of its own."""
  graph = _graph()
  starts = [m for m in graph if _wing(m) == 'train'] + ['electra_jax.finetune.run']
  allowed = {'electra_jax.objectives', 'electra_jax.objectives.config'}
  found = {start: sorted(m for m in _reached(graph, start) if _wing(m) == 'pretraining' or (
      _wing(m) == 'objectives' and m not in allowed)) for start in starts}
  assert not any(found.values()), {k: v for k, v in found.items() if v}
  assert len(starts) > 8 and len(_reached(graph, 'electra_jax.finetune.run')) > 40
  # What it looks for: the pre-training's driver reaches every objective.
  assert {'electra_jax.objectives.electra', 'electra_jax.objectives.mlm'} <= _reached(
      graph, 'electra_jax.pretraining.run')


FINETUNE_ROOMS = ('inputs', 'kinds')  # lowest first; the wing's own modules (the driver) above


def _room(module: str) -> int:
  parts = module.split('.')
  return FINETUNE_ROOMS.index(parts[2]) if len(parts) > 2 and parts[2] in FINETUNE_ROOMS else (
      len(FINETUNE_ROOMS))


@pytest.mark.fast
def test_the_fine_tunings_rooms_import_only_the_rooms_before_them():
  """finetune/'s rooms: inputs/ (where labelled text comes from and how it becomes arrays), then
  kinds/ (each kind of task, its head and scores, their registry), then the driver (run, config,
  batches, search, ...): a room imports only itself and the rooms before it."""
  graph = _graph()
  ours = [m for m in graph if _wing(m) == 'finetune' and m != 'electra_jax.finetune']
  upward = sorted(f'{m} -> {d}' for m in ours for d in graph[m]
                  if _wing(d) == 'finetune' and d != 'electra_jax.finetune'
                  and _room(d) > _room(m))
  assert not upward, f'imports into a room above: {upward}'
  assert {_room(m) for m in ours} == {0, 1, 2}, ours  # every room holds modules
  # What it looks for: a kind importing the driver's batches.
  assert _room('electra_jax.finetune.batches') > _room('electra_jax.finetune.kinds.qa')


@pytest.mark.fast
def test_imports_are_at_the_top_of_each_module():
  lazy = []
  for name, path in {**_modules(), **_launch_scripts(), **_lab_modules()}.items():
    exempt = () if name.startswith('launch/') else LAZY
    tree = ast.parse(open(path).read())
    top = {id(n) for n in tree.body} | {id(n) for t in tree.body if isinstance(t, ast.Try)
                                        for n in t.body}
    for node in ast.walk(tree):
      if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
        names = ([f'{node.module}.{a.name}' for a in node.names]
                 if isinstance(node, ast.ImportFrom) else [a.name for a in node.names])
        for imported in names:
          if not any(imported == m or imported.startswith(m + '.') for m in exempt):
            lazy.append(f'{name}:{node.lineno} {imported}')
      if (isinstance(node, ast.Call) and ast.unparse(node.func).endswith('import_module')
          and 'electra_jax' in ast.unparse(node)):
        lazy.append(f'{name}:{node.lineno} {ast.unparse(node)}')  # a registry loading modules
  assert not lazy, f'imports inside functions (move them to the top of the module): {lazy}'


@pytest.mark.fast
def test_private_apis_of_jax_and_orbax_are_reached_in_one_module_and_each_is_found():
  """Only platform/private.py imports a private module of JAX or Orbax (`_src`), and each name it
  gives is there in the JAX and Orbax installed: a version that moves one fails here, not silently
  in the fallback."""
  found = []
  for name, path in {**_modules(), **_launch_scripts(), **_lab_modules()}.items():
    for node in ast.walk(ast.parse(open(path).read())):
      if isinstance(node, (ast.Import, ast.ImportFrom)):
        names = [node.module or ''] if isinstance(node, ast.ImportFrom) else [
            a.name for a in node.names]
        if any('._src' in n or n.startswith('_src') for n in names):
          found.append(f'{name}:{node.lineno}')
  assert found and all(f.startswith('electra_jax.platform.private:') for f in found), found
  from electra_jax.platform import private
  assert private.hardware_utils is not None and private.array_metadata_store() is not None
  assert private._jax_distributed is not None
  assert private.coordination_client() is None  # (one process: no coordination service)


def test_every_module_imports_alone():
  """Each module imported first, in a fresh state of the package (a child process, with the
  third-party libraries loaded once): nothing depends on what was imported before it."""
  peers = ('benchmarks.peer_hf', 'benchmarks.peer_hf_trainer')  # torch at the top
  lab = {n: p for n, p in _lab_modules().items() if 'cli.run(' not in open(p).read()}  # (not
  names = sorted(n for n in {**_modules(), **lab} if HAS_HF or n not in peers)  # the commands)
  script = (
      'import importlib, sys\n'
      f'for name in {names!r}:\n'
      '  for m in [m for m in sys.modules if m.split(".")[0] in ("electra_jax", "benchmarks")]:\n'
      '    del sys.modules[m]\n'
      '  importlib.import_module(name)\n'
      'print("imported", len(sys.modules))\n')
  out = _python(script)
  assert out.returncode == 0 and 'imported' in out.stdout, out.stderr[-3000:]


@pytest.mark.fast
def test_one_module_imports_tensorflow():
  modules = _modules()
  importers = sorted(f'{name}:{line}' for name, path in modules.items()
                     for m, line in _imports(path, modules)
                     if m.split('.')[0] in ('tensorflow', 'tensorflow_datasets')
                     and name != TF_OWNER)
  assert not importers, f'TensorFlow imported outside {TF_OWNER}: {importers}'


def _launch_scripts() -> dict[str, str]:
  """{'launch/<script>': file} of the commands."""
  folder = os.path.join(ROOT, 'launch')
  return {f'launch/{n[:-3]}': os.path.join(folder, n) for n in sorted(os.listdir(folder))
          if n.endswith('.py')}


@pytest.mark.fast
def test_no_function_is_longer_than_a_screen():
  """The package's functions, the commands' and the lab's."""
  long = []
  assert len(_launch_scripts()) > 8
  for name, path in {**_modules(), **_launch_scripts(), **_lab_modules()}.items():
    for node in ast.walk(ast.parse(open(path).read())):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        lines = node.end_lineno - node.lineno + 1
        if lines > 80:
          long.append(f'{name}.{node.name} ({lines} lines)')
  assert not long, long


def _constants(tree) -> dict:
  """{name: value} of a module's top-level assignments of one name."""
  return {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
          for t in node.targets if isinstance(t, ast.Name)}


def _names_a_kind(node, kinds: set, constants: dict | None = None) -> bool:
  """Whether `node` is a string naming a kind, or a tuple, list, set or dict holding one, or a
  name (NAME, or module.NAME) of a module constant that is one of those (`constants`: every
  module's top-level assignments by name)."""
  constants = constants or {}
  if isinstance(node, ast.Constant):
    return node.value in kinds
  if isinstance(node, (ast.Name, ast.Attribute)):
    named = node.id if isinstance(node, ast.Name) else node.attr
    return any(_names_a_kind(value, kinds) for value in constants.get(named, ()))
  if isinstance(node, ast.Dict):
    node = ast.Tuple(elts=[k for k in node.keys if k is not None])
  return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(
      _names_a_kind(e, kinds) for e in node.elts)


def _comparisons_naming(names: set, skip) -> list[str]:
  """'module:line: code' of each comparison, in a module `skip(module)` does not skip, of a value
  with a name of `names`: written out, or a module constant that holds it."""
  trees = {name: ast.parse(open(path).read()) for name, path in _modules().items()}
  constants = {}
  for tree in trees.values():
    for key, value in _constants(tree).items():
      constants.setdefault(key, []).append(value)
  return [f'{name}:{node.lineno}: {ast.unparse(node)[:60]}' for name, tree in trees.items()
          if not skip(name) for node in ast.walk(tree)
          if isinstance(node, ast.Compare) and any(
              _names_a_kind(x, names, constants) for x in [node.left] + node.comparators)]


@pytest.mark.fast
def test_no_branch_on_a_task_kind_outside_its_module():
  """Comparisons with a fine-tuning task kind's name ('regression', 'qa', ...) happen only in the
  kind's module (finetune/kinds/registry.KINDS) and the registry: the driver, the loaders, the
  export and the baseline ask the kind object."""
  names = set(registry.KINDS)
  owners = {type(k).__module__ for k in registry.KINDS.values()} | {
      'electra_jax.finetune.kinds.interface', 'electra_jax.finetune.kinds.registry'}
  found = _comparisons_naming(names, lambda module: module in owners)
  assert not found, f'a task kind compared outside its module: {found}'
  # What it looks for: the branches run.py had, such as this one, are found, and a module
  # constant that lists kinds (finetune_benchmark.PEER_KINDS had) is seen through.
  planted = ast.parse("KINDS = ('classification', 'regression')\n"
                      "if task.kind in ('classification', 'regression'):\n  pass\n"
                      "if task.kind not in KINDS or kind in other.KINDS:\n  pass\n")
  constants = {k: [v] for k, v in _constants(planted).items()}
  assert sum(isinstance(n, ast.Compare) and any(
      _names_a_kind(x, names, constants) for x in n.comparators) for n in ast.walk(planted)) == 3


@pytest.mark.fast
def test_no_branch_on_an_objective_name_outside_objectives():
  """The step, FLOPs, the run's summary and the compare tool ask the objective's registry entry
  (objectives.OBJECTIVES); none compares objective.name with a name."""
  from electra_jax.objectives import registry as objectives
  names = set(objectives.OBJECTIVES)
  found = [f for f in _comparisons_naming(
      names, lambda module: module.startswith('electra_jax.objectives'))
           if 'model_type' not in f]  # HF's model_type 'electra' is no objective
  assert not found, f'an objective compared by name outside objectives/: {found}'


@pytest.mark.fast
def test_no_branch_on_a_generator_shape_outside_its_registry():
  """The model, FLOPs, export, attention, the run's summary and the tools ask the generator's
  shape (model/generators.py); none compares model.generator with a shape's name."""
  names = set(generators.GENERATORS)
  found = _comparisons_naming(names, lambda module: module == 'electra_jax.model.generators')
  assert not found, f'a generator shape compared by name outside model/generators.py: {found}'
  planted = ast.parse("if cfg.generator in ('uniform', 'two_tower'):\n  pass\n")
  assert any(isinstance(n, ast.Compare) and _names_a_kind(n.comparators[0], names)
             for n in ast.walk(planted))


@pytest.mark.fast
def test_the_config_is_declared_once():
  """No module but the declarations lists config fields by name for the checks or resume rules, and
  none reads a field with a default of its own (cfg.get('field', default)): config/pretraining.py
  and finetune/config.py declare each field's default, range and role (fields.py)."""
  found = []
  for name, path in _modules().items():
    for node in ast.walk(ast.parse(open(path).read())):
      if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr == 'get' and len(node.args) == 2
          and getattr(node.func.value, 'id', getattr(node.func.value, 'attr', '')) in (
              'cfg', 'config', 'task', 'optimizer', 'qa', 'objective')
          and name != 'electra_jax.convert.hf'):  # HF's config.json, whose defaults are HF's
        found.append(f'{name}:{node.lineno}')
      if isinstance(node, ast.Assign) and any(
          isinstance(t, ast.Name) and t.id in ('_MUST_MATCH', '_ADOPTED', '_RUN_IDENTITY',
                                               '_HOW_NOT_WHAT', '_MAY_CHANGE', '_AT_LEAST_1')
          for t in node.targets):
        found.append(f'{name}:{node.lineno}')
  assert not found, f'config fields defaulted or listed outside their declaration: {found}'
  # A command's flag for a setting of the records (a field of the pre-training config or of the
  # vocabulary trainer) is the declaration's (cli.declared_flags), not a flag defined again with
  # a default and meaning of its own.
  from electra_jax.data import records
  settings = set(records.declarations())
  launch = os.path.join(ROOT, 'launch')
  restated = []
  for script in sorted(os.listdir(launch)):
    if script in ('prepare_data.py', 'build_vocab.py'):
      tree = ast.parse(open(os.path.join(launch, script)).read())
      restated += [f'{script}:{n.lineno} --{n.args[0].value}' for n in ast.walk(tree)
                   if isinstance(n, ast.Call) and 'DEFINE' in ast.unparse(n.func) and n.args
                   and isinstance(n.args[0], ast.Constant) and n.args[0].value in settings]
  assert not restated, f'settings of the records declared again as flags: {restated}'
  planted = ast.parse("flags.DEFINE_integer('num_shards', 64, 'train shard files')")
  assert any(isinstance(n, ast.Call) and n.args[0].value in settings for n in ast.walk(planted))


@pytest.mark.fast
def test_the_library_never_imports_its_apps_or_the_lab_and_scripts_import_the_installed_package():
  """electra_jax/apps/ (export, compare, diagnose) sits on the library, and the lab (benchmarks/)
  beside it: nothing of the library imports either, nor an app the lab. launch/ and benchmarks/
  import the installed package (no sys.path edits)."""
  modules = _modules()
  into = sorted(f'{name}:{line}' for name, path in modules.items()
                for m, line in _imports(path, modules)
                if m.split('.')[0] == 'benchmarks'
                or (m.startswith('electra_jax.apps') and not name.startswith('electra_jax.apps')))
  assert not into, f'the library imports its apps or the lab: {into}'
  edits = sorted(name for name, path in {**_launch_scripts(), **_lab_modules()}.items()
                 if 'sys.path' in open(path).read())
  assert not edits, f'scripts that edit sys.path: {edits}'
  assert len(_lab_modules()) > 10


@pytest.mark.fast
def test_the_fine_tuning_wing_is_a_library_and_its_user_tools_are_apps():
  """Of the commands, launch/finetune.py alone reaches into finetune/ (the library: inputs, kinds,
  the run), for a fine-tuning's computation (its config, compilation for a slice); what users run
  on a finished run (prediction, every export, zero-shot) and the search of recipes that drives
  many fine-tunings come from apps/; the library's driver fine-tunes one recipe and imports none
  of them; and the pre-training command reaches the fine-tuning wing only through
  apps/zeroshot.py (the zero-shot signal it hands the run), never its driver."""
  modules = _modules()
  direct = sorted(f'{name} -> {m}' for name, path in _launch_scripts().items()
                  if name != 'launch/finetune' for m, _ in _imports(path, modules)
                  if m.startswith('electra_jax.finetune'))
  assert not direct, f'commands that reach into the fine-tuning library for a tool: {direct}'
  tools = {'predict', 'export', 'zeroshot', 'search'}
  assert not {m.split('.')[-1] for m in modules if m.startswith('electra_jax.finetune.')} & tools
  assert tools <= {m.split('.')[-1] for m in modules if m.startswith('electra_jax.apps.')}
  graph = _graph()
  assert not any(_wing(m) == 'apps' for m in _reached(graph, 'electra_jax.finetune.run'))
  assert 'electra_jax.finetune.run' not in _reached(graph, 'electra_jax.apps.zeroshot')
  assert not any(_wing(m) == 'finetune' for m in _reached(graph, 'electra_jax.pretraining.run'))


def test_tensorflow_loads_without_keras_which_stays_importable():
  """TensorFlow, loaded for data, leaves out the Keras it would import eagerly; a program that
  wants Keras afterwards still gets it, through `tf.keras` or `import keras`."""
  script = ('import sys\n'
            'from electra_jax.storage import tf_import\n'
            'tf = tf_import.tensorflow()\n'
            'print("keras loaded:", "keras" in sys.modules)\n'
            'list(tf.data.Dataset.range(3).as_numpy_iterator())\n'
            'print("dense:", tf.keras.layers.Dense(3)(tf.zeros((1, 2))).shape)\n'
            'import keras\n'
            'print("keras:", keras.__name__)\n')
  out = _python(script)
  assert out.returncode == 0, out.stderr[-3000:]
  assert out.stdout.split('\n')[:3] == ['keras loaded: False', 'dense: (1, 3)', 'keras: keras'], \
      out.stdout



def _architecture() -> str:
  return open(os.path.join(ROOT, 'docs', 'architecture.md')).read()


def _named_files(text: str, rooms: set = frozenset()) -> set[str]:
  """The module file names (`name.py`, or `room/name.py` in one of the wing's `rooms`) a piece of
  the document mentions."""
  return {f'{room}/{name}' if room in rooms else name
          for room, name in re.findall(r'(?:\b([a-z_0-9]+)/)?\b([a-z_0-9]+\.py)\b', text)}


def _tree_entry(tree: list[str], wing: str) -> str:
  """The lines of `wing/` in the document's tree: its own and those continuing it."""
  first = next(i for i, line in enumerate(tree) if line.startswith(f'      {wing}/'))
  lines = [tree[first]]
  for line in tree[first + 1:]:
    if not line.startswith(' ' * 19):
      break
    lines.append(line)
  return ' '.join(lines)


@pytest.mark.fast
def test_the_architecture_document_names_every_module_of_each_wing_in_the_wings_order():
  """docs/architecture.md's table of wings: its rows in the order of WINGS (each imports only
  the rows before it), each row naming every module of its wing and no other; its tree too."""
  text = _architecture()
  modules = _modules()
  rows = [line for line in text.split('\n') if line.startswith('| `')
          and ('/` |' in line or '.py` |' in line)]
  named = {line.split('`')[1].rstrip('/').removesuffix('.py'): line.split(' | ')[1]
           for line in rows}
  assert list(named) == list(WINGS[:-1]), list(named)
  tree = text[text.index('## The tree'):].split('\n')
  for wing in WINGS[:-1]:
    if f'electra_jax.{wing}' in modules and not any(
        m.startswith(f'electra_jax.{wing}.') for m in modules):  # a wing of one module
      assert any(line.strip().startswith(f'{wing}.py ') for line in tree), wing
      continue
    ours = [m.split('.')[2:] for m in modules if _wing(m) == wing]
    rooms = {parts[0] for parts in ours if len(parts) == 2}  # a wing's folders of modules
    files = {'/'.join(parts) + '.py' for parts in ours if parts and parts[0] not in rooms
             or len(parts) == 2}
    for where, listed in (('table', _named_files(named[wing], rooms)),
                          ('tree', _named_files(_tree_entry(tree, wing), rooms))):
      assert listed == files, (wing, where, 'missing', sorted(files - listed), 'not modules',
                               sorted(listed - files))
