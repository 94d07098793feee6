"""Tests for lingvo_gshard.layers.dispatch: the index path against the paper's einsums and NumPy.

Routing here is random (distinct slots per group, some choices dropped), independent of gating.py; the MoE
tests (moe_test.py) use the real gating.
"""
import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.layers import dispatch

G, S, K, E, C, M = 3, 12, 2, 4, 5, 6
RTOL = 1e-5


def _random_routing(seed, g=G, s=S, k=K, e=E, c=C, keep=0.7):
  """Distinct (expert, position) slots for a random subset of choices; the rest dropped (gate 0, pos C)."""
  rng = np.random.RandomState(seed)
  expert_index = rng.randint(0, e, size=(g, s, k)).astype(np.int32)
  position = np.full((g, s, k), c, np.int32)
  gate = np.zeros((g, s, k), np.float32)
  for gi in range(g):
    n = min(int(keep * s * k), e * c)
    slots = rng.choice(e * c, size=n, replace=False)
    choices = rng.choice(s * k, size=n, replace=False)
    for slot, choice in zip(slots, choices):
      si, ki = divmod(choice, k)
      expert_index[gi, si, ki], position[gi, si, ki] = divmod(slot, c)
      gate[gi, si, ki] = rng.uniform(0.1, 1.0)
  return expert_index, position, gate


def _np_dispatch(x, expert_index, position, gate, e=E, c=C):
  g, s, k = gate.shape
  out = np.zeros((e, g, c, x.shape[-1]), x.dtype)
  for gi, si, ki in zip(*np.nonzero(gate > 0)):
    out[expert_index[gi, si, ki], gi, position[gi, si, ki]] = x[gi, si]
  return out


def _np_combine(expert_out, expert_index, position, gate):
  g, s, k = gate.shape
  y = np.zeros((g, s, expert_out.shape[-1]), np.float64)
  for gi, si, ki in zip(*np.nonzero(gate > 0)):
    y[gi, si] += gate[gi, si, ki] * expert_out[expert_index[gi, si, ki], gi, position[gi, si, ki]]
  return y


def _assert_close(actual, expected, rtol=RTOL):
  actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
  scale = max(np.max(np.abs(expected)), 1e-30)
  assert actual.shape == expected.shape
  assert np.max(np.abs(actual - expected)) <= rtol * scale, np.max(np.abs(actual - expected)) / scale


_MODES = {'eager': lambda f: f, 'function': tf.function, 'jit': lambda f: tf.function(f, jit_compile=True)}


def test_lower_bound_matches_numpy():
  rng = np.random.RandomState(0)
  for n in (1, 2, 7, 8, 33):
    keys = np.sort(rng.randint(0, 10, size=(3, n)), axis=-1).astype(np.int32)
    queries = rng.randint(-2, 13, size=(3, 11)).astype(np.int32)
    got = dispatch._lower_bound(tf.constant(keys), tf.constant(queries)).numpy()
    want = np.stack([np.searchsorted(keys[i], queries[i], side='left') for i in range(3)])
    np.testing.assert_array_equal(got, want)


