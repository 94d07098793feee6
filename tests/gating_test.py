"""Tests for lingvo_gshard.layers.gating.

The reference below re-implements GSHARD_NOTES.md "Top-2 gating" (and top-1 / expert-choice routing) with
plain Python loops over groups, tokens and experts in float64, independent of the TensorFlow code; it is fed
the same random draws (tf.random.stateless_uniform with the same seed, as documented by top2_gating).
"""
import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.layers import gating

G, S, E = 3, 16, 4
SEED = (7, 11)


def _uniform(shape, seed=SEED, minval=0.0):
  return tf.random.stateless_uniform(shape, seed, minval=minval, maxval=1.0, alg='philox').numpy()


def _inputs(with_paddings=True, seed=0):
  rng = np.random.RandomState(seed)
  logits = rng.normal(size=(G, S, E)).astype(np.float32) * 2.0
  paddings = np.zeros((G, S), np.float32)
  if with_paddings:
    paddings[0, 11:] = 1.0  # a ragged tail
    paddings[1, ::3] = 1.0  # scattered padding
    paddings[2, :] = 1.0  # a group with no token at all
  return logits, paddings


# ---------------------------------------------------------------------------------------------------------
# NumPy reference, written in loops.


def _softmax(x):
  x = np.asarray(x, np.float64)
  z = np.exp(x - x.max(-1, keepdims=True))
  return z / z.sum(-1, keepdims=True)


def _reference_stats(logits, paddings, capacity, first, choices, overflow=None):
  """Statistics of the documented definitions.

  choices[g][s] lists (expert, position, gate, tried) per choice k; first[g, s] is the token's argmax expert.
  """
  g_dim, s_dim, e_dim = logits.shape
  probs = _softmax(logits)
  k_dim = len(choices[0][0])
  aux_sum, load_sum, num_groups = 0.0, np.zeros(e_dim), 0
  tokens = kept_total = dropped = 0
  entropy = 0.0
  tried_k, over_k = np.zeros(k_dim), np.zeros(k_dim)
  for g in range(g_dim):
    count, mean_prob, n = np.zeros(e_dim), np.zeros(e_dim), 0
    for s in range(s_dim):
      if paddings[g, s]:
        continue
      n += 1
      count[first[g, s]] += 1
      mean_prob += probs[g, s]
      entropy -= sum(p * np.log(p) for p in probs[g, s])
      kept = 0
      for k, (_, pos, gate, tried) in enumerate(choices[g][s]):
        if tried:
          tried_k[k] += 1
          over_k[k] += pos >= capacity
        kept += tried and pos < capacity and gate > 0
      kept_total += kept
      dropped += kept == 0
    tokens += n
    if n:
      num_groups += 1
      aux_sum += np.mean((count / n) * (mean_prob / n)) * e_dim**2
      load_sum += count / n
  num_groups = max(num_groups, 1)
  load = load_sum / num_groups
  if overflow is None:
    overflow = over_k / np.maximum(tried_k, 1)
  return dict(
      aux_loss=aux_sum / num_groups, load=load, overflow=np.asarray(overflow, np.float64),
      router_entropy=entropy / max(tokens, 1), dropped_fraction=dropped / max(tokens, 1),
      kept_per_token=kept_total / max(tokens, 1), slot_usage=kept_total / (g_dim * e_dim * capacity),
      load_max_over_mean=load.max() * e_dim)


def _index_form(choices, capacity, shape):
  """Lays out per-token choices with the documented convention: dropped = (position C, gate 0)."""
  expert = np.zeros(shape, np.int32)
  position = np.full(shape, capacity, np.int32)
  gate = np.zeros(shape, np.float64)
  for g, row in enumerate(choices):
    for s, token in enumerate(row):
      for k, (e, pos, gt, tried) in enumerate(token):
        expert[g, s, k] = e
        if tried and pos < capacity and gt > 0:
          position[g, s, k], gate[g, s, k] = pos, gt
  return expert, position, gate


