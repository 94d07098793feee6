"""Transformer encoder-decoder for translation (dense, or GShard MoE every other FFN).

Batch (a dict; packed or not - unpacked is segment id 1 everywhere but padding):
  src_ids, src_segment_ids, src_positions: [B,Ls] int32 (segment 0 = padding)
  tgt_ids (decoder input: target-language tag, then the target shifted right), tgt_labels,
  tgt_segment_ids, tgt_positions: [B,Lt] int32; tgt_weights: [B,Lt] float32 (0 on padding).
"""
import math

import tensorflow as tf

from lingvo_gshard.core import base_layer
from lingvo_gshard.core import compile_hints
from lingvo_gshard.core import domains
from lingvo_gshard.core import sharding
from lingvo_gshard.layers import attention
from lingvo_gshard.layers import basic
from lingvo_gshard.layers import transformer


class TransformerMT(base_layer.BaseLayer):
  """Pre-LN Transformer translation model; `encoder.moe_tpl`/`decoder.moe_tpl` make it an MoE model."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('source_vocab_size', 64000, 'Source vocabulary size (the paper: 64k over 102 languages).',
             domains.Positive(int))
    p.Define('target_vocab_size', 32000, 'Target vocabulary size (the paper: 32k English).', domains.Positive(int))
    p.Define('model_dim', 1024, 'M.', domains.Positive(int))
    p.Define('num_heads', 16, 'Attention heads.', domains.Positive(int))
    p.Define('hidden_dim', 8192, 'H of dense FFNs and of each expert.', domains.Positive(int))
    p.Define('encoder', transformer.TransformerStack.Params(), 'Encoder stack.')
    p.Define('decoder', transformer.TransformerStack.Params(), 'Decoder stack.')
    p.Define('shared_embedding', False, 'One embedding for source and target (needs one vocabulary).')
    p.Define('tie_softmax', True, 'Use the target embedding as the softmax weight.')
    p.Define('position', 'sinusoidal', "'sinusoidal' or 'learned' position embeddings.",
             domains.OneOf('sinusoidal', 'learned'))
    p.Define('max_length', 512, 'Longest position for learned positions.', domains.Positive(int))
    p.Define('input_dropout_prob', 0.0, 'Dropout on embeddings + positions.', domains.Probability())
    p.Define('label_smoothing', 0.1, 'Label smoothing of the cross-entropy.', domains.Probability())
    p.Define('aux_loss_weight', 0.01, 'Coefficient of the summed MoE load-balancing losses.',
             domains.NonNegative())
    p.Define('router_z_loss_weight', 0.0,
             "Coefficient of the MoE layers' summed router z-loss (ST-MoE: the mean of logsumexp(router "
             "logits)^2; Hugging Face NLLB-MoE's router_z_loss_coef, ST-MoE used 1e-3); 0 = off. Logged as "
             "'router_z_loss' either way.", domains.NonNegative())
    p.Define('decode_first_cache_length', 8,
             'Self-attention cache length of the first decode loop; each next loop doubles it up to the '
             'decode length (decoding.CacheLengths). Growing caches read less per step; each loop is one more '
             'copy of the decoder in the compiled program, so a value >= the decode length (one loop) compiles '
             'fastest.', domains.Positive(int))
    return p

  @classmethod
  def ParamRules(cls, p):
    """The rules that tie this model's params together: (param, why) for each broken one."""
    broken = []
    if p.model_dim % p.num_heads:
      broken.append(('num_heads', f'must divide model_dim ({p.model_dim})'))
    if p.shared_embedding and p.source_vocab_size != p.target_vocab_size:
      broken.append(('shared_embedding', f'needs one vocabulary; source_vocab_size is {p.source_vocab_size}, '
                                         f'target_vocab_size {p.target_vocab_size}'))
    return broken

  def __init__(self, params):
    super().__init__(params)
    p = self.p  # its domains and ParamRules were checked by BaseLayer.__init__
    emb = basic.Embedding.Params().Set(embedding_dim=p.model_dim)
    self.CreateChild('tgt_emb', emb.Copy().Set(vocab_size=p.target_vocab_size))
    if not p.shared_embedding:
      self.CreateChild('src_emb', emb.Copy().Set(vocab_size=p.source_vocab_size))
    if not p.tie_softmax:
      self.CreateChild('softmax', basic.Softmax.Params().Set(input_dim=p.model_dim,
                                                              num_classes=p.target_vocab_size))
    if p.position == 'learned':
      self.CreateWeight('pos_emb', base_layer.WeightSpec((p.max_length, p.model_dim), (None, 'model'),
                                                         base_layer.WeightInit.Gaussian(0.02)))
    layer = p.encoder.layer_tpl.Copy().Set(input_dim=p.model_dim, num_heads=p.num_heads)
    layer.ffn_tpl.Set(hidden_dim=p.hidden_dim)
    enc = p.encoder.Copy().Set(layer_tpl=layer)
    dec_layer = p.decoder.layer_tpl.Copy().Set(input_dim=p.model_dim, num_heads=p.num_heads,
                                               has_cross_attention=True)
    dec_layer.ffn_tpl.Set(hidden_dim=p.hidden_dim)
    dec = p.decoder.Copy().Set(layer_tpl=dec_layer)
    for stack in (enc, dec):
      if stack.moe_tpl is not None:
        # Experts default to the dense FFN's shape (the paper); an experiment may size them otherwise.
        stack.moe_tpl = stack.moe_tpl.Copy().Set(input_dim=p.model_dim,
                                                 hidden_dim=stack.moe_tpl.hidden_dim or p.hidden_dim)
    self.CreateChild('encoder', enc)
    self.CreateChild('decoder', dec)

  # --- pieces -------------------------------------------------------------------------------------------

  def _Embed(self, emb_layer, ids, positions, seed, name):
    # Activations run in fprop_dtype (e.g. bfloat16) from here on; weights stay float32 and are cast at use.
    x = tf.cast(emb_layer(ids), self.fprop_dtype)
    if self.p.position == 'learned':
      x += tf.cast(tf.gather(self.w.pos_emb, positions), x.dtype)
    else:
      x += tf.cast(basic.SinusoidalPositions(positions, self.p.model_dim), x.dtype)
    x = base_layer.Dropout(x, self.p.input_dropout_prob, seed, f'{self.path}.{name}')
    return sharding.shard(x, ('batch', 'length', 'model'))

  def Logits(self, x):
    logits = self.tgt_emb.Logits(x) if self.p.tie_softmax else self.softmax.Logits(x)
    return sharding.shard(logits, ('batch', 'length', 'vocab'))

  def Encode(self, src_ids, src_segment_ids, src_positions, seed=None):
    """-> (encoder output [B,Ls,M], aux loss, stats)."""
    src_emb = self.tgt_emb if self.p.shared_embedding else self.src_emb
    x = self._Embed(src_emb, src_ids, src_positions, base_layer.FoldSeed(seed, 'src'), 'src')
    paddings = tf.cast(tf.equal(src_segment_ids, 0), x.dtype)
    bias = attention.AttentionBias(src_segment_ids, src_segment_ids)
    return self.encoder(x, paddings, bias, seed=base_layer.FoldSeed(seed, 'enc'))

  def Decode(self, encoded, batch, seed=None):
    """Teacher-forced decoder -> (logits [B,Lt,V] float32, aux loss, stats)."""
    x = self._Embed(self.tgt_emb, batch['tgt_ids'], batch['tgt_positions'], base_layer.FoldSeed(seed, 'tgt'),
                    'tgt')
    paddings = tf.cast(tf.equal(batch['tgt_segment_ids'], 0), x.dtype)
    self_bias = attention.AttentionBias(batch['tgt_segment_ids'], batch['tgt_segment_ids'], causal=True)
    cross_bias = attention.AttentionBias(batch['tgt_segment_ids'], batch['src_segment_ids'])
    y, aux, stats = self.decoder(x, paddings, self_bias, source=encoded, cross_bias=cross_bias,
                                 seed=base_layer.FoldSeed(seed, 'dec'))
    return tf.cast(self.Logits(y), tf.float32), aux, stats

  def ComputeLogits(self, batch, seed=None):
    encoded, enc_aux, enc_stats = self.Encode(batch['src_ids'], batch['src_segment_ids'],
                                              batch['src_positions'], seed)
    logits, dec_aux, dec_stats = self.Decode(encoded, batch, seed)
    stats = {f'encoder/{k}': v for k, v in enc_stats.items()}
    stats.update({f'decoder/{k}': v for k, v in dec_stats.items()})
    return logits, enc_aux + dec_aux, stats

  def FProp(self, batch, seed=None):
    """-> (loss, metrics). metrics: loss, xent (unsmoothed, per token), aux_loss, num_tokens,
    per_token_xent [B,Lt], and every MoE layer's routing stats under 'moe/<stack>/<layer>/<name>'."""
    logits, aux, stats = self.ComputeLogits(batch, seed)
    labels, weights = batch['tgt_labels'], tf.cast(batch['tgt_weights'], tf.float32)
    # Where the runner compiles islands (TF-graph steps, the CPU mode), the [B,L,V] softmax/loss elementwise
    # passes are one XLA island, so they fuse; the logits matmul stays on TF's kernels.
    per_token_xent, per_token_loss = compile_hints.Island(_TokenLosses)(logits, labels, self.p.label_smoothing)
    num_tokens = tf.maximum(tf.reduce_sum(weights), 1.0)
    xent = tf.reduce_sum(per_token_xent * weights) / num_tokens
    loss = tf.reduce_sum(per_token_loss * weights) / num_tokens + self.p.aux_loss_weight * aux
    metrics = {'loss': loss, 'xent': xent, 'aux_loss': aux, 'num_tokens': num_tokens,
               'per_token_xent': per_token_xent}
    z_losses = [layer_stats['router_z_loss'] for layer_stats in stats.values() if 'router_z_loss' in layer_stats]
    if z_losses:
      metrics['router_z_loss'] = tf.add_n(z_losses)
      if self.p.router_z_loss_weight:
        loss += self.p.router_z_loss_weight * metrics['router_z_loss']
        metrics['loss'] = loss
    for layer_name, layer_stats in stats.items():
      for k, v in layer_stats.items():
        metrics[f'moe/{layer_name}/{k}'] = v
    return loss, metrics

  # --- incremental decoding -----------------------------------------------------------------------------

  def InitDecoderState(self, src_ids, src_segment_ids, src_positions, max_len):
    """Encodes the source once and builds per-layer caches (cross-attention keys/values precomputed)."""
    encoded, _, _ = self.Encode(src_ids, src_segment_ids, src_positions)
    batch = tf.shape(src_ids)[0]
    caches = self.decoder.InitCache(batch, max_len, source=encoded, dtype=encoded.dtype)
    cross_bias = tf.where(tf.not_equal(src_segment_ids, 0), 0.0, -1e9)[:, None, None, :]
    return {'caches': caches, 'cross_bias': cross_bias}

  def ExtendStep(self, ids, step, state, max_len, paddings=None):
    """ids: [B] tokens at position `step` -> (log-probs [B,V] for position step+1, new state); max_len is the
    self-attention caches' length (decoding.CacheLengths: it grows between decode loops). paddings [B] (1: a
    row whose output the decoder will not use) keeps those rows' tokens from claiming MoE capacity."""
    ids = ids[:, None]
    positions = tf.fill(tf.shape(ids), step)
    x = self._Embed(self.tgt_emb, ids, positions, None, 'tgt')
    batch = tf.shape(ids)[0]
    self_bias = attention.DecodeStepBias(step, max_len, batch)
    if paddings is not None:
      paddings = tf.cast(paddings, x.dtype)[:, None]
    y, caches = self.decoder.ExtendStep(x, state['caches'], step, self_bias, state['cross_bias'], paddings)
    logits = tf.cast(self.Logits(y), tf.float32)[:, 0, :]
    return tf.nn.log_softmax(logits), dict(state, caches=caches)


def _TokenLosses(logits, labels, label_smoothing):
  """logits [B,L,V] float32, labels [B,L] -> (per-token cross-entropy, per-token training loss) [B,L].

  The training loss is the cross-entropy against (1-ls) one-hot + ls uniform, minus that distribution's
  entropy so a perfect fit scores 0. One log-softmax serves both.
  """
  log_probs = tf.nn.log_softmax(logits)
  nll = -tf.gather(log_probs, labels, batch_dims=2)
  ls = label_smoothing
  if not ls:
    return nll, nll
  v = logits.shape[-1]
  low = ls / v
  min_entropy = -((1.0 - ls + low) * math.log(1.0 - ls + low) + (v - 1) * low * math.log(low + 1e-20))
  return nll, (1.0 - ls) * nll - ls * tf.reduce_mean(log_probs, -1) - min_entropy
