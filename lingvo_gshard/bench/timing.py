"""Timing helpers every benchmark shares: medians, round-robin timing, the reference matmul."""
import time

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import


def Median(fn, repeats):
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def RoundRobin(fns, repeats):
  """Median seconds of each fn, timed one call of each per round."""
  times = [[] for _ in fns]
  for _ in range(repeats):
    for fn, t in zip(fns, times):
      start = time.perf_counter()
      fn()
      t.append(time.perf_counter() - start)
  return [float(np.median(t)) for t in times]


def Matmul(n):
  """(FLOPs, call) of one jit-compiled n^3 matmul, compiled."""
  a = tf.random.normal([n, n])
  mm = tf.function(lambda a: tf.matmul(a, a), jit_compile=True)
  mm(a)
  # Not `.numpy()`: copying the 16 MB result out would be timed as part of the reference. A tf.function call
  # in synchronous eager mode returns computed outputs on a CPU (GPU kernels would still be queued);
  # async_wait also covers async eager mode.
  return 2 * n**3, lambda: (mm(a), context.async_wait())


def MatmulRate(dim: int = 2048, repeats: int = 5) -> float:
  """GFLOP/s of a jit-compiled float32 dim^3 matmul (best of `repeats`): the machine's reference rate."""
  flops, call = Matmul(dim)
  best = min(_Seconds(call) for _ in range(repeats))
  return flops / best / 1e9


def _Seconds(fn) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start