def reference_top2(logits, paddings, capacity, policy, normalize=True, eps=1e-9):
  g_dim, s_dim, e_dim = logits.shape
  probs = _softmax(logits)
  if policy == 'random':
    uniform = _uniform([g_dim, s_dim])
  elif policy == 'sampling':
    uniform = _uniform([g_dim, s_dim, e_dim], minval=np.finfo(np.float32).tiny)
  first = np.zeros((g_dim, s_dim), np.int32)
  choices = []
  for g in range(g_dim):
    picks = []
    for s in range(s_dim):
      p = probs[g, s]
      e1 = max(range(e_dim), key=lambda e: (p[e], -e))  # argmax, lowest index on ties
      others = [e for e in range(e_dim) if e != e1]
      if policy == 'sampling':
        noise = -np.log(-np.log(uniform[g, s].astype(np.float64)))
        e2 = max(others, key=lambda e: (logits[g, s, e] + noise[e], -e))
      else:
        e2 = max(others, key=lambda e: (p[e], -e))
      g1, g2 = p[e1], p[e2]
      if normalize:
        g1, g2 = g1 / (g1 + g2 + eps), g2 / (g1 + g2 + eps)
      try_2 = 2 * g2 > uniform[g, s] if policy == 'random' else True
      first[g, s] = e1
      picks.append([e1, e2, g1, g2, try_2 and not paddings[g, s]])
    # First choices take slots in token order; second choices queue behind all first choices.
    fill = np.zeros(e_dim, np.int64)
    pos1 = [capacity] * s_dim
    for s in range(s_dim):
      if not paddings[g, s]:
        pos1[s] = fill[picks[s][0]]
        fill[picks[s][0]] += 1
    pos2 = [capacity] * s_dim
    for s in range(s_dim):
      if picks[s][4]:
        pos2[s] = fill[picks[s][1]]
        fill[picks[s][1]] += 1
    choices.append([[(e1, pos1[s], g1, not paddings[g, s]), (e2, pos2[s], g2, try_2)]
                    for s, (e1, e2, g1, g2, try_2) in enumerate(picks)])
  return _index_form(choices, capacity, (g_dim, s_dim, 2)), _reference_stats(
      logits, paddings, capacity, first, choices)


def reference_top1(logits, paddings, capacity):
  g_dim, s_dim, e_dim = logits.shape
  probs = _softmax(logits)
  first = probs.argmax(-1)
  choices = []
  for g in range(g_dim):
    fill, row = np.zeros(e_dim, np.int64), []
    for s in range(s_dim):
      e = first[g, s]
      if paddings[g, s]:
        row.append([(e, capacity, probs[g, s, e], False)])
      else:
        row.append([(e, fill[e], probs[g, s, e], True)])
        fill[e] += 1
    choices.append(row)
  return _index_form(choices, capacity, (g_dim, s_dim, 1)), _reference_stats(
      logits, paddings, capacity, first, choices)


def reference_expert_choice(logits, paddings, capacity):
  g_dim, s_dim, e_dim = logits.shape
  probs = _softmax(logits)
  first = probs.argmax(-1)
  slot = np.full((g_dim, s_dim, e_dim), capacity, np.int64)
  for g in range(g_dim):
    for e in range(e_dim):
      ranked = sorted((s for s in range(s_dim) if not paddings[g, s]), key=lambda s: (-probs[g, s, e], s))
      for c, s in enumerate(ranked[:capacity]):
        slot[g, s, e] = c
  choices = [[[(e, slot[g, s, e], probs[g, s, e], slot[g, s, e] < capacity) for e in range(e_dim)]
              for s in range(s_dim)] for g in range(g_dim)]
  missed = [slot[g, s, first[g, s]] >= capacity for g in range(g_dim) for s in range(s_dim)
            if not paddings[g, s]]
  stats = _reference_stats(logits, paddings, capacity, first, choices,
                           overflow=[np.mean(missed) if missed else 0.0])
  stats['aux_loss'] = 0.0
  return _index_form(choices, capacity, (g_dim, s_dim, e_dim)), stats


def _assert_matches(result, reference, paddings):
  (expert, position, gate), stats = reference
  nonpad = paddings == 0
  np.testing.assert_array_equal(result.expert_index.numpy()[nonpad], expert[nonpad])
  np.testing.assert_array_equal(result.position.numpy(), position)
  np.testing.assert_allclose(result.gate.numpy(), gate, rtol=1e-5, atol=1e-6)
  got = {k: v.numpy() for k, v in result.summaries().items()}
  for name, want in stats.items():
    value = getattr(result, name).numpy() if name in ('load', 'overflow') else got[name]
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6, err_msg=name)


