"""Moving tokens into expert buffers and back: the paper's one-hot einsums and a gather-only index path.

Dimensions cheat sheet:
  G: number of groups         S: tokens per group          K: choices per token (2 for top-2)
  E: number of experts        C: capacity per expert       M: model dim

Routing comes per choice, in the index form of `gating.GatingResult`: `expert_index[G,S,K]` int32,
`position[G,S,K]` int32 (slot in the expert's buffer of this group) and `gate[G,S,K]` float, where gate == 0
marks a dropped choice (over capacity, padding, or not taken). Both paths compute the same function and the
same gradients:

  expert_in[E,G,C,M] = x[g, s]      for the choice (g, s, k) that holds slot (e, g, c); 0 for an empty slot
  y[G,S,M]           = sum_k gate[g,s,k] * expert_out[e_k, g, pos_k]          (dropped choices add nothing)

einsum path (the paper's): `einsum('GSEC,GSM->EGCM', dispatch, x)` and `einsum('GSEC,EGCM->GSM', combine,
expert_out)` on the dense one-hot `combine[G,S,E,C]`: O(G·S·E·C·M), as much as the experts at small H.

index path: O(G·S·K·M) data movement and no [G,S,E,C] tensor. `make_plan` inverts the routing once: for each
slot it finds the choice holding it, by sorting each group's slot keys e·C + pos and binary-searching every
slot's key (integer work on [G,S·K] and [G,E·C], no M). Dispatch is then one row gather from x and combine one
row gather from the expert output per (token, choice), weighted by gate. Their gradients are gathers too (the
transpose of "slot reads its token" is "token reads its slots"), written with `tf.custom_gradient`, so neither
direction emits a scatter: autodiff's scatter-add gradients are slower on CPU
(docs/guides/design_measurements.md).

All gathers are within a group (`batch_dims=1` over G), so with G split across devices they stay local; the
only cross-device movement is the [G,E,C,M] <-> [E,G,C,M] transpose, which `annotate` turns into the
paper's AllToAll.
"""
from typing import Callable, NamedTuple, Optional, Sequence

import tensorflow as tf

Annotate = Callable[[tf.Tensor, Sequence[Optional[str]]], tf.Tensor]


def _identity(t, logical_axes):
  del logical_axes
  return t


class DispatchPlan(NamedTuple):
  """Both directions of the token <-> slot map of one routing decision, local to each group.

  Slot index within a group: e·C + c. Choice index within a group: s·K + k.

  Attributes:
    token_slot: [G,S,K] int32, slot of each choice; 0 (a valid row, weighted by 0) where dropped.
    kept: [G,S,K] bool, whether the choice holds a slot.
    slot_choice: [G,E,C] int32, choice holding each slot; 0 where the slot is empty.
    filled: [G,E,C] bool, whether the slot holds a choice.
  """
  token_slot: tf.Tensor
  kept: tf.Tensor
  slot_choice: tf.Tensor
  filled: tf.Tensor

  @property
  def slot_token(self) -> tf.Tensor:
    """[G,E,C] int32, the token s holding each slot; 0 where empty."""
    return self.slot_choice // self.token_slot.shape[-1]


def _check_routing(expert_index, position, gate):
  """Converts the routing tensors and checks they share a static [G,S,K] shape."""
  expert_index, position, gate = (tf.convert_to_tensor(t) for t in (expert_index, position, gate))
  for name, t in (('expert_index', expert_index), ('position', position), ('gate', gate)):
    if t.shape.rank != 3 or None in t.shape.as_list():
      raise ValueError(f'{name} must be a [G,S,K] tensor with a static shape, got {t.shape}')
  if not expert_index.shape == position.shape == gate.shape:
    raise ValueError(f'routing shapes differ: expert_index {expert_index.shape}, position {position.shape}, '
                     f'gate {gate.shape}')
  return expert_index, position, gate


