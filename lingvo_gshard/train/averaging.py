"""Checkpoint averaging (fairseq's scripts/average_checkpoints.py): the element-wise mean of the weights of a
run's last checkpoints, written as a log directory of its own that the evaluator restores like a trained run.

    plan = averaging.Plan(exp, '/tmp/m4tiny_moe_demo', last=3)
    averaging.Write(plan, '/tmp/m4tiny_moe_demo_avg3')
    evaluator.Evaluator(exp, '/tmp/m4tiny_moe_demo_avg3')   # decodes the average

The output directory holds what the evaluator reads of a run: params.txt, data.json and
post_init_model_params.txt copied from the run, one checkpoint ckpt-<S> (S: the newest averaged step, so
every reader of `ckpt-N` names and of the step variable keeps working), the state file `checkpoint` naming
it, ckpt-<S>.average.json (AVERAGE_SUFFIX: which checkpoints and steps were averaged; `Record` reads it, and
is how a reader tells an average from a trained checkpoint), and a checkpoints.jsonl row with the newest
averaged checkpoint's training seconds (an average costs no training of its own).

What is averaged: the model's float weights (keys `w/...`), in float64, each in its canonical layout (as
checkpoints.py stores it, so the mean does not depend on the run's wi_layout). Integer weights, the step and
the save counter are the newest checkpoint's. Optimizer slots (`opt/...`) and the training input's position
are dropped: the evaluator and an export restore weights only, the slots are the newest checkpoint's
trajectory and no mean of it, and without them the trainer refuses to resume from an average instead of
continuing training from a state no run reached.
"""
import dataclasses
import datetime
import json
import os
import re
import tempfile
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from lingvo_gshard.core import experiment as experiment_lib
from lingvo_gshard.core import sharding
from lingvo_gshard.train import checkpoints
from lingvo_gshard.train import corpus_identity
from lingvo_gshard.utils import files
from lingvo_gshard.utils import provenance

AVERAGE_SUFFIX = '.average.json'  # next to the checkpoint prefix: ckpt-1390.average.json
# What the output directory copies of the run: what the evaluator and reports read besides the checkpoint.
RUN_FILES = (experiment_lib.PARAMS_FILE, corpus_identity.DATA_FILE, 'post_init_model_params.txt')
_VALUE = '/.ATTRIBUTES/VARIABLE_VALUE'
_STEP = 'step' + _VALUE
# tf.train.Checkpoint's count of saves: the evaluator's restore asserts that every object it tracks, this
# one included, is in the checkpoint.
_SAVE_COUNTER = 'save_counter' + _VALUE


@dataclasses.dataclass
class Averaging:
  """What `Write` averages, all checked: checkpoints oldest first, their steps, and the weights they share."""
  experiment: str
  logdir: str  # whose RUN_FILES the output copies
  checkpoints: List[str]
  steps: List[int]
  weights: Dict[str, Tuple[Tuple[int, ...], tf.DType]]  # stored name -> (shape, dtype) of each model weight
  dropped: List[str]  # top-level keys of the newest checkpoint the output leaves out (opt, input, ...)

  @property
  def step(self) -> int:
    return self.steps[-1]


def Key(name: str) -> str:
  """The key a variable was tracked under (`w/mt/encoder/...`, `step`) from its name in a checkpoint, undoing
  TensorFlow's escaping ('/' is stored as '.S', '.' as '..')."""
  name = name[:-len(_VALUE)] if name.endswith(_VALUE) else name
  return re.sub(r'\.(.)', lambda m: '/' if m.group(1) == 'S' else m.group(1), name)


def _Reader(path: str):
  try:
    return checkpoints.Reader(path)
  except (tf.errors.OpError, ValueError) as e:
    raise checkpoints.Unreadable(f'{path}: unreadable checkpoint ({checkpoints.Brief(e)})') from None


def StoredWeights(path: str) -> Dict[str, Tuple[Tuple[int, ...], tf.DType]]:
  """{stored name: (shape, dtype)} of the model weights (`w/` keys) in checkpoint `path`."""
  reader = _Reader(path)
  shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
  return {n: (tuple(shapes[n]), dtypes[n]) for n in sorted(shapes) if Key(n).startswith('w/')}


