"""What a layer may declare about how it is compiled, answered by the runtime, which layers never import.

A layer marks a sub-computation worth compiling on its own with `Island(fn)` (the MoE routing + dispatch and
combine, the token losses). The runtime (`runtime/step_runner.py`) decides, while it traces a step, whether a
marked function becomes an XLA island, by installing an island compiler for that trace with `Answering(...)`;
everywhere else `Island(fn)` is `fn`.

The same channel carries the one lowering choice a layer's arithmetic depends on: whether a whole-tensor
bitcast is allowed (`BitcastsAllowed()`; DTensor's SPMD expansion rejects it on sharded tensors). Both
lowerings compute the same values; the runtime picks, the layer only asks this module.
"""
import contextlib
import threading
from typing import Callable, Optional

_STATE = threading.local()  # .island: Optional[Callable]; .bitcasts: bool


def Island(fn: Callable) -> Callable:
  """`fn` as the runtime compiles a marked sub-computation in the step being traced (`fn` itself if none).

  Call it per use (not at import), so that the answer is that of the step being traced."""
  compiler = getattr(_STATE, 'island', None)
  return compiler(fn) if compiler is not None else fn


def BitcastsAllowed() -> bool:
  """True where the runtime allows whole-tensor bitcasts (unsharded steps); False by default."""
  return getattr(_STATE, 'bitcasts', False)


@contextlib.contextmanager
def Answering(island: Optional[Callable[[Callable], Callable]] = None, bitcasts: bool = False):
  """The runtime's side: within this context (one step's trace), `Island` compiles with `island` (None:
  identity) and `BitcastsAllowed()` is `bitcasts`."""
  before = (getattr(_STATE, 'island', None), getattr(_STATE, 'bitcasts', False))
  _STATE.island, _STATE.bitcasts = island, bitcasts
  try:
    yield
  finally:
    _STATE.island, _STATE.bitcasts = before
