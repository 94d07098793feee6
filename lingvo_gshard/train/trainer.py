"""The training loop of a registered experiment: input -> Learner steps -> logs, summaries, checkpoints.

What a run writes to its log directory (Lingvo/Praxis habits):
  params.txt                    every task, learner and input param, as `a.b.c : value` text;
  post_init_model_params.txt    every weight's shape, logical axes, mesh axes and per-device shape;
  train/, dev/                  TensorBoard summaries (loss, xent, aux loss, learning rate, tokens/s, and
                                every MoE layer's routing stats);
  ckpt-N.*                      checkpoints (weights, optimizer slots, step); a rerun resumes from the latest.
"""
import os
import time
from typing import Callable, Dict, Optional

import numpy as np
import tensorflow as tf

from lingvo_gshard.core import experiment as experiment_lib
from lingvo_gshard.core import learner as learner_lib
from lingvo_gshard.core import sharding


def CheckpointObjects(model, optimizer=None) -> Dict[str, tf.Variable]:
  """Weights (and optimizer slots) by path, so checkpoints read like the params summary. The one key scheme
  that the trainer writes and the evaluator restores."""
  out = {f'w/{path}': v for path, v in model.IterVariables()}
  for path, slots in (optimizer.slots.items() if optimizer else ()):
    out.update({f'opt/{path}/{name}': v for name, v in slots.items()})
  return {k.replace('.', '/'): v for k, v in out.items()}


