"""What a checkpoint holds and how it is checked: the key scheme, layout-independent weights, candidates.

Keys read like the params summary: `w/<layer path>/<weight>` for weights, `opt/<weight path>/<slot>` for
optimizer state. Values are stored in each weight's canonical layout (`WeightSpec.checkpoint_perm`): a
weight kept transposed for speed (the MoE layer's `wi_layout='ehm'`) is written and read as the canonical
[E,M,H], with its optimizer slots renamed or transposed to match, so a checkpoint restores whatever the
layout setting.
"""
import os
import re
import shutil
from typing import Callable, Dict, List, Sequence

import tensorflow as tf
from tensorflow.experimental import dtensor
from tensorflow.python.trackable import base as trackable_base  # pylint: disable=g-direct-tensorflow-import
from lingvo_gshard.utils import files

CHECKPOINT_LOG = 'checkpoints.jsonl'



def Step(path: str) -> int:
  """The training step stored in checkpoint `path`."""
  return int(tf.train.load_variable(path, 'step/.ATTRIBUTES/VARIABLE_VALUE'))



def TrainSeconds(logdir: str) -> Dict[str, float]:
  """{checkpoint name: training wall-clock seconds up to it} from the run's CHECKPOINT_LOG (the trainer
  appends {step, checkpoint, train_seconds, time, commit} at every save; seconds add up across resumed runs)."""
  return {r['checkpoint']: r['train_seconds'] for r in files.ReadJsonl(os.path.join(logdir, CHECKPOINT_LOG))}


def TrainCommits(logdir: str) -> Dict[str, str]:
  """{checkpoint name: commit of the code that trained up to it} from the run's CHECKPOINT_LOG; a checkpoint
  saved before the trainer recorded it is absent."""
  return {r['checkpoint']: r['commit'] for r in files.ReadJsonl(os.path.join(logdir, CHECKPOINT_LOG)) if 'commit' in r}






class WriteFailed(OSError):
  """A checkpoint (or its log line) could not be written: a full disk, a file-size limit, a permission."""


def RemovePartial(logdir: str, step: int):
  """Removes what a failed save of ckpt-<step> left (TensorFlow's temporary shard directory); the state file
  was not updated, so the checkpoint before is still the latest."""
  for name in os.listdir(logdir):
    if name.startswith(f'ckpt-{step}_temp'):
      path = os.path.join(logdir, name)
      if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
      else:
        os.remove(path)


class CheckpointMismatchError(ValueError):
  """A checkpoint's weights are not the model's (another architecture or experiment)."""


class Unreadable(CheckpointMismatchError):
  """A checkpoint's files are truncated or corrupt (as opposed to holding another model)."""


def Brief(e: Exception) -> str:
  """One short line of an error: TF's op errors lose their `{{function_node ...}}` prefix and `[Op:...]`
  suffix, which name the kernel, not the problem."""
  text = (str(e).splitlines() or [''])[0]
  text = re.sub(r'\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]$', '', text)
  return f'{type(e).__name__}: {text[:200]}'


class Permuted(trackable_base.Trackable):
  """A variable held with its dims permuted, checkpointed in the canonical layout under the same key a plain
  variable would use: canonical = transpose(variable, perm)."""

  def __init__(self, var: tf.Variable, perm: Sequence[int]):
    if isinstance(var, dtensor.DVariable):
      # TF 2.21 crashes restoring a DTensor value through a custom trackable; the permuted layouts are
      # one-device CPU speed choices anyway.
      raise ValueError(f'{var.name}: a weight stored permuted (e.g. wi_layout=\'ehm\') is a one-device layout '
                       'and cannot be checkpointed from a DTensor mesh; use the canonical layout there')
    self.var, self.perm = var, tuple(perm)
    self.inverse = tuple(self.perm.index(i) for i in range(len(self.perm)))

  @property
  def shape(self) -> tf.TensorShape:
    return tf.TensorShape([self.var.shape[a] for a in self.perm])

  def _serialize_to_tensors(self):
    return {trackable_base.VARIABLE_VALUE_KEY: tf.transpose(self.var.read_value(), self.perm)}

  def _restore_from_tensors(self, restored_tensors):
    return self.var.assign(tf.transpose(restored_tensors[trackable_base.VARIABLE_VALUE_KEY], self.inverse))


