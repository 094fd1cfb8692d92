"""An estimate of a compiled TPU program's run time from the compiler's own numbers.

XLA's TPU backend annotates each operation of the compiled program with the cycles its cost model
expects (`estimated_cycles` in the operation's backend config: the model knows the MXU's shape, the
tiled layouts and the vector units). This module walks the program as it would run (while loops
times their trip counts, the costlier branch of a conditional) and adds up:

- operations the compiler estimated: their cycles at the chip's clock;
- Mosaic (Pallas) kernels: the roofline of the cost they declare (`pl.CostEstimate`): the larger of
  FLOPs at the chip's peak and bytes at its HBM bandwidth. A lower bound: a kernel's vector work
  (masks, exponentials, the dropout hash) and its MXU shape losses are not in it;
- collectives (all-reduce, all-gather, reduce-scatter, ...): the bytes each chip sends at the chip's
  inter-chip bandwidth (and across slices at the data-center network's), counted as if nothing
  overlapped them (an upper bound: XLA runs them asynchronously beside compute);
- operations without an estimate (or with the cost model's "unknown", a number near 2^63): the
  roofline of their matmuls' FLOPs (convolutions and dots inside them) at the chip's peak and their
  bytes in and out at HBM bandwidth.

It is an estimate, not a measurement: nothing ran on a TPU.
"""

import dataclasses
import json
import math
import re

from electra_jax.platform.chips import Chip

_DTYPE_BYTES = {'pred': 1, 's4': 0.5, 'u4': 0.5, 's8': 1, 'u8': 1, 'f8e4m3fn': 1, 'f8e5m2': 1,
                'bf16': 2, 'f16': 2, 's16': 2, 'u16': 2, 'f32': 4, 's32': 4, 'u32': 4, 'f64': 8,
                's64': 8, 'u64': 8, 'c64': 8, 'c128': 16}
_SHAPE = re.compile(r'\b([a-z]+\d*[a-z\d]*)\[([\d,]*)\]')
_HEADER = re.compile(r'^(ENTRY )?%(\S+) .*\{\s*$')
_INSTRUCTION = re.compile(r'^\s*(?:ROOT )?%(\S+) = (.+?) ([a-z][\w\-]*)\((.*)$')
_COLLECTIVES = ('all-reduce', 'all-gather', 'reduce-scatter', 'collective-permute', 'all-to-all')
_FREE = {'parameter', 'constant', 'get-tuple-element', 'tuple', 'bitcast', 'copy-start',
         'copy-done', 'slice-start', 'slice-done', 'partition-id', 'replica-id', 'after-all',
         'opt-barrier', 'add-dependency', 'iota', 'send-done', 'recv-done'}


@dataclasses.dataclass
class Op:
  name: str  # the HLO instruction
  opcode: str
  what: str  # the JAX operation it comes from (metadata op_name), shortened
  seconds: float  # per execution
  count: float  # executions per run of the program
  source: str  # 'compiler' | 'kernel' | 'collective' | 'roofline'
  target: str = ''  # a custom call's target ('__cublas$gemm', 'tpu_custom_call', ...), lowercase

  @property
  def total(self) -> float:
    return self.seconds * self.count


@dataclasses.dataclass
class Estimate:
  ops: list
  seconds: float
  by_source: dict
  unknown_loops: int  # while loops whose trip count was not found (counted once)

  def kernels(self) -> dict:
    """Kernels a run of the program launches, by kind (executions per run: loop bodies times
    their trip counts, the costlier branch of a conditional), and their total. A custom call is a
    matmul when it calls cuBLAS, a Pallas kernel when it is Mosaic's or Triton's."""
    out = {'fusions': 0.0, 'pallas': 0.0, 'collectives': 0.0, 'matmuls': 0.0, 'other': 0.0}
    for op in self.ops:
      kind = ('pallas' if op.source == 'kernel' or op.target == 'tpu_custom_call'
              or 'triton' in op.target else
              'collectives' if op.source == 'collective' else
              'fusions' if op.opcode == 'fusion' else
              'matmuls' if op.opcode in ('dot', 'convolution') or 'gemm' in op.target else
              'other')
      out[kind] += op.count
    out = {k: int(round(v)) for k, v in out.items()}
    return {**out, 'total': sum(out.values())}

  def top(self, n: int = 10) -> list:
    """The `n` costliest operations, those of one JAX operation and source merged."""
    merged: dict = {}
    for op in self.ops:
      if op.total <= 0:
        continue
      key = (op.what, op.opcode if op.source != 'compiler' else 'fusion', op.source)
      total, count = merged.get(key, (0.0, 0.0))
      merged[key] = (total + op.total, count + op.count)
    rows = sorted(merged.items(), key=lambda kv: -kv[1][0])[:n]
    return [{'what': what, 'kind': kind, 'source': source, 'seconds': total, 'count': count}
            for (what, kind, source), (total, count) in rows]


