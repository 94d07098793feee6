"""A model, its optimizer and the compiled train/eval steps, under one Partitioner.

The same code runs on one device (jit-compiled), on a DTensor mesh (variables and slots laid out by the
rules), or annotated for XLA SPMD. A step is a pure function of (weights, batch, seed): dropout and random
routing draw from stateless RNGs seeded by `seed` folded with the step number.
"""
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

from lingvo_gshard.core import hyperparams
from lingvo_gshard.core import sharding
from lingvo_gshard.runtime import step_runner

# Logical axes of every batch feature: [B, L].
BATCH_AXES = ('batch', 'length')


class Learner:
  """Builds `task` and `optimizer` params under `partitioner`; `TrainStep(batch)` returns metrics."""

  def __init__(self, task: hyperparams.InstantiableParams, optimizer: hyperparams.InstantiableParams,
               partitioner: sharding.Partitioner, seed: int = 1234, skip_nonfinite: bool = False,
               runner: Optional[step_runner.StepRunner] = None):
    """`runner` compiles the steps (default: StepRunner(partitioner), this machine's rule)."""
    self.partitioner = partitioner
    self.runner = runner or step_runner.StepRunner(partitioner)
    if self.runner.partitioner is not partitioner:
      raise ValueError(f'{self.runner} runs another partitioner than {partitioner}')
    self.seed = seed
    self.skip_nonfinite = skip_nonfinite
    with sharding.use(partitioner):
      self.model = task.Instantiate().InstantiateVariables(partitioner, seed)
      named = [(path, var, spec) for path, var, spec in self.model.IterVariablesWithSpecs() if spec.trainable]
      self.trainable = [var for _, var, _ in named]
      self.optimizer = optimizer.Instantiate()
      self.optimizer.CreateSlots(named, partitioner)
      self.global_step = partitioner.CreateVariable('global_step', lambda: tf.constant(0, tf.int64), (),
                                                    trainable=False)
    self._train = self.runner.Compile(self._TrainStep)
    self._eval = self.runner.Compile(self._EvalStep)
    self._routing = None  # compiled at its first use: only the expert map asks for it

  def SetScheduleEnd(self, total_steps: int):
    """Moves the end of the optimizer's decaying schedule (a time budget decides it inside the warm-up); the
    train step is traced again at its next call."""
    self.optimizer.p = self.optimizer.p.Copy().Set(total_steps=total_steps).Freeze()
    self._train = self.runner.Compile(self._TrainStep)

  def _TrainStep(self, batch, seed):
    with sharding.use(self.partitioner):
      # New values are computed, then assigned, never read back: under DTensor a read of a variable after
      # its assign in the same step (or assign's return value) can still see the old value.
      step = self.global_step.read_value() + 1
      self.global_step.assign(step)
      step_seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(step, tf.int32))
      with tf.GradientTape() as tape:
        loss, metrics = self.model.FProp(batch, step_seed)
      # Dense gradients: an embedding's IndexedSlices may repeat rows, which global_norm and the
      # optimizers' squared-gradient statistics would count wrongly.
      grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, self.trainable)]
      # Scalars, and each MoE layer's per-expert vectors (load, expert_fill) for the trainer's histograms.
      metrics = {k: v for k, v in metrics.items()
                 if v.shape.rank == 0 or (k.startswith('moe/') and v.shape.rank == 1)}
      metrics['grad_norm'] = tf.linalg.global_norm(grads)
      # Checked in the step, every step: the caller stops before saving (or the update is skipped), so a NaN
      # never reaches a checkpoint.
      finite = tf.math.is_finite(loss) & tf.math.is_finite(metrics['grad_norm'])
      metrics['finite'] = tf.cast(finite, tf.float32)
      if self.skip_nonfinite:
        metrics['learning_rate'] = tf.cond(finite, lambda: self.optimizer.Apply(grads, step),
                                           lambda: self.optimizer.LearningRate(step))
      else:
        metrics['learning_rate'] = self.optimizer.Apply(grads, step)
      return metrics

  def _EvalStep(self, batch):
    with sharding.use(self.partitioner):
      _, metrics = self.model.FProp(batch, None)
      return {k: v for k, v in metrics.items() if v.shape.rank == 0}

  def _RoutingStep(self, batch):
    with sharding.use(self.partitioner):
      _, metrics = self.model.FProp(batch, None)
      return {k: v for k, v in metrics.items() if k.endswith('/expert_tokens')}

  def RoutingStep(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """{'moe/<stack>/<layer>/expert_tokens': [E] tokens of `batch` whose first choice is each expert} as an
    evaluation routes them (no seed); empty for a dense model."""
    if self._routing is None:
      self._routing = self.runner.Compile(self._RoutingStep)
    return {k: self.Fetch(v) for k, v in self._routing(self.PlaceBatch(batch)).items()}

  def PlaceBatch(self, batch: Dict[str, np.ndarray]):
    return {k: self.partitioner.ToDevice(v, BATCH_AXES[:np.ndim(v)]) for k, v in batch.items()}

  def TrainStep(self, batch: Dict[str, np.ndarray], seed: Optional[int] = None) -> Dict[str, float]:
    seed_t = self.partitioner.ToDevice(np.array([self.seed if seed is None else seed, 0], np.int32), (None,))
    return self._train(self.PlaceBatch(batch), seed_t)

  def EvalStep(self, batch: Dict[str, np.ndarray]) -> Dict[str, float]:
    return self._eval(self.PlaceBatch(batch))

  def Fetch(self, t) -> np.ndarray:
    return self.partitioner.Fetch(t)

  def Weights(self) -> Dict[str, np.ndarray]:
    return {path: self.Fetch(var) for path, var in self.model.IterVariables()}
