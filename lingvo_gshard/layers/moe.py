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

Why islands: gating and dispatch are hundreds of small ops that only XLA fuses, while the expert matmuls
may run faster outside XLA (oneDNN on CPUs; docs/guides/performance.md). `island=` lets the caller compile
gating + dispatch and combine on their own and leave the matmuls to the step's mode.
"""
from typing import Callable, Dict, Optional, Tuple

import tensorflow as tf

from lingvo_gshard.layers import dispatch as dispatch_lib
from lingvo_gshard.layers import gating as gating_lib

DISPATCH_MODES = ('index', 'einsum')


def _identity(t, logical_axes):
  del logical_axes
  return t


WI_LAYOUTS = ('emh', 'ehm')


def _check_shapes(x, w_gate, wi, wo, wi_layout='emh'):
  if x.shape.rank != 3 or x.shape[-1] is None:
    raise ValueError(f'x must be [G,S,M] with a static M, got shape {x.shape}')
  m = x.shape[-1]
  if w_gate.shape.rank != 2 or w_gate.shape[0] != m or w_gate.shape[1] is None:
    raise ValueError(f'w_gate must be [M,E] with M={m} and a static E, got shape {w_gate.shape}')
  e = w_gate.shape[1]
  if wi_layout == 'ehm':
    if wi.shape.rank != 3 or wi.shape[0] != e or wi.shape[2] != m:
      raise ValueError(f"wi must be [E,H,M] = [{e},H,{m}] with wi_layout='ehm', got shape {wi.shape}")
    h = wi.shape[1]
  elif wi.shape.rank != 3 or wi.shape[0] != e or wi.shape[1] != m:
    raise ValueError(f'wi must be [E,M,H] = [{e},{m},H], got shape {wi.shape}')
  else:
    h = wi.shape[2]
  if wo.shape.rank != 3 or wo.shape.as_list() != [e, h, m]:
    raise ValueError(f'wo must be [E,H,M] = [{e},{h},{m}], got shape {wo.shape}')


def router_logits(x, w_gate):
  """[G,S,E] float32 router logits x·w_gate, from x [G,S,M] and w_gate [M,E]."""
  # Routing decisions are discontinuous in the logits; bfloat16 logits flip near-ties, so compute in float32.
  return tf.einsum('GSM,ME->GSE', tf.cast(x, tf.float32), tf.cast(w_gate, tf.float32))


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
  return _gate(router_logits(x, w_gate), capacity=capacity, gating=gating,
               second_expert_policy=second_expert_policy, paddings=paddings, seed=seed)


def _gate(logits, *, capacity, gating, second_expert_policy, paddings, seed):
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
            capacity: Optional[int] = None, annotate: Optional[Callable] = None,
            island: Optional[Callable[[Callable], Callable]] = None,
            wi_layout: str = 'emh', hidden_dropout: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
            router_input_noise: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
            expert_output_mask: Optional[Callable[[tf.Tensor], tf.Tensor]] = None
            ) -> Tuple[tf.Tensor, tf.Tensor, Dict[str, tf.Tensor]]:
  """Mixture-of-Experts FFN: each token is processed by its gated experts and the outputs are combined.

  Args:
    x: [G,S,M] tokens (float32 or bfloat16); groups are routed independently.
    w_gate: [M,E] router weights.
    wi: [E,M,H] first expert matmul ([E,H,M] with wi_layout='ehm').
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
    island: wraps the gating + dispatch and the combine sub-functions, e.g. `compile_hints.Island` (XLA islands
      where the runtime compiles them) or `runtime.step_runner.CompileIsland` (always); identity if None.
      Islands: the router and expert matmuls stay in the caller's mode. For a caller that
      runs as a graph (`tf.function` without jit_compile) on CPU/GPU: TF's native batched matmuls (oneDNN
      on CPU) beat XLA's on the experts, while gating and dispatch are hundreds of small ops that only XLA
      fuses. Same values and gradients as without, except that the 'random' and 'sampling' policies then
      draw with XLA's Philox, as a jit-compiled step does (TF 2.21's XLA and CPU kernels draw different
      numbers from one run-time seed). In a jit-compiled caller the islands are inlined and change nothing.
      Meant for a traced caller: called eagerly, the islands are traced and compiled again on every call.
    wi_layout: 'emh' (wi is [E,M,H]) or 'ehm' (wi is [E,H,M], wo's layout, used transposed); same values.
      Once the experts outgrow the caches, TF's oneDNN batched matmuls stream an [E,H,M] wi faster, while
      XLA's CPU dots prefer [E,M,H]; while the expert weights fit in the caches the two tie, and TPUs pick
      their own layouts (docs/guides/design_measurements.md).
    hidden_dropout: applied to the experts' hidden activations [E, G·C, H] after `activation` (e.g. dropout
      while training; row g·C + c of expert e is its slot c of group g); identity if None.
    router_input_noise: applied to the router's input [G,S,M] only (the experts see x as it is), e.g.
      Switch Transformer's jitter while training; identity if None.
    expert_output_mask: applied to the experts' outputs [E, G·C, M] before they are combined, e.g. NLLB-200's
      expert output masking (whole slot rows zeroed) while training; identity if None.

  Returns:
    (y, aux_loss, stats): y [G,S,M] in x's dtype, zero for tokens whose choices were all dropped; aux_loss
    the scalar load-balancing loss; stats a dict of float32 tensors:
      load [E]: fraction of tokens whose first choice is e (before capacity drops);
      load_max, load_mean, load_max_over_mean: of `load` (load_max_over_mean is 1 when balanced);
      expert_fill [E]: mean fraction of expert e's C slots used per group (after drops);
      overflow_1, overflow_2 (top-2): fraction of first / second choices dropped for lack of capacity;
      router_entropy, dropped_fraction (tokens routed nowhere), kept_per_token, slot_usage, aux_loss;
      router_z_loss (differentiable, for a model that adds it to its loss), router_logit_max;
      expert_tokens [E]: tokens whose first choice is e (counts, for per-language routing maps).
  """
  annotate = annotate or _identity
  x = tf.convert_to_tensor(x)
  w_gate, wi, wo = (tf.convert_to_tensor(w) for w in (w_gate, wi, wo))
  if wi_layout not in WI_LAYOUTS:
    raise ValueError(f'wi_layout must be one of {WI_LAYOUTS}, got {wi_layout!r}')
  _check_shapes(x, w_gate, wi, wo, wi_layout)
  if dispatch not in DISPATCH_MODES:
    raise ValueError(f'dispatch must be one of {DISPATCH_MODES}, got {dispatch!r}')
  group_size, num_experts = x.shape[1], w_gate.shape[1]
  if capacity is None:
    if group_size is None:
      raise ValueError(f'x needs a static S to derive the capacity, got shape {x.shape}')
    capacity = gating_lib.expert_capacity(group_size, num_experts, capacity_factor, min_capacity)

  def _route_and_dispatch(x, logits, paddings, seed):
    routing = _gate(logits, capacity=capacity, gating=gating, second_expert_policy=second_expert_policy,
                    paddings=paddings, seed=seed)
    if dispatch == 'index':
      plan = dispatch_lib.make_plan(routing.expert_index, routing.position, routing.gate, num_experts,
                                    capacity)
      expert_in = dispatch_lib.index_dispatch(x, plan, annotate)
      slot_used = tf.cast(plan.filled, tf.float32)  # [G,E,C]
      to_combine = (tf.cast(routing.gate, x.dtype), plan)
    else:
      combine = routing.combine  # float32, so that no small gate rounds to 0 before the mask is taken
      slot_used = tf.cast(combine > 0, tf.float32)  # [G,S,E,C]
      expert_in = dispatch_lib.einsum_dispatch(x, tf.cast(slot_used, x.dtype))
      to_combine = (tf.cast(combine, x.dtype),)
      slot_used = tf.reduce_sum(slot_used, axis=1)  # [G,E,C]
    expert_in = annotate(expert_in, ('expert', 'group', 'capacity', 'model'))
    return expert_in, to_combine, routing.aux_loss, _stats(routing, slot_used)

  def _combine(expert_out, to_combine):
    if dispatch == 'index':
      gate, plan = to_combine
      y = dispatch_lib.index_combine(expert_out, gate, plan, annotate)
    else:
      y = dispatch_lib.einsum_combine(expert_out, to_combine[0])
    return annotate(y, ('group', 'length', 'model'))

  if island is not None:
    # Wrapped per call: `annotate` may read state (the current partitioner) that a cached trace would miss.
    _route_and_dispatch, _combine = island(_route_and_dispatch), island(_combine)
  if paddings is not None:
    paddings = tf.convert_to_tensor(paddings)
  x = annotate(x, ('group', 'length', 'model'))
  # The router matmul stays out of the islands, with the expert matmuls: at E=128 it is 3% of the step's
  # FLOPs, and TF's kernels run it faster than XLA's CPU dots (docs/guides/design_measurements.md).
  logits = router_logits(router_input_noise(x) if router_input_noise else x, w_gate)
  expert_in, to_combine, aux_loss, stats = _route_and_dispatch(x, logits, paddings, seed)

  expert_out = _expert_ffn(expert_in, tf.cast(wi, x.dtype), tf.cast(wo, x.dtype), activation, annotate,
                           wi_transposed=wi_layout == 'ehm', hidden_dropout=hidden_dropout,
                           output_mask=expert_output_mask)
  return _combine(expert_out, to_combine), aux_loss, stats


def _expert_ffn(expert_in, wi, wo, activation, annotate, wi_transposed=False, hidden_dropout=None,
                output_mask=None):
  """[E,G,C,M] -> [E,G,C,M]: each expert's FFN on its G·C slots.

  Batched matmuls on [E, G·C, M] rather than einsums on [E,G,C,M]: the reshapes are free (XLA bitcasts,
  TF buffer aliasing; DTensor keeps G's sharding on the merged dim), while TF's einsum gradient for the
  weights contracts two dims (G, C) and copies operands to do so, which made a TF-graph step's experts
  markedly slower with einsums (docs/guides/design_measurements.md). Under XLA both are the same dots.
  """
  num_experts, capacity, model_dim = expert_in.shape[0], expert_in.shape[2], expert_in.shape[3]
  hidden_dim = wo.shape[1]
  hidden = activation(tf.matmul(tf.reshape(expert_in, [num_experts, -1, model_dim]), wi,
                                transpose_b=wi_transposed))
  if hidden_dropout is not None:
    hidden = hidden_dropout(hidden)
  hidden = annotate(tf.reshape(hidden, [num_experts, -1, capacity, hidden_dim]),
                    ('expert', 'group', 'capacity', 'hidden'))
  expert_out = tf.matmul(tf.reshape(hidden, [num_experts, -1, hidden_dim]), wo)
  if output_mask is not None:
    expert_out = output_mask(expert_out)
  return annotate(tf.reshape(expert_out, [num_experts, -1, capacity, model_dim]),
                  ('expert', 'group', 'capacity', 'model'))


def _stats(routing: gating_lib.GatingResult, slot_used) -> Dict[str, tf.Tensor]:
  """Everything a trainer logs per MoE layer (see moe_ffn). slot_used: [G,E,C] 1.0 where a slot is filled."""
  stats = dict(routing.summaries())
  stats.update(
      load=routing.load,
      load_max=tf.reduce_max(routing.load),
      load_mean=tf.reduce_mean(routing.load),
      load_max_over_mean=tf.reduce_max(routing.load) / tf.maximum(tf.reduce_mean(routing.load), 1e-9),
      expert_fill=tf.reduce_mean(slot_used, axis=[0, 2]),
      expert_tokens=routing.expert_tokens,
  )
  return stats
