"""The base class of a registered experiment (Lingvo's `SingleTaskModelParams`).

An experiment is a class whose methods return params: `Task()` (the model), `Learner()` (optimizer, schedule,
steps, intervals), `Train()`/`Dev()`/`Test()` (the input of each split, as in Lingvo), and
`ShardingRules()`/`Mesh()` (how logical axes map to a device mesh, in one place). Sizes are class constants;
variants are subclasses that change a few constants.
"""
import os
from typing import Optional

from lingvo_gshard.core import domains
from lingvo_gshard.core import hyperparams
from lingvo_gshard.core import mesh as mesh_lib
from lingvo_gshard.core import sharding
from lingvo_gshard.utils import files


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
    p.Define('max_steps', 1000, 'Number of training steps (with max_train_seconds: the most it may choose).',
             domains.Positive(int))
    p.Define('max_train_seconds', 0.0, 'A wall-clock budget for training, compilation and evaluations '
             'included (0 = off; building vocabularies is not training): the '
             'trainer times steps inside the warm-up and a dev evaluation, then fixes max_steps (and '
             "a decaying schedule's end) to fit; budget.json in the log directory records the decision, and a "
             'resumed run keeps it; if the machine slows down, the run stops when the budget ends '
             '(train/budget.py).', domains.NonNegative())
    p.Define('on_nonfinite', 'stop', "A NaN/Inf loss or gradient: 'stop' (exit naming the step; the last "
             "checkpoint stays as it was) or 'skip' (that step's update is not applied; skips are counted).",
             domains.OneOf('stop', 'skip'))
    p.Define('divergence_factor', 3.0, 'A logged training loss above this many times the lowest logged so far '
             'counts toward a divergence (a finite loss, which the NaN guard misses; 0 = off). The ratio is '
             'the loss_over_lowest training summary.',
             domains.Either(domains.OneOf(0.0), domains.Range(lo=1.0, lo_open=True)))
    p.Define('divergence_patience', 3, 'Log lines in a row above the limit that make a divergence.',
             domains.Positive(int))
    p.Define('on_divergence', 'stop', "A divergence: 'stop' (exit naming the steps, writing no checkpoint of "
             "the diverged weights) or 'warn' (log it and train on).", domains.OneOf('stop', 'warn'))
    p.Define('seed', 1234, 'Seed of weight initialisation and of every random draw in training.',
             domains.NonNegative(int))
    p.Define('log_interval', 10, 'Steps between log lines and training summaries.', domains.Positive(int))
    p.Define('eval_interval', 500, 'Steps between dev evaluations (0 = never).', domains.NonNegative(int))
    p.Define('eval_batches', 20, 'Dev batches per evaluation.', domains.Positive(int))
    p.Define('save_interval', 500, 'Steps between checkpoints (and at the end).', domains.Positive(int))
    p.Define('keep_checkpoints', 3, 'Newest checkpoints kept (older ones are deleted).', domains.Positive(int))
    p.Define('keep_checkpoint_every_n_hours', 0.0, 'Also keep one checkpoint per this many hours of '
             'training, whatever keep_checkpoints says (0 = off): points of a learning curve.',
             domains.NonNegative())
    p.Define('early_stop_patience', 0, 'Stop when this many dev evaluations in a row have not lowered the '
             'best dev cross-entropy by early_stop_tolerance (0 = off; Lingvo\'s early_stop window). Keep '
             'more checkpoints than this, and eval_interval = save_interval, so the best one is still there.',
             domains.NonNegative(int))
    p.Define('early_stop_tolerance', 0.0, 'Smallest drop of the dev cross-entropy that counts as better.',
             domains.NonNegative())
    return p

  def Train(self) -> Optional[hyperparams.Params]:
    """Input params of the training split (None: the experiment cannot be trained, e.g. analysis only)."""
    return None

  def Dev(self) -> Optional[hyperparams.Params]:
    return None

  def Test(self) -> Optional[hyperparams.Params]:
    return None

  def TokensPerStep(self) -> int:
    """Target tokens per training step (for analysis): rows x row length of the Train() input; where the
    runtime chooses the rows (batch_rows = 0), the larger of its choices."""
    p = self.Train()
    if p is None:
      return 0
    length = p.packed_target_length if p.packing else p.max_target_length
    return (p.batch_rows or max(p.auto_batch_rows)) * length

  def ShardingRules(self) -> sharding.ShardingRules:
    return sharding.DEFAULT_RULES

  def Mesh(self, override: Optional[str] = None) -> mesh_lib.MeshSpec:
    return mesh_lib.MeshSpec.Parse(override or self.DEFAULT_MESH)

  def Partitioner(self, backend: str = 'none', mesh: Optional[str] = None, **kwargs) -> sharding.Partitioner:
    """A partitioner for this experiment's rules on `mesh` (default DEFAULT_MESH for dtensor/xla)."""
    spec = self.Mesh(mesh) if (mesh or backend != 'none') else None
    return sharding.Partitioner(backend, spec, self.ShardingRules(), **kwargs)


# The top-level keys of an experiment's params, as params.txt prints them.
SECTIONS = ('task', 'learner', 'input')
SPLITS = ('train', 'dev', 'test')
PARAMS_FILE = 'params.txt'