def SelectCheckpoints(logdir: str, last: int = 0, names: Sequence[str] = ()) -> List[str]:
  """The `last` newest checkpoints of `logdir`, or `names` (ckpt-N in `logdir`, or paths), oldest first.
  One line if there are fewer than `last`, or a name is no checkpoint."""
  kept = checkpoints.CheckpointCandidates(logdir, repair=False)  # newest first; never rewrites the state file
  kept_text = ', '.join(os.path.basename(p) for p in reversed(kept)) or 'none'
  if bool(last) == bool(names):
    raise ValueError('give the number of newest checkpoints to average or their names, not both or neither')
  if last:
    if len(kept) < last:
      raise ValueError(f'{logdir} keeps {len(kept)} checkpoint{"s" * (len(kept) != 1)} ({kept_text}); '
                       f'averaging the last {last} needs {last}')
    return list(reversed(kept[:last]))
  paths = []
  for name in names:
    path = files.AbsPath(name if '/' in name else os.path.join(logdir, name))
    if not files.Exists(path + '.index'):
      raise FileNotFoundError(f'{path}: no such checkpoint (no {path}.index); {logdir} keeps {kept_text}')
    if path in paths:
      raise ValueError(f'{name} is named twice: each checkpoint counts once in a mean')
    paths.append(path)
  steps = [_Step(p) for p in paths]
  return [p for _, p in sorted(zip(steps, paths))]


def _Step(path: str) -> int:
  try:
    return checkpoints.Step(path)
  except (tf.errors.OpError, ValueError) as e:
    raise checkpoints.Unreadable(f'{path}: no readable step ({checkpoints.Brief(e)})') from None


def _ParamsLines(logdir: str) -> List[str]:
  """The `key : value` lines of `logdir`'s params.txt, without comments (the overrides a run was started
  with are repeated there as comments) and data directories (one corpus may sit in two places; data.json's
  fingerprint says whether it is the same build)."""
  path = os.path.join(logdir, experiment_lib.PARAMS_FILE)
  if not files.Exists(path):
    raise FileNotFoundError(f'{path}: no such file (the params the run was trained with)')
  keys = [(l.partition(' :')[0].strip(), l.strip()) for l in files.ReadText(path).splitlines()]
  return [l for k, l in keys if k and not k.startswith('#') and not k.endswith('.data_dir')]


def CheckSameRun(logdirs: Sequence[str]):
  """One line naming two log directories (and their first differing param) unless all were trained with
  the same params on the same corpus build: weights of different runs share no meaningful mean."""
  first, first_lines = logdirs[0], _ParamsLines(logdirs[0])
  first_data = corpus_identity.ReadData(first).get('fingerprint')
  for other in logdirs[1:]:
    lines = _ParamsLines(other)
    if lines != first_lines:
      diff = next(((a, b) for a, b in zip(first_lines, lines) if a != b), None) or (
          f'{len(first_lines)} lines', f'{len(lines)} lines')
      raise ValueError(f'{first} and {other} were trained with other params ({diff[0].strip()!r} vs '
                       f'{diff[1].strip()!r}); their checkpoints are not averaged')
    if corpus_identity.ReadData(other).get('fingerprint') != first_data:
      raise ValueError(f'{first} and {other} were trained on other corpus builds ({corpus_identity.DATA_FILE}); '
                       'their checkpoints are not averaged')


def CheckExperiment(exp: experiment_lib.Experiment, logdir: str, path: str):
  """One line unless `logdir`'s params.txt is one of `exp` and checkpoint `path` holds exactly the weights
  (names and canonical shapes) that those params declare; nothing is allocated."""
  params = experiment_lib.LoadRunParams(exp, logdir)
  with sharding.use(sharding.Partitioner('none')):
    task = params.task.Instantiate()
  declared = {}
  for weight, spec in task.IterWeightSpecs():
    perm = spec.checkpoint_perm or range(len(spec.shape))
    # The key scheme of checkpoints.CheckpointObjects, in the canonical layout it stores.
    declared[f'w/{weight}'.replace('.', '/')] = tf.TensorSpec([spec.shape[a] for a in perm], spec.dtype)
  checkpoints.CheckCheckpoint(path, declared)


