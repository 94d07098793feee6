"""The GShard MoE feed-forward layer: E experts of the dense FFN's shape, top-2 gated per group of tokens.

Dimensions: B batch, L length, G groups, S tokens per group, E experts, M model dim, H hidden dim.
Tokens [B,L,M] are regrouped into [G,S,M] (S = `group_size`, or all tokens when fewer) and routed by
`moe.moe_ffn`. Sharding by logical axes only: groups on the data axis, expert weights and expert buffers on
the expert axis, gate weights replicated; the G->E relayout of the dispatched buffer is the all-to-all.
"""
import tensorflow as tf

from lingvo_gshard.core import base_layer
from lingvo_gshard.core import compile_hints
from lingvo_gshard.core import domains
from lingvo_gshard.core import sharding
from lingvo_gshard.layers import basic
from lingvo_gshard.layers import dropless
from lingvo_gshard.layers import gating as gating_lib
from lingvo_gshard.layers import moe

WeightSpec = base_layer.WeightSpec
WeightInit = base_layer.WeightInit


class MoELayer(base_layer.BaseLayer):
  """Sparsely-gated MoE FFN. FProp(x[B,L,M], paddings[B,L], seed) -> (y[B,L,M], aux_loss, stats)."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'M.', domains.NonNegative(int))
    p.Define('hidden_dim', 0, 'H of each expert (the dense FFN\'s H).', domains.NonNegative(int))
    p.Define('num_experts', 16, 'E: experts in this layer.', domains.Positive(int))
    p.Define('group_size', 1024, 'S: tokens routed together (capacity is per group); fewer tokens = 1 group. '
             'Ignored when num_groups is set.', domains.Positive(int))
    p.Define('num_groups', 0,
             'G: groups the tokens of a call are split into (Praxis\'s num_groups; typically the devices of '
             "the mesh's group axis). 0: the fewest groups of at most group_size tokens that split them "
             'evenly. Either way G does not depend on the mesh, which must divide it.', domains.NonNegative(int))
    p.Define('capacity_factor', 2.0, 'Training capacity factor: C = int(S*cf/E) (2.0 = the paper\'s 2S/E).',
             domains.Positive())
    p.Define('eval_capacity_factor', 2.0, 'Capacity factor at evaluation (teacher-forced FProp without seed).',
             domains.Positive())
    p.Define('decode_capacity_factor', 0.0,
             'Capacity factor of ExtendStep (one decoding step); 0: dropless, no token is ever dropped and a '
             'translation does not depend on what else shares its batch (as Hugging Face NLLB-MoE decodes: '
             'moe_eval_capacity_token_fraction = 1.0), at a cost that follows the load (layers/dropless.py; '
             'top1/top2 gating, else C = S). The tokens of a decoding step all sit at one position (the first '
             "step: every row's start tag), so they route alike: with training's 2S/E many of them overflow "
             'the same experts.', domains.NonNegative())
    p.Define('decode_block', 64,
             'Dropless decoding: rows of one expert matmul (each expert used pads to a multiple of it); a speed '
             'choice (docs/guides/performance.md).', domains.Positive(int))
    p.Define('min_capacity', 4, 'Lower bound of C (then rounded up to a multiple of 4).', domains.Positive(int))
    p.Define('gating', 'top2', "'top2' (GShard), 'top1' (Switch) or 'expert_choice'.",
             domains.Choices(gating_lib.GATINGS))
    p.Define('second_expert_policy', 'all',
             "Top-2 only: 'all', 'random' (GShard's random routing) or 'sampling'. Evaluation uses 'all'.",
             domains.Choices(gating_lib.SECOND_EXPERT_POLICIES))
    p.Define('dispatch', 'index', "'index' (gather by expert and slot) or 'einsum' (the paper's one-hot).",
             domains.Choices(moe.DISPATCH_MODES))
    p.Define('activation', 'relu', f'One of {sorted(basic.ACTIVATIONS)}.', domains.Choices(basic.ACTIVATIONS))
    p.Define('relu_dropout_prob', 0.0,
             "Dropout on the experts' hidden activations while training (the dense FFN's relu_dropout_prob, "
             "Praxis's MoE relu_dropout_prob; Switch Transformer's 'expert dropout'). Empty slots are zeros "
             'either way.', domains.Probability())
    p.Define('router_jitter', 0.0,
             "Switch Transformer's jitter: while training, the router's input (not the experts') is multiplied "
             'elementwise by U(1 - eps, 1 + eps); 0 = off.', domains.Probability())
    p.Define('expert_output_mask_prob', 0.0,
             "NLLB-200's expert output masking (EOM): while training, each expert output of a token (a filled "
             'slot: one of its top-k choices) is zeroed with this probability, the others scaled by 1/(1-p) so '
             'that the expectation is the evaluation output; 0 = off.', domains.Probability())
    p.Define('wi_layout', 'emh',
             "Storage of the first expert matmul: 'emh' ([E,M,H], the paper's) or 'ehm' ([E,H,M], used "
             "transposed): the same values in another storage order, a speed choice that depends on how steps "
             'are compiled (docs/guides/performance.md). Checkpoints hold [E,M,H] either way (and the '
             'initial values are the same): a checkpoint restores whatever this setting.',
             domains.Choices(moe.WI_LAYOUTS))
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.p  # activation, gating, policy and layout are checked against their domains by BaseLayer
    m, h, e = p.input_dim, p.hidden_dim, p.num_experts
    # Gate weights are replicated (the paper); fan-in init keeps the initial router close to uniform.
    self.CreateWeight('gate', WeightSpec((m, e), ('model', None), WeightInit.FanIn()))
    # Each expert is its own [M,H] / [H,M] matrix: fan-in M / H, as the dense FFN's (not E*M).
    if p.wi_layout == 'emh':
      wi = WeightSpec((e, m, h), ('expert', 'model', 'hidden'), WeightInit.FanIn(fan_in_axes=(1,)))
    else:
      wi = WeightSpec((e, h, m), ('expert', 'hidden', 'model'), WeightInit.FanIn(fan_in_axes=(2,)),
                      checkpoint_perm=(0, 2, 1))
    self.CreateWeight('wi', wi)
    self.CreateWeight('wo', WeightSpec((e, h, m), ('expert', 'hidden', 'model'),
                                       WeightInit.FanIn(fan_in_axes=(1,))))

  def GroupShape(self, num_tokens: int):
    """(G, S) for `num_tokens` tokens, from the params alone (never from the mesh, so a batch routes the same
    on 1 and on 8 devices): `num_groups` groups if set, else the fewest groups of at most `group_size` tokens
    that split the tokens evenly (1280 tokens, group_size 256: 5 groups of 256). The mesh only has to divide
    G over the devices of the 'group' axis (each device routes whole groups, the paper's layout); if it does
    not, ValueError names the fix (set num_groups to a multiple of them).
    """
    p = self.p
    if p.num_groups:
      g = p.num_groups
      if num_tokens % g:
        raise ValueError(f'{self.path}: {num_tokens} tokens do not split evenly into num_groups={g} groups')
    else:
      g = -(-num_tokens // p.group_size)  # ceil
      while num_tokens % g:
        g += 1
    shards = self._GroupShards()
    if g % shards:
      raise ValueError(f'{self.path}: {g} groups of {num_tokens // g} tokens cannot be split over the {shards} '
                       f"devices of the mesh's group axis; set num_groups to a multiple of {shards} that "
                       f'divides the {num_tokens} tokens')
    return g, num_tokens // g

  def _GroupShards(self) -> int:
    partitioner = sharding.current()
    (axis,) = partitioner.MeshAxes(('group',))
    return partitioner.mesh.AxisSize(axis) if axis else 1

  def FProp(self, x, paddings=None, seed=None):
    training = seed is not None
    return self._Route(x, paddings, seed,
                       capacity_factor=self.p.capacity_factor if training else self.p.eval_capacity_factor)

  def ExtendStep(self, x, paddings=None):
    """One decoding step: x [B,1,M], paddings [B,1] (1: a token that must claim no capacity: a dead beam, a
    settled or absent row) -> y [B,1,M], zero where padded. Capacity from decode_capacity_factor."""
    p = self.p
    cf = p.decode_capacity_factor
    if cf or p.gating not in ('top1', 'top2'):
      return self._Route(x, paddings, None, capacity_factor=cf, whole_group=not cf)[0]
    # Dropless: every token of the step is one group with C = N, so the gating drops nothing and the
    # experts run only on the rows routed to them.
    b, l, m = x.shape
    n = b * l
    pg = None if paddings is None else tf.reshape(tf.cast(paddings, tf.float32), [1, n])
    routing = moe.route(tf.reshape(x, [1, n, m]), self.w.gate, capacity=n, gating=p.gating, paddings=pg)
    y = dropless.ExpertFFN(tf.reshape(x, [n, m]), routing.expert_index[0], routing.gate[0],
                           tf.cast(self.w.wi, x.dtype), tf.cast(self.w.wo, x.dtype),
                           activation=basic.ACTIVATIONS[p.activation], block=p.decode_block,
                           wi_transposed=p.wi_layout == 'ehm')
    return tf.reshape(y, [b, l, m])

  def _Route(self, x, paddings, seed, capacity_factor, whole_group=False):
    p = self.p
    b, l, m = x.shape
    g, s = self.GroupShape(b * l)
    training = seed is not None
    xg = tf.reshape(x, [g, s, m])
    pg = None if paddings is None else tf.reshape(tf.cast(paddings, tf.float32), [g, s])
    policy = p.second_expert_policy if training else 'all'
    y, aux, stats = moe.moe_ffn(
        xg, self.w.gate, tf.cast(self.w.wi, x.dtype), tf.cast(self.w.wo, x.dtype),
        capacity_factor=capacity_factor, capacity=s if whole_group else None,
        dispatch=p.dispatch, gating=p.gating, second_expert_policy=policy, paddings=pg,
        seed=base_layer.FoldSeed(seed, f'{self.path}.route') if policy != 'all' else None,
        activation=basic.ACTIVATIONS[p.activation], min_capacity=p.min_capacity, annotate=sharding.shard,
        island=compile_hints.Island,  # compiled on its own where the runtime says so
        wi_layout=p.wi_layout,
        hidden_dropout=(lambda h: base_layer.Dropout(h, p.relu_dropout_prob, seed, f'{self.path}.relu'))
        if training and p.relu_dropout_prob else None,
        router_input_noise=(lambda t: _Jitter(t, p.router_jitter, base_layer.FoldSeed(seed, f'{self.path}.jitter')))
        if training and p.router_jitter else None,
        expert_output_mask=(lambda t: _MaskRows(t, p.expert_output_mask_prob,
                                                base_layer.FoldSeed(seed, f'{self.path}.eom')))
        if training and p.expert_output_mask_prob else None)
    y = sharding.shard(tf.reshape(y, [b, l, m]), ('batch', 'length', 'model'))
    return y, aux, stats


def _Jitter(x, eps, seed):
  """x * U(1 - eps, 1 + eps), elementwise (Switch Transformer's router jitter)."""
  noise = tf.random.stateless_uniform(tf.shape(x), seed, minval=1.0 - eps, maxval=1.0 + eps, alg='philox')
  return x * tf.cast(noise, x.dtype)


def _MaskRows(rows, rate, seed):
  """[E, N, M] expert outputs: each row (one slot's output, i.e. one token's output from one expert) zeroed
  with probability `rate`, the kept rows scaled by 1/(1 - rate)."""
  shape = tf.shape(rows)
  keep = tf.random.stateless_uniform(tf.stack([shape[0], shape[1], 1]), seed, alg='philox') >= rate
  return rows * tf.cast(keep, rows.dtype) * tf.cast(1.0 / (1.0 - rate), rows.dtype)
