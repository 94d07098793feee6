"""Small building blocks: layer norm, embedding + softmax, sinusoidal positions, dense FFN.

Logical axes: B batch, L length, M model ('model'), H hidden ('hidden'), V vocabulary ('vocab').
"""
import math

import tensorflow as tf

from lingvo_gshard.core import base_layer
from lingvo_gshard.core import domains
from lingvo_gshard.core import sharding

WeightSpec = base_layer.WeightSpec
WeightInit = base_layer.WeightInit

ACTIVATIONS = {'relu': tf.nn.relu, 'gelu': tf.nn.gelu, 'silu': tf.nn.silu}


class LayerNorm(base_layer.BaseLayer):
  """Layer normalisation over the last (model) dimension, computed in float32."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'M.', domains.NonNegative(int))
    p.Define('epsilon', 1e-6, 'Tiny value to guard rsqrt.', domains.Positive())
    return p

  def __init__(self, params):
    super().__init__(params)
    m = self.p.input_dim
    self.CreateWeight('scale', WeightSpec((m,), ('model',), WeightInit.Constant(1.0)))
    self.CreateWeight('bias', WeightSpec((m,), ('model',), WeightInit.Constant(0.0)))

  def FProp(self, x):
    dtype = x.dtype
    x = tf.cast(x, tf.float32)
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    y = (x - mean) * tf.math.rsqrt(var + self.p.epsilon) * self.w.scale + self.w.bias
    return tf.cast(y, dtype)


class Embedding(base_layer.BaseLayer):
  """Token embedding [V, M] that can also serve as the softmax weight (shared embeddings).

  Embeddings are scaled by sqrt(M) (Vaswani et al.), so a shared softmax sees unit-variance weights.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('vocab_size', 0, 'V.', domains.NonNegative(int))
    p.Define('embedding_dim', 0, 'M.', domains.NonNegative(int))
    p.Define('scale_sqrt_depth', True, 'Multiply looked-up embeddings by sqrt(M).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.p
    self.CreateWeight('emb', WeightSpec((p.vocab_size, p.embedding_dim), ('vocab', 'model'),
                                        WeightInit.Gaussian(1.0 / math.sqrt(p.embedding_dim))))

  def FProp(self, ids):
    """ids: [B,L] int -> [B,L,M]. A one-hot matmul would cost V*M per token; gather is O(M)."""
    emb = tf.gather(self.w.emb, ids)
    if self.p.scale_sqrt_depth:
      emb *= math.sqrt(self.p.embedding_dim)
    return tf.cast(emb, self.fprop_dtype)

  def Logits(self, x):
    """x: [B,L,M] -> logits [B,L,V] against the embedding matrix, scaled by M^-0.5 (Mesh TF/T5's tied
    softmax) so that logits start near zero and the initial loss is ~ln(V)."""
    return tf.einsum('BLM,VM->BLV', x, tf.cast(self.w.emb, x.dtype)) * (self.p.embedding_dim ** -0.5)


class Softmax(base_layer.BaseLayer):
  """A separate (unshared) softmax projection [M, V] with bias."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'M.', domains.NonNegative(int))
    p.Define('num_classes', 0, 'V.', domains.NonNegative(int))
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.p
    self.CreateWeight('w', WeightSpec((p.input_dim, p.num_classes), ('model', 'vocab'), WeightInit.FanIn()))
    self.CreateWeight('b', WeightSpec((p.num_classes,), ('vocab',), WeightInit.Constant(0.0)))

  def Logits(self, x):
    return tf.einsum('BLM,MV->BLV', x, tf.cast(self.w.w, x.dtype)) + tf.cast(self.w.b, x.dtype)


def SinusoidalPositions(positions, dim, min_timescale=1.0, max_timescale=1.0e4):
  """positions: [B,L] int (reset per packed segment) -> [B,L,dim] float32 (Vaswani et al.)."""
  positions = tf.cast(positions, tf.float32)
  num_timescales = dim // 2
  log_inc = math.log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
  inv = min_timescale * tf.exp(tf.range(num_timescales, dtype=tf.float32) * -log_inc)
  scaled = positions[..., None] * inv
  signal = tf.concat([tf.sin(scaled), tf.cos(scaled)], axis=-1)
  if dim % 2:
    signal = tf.pad(signal, [[0, 0], [0, 0], [0, 1]])
  return signal


class FeedForward(base_layer.BaseLayer):
  """The dense Transformer FFN: M -> H -> M with an activation (the shape every expert has)."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'M.', domains.NonNegative(int))
    p.Define('hidden_dim', 0, 'H.', domains.NonNegative(int))
    p.Define('activation', 'relu', f'One of {sorted(ACTIVATIONS)}.', domains.Choices(ACTIVATIONS))
    p.Define('relu_dropout_prob', 0.0, 'Dropout on the hidden activations.', domains.Probability())
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.p
    self.CreateWeight('wi', WeightSpec((p.input_dim, p.hidden_dim), ('model', 'hidden'), WeightInit.FanIn()))
    self.CreateWeight('wo', WeightSpec((p.hidden_dim, p.input_dim), ('hidden', 'model'), WeightInit.FanIn()))

  def FProp(self, x, paddings=None, seed=None):
    """x: [B,L,M] -> ([B,L,M], aux_loss=0, stats={}). Same signature as the MoE layer's."""
    del paddings
    h = ACTIVATIONS[self.p.activation](tf.einsum('BLM,MH->BLH', x, tf.cast(self.w.wi, x.dtype)))
    h = sharding.shard(h, ('batch', 'length', 'hidden'))
    h = base_layer.Dropout(h, self.p.relu_dropout_prob, seed, f'{self.path}.relu')
    y = tf.einsum('BLH,HM->BLM', h, tf.cast(self.w.wo, x.dtype))
    return y, tf.constant(0.0), {}

  def ExtendStep(self, x, paddings=None):
    """One decoding step: x [B,1,M] -> [B,1,M] (the MoE layer's signature; every token is computed)."""
    return self.FProp(x, paddings)[0]
