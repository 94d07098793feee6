"""The base class of a registered experiment (Lingvo's `SingleTaskModelParams`).

An experiment is a class whose methods return params: `Task()` (the model), `Train()` (optimizer, schedule,
steps), `Dev()`/`Test()` (input), and `ShardingRules()`/`Mesh()` (how logical axes map to a device mesh, in one
place). Sizes are class constants; variants are subclasses that change a few constants.
"""
from typing import Optional

from lingvo_gshard.core import hyperparams
from lingvo_gshard.core import mesh as mesh_lib
from lingvo_gshard.core import sharding


class Experiment:
  """Base experiment. Subclasses override `Task` and usually `Train`, `Dev`, `Test`."""

  # The mesh this experiment is meant for when none is given on the command line.
  DEFAULT_MESH = 'data:1'

  @classmethod
  def Summary(cls) -> str:
    """The first line of the class docstring: what `list_models` prints."""
    doc = (cls.__doc__ or '').strip()
    return doc.splitlines()[0] if doc else cls.__name__

  def Task(self) -> hyperparams.InstantiableParams:
    raise NotImplementedError(f'{type(self).__name__}.Task')

  def Train(self) -> hyperparams.Params:
    p = hyperparams.Params()
    p.Define('max_steps', 1000, 'Number of training steps.')
    p.Define('batch_size', 8, 'Examples (or packed rows) per step, over all devices.')
    p.Define('learning_rate', 1e-3, 'Peak learning rate.')
    p.Define('warmup_steps', 100, 'Linear warm-up steps before rsqrt decay.')
    p.Define('seed', 1234, 'Seed of weight initialisation and of every random draw in training.')
    return p

  def Dev(self) -> Optional[hyperparams.Params]:
    return None

  def Test(self) -> Optional[hyperparams.Params]:
    return None

  def ShardingRules(self) -> sharding.ShardingRules:
    return sharding.DEFAULT_RULES

  def Mesh(self, override: Optional[str] = None) -> mesh_lib.MeshSpec:
    return mesh_lib.MeshSpec.Parse(override or self.DEFAULT_MESH)

  def Partitioner(self, backend: str = 'none', mesh: Optional[str] = None, **kwargs) -> sharding.Partitioner:
    """A partitioner for this experiment's rules on `mesh` (default DEFAULT_MESH for dtensor/xla)."""
    spec = self.Mesh(mesh) if (mesh or backend != 'none') else None
    return sharding.Partitioner(backend, spec, self.ShardingRules(), **kwargs)
