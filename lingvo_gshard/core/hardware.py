"""What this machine's processor can do fast, for choices that depend on it (activation dtype, compile mode).

Kept in one place so experiments and the step runner ask the same question the same way, and the answer is
printed into params.txt (a run restores with the dtype it trained with, whatever machine evaluates it).
"""
import functools
import os
from typing import FrozenSet

import tensorflow as tf


@functools.lru_cache(maxsize=None)
def CpuFlags(path: str = '/proc/cpuinfo') -> FrozenSet[str]:
  """The CPU feature flags the kernel reports (empty where there is no /proc/cpuinfo, e.g. macOS)."""
  try:
    with open(path, encoding='utf-8', errors='replace') as f:
      for line in f:
        if line.startswith('flags'):
          return frozenset(line.split(':', 1)[1].split())
  except OSError:
    pass
  return frozenset()


def HasFastBfloat16(flags: FrozenSet[str] = None) -> bool:
  """True when bfloat16 matmuls beat float32 here: an accelerator, or a CPU with AVX512_BF16 / AMX-BF16.

  Without those instructions oneDNN emulates bfloat16 and its matmuls run slower than float32's, so a CPU
  without them keeps float32 activations. LINGVO_GSHARD_BF16=0/1 overrides the rule.
  """
  forced = os.environ.get('LINGVO_GSHARD_BF16')
  if forced in ('0', '1'):
    return forced == '1'
  if tf.config.list_physical_devices('GPU') or tf.config.list_physical_devices('TPU'):
    return True
  flags = CpuFlags() if flags is None else flags
  return bool({'avx512_bf16', 'amx_bf16'} & flags)


def ActivationDtype(flags: FrozenSet[str] = None) -> tf.dtypes.DType:
  """bfloat16 where it is fast (weights, softmax, norms and the loss stay float32), else float32."""
  return tf.bfloat16 if HasFastBfloat16(flags) else tf.float32