def _lower_bound(sorted_keys, queries):
  """Per row, the first index i with sorted_keys[i] >= query, or N if there is none.

  A vectorised binary search, ceil(log2(N + 1)) rounds of [G,Q] gathers: O(Q·log N). XLA lowers
  tf.searchsorted to an O(N·Q) compare-and-count instead (docs/guides/design_measurements.md).

  Args:
    sorted_keys: [G,N] int32, ascending along N.
    queries: [G,Q] int32.

  Returns:
    [G,Q] int32 in [0, N].
  """
  n = sorted_keys.shape[-1]
  lo = tf.zeros_like(queries)
  hi = tf.fill(tf.shape(queries), tf.constant(n, tf.int32))
  for _ in range(int(n).bit_length()):
    mid = (lo + hi) // 2
    value = tf.gather(sorted_keys, tf.minimum(mid, n - 1), batch_dims=1)
    active = lo < hi
    go_right = active & (value < queries)
    lo, hi = tf.where(go_right, mid + 1, lo), tf.where(active & ~go_right, mid, hi)
  return lo


def make_plan(expert_index, position, gate, num_experts: int, capacity: int) -> DispatchPlan:
  """Inverts a routing decision into a DispatchPlan. Integer work only; nothing here needs a gradient.

  Args:
    expert_index: [G,S,K] int expert of each choice.
    position: [G,S,K] int slot of each choice in its expert's buffer; only kept choices need be valid.
    gate: [G,S,K] float gate of each choice; 0 marks a dropped choice.
    num_experts: E.
    capacity: C, slots per expert per group.

  Returns:
    The DispatchPlan. A choice is kept iff gate > 0 and (expert, position) lies in [0,E) x [0,C); kept choices
    of a group must hold distinct slots (gating guarantees it; two claims on one slot would both read it but
    only one of them would be dispatched into it).
  """
  expert_index, position, gate = _check_routing(expert_index, position, gate)
  g, s, k = expert_index.shape.as_list()
  e, c = int(num_experts), int(capacity)
  expert_index = tf.cast(expert_index, tf.int32)
  position = tf.cast(position, tf.int32)
  kept = (gate > 0) & (expert_index >= 0) & (expert_index < e) & (position >= 0) & (position < c)
  token_slot = tf.where(kept, expert_index * c + position, 0)

  # Slot -> choice: sort each group's slot keys (dropped choices get key E·C and sort last), then find each
  # slot's key. A stable sort keeps the lowest choice first if a caller ever breaks the distinct-slot rule.
  key = tf.reshape(tf.where(kept, token_slot, e * c), [g, s * k])
  order = tf.argsort(key, axis=-1, stable=True)
  sorted_key = tf.gather(key, order, batch_dims=1)
  slots = tf.broadcast_to(tf.range(e * c, dtype=tf.int32), [g, e * c])
  found_at = tf.minimum(_lower_bound(sorted_key, slots), s * k - 1)
  filled = tf.gather(sorted_key, found_at, batch_dims=1) == slots
  slot_choice = tf.where(filled, tf.gather(order, found_at, batch_dims=1), 0)
  return DispatchPlan(token_slot=token_slot, kept=kept, slot_choice=tf.reshape(slot_choice, [g, e, c]),
                      filled=tf.reshape(filled, [g, e, c]))


def _slots_to_tokens(buf, plan, annotate):
  """[E,G,C,M] slot rows -> [G,S,K,M], the row of each choice's slot (any row where dropped)."""
  e, g, c, m = buf.shape.as_list()
  buf = annotate(tf.transpose(buf, [1, 0, 2, 3]), ('group', 'expert', 'capacity', 'model'))
  return tf.gather(tf.reshape(buf, [g, e * c, m]), plan.token_slot, batch_dims=1)


def _tokens_to_slots(rows, plan, weight, annotate):
  """[G,S,M] token rows -> [E,G,C,M], each slot's token row times weight[G,E,C] (0 for empty slots)."""
  buf = tf.gather(rows, plan.slot_token, batch_dims=1) * weight[..., tf.newaxis]
  buf = annotate(buf, ('group', 'expert', 'capacity', 'model'))
  return tf.transpose(buf, [1, 0, 2, 3])