# ---------------------------------------------------------------------------------------------------------
# Parity with the reference.


@pytest.mark.parametrize('policy', ['all', 'random', 'sampling'])
@pytest.mark.parametrize('capacity', [4, 16])
@pytest.mark.parametrize('with_paddings', [False, True])
def test_top2_matches_reference(policy, capacity, with_paddings):
  logits, paddings = _inputs(with_paddings)
  result = gating.top2_gating(logits, capacity=capacity, paddings=paddings, second_expert_policy=policy,
                              seed=tf.constant(SEED))
  reference = reference_top2(logits, paddings, capacity, policy)
  _assert_matches(result, reference, paddings)
  # The data must exercise what it claims: small capacity overflows, large capacity does not.
  assert (reference[1]['overflow'].max() > 0) == (capacity == 4)


def test_top2_without_normalisation_matches_reference():
  logits, paddings = _inputs()
  result = gating.top2_gating(logits, capacity=4, paddings=paddings, second_expert_policy='random',
                              seed=SEED, normalize=False)
  _assert_matches(result, reference_top2(logits, paddings, 4, 'random', normalize=False), paddings)


@pytest.mark.parametrize('capacity', [4, 8])
@pytest.mark.parametrize('with_paddings', [False, True])
def test_top1_matches_reference(capacity, with_paddings):
  logits, paddings = _inputs(with_paddings)
  result = gating.top1_gating(logits, capacity=capacity, paddings=paddings)
  _assert_matches(result, reference_top1(logits, paddings, capacity), paddings)


@pytest.mark.parametrize('capacity', [4, 8, 20])  # 20 > S: empty slots
@pytest.mark.parametrize('with_paddings', [False, True])
def test_expert_choice_matches_reference(capacity, with_paddings):
  logits, paddings = _inputs(with_paddings)
  result = gating.expert_choice_gating(logits, capacity=capacity, paddings=paddings)
  _assert_matches(result, reference_expert_choice(logits, paddings, capacity), paddings)