def _bytes(type_text: str) -> float:
  total = 0.0
  for dtype, dims in _SHAPE.findall(type_text):
    size = _DTYPE_BYTES.get(dtype)
    if size is None:
      continue
    total += size * math.prod(int(d) for d in dims.split(',') if d)
  return total


def _operands(rest: str) -> list:
  """The %names inside the operand list's parentheses (`rest` starts just after the '(')."""
  depth, end = 1, len(rest)
  for i, ch in enumerate(rest):
    if ch in '({[':
      depth += 1
    elif ch in ')}]':
      depth -= 1
      if depth == 0:
        end = i
        break
  return re.findall(r'%([\w.\-]+)', rest[:end])


def _dims(type_text: str) -> list:
  m = _SHAPE.search(type_text)
  return [int(d) for d in m.group(2).split(',') if d] if m else []


def _matmul_flops(program, opcode: str, type_text: str, rest: str, line: str) -> float:
  """FLOPs of a convolution or dot: 2 x output elements x the contracted size. (XLA writes batched
  matmuls as convolutions whose windows stand for batch dimensions: those are not multiplied.)"""
  operands = _operands(rest)
  lhs = _dims(program.types.get(operands[0], '')) if operands else []
  out = math.prod(_dims(type_text))
  if opcode == 'convolution':
    labels = re.search(r'dim_labels=([^_]+)_', line)
    if not labels or 'f' not in labels.group(1) or len(lhs) != len(labels.group(1)):
      return 0.0
    return 2.0 * out * lhs[labels.group(1).index('f')]
  contracting = re.search(r'lhs_contracting_dims=\{([\d,]*)\}', line)
  dims = [int(d) for d in contracting.group(1).split(',') if d] if contracting else []
  return 2.0 * out * math.prod(lhs[d] for d in dims if d < len(lhs))


def _what(line: str) -> str:
  m = re.search(r'op_name="([^"]*)"', line)
  if not m:
    return '?'
  name = re.sub(r'^jit\([^)]*\)/', '', m.group(1))
  name = re.sub(r'layer_\d+', 'layer_*', name)  # the same operation of every layer, together
  return name[-120:]


def _instruction_lines(text: str):
  """The lines of an HLO module, an instruction whose text spans several lines (a kernel's
  backend_config holding newlines: JAX's splash kernel's) joined into one."""
  pending = None
  for line in text.splitlines():
    starts = (not line.strip() or line.rstrip() == '}' or line.startswith(('HloModule', 'ENTRY'))
              or line.lstrip().startswith(('%', 'ROOT ')))
    if pending is not None and not starts:
      pending += ' ' + line
      continue
    if pending is not None:
      yield pending
    pending = line
  if pending is not None:
    yield pending


class _Program:
  def __init__(self, text: str):
    self.computations: dict[str, list] = {}
    self.entry = ''
    self.types: dict[str, str] = {}
    current = None
    for line in _instruction_lines(text):
      header = _HEADER.match(line)
      if header and not line.startswith(' '):
        current = header.group(2)
        self.computations[current] = []
        if header.group(1):
          self.entry = current
        continue
      if line.rstrip() == '}':
        current = None
        continue
      if current is None:
        continue
      m = _INSTRUCTION.match(line)
      if m:
        name, type_text, opcode, rest = m.groups()
        self.types[name] = type_text
        self.computations[current].append((name, type_text, opcode, rest, line))

  def trip_count(self, line: str, condition: str) -> int | None:
    m = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
    if m:
      return int(m.group(1))
    constants = []
    for _, type_text, opcode, rest, _ in self.computations.get(condition, ()):
      if opcode == 'constant' and re.match(r'[su]\d+\[\]', type_text):
        c = re.match(r'\s*(-?\d+)\)', rest)
        if c:
          constants.append(int(c.group(1)))
    compares = any(op == 'compare' for _, _, op, _, _ in self.computations.get(condition, ()))
    return max(constants) if constants and compares else None


def _collective_seconds(chip: Chip, opcode: str, type_text: str, operand_bytes: float,
                        devices_per_slice: int, num_slices: int) -> float:
  size = max(_bytes(type_text), operand_bytes)
  n = max(devices_per_slice, 1)
  factor = {'all-reduce': 2 * (n - 1) / n, 'all-gather': (n - 1) / n,
            'reduce-scatter': (n - 1) / n}.get(opcode, 1.0)
  seconds = factor * size / chip.ici_bytes_per_s
  if num_slices > 1:  # the same data crosses slices over the data-center network
    seconds += 2 * (num_slices - 1) / num_slices * size / chip.dcn_bytes_per_s
  return seconds


