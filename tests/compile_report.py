"""Where the suite's own process spends its time in JAX: a pytest plugin (not loaded by default).

  PYTHONPATH=tests python -m pytest tests -p compile_report -n 0

prints, for the tests that spent the most, the seconds of tracing, lowering to StableHLO and XLA
compilation (cache misses), and how many programs came from the persistent cache. Child processes
that tests start are not counted (their time is in pytest's own durations).
"""

import collections
import os
import sys
import time

from jax import monitoring

_EVENTS = {'/jax/core/compile/jaxpr_trace_duration': 'trace',
           '/jax/core/compile/jaxpr_to_mlir_module_duration': 'lower',
           '/jax/core/compile/backend_compile_duration': 'compile'}
_current = ['(outside tests)']
_seconds = collections.defaultdict(collections.Counter)
_hits = collections.Counter()
_misses = collections.Counter()
_wall = {}
_where = collections.defaultdict(lambda: [0, 0.0])  # source line -> [programs, seconds]
_OURS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), d) + os.sep
              for d in ('electra_jax', 'tests', 'launch'))


def _caller():
  """The innermost line of this project's code in the Python stack."""
  frame = sys._getframe(2)
  while frame is not None:
    name = frame.f_code.co_filename
    if name.startswith(_OURS) and not name.endswith('compile_report.py'):
      return f'{os.path.relpath(name, os.path.dirname(os.path.dirname(_OURS[0])))}:{frame.f_lineno}'
    frame = frame.f_back
  return '(elsewhere)'


def _on_duration(event, duration, **_):
  if event in _EVENTS:
    _seconds[_current[0]][_EVENTS[event]] += duration
    if _EVENTS[event] == 'compile':
      where = _where[_caller()]
      where[0] += 1
      where[1] += duration


def _on_event(event, **_):
  if event == '/jax/compilation_cache/cache_hits':
    _hits[_current[0]] += 1
  elif event == '/jax/compilation_cache/cache_misses':
    _misses[_current[0]] += 1


monitoring.register_event_duration_secs_listener(_on_duration)
monitoring.register_event_listener(_on_event)


def pytest_runtest_setup(item):
  _current[0] = item.nodeid
  _wall[item.nodeid] = time.perf_counter()


def pytest_runtest_teardown(item):
  _wall[item.nodeid] = time.perf_counter() - _wall[item.nodeid]


def pytest_terminal_summary(terminalreporter):
  write = terminalreporter.write_line
  rows = sorted(_seconds.items(), key=lambda kv: -sum(kv[1].values()))
  total = collections.Counter()
  for _, s in rows:
    total.update(s)
  write('')
  write(f'JAX in the test process: trace {total["trace"]:.0f} s, lower {total["lower"]:.0f} s, '
        f'compile {total["compile"]:.0f} s (includes cache reads); programs compiled '
        f'{sum(_misses.values())}, read from the cache {sum(_hits.values())}')
  write(f'{"trace":>6} {"lower":>6} {"compile":>8} {"miss":>5} {"hit":>4} {"wall":>6}  test')
  for nodeid, s in rows[:40]:
    write(f'{s["trace"]:6.1f} {s["lower"]:6.1f} {s["compile"]:8.1f} {_misses[nodeid]:5d} '
          f'{_hits[nodeid]:4d} {_wall.get(nodeid, 0):6.1f}  {nodeid}')
  write('most programs compiled (many small ones: operations run one at a time, outside jit):')
  for nodeid, n in _misses.most_common(15):
    write(f'{n:5d}  {nodeid}')
  write('where the compilations (and cache reads) were asked for:')
  for where, (n, seconds) in sorted(_where.items(), key=lambda kv: -kv[1][1])[:30]:
    write(f'{n:5d} {seconds:7.1f} s  {where}')