def Plan(exp: experiment_lib.Experiment, logdir: str, last: int = 0, names: Sequence[str] = ()) -> Averaging:
  """Selects and checks the checkpoints to average (SelectCheckpoints): same params and corpus for every log
  directory they are in, `exp`'s weights, and the same weight names, shapes and dtypes in each (one line
  naming the first that differs). Reads only."""
  paths = SelectCheckpoints(logdir, last, names)
  if len(paths) < 2:
    raise ValueError(f'{len(paths)} checkpoint given; a mean needs at least 2')
  logdirs = list(dict.fromkeys([files.AbsPath(logdir)] + [os.path.dirname(p) for p in paths]))
  CheckSameRun(logdirs)
  CheckExperiment(exp, logdir, paths[-1])
  weights = StoredWeights(paths[-1])
  for path in paths[:-1]:
    other = StoredWeights(path)
    for name in sorted(set(weights) | set(other)):
      if name not in other or name not in weights:
        where, lacks = (paths[-1], path) if name in weights else (path, paths[-1])
        raise checkpoints.CheckpointMismatchError(f'{where} has {Key(name)}, {lacks} has not: not checkpoints of '
                                                  'one model')
      if other[name] != weights[name]:
        (s1, d1), (s2, d2) = other[name], weights[name]
        raise checkpoints.CheckpointMismatchError(
            f'{Key(name)} is {list(s1)} {d1.name} in {path}, {list(s2)} {d2.name} in {paths[-1]}: not checkpoints '
            'of one model')
  newest = _Reader(paths[-1]).get_variable_to_shape_map()
  dropped = sorted({Key(n).split('/')[0] for n in newest if n not in weights and n not in (_STEP, _SAVE_COUNTER)}
                   - {'_CHECKPOINTABLE_OBJECT_GRAPH'})
  return Averaging(type(exp).__name__, files.AbsPath(logdir), paths, [_Step(p) for p in paths], weights,
                   dropped)


def Mean(paths: Sequence[str], weights: Dict[str, Tuple[Tuple[int, ...], tf.DType]]) -> Dict[str, np.ndarray]:
  """{stored name: value}: the mean over `paths` of each float weight (summed in float64, returned in its
  dtype), and the last checkpoint's value of any other (an integer is a count or an index, not a quantity)."""
  readers = [_Reader(p) for p in paths]
  out = {}
  for name, (_, dtype) in weights.items():
    if dtype.is_floating:
      total = sum(r.get_tensor(name).astype(np.float64) for r in readers)
      out[name] = tf.cast(total / len(readers), dtype).numpy()
    else:
      out[name] = readers[-1].get_tensor(name)
  return out


def Record(checkpoint_path: str) -> Optional[Dict]:
  """What was averaged into `checkpoint_path` (its AVERAGE_SUFFIX file: 'checkpoints', 'steps', ...), or None
  for a trained checkpoint."""
  path = checkpoint_path + AVERAGE_SUFFIX
  if not files.Exists(path):
    return None
  return json.loads(files.ReadText(path))


def CheckOutput(output_logdir: str, sources: Sequence[str], overwrite: bool = False):
  """One line unless the average may be written to `output_logdir`: not a run's log directory nor one that
  holds it, empty or absent (or, with `overwrite`, an earlier average), and under a writable directory."""
  out = files.AbsPath(output_logdir)
  for src in sources:
    src = files.AbsPath(src)
    if out == src or src.startswith(out.rstrip('/') + '/'):
      raise ValueError(f'{output_logdir}: {"is" if out == src else "holds"} the log directory {src} being '
                       'averaged; write the average to a directory of its own')
  if files.Exists(out):
    if not files.IsDir(out):
      raise ValueError(f'{output_logdir}: exists and is not a directory')
    entries = files.ListDir(out)
    if entries and not overwrite:
      raise ValueError(f'{output_logdir}: exists and is not empty ({len(entries)} entries); --overwrite '
                       'replaces an earlier average')
    if entries and not any(e.endswith(AVERAGE_SUFFIX) for e in entries):
      raise ValueError(f'{output_logdir}: holds no *{AVERAGE_SUFFIX}, so it is no earlier average; not '
                       'replacing it (remove it yourself or choose another directory)')
  if files.IsUrl(out):
    return  # no permission bits to ask: the first write says whether it may be written
  parent = os.path.dirname(out)
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
    raise ValueError(f'{output_logdir}: cannot be created ({parent} is not a writable directory)')


