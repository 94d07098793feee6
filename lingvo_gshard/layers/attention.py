"""Multi-head attention with packed-input masks and an incremental decoding cache.

Dimensions: B batch, T query length, S key length, M model dim, N heads, D dim per head.
Packed inputs carry `segment_ids` (0 = padding, 1..k = the k sentences in a row); attention never crosses a
segment, so packed and unpacked batches compute the same per-token values.
"""
import tensorflow as tf

from lingvo_gshard.core import base_layer
from lingvo_gshard.core import domains
from lingvo_gshard.core import sharding

WeightSpec = base_layer.WeightSpec
WeightInit = base_layer.WeightInit

_NEG_INF = -1e9  # Large but finite: a fully masked (padding) query row still has a defined softmax.


def AttentionBias(q_segment_ids, k_segment_ids, causal=False):
  """Additive bias [B,1,T,S]: 0 where query t may attend key s (same non-zero segment, s <= t if causal)."""
  q = q_segment_ids[:, :, None]
  k = k_segment_ids[:, None, :]
  allowed = tf.logical_and(tf.equal(q, k), tf.not_equal(k, 0))
  if causal:
    t, s = tf.shape(q_segment_ids)[1], tf.shape(k_segment_ids)[1]
    allowed = tf.logical_and(allowed, tf.linalg.band_part(tf.ones([t, s], tf.bool), -1, 0)[None])
  return tf.where(allowed, 0.0, _NEG_INF)[:, None, :, :]


def DecodeStepBias(step, max_len, batch):
  """Bias [B,1,1,max_len] letting decode step `step` see the cached positions 0..step-1 (the step's own key
  and value are attended beside the cache: MultiHeadAttention.ExtendStep)."""
  visible = tf.range(max_len) < step
  return tf.tile(tf.where(visible, 0.0, _NEG_INF)[None, None, None, :], [batch, 1, 1, 1])