class Trainer:
  """Trains `experiment` under `partitioner`, logging to `logdir`."""

  def __init__(self, experiment: experiment_lib.Experiment, partitioner: sharding.Partitioner, logdir: str,
               data_dir: Optional[str] = None, task_overrides: str = '', max_steps: Optional[int] = None,
               log: Callable[[str], None] = print):
    self.exp, self.partitioner, self.logdir, self.log = experiment, partitioner, logdir, log
    self.task = experiment.Task()
    if task_overrides:
      self.task.Override(task_overrides)
    self.learner_p = experiment.Learner()
    if max_steps is not None:
      self.learner_p.max_steps = max_steps
    self.inputs = {}
    for split, fn in (('train', experiment.Train), ('dev', experiment.Dev)):
      p = fn()
      if p is not None and data_dir:
        p.data_dir = data_dir
      self.inputs[split] = p
    if self.inputs['train'] is None:
      raise ValueError(f'{type(experiment).__name__} has no Train() input; it can be analysed, not trained')
    self._CheckMemory()
    os.makedirs(logdir, exist_ok=True)
    self._WriteParams()
    self.learner = learner_lib.Learner(self.task, self.learner_p.optimizer, partitioner, self.learner_p.seed)
    with open(os.path.join(logdir, 'post_init_model_params.txt'), 'w') as f:
      f.write(self.learner.model.VariablesSummary(partitioner) + '\n')
    self.checkpoint = tf.train.Checkpoint(step=self.learner.global_step,
                                          **CheckpointObjects(self.learner.model, self.learner.optimizer))
    self.manager = tf.train.CheckpointManager(self.checkpoint, logdir, max_to_keep=3)
    self.writers = {s: tf.summary.create_file_writer(os.path.join(logdir, s)) for s in ('train', 'dev')}

  def _CheckMemory(self):
    """Refuses, before allocating anything, a model whose weights and optimizer state cannot fit a device."""
    from lingvo_gshard.models import analysis  # pylint: disable=g-import-not-at-top
    model = self.task.Instantiate()  # declares weights only
    a = analysis.Analyze(type(self.exp).__name__, model, self.partitioner, tokens_per_step=1, seq_len=1)
    need = a.bytes_per_device * 2 + a.optimizer_bytes_per_device  # weights, their gradients, slots
    have = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    if need > have:
      raise ValueError(f'{type(self.exp).__name__} needs {need / 2**30:.1f} GiB per device for weights, '
                       f'gradients and optimizer state on mesh {self.partitioner.mesh}; this machine has '
                       f'{have / 2**30:.1f} GiB (analyse it with tools/model_analysis instead)')

  def _WriteParams(self):
    parts = [('task', self.task), ('learner', self.learner_p)]
    parts += [(f'input.{s}', p) for s, p in self.inputs.items() if p is not None]
    with open(os.path.join(self.logdir, 'params.txt'), 'w') as f:
      f.write(f'# experiment: {type(self.exp).__module__}.{type(self.exp).__name__}\n')
      f.write(f'# partitioner: {self.partitioner}\n# rules:\n')
      f.write(''.join(f'#   {line}\n' for line in self.exp.ShardingRules().ToText().splitlines()))
      for prefix, p in parts:
        f.write(''.join(f'{prefix}.{line}\n' for line in p.ToText().splitlines()))

  def Step(self) -> int:
    return int(self.partitioner.Fetch(self.learner.global_step))

  def Restore(self) -> int:
    if self.manager.latest_checkpoint:
      self.checkpoint.restore(self.manager.latest_checkpoint)
      self.log(f'restored {self.manager.latest_checkpoint} at step {self.Step()}')
    return self.Step()

  def _Summaries(self, split, metrics, step):
    with self.writers[split].as_default():
      for k, v in metrics.items():
        tf.summary.scalar(k, v, step=step)
    self.writers[split].flush()

  def Evaluate(self) -> Optional[Dict[str, float]]:
    """Mean dev metrics over `eval_batches` batches (token-weighted), or None without a Dev() input."""
    p = self.inputs.get('dev')
    if p is None:
      return None
    totals, tokens = {}, 0.0
    for i, batch in enumerate(p.Instantiate().Dataset()):
      if i >= self.learner_p.eval_batches:
        break
      batch = {k: v.numpy() for k, v in batch.items()}
      m = {k: float(self.partitioner.Fetch(v)) for k, v in self.learner.EvalStep(batch).items()}
      n = m['num_tokens']
      tokens += n
      for k, v in m.items():
        totals[k] = totals.get(k, 0.0) + v * n
    if not tokens:
      return None
    return {k: v / tokens for k, v in totals.items()}

  def Train(self) -> Dict[str, float]:
    """Runs to `max_steps` (resuming), returns the last training metrics."""
    lp = self.learner_p
    step = self.Restore()
    if step >= lp.max_steps:
      self.log(f'already at step {step} >= max_steps {lp.max_steps}')
      return {}
    data = iter(self.inputs['train'].Instantiate().Dataset())
    last, window_tokens, window_start = {}, 0.0, time.time()
    while step < lp.max_steps:
      batch = {k: v.numpy() for k, v in next(data).items()}
      metrics = self.learner.TrainStep(batch)
      step += 1
      window_tokens += float(batch['tgt_weights'].sum())
      if step % lp.log_interval == 0 or step == lp.max_steps:
        last = {k: float(self.partitioner.Fetch(v)) for k, v in metrics.items()}
        elapsed = time.time() - window_start
        last['target_tokens_per_sec'] = window_tokens / max(elapsed, 1e-9)
        self._Summaries('train', last, step)
        self.log(f'step {step:6d} loss {last["loss"]:.4f} xent {last["xent"]:.4f} aux {last["aux_loss"]:.3f} '
                 f'lr {last["learning_rate"]:.2e} {last["target_tokens_per_sec"]:.0f} tgt tok/s')
        if not np.isfinite(last['loss']):
          raise FloatingPointError(f'loss is {last["loss"]} at step {step}; last checkpoint kept')
        window_tokens, window_start = 0.0, time.time()
      if lp.eval_interval and step % lp.eval_interval == 0:
        self._RunEval(step)
      if step % lp.save_interval == 0 or step == lp.max_steps:
        self.manager.save(checkpoint_number=step)
    if lp.eval_interval and step % lp.eval_interval:
      self._RunEval(step)
    return last

  def _RunEval(self, step):
    dev = self.Evaluate()
    if dev:
      self._Summaries('dev', dev, step)
      self.log(f'step {step:6d} dev loss {dev["loss"]:.4f} xent {dev["xent"]:.4f}')