@pytest.mark.parametrize('group_size', [64, 100])  # 100: not a multiple of the cumsum's 16-token blocks
def test_long_groups_match_reference_under_eager_and_jit(group_size):
  """Groups long enough for the blocked cumsum, with a popular expert whose queue overflows."""
  rng = np.random.RandomState(5)
  logits = (rng.normal(size=(2, group_size, 32)) * 2.0).astype(np.float32)
  logits[0, :, 3] += 3.0  # a popular expert, so queues grow long and overflow
  paddings = np.zeros((2, group_size), np.float32)
  paddings[1, group_size // 2:] = 1.0
  for name, reference in [('top2', lambda: reference_top2(logits, paddings, 12, 'all')),
                          ('top1', lambda: reference_top1(logits, paddings, 12))]:
    fn = lambda l, p, name=name: gating.gating(name, l, capacity=12, paddings=p)
    for run in (fn, tf.function(fn, jit_compile=True)):
      _assert_matches(run(tf.constant(logits), tf.constant(paddings)), reference(), paddings)
  (_, position, _), _ = reference_top2(logits, paddings, 12, 'all')
  assert (position[..., 0][paddings == 0] == 12).any()  # real tokens' first choices overflowed


@pytest.mark.parametrize('group_size', [3, 31, 32, 47, 100])  # below, at and off the 16-token blocks
def test_exclusive_cumsum_matches_numpy(group_size):
  rng = np.random.RandomState(group_size)
  claims = rng.randint(0, 2, size=(3, group_size, 5)).astype(np.int32)
  want = np.cumsum(claims, axis=1) - claims
  np.testing.assert_array_equal(gating._exclusive_cumsum_s(tf.constant(claims)).numpy(), want)
  jit = tf.function(gating._exclusive_cumsum_s, jit_compile=True)
  np.testing.assert_array_equal(jit(tf.constant(claims)).numpy(), want)


def test_second_choices_queue_behind_first_choices():
  # Hand-worked example, E = 2: first choices [0, 1, 0, 0], second choices [1, 0, 1, 1].
  logits = np.array([[[2., 0.], [0., 2.], [3., 0.], [1., 0.]]], np.float32)
  result = gating.top2_gating(logits, capacity=2)
  np.testing.assert_array_equal(result.expert_index.numpy()[0], [[0, 1], [1, 0], [0, 1], [0, 1]])
  # Expert 0's first choices take slots 0, 1, 2 (tokens 0, 2, 3: slot 2 >= C drops token 3); expert 1 holds
  # token 1 (slot 0), then the second choices of tokens 0, 2, 3 queue at 1, 2, 3 and token 1's at expert 0
  # slot 3. Dropped choices report position C = 2.
  np.testing.assert_array_equal(result.position.numpy()[0], [[0, 1], [0, 2], [1, 2], [2, 2]])
  np.testing.assert_array_equal(result.kept.numpy()[0], [[1, 1], [1, 0], [1, 0], [0, 0]])
  np.testing.assert_allclose(result.overflow.numpy(), [1 / 4, 3 / 4])
  np.testing.assert_allclose(result.dropped_fraction.numpy(), 1 / 4)
  wide = gating.top2_gating(logits, capacity=4)  # every choice fits: the raw queue positions
  np.testing.assert_array_equal(wide.position.numpy()[0], [[0, 1], [0, 3], [1, 2], [2, 3]])


def test_ties_go_to_the_lower_index_under_eager_and_jit():
  logits = np.zeros((2, S, E), np.float32)
  logits[:, ::2, 1] = 1.0  # even tokens prefer expert 1; every other score is tied
  paddings = np.zeros((2, S), np.float32)
  for name, reference in [('top2', lambda: reference_top2(logits, paddings, 4, 'all')),
                          ('expert_choice', lambda: reference_expert_choice(logits, paddings, 4))]:
    fn = lambda l, name=name: gating.gating(name, l, capacity=4)
    for run in (fn, tf.function(fn, jit_compile=True)):
      _assert_matches(run(tf.constant(logits)), reference(), paddings)


def test_underflowed_second_gate_is_dropped_and_never_repeats_the_first_expert():
  # The other experts' probabilities underflow to exactly 0: expert 2 must still differ from expert 1, and a
  # zero gate counts as dropped (position C) so that kept <=> gate > 0 <=> position < C holds.
  logits = np.full((1, 3, E), -200.0, np.float32)
  logits[..., 0] = 0.0
  r = gating.top2_gating(logits, capacity=4)
  np.testing.assert_array_equal(r.expert_index.numpy()[0], [[0, 1]] * 3)
  np.testing.assert_array_equal(r.position.numpy()[0], [[0, 4], [1, 4], [2, 4]])
  np.testing.assert_allclose(r.gate.numpy()[0], [[1, 0]] * 3)
  np.testing.assert_allclose(r.kept_per_token.numpy(), 1.0)


# ---------------------------------------------------------------------------------------------------------
# Invariants.


def _all_results(logits, paddings, capacity):
  seed = tf.constant(SEED)
  out = {}
  for policy in gating.SECOND_EXPERT_POLICIES:
    out[f'top2_{policy}'] = gating.top2_gating(logits, capacity=capacity, paddings=paddings,
                                               second_expert_policy=policy, seed=seed)
  out['top1'] = gating.top1_gating(logits, capacity=capacity, paddings=paddings)
  out['expert_choice'] = gating.expert_choice_gating(logits, capacity=capacity, paddings=paddings)
  return out


@pytest.mark.parametrize('capacity', [4, 8])
def test_invariants(capacity):
  logits, paddings = _inputs()
  for name, r in _all_results(logits, paddings, capacity).items():
    expert, position, gate = r.expert_index.numpy(), r.position.numpy(), r.gate.numpy()
    kept = gate > 0
    np.testing.assert_array_equal(kept, position < capacity, err_msg=name)
    np.testing.assert_array_equal(position[~kept], capacity, err_msg=name)
    assert not kept[paddings == 1].any(), name
    # Kept choices of an expert in a group hold distinct slots, so no expert takes more than C tokens.
    for g in range(G):
      for e in range(E):
        slots = position[g][(expert[g] == e) & kept[g]]
        assert len(set(slots.tolist())) == len(slots) <= capacity, name
    # combine is the one-hot scatter of the index form; dispatch is combine > 0.
    want = np.zeros((G, S, E, capacity), np.float32)
    for g, s, k in zip(*np.nonzero(kept)):
      want[g, s, expert[g, s, k], position[g, s, k]] += gate[g, s, k]
    combine = r.combine.numpy()
    np.testing.assert_allclose(combine, want, rtol=1e-6, err_msg=name)
    np.testing.assert_array_equal(r.dispatch.numpy(), (want > 0).astype(np.float32), err_msg=name)
    assert r.capacity == capacity and r.num_experts == E
    np.testing.assert_allclose(r.load.numpy().sum(), 1.0, rtol=1e-6)


def test_expert_choice_per_expert_form_matches_per_token_form():
  logits, paddings = _inputs()
  for capacity in (4, 20):
    r = gating.expert_choice_gating(logits, capacity=capacity, paddings=paddings)
    token_index, token_gate = r.token_index.numpy(), r.token_gate.numpy()
    position, gate = r.position.numpy(), r.gate.numpy()
    assert token_index.shape == (G, E, capacity)
    filled = token_index < S
    np.testing.assert_array_equal(filled, token_gate > 0)
    for g, e, c in zip(*np.nonzero(filled)):
      assert position[g, token_index[g, e, c], e] == c
      assert token_gate[g, e, c] == gate[g, token_index[g, e, c], e]
    assert filled.sum() == (gate > 0).sum()
    # Every expert fills min(C, non-padding tokens) slots: the balance expert choice guarantees.
    want = np.broadcast_to(np.minimum(capacity, (paddings == 0).sum(-1))[:, None], (G, E))
    np.testing.assert_array_equal(filled.sum(-1), want)


@pytest.mark.parametrize('with_paddings', [False, True])
def test_uniform_logits_give_unit_aux_loss(with_paddings):
  _, paddings = _inputs(with_paddings)  # the all-padding group must not drag the mean below 1
  logits = np.zeros((G, S, E), np.float32)
  for fn in (gating.top2_gating, gating.top1_gating):
    r = fn(logits, capacity=8, paddings=paddings)
    np.testing.assert_allclose(r.aux_loss.numpy(), 1.0, rtol=1e-6)


def test_skewed_router_has_high_aux_loss_and_low_entropy():
  logits = np.zeros((G, S, E), np.float32)
  logits[..., 2] = 10.0  # everyone prefers expert 2
  r = gating.top2_gating(logits, capacity=4)
  p2 = _softmax(logits[0, 0])[2]
  np.testing.assert_allclose(r.aux_loss.numpy(), E * p2, rtol=1e-5)  # E^2 * (1 * p2) / E
  np.testing.assert_allclose(r.load.numpy(), [0, 0, 1, 0])
  np.testing.assert_allclose(r.summaries()['load_max_over_mean'].numpy(), E)
  assert r.router_entropy.numpy() < 0.01


def test_random_policy_keeps_second_expert_with_probability_two_g2():
  # One token repeated: p = softmax([2, 1, 0, -1]); the normalised g2 = p1/(p0+p1) ~ 0.269.
  n = 4000
  logits = np.tile(np.array([2., 1., 0., -1.], np.float32), (1, n, 1))
  r = gating.top2_gating(logits, capacity=2 * n, second_expert_policy='random', seed=[1, 2])
  p = _softmax([2., 1., 0., -1.])
  keep = 2 * p[1] / (p[0] + p[1])
  assert abs(r.kept.numpy()[0, :, 1].mean() - keep) < 0.03
  assert (r.expert_index.numpy()[0, :, 1] == 1).all()


def test_sampling_policy_draws_second_expert_from_softmax_without_first():
  n = 4000
  logits = np.tile(np.array([2., 1., 0., -1.], np.float32), (1, n, 1))
  r = gating.top2_gating(logits, capacity=2 * n, second_expert_policy='sampling', seed=[3, 4])
  second = r.expert_index.numpy()[0, :, 1]
  freq = np.bincount(second, minlength=4) / n
  want = np.concatenate([[0.0], _softmax([1., 0., -1.])])
  np.testing.assert_allclose(freq, want, atol=0.03)


def test_no_gating_tensor_is_as_large_as_the_one_hot_form():
  capacity = S  # so G*S*E*C is 16x G*S*E
  logits, paddings = _inputs()
  spec = tf.TensorSpec([G, S, E], tf.float32)
  for name, fn in [('top2', lambda l: gating.top2_gating(l, capacity=capacity, paddings=paddings,
                                                           second_expert_policy='sampling', seed=SEED)),
                   ('top1', lambda l: gating.top1_gating(l, capacity=capacity, paddings=paddings)),
                   ('expert_choice', lambda l: gating.expert_choice_gating(l, capacity=capacity,
                                                                           paddings=paddings))]:
    largest = _largest_tensor(tf.function(lambda l, fn=fn: fn(l).gate).get_concrete_function(spec).graph)
    assert largest <= G * S * E, (name, largest)
  # The check can see the one-hot form when it is asked for.
  graph = tf.function(lambda l: gating.top1_gating(l, capacity=capacity).combine).get_concrete_function(
      spec).graph
  assert _largest_tensor(graph) >= G * S * E * capacity


def _largest_tensor(graph):
  sizes = [t.shape.num_elements() for op in graph.get_operations() for t in op.outputs]
  return max(n for n in sizes if n is not None)


# ---------------------------------------------------------------------------------------------------------
# Eager, tf.function and XLA agree; gradients.


def _fields(r):
  out = {'expert_index': r.expert_index, 'position': r.position, 'gate': r.gate, 'combine': r.combine}
  out.update(r.summaries())
  out.update(load=r.load, overflow=r.overflow)
  if r.token_index is not None:
    out.update(token_index=r.token_index, token_gate=r.token_gate)
  return out


_CONFIGS = [
    ('top2', dict(second_expert_policy='all')),
    ('top2', dict(second_expert_policy='random', seed=SEED)),
    ('top2', dict(second_expert_policy='sampling', seed=SEED)),
    ('top1', {}),
    ('expert_choice', {}),
]


@pytest.mark.parametrize('name,kwargs', _CONFIGS)
def test_eager_function_and_jit_agree(name, kwargs):
  logits, paddings = _inputs()
  fn = lambda l: _fields(gating.gating(name, l, capacity=4, paddings=paddings, **kwargs))
  eager = fn(tf.constant(logits))
  dynamic = tf.TensorSpec([None, None, E], tf.float32)  # G and S unknown while tracing
  for compiled in (tf.function(fn), tf.function(fn, input_signature=[dynamic]),
                   tf.function(fn, jit_compile=True)):
    got = compiled(tf.constant(logits))
    for key, want in eager.items():
      if want.dtype.is_integer:
        np.testing.assert_array_equal(got[key].numpy(), want.numpy(), err_msg=key)
      else:
        np.testing.assert_allclose(got[key].numpy(), want.numpy(), rtol=1e-5, atol=1e-6, err_msg=key)


def _numpy_aux_grad(logits, paddings):
  """d aux_loss / d logits with the first choices held fixed (argmax has no gradient)."""
  probs = _softmax(logits)
  nonpad = (paddings == 0).astype(np.float64)
  n = nonpad.sum(1)
  valid = n > 0
  first = np.eye(E)[probs.argmax(-1)] * nonpad[..., None]
  fraction = first.sum(1) / np.maximum(n, 1)[:, None]  # GE
  coef = E * valid / max(valid.sum(), 1) / np.maximum(n, 1)  # G: E^2/E * 1/num_groups * 1/n
  weighted = (probs * fraction[:, None, :]).sum(-1, keepdims=True)
  return coef[:, None, None] * nonpad[..., None] * probs * (fraction[:, None, :] - weighted)


@pytest.mark.parametrize('name,kwargs', _CONFIGS)
def test_gradients_finite_and_agree_between_function_and_jit(name, kwargs):
  logits, paddings = _inputs()
  weights = tf.constant(np.random.RandomState(1).normal(size=(G, S, 2 if name == 'top2' else 1 if
                                                                name == 'top1' else E)), tf.float32)

  def grads(l):
    with tf.GradientTape(persistent=True) as tape:
      tape.watch(l)
      r = gating.gating(name, l, capacity=4, paddings=paddings, **kwargs)
      gate_loss = tf.reduce_sum(r.gate * weights)
    return tape.gradient(r.aux_loss, l, unconnected_gradients='zero'), tape.gradient(gate_loss, l)

  x = tf.constant(logits)
  aux_fn, gate_fn = tf.function(grads)(x)
  aux_jit, gate_jit = tf.function(grads, jit_compile=True)(x)
  for a, b in ((aux_fn, aux_jit), (gate_fn, gate_jit)):
    assert np.isfinite(a.numpy()).all() and np.isfinite(b.numpy()).all()
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-7)
  assert np.abs(gate_fn.numpy()).max() > 0
  want_aux = 0.0 if name == 'expert_choice' else _numpy_aux_grad(logits, paddings)
  np.testing.assert_allclose(aux_fn.numpy(), want_aux, rtol=1e-4, atol=1e-7)


