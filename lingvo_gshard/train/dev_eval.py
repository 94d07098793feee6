"""The evaler job (Lingvo's `--mode=eval`): dev loss of every checkpoint a training job writes.

It watches the log directory (`tf.train.checkpoints_iterator`), restores each new checkpoint into a model
built from the run's params.txt, writes the dev loss — overall and per language — to `LOGDIR/dev/` for
TensorBoard and to `LOGDIR/dev_eval.jsonl`, and stops after the checkpoint of the run's last step. The
training loop's own dev evaluations go to the same file (job 'trainer'): early stopping reads them there, so
a resumed run knows its history.
"""
import json
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from lingvo_gshard.core import experiment as experiment_lib
from lingvo_gshard.core import learner as learner_lib
from lingvo_gshard.core import sharding
from lingvo_gshard.core import step_runner
from lingvo_gshard.train import budget
from lingvo_gshard.train import checkpoints

DEV_LOG = 'dev_eval.jsonl'


def DevBatches(input_params, max_batches: int) -> List[Dict[str, np.ndarray]]:
  """The first `max_batches` batches of `input_params` as NumPy arrays. The dev input is deterministic (its
  shuffles and mixture draws are seeded), so a job reads them once and every evaluation scores the same
  batches: building the 100-language dev pipeline again cost more than scoring its 20 batches."""
  batches = []
  for batch in input_params.Instantiate(log=lambda line: None).Dataset():
    if len(batches) >= max_batches:
      break
    batches.append({k: v.numpy() for k, v in batch.items()})
  return batches


def DevMetrics(learner: learner_lib.Learner, batches: Sequence[Dict[str, np.ndarray]]
               ) -> Optional[Dict[str, float]]:
  """Token-weighted mean of the eval metrics over `batches` (from DevBatches)."""
  totals, tokens = {}, 0.0
  for batch in batches:
    m = {k: float(learner.Fetch(v)) for k, v in learner.EvalStep(batch).items()}
    n = m['num_tokens']
    tokens += n
    for k, v in m.items():
      totals[k] = totals.get(k, 0.0) + v * n
  if not tokens:
    return None
  return {k: v / tokens for k, v in totals.items()}


def ReadDevLog(logdir: str, job: Optional[str] = None) -> List[Dict]:
  """The rows of LOGDIR/dev_eval.jsonl ({'step', 'checkpoint', 'job', 'loss', 'xent', ...}) of `job` ('trainer',
  'evaler'; None: both), by step, the last row of a step kept (an evaluation repeated after a resume). A line
  that does not parse (a write cut short) is skipped."""
  rows = {}
  for row in checkpoints.ReadJsonl(os.path.join(logdir, DEV_LOG)):
    if job is None or row.get('job', 'evaler') == job:
      rows[row['step']] = row
  return [rows[s] for s in sorted(rows)]


def DevRow(step: int, metrics: Dict[str, float], checkpoint: str = '', job: str = 'evaler') -> Dict:
  """A dev_eval.jsonl row: metrics rounded as the file keeps them (a resumed run decides on the same values)."""
  return {'step': step, 'checkpoint': checkpoint or f'ckpt-{step}', 'job': job,
          **{k: round(v, 5) for k, v in metrics.items()}}


def AppendDevLog(logdir: str, row: Dict):
  """Appends DevRow `row`: the evaler's (job 'evaler') or the training loop's ('trainer')."""
  with open(os.path.join(logdir, DEV_LOG), 'a') as f:
    f.write(json.dumps(row) + '\n')


def Best(rows: Sequence[Dict], metric: str = 'xent') -> Optional[Dict]:
  """The row with the lowest `metric` (the earliest of equals), or None."""
  rows = [r for r in rows if metric in r]
  return min(rows, key=lambda r: (r[metric], r['step'])) if rows else None


def EarlyStop(rows: Sequence[Dict], patience: int, tolerance: float = 0.0,
              metric: str = 'xent') -> Optional[str]:
  """Why training should stop, or None: the last `patience` evaluations (by step) have not lowered the best
  earlier value of `metric` by more than `tolerance`."""
  rows = [r for r in sorted(rows, key=lambda r: r['step']) if metric in r]
  if patience <= 0 or len(rows) <= patience:
    return None
  best_before = min(r[metric] for r in rows[:-patience])
  recent = rows[-patience:]
  if min(r[metric] for r in recent) < best_before - tolerance:
    return None
  best = Best(rows, metric)
  return (f'dev {metric} has not improved on {best_before:.4f} by more than {tolerance:g} in the last '
          f'{patience} evaluations (steps {recent[0]["step"]}-{recent[-1]["step"]}); best {best[metric]:.4f} '
          f'at step {best["step"]}')