def ExperimentParams(exp: Experiment, data_dir: str = '') -> hyperparams.Params:
  """One tree of everything a run is built from: task, learner and input.<split> (the splits it has).

  `data_dir`, when given, replaces every input's data directory (the trainer's --data_dir).
  """
  root = hyperparams.Params()
  root.Define('task', exp.Task(), 'The model.')
  root.Define('learner', exp.Learner(), 'Optimizer, schedule, steps and intervals.')
  inputs = hyperparams.Params()
  for split, fn in zip(SPLITS, (exp.Train, exp.Dev, exp.Test)):
    p = fn()
    if p is not None:
      if data_dir:
        p.data_dir = data_dir
      inputs.Define(split, p, f'Input of the {split} split.')
  root.Define('input', inputs, 'Inputs by split.')
  return root


def ResolveLearner(learner: hyperparams.Params) -> hyperparams.Params:
  """Fills what the learner's params leave to the run: a decaying schedule's total_steps = 0 becomes
  max_steps (so --max_steps moves the end of the schedule with it). Returns `learner`."""
  if 'on_nonfinite' in learner and learner.on_nonfinite not in ('stop', 'skip'):
    raise hyperparams.ParamsError(f"learner.on_nonfinite is {learner.on_nonfinite!r}; expected 'stop' or 'skip'")
  opt = learner.optimizer
  if 'total_steps' in opt and not opt.total_steps:
    if opt.schedule != 'rsqrt' and learner.max_steps <= opt.warmup_steps:
      raise hyperparams.ParamsError(
          f'learner.max_steps ({learner.max_steps}) must exceed learner.optimizer.warmup_steps '
          f'({opt.warmup_steps}): the {opt.schedule} schedule decays from the end of warm-up to max_steps')
    opt.total_steps = learner.max_steps
  return learner


def SplitOverrides(text: str):
  """Override text -> [(key, raw value)].

  Two syntaxes: Lingvo's `task.encoder.num_layers : 4; learner.save_interval : 20` (items split by `;` or
  newlines, `key : value`), and `a.b=1,c=2` (items split by top-level commas). Keys are as params.txt
  prints them; a key outside task/learner/input is a task key (`encoder.num_layers=4`).
  """
  if ';' in text or '\n' in text:
    items = [item for chunk in text.split('\n') for item in chunk.split(';')]
  else:
    items = hyperparams._SplitTopLevel(text)  # pylint: disable=protected-access
  out = []
  for item in items:
    item = item.strip()
    if not item or item.startswith('#'):
      continue
    eq, colon = item.find('='), item.find(':')
    if eq < 0 and colon < 0:
      raise hyperparams.ParamsError(f'override {item!r} is not of the form "key : value" or key=value')
    sep = '=' if eq >= 0 and (colon < 0 or eq < colon) else ':'
    key, _, raw = item.partition(sep)
    key = key.strip()
    if not key:
      raise hyperparams.ParamsError(f'override {item!r} has no key')
    if key.split('.')[0] not in SECTIONS:
      key = f'task.{key}'
    out.append((key, raw.strip()))
  return out


def ApplyOverrides(root: hyperparams.Params, text: str) -> list:
  """Applies override text (SplitOverrides' syntaxes) to `root`; returns the `key : value` lines applied.
  An unknown key or a wrong type raises ParamsError naming the key (and the closest keys)."""
  applied = []
  for key, raw in SplitOverrides(text):
    root._SetFromString(key, raw, where='')  # pylint: disable=protected-access
    applied.append(f'{key} : {hyperparams._ValueToText(root.Get(key))}')  # pylint: disable=protected-access
  return applied


# Params that older runs' params.txt may name and the code no longer has, because they never changed what a
# run computes: restoring such a run skips them. (xla_islands: how steps compile is the step runner's now.)
RETIRED_PARAMS = frozenset({'xla_islands'})


def LoadRunParams(exp: Experiment, logdir: str, data_dir: str = '') -> hyperparams.Params:
  """The params a run in `logdir` was trained with: the experiment's, updated from its params.txt (so the
  overrides it was trained with, and any default changed since, are what is restored)."""
  root = ExperimentParams(exp, data_dir)
  path = os.path.join(logdir, PARAMS_FILE)
  if not files.Exists(path):
    return root
  text = files.ReadText(path)
  lines = []
  for line in text.splitlines():
    key = line.partition(' :')[0].strip()
    if not key or key.startswith('#'):
      lines.append('')  # kept blank, so errors give the file's own line numbers
      continue
    if data_dir and key.startswith('input.') and key.endswith('.data_dir'):
      lines.append('')  # the caller's --data_dir wins: the corpus may have been built elsewhere
      continue
    if key.rpartition('.')[2] in RETIRED_PARAMS:
      lines.append('')
      continue
    try:
      root.Get(key)
    except hyperparams.ParamsError:
      if key.startswith('input.') and key.split('.')[1] not in root.input:
        lines.append('')  # an input split this experiment no longer defines
        continue
      raise hyperparams.ParamsError(f'{path}: {key!r} is not a param of {type(exp).__name__} (was the run '
                                    'trained with another experiment?)') from None
    lines.append(line)
  try:
    root.FromText('\n'.join(lines))
  except hyperparams.ParamsError as e:
    raise hyperparams.ParamsError(f'{path}: {e}') from None
  return root
