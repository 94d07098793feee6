"""Optimizers whose state is laid out like the weights: Adafactor (the paper's) and Adam.

Slot variables are created through the Partitioner with logical axes derived from their weight's, so under
DTensor an expert weight's optimizer state lives with the expert's shard. `Apply` runs inside the compiled
train step. Learning-rate schedules (`Schedule`): the paper's linear warm-up then rsqrt decay (1.0, 10k
warm-up steps), or a warm-up followed by a linear or cosine decay that ends at `total_steps` — what a run of
known length (a wall-clock budget on a CPU) learns fastest with.
"""
import math
from typing import Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from lingvo_gshard.core import base_layer
from lingvo_gshard.core import domains
from lingvo_gshard.core import hyperparams
from lingvo_gshard.core import sharding


def RsqrtSchedule(step, learning_rate, warmup_steps):
  """T2T/Lingvo's linear_warmup * rsqrt_decay: learning_rate * min(1, step/warmup) / sqrt(max(step, warmup)).

  The paper's "learning rate 1.0 with rsqrt decay after 10k warm-up steps" is this schedule: its peak is
  1.0 / sqrt(10k) = 0.01, reached at the end of warm-up (Adafactor then scales updates by each weight's RMS).
  """
  step = tf.cast(tf.maximum(step, 1), tf.float32)
  warmup = float(max(warmup_steps, 1))
  return learning_rate * tf.minimum(1.0, step / warmup) * tf.math.rsqrt(tf.maximum(step, warmup))


SCHEDULES = ('rsqrt', 'linear', 'cosine')


def Schedule(step, kind, learning_rate, warmup_steps, total_steps=0, final_fraction=0.0):
  """The learning rate at `step` (1-based).

  'rsqrt': RsqrtSchedule (learning_rate is T2T's scale; the peak is learning_rate / sqrt(warmup_steps)).
  'linear', 'cosine': learning_rate is the peak, reached linearly at warmup_steps, then decayed linearly or
  along a half cosine to final_fraction * learning_rate at total_steps, and held there after it.
  """
  if kind == 'rsqrt':
    return RsqrtSchedule(step, learning_rate, warmup_steps)
  if kind not in SCHEDULES:
    raise ValueError(f'unknown learning-rate schedule {kind!r} (have: {", ".join(SCHEDULES)})')
  if total_steps <= warmup_steps:
    raise ValueError(f'schedule {kind!r} needs total_steps ({total_steps}) > warmup_steps ({warmup_steps})')
  step = tf.cast(tf.maximum(step, 1), tf.float32)
  warmup = float(max(warmup_steps, 1))
  ramp = tf.minimum(1.0, step / warmup)
  progress = tf.clip_by_value((step - warmup_steps) / float(total_steps - warmup_steps), 0.0, 1.0)
  if kind == 'linear':
    decay = 1.0 - progress
  else:
    decay = 0.5 * (1.0 + tf.cos(math.pi * progress))
  return learning_rate * ramp * (final_fraction + (1.0 - final_fraction) * decay)