class MultiHeadAttention(base_layer.BaseLayer):
  """Scaled dot-product attention over N heads; self-attention when `source` is None."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'M.', domains.NonNegative(int))
    p.Define('num_heads', 0, 'N.', domains.NonNegative(int))
    p.Define('dim_per_head', 0, 'D; 0 means M // N.', domains.NonNegative(int))
    p.Define('atten_dropout_prob', 0.0, 'Dropout on attention probabilities.', domains.Probability())
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.p
    if p.num_heads <= 0 or (not p.dim_per_head and p.input_dim % p.num_heads):
      raise ValueError(f'{self.path}: input_dim {p.input_dim} is not divisible by num_heads {p.num_heads}')
    m, n, d = p.input_dim, p.num_heads, self.dim_per_head
    for name in ('query', 'key', 'value'):
      self.CreateWeight(name, WeightSpec((m, n, d), ('model', 'heads', 'kv'), WeightInit.FanIn()))
    self.CreateWeight('post', WeightSpec((n, d, m), ('heads', 'kv', 'model'), WeightInit.FanIn()))

  @property
  def dim_per_head(self):
    return self.p.dim_per_head or self.p.input_dim // self.p.num_heads

  def _Project(self, x, name):
    y = tf.einsum('BLM,MND->BLND', x, tf.cast(getattr(self.w, name), x.dtype))
    return sharding.shard(y, ('batch', 'length', 'heads', 'kv'))

  def _Attend(self, q, k, v, bias, seed):
    """q: [B,T,N,D], k/v: [B,S,N,D], bias: [B,1,T,S] -> context [B,T,N,D]. Softmax in float32."""
    q = q * tf.cast(self.dim_per_head ** -0.5, q.dtype)
    # Heads to the front once, then batched matmuls: TF's einsum transposes 'BTND,BSND->BNTS' operands and
    # outputs itself, and again in each gradient einsum, copies a TF-graph step pays on every attention
    # (docs/guides/design_measurements.md). XLA makes the same dots.
    q, k, v = (tf.transpose(t, [0, 2, 1, 3]) for t in (q, k, v))  # [B,N,L,D]
    logits = tf.matmul(q, k, transpose_b=True)  # [B,N,T,S]
    logits = tf.cast(logits, tf.float32) + bias
    probs = tf.nn.softmax(logits, axis=-1)
    probs = base_layer.Dropout(probs, self.p.atten_dropout_prob, seed, f'{self.path}.probs')
    return tf.transpose(tf.matmul(tf.cast(probs, v.dtype), v), [0, 2, 1, 3])

  def _Post(self, ctx):
    y = tf.einsum('BTND,NDM->BTM', ctx, tf.cast(self.w.post, ctx.dtype))
    return sharding.shard(y, ('batch', 'length', 'model'))

  def FProp(self, query, bias, source=None, seed=None):
    """query: [B,T,M]; source: [B,S,M] or None (self-attention); bias: [B,1,T,S] -> [B,T,M]."""
    kv_in = query if source is None else source
    q = self._Project(query, 'query')
    k = self._Project(kv_in, 'key')
    v = self._Project(kv_in, 'value')
    return self._Post(self._Attend(q, k, v, bias, seed))

  def InitCache(self, batch, max_len=None, source=None, dtype=tf.float32):
    """Decoding cache. Self-attention: zero keys/values [B,max_len,N,D] filled step by step. Cross-attention
    (`source` [B,S,M]): the source's keys/values, computed once for all steps."""
    if source is not None:
      return {'key': self._Project(source, 'key'), 'value': self._Project(source, 'value')}
    shape = [batch, max_len, self.p.num_heads, self.dim_per_head]
    return {'key': tf.zeros(shape, dtype), 'value': tf.zeros(shape, dtype)}

  def ExtendStep(self, query, cache, bias, step=None):
    """One decoding step. query: [B,1,M]; bias: [B,1,1,S] over the cache; `step` (self-attention only) is the
    position to write. Returns ([B,1,M], updated cache)."""
    q = self._Project(query, 'query')
    if step is None:
      return self._Post(self._AttendOne(q, cache['key'], cache['value'], bias)), cache
    new = {name: self._Project(query, name) for name in ('key', 'value')}                # [B,1,N,D]
    ctx = self._AttendOne(q, cache['key'], cache['value'], bias, new['key'], new['value'])
    # The write, a one-hot blend (static shapes for XLA), is read by nothing in this step: its one consumer
    # is the next step, or first the beam search's gather of the caches, into which XLA fuses it, so the
    # cache is read once for attention and once for gather + write.
    at = tf.cast(tf.one_hot(step, cache['key'].shape[1]), query.dtype)[None, :, None, None]
    return self._Post(ctx), {name: cache[name] * (1 - at) + new[name] * at for name in ('key', 'value')}

  def _AttendOne(self, q, k, v, bias, new_k=None, new_v=None):
    """_Attend for one query position. q: [B*K,1,N,D]; k/v: [B,S,N,D]; bias: [B,1,1,S] -> [B*K,1,N,D];
    `new_k`/`new_v` [B*K,1,N,D]: one more key and value per query (self-attention: the step's own), always
    visible.

    K (the beam) is q's batch over k's: the K queries of a row share its keys and values, so a beam search
    keeps one copy of each source's cross-attention keys instead of K (K = 1 everywhere else). A decoding
    step's attention is a dot product of length D per key and head: as batched matmuls these were B*N
    one-row matmuls plus a transpose of the whole cache every step, several times the step's FLOPs on a CPU;
    multiply-and-reduce in the cache's own layout fuses into one pass over k and one over v.
    """
    n, d = self.p.num_heads, self.dim_per_head
    qb, kb, bb = q.shape[0], k.shape[0], bias.shape[0]
    if qb is not None and kb is not None and (qb % kb or (bb is not None and bb != kb)):
      raise ValueError(f'{self.path}: {qb} queries cannot share the keys of {kb} rows (bias of {bb} rows)')
    b = tf.shape(k)[0]
    q = tf.reshape(q * tf.cast(d ** -0.5, q.dtype), [b, -1, 1, n, d])              # [B,K,1,N,D]
    logits = tf.cast(tf.reduce_sum(q * k[:, None], -1), tf.float32)                # [B,K,S,N]
    logits += tf.transpose(bias[:, 0], [0, 2, 1])[:, None]                         # [B,1,S,1]
    if new_k is None:
      probs = tf.nn.softmax(logits, axis=2)
      ctx = tf.reduce_sum(tf.cast(probs, v.dtype)[..., None] * v[:, None], 2)      # [B,K,N,D]
      return tf.reshape(ctx, [-1, 1, n, d])
    # The softmax over the S cached keys and the new one, without concatenating them.
    new_k, new_v = (tf.reshape(t, [b, -1, 1, n, d]) for t in (new_k, new_v))      # [B,K,1,N,D]
    new_logit = tf.cast(tf.reduce_sum(q * new_k, -1), tf.float32)                  # [B,K,1,N]
    top = tf.maximum(tf.reduce_max(logits, 2, keepdims=True), new_logit)
    e, e_new = tf.exp(logits - top), tf.exp(new_logit - top)
    denom = tf.reduce_sum(e, 2) + e_new[:, :, 0]                                    # [B,K,N]
    ctx = (tf.reduce_sum(tf.cast(e, v.dtype)[..., None] * v[:, None], 2)
           + tf.cast(e_new[:, :, 0, :, None], v.dtype) * new_v[:, :, 0])          # [B,K,N,D]
    return tf.reshape(ctx / tf.cast(denom[..., None], v.dtype), [-1, 1, n, d])