def _op_cost(program: _Program, chip: Chip, instruction: tuple, devices_per_slice: int,
             num_slices: int):
  """(seconds, source) of one run of one instruction, or None for one that costs nothing."""
  name, type_text, opcode, rest, line = instruction
  cycles = re.search(r'"estimated_cycles":"(\d+)"', line)
  if cycles and int(cycles.group(1)) >= 2 ** 60:  # the cost model's "unknown"
    cycles = None
  base = opcode[:-6] if opcode.endswith('-start') else opcode
  if opcode.endswith('-done') or (opcode in _FREE and not cycles):
    return None
  if 'custom_call_target="ConcatBitcast"' in line:  # joins async slices (prefetches) in place
    return None
  operand_bytes = sum(_bytes(program.types.get(o, '')) for o in _operands(rest))
  if base in _COLLECTIVES:
    return _collective_seconds(chip, base, type_text, operand_bytes, devices_per_slice,
                               num_slices), 'collective'
  if cycles:
    return int(cycles.group(1)) / chip.clock_hz, 'compiler'
  if opcode == 'custom-call' and '"cost_estimate"' in line:
    declared = json.loads('{' + _found(r'"cost_estimate":(\{[^}]*\})', line)[1:])
    return max(float(declared.get('flops', 0)) / chip.peak_flops,
               float(declared.get('bytes_accessed', 0)) / chip.hbm_bytes_per_s), 'kernel'
  flops = 0.0
  called = re.search(r'calls=%([\w.\-]+)', line) if opcode == 'fusion' else None
  inner = program.computations.get(called.group(1), ()) if called else (instruction,)
  for _, t, op, r, l in inner:
    if op in ('convolution', 'dot'):
      flops += _matmul_flops(program, op, t, r, l)
  return max(flops / chip.peak_flops,
             (operand_bytes + _bytes(type_text)) / chip.hbm_bytes_per_s), 'roofline'


def _found(pattern: str, line: str) -> str:
  """The first group of `pattern` in a line of the compiled program, which XLA always writes."""
  match = re.search(pattern, line)
  if match is None:
    raise ValueError(f'a line of the compiled program lacks {pattern!r}: {line[:200]}')
  return match.group(1)


def estimate(hlo_text: str, chip: Chip, devices_per_slice: int, num_slices: int = 1) -> Estimate:
  """The estimated time of one run of the compiled program `hlo_text` (`compiled.as_text()`)."""
  program = _Program(hlo_text)
  ops: list[Op] = []
  unknown = [0]

  def walk(computation: str, count: float, depth: int = 0):
    if depth > 50:
      return
    for instruction in program.computations.get(computation, ()):
      name, _, opcode, _, line = instruction
      if opcode == 'while':
        cond = _found(r'condition=%([\w.\-]+)', line)
        body = _found(r'body=%([\w.\-]+)', line)
        trips = program.trip_count(line, cond)
        if trips is None:
          unknown[0] += 1
          trips = 1
        walk(body, count * trips, depth + 1)
        walk(cond, count * (trips + 1), depth + 1)
      elif opcode == 'conditional':
        branches = re.search(r'branch_computations=\{([^}]*)\}', line)
        names = (re.findall(r'%([\w.\-]+)', branches.group(1)) if branches else
                 re.findall(r'(?:true|false)_computation=%([\w.\-]+)', line))
        costs = []
        for branch in names:
          before = len(ops)
          walk(branch, count, depth + 1)
          costs.append((sum(o.total for o in ops[before:]), ops[before:]))
          del ops[before:]
        if costs:
          ops.extend(max(costs, key=lambda c: c[0])[1])
      elif opcode == 'call':
        called = re.search(r'to_apply=%([\w.\-]+)', line)
        if called:
          walk(called.group(1), count, depth + 1)
      else:
        cost = _op_cost(program, chip, instruction, devices_per_slice, num_slices)
        if cost:
          target = re.search(r'custom_call_target="([^"]*)"', line)
          ops.append(Op(name, opcode, _what(line), cost[0], count, cost[1],
                        target.group(1).lower() if target else ''))

  walk(program.entry, 1.0)
  by_source: dict[str, float] = {}
  for op in ops:
    by_source[op.source] = by_source.get(op.source, 0.0) + op.total
  return Estimate(ops, sum(by_source.values()), by_source, unknown[0])


def kernels(hlo_text: str) -> dict:
  """`Estimate.kernels()` of a compiled program of any backend (`compiled.as_text()`): the counts
  need no chip's rates (the costs, computed at a nominal chip's, are dropped)."""
  return estimate(hlo_text, _NOMINAL, 1).kernels()


_NOMINAL = Chip('nominal', peak_flops=1.0, hbm_bytes_per_s=1.0, clock_hz=1.0, ici_bytes_per_s=1.0)