class Optimizer:
  """Base: `Params()`, `CreateSlots(named_weights, partitioner)`, `Apply(grads, step)`.

  Subclasses define `SlotSpecs` and `Update`, a pure function of values (Optax-style) that `Apply` assigns.
  """

  @classmethod
  def Params(cls):
    p = hyperparams.InstantiableParams(cls)
    p.Define('learning_rate', 1e-3, 'Peak learning rate.', domains.Positive())
    p.Define('warmup_steps', 100, 'Linear warm-up steps, then the schedule\'s decay.', domains.NonNegative(int))
    p.Define('schedule', 'rsqrt', "'rsqrt' (learning_rate / sqrt(max(step, warmup)): the paper's), "
             "'linear' or 'cosine' (learning_rate is the peak; decays to final_fraction of it at "
             'total_steps).', domains.Choices(SCHEDULES))
    p.Define('total_steps', 0, "Where 'linear'/'cosine' end; 0 = the learner's max_steps (set by the "
             'trainer, printed resolved in params.txt).', domains.NonNegative(int))
    p.Define('final_fraction', 0.0, "'linear'/'cosine': the learning rate at total_steps, as a fraction of "
             'the peak.', domains.Probability(include_one=True))
    p.Define('clip_gradient_norm', 0.0, 'Clip the global gradient norm to this value (0 = off).',
             domains.NonNegative())
    return p

  def __init__(self, params):
    self.p = params.Copy().Freeze()
    if self.p.schedule not in SCHEDULES:
      raise ValueError(f'optimizer.schedule: unknown {self.p.schedule!r} (have: {", ".join(SCHEDULES)})')
    if self.p.schedule != 'rsqrt' and self.p.total_steps <= self.p.warmup_steps:
      raise ValueError(f'optimizer.schedule {self.p.schedule!r}: total_steps ({self.p.total_steps}) must '
                       f'exceed warmup_steps ({self.p.warmup_steps})')
    self.slots: Dict[str, Dict[str, tf.Variable]] = {}
    self.variables: List[Tuple[str, tf.Variable]] = []

  def CreateSlots(self, named: Sequence[Tuple[str, tf.Variable, base_layer.WeightSpec]],
                  partitioner: sharding.Partitioner):
    for path, var, spec in named:
      self.variables.append((path, var))
      self.slots[path] = {
          name: partitioner.CreateVariable(f'{path}/{name}', lambda s=shape: tf.zeros(s, tf.float32), axes,
                                           trainable=False)
          for name, (shape, axes) in self.SlotSpecs(spec).items()}

  def SlotSpecs(self, spec) -> Dict[str, Tuple[Tuple[int, ...], Tuple]]:
    raise NotImplementedError

  def CanonicalSlots(self, spec, slots: Dict[str, tf.Variable]) -> Dict[str, Tuple[tf.Variable, Optional[Tuple]]]:
    """{checkpoint slot name: (slot variable, perm)} of a weight kept in a permuted layout
    (`spec.checkpoint_perm`), so its checkpoint holds the slots the canonical layout would have: a slot of the
    weight's shape is permuted like the weight; any other slot needs the optimizer's own rule."""
    perm = spec.checkpoint_perm
    if perm is None:
      return {name: (v, None) for name, v in slots.items()}
    out = {}
    for name, v in slots.items():
      if tuple(v.shape) != tuple(spec.shape):
        raise NotImplementedError(f'{type(self).__name__}: slot {name} {tuple(v.shape)} of a weight stored '
                                  f'permuted {perm} has no canonical layout rule')
      out[name] = (v, perm)
    return out

  def Apply(self, grads: Sequence[tf.Tensor], step) -> tf.Tensor:
    """Updates every variable from its gradient (same order as CreateSlots); returns the learning rate."""
    grads = [tf.cast(g, tf.float32) for g in grads]
    if self.p.clip_gradient_norm:
      grads, _ = tf.clip_by_global_norm(grads, self.p.clip_gradient_norm)
    lr = self.LearningRate(step)
    values = [var.read_value() for _, var in self.variables]
    slots = [{k: s.read_value() for k, s in self.slots[path].items()} for path, _ in self.variables]
    step = tf.cast(step, tf.float32)
    results = [self.Update(v, g, s, lr, step) for v, g, s in zip(values, grads, slots)]
    # Assigned, never read back: under DTensor, `var.assign(x)`'s return value (and a read right after) can
    # be the old value inside a step.
    for (path, var), (update, new) in zip(self.variables, results):
      for name, value in new.items():
        self.slots[path][name].assign(value)
      var.assign_sub(tf.cast(update, var.dtype))
    return lr

  def LearningRate(self, step) -> tf.Tensor:
    p = self.p
    return Schedule(step, p.schedule, p.learning_rate, p.warmup_steps, p.total_steps, p.final_fraction)

  def Update(self, value, grad, slots, lr, step) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
    """(weight value, float32 gradient, {slot: value}, lr, float32 step) -> (float32 amount to subtract from
    the weight, {slot: new value})."""
    raise NotImplementedError