def FirstEarlyStop(rows: Sequence[Dict], patience: int, tolerance: float, max_steps: int,
                   metric: str = 'xent') -> Optional[Tuple[int, str]]:
  """(step, why) of the first evaluation at which EarlyStop fired, or None. A firing at max_steps or later is
  no early stop: the run had used its budget."""
  if patience <= 0:
    return None
  rows = sorted(rows, key=lambda r: r['step'])
  for n in range(patience + 1, len(rows) + 1):
    if rows[n - 1]['step'] >= max_steps:
      break
    why = EarlyStop(rows[:n], patience, tolerance, metric)
    if why:
      return rows[n - 1]['step'], why
  return None


class DevEvaler:
  """Dev loss of the checkpoints of the run in `logdir` (as it was trained: its params.txt)."""

  def __init__(self, exp: experiment_lib.Experiment, partitioner: sharding.Partitioner, logdir: str,
               data_dir: str = '', per_language_batches: int = 1, log: Callable[[str], None] = print,
               runner: Optional[step_runner.StepRunner] = None):
    if not os.path.exists(os.path.join(logdir, experiment_lib.PARAMS_FILE)):
      raise FileNotFoundError(f'{logdir}: no {experiment_lib.PARAMS_FILE} (train it first: --mode=train)')
    self.logdir, self.log, self.per_language_batches = logdir, log, per_language_batches
    self.params = experiment_lib.LoadRunParams(exp, logdir, data_dir)
    if 'dev' not in self.params.input:
      raise ValueError(f'{type(exp).__name__} has no Dev() input to evaluate')
    self.dev = self.params.input.dev
    lp = self.params.learner
    self.max_steps, self.eval_batches = lp.max_steps, lp.eval_batches
    self.patience, self.tolerance = lp.early_stop_patience, lp.early_stop_tolerance
    self.learner = learner_lib.Learner(self.params.task, lp.optimizer, partitioner, lp.seed, runner=runner)
    self.objects = checkpoints.CheckpointObjects(self.learner.model)
    self.writer = tf.summary.create_file_writer(os.path.join(logdir, 'dev'))
    self.languages = self.dev.Instantiate(log=lambda line: None).languages if per_language_batches else []
    self._batches: Dict[str, List[Dict[str, np.ndarray]]] = {}  # '' (all languages) or a language: DevBatches

  def _Batches(self, lang: str = '') -> List[Dict[str, np.ndarray]]:
    if lang not in self._batches:
      self._batches[lang] = (DevBatches(self.dev.Copy().Set(languages=[lang]), self.per_language_batches)
                             if lang else DevBatches(self.dev, self.eval_batches))
    return self._batches[lang]

  def EvalCheckpoint(self, path: str) -> Dict[str, float]:
    """Restores `path`, returns {metric: value, 'xent/<lang>': ...} and writes them for step N."""
    checkpoints.CheckCheckpoint(path, self.objects)
    tf.train.Checkpoint(**self.objects).restore(path).expect_partial()
    step = int(tf.train.load_variable(path, 'step/.ATTRIBUTES/VARIABLE_VALUE'))
    out = DevMetrics(self.learner, self._Batches()) or {}
    for lang in self.languages:
      m = DevMetrics(self.learner, self._Batches(lang))
      if m:
        out[f'xent/{lang}'] = m['xent']
    with self.writer.as_default():
      for k, v in out.items():
        tf.summary.scalar(k, v, step=step)
    self.writer.flush()
    AppendDevLog(self.logdir, DevRow(step, out, os.path.basename(path)))
    if 'loss' in out:
      self.log(f'{os.path.basename(path)} (step {step}): dev loss {out["loss"]:.4f} xent {out["xent"]:.4f}'
               + (f', {len(self.languages)} languages' if self.languages else ''))
    return out

  def Done(self) -> set:
    """Checkpoints this job has evaluated (the training loop's own evaluations have no per-language losses:
    the evaler still does those)."""
    return {r['checkpoint'] for r in ReadDevLog(self.logdir, 'evaler')}

  def Watch(self, timeout: Optional[float] = None) -> int:
    """Evaluates every checkpoint not evaluated yet, then each new one as it appears, until the one at
    max_steps (or `timeout` seconds without a new one); returns how many were evaluated."""
    done, count = self.Done(), 0
    for path in reversed(checkpoints.CheckpointCandidates(self.logdir, self.log)):  # those there already
      if os.path.basename(path) not in done:
        self.EvalCheckpoint(path)
        done.add(os.path.basename(path))
        count += 1
    for path in tf.train.checkpoints_iterator(self.logdir, min_interval_secs=1, timeout=timeout):
      if os.path.basename(path) not in done:
        self.EvalCheckpoint(path)
        done.add(os.path.basename(path))
        count += 1
      step = checkpoints.Step(path)
      record = budget.Read(self.logdir)  # a time budget fixes the trainer's max_steps after this job started
      if step >= (budget.FinalStep(record) if record else self.max_steps):
        break
      stopped = FirstEarlyStop(ReadDevLog(self.logdir, 'trainer'), self.patience, self.tolerance, self.max_steps)
      if stopped and stopped[0] <= step:
        self.log(f'the trainer stopped early at step {stopped[0]}: no newer checkpoint will come')
        break
    return count
