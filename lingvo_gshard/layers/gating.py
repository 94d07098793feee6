"""Mixture-of-Experts gating: which expert buffer slot each token goes to, and with what weight.

Dimensions cheat sheet::

  G: group_dim (tokens are routed independently per group)
  S: group_size_dim (tokens per group)
  E: number of experts
  C: capacity per expert per group
  K: choices per token (2 for top-2, 1 for top-1, E for expert-choice)

Every function here is pure TensorFlow (eager, `tf.function`, and `tf.function(jit_compile=True)` with
static shapes; only E must be static otherwise) and costs O(G*S*E): the result is returned in *index form*
(expert, slot, gate per choice). The paper's one-hot `combine`/`dispatch` G`S`E`C tensors are built from that
index form only when a caller asks for them, so the einsum dispatch path and an index (gather/scatter)
dispatch path derive from the same decision.

Conventions of the index form (GatingResult):
  - A choice is *kept* iff its gate > 0 iff its position < C. A dropped choice (expert full, padding token,
    second expert not taken by the policy, or a gate that underflowed to 0) has gate 0 and position == C.
    Index kernels must mask on `kept`: flattening (expert, position) as `e*C + position` for a dropped choice
    would alias slot 0 of expert e+1.
  - Positions are counted before the gate-underflow rule, so an underflowed choice still occupies its slot
    (as in Lingvo, where dispatch = combine > 0); the MoE output is the same either way.

The algorithm follows GShard (Lepikhin et al. 2020, Algorithm 1) and Lingvo's `Top2GatingOnLogits` with
`legacy_mtf_behavior=True`: gates are normalised before the capacity check.
"""
import numbers
import typing

import numpy as np
import tensorflow as tf

SECOND_EXPERT_POLICIES = ('all', 'random', 'sampling')

# The default 'auto_select' picks a different generator under XLA than on the CPU kernel. Philox is pinned so
# eager, tf.function and jit agree for a constant seed; with a seed computed at run time (a train step's
# folded seed), XLA's Philox uniform still differs from the CPU kernel's, so random routing is reproducible
# within one step mode (jit, or graph with XLA islands), not across them.
_RNG_ALG = 'philox'
# Smallest normal float32: lower bound of the uniform draw behind Gumbel noise, so -log(-log(u)) is finite.
_TINY = 1.1754943508222875e-38


