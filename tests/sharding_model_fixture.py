"""A small routed model step shared by the sharding tests (not a test file itself).

It has what makes partitioning non-trivial: a replicated dense layer on group-split activations, an einsum
whose output is sharded on a different dimension than its inputs (the G->E reshard, an all-to-all), expert
weights split on E, and a loss with gradients.
"""
import tensorflow as tf

from lingvo_gshard.core import base_layer
from lingvo_gshard.core import sharding
from lingvo_gshard.runtime import step_runner

G, S, M, E, H = 8, 4, 8, 8, 16


class RoutedStep(base_layer.BaseLayer):
  """x[G,S,M] -> dense -> soft routing into [E,G,M] buffers -> per-expert matmul -> combine -> loss."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('model_dim', M, 'M.')
    p.Define('hidden_dim', H, 'H.')
    p.Define('num_experts', E, 'E.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.p
    self.CreateWeight('w_in', base_layer.WeightSpec((p.model_dim, p.model_dim), ('model', None)))
    self.CreateWeight('w_gate', base_layer.WeightSpec((p.model_dim, p.num_experts), ('model', None)))
    self.CreateWeight('w_e', base_layer.WeightSpec((p.num_experts, p.model_dim, p.hidden_dim),
                                                   ('expert', 'model', 'hidden')))

  def FProp(self, x):
    x = sharding.shard(x, ('group', 'length', 'model'))
    h = tf.nn.relu(tf.einsum('GSM,MN->GSN', x, self.w.w_in))
    gates = tf.nn.softmax(tf.einsum('GSM,ME->GSE', h, self.w.w_gate))
    buf = sharding.shard(tf.einsum('GSE,GSM->EGM', gates, h), ('expert', 'group', 'model'))
    out = sharding.shard(tf.einsum('EGM,EMH->EGH', buf, self.w.w_e), ('expert', 'group', 'hidden'))
    y = sharding.shard(tf.einsum('EGH,GSE->GSH', out, gates), ('group', 'length', 'hidden'))
    return tf.reduce_mean(tf.square(y - 0.5))


def Input():
  return tf.random.stateless_normal([G, S, M], seed=[7, 8])


def RunStep(partitioner):
  """Loss and gradients of RoutedStep under `partitioner`: (loss, {name: grad}, layer)."""
  with sharding.use(partitioner):
    layer = RoutedStep.Params().Instantiate().InstantiateVariables()
    variables = dict(layer.IterVariables())

    def Step(x):
      with tf.GradientTape() as tape:
        loss = layer.FProp(x)
      grads = tape.gradient(loss, list(variables.values()))
      return loss, dict(zip(variables, grads))

    x = partitioner.ToDevice(Input(), ('group', 'length', 'model'))
    jit = True if partitioner.backend == 'none' else None
    loss, grads = step_runner.StepRunner(partitioner, jit=jit).Compile(Step)(x)
    return (partitioner.Fetch(loss), {k: partitioner.Fetch(g) for k, g in grads.items()}, layer, Step, x)
