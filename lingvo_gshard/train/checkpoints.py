"""What a checkpoint holds and how it is checked: the key scheme, layout-independent weights, candidates.

Keys read like the params summary: `w/<layer path>/<weight>` for weights, `opt/<weight path>/<slot>` for
optimizer state. Values are stored in each weight's canonical layout (`WeightSpec.checkpoint_perm`): a
weight kept transposed for speed (the MoE layer's `wi_layout='ehm'`) is written and read as the canonical
[E,M,H], with its optimizer slots renamed or transposed to match, so a checkpoint restores whatever the
layout setting.
"""
import io
import json
import os
import re
from typing import Callable, Dict, List, Sequence

from google.protobuf import text_format
import tensorflow as tf
from tensorflow.experimental import dtensor
from tensorflow.python.trackable import base as trackable_base  # pylint: disable=g-direct-tensorflow-import

from lingvo_gshard.utils import files

CHECKPOINT_LOG = 'checkpoints.jsonl'
STATE_FILE = 'checkpoint'  # TensorFlow's CheckpointState text proto: the checkpoints of a log directory


class StateUnreadable(ValueError):
  """A log directory's STATE_FILE or CHECKPOINT_LOG cannot be used; the message names the file, in one line."""


def Reader(path: str):
  """TensorFlow's reader of checkpoint `path` (a prefix such as LOGDIR/ckpt-400). tf.train.load_checkpoint
  first asks whether the prefix is a directory, which ram:// answers yes (the prefix begins the names of the
  checkpoint's files: see utils/files.py), so a URL is opened as a prefix directly."""
  if files.IsUrl(path):
    return tf.compat.v1.train.NewCheckpointReader(path)
  return tf.train.load_checkpoint(path)


def Step(path: str) -> int:
  """The training step stored in checkpoint `path`."""
  return int(Reader(path).get_tensor('step/.ATTRIBUTES/VARIABLE_VALUE'))


def ReadState(logdir: str):
  """TensorFlow's CheckpointState of `logdir` (None if it has no STATE_FILE); StateUnreadable if the file does
  not parse. TensorFlow logs and ignores some bad state files (a text-format error) and raises on others (bytes
  that are not UTF-8, no model_checkpoint_path), so every reader of the file asks here."""
  path = os.path.join(logdir, STATE_FILE)
  if not files.Exists(path):
    return None
  try:
    state = tf.train.get_checkpoint_state(logdir)
  except (ValueError, tf.errors.OpError, text_format.ParseError) as e:  # UnicodeDecodeError is a ValueError
    raise StateUnreadable(f'{path}: unreadable checkpoint state ({Brief(e)})') from None
  if state is None:
    raise StateUnreadable(f'{path}: unreadable checkpoint state (not a CheckpointState text proto)')
  return state


def _IsNumber(value, kind=(int, float)) -> bool:
  return isinstance(value, kind) and not isinstance(value, bool)


def ReadLog(logdir: str) -> List[Dict]:
  """The rows of the run's CHECKPOINT_LOG ([] if there is none), each with an int `step`, a `checkpoint` name
  and a number `train_seconds` (and a `commit`, if recorded). A line that is not JSON (a write cut short by a
  kill) is skipped, as files.ReadJsonl does (lines split as it splits them); bytes that are not UTF-8, or JSON
  that is not such a row, are StateUnreadable naming the file and line."""
  path = os.path.join(logdir, CHECKPOINT_LOG)
  if not files.Exists(path):
    return []
  remove = 'remove the line (it holds the training time and commit of one checkpoint)'
  try:
    data = files.ReadBytes(path)
    text = data.decode('utf-8')
  except OSError as e:
    raise StateUnreadable(f'{path}: cannot read ({e.strerror or e})') from None
  except UnicodeDecodeError as e:
    line = len(re.split(rb'\r\n|\r|\n', data[:e.start]))
    raise StateUnreadable(f'{path}:{line}: not UTF-8; {remove}') from None
  rows = []
  for number, line in enumerate(io.StringIO(text, newline=None), 1):
    try:
      row = json.loads(line)
    except ValueError:
      continue
    except RecursionError:
      row = None
    if not (isinstance(row, dict) and _IsNumber(row.get('step'), int) and isinstance(row.get('checkpoint'), str)
            and _IsNumber(row.get('train_seconds')) and isinstance(row.get('commit', ''), str)):
      raise StateUnreadable(f'{path}:{number}: not a checkpoint record {{"step", "checkpoint", "train_seconds"}}; '
                            f'{remove}')
    rows.append(row)
  return rows


def TrainSeconds(logdir: str) -> Dict[str, float]:
  """{checkpoint name: training wall-clock seconds up to it} from the run's CHECKPOINT_LOG (the trainer
  appends {step, checkpoint, train_seconds, time, commit} at every save; seconds add up across resumed runs)."""
  return {r['checkpoint']: r['train_seconds'] for r in ReadLog(logdir)}


def TrainCommits(logdir: str) -> Dict[str, str]:
  """{checkpoint name: commit of the code that trained up to it} from the run's CHECKPOINT_LOG; a checkpoint
  saved before the trainer recorded it is absent."""
  return {r['checkpoint']: r['commit'] for r in ReadLog(logdir) if 'commit' in r}


class WriteFailed(OSError):
  """A checkpoint (or its log line) could not be written: a full disk, a file-size limit, a permission."""


def RemovePartial(logdir: str, step: int):
  """Removes what a failed save of ckpt-<step> left (TensorFlow's temporary shard directory); the state file
  was not updated, so the checkpoint before is still the latest."""
  for name in files.ListDir(logdir):
    if name.startswith(f'ckpt-{step}_temp'):
      path = os.path.join(logdir, name)
      if files.IsDir(path):
        files.RemoveTree(path, ignore_errors=True)
      else:
        files.Remove(path)


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
    stored = Reader(path).get_variable_to_shape_map()
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
  one process only: `repair=False` for the others of a multi-client run). With no checkpoint files to
  rewrite it from, an unreadable state file is StateUnreadable, and so is a CHECKPOINT_LOG the trainer could
  not read at its first save: refused here, before the trainer writes anything in the log directory.
  """
  if not files.IsDir(logdir):
    return []
  found = {}
  for name in files.ListDir(logdir):
    m = re.fullmatch(r'ckpt-(\d+)\.index', name)
    if m:
      found[int(m.group(1))] = os.path.join(logdir, name[:-len('.index')])
  ReadLog(logdir)
  try:
    ReadState(logdir)
  except StateUnreadable as e:
    if not found:
      raise StateUnreadable(f'{e}; no ckpt-N files in {logdir} to rewrite it from: move it away to start '
                            'from step 0') from None
    if repair:
      state_path = os.path.join(logdir, STATE_FILE)
      log(f'{state_path}: unreadable checkpoint state; using the {len(found)} checkpoint files found (the '
          'old state file is kept as checkpoint.unreadable)')
      files.Rename(state_path, state_path + '.unreadable')
      paths = [found[k] for k in sorted(found)]
      tf.compat.v1.train.update_checkpoint_state(logdir, paths[-1], paths)
  return [found[k] for k in sorted(found, reverse=True)]


def LatestCheckpoint(logdir: str):
  """The path of the latest checkpoint the state file of `logdir` names (None if it has no state file, or the
  checkpoint it names is gone); StateUnreadable if the state file does not parse."""
  state = ReadState(logdir)
  path = state.model_checkpoint_path if state else ''
  return path if path and files.Exists(path + '.index') else None
