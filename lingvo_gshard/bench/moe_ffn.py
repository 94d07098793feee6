"""The MoE FFN step against a dense FFN of the same active FLOPs: the cases tools/moe_benchmark.py times (see
its docstring for what each mode and column means), their timing, the report and the per-op profile."""
import collections
import ctypes
import dataclasses
import glob
import os
import re
import resource
import tempfile
import time
from typing import Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import

from lingvo_gshard.layers import gating
from lingvo_gshard.layers import moe
from lingvo_gshard.runtime import step_runner


@dataclasses.dataclass
class Config:
  """What to measure (the tool's flags)."""
  groups: int = 4
  group_size: int = 1024
  model_dim: int = 256
  hidden_dim: int = 1024
  num_experts: int = 16
  capacity_factor: float = 2.0
  dispatch: Sequence[str] = ('index', 'einsum')
  modes: Sequence[str] = ('jit', 'graph')
  sweep_experts: Sequence[int] = (8, 16, 32, 64, 128)
  sweep_dispatch: Sequence[str] = ('index',)
  matmul_dim: int = 2048
  wi_layout: str = 'auto'


# The targets the report checks: ratios measured within one run (MoE over dense, FLOP/s over the matmul's,
# E sweep).
_TARGET_MOE_OVER_DENSE = 1.15
_TARGET_FLOPS_FRACTION = 0.80
_TARGET_SWEEP_RATIO = 1.3


MODES = ('jit', 'graph', 'graph_no_islands')  # the step runner's jit and graph modes, and graph alone


def _grad_step(fn, jit):
  """Step: y = fn(x, *params) and the gradients of <y, dy> + 0.01 aux w.r.t. x and every param.

  y is returned, as a real network consumes it: a step returning only the gradients of this linear loss would
  let XLA drop the dense FFN's second forward matmul (1/6 of its FLOPs) but not the MoE's (the gate gradient
  needs the expert outputs).
  """

  @tf.function(jit_compile=jit)
  def _step(x, dy, *params):
    with tf.GradientTape() as tape:
      tape.watch([x, *params])
      y, aux = fn(x, *params)
      loss = tf.reduce_sum(y * dy) + 0.01 * aux
    return [y] + tape.gradient(loss, [x, *params])

  return _step


def _dense_case(g, s, m, h, x, dy, rng, compile_mode):
  def _fn(x, wi, wo):
    hidden = tf.nn.relu(tf.einsum('GSM,MH->GSH', x, wi))
    return tf.einsum('GSH,HM->GSM', hidden, wo), 0.0

  wi = rng.normal(size=(m, 2 * h)) / np.sqrt(m)
  wo = rng.normal(size=(2 * h, m)) / np.sqrt(2 * h)
  return _Case(f'dense FFN H={2 * h} {compile_mode}', _grad_step(_fn, compile_mode == 'jit'), [x, dy, wi, wo],
               3 * 2 * (2 * g * s * m * 2 * h), kind='dense', mode=compile_mode)


def WiLayout(mode: str, choice: str = 'auto') -> str:
  """The layout of wi a mode runs: `choice`, or with 'auto' each mode's faster one."""
  if choice != 'auto':
    return choice
  return 'emh' if mode == 'jit' else 'ehm'


def _moe_case(g, s, m, h, e, cf, dispatch, mode, x, dy, rng, wi_layout):

  def _fn(x, w_gate, wi, wo):
    y, aux, _ = moe.moe_ffn(x, w_gate, wi, wo, capacity_factor=cf, dispatch=dispatch,
                            island=step_runner.CompileIsland if mode == 'graph' else None,
                            wi_layout=wi_layout)
    return y, aux

  w_gate = rng.normal(size=(m, e)) / np.sqrt(m)
  wi = rng.normal(size=(e, m, h)) / np.sqrt(m)
  if wi_layout == 'ehm':
    wi = np.ascontiguousarray(np.transpose(wi, [0, 2, 1]))
  wo = rng.normal(size=(e, h, m)) / np.sqrt(h)
  c = gating.expert_capacity(s, e, cf)
  flops = 3 * (2 * (2 * e * g * c * m * h) + 2 * g * s * m * e)
  return _Case(f'MoE {dispatch} E={e} C={c} {mode}', _grad_step(_fn, mode == 'jit'), [x, dy, w_gate, wi, wo],
               flops, kind='moe', experts=e, capacity=c, dispatch=dispatch, mode=mode, wi_layout=wi_layout)


def _matmul_case(n, a, b, compile_mode):
  @tf.function(jit_compile=compile_mode == 'jit')
  def _step(a, b):
    return [tf.matmul(a, b)]

  return _Case(f'matmul {n}^3 {compile_mode}', _step, [a, b], 2 * n**3, kind='matmul', mode=compile_mode)


def _Wait(outputs):
  """Returns when `outputs` are computed, without copying them.

  `t.numpy()` copies a CPU tensor (one expert gradient is 134 MB at E=128), which charged the benchmark's own
  copies to the steps with the largest weights. A tf.function call in (default) synchronous
  eager mode returns computed outputs on a CPU (the machine these benchmarks target; GPU kernels would
  still be queued on streams); async_wait also covers async eager mode.
  """
  del outputs
  context.async_wait()


