r"""Benchmarks the MoE FFN step (forward + backward) against a dense FFN of the same active FLOPs.

  python -m lingvo_gshard.tools.moe_benchmark [--groups=4 --group_size=1024 --model_dim=256 \
      --hidden_dim=1024 --num_experts=16 --capacity_factor=2.0 --sweep_experts=8,16,32,64,128] \
      [--modes=jit,graph] [--json=out.json] [--profile --intra_op_threads=1]

Every step returns y and the gradients w.r.t. x and all weights. Each runs in every --modes:
  * jit: the whole step is one XLA program (`tf.function(jit_compile=True)`), as on TPU;
  * graph: the step runner's graph mode, a graph-mode `tf.function` (TF's own kernels: oneDNN matmuls on CPU)
    in which the MoE's routing + dispatch and its combine run as two XLA islands
    (`moe_ffn(island=step_runner.CompileIsland)`); the dense FFN has nothing to put in an island;
  * graph_no_islands: graph mode without islands (routing and dispatch as hundreds of small TF ops).
Measured in one process:
  * dense: relu(x·wi)·wo with hidden 2H on the same G·S tokens: the FLOPs of top-2 routing at cf = 2, once
    per compile mode (jit; graph for both graph modes);
  * MoE at E = --num_experts with each dispatch path (--dispatch), in each mode;
  * the E sweep at fixed tokens (--sweep_experts, --sweep_dispatch), in each mode;
  * one large N x N x N matmul, jit-compiled: the machine's achievable FLOP/s, the reference of the FLOP/s
    target (and in graph mode, for information).
Steps are timed round-robin (one call of each per round, --repeats rounds after --warmup calls), so a burst of
load from other processes slows every row alike; the table gives median and min wall time, the spread
(max-min)/median, the median process CPU time split into user and system, and the minor page faults per step
(fresh output buffers the kernel has to map and zero: system time). Trace = Python tracing to a graph;
compile = first call minus trace minus the median step (XLA compiles the whole step in jit mode, the islands
in graph mode). FLOPs count the matmuls executed: expert FFNs on all E·G·C slots (filled or not) plus the
router, x3 for forward + backward.

--profile prints where the time of the jit index step at --num_experts goes, per XLA op (from the XLA CPU
runtime's trace events); with --intra_op_threads=1 ops run one at a time and the figures add up to the step.
"""
import json
import os

from absl import app
from absl import flags
import tensorflow as tf

from lingvo_gshard.bench import moe_ffn
from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files

_GROUPS = flags.DEFINE_integer('groups', 4, 'G: groups of tokens.', lower_bound=1)
_GROUP_SIZE = flags.DEFINE_integer('group_size', 1024, 'S: tokens per group.', lower_bound=1)
_MODEL_DIM = flags.DEFINE_integer('model_dim', 256, 'M.', lower_bound=1)
_HIDDEN_DIM = flags.DEFINE_integer('hidden_dim', 1024, 'H of each expert; the dense baseline uses 2H.', lower_bound=1)
_NUM_EXPERTS = flags.DEFINE_integer('num_experts', 16, 'E of the main comparison.', lower_bound=1)
_CAPACITY_FACTOR = flags.DEFINE_float('capacity_factor', 2.0, 'cf: C = int(S*cf/E), rounded up to 4.',
                                      lower_bound=1e-06)
_DISPATCH = flags.DEFINE_list('dispatch', ['index', 'einsum'], 'Dispatch paths compared at --num_experts.')
_MODES = flags.DEFINE_list('modes', ['jit', 'graph'], 'How steps run: jit, graph and/or graph_no_islands '
                           '(see above).')
_SWEEP_EXPERTS = flags.DEFINE_list('sweep_experts', ['8', '16', '32', '64', '128'],
                                   'E values of the sweep at fixed tokens; empty to skip.')
