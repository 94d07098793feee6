"""The evaler job (Lingvo's `--mode=eval`): dev loss of every checkpoint a training job writes.

It watches the log directory (`tf.train.checkpoints_iterator`), restores each new checkpoint into a model
built from the run's params.txt, writes the dev loss — overall and per language — to `LOGDIR/dev/` for
TensorBoard and to `LOGDIR/dev_eval.jsonl`, and stops after the checkpoint of the run's last step. The
training loop's own dev evaluations go to the same file (job 'trainer'): early stopping reads them there, so
a resumed run knows its history.
"""
import os
from typing import Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf

from lingvo_gshard.core import experiment as experiment_lib
from lingvo_gshard.core import sharding
from lingvo_gshard.runtime import hardware
from lingvo_gshard.runtime import learner as learner_lib
from lingvo_gshard.runtime import step_runner
from lingvo_gshard.train import budget
from lingvo_gshard.train import checkpoints
from lingvo_gshard.train import dev_metrics
from lingvo_gshard.utils import files

class DevEvaler:
  """Dev loss of the checkpoints of the run in `logdir` (as it was trained: its params.txt)."""

  def __init__(self, exp: experiment_lib.Experiment, partitioner: sharding.Partitioner, logdir: str,
               data_dir: str = '', per_language_batches: int = 1, log: Callable[[str], None] = print,
               runner: Optional[step_runner.StepRunner] = None):
    if not files.Exists(os.path.join(logdir, experiment_lib.PARAMS_FILE)):
      raise FileNotFoundError(f'{logdir}: no {experiment_lib.PARAMS_FILE} (train it first: --mode=train)')
    self.logdir, self.log, self.per_language_batches = logdir, log, per_language_batches
    self.params = experiment_lib.LoadRunParams(exp, logdir, data_dir)
    hardware.ResolveAuto(self.params)  # a no-op for a trained run: its params.txt holds the resolved values
    self.params.Validate()
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

  def Batches(self, lang: str = '') -> List[Dict[str, np.ndarray]]:
    """The dev batches of every language (''), or `per_language_batches` of one language; read once."""
    if lang not in self._batches:
      self._batches[lang] = (dev_metrics.DevBatches(self.dev.Copy().Set(languages=[lang]), self.per_language_batches)
                             if lang else dev_metrics.DevBatches(self.dev, self.eval_batches))
    return self._batches[lang]

  def Restore(self, path: str) -> int:
    """Loads checkpoint `path` (checked against the model first) into the model; returns its step."""
    checkpoints.CheckCheckpoint(path, self.objects)
    tf.train.Checkpoint(**self.objects).restore(path).expect_partial()
    return checkpoints.Step(path)

  def EvalCheckpoint(self, path: str) -> Dict[str, float]:
    """Restores `path`, returns {metric: value, 'xent/<lang>': ...} and writes them for step N."""
    step = self.Restore(path)
    out = dev_metrics.DevMetrics(self.learner, self.Batches()) or {}
    for lang in self.languages:
      m = dev_metrics.DevMetrics(self.learner, self.Batches(lang))
      if m:
        out[f'xent/{lang}'] = m['xent']
    with self.writer.as_default():
      for k, v in out.items():
        tf.summary.scalar(k, v, step=step)
    self.writer.flush()
    dev_metrics.AppendDevLog(self.logdir, dev_metrics.DevRow(step, out, os.path.basename(path)))
    if 'loss' in out:
      self.log(f'{os.path.basename(path)} (step {step}): dev loss {out["loss"]:.4f} xent {out["xent"]:.4f}'
               + (f', {len(self.languages)} languages' if self.languages else ''))
    return out

  def Done(self) -> set:
    """Checkpoints this job has evaluated (the training loop's own evaluations have no per-language losses:
    the evaler still does those)."""
    return {r['checkpoint'] for r in dev_metrics.ReadDevLog(self.logdir, 'evaler')}

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
      stopped = dev_metrics.FirstEarlyStop(dev_metrics.ReadDevLog(self.logdir, 'trainer'), self.patience,
                                           self.tolerance, self.max_steps)
      if stopped and stopped[0] <= step:
        self.log(f'the trainer stopped early at step {stopped[0]}: no newer checkpoint will come')
        break
    return count