# ---------------------------------------------------------------------------------------------------------
# expert_capacity and input validation.


@pytest.mark.parametrize('args,want', [
    ((1024, 128, 2.0), 16),  # the paper's 2S/E
    ((100, 8, 1.25), 16),  # int(15.625) = 15, rounded up to 16
    ((100, 4, 1.0), 28),  # 25 -> 28
    ((96, 4, 1.0), 24),
    ((8, 64, 1.0), 4),  # int(0.125) = 0 -> min_capacity
    ((4096, 2048, 2.0), 4),
    ((10, 8, 1.0, 1), 4),  # min_capacity 1, still rounded up to a multiple of 4
    ((64, 8, 1.0, 9), 12),  # min_capacity 9 -> 12
])
def test_expert_capacity(args, want):
  got = gating.expert_capacity(*args)
  assert got == want and isinstance(got, int)


@pytest.mark.parametrize('kwargs,match', [
    (dict(group_size=0), 'group_size'),
    (dict(group_size=2.5), 'group_size'),
    (dict(group_size=True), 'group_size'),
    (dict(num_experts=0), 'num_experts'),
    (dict(capacity_factor=0.0), 'capacity_factor'),
    (dict(capacity_factor=-1.0), 'capacity_factor'),
    (dict(capacity_factor=float('nan')), 'capacity_factor'),
    (dict(capacity_factor=float('inf')), 'capacity_factor'),
    (dict(capacity_factor='2'), 'capacity_factor'),
    (dict(min_capacity=0), 'min_capacity'),
])
def test_expert_capacity_errors(kwargs, match):
  args = dict(group_size=64, num_experts=8, capacity_factor=2.0)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    gating.expert_capacity(**args)