def expert_capacity(group_size, num_experts, capacity_factor, min_capacity=4):
  """Capacity C per expert per group: int(S*cf/E), at least min_capacity, rounded up to a multiple of 4.

  cf = 2.0 gives the paper's 2S/E. The multiple of 4 is Lingvo's rule (avoids padding of the C dimension).

  Args:
    group_size: S, python int > 0.
    num_experts: E, python int > 0.
    capacity_factor: cf, python number > 0.
    min_capacity: python int >= 1, lower bound before rounding.

  Returns:
    C, a python int.
  """
  _check_int('group_size', group_size, 1)
  _check_int('num_experts', num_experts, 1)
  _check_int('min_capacity', min_capacity, 1)
  if (isinstance(capacity_factor, bool) or not isinstance(capacity_factor, numbers.Real) or
      not capacity_factor > 0 or capacity_factor == float('inf')):
    raise ValueError(f'capacity_factor must be a finite number > 0, got {capacity_factor!r}')
  capacity = max(int(group_size * capacity_factor / num_experts), int(min_capacity))
  return -(-capacity // 4) * 4


class GatingResult(tf.experimental.ExtensionType):
  """Routing decision of one MoE layer, in index form, plus the statistics a trainer summarises.

  An ExtensionType so that `capacity` and `num_experts` stay python ints across `tf.function` boundaries.

  Fields (K choices per token; see the module docstring for the kept/dropped convention):
    expert_index: G`S`K int32, expert of each choice. k=0 is the first (best) choice.
    position: G`S`K int32, slot in that expert's buffer for this group; C (== capacity) when dropped.
    gate: G`S`K float32 combine weight; 0 when dropped.
    capacity: C, python int.
    num_experts: E, python int.
    aux_loss: scalar float32 load-balancing loss (1.0 = balanced for top-k; 0 for expert-choice).
    load: E float32, fraction of non-padding tokens whose first choice (argmax of the softmax) is e, before
      capacity drops; per group, averaged over groups that hold any non-padding token. Sums to 1.
    overflow: K' float32, fraction of non-padding tokens whose k-th choice was dropped for lack of capacity
      (for the 2nd choice: among tokens whose 2nd choice the policy tried). K' = K for top-k; K' = 1 for
      expert-choice, where it is the fraction of tokens not taken by their argmax expert.
    router_entropy: scalar, mean entropy (nats) of the router softmax over non-padding tokens.
    dropped_fraction: scalar, fraction of non-padding tokens routed to no expert at all (their MoE output is
      0; only the residual connection carries them).
    kept_per_token: scalar, mean number of kept choices per non-padding token (expert FFN calls per token).
    slot_usage: scalar, fraction of the G*E*C expert buffer slots that hold a token.
    router_z_loss: scalar, ST-MoE's z-loss: mean over non-padding tokens of logsumexp(logits)^2. Differentiable
      (its gradient reaches the logits only); a model adds it to its loss with its own weight.
    router_logit_max: scalar, the largest |logit| over non-padding tokens (what the z-loss keeps small).
    expert_tokens: E float32, non-padding tokens whose first choice is e, summed over groups (a language's
      routing profile: tools/expert_map.py adds these up per language).
    token_index: G`E`C int32 or None. Expert-choice only: the token in each (expert, slot), S when empty.
    token_gate: G`E`C float32 or None. Expert-choice only: the gate of that token, 0 when empty.
  """
  expert_index: tf.Tensor
  position: tf.Tensor
  gate: tf.Tensor
  capacity: int
  num_experts: int
  aux_loss: tf.Tensor
  load: tf.Tensor
  overflow: tf.Tensor
  router_entropy: tf.Tensor
  dropped_fraction: tf.Tensor
  kept_per_token: tf.Tensor
  slot_usage: tf.Tensor
  router_z_loss: tf.Tensor
  router_logit_max: tf.Tensor
  expert_tokens: tf.Tensor
  token_index: typing.Optional[tf.Tensor] = None
  token_gate: typing.Optional[tf.Tensor] = None

  @property
  def kept(self):
    """G`S`K bool: the choice holds a slot and has a non-zero gate."""
    return self.gate > 0

  @property
  def combine(self):
    """G`S`E`C float32: gate of token s at (expert e, slot c), 0 elsewhere. Costs O(G*S*E*C) memory."""
    if self.token_index is not None:
      # Expert-choice: the per-expert form avoids the O(G*S*E*E*C) one-hot over K = E choices.
      group_size = tf.shape(self.gate)[1]
      slot_onehot = tf.one_hot(self.token_index, group_size, dtype=self.token_gate.dtype)  # GECS
      return tf.einsum('GECS,GEC->GSEC', slot_onehot, self.token_gate)
    expert_onehot = tf.one_hot(self.expert_index, self.num_experts, dtype=self.gate.dtype)  # GSKE
    # one_hot of the sentinel position C is all zeros, so dropped choices vanish here.
    slot_onehot = tf.one_hot(self.position, self.capacity, dtype=self.gate.dtype)  # GSKC
    return tf.einsum('GSKE,GSKC->GSEC', expert_onehot * self.gate[..., tf.newaxis], slot_onehot)

  @property
  def dispatch(self):
    """G`S`E`C float32 0/1 mask, `combine > 0` (float so it feeds an einsum with activations directly)."""
    return tf.cast(self.combine > 0, tf.float32)

  def summaries(self):
    """Dict name -> scalar float32 Tensor, everything a trainer logs per MoE layer."""
    out = {
        'aux_loss': self.aux_loss,
        'router_entropy': self.router_entropy,
        'dropped_fraction': self.dropped_fraction,
        'kept_per_token': self.kept_per_token,
        'slot_usage': self.slot_usage,
        'router_z_loss': self.router_z_loss,
        'router_logit_max': self.router_logit_max,
        # 1.0 = perfectly balanced first choices; E = every token prefers one expert.
        'load_max_over_mean': tf.reduce_max(self.load) * float(self.num_experts),
    }
    for k in range(self.overflow.shape[0]):
      out[f'overflow_{k + 1}'] = self.overflow[k]
    return out


def top2_gating(logits, *, capacity, paddings=None, second_expert_policy='all', seed=None, normalize=True,
                eps=1e-9):
  """GShard top-2 gating (paper's Algorithm 1), K = 2.

  Expert 1 = argmax of the softmax; expert 2 = argmax with expert 1 excluded (or sampled, see below). Gates
  are normalised g1/(g1+g2+eps), g2/(g1+g2+eps) before the capacity check. First choices take slots in token
  order (exclusive cumsum over S); second choices queue behind all first choices of the group. A choice whose
  slot is >= C is dropped. Argmax ties go to the lower expert index.

  Second-expert policies:
    'all': always try expert 2.
    'random': try expert 2 only if 2*g2 > u, u = tf.random.stateless_uniform([G, S], seed, alg='philox'),
      where g2 is the combine gate (normalised when normalize=True, as in Lingvo).
    'sampling': expert 2 ~ softmax(logits) with expert 1 removed, by Gumbel-max: argmax over e != e1 of
      logits + -log(-log(u)), u = tf.random.stateless_uniform([G, S, E], seed, minval=tiny, maxval=1.0,
      alg='philox') with tiny = float32 smallest normal (keeps the noise finite). The gate is the sampled
      expert's softmax prob.
    Philox is pinned so that eager, tf.function and XLA draw the same numbers from the same seed.

  Args:
    logits: G`S`E float Tensor (E static), router logits; the softmax is computed in float32.
    capacity: C, python int >= 1 (see expert_capacity).
    paddings: optional G`S float Tensor, 1.0 = padding. Padding tokens are routed nowhere and excluded from
      the aux loss, the statistics and capacity counting.
    second_expert_policy: one of 'all', 'random', 'sampling'.
    seed: shape-[2] int Tensor for the stateless RNG; required by 'random' and 'sampling'.
    normalize: if False, gates stay raw softmax probabilities.
    eps: guards the normalisation denominator.

  Returns:
    GatingResult with K = 2. aux_loss = E^2 * mean_e(f_e * m_e) per group, averaged over the groups holding
    any non-padding token, where f_e is the fraction of non-padding tokens whose first choice is e (before
    capacity drops) and m_e the mean softmax prob of e over non-padding tokens.
  """
  if second_expert_policy not in SECOND_EXPERT_POLICIES:
    raise ValueError(f'second_expert_policy must be one of {SECOND_EXPERT_POLICIES}, '
                     f'got {second_expert_policy!r}')
  if second_expert_policy in ('random', 'sampling') and seed is None:
    raise ValueError(f'second_expert_policy={second_expert_policy!r} needs seed, a shape-[2] int Tensor')
  logits, nonpad, num_experts = _prepare(logits, paddings, capacity)
  if num_experts < 2:
    raise ValueError(f'top2_gating needs at least 2 experts, got E={num_experts}')

  probs = tf.nn.softmax(logits, axis=-1)  # GSE
  index_1 = _argmax(probs)  # GS
  mask_1 = _one_hot_bool(index_1, num_experts)  # GSE
  if second_expert_policy == 'sampling':
    uniform = tf.random.stateless_uniform(
        tf.shape(logits), seed, minval=_TINY, maxval=1.0, dtype=tf.float32, alg=_RNG_ALG)
    gumbel = -tf.math.log(-tf.math.log(uniform))
    scores_2 = tf.where(mask_1, tf.constant(-float('inf'), tf.float32), logits + gumbel)
  else:
    # -1 is below every probability, so expert 1 is never picked twice even if all others underflow to 0.
    scores_2 = tf.where(mask_1, tf.constant(-1.0, tf.float32), probs)
  index_2 = _argmax(scores_2)  # GS
  gate_1 = _take(probs, index_1)
  gate_2 = _take(probs, index_2)
  if normalize:
    denom = gate_1 + gate_2 + eps
    gate_1, gate_2 = gate_1 / denom, gate_2 / denom

  tried_2 = nonpad
  if second_expert_policy == 'random':
    uniform = tf.random.stateless_uniform(tf.shape(gate_2), seed, dtype=tf.float32, alg=_RNG_ALG)
    tried_2 = tf.logical_and(tried_2, 2.0 * gate_2 > uniform)

  # Slot = number of earlier claims on the same expert in this group: exclusive cumsum over S of the masks.
  claim_1 = tf.cast(tf.logical_and(mask_1, nonpad[..., tf.newaxis]), tf.int32)  # GSE
  claim_2 = tf.one_hot(index_2, num_experts, dtype=tf.int32) * tf.cast(tried_2, tf.int32)[..., tf.newaxis]
  position_1 = tf.reduce_sum(_exclusive_cumsum_s(claim_1) * claim_1, axis=-1)  # GS
  first_count = tf.reduce_sum(claim_1, axis=1, keepdims=True)  # G1E, counted before capacity drops
  position_2 = tf.reduce_sum((_exclusive_cumsum_s(claim_2) + first_count) * claim_2, axis=-1)

  return _finish(
      logits, probs, nonpad, claim_1, capacity,
      expert_index=tf.stack([index_1, index_2], axis=-1),
      position=tf.stack([position_1, position_2], axis=-1),
      gate=tf.stack([gate_1, gate_2], axis=-1),
      tried=tf.stack([nonpad, tried_2], axis=-1))


def top1_gating(logits, *, capacity, paddings=None):
  """Switch Transformer top-1 gating, K = 1: the argmax expert, gate = its raw softmax prob.

  Args:
    logits: G`S`E float Tensor (E static), router logits; softmax in float32.
    capacity: C, python int >= 1.
    paddings: optional G`S float Tensor, 1.0 = padding (routed nowhere, excluded from statistics).

  Returns:
    GatingResult with K = 1. aux_loss = E * sum_e f_e * P_e (f_e fraction of non-padding tokens routed to e
    before capacity drops, P_e mean softmax prob), per group, averaged over groups; uniform logits give 1.
  """
  logits, nonpad, num_experts = _prepare(logits, paddings, capacity)
  probs = tf.nn.softmax(logits, axis=-1)
  index_1 = _argmax(probs)
  claim_1 = tf.one_hot(index_1, num_experts, dtype=tf.int32) * tf.cast(nonpad, tf.int32)[..., tf.newaxis]
  position_1 = tf.reduce_sum(_exclusive_cumsum_s(claim_1) * claim_1, axis=-1)
  return _finish(
      logits, probs, nonpad, claim_1, capacity,
      expert_index=index_1[..., tf.newaxis],
      position=position_1[..., tf.newaxis],
      gate=_take(probs, index_1)[..., tf.newaxis],
      tried=nonpad[..., tf.newaxis])


def expert_choice_gating(logits, *, capacity, paddings=None):
  """Expert-choice routing (Zhou et al. 2022): each expert takes the C tokens of the group it scores best.

  Scores are the softmax over experts; the gate of a taken token is its score. Ties go to the lower token
  index. A token may be taken by several experts or by none. There is no aux loss (aux_loss = 0): balance is
  built in.

  Representation: the per-expert form `token_index`/`token_gate` G`E`C is the natural one (a gather of G*E*C
  rows dispatches). The per-token form has K = E choices, choice k being expert k (position = slot in expert
  k, or C if expert k did not take the token): O(G*S*E) integers, but an index kernel that loops over K moves
  G*S*E rows instead of G*E*C, so kernels should prefer token_index.

  Args:
    logits: G`S`E float Tensor (E static), router logits; softmax in float32.
    capacity: C, python int >= 1. If C > S, slots S..C-1 stay empty.
    paddings: optional G`S float Tensor, 1.0 = padding (never taken, excluded from statistics).

  Returns:
    GatingResult with K = E and token_index/token_gate set; overflow has one entry (see GatingResult).
  """
  logits, nonpad, num_experts = _prepare(logits, paddings, capacity)
  probs = tf.nn.softmax(logits, axis=-1)  # GSE
  # -1 ranks padding behind every real token (probabilities are >= 0).
  scores = tf.transpose(tf.where(nonpad[..., tf.newaxis], probs, -1.0), [0, 2, 1])  # GES
  order = tf.argsort(scores, axis=-1, direction='DESCENDING', stable=True)  # GES: token at each rank
  rank = tf.argsort(order, axis=-1, stable=True)  # GES: inverse permutation, rank of each token

  # Per-token form, K = E: choice k is expert k, its position the token's rank in expert k.
  position = tf.transpose(rank, [0, 2, 1])  # GSE
  taken = tf.logical_and(position < capacity, nonpad[..., tf.newaxis])
  expert_index = tf.broadcast_to(tf.range(num_experts, dtype=tf.int32), tf.shape(probs))

  # Per-expert form: the first C ranks, padded with empty slots (-1 here) when C > S.
  top = order[:, :, :capacity]  # GE min(C, S)
  top = tf.pad(top, [[0, 0], [0, 0], [0, capacity - tf.shape(top)[2]]], constant_values=-1)  # GEC
  safe_top = tf.maximum(top, 0)
  top_gate = tf.gather(tf.transpose(probs, [0, 2, 1]), safe_top, batch_dims=2)  # GEC
  top_valid = tf.logical_and(top >= 0, tf.gather(nonpad, safe_top, batch_dims=1))
  top_valid = tf.logical_and(top_valid, top_gate > 0)  # same gate-underflow rule as the per-token form
  token_index = tf.where(top_valid, top, tf.shape(logits)[1])
  token_gate = tf.where(top_valid, top_gate, 0.0)

  first = _argmax(probs)  # GS
  claim_1 = tf.one_hot(first, num_experts, dtype=tf.int32) * tf.cast(nonpad, tf.int32)[..., tf.newaxis]
  # Overflow here means: the token's favourite expert did not take it.
  favourite_taken = tf.logical_and(_take_bool(taken, first), _take(probs, first) > 0)
  missed = tf.cast(tf.logical_and(nonpad, tf.logical_not(favourite_taken)), tf.float32)
  overflow = tf.reduce_sum(missed) / tf.maximum(tf.reduce_sum(tf.cast(nonpad, tf.float32)), 1.0)
  return _finish(
      logits, probs, nonpad, claim_1, capacity,
      expert_index=expert_index, position=position, gate=probs, tried=taken,
      overflow=overflow[tf.newaxis], with_aux_loss=False, token_index=token_index, token_gate=token_gate)


_GATING_FNS = {
    'top2': top2_gating,
    'top1': top1_gating,
    'expert_choice': expert_choice_gating,
}
GATINGS = tuple(_GATING_FNS)


def gating(name, logits, **kwargs):
  """Dispatches to top2_gating ('top2'), top1_gating ('top1') or expert_choice_gating ('expert_choice')."""
  if name not in _GATING_FNS:
    raise ValueError(f'unknown gating {name!r}; expected one of {sorted(_GATING_FNS)}')
  return _GATING_FNS[name](logits, **kwargs)


# ---------------------------------------------------------------------------------------------------------
# Helpers.


def _check_int(name, value, minimum):
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
    raise ValueError(f'{name} must be a python int >= {minimum}, got {value!r}')


def _prepare(logits, paddings, capacity):
  """Validates inputs; returns (G`S`E float32 logits, G`S bool non-padding mask, python int E)."""
  _check_int('capacity', capacity, 1)
  logits = tf.convert_to_tensor(logits)
  if logits.shape.rank != 3:
    raise ValueError(f'logits must be a G`S`E Tensor (rank 3), got shape {logits.shape}')
  if not logits.dtype.is_floating:
    raise ValueError(f'logits must be floating point, got {logits.dtype.name}')
  num_experts = logits.shape[2]
  if num_experts is None:
    raise ValueError(f'logits needs a static expert dimension E, got shape {logits.shape}')
  logits = tf.cast(logits, tf.float32)
  if paddings is None:
    nonpad = tf.ones(tf.shape(logits)[:2], dtype=tf.bool)
  else:
    paddings = tf.convert_to_tensor(paddings)
    if not paddings.shape.is_compatible_with(logits.shape[:2]):
      raise ValueError(f'paddings must be a G`S Tensor matching logits {logits.shape}, got {paddings.shape}')
    nonpad = tf.cast(paddings, tf.float32) < 0.5
  return logits, nonpad, int(num_experts)


def _argmax(values):
  """G`S`E -> G`S int32 index of the maximum over E, the lowest index on ties (as tf.argmax).

  A max and a min-index reduction: XLA lowers a CPU argmax to a variadic reduce, slower than these two plain
  reductions (docs/guides/design_measurements.md). Unlike tf.argmax, a row holding a NaN gives E-1 (NaN
  equals no maximum).
  """
  num = values.shape[-1]
  top = tf.reduce_max(values, axis=-1, keepdims=True)
  index = tf.reduce_min(tf.where(values == top, tf.range(num, dtype=tf.int32), num), axis=-1)
  return tf.minimum(index, num - 1)  # a NaN row matches nothing: keep its index in range


_CUMSUM_BLOCK = 16


def _exclusive_cumsum_s(claims):
  """G`S`E int32 -> exclusive cumsum over S, as two small triangular matmuls (within and across blocks of
  16 tokens) in float32, exact for counts below 2^24. XLA's CPU backend lowers tf.cumsum to a reduce-window;
  it and the variadic-reduce argmax were most of the gating cost that grows with E
  (docs/guides/design_measurements.md).
  """
  s = claims.shape[1]
  if s is None or s < 2 * _CUMSUM_BLOCK:
    return tf.cumsum(claims, axis=1, exclusive=True)
  b = _CUMSUM_BLOCK
  padded = -(-s // b) * b
  x = tf.cast(claims, tf.float32)
  if padded != s:  # trailing zero claims change no earlier count
    x = tf.pad(x, [[0, 0], [0, padded - s], [0, 0]])
  shape = tf.shape(x)
  blocks = tf.reshape(x, [shape[0], padded // b, b, shape[2]])  # G,nb,b,E
  within = tf.einsum('ts,gnse->gnte', tf.constant(np.tril(np.ones((b, b), np.float32), -1)), blocks)
  before = tf.einsum('mn,gne->gme', tf.constant(np.tril(np.ones((padded // b,) * 2, np.float32), -1)),
                     tf.reduce_sum(blocks, axis=2))
  out = tf.reshape(within + before[:, :, tf.newaxis, :], shape)[:, :s]
  return tf.cast(out, claims.dtype)


def _one_hot_bool(index, depth):
  """index: G`S int32 -> G`S`depth bool one-hot."""
  return tf.equal(index[..., tf.newaxis], tf.range(depth, dtype=index.dtype))


def _take_bool(values, index):
  """values: G`S`E bool, index: G`S int32 -> G`S bool, values[g, s, index[g, s]]."""
  return tf.reduce_any(tf.logical_and(values, _one_hot_bool(index, values.shape[-1])), axis=-1)


def _take(values, index):
  """values: G`S`E, index: G`S int32 -> G`S, values[g, s, index[g, s]] (differentiable w.r.t. values)."""
  return tf.reduce_sum(values * tf.one_hot(index, values.shape[-1], dtype=values.dtype), axis=-1)


def _finish(logits, probs, nonpad, claim_1, capacity, *, expert_index, position, gate, tried, overflow=None,
            with_aux_loss=True, token_index=None, token_gate=None):
  """Applies capacity, the kept/dropped convention and computes the statistics.

  Args:
    logits: G`S`E float32 router logits.
    probs: G`S`E softmax of logits.
    nonpad: G`S bool.
    claim_1: G`S`E int32 one-hot of each non-padding token's first choice (zeros for padding).
    capacity: C.
    expert_index: G`S`K int32.
    position: G`S`K int32 slot, before the capacity check (meaningless where not tried).
    gate: G`S`K float32 gate, before the capacity check.
    tried: G`S`K bool, choices that asked for a slot (False for padding and untried second choices).
    overflow: K' float32 to report instead of the capacity-drop fraction per choice computed here.
    with_aux_loss: False reports aux_loss = 0 (expert-choice is balanced by construction).
    token_index, token_gate: G`E`C per-expert form, passed through.

  Returns:
    GatingResult.
  """
  num_experts = probs.shape[-1]
  fits = position < capacity
  kept = tf.logical_and(tf.logical_and(tried, fits), gate > 0)
  gate = tf.where(kept, gate, 0.0)
  position = tf.where(kept, position, capacity)

  nonpad_f = tf.cast(nonpad, tf.float32)
  num_tokens = tf.reduce_sum(nonpad_f)
  safe_tokens = tf.maximum(num_tokens, 1.0)
  if overflow is None:
    over = tf.cast(tf.logical_and(tried, tf.logical_not(fits)), tf.float32)  # GSK
    overflow = tf.reduce_sum(over, axis=[0, 1]) / tf.maximum(
        tf.reduce_sum(tf.cast(tried, tf.float32), axis=[0, 1]), 1.0)
  kept_f = tf.cast(kept, tf.float32)
  num_kept = tf.reduce_sum(kept_f, axis=-1)  # GS
  dropped_fraction = tf.reduce_sum(tf.cast(num_kept == 0, tf.float32) * nonpad_f) / safe_tokens
  kept_per_token = tf.reduce_sum(num_kept) / safe_tokens
  num_slots = tf.cast(tf.shape(probs)[0] * num_experts * capacity, tf.float32)
  slot_usage = tf.reduce_sum(num_kept) / num_slots

  log_probs = tf.nn.log_softmax(logits, axis=-1)
  entropy = -tf.reduce_sum(probs * log_probs, axis=-1)  # GS
  router_entropy = tf.reduce_sum(entropy * nonpad_f) / safe_tokens
  log_z = tf.reduce_logsumexp(logits, axis=-1)  # GS
  router_z_loss = tf.reduce_sum(tf.square(log_z) * nonpad_f) / safe_tokens
  router_logit_max = tf.reduce_max(tf.where(nonpad[..., tf.newaxis], tf.abs(logits), 0.0))

  # Load balancing, per group over its non-padding tokens, then averaged over the groups holding any.
  group_tokens = tf.reduce_sum(nonpad_f, axis=1)  # G
  denom = tf.maximum(group_tokens, 1.0)[:, tf.newaxis]
  fraction = tf.cast(tf.reduce_sum(claim_1, axis=1), tf.float32) / denom  # GE, no gradient (argmax)
  mean_prob = tf.reduce_sum(probs * nonpad_f[..., tf.newaxis], axis=1) / denom  # GE
  group_valid = tf.cast(group_tokens > 0, tf.float32)
  num_groups = tf.maximum(tf.reduce_sum(group_valid), 1.0)
  aux_per_group = tf.reduce_mean(fraction * mean_prob, axis=-1) * float(num_experts * num_experts)
  aux_loss = tf.reduce_sum(aux_per_group * group_valid) / num_groups
  if not with_aux_loss:
    aux_loss = tf.zeros([], tf.float32)
  load = tf.reduce_sum(fraction * group_valid[:, tf.newaxis], axis=0) / num_groups

  return GatingResult(
      expert_index=expert_index, position=position, gate=gate, capacity=capacity,
      num_experts=num_experts, aux_loss=aux_loss, load=load, overflow=overflow,
      router_entropy=router_entropy, dropped_fraction=dropped_fraction, kept_per_token=kept_per_token,
      slot_usage=slot_usage, router_z_loss=router_z_loss,
      router_logit_max=tf.stop_gradient(router_logit_max),
      expert_tokens=tf.cast(tf.reduce_sum(claim_1, axis=[0, 1]), tf.float32), token_index=token_index,
      token_gate=token_gate)