def _Canonical(var, perm):
  return Permuted(var, perm) if perm is not None and tuple(perm) != tuple(range(len(perm))) else var


def CheckpointObjects(model, optimizer=None) -> Dict[str, object]:
  """Weights (and optimizer slots) by key, each in its canonical layout. The one key scheme that the trainer
  writes and the evaluator restores."""
  out = {}
  for path, var, spec in model.IterVariablesWithSpecs():
    out[f'w/{path}'] = _Canonical(var, spec.checkpoint_perm)
    if optimizer and path in optimizer.slots:
      for name, (slot, perm) in optimizer.CanonicalSlots(spec, optimizer.slots[path]).items():
        out[f'opt/{path}/{name}'] = _Canonical(slot, perm)
  return {k.replace('.', '/'): v for k, v in out.items()}


def _CheckpointName(key: str) -> str:
  # How tf.train.Checkpoint names a variable it tracks under `key` (TF escapes '/' as '.S').
  return key.replace('.', '..').replace('/', '.S') + '/.ATTRIBUTES/VARIABLE_VALUE'


def CheckCheckpoint(path: str, objects: Dict[str, object]):
  """Raises CheckpointMismatchError, in one line naming the first differing weight, unless every weight in
  `objects` is in the checkpoint with its (canonical) shape and the checkpoint has no model weight (`w/`)
  beyond them; Unreadable if the checkpoint's files cannot be listed."""
  try:
    stored = dict(tf.train.list_variables(path))
  except (tf.errors.OpError, ValueError, IndexError) as e:
    raise Unreadable(f'{path}: unreadable checkpoint ({Brief(e)})') from None
  wanted = {_CheckpointName(k): (k, v) for k, v in objects.items()}
  for name, (key, var) in wanted.items():
    if name not in stored:
      raise CheckpointMismatchError(f'{path} does not match the model: it has no {key} {var.shape.as_list()} '
                                    '(trained with other params or another experiment?)')
    if list(stored[name]) != var.shape.as_list():
      raise CheckpointMismatchError(f'{path} does not match the model: {key} is {list(stored[name])} there, '
                                    f'{var.shape.as_list()} in the model')
  prefix = _CheckpointName('w/')[:-len('/.ATTRIBUTES/VARIABLE_VALUE')]
  extra = sorted(n for n in stored if n.startswith(prefix) and n not in wanted)
  if extra:
    key = extra[0][:-len('/.ATTRIBUTES/VARIABLE_VALUE')].replace('.S', '/').replace('..', '.')
    raise CheckpointMismatchError(f'{path} does not match the model: it has {len(extra)} weights the model '
                                  f'lacks, e.g. {key} {list(stored[extra[0]])} (trained with other params?)')


def CheckpointCandidates(logdir: str, log: Callable[[str], None] = print, repair: bool = True) -> List[str]:
  """Checkpoints of `logdir`, newest first: those the state file lists and every ckpt-N.index present.

  The files themselves are the ground truth: a state file that is garbage (or lists fewer than exist) must not
  make a rerun start again from step 0 and orphan the real checkpoints. An unreadable state file is moved
  aside (`checkpoint.unreadable`) and rewritten from the files, so the checkpoint manager keeps them (by
  one process only: `repair=False` for the others of a multi-client run).
  """
  if not os.path.isdir(logdir):
    return []
  found = {}
  for name in os.listdir(logdir):
    m = re.fullmatch(r'ckpt-(\d+)\.index', name)
    if m:
      found[int(m.group(1))] = os.path.join(logdir, name[:-len('.index')])
  state_path = os.path.join(logdir, 'checkpoint')
  if os.path.exists(state_path):
    try:
      state = tf.train.get_checkpoint_state(logdir)  # None when it does not parse (TF logs a warning)
    except Exception:  # pylint: disable=broad-except  (text_format's ParseError, by TF version)
      state = None
    if state is None and found and repair:
      log(f'{state_path}: unreadable checkpoint state; using the {len(found)} checkpoint files found (the '
          'old state file is kept as checkpoint.unreadable)')
      os.replace(state_path, state_path + '.unreadable')
      paths = [found[k] for k in sorted(found)]
      tf.compat.v1.train.update_checkpoint_state(logdir, paths[-1], paths)
  return [found[k] for k in sorted(found, reverse=True)]