def test_input_errors():
  logits, _ = _inputs()
  with pytest.raises(ValueError, match='needs seed'):
    gating.top2_gating(logits, capacity=4, second_expert_policy='random')
  with pytest.raises(ValueError, match='needs seed'):
    gating.top2_gating(logits, capacity=4, second_expert_policy='sampling')
  with pytest.raises(ValueError, match='second_expert_policy'):
    gating.top2_gating(logits, capacity=4, second_expert_policy='greedy')
  with pytest.raises(ValueError, match='rank 3'):
    gating.top1_gating(logits[0], capacity=4)
  with pytest.raises(ValueError, match='floating point'):
    gating.top1_gating(logits.astype(np.int32), capacity=4)
  with pytest.raises(ValueError, match='paddings'):
    gating.top2_gating(logits, capacity=4, paddings=np.zeros((G, S + 1), np.float32))
  with pytest.raises(ValueError, match='capacity'):
    gating.expert_choice_gating(logits, capacity=0)
  with pytest.raises(ValueError, match='capacity'):
    gating.top1_gating(logits, capacity=4.0)
  with pytest.raises(ValueError, match='at least 2 experts'):
    gating.top2_gating(logits[..., :1], capacity=4)
  with pytest.raises(ValueError, match='unknown gating'):
    gating.gating('top3', logits, capacity=4)
  with pytest.raises(ValueError, match='static expert dimension'):
    tf.function(lambda l: gating.top1_gating(l, capacity=4).gate).get_concrete_function(
        tf.TensorSpec([G, S, None], tf.float32))