def index_dispatch(x, plan: DispatchPlan, annotate: Optional[Annotate] = None):
  """Copies tokens into their expert buffer slots, by gathers in both directions.

  Args:
    x: [G,S,M] tokens.
    plan: the DispatchPlan of the routing.
    annotate: optional `annotate(tensor, logical_axes)` for the group-major [G,E,C,M] intermediates.

  Returns:
    [E,G,C,M] expert inputs; empty slots are 0.
  """
  annotate = annotate or _identity
  x = tf.convert_to_tensor(x)

  @tf.custom_gradient
  def _dispatch(x):
    def _grad(d_expert_in):
      # A token was copied into the slots of its kept choices; it collects their gradients: a gather.
      rows = _slots_to_tokens(d_expert_in, plan, annotate)
      return tf.reduce_sum(tf.where(plan.kept[..., tf.newaxis], rows, tf.zeros_like(rows)), axis=2)

    return _tokens_to_slots(x, plan, tf.cast(plan.filled, x.dtype), annotate), _grad

  return _dispatch(x)


def index_combine(expert_out, gate, plan: DispatchPlan, annotate: Optional[Annotate] = None):
  """Sums each token's expert outputs weighted by gate, by gathers in both directions.

  Args:
    expert_out: [E,G,C,M] expert outputs.
    gate: [G,S,K] gate of each choice (0 where dropped); the result is differentiable in it.
    plan: the DispatchPlan of the routing.
    annotate: optional `annotate(tensor, logical_axes)` for the group-major [G,E,C,M] intermediates.

  Returns:
    [G,S,M], sum over kept choices of gate * expert output.
  """
  annotate = annotate or _identity
  expert_out = tf.convert_to_tensor(expert_out)
  gate = tf.cast(gate, expert_out.dtype)

  @tf.custom_gradient
  def _combine(expert_out, gate):
    weight = tf.where(plan.kept, gate, tf.zeros_like(gate))
    rows = _slots_to_tokens(expert_out, plan, annotate)  # [G,S,K,M]

    def _grad(dy):
      # Slot (e, g, c) fed token s with weight gate[g, s, k]: it reads dy[g, s] back, again a gather.
      g, s, k = weight.shape.as_list()
      slot_gate = tf.gather(tf.reshape(weight, [g, s * k]), plan.slot_choice, batch_dims=1)
      slot_gate = tf.where(plan.filled, slot_gate, tf.zeros_like(slot_gate))
      d_expert_out = _tokens_to_slots(dy, plan, slot_gate, annotate)
      # Multiply + reduce rather than einsum: XLA CPU would make these a dot with G·S batches of [K,M]x[M],
      # each launched as its own matmul; as elementwise work they fuse into the gather.
      d_gate = tf.reduce_sum(rows * dy[:, :, tf.newaxis, :], axis=-1)
      d_gate = tf.where(plan.kept, d_gate, tf.zeros_like(weight))
      return d_expert_out, d_gate

    return tf.reduce_sum(rows * weight[..., tf.newaxis], axis=2), _grad

  return _combine(expert_out, gate)


def combine_tensor(expert_index, position, gate, num_experts: int, capacity: int):
  """The paper's dense combine tensor, from the index form.

  Returns:
    [G,S,E,C] float: gate of each kept choice at (expert, position), 0 elsewhere. The dispatch mask is
    `combine > 0`.
  """
  expert_index, position, gate = _check_routing(expert_index, position, gate)
  kept = (gate > 0) & (position >= 0) & (position < capacity)
  weight = tf.where(kept, gate, tf.zeros_like(gate))
  expert_hot = tf.one_hot(expert_index, num_experts, dtype=gate.dtype)  # [G,S,K,E]
  slot_hot = tf.one_hot(tf.where(kept, position, -1), capacity, dtype=gate.dtype)  # [G,S,K,C]
  return tf.einsum('GSKE,GSKC->GSEC', expert_hot * weight[..., tf.newaxis], slot_hot)


def einsum_dispatch(x, dispatch):
  """The paper's dispatch. x: [G,S,M]; dispatch: [G,S,E,C] 0/1. Returns [E,G,C,M]."""
  x = tf.convert_to_tensor(x)
  return tf.einsum('GSEC,GSM->EGCM', tf.cast(dispatch, x.dtype), x)


def einsum_combine(expert_out, combine):
  """The paper's combine. expert_out: [E,G,C,M]; combine: [G,S,E,C]. Returns [G,S,M]."""
  expert_out = tf.convert_to_tensor(expert_out)
  return tf.einsum('GSEC,EGCM->GSM', tf.cast(combine, expert_out.dtype), expert_out)
