"""What a run checks of its model before it allocates anything: that the weights and optimizer state fit a
device (and a warning when the activations come near the memory available), and that every MoE layer can
split a training batch into groups the mesh divides."""
from typing import Callable

from lingvo_gshard.core import sharding
from lingvo_gshard.runtime import hardware

# The share of the memory available at start above which an estimated run is said to risk being killed: the
# estimate leaves out TensorFlow's own buffers, the input pipeline and compiled programs.
MEMORY_WARNING = 0.8


def CheckMemory(name: str, task, inp, partitioner: sharding.Partitioner, optimizer,
                log: Callable[[str], None]) -> None:
  """Refuses (ValueError) a model `task` whose weights, gradients and optimizer state cannot fit a device;
  warns when the estimate with activations (models/analysis.py, no rematerialisation assumed) of the train
  input `inp` comes near the memory available now, where the kernel may kill the run."""
  from lingvo_gshard.models import analysis  # pylint: disable=g-import-not-at-top
  model = task.Instantiate()  # declares weights only
  CheckRouting(model, inp, partitioner)
  length = max(inp.max_source_length, inp.max_target_length)
  a = analysis.Analyze(name, model, partitioner, tokens_per_step=inp.batch_rows * length, seq_len=length,
                       remat=False, optimizer=optimizer)
  state = a.bytes_per_device * 2 + a.optimizer_bytes_per_device  # weights, their gradients, slots
  total, available = hardware.MemoryBytes()
  gib = lambda b: f'{b / 2**30:.1f} GiB'
  if state > total:
    raise ValueError(f'{name} needs {gib(state)} per device for weights, gradients and optimizer state on '
                     f'mesh {partitioner.mesh}; this machine has {gib(total)} (analyse it with '
                     'tools/model_analysis instead)')
  need = state + a.activation_bytes_per_device
  if need > MEMORY_WARNING * available:
    log(f'warning: {name} may run out of memory: about {gib(need)} per device (weights, gradients, optimizer '
        f'state, activations of {inp.batch_rows} rows) of {gib(available)} available now; fewer '
        'input.batch_rows would need less')


def CheckRouting(model, inp, partitioner: sharding.Partitioner) -> None:
  """Every MoE layer splits a training batch into groups the mesh divides (MoELayer.GroupShape), checked
  here rather than at the first step's trace."""
  from lingvo_gshard.layers import moe_layer  # pylint: disable=g-import-not-at-top
  lengths = {'encoder': inp.packed_source_length if inp.packing else inp.max_source_length,
             'decoder': inp.packed_target_length if inp.packing else inp.max_target_length}
  with sharding.use(partitioner):
    for stack, length in lengths.items():
      for layer in getattr(model, stack).IterLayers() if hasattr(model, stack) else ():
        if isinstance(layer, moe_layer.MoELayer):
          layer.GroupShape(inp.batch_rows * length)
