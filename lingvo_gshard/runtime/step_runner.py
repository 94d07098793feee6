"""How a step runs, decided in one place: whole-step XLA, a TF graph with XLA islands, DTensor SPMD, or
`strategy.run` on a TPU.

Model and layer code never asks which. A layer marks the sub-computations that are worth compiling on their
own with `core.compile_hints.Island(fn)` (the MoE routing + dispatch and combine, the token losses); the
runner decides whether marked code becomes an XLA island: only while it traces a TF-graph step. In a
jit-compiled step the whole step is one XLA computation already, and under DTensor or a strategy the step
compiles its own way, so there `Island(fn)` is `fn`. The runner also answers `compile_hints.BitcastsAllowed()`:
yes on the none backend (one device), no where DTensor or SPMD may shard the tensor.

Modes (`StepRunner.mode`):
  jit       none backend: the whole step is one XLA computation (accelerators; CPUs without AVX-512).
  graph     none backend: a TF graph (oneDNN's matmuls) with XLA islands around routing and losses.
  dtensor   DTensor's SPMD expansion of a TF graph over the mesh.
  xla       the xla backend's annotated step, XLA SPMD-partitioned; with a strategy, run by `strategy.run`
            on its one replica (a TPUStrategy compiles it for the TPU cores).
"""
from typing import Callable, Optional, Tuple

import tensorflow as tf

from lingvo_gshard.core import compile_hints
from lingvo_gshard.core import mesh as mesh_lib
from lingvo_gshard.core import sharding
from lingvo_gshard.runtime import hardware

MODES = ('jit', 'graph', 'dtensor', 'xla')


def CompileIsland(fn: Callable) -> Callable:
  """`fn` as an XLA island: a jit-compiled function (its gradient compiled too) inside the caller's graph."""
  return tf.function(fn, jit_compile=True, autograph=False)


def DefaultJit(flags=None) -> Tuple[bool, str]:
  """(jit, why) for the none backend on this machine.

  The rule comes from timing both modes with tools/model_benchmark.py and tools/moe_benchmark.py
  (docs/guides/design_measurements.md): where the CPU has AVX-512, a TF-graph step with islands beat
  whole-step jit (oneDNN's matmuls are faster than XLA CPU's); on an AVX2-only CPU jit won at every expert
  count. Accelerators always want jit.
  """
  if tf.config.list_physical_devices('GPU') or tf.config.list_physical_devices('TPU'):
    return True, 'an accelerator: whole-step XLA'
  flags = hardware.CpuFlags() if flags is None else flags
  if 'avx512f' in flags:
    return False, 'an AVX-512 CPU: TF graph steps (oneDNN matmuls) with XLA islands'
  return True, 'a CPU without AVX-512: whole-step XLA'


class StepRunner:
  """Compiles steps for `partitioner`: `Compile(fn)` is the callable a Learner runs every step."""

  def __init__(self, partitioner: sharding.Partitioner, jit: Optional[bool] = None,
               strategy: Optional[tf.distribute.Strategy] = None):
    """
    Args:
      partitioner: the backend and mesh the step's annotations and variables use.
      jit: none backend only: True = whole-step XLA, False = TF graph + islands, None = DefaultJit().
      strategy: xla backend only: run every step through `strategy.run` (a TPUStrategy of one SPMD replica
        spanning all cores, `core/tpu.py`); variables must then be created under `strategy.scope()`.
    """
    self.partitioner, self.strategy = partitioner, strategy
    backend = partitioner.backend
    if jit is not None and backend != 'none':
      raise mesh_lib.MeshError(f'--jit/--nojit choose how the none backend runs; {backend} compiles its own '
                               'way')
    if strategy is not None and backend != 'xla':
      raise mesh_lib.MeshError(f"a distribution strategy runs the xla backend's SPMD steps; not {backend}")
    self.why = ''
    if backend == 'none':
      if jit is None:
        jit, self.why = DefaultJit()
      else:
        self.why = 'chosen (--jit)' if jit else 'chosen (--nojit)'
      self.mode = 'jit' if jit else 'graph'
    else:
      self.mode = backend

  def __repr__(self):
    strategy = f', strategy={type(self.strategy).__name__}' if self.strategy is not None else ''
    return f'StepRunner(mode={self.mode!r}{strategy}; {self.partitioner})'

  def Describe(self) -> str:
    """One line for the log: the mode and why it was chosen."""
    return f'steps run as {self.mode}' + (f' ({self.why})' if self.why else '')

  def Compile(self, fn: Callable, **kwargs) -> Callable:
    """`fn` compiled the way this runner runs steps (kwargs go to tf.function).

    Without AutoGraph unless asked: the steps' loops are explicit `tf.while_loop`s, and converting every
    layer's source is most of a small model's first-step compile time."""
    kwargs.setdefault('autograph', False)
    if self.strategy is not None:
      strategy = self.strategy

      def Run(*args):
        out = strategy.run(fn, args=args)
        return tf.nest.map_structure(lambda t: strategy.experimental_local_results(t)[0], out)
      on_tpu = isinstance(strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy))
      return tf.function(Run, **kwargs) if on_tpu else tf.function(Run, jit_compile=True, **kwargs)
    answers = dict(island=CompileIsland if self.mode == 'graph' else None, bitcasts=self.mode in ('graph', 'jit'))

    def Traced(*args, **kw):
      with compile_hints.Answering(**answers):
        return fn(*args, **kw)
    if self.mode in ('graph', 'dtensor'):
      return tf.function(Traced, **kwargs)
    return tf.function(Traced, jit_compile=True, **kwargs)