_SWEEP_DISPATCH = flags.DEFINE_list('sweep_dispatch', ['index'], 'Dispatch paths of the E sweep.')
_MATMUL_DIM = flags.DEFINE_integer('matmul_dim', 2048, 'N of the reference N x N x N matmul.', lower_bound=1)
_REPEATS = flags.DEFINE_integer('repeats', 10, 'Timed rounds (one call of every step per round).', lower_bound=1)
_WARMUP = flags.DEFINE_integer('warmup', 2, 'Untimed calls of each step after compilation.', lower_bound=0)
_INTRA_OP_THREADS = flags.DEFINE_integer('intra_op_threads', 0, 'TensorFlow/XLA threads; 0 = all cores.', lower_bound=0)
_KEEP_FREED_MEMORY = flags.DEFINE_bool(
    'keep_freed_memory', False,
    "glibc mallopt: serve large buffers from the heap and never give freed memory back to the kernel, so a "
    "step's outputs land on pages that are already mapped (tcmalloc-like). Off: glibc maps every buffer over "
    "32 MB afresh and the kernel zero-fills it page by page on first touch (see the faults column).")
_WI_LAYOUT = flags.DEFINE_enum(
    'wi_layout', 'auto', ['auto', 'emh', 'ehm'],
    "Storage of the experts' first matmul (moe.moe_ffn's wi_layout). auto: each mode's faster one, 'ehm' for "
    "TF-graph steps and 'emh' for jit steps.")
_PROFILE = flags.DEFINE_bool('profile', False, 'Print the per-op time of the index step at --num_experts.')
_JSON = flags.DEFINE_string('json', '', "Write the results as JSON to this path ('-' = stdout).")

def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  try:
    sweep_experts = [int(e) for e in _SWEEP_EXPERTS.value]
  except ValueError:
    raise app.UsageError(f'--sweep_experts={",".join(_SWEEP_EXPERTS.value)}: expected numbers of experts') from None
  if _PROFILE.value:
    # Read when XLA first compiles, which has not happened yet: the CPU runtime then emits per-op events.
    xla_flags = os.environ.get('XLA_FLAGS', '')
    os.environ['XLA_FLAGS'] = f'{xla_flags} --xla_cpu_enable_xprof_traceme=true'.strip()
  if _KEEP_FREED_MEMORY.value:
    moe_ffn.KeepFreedMemory()
  if _INTRA_OP_THREADS.value:
    tf.config.threading.set_intra_op_parallelism_threads(_INTRA_OP_THREADS.value)
  load_before = os.getloadavg()[0]
  config = moe_ffn.Config(
      groups=_GROUPS.value, group_size=_GROUP_SIZE.value, model_dim=_MODEL_DIM.value,
      hidden_dim=_HIDDEN_DIM.value, num_experts=_NUM_EXPERTS.value, capacity_factor=_CAPACITY_FACTOR.value,
      dispatch=_DISPATCH.value, modes=_MODES.value, sweep_experts=sweep_experts,
      sweep_dispatch=_SWEEP_DISPATCH.value, matmul_dim=_MATMUL_DIM.value, wi_layout=_WI_LAYOUT.value)
  try:
    cases = moe_ffn.BuildCases(config)
  except ValueError as e:
    raise app.UsageError(str(e))
  moe_ffn.TimeCases(cases, _REPEATS.value, _WARMUP.value)
  text, results = moe_ffn.Report(cases, config)
  results['config'] = dict(
      groups=_GROUPS.value, group_size=_GROUP_SIZE.value, model_dim=_MODEL_DIM.value,
      hidden_dim=_HIDDEN_DIM.value, capacity_factor=_CAPACITY_FACTOR.value, modes=_MODES.value,
      repeats=_REPEATS.value,
      intra_op_threads=_INTRA_OP_THREADS.value, keep_freed_memory=_KEEP_FREED_MEMORY.value,
      xla_flags=os.environ.get('XLA_FLAGS', ''),
      tf_version=tf.__version__, load_average_1min=[load_before, os.getloadavg()[0]])
  print(f'G={_GROUPS.value} S={_GROUP_SIZE.value} M={_MODEL_DIM.value} H={_HIDDEN_DIM.value} '
        f'cf={_CAPACITY_FACTOR.value}; {_REPEATS.value} rounds; load average {load_before:.1f} -> '
        f'{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores')
  print(text)
  if _PROFILE.value:
    main_case = [c for c in cases if c.info.get('dispatch') == 'index' and c.info.get('mode') == 'jit' and
                 c.info.get('experts') == _NUM_EXPERTS.value]
    if main_case:
      print()
      print(moe_ffn.ProfileText(main_case[0]))
  if _JSON.value == '-':
    print(json.dumps(results, indent=1))
  elif _JSON.value:
    files.WriteText(_JSON.value, json.dumps(results, indent=1))


if __name__ == '__main__':
  _common.Main('moe_benchmark', main)