def Write(plan: Averaging, output_logdir: str, overwrite: bool = False,
          log: Callable[[str], None] = print) -> str:
  """Writes the average of `plan` into `output_logdir` (see the module docstring) and returns its checkpoint
  path. Everything is written into a hidden directory next to it, which is then renamed into place: a
  failure or a kill leaves no half-written average, and an earlier one (with `overwrite`) stays whole until
  the new one is complete. A failed write is checkpoints.WriteFailed, in one line."""
  CheckOutput(output_logdir, [os.path.dirname(p) for p in plan.checkpoints] + [plan.logdir], overwrite)
  out = files.AbsPath(output_logdir)
  name = f'ckpt-{plan.step}'
  try:
    files.MakeDirs(os.path.dirname(out))
    if files.IsUrl(out):
      tmp = f'{os.path.dirname(out)}/.{os.path.basename(out)}.tmp-{os.getpid()}'
      files.MakeDirs(tmp)
    else:
      tmp = tempfile.mkdtemp(dir=os.path.dirname(out), prefix=f'.{os.path.basename(out)}.')
  except OSError as e:
    raise checkpoints.WriteFailed(f'{output_logdir}: cannot be created ({e.strerror or e})') from None
  try:
    log(f'averaging {len(plan.checkpoints)} checkpoints of {plan.logdir} (steps '
        f'{", ".join(map(str, plan.steps))}): {len(plan.weights)} weights')
    values = Mean(plan.checkpoints, plan.weights)
    objects = {Key(n): tf.Variable(v, trainable=False) for n, v in values.items()}
    ckpt = tf.train.Checkpoint(step=tf.Variable(plan.step, dtype=tf.int64), **objects)
    newest = _Reader(plan.checkpoints[-1])
    ckpt.save_counter.assign(newest.get_tensor(_SAVE_COUNTER) if newest.has_tensor(_SAVE_COUNTER) else 1)
    ckpt.write(os.path.join(tmp, name))
    for f in RUN_FILES:
      if files.Exists(os.path.join(plan.logdir, f)):
        files.Copy(os.path.join(plan.logdir, f), os.path.join(tmp, f))
    files.WriteText(os.path.join(tmp, 'checkpoint'),
                    f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n')
    files.WriteJson(os.path.join(tmp, name + AVERAGE_SUFFIX), _RecordOf(plan, out, name))
    _WriteCheckpointLog(plan, tmp, name)
    if not files.IsUrl(tmp):
      os.chmod(tmp, 0o755)  # mkdtemp makes it private; a log directory is shared like the trainer's
    _Replace(tmp, out)
  except BaseException as e:
    files.RemoveTree(tmp, ignore_errors=True)
    if isinstance(e, (OSError, tf.errors.OpError)) and not isinstance(e, checkpoints.WriteFailed):
      raise checkpoints.WriteFailed(f'{output_logdir}: cannot write the average ({checkpoints.Brief(e)}); '
                                    'nothing was written') from None
    raise
  return os.path.join(out, name)


def _RecordOf(plan: Averaging, out: str, name: str) -> Dict:
  floats = sum(dtype.is_floating for _, dtype in plan.weights.values())
  return {'experiment': plan.experiment, 'checkpoint': os.path.join(out, name), 'method': 'mean',
          'checkpoints': plan.checkpoints, 'steps': plan.steps, 'logdir': plan.logdir,
          'averaged_weights': floats, 'newest_weights': len(plan.weights) - floats,
          'dropped': plan.dropped, 'data': corpus_identity.ReadData(plan.logdir),
          'commit': provenance.CodeCommit(), 'time': datetime.datetime.now().isoformat(timespec='seconds')}


def _WriteCheckpointLog(plan: Averaging, tmp: str, name: str):
  """checkpoints.jsonl with one row: the training seconds and commit of the newest averaged checkpoint (what
  the reports and learning curves read), if the run recorded them."""
  rows = files.ReadJsonl(os.path.join(os.path.dirname(plan.checkpoints[-1]), checkpoints.CHECKPOINT_LOG))
  row = next((r for r in rows if r.get('checkpoint') == os.path.basename(plan.checkpoints[-1])), None)
  if row is None or 'train_seconds' not in row:
    return
  row = dict(row, step=plan.step, checkpoint=name,
             averaged=[os.path.basename(p) for p in plan.checkpoints])
  files.WriteText(os.path.join(tmp, checkpoints.CHECKPOINT_LOG), json.dumps(row) + '\n')


def _Replace(tmp: str, out: str):
  """Renames directory `tmp` to `out`; an `out` already there (empty, or an earlier average) is moved aside
  first and removed only once the new one is in place. On gs:// each rename moves one object at a time
  (utils/files.py Rename): a kill in the middle leaves the average split between the two names."""
  if not files.Exists(out):
    files.Rename(tmp, out)
    return
  aside = tmp + '.replaced'
  files.Rename(out, aside)
  try:
    files.Rename(tmp, out)
  except BaseException:
    files.Rename(aside, out)
    raise
  files.RemoveTree(aside, ignore_errors=True)
