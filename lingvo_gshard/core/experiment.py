"""The base class of a registered experiment (Lingvo's `SingleTaskModelParams`).

An experiment is a class whose methods return params: `Task()` (the model), `Learner()` (optimizer, schedule,
steps, intervals), `Train()`/`Dev()`/`Test()` (the input of each split, as in Lingvo), and
`ShardingRules()`/`Mesh()` (how logical axes map to a device mesh, in one place). Sizes are class constants;
variants are subclasses that change a few constants.
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

  def Learner(self) -> hyperparams.Params:
    """How the model is trained: optimizer, steps, intervals, seed."""
    from lingvo_gshard.core import optimizers  # pylint: disable=g-import-not-at-top
    p = hyperparams.Params()
    p.Define('optimizer', optimizers.Adafactor.Params(), 'Optimizer params (learning rate and schedule).')
    p.Define('max_steps', 1000, 'Number of training steps.')
    p.Define('seed', 1234, 'Seed of weight initialisation and of every random draw in training.')
    p.Define('log_interval', 10, 'Steps between log lines and training summaries.')
    p.Define('eval_interval', 500, 'Steps between dev evaluations (0 = never).')
    p.Define('eval_batches', 20, 'Dev batches per evaluation.')
    p.Define('save_interval', 500, 'Steps between checkpoints (and at the end).')
    return p

  def Train(self) -> Optional[hyperparams.Params]:
    """Input params of the training split (None: the experiment cannot be trained, e.g. analysis only)."""
    return None

  def Dev(self) -> Optional[hyperparams.Params]:
    return None

  def Test(self) -> Optional[hyperparams.Params]:
    return None

  def TokensPerStep(self) -> int:
    """Target tokens per training step (for analysis): rows x row length of the Train() input."""
    p = self.Train()
    if p is None:
      return 0
    length = p.packed_target_length if p.packing else p.max_target_length
    return p.batch_rows * length

  def ShardingRules(self) -> sharding.ShardingRules:
    return sharding.DEFAULT_RULES

  def Mesh(self, override: Optional[str] = None) -> mesh_lib.MeshSpec:
    return mesh_lib.MeshSpec.Parse(override or self.DEFAULT_MESH)

  def Partitioner(self, backend: str = 'none', mesh: Optional[str] = None, **kwargs) -> sharding.Partitioner:
    """A partitioner for this experiment's rules on `mesh` (default DEFAULT_MESH for dtensor/xla)."""
    spec = self.Mesh(mesh) if (mesh or backend != 'none') else None
    return sharding.Partitioner(backend, spec, self.ShardingRules(), **kwargs)