def test_plan_inverts_routing():
  expert_index, position, gate = _random_routing(1)
  plan = dispatch.make_plan(expert_index, position, gate, E, C)
  kept = gate > 0
  np.testing.assert_array_equal(plan.kept.numpy(), kept)
  np.testing.assert_array_equal(plan.token_slot.numpy(), np.where(kept, expert_index * C + position, 0))
  want_filled = np.zeros((G, E, C), bool)
  want_choice = np.zeros((G, E, C), np.int32)
  for gi, si, ki in zip(*np.nonzero(kept)):
    want_filled[gi, expert_index[gi, si, ki], position[gi, si, ki]] = True
    want_choice[gi, expert_index[gi, si, ki], position[gi, si, ki]] = si * K + ki
  np.testing.assert_array_equal(plan.filled.numpy(), want_filled)
  np.testing.assert_array_equal(plan.slot_choice.numpy(), want_choice)
  np.testing.assert_array_equal(plan.slot_token.numpy(), want_choice // K)


def test_plan_treats_out_of_range_choices_as_dropped():
  expert_index, position, gate = _random_routing(2)
  expert_index[0, 0, 0], position[0, 0, 0], gate[0, 0, 0] = E, 0, 0.5  # expert out of range
  expert_index[0, 1, 1], position[0, 1, 1], gate[0, 1, 1] = 0, C, 0.5  # the dropped-position sentinel
  plan = dispatch.make_plan(expert_index, position, gate, E, C)
  assert not plan.kept.numpy()[0, 0, 0] and not plan.kept.numpy()[0, 1, 1]
  assert plan.filled.numpy().sum() == plan.kept.numpy().sum()


@pytest.mark.parametrize('mode', sorted(_MODES))
def test_index_matches_numpy_and_einsum(mode):
  wrap = _MODES[mode]
  expert_index, position, gate = _random_routing(3)
  rng = np.random.RandomState(4)
  x = rng.normal(size=(G, S, M)).astype(np.float32)
  expert_out = rng.normal(size=(E, G, C, M)).astype(np.float32)

  def _run(x, expert_out, gate):
    plan = dispatch.make_plan(expert_index, position, gate, E, C)
    combine = dispatch.combine_tensor(expert_index, position, gate, E, C)
    return (dispatch.index_dispatch(x, plan), dispatch.einsum_dispatch(x, combine > 0),
            dispatch.index_combine(expert_out, gate, plan), dispatch.einsum_combine(expert_out, combine))

  in_index, in_einsum, y_index, y_einsum = wrap(_run)(x, expert_out, gate)
  want_in = _np_dispatch(x, expert_index, position, gate)
  np.testing.assert_array_equal(in_index.numpy(), want_in)  # a copy: exact
  np.testing.assert_array_equal(in_einsum.numpy(), want_in)
  want_y = _np_combine(expert_out, expert_index, position, gate)
  _assert_close(y_index, want_y)
  _assert_close(y_einsum, want_y)


@pytest.mark.parametrize('mode', sorted(_MODES))
def test_index_gradients_match_einsum(mode):
  """d/dx through dispatch, d/d(expert_out) and d/d(gate) through combine, with a nonlinear expert between."""
  wrap = _MODES[mode]
  expert_index, position, gate = _random_routing(5)
  rng = np.random.RandomState(6)
  x = tf.constant(rng.normal(size=(G, S, M)).astype(np.float32))
  w = tf.constant(rng.normal(size=(E, M, M)).astype(np.float32))
  gate = tf.constant(gate)
  target = tf.constant(rng.normal(size=(G, S, M)).astype(np.float32))

  def _grads(x, w, gate, use_index):
    with tf.GradientTape() as tape:
      tape.watch([x, w, gate])
      if use_index:
        plan = dispatch.make_plan(expert_index, position, gate, E, C)
        expert_in = dispatch.index_dispatch(x, plan)
      else:
        combine = dispatch.combine_tensor(expert_index, position, gate, E, C)
        expert_in = dispatch.einsum_dispatch(x, combine > 0)
      expert_out = tf.tanh(tf.einsum('EGCM,EMN->EGCN', expert_in, w))
      if use_index:
        y = dispatch.index_combine(expert_out, gate, plan)
      else:
        y = dispatch.einsum_combine(expert_out, combine)
      loss = tf.reduce_sum(tf.sin(y) * target)
    return [y] + tape.gradient(loss, [x, w, gate])

  got = wrap(lambda *a: _grads(*a, use_index=True))(x, w, gate)
  want = wrap(lambda *a: _grads(*a, use_index=False))(x, w, gate)
  for name, a, b in zip(('y', 'dx', 'dw', 'dgate'), got, want):
    assert np.max(np.abs(b.numpy())) > 0, name  # the comparison would be empty otherwise
    _assert_close(a, b)
  # Dropped choices get no gate gradient; kept ones do.
  kept = gate.numpy() > 0
  assert np.all(got[3].numpy()[~kept] == 0) and np.all(got[3].numpy()[kept] != 0)


def test_index_path_compiles_without_scatter_or_one_hot_buffer():
  """The whole forward + backward is gathers: no XLA scatter, and nothing of size G·S·E·C."""
  g, s, k, e, c, m = 2, 64, 2, 8, 16, 4
  expert_index, position, gate = _random_routing(7, g=g, s=s, k=k, e=e, c=c)

  @tf.function(jit_compile=True)
  def _step(x, gate):
    with tf.GradientTape() as tape:
      tape.watch([x, gate])
      plan = dispatch.make_plan(expert_index, position, gate, e, c)
      y = dispatch.index_combine(2.0 * dispatch.index_dispatch(x, plan), gate, plan)
    return tape.gradient(y, [x, gate])

  x = tf.ones([g, s, m])
  hlo = _step.experimental_get_compiler_ir(x, tf.constant(gate))(stage='optimized_hlo')
  assert 'scatter(' not in hlo
  assert f'[{g},{s},{e},{c}]' not in hlo and f'{g * s * e * c}]' not in hlo


def test_bad_routing_raises():
  expert_index, position, gate = _random_routing(8)
  with pytest.raises(ValueError, match='routing shapes differ'):
    dispatch.make_plan(expert_index, position[:, :-1], gate, E, C)
  with pytest.raises(ValueError, match=r'gate must be a \[G,S,K\]'):
    dispatch.make_plan(expert_index, position, gate[..., 0], E, C)
