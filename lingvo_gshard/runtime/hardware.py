"""What this machine's processor can do fast, for choices that depend on it (activation dtype, batch rows,
compile mode).

Kept in one place, in the runtime: experiments say `fprop_dtype='auto'` and `batch_rows=0`, and
`ResolveAuto` answers for this machine; the answer is printed into params.txt (a run restores with the
dtype and batch it trained with, whatever machine evaluates it).
"""
import functools
import os
from typing import FrozenSet, List, Tuple

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


def MemoryBytes(meminfo: str = '/proc/meminfo') -> Tuple[int, int]:
  """(physical memory, memory available now) in bytes; available is what the kernel could give a new
  process without swapping (MemAvailable), the physical size where the kernel does not say."""
  total = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
  try:
    with open(meminfo, encoding='ascii', errors='replace') as f:
      for line in f:
        if line.startswith('MemAvailable:'):
          return total, int(line.split()[1]) * 1024
  except (OSError, ValueError, IndexError):
    pass
  return total, total


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


AUTO_DTYPE = 'auto'


def ResolveAuto(root) -> List[str]:
  """Fills in, in place, what an experiment's params leave to the machine; returns 'key : value' lines.

  Experiments declare and never read the machine: a layer's `fprop_dtype = 'auto'` becomes ActivationDtype()
  here, and an input's `batch_rows = 0` becomes `auto_batch_rows[0]` where bfloat16 is fast, else
  `auto_batch_rows[1]`. The trainer calls this before it writes params.txt, so a run's params.txt records the
  resolved values and a run restored on another machine keeps them.
  """
  resolved = []
  for key, value in list(root.IterParams()):
    owner_key, _, leaf = key.rpartition('.')
    if leaf == 'fprop_dtype' and isinstance(value, str) and value == AUTO_DTYPE:
      root.Set(**{key: ActivationDtype()})
      resolved.append(f'{key} : {ActivationDtype().name}')
    elif leaf == 'batch_rows' and value == 0 and owner_key and 'auto_batch_rows' in root.Get(owner_key):
      fast, slow = root.Get(f'{owner_key}.auto_batch_rows')
      rows = fast if HasFastBfloat16() else slow
      root.Set(**{key: rows})
      resolved.append(f'{key} : {rows}')
  return resolved
