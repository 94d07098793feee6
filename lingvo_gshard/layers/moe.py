"""The GShard Mixture-of-Experts feed-forward layer, as a pure function.

Dimensions cheat sheet:
  G: number of groups (routed independently)   S: tokens per group   M: model dim   H: expert hidden dim
  E: number of experts                          C: capacity per expert per group   K: choices per token

    logits[G,S,E] = x · w_gate                     (float32)
    routing       = gating(logits)                 (top-2 by default; `gating.py`)
    expert_in     = dispatch(x)             [E,G,C,M]   <- the G -> E reshard (AllToAll) happens here
    hidden        = act(expert_in · wi[e])  [E,G,C,H]
    expert_out    = hidden · wo[e]          [E,G,C,M]
    y             = combine(expert_out)     [G,S,M]     <- and back, E -> G

Sharding: the function names the logical axes of every large activation through `annotate(tensor,
logical_axes)` (identity by default), e.g. `annotate=sharding.shard`. Logical axis names: group, length,
model, expert, capacity, hidden.
"""
from typing import Callable, Dict, Optional, Tuple

import tensorflow as tf

from lingvo_gshard.layers import dispatch as dispatch_lib
from lingvo_gshard.layers import gating as gating_lib

DISPATCH_MODES = ('index', 'einsum')


def _identity(t, logical_axes):
  del logical_axes
  return t


def _check_shapes(x, w_gate, wi, wo):
  if x.shape.rank != 3 or x.shape[-1] is None:
    raise ValueError(f'x must be [G,S,M] with a static M, got shape {x.shape}')
  m = x.shape[-1]
  if w_gate.shape.rank != 2 or w_gate.shape[0] != m or w_gate.shape[1] is None:
    raise ValueError(f'w_gate must be [M,E] with M={m} and a static E, got shape {w_gate.shape}')
  e = w_gate.shape[1]
  if wi.shape.rank != 3 or wi.shape[0] != e or wi.shape[1] != m:
    raise ValueError(f'wi must be [E,M,H] = [{e},{m},H], got shape {wi.shape}')
  h = wi.shape[2]
  if wo.shape.rank != 3 or wo.shape.as_list() != [e, h, m]:
    raise ValueError(f'wo must be [E,H,M] = [{e},{h},{m}], got shape {wo.shape}')


def route(x, w_gate, *, capacity: int, gating: str = 'top2', second_expert_policy: str = 'all',
          paddings=None, seed=None) -> gating_lib.GatingResult:
  """Router: float32 logits x·w_gate and the gating decision.

  Args:
    x: [G,S,M] tokens.
    w_gate: [M,E] router weights.
    capacity: C.
    gating: 'top2', 'top1' or 'expert_choice'.
    second_expert_policy: top-2 only: 'all', 'random' or 'sampling'.
    paddings: optional [G,S], 1.0 marks padding (routed nowhere).
    seed: shape-[2] int tensor, for the 'random' and 'sampling' policies.

  Returns:
    The GatingResult.
  """
  # Routing decisions are discontinuous in the logits; bfloat16 logits flip near-ties, so compute in float32.
  logits = tf.einsum('GSM,ME->GSE', tf.cast(x, tf.float32), tf.cast(w_gate, tf.float32))
  kwargs = dict(capacity=capacity, paddings=paddings)
  if gating == 'top2':
    kwargs.update(second_expert_policy=second_expert_policy, seed=seed)
  elif second_expert_policy != 'all':
    raise ValueError(f'second_expert_policy={second_expert_policy!r} only applies to top2 gating, '
                     f'not {gating!r}')
  return gating_lib.gating(gating, logits, **kwargs)


