"""Pre-layer-norm Transformer layers and stacks, with MoE replacing every `moe_every`-th FFN.

Dimensions: B batch, L length, M model dim. Every FFN-like sub-layer (dense `basic.FeedForward` or the MoE
layer) has the signature `FProp(x[B,L,M], paddings[B,L], seed) -> (y, aux_loss, stats)`. A `seed` of None
means evaluation: no dropout, and MoE layers use their evaluation capacity factor.
"""
from typing import Dict, List

import tensorflow as tf

from lingvo_gshard.core import base_layer
from lingvo_gshard.core import domains
from lingvo_gshard.core import sharding
from lingvo_gshard.layers import attention
from lingvo_gshard.layers import basic


class TransformerLayer(base_layer.BaseLayer):
  """x + Attn(LN(x)) [+ CrossAttn(LN(x), source)] + FFN(LN(x)), each branch with residual dropout."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'M.', domains.NonNegative(int))
    p.Define('num_heads', 0, 'Attention heads.', domains.NonNegative(int))
    p.Define('has_cross_attention', False, 'Decoder layers attend to the encoder output.')
    p.Define('atten_dropout_prob', 0.0, 'Dropout on attention probabilities.', domains.Probability())
    p.Define('residual_dropout_prob', 0.0, 'Dropout on each branch before the residual add.',
             domains.Probability())
    p.Define('ffn_tpl', basic.FeedForward.Params(), 'The FFN sub-layer: dense FeedForward or MoE.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.p
    ln = basic.LayerNorm.Params().Set(input_dim=p.input_dim)
    att = attention.MultiHeadAttention.Params().Set(
        input_dim=p.input_dim, num_heads=p.num_heads, atten_dropout_prob=p.atten_dropout_prob)
    self.CreateChild('self_atten_ln', ln)
    self.CreateChild('self_atten', att)
    if p.has_cross_attention:
      self.CreateChild('cross_atten_ln', ln)
      self.CreateChild('cross_atten', att)
    self.CreateChild('ffn_ln', ln)
    self.CreateChild('ffn', p.ffn_tpl.Copy().Set(input_dim=p.input_dim))

  def _Residual(self, x, branch, seed, name):
    branch = base_layer.Dropout(branch, self.p.residual_dropout_prob, seed, f'{self.path}.{name}')
    return sharding.shard(x + branch, ('batch', 'length', 'model'))

  def FProp(self, x, paddings, self_bias, source=None, cross_bias=None, seed=None):
    """x: [B,L,M]; paddings: [B,L] (1 = padding); biases [B,1,L,L] and [B,1,L,S]. -> (x, aux, stats)."""
    sub = lambda name: base_layer.FoldSeed(seed, name)
    x = self._Residual(x, self.self_atten(self.self_atten_ln(x), self_bias, seed=sub('sa')), seed, 'sa_res')
    if self.p.has_cross_attention:
      y = self.cross_atten(self.cross_atten_ln(x), cross_bias, source=source, seed=sub('ca'))
      x = self._Residual(x, y, seed, 'ca_res')
    y, aux, stats = self.ffn(self.ffn_ln(x), paddings, seed=sub('ffn'))
    return self._Residual(x, y, seed, 'ffn_res'), aux, stats

  def InitCache(self, batch, max_len, source=None, dtype=tf.float32):
    cache = {'self': self.self_atten.InitCache(batch, max_len, dtype=dtype)}
    if self.p.has_cross_attention:
      cache['cross'] = self.cross_atten.InitCache(batch, source=source)
    return cache

  def ExtendStep(self, x, cache, step, self_bias, cross_bias=None, paddings=None):
    """x: [B,1,M] at position `step` -> ([B,1,M], cache). paddings [B,1] (1 = a token whose output is not
    used: a dead beam, a settled or absent row) keep such tokens from claiming MoE capacity."""
    y, self_cache = self.self_atten.ExtendStep(self.self_atten_ln(x), cache['self'], self_bias, step=step)
    x = x + y
    new_cache = dict(cache, self=self_cache)
    if self.p.has_cross_attention:
      y, _ = self.cross_atten.ExtendStep(self.cross_atten_ln(x), cache['cross'], cross_bias)
      x = x + y
    if paddings is None:
      paddings = tf.zeros(tf.shape(x)[:2], x.dtype)
    return x + self.ffn.ExtendStep(self.ffn_ln(x), paddings), new_cache


class TransformerStack(base_layer.BaseLayer):
  """`num_layers` TransformerLayers; layer i uses `moe_tpl` as its FFN when (i + 1) % moe_every == 0."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('num_layers', 6, 'Number of layers.', domains.Positive(int))
    p.Define('layer_tpl', TransformerLayer.Params(), 'Template of each layer (dense FFN).')
    p.Define('moe_tpl', None, 'FFN params of MoE layers (e.g. moe_layer.MoELayer.Params()); None = dense.')
    p.Define('moe_every', 2, 'Every moe_every-th layer (the last of each block) is an MoE layer.',
             domains.Positive(int))
    p.Define('remat', False, 'Recompute each layer\'s activations in the backward pass (tf.recompute_grad).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.p
    layers = []
    for i in range(p.num_layers):
      lp = p.layer_tpl.Copy()
      if p.moe_tpl is not None and (i + 1) % p.moe_every == 0:
        lp.ffn_tpl = p.moe_tpl.Copy()
      layers.append(lp)
    self.CreateChildren('layers', layers)
    self.CreateChild('final_ln', basic.LayerNorm.Params().Set(input_dim=p.layer_tpl.input_dim))

  def IsMoE(self, i) -> bool:
    return self.p.moe_tpl is not None and (i + 1) % self.p.moe_every == 0

  def FProp(self, x, paddings, self_bias, source=None, cross_bias=None, seed=None):
    """-> (final-normalised x [B,L,M], summed aux loss, {layer name: MoE stats})."""
    aux_total = tf.constant(0.0)
    all_stats: Dict[str, Dict[str, tf.Tensor]] = {}
    for i, layer in enumerate(self.layers):
      layer_seed = base_layer.FoldSeed(seed, layer.path)

      # Every tensor the layer reads is an argument, not a capture: tf.recompute_grad differentiates only
      # its arguments (and variables), so a captured encoder output would silently get no gradient.
      def Run(x, paddings, self_bias, source, cross_bias, layer=layer, layer_seed=layer_seed):
        return layer.FProp(x, paddings, self_bias, source, cross_bias, seed=layer_seed)

      args = (x, paddings, self_bias, source, cross_bias)
      if self.p.remat:
        x, aux, stats = _Remat(Run, args)
      else:
        x, aux, stats = Run(*args)
      aux_total += aux
      if stats:
        all_stats[layer.p.name] = stats
    return self.final_ln(x), aux_total, all_stats

  def InitCache(self, batch, max_len, source=None, dtype=tf.float32) -> List[dict]:
    return [layer.InitCache(batch, max_len, source, dtype) for layer in self.layers]

  def ExtendStep(self, x, caches, step, self_bias, cross_bias=None, paddings=None):
    new_caches = []
    for layer, cache in zip(self.layers, caches):
      x, cache = layer.ExtendStep(x, cache, step, self_bias, cross_bias, paddings)
      new_caches.append(cache)
    return self.final_ln(x), new_caches


def _Remat(fn, args):
  """fn(*args) -> (x, aux, stats) under tf.recompute_grad; None arguments (no source) are passed through."""
  present = [i for i, a in enumerate(args) if a is not None]

  def Inner(*tensors):
    full = list(args)
    for i, t in zip(present, tensors):
      full[i] = t
    return fn(*full)

  return tf.recompute_grad(Inner)(*[args[i] for i in present])