class _Case:
  """One step with its arguments, FLOPs and timings."""

  def __init__(self, name, step, args, flops, **info):
    self.name, self.step, self.flops, self.info = name, step, flops, info
    self.args = [tf.constant(a, tf.float32) for a in args]
    self.times, self.user, self.system, self.faults = [], [], [], []
    self.trace_s = self.first_call_s = 0.0

  def Prepare(self, warmup):
    start = time.perf_counter()
    self.step.get_concrete_function(*self.args)
    self.trace_s = time.perf_counter() - start
    self.first_call_s = self.Run()[0]
    for _ in range(warmup):
      self.Run()

  def Run(self):
    """One call, blocking until every output is computed. Returns wall, user, system seconds, page faults."""
    wall, cpu, faults = time.perf_counter(), os.times(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    outputs = self.step(*self.args)
    _Wait(outputs)
    end = os.times()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return time.perf_counter() - wall, end.user - cpu.user, end.system - cpu.system, faults

  def Summary(self):
    med = float(np.median(self.times))
    return dict(name=self.name, median_ms=1e3 * med, min_ms=1e3 * min(self.times),
                spread=(max(self.times) - min(self.times)) / med, user_ms=1e3 * float(np.median(self.user)),
                system_ms=1e3 * float(np.median(self.system)), page_faults=int(np.median(self.faults)),
                trace_s=self.trace_s,
                compile_s=max(self.first_call_s - med, 0.0), gflops=self.flops / 1e9,
                gflop_per_s=self.flops / med / 1e9, **self.info)


def _CompileModes(modes):
  """The dense rows' compile modes: the dense FFN has no islands, so graph and graph_no_islands share its graph row."""
  return [c for c in ('jit', 'graph') if any((m == 'jit') == (c == 'jit') for m in modes)]


def BuildCases(config: Config):
  """The steps to time, in the order they are reported: matmuls, dense, MoE at num_experts, the sweep.
  ValueError for an unknown mode or dispatch."""
  g, s, m, h = config.groups, config.group_size, config.model_dim, config.hidden_dim
  cf, rng, modes = config.capacity_factor, np.random.RandomState(0), config.modes
  for mode in modes:
    if mode not in MODES:
      raise ValueError(f'unknown mode {mode!r}; expected some of {MODES}')
  x, dy = rng.normal(size=(g, s, m)), rng.normal(size=(g, s, m))
  n = config.matmul_dim
  a, b = rng.normal(size=(n, n)), rng.normal(size=(n, n))
  cases = [_matmul_case(n, a, b, c) for c in ('jit', 'graph') if c == 'jit' or c in _CompileModes(modes)]
  cases += [_dense_case(g, s, m, h, x, dy, rng, c) for c in _CompileModes(modes)]
  runs = [(config.num_experts, d, mode) for mode in modes for d in config.dispatch]
  runs += [(int(e), d, mode) for mode in modes for d in config.sweep_dispatch for e in config.sweep_experts
           if (int(e), d, mode) not in runs]
  for e, dispatch, mode in runs:
    if dispatch not in moe.DISPATCH_MODES:
      raise ValueError(f'unknown dispatch {dispatch!r}; expected one of {moe.DISPATCH_MODES}')
    cases.append(_moe_case(g, s, m, h, e, cf, dispatch, mode, x, dy, rng, WiLayout(mode, config.wi_layout)))
  return cases


def TimeCases(cases, repeats, warmup):
  for case in cases:
    case.Prepare(warmup)
  for _ in range(repeats):
    for case in cases:  # round-robin: outside load hits every case alike
      wall, user, system, faults = case.Run()
      case.times.append(wall)
      case.user.append(user)
      case.system.append(system)
      case.faults.append(faults)


def Report(cases, config: Config):
  """Returns (table text, results dict) with the ratios the targets are stated in.

  Each MoE row is divided by the dense row of its own compile mode (`over_dense`) and by the faster dense row
  (`over_best_dense`); FLOP/s are divided by the jit-compiled matmul's, as the target defines them.
  """
  rows = [c.Summary() for c in cases]
  matmul = next(r for r in rows if r['kind'] == 'matmul' and r['mode'] == 'jit')
  dense = {r['mode']: r for r in rows if r['kind'] == 'dense'}
  best_dense = min(dense.values(), key=lambda r: r['median_ms'])
  moe_rows = [r for r in rows if r['kind'] == 'moe']
  for r in moe_rows:
    own = dense['jit' if r['mode'] == 'jit' else 'graph']
    r['over_dense'] = r['median_ms'] / own['median_ms']
    r['over_dense_min'] = r['min_ms'] / own['min_ms']
    r['over_best_dense'] = r['median_ms'] / best_dense['median_ms']
  for r in rows:
    r['flops_fraction'] = r['gflop_per_s'] / matmul['gflop_per_s']
  checks = []
  for mode in config.modes:
    main = [r for r in moe_rows if r['dispatch'] == 'index' and r['experts'] == config.num_experts and
            r['mode'] == mode]
    if main:
      r = main[0]
      for d in sorted(dense.values(), key=lambda d: d is not best_dense):
        best = ' (best dense)' if d is best_dense else ''
        checks.append((f'MoE {mode} / dense {d["mode"]}{best}', r['median_ms'] / d['median_ms'], '<=',
                       _TARGET_MOE_OVER_DENSE))
      checks.append((f'MoE {mode} FLOP/s / matmul jit', r['flops_fraction'], '>=', _TARGET_FLOPS_FRACTION))
    sweep = sorted((r for r in moe_rows if r['dispatch'] == 'index' and r['mode'] == mode),
                   key=lambda r: r['experts'])
    if len(sweep) > 1 and sweep[0]['experts'] < sweep[-1]['experts']:
      lo, hi = sweep[0], sweep[-1]
      checks.append((f'MoE {mode} E={hi["experts"]} / E={lo["experts"]}', hi['median_ms'] / lo['median_ms'],
                     '<=', _TARGET_SWEEP_RATIO))
  lines = [f'{"step":<32}{"median ms":>10}{"min ms":>8}{"spread":>7}{"user ms":>8}{"sys ms":>7}{"faults":>7}'
           f'{"trace s":>8}{"compile s":>10}{"GFLOP/s":>8}{"/dense":>7}{"/matmul":>8}']
  for r in rows:
    ratio = f'{r["over_dense"]:>7.2f}' if 'over_dense' in r else f'{"":>7}'
    lines.append(f'{r["name"]:<32}{r["median_ms"]:>10.1f}{r["min_ms"]:>8.1f}{r["spread"]:>7.2f}'
                 f'{r["user_ms"]:>8.0f}{r["system_ms"]:>7.0f}{r["page_faults"]:>7}{r["trace_s"]:>8.2f}'
                 f'{r["compile_s"]:>10.2f}{r["gflop_per_s"]:>8.0f}{ratio}{r["flops_fraction"]:>8.2f}')
  lines.append('(/dense: over the dense row of the same compile mode; /matmul: over the '
               'jit matmul)')
  lines.append('')
  for name, value, op, target in checks:
    met = value <= target if op == '<=' else value >= target
    lines.append(f'{name:<44}{value:6.2f}   target {op} {target:<5} {"met" if met else "MISSED"}')
  results = dict(rows=rows, checks=[dict(name=n, value=v, op=o, target=t) for n, v, o, t in checks])
  return '\n'.join(lines), results


def ProfileStep(case, calls=5):
  """Per-XLA-op milliseconds per call of `case`, from the runtime's trace events, largest first."""
  # Imported here: only --profile needs the profiler's protos.
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  logdir = tempfile.mkdtemp(prefix='moe_benchmark_profile_')
  tf.profiler.experimental.start(logdir)
  for _ in range(calls):
    case.Run()
  tf.profiler.experimental.stop()
  space = xplane_pb2.XSpace()
  with open(glob.glob(os.path.join(logdir, '**', '*.xplane.pb'), recursive=True)[0], 'rb') as f:
    space.ParseFromString(f.read())
  # HLO instruction name -> shape and opcode, to label the events.
  labels = {}
  for line in case.step.experimental_get_compiler_ir(*case.args)(stage='optimized_hlo').split('\n'):
    m = re.match(r'\s*(?:ROOT )?%(\S+) = (\S+) ([\w-]+)\(', line)
    if m:
      labels[m.group(1)] = f'{m.group(3)} {m.group(2)}'
  totals = collections.Counter()
  for plane in space.planes:
    names = {k: v.name for k, v in plane.event_metadata.items()}
    for line in plane.lines:
      for event in line.events:
        name = names.get(event.metadata_id, '')
        if name in labels:
          totals[name] += event.duration_ps / 1e9 / calls
  return [(name, ms, labels[name]) for name, ms in totals.most_common()]


def ProfileText(case):
  ops = ProfileStep(case)
  total = sum(ms for _, ms, _ in ops)
  groups = collections.Counter()
  for _, ms, label in ops:
    opcode, shape = label.split(' ', 1)
    if opcode == 'dot':
      rank = shape.split(']')[0].count(',') + 1
      groups['expert matmuls' if rank >= 3 else 'router matmuls'] += ms
    else:
      groups['everything else (gating, dispatch, combine, activation)'] += ms
  lines = [f'Per-op time of {case.name}, ms per step ({total:.1f} ms in ops; with several threads, '
           'concurrent ops overlap):']
  lines += [f'  {ms:7.2f}  {ms / total:5.1%}  {name}' for name, ms in groups.most_common()]
  lines += [f'  {ms:7.2f}  {name:<28} {label}' for name, ms, label in ops[:15]]
  return '\n'.join(lines)


def KeepFreedMemory():
  libc = ctypes.CDLL('libc.so.6')
  m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
  if not (libc.mallopt(m_mmap_threshold, 1 << 30) and libc.mallopt(m_trim_threshold, (1 << 31) - 1)):
    raise RuntimeError('mallopt refused the thresholds')