def moe_ffn(x, w_gate, wi, wo, *, capacity_factor: float = 2.0, dispatch: str = 'index', gating: str = 'top2',
            second_expert_policy: str = 'all', paddings=None, seed=None,
            activation: Callable[[tf.Tensor], tf.Tensor] = tf.nn.relu, min_capacity: int = 4,
            capacity: Optional[int] = None,
            annotate: Optional[Callable] = None) -> Tuple[tf.Tensor, tf.Tensor, Dict[str, tf.Tensor]]:
  """Mixture-of-Experts FFN: each token is processed by its gated experts and the outputs are combined.

  Args:
    x: [G,S,M] tokens (float32 or bfloat16); groups are routed independently.
    w_gate: [M,E] router weights.
    wi: [E,M,H] first expert matmul.
    wo: [E,H,M] second expert matmul.
    capacity_factor: C = int(S·cf/E), at least min_capacity, rounded up to a multiple of 4; cf=2 is the
      paper's 2S/E.
    dispatch: 'index' (gathers, O(G·S·K·M)) or 'einsum' (the paper's one-hot einsums, O(G·S·E·C·M)); same
      values and gradients.
    gating: 'top2', 'top1' or 'expert_choice' (see gating.py).
    second_expert_policy: top-2 only: 'all', 'random' or 'sampling'.
    paddings: optional [G,S], 1.0 marks padding; padding tokens get a zero output.
    seed: shape-[2] int tensor, for the 'random' and 'sampling' policies.
    activation: expert nonlinearity.
    min_capacity: lower bound of C before rounding.
    capacity: if given, C directly (overrides capacity_factor and min_capacity), e.g. for evaluation.
    annotate: `annotate(tensor, logical_axes) -> tensor`, e.g. `sharding.shard`; identity if None.

  Returns:
    (y, aux_loss, stats): y [G,S,M] in x's dtype, zero for tokens whose choices were all dropped; aux_loss
    the scalar load-balancing loss; stats a dict of float32 tensors:
      load [E]: fraction of tokens whose first choice is e (before capacity drops);
      load_max, load_mean, load_max_over_mean: of `load` (load_max_over_mean is 1 when balanced);
      expert_fill [E]: mean fraction of expert e's C slots used per group (after drops);
      overflow_1, overflow_2 (top-2): fraction of first / second choices dropped for lack of capacity;
      router_entropy, dropped_fraction (tokens routed nowhere), kept_per_token, slot_usage, aux_loss.
  """
  annotate = annotate or _identity
  x = tf.convert_to_tensor(x)
  w_gate, wi, wo = (tf.convert_to_tensor(w) for w in (w_gate, wi, wo))
  _check_shapes(x, w_gate, wi, wo)
  if dispatch not in DISPATCH_MODES:
    raise ValueError(f'dispatch must be one of {DISPATCH_MODES}, got {dispatch!r}')
  group_size, num_experts = x.shape[1], w_gate.shape[1]
  if capacity is None:
    if group_size is None:
      raise ValueError(f'x needs a static S to derive the capacity, got shape {x.shape}')
    capacity = gating_lib.expert_capacity(group_size, num_experts, capacity_factor, min_capacity)

  x = annotate(x, ('group', 'length', 'model'))
  routing = route(x, w_gate, capacity=capacity, gating=gating, second_expert_policy=second_expert_policy,
                  paddings=paddings, seed=seed)
  gate = tf.cast(routing.gate, x.dtype)
  if dispatch == 'index':
    plan = dispatch_lib.make_plan(routing.expert_index, routing.position, routing.gate, num_experts, capacity)
    expert_in = dispatch_lib.index_dispatch(x, plan, annotate)
    slot_used = tf.cast(plan.filled, tf.float32)  # [G,E,C]
  else:
    combine = routing.combine  # float32, so that no small gate rounds to 0 before the mask is taken
    slot_used = tf.cast(combine > 0, tf.float32)  # [G,S,E,C]
    expert_in = dispatch_lib.einsum_dispatch(x, tf.cast(slot_used, x.dtype))
    combine = tf.cast(combine, x.dtype)
    slot_used = tf.reduce_sum(slot_used, axis=1)  # [G,E,C]
  expert_in = annotate(expert_in, ('expert', 'group', 'capacity', 'model'))

  hidden = activation(tf.einsum('EGCM,EMH->EGCH', expert_in, tf.cast(wi, x.dtype)))
  hidden = annotate(hidden, ('expert', 'group', 'capacity', 'hidden'))
  expert_out = tf.einsum('EGCH,EHM->EGCM', hidden, tf.cast(wo, x.dtype))
  expert_out = annotate(expert_out, ('expert', 'group', 'capacity', 'model'))

  if dispatch == 'index':
    y = dispatch_lib.index_combine(expert_out, gate, plan, annotate)
  else:
    y = dispatch_lib.einsum_combine(expert_out, combine)
  y = annotate(y, ('group', 'length', 'model'))
  return y, routing.aux_loss, _stats(routing, slot_used)


def _stats(routing: gating_lib.GatingResult, slot_used) -> Dict[str, tf.Tensor]:
  """Everything a trainer logs per MoE layer (see moe_ffn). slot_used: [G,E,C] 1.0 where a slot is filled."""
  stats = dict(routing.summaries())
  stats.update(
      load=routing.load,
      load_max=tf.reduce_max(routing.load),
      load_mean=tf.reduce_mean(routing.load),
      load_max_over_mean=tf.reduce_max(routing.load) / tf.maximum(tf.reduce_mean(routing.load), 1e-9),
      expert_fill=tf.reduce_mean(slot_used, axis=[0, 2]),
  )
  return stats