class Adam(Optimizer):
  """Adam with bias correction."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('beta1', 0.9, 'First-moment decay.', domains.Probability())
    p.Define('beta2', 0.98, 'Second-moment decay.', domains.Probability())
    p.Define('epsilon', 1e-9, 'Added to the root of the second moment.', domains.Positive())
    return p

  def SlotSpecs(self, spec):
    return {'m': (spec.shape, spec.logical_axes), 'v': (spec.shape, spec.logical_axes)}

  def Update(self, value, grad, slots, lr, step):
    p = self.p
    m = p.beta1 * slots['m'] + (1 - p.beta1) * grad
    v = p.beta2 * slots['v'] + (1 - p.beta2) * tf.square(grad)
    m_hat = m / (1 - tf.pow(p.beta1, step))
    v_hat = v / (1 - tf.pow(p.beta2, step))
    return lr * m_hat / (tf.sqrt(v_hat) + p.epsilon), {'m': m, 'v': v}


class Adafactor(Optimizer):
  """Adafactor (Shazeer & Stern 2018) as GShard trains with it: beta1 = 0, second-moment decay 1 - t^-0.8,
  factored second moments for matrices, update clipping 1.0, updates scaled by the weight's RMS. beta1 > 0
  adds momentum on the clipped, scaled update (Lingvo's and T5's `beta1`), at one weight-sized slot."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('decay_exponent', 0.8, 'Second-moment decay is 1 - step^-decay_exponent.',
             domains.Range(0.0, 1.0, lo_open=True))
    p.Define('clipping_threshold', 1.0, 'Updates are scaled down to RMS <= this.', domains.Positive())
    p.Define('epsilon1', 1e-30, 'Added to squared gradients.', domains.Positive())
    p.Define('epsilon2', 1e-3, 'Lower bound of the parameter scale.', domains.Positive())
    p.Define('multiply_by_parameter_scale', True, 'Scale updates by max(epsilon2, RMS(weight)).')
    p.Define('beta1', 0.0, 'Momentum of the update (0 = none, no slot: the paper\'s memory-lean setting).',
             domains.Probability())
    return p

  @staticmethod
  def _Factored(spec) -> bool:
    return len(spec.shape) >= 2

  def SlotSpecs(self, spec):
    momentum = {'m': (spec.shape, spec.logical_axes)} if self.p.beta1 else {}
    if not self._Factored(spec):
      return {'v': (spec.shape, spec.logical_axes), **momentum}
    shape, axes = tuple(spec.shape), tuple(spec.logical_axes)
    # Rows average over the last dim, columns over the second to last; the other axes keep their layout.
    return {'v_row': (shape[:-1], axes[:-1]), 'v_col': (shape[:-2] + shape[-1:], axes[:-2] + axes[-1:]),
            **momentum}

  def CanonicalSlots(self, spec, slots):
    perm = spec.checkpoint_perm
    n = len(spec.shape)
    if perm is None or not self._Factored(spec) or tuple(perm[:-2]) != tuple(range(n - 2)):
      return super().CanonicalSlots(spec, slots)
    if tuple(perm[-2:]) == (n - 2, n - 1):
      return {name: (v, None) for name, v in slots.items()}  # perm is the identity
    momentum = {'m': (slots['m'], perm)} if 'm' in slots else {}
    # The last two dims swapped: the stored weight's row statistics are the canonical one's column
    # statistics and the other way round (same values, no transpose). The update is the same either way:
    # it is g_ij / sqrt(r_i c_j / mean(r)), and mean(r) = mean(c) = mean(g^2) + epsilon1 at every step.
    return {'v_row': (slots['v_col'], None), 'v_col': (slots['v_row'], None), **momentum}

  def Update(self, value, grad, slots, lr, step):
    # Written for few passes over weight-sized tensors (each is a separate kernel in a TF-graph step, and
    # the update is a visible share of a small model's step): 9 reads and 4 writes of them instead of 15
    # and 8. An XLA island of the whole update was no faster than these TF kernels (XLA's CPU backend turns
    # the column means into reduce-windows; docs/guides/design_measurements.md).
    p = self.p
    decay = 1.0 - tf.pow(step, -p.decay_exponent)
    num = float(max(value.shape.num_elements(), 1))
    sq = tf.square(grad)
    if 'v' in slots:
      v = decay * slots['v'] + (1 - decay) * (sq + p.epsilon1)
      new_slots = {'v': v}
      update = grad * tf.math.rsqrt(v)
      mean_sq_update = tf.reduce_mean(tf.square(update))
    else:
      # mean(g^2 + epsilon1) = mean(g^2) + epsilon1: the epsilon goes on the means, not on every entry.
      row = decay * slots['v_row'] + (1 - decay) * (tf.reduce_mean(sq, -1) + p.epsilon1)
      col = decay * slots['v_col'] + (1 - decay) * (tf.reduce_mean(sq, -2) + p.epsilon1)
      new_slots = {'v_row': row, 'v_col': col}
      row_factor = tf.math.rsqrt(row / tf.reduce_mean(row, -1, keepdims=True))
      col_factor = tf.math.rsqrt(col)
      # update = g_ij r_i c_j, so mean(update^2) = sum_i r_i^2 sum_j g_ij^2 c_j^2 / n: one matvec over g^2.
      mean_sq_update = tf.reduce_sum(tf.linalg.matvec(sq, tf.square(col_factor)) * tf.square(row_factor)) / num
    scale = lr / tf.maximum(1.0, tf.sqrt(mean_sq_update) / p.clipping_threshold)
    if p.multiply_by_parameter_scale:
      rms_value = tf.sqrt(2.0 * tf.nn.l2_loss(tf.cast(value, tf.float32)) / num)
      scale *= tf.maximum(p.epsilon2, rms_value)
    if 'v' in slots:
      update = scale * update
    else:
      update = grad * (scale * row_factor)[..., :, None] * col_factor[..., None, :]
    if p.beta1:
      update = p.beta1 * slots['m'] + (1 - p.beta1) * update
      new_slots['m'] = update
    return update, new_slots
