"""Where a compiled step spends its time: a `jax.profiler` trace, read back as kernel times.

    rows, busy = kernel_table(trace_dir, steps)  # per kernel: self time per step, calls, category

On GPUs and TPUs the trace's device lines hold the kernels (their self time, as the device ran
them); on CPUs the host threads hold one event per XLA operation (its thunk). Events nested in
others on the same line (a `while` and its body) count their own time once: a parent's self time
excludes its children.
"""

import collections
import glob
import gzip
import json
import os
import re

CATEGORIES = (  # first match wins; names of kernels or of the HLO operations behind them
    ('attention kernel', r'electra_flash|flash|fmha|cudnn|dot_product_attention|sdpa'),
    ('collective', r'all-reduce|all_reduce|all-gather|all_gather|reduce-scatter|reduce_scatter|'
                   r'nccl|collective|all-to-all'),
    ('matmul', r'gemm|cublas|cutlass|xmma|nvjet|wgmma|matmul|convolution|\bdot\b|dot[._]|'
               r'ynn_fusion|onednn'),
    ('copy / transpose', r'^copy|transpose|^bitcast(\.\d+)?$|memcpy|memset'),
    ('elementwise / reduction fusion', r'fusion|reduce|loop_|input_'),
)
_SKIP_LINES = re.compile(r'XLA Modules|Steps|TraceMe|Framework|Launch Stats|python|Source', re.I)


def category(name: str) -> str:
  for label, pattern in CATEGORIES:
    if re.search(pattern, name, re.I):
      return label
  return 'other'


def trace_file(directory: str) -> str:
  """The newest Perfetto trace (`jax.profiler.trace(..., create_perfetto_trace=True)`) under
  `directory`."""
  found = sorted(glob.glob(os.path.join(directory, 'plugins', 'profile', '*',
                                        'perfetto_trace.json.gz')))
  if not found:
    raise FileNotFoundError(f'no perfetto_trace.json.gz under {directory}/plugins/profile')
  return found[-1]


def self_times(events: list[dict]) -> list[tuple[dict, float]]:
  """(event, self time) of complete events ('X') on one line: a parent's time minus its
  children's. An event is a child when it lies wholly within another (the profiler records nesting
  so); one that starts before its neighbour ends but ends after it is not: on GPU streams
  consecutive kernels overlap by the clocks' skew (0.1 us typically, up to 6 us on an H100)."""
  events = sorted(events, key=lambda e: (e['ts'], -e['dur']))
  out, stack = [], []  # stack: [end, index into out]
  for e in events:
    start, end = e['ts'], e['ts'] + e['dur']
    while stack and (stack[-1][0] <= start or end > stack[-1][0]):
      stack.pop()
    if stack:  # inside the event on top of the stack: not its parent's own time
      parent = stack[-1][1]
      out[parent] = (out[parent][0], out[parent][1] - e['dur'])
    out.append((e, e['dur']))
    stack.append((end, len(out) - 1))
  return out


def _name(event: dict) -> str:
  args = event.get('args') or {}
  return args.get('hlo_op') or args.get('long_name') or event['name']


def _category(event: dict) -> str:
  """The kernel's own name decides where it says ('electra_flash_dq', 'nvjet_sm90_...'), else the
  XLA operation behind it ('pallas_call.3' or 'custom-call.7' alone say nothing)."""
  found = category(event['name'])
  return found if found != 'other' else category(_name(event))


def _lines(trace: dict):
  """{(pid, tid): events} of the lines that hold kernels or XLA operations."""
  events = trace['traceEvents'] if isinstance(trace, dict) else trace
  process = {e['pid']: e['args']['name'] for e in events
             if e.get('ph') == 'M' and e.get('name') == 'process_name'}
  thread = {(e['pid'], e.get('tid')): e['args']['name'] for e in events
            if e.get('ph') == 'M' and e.get('name') == 'thread_name'}
  device = {pid for pid, name in process.items() if name.startswith('/device:')}
  ops_lines = {key for key, name in thread.items() if key[0] in device and name == 'XLA Ops'}
  lines = collections.defaultdict(list)
  for e in events:
    if e.get('ph') != 'X' or 'dur' not in e:
      continue
    key = (e['pid'], e.get('tid'))
    if device:
      if e['pid'] not in device or (ops_lines and key not in ops_lines):
        continue
      if _SKIP_LINES.search(thread.get(key, '')):
        continue
    elif not (e.get('args') or {}).get('hlo_op'):
      continue  # host lines: XLA operations only (not Python frames or executor bookkeeping)
    lines[key].append(e)
  return lines


def kernel_table(directory: str, steps: int) -> tuple[list[dict], float]:
  """(rows sorted by time: name, category, ms per step, calls per step, share; the summed
  self time per step in ms) of the trace under `directory` covering `steps` steps."""
  with gzip.open(trace_file(directory), 'rt') as f:
    trace = json.load(f)
  total = collections.defaultdict(float)
  calls = collections.Counter()
  kinds = {}
  for events in _lines(trace).values():
    for event, us in self_times(events):
      name = _name(event)
      total[name] += us
      calls[name] += 1
      kinds.setdefault(name, _category(event))
  busy_ms = sum(total.values()) / 1e3 / steps
  rows = [{'name': name, 'category': kinds[name], 'ms_per_step': us / 1e3 / steps,
           'calls_per_step': calls[name] / steps,
           'share': (us / 1e3 / steps) / busy_ms if busy_ms else 0.0}
          for name, us in total.items()]
  rows.sort(key=lambda r: -r['ms_per_step'])
  return rows, busy_ms


def graphs_note(rows: list[dict]) -> str:
  """A sentence when most of the time sits in CUDA graphs (XLA's command buffers, on by default on
  GPUs), whose kernels the trace does not show one by one; '' otherwise."""
  graphs = sum(r['share'] for r in rows if r['name'].startswith('command_buffer'))
  if graphs < 0.5:
    return ''
  return (f'{100 * graphs:.0f}% of the kernel time ran inside CUDA graphs, which the trace shows '
          'as one event each; to see their kernels run again with '
          'XLA_FLAGS=--xla_gpu_enable_command_buffer= (the step then runs slower: quote the '
          'time measured with the graphs)')


def by_category(rows: list[dict]) -> dict[str, float]:
  """ms per step per category, largest first."""
  sums = collections.defaultdict(float)
  for r in rows:
    sums[r['category']] += r['ms_per_step']
  return dict(sorted(sums.items(), key=lambda kv: -kv[1]))


def grouped(rows: list[dict]) -> list[dict]:
  """Rows summed over instances of one kind of kernel: the name without its numeric suffix
  ('fusion.12', 'loop_add_fusion_3' -> 'fusion', 'loop_add_fusion'), so a kernel repeated in every
  layer shows as one row with its count."""
  sums = {}
  for r in rows:
    base = re.sub(r'[._]\d+$', '', r['name'])
    g = sums.setdefault(base, {'name': base, 'category': r['category'], 'ms_per_step': 0.0,
                               'calls_per_step': 0.0, 'share': 0.0, 'instances': 0})
    for key in ('ms_per_step', 'calls_per_step', 'share'):
      g[key] += r[key]
    g['instances'] += 1
  return sorted(sums.values(), key=lambda g: -g['ms_per_step'])
