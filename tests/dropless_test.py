"""The dropless decode FFN (layers/dropless.py): the NumPy top-k sum for any routing, the capacity path with
C = N, and the same in eager, TF-graph and XLA execution."""
import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.layers import dropless
from lingvo_gshard.layers import moe_layer

M, H = 8, 12


def _NumpyFFN(x, expert_index, gate, wi, wo):
  out = np.zeros_like(x)
  for n in range(len(x)):
    for e, g in zip(expert_index[n], gate[n]):
      if g > 0:
        out[n] += g * (np.maximum(x[n] @ wi[e], 0) @ wo[e])
  return out


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(n=st.integers(1, 40), k=st.integers(1, 3), e=st.integers(1, 9), block=st.integers(1, 8),
                  seed=st.integers(0, 2 ** 16), skewed=st.booleans())
def test_every_kept_choice_gets_its_experts_output(n, k, e, block, seed, skewed):
  """Any routing (skewed: every choice on one or two experts), any block size: the NumPy sum over kept
  choices of gate * FFN_e(x); choices with gate 0 add nothing."""
  rng = np.random.RandomState(seed)
  x = rng.randn(n, M).astype(np.float32)
  expert_index = rng.randint(0, min(e, 2) if skewed else e, size=(n, k)).astype(np.int32)
  gate = np.where(rng.rand(n, k) < 0.25, 0.0, rng.rand(n, k)).astype(np.float32)
  wi, wo = rng.randn(e, M, H).astype(np.float32), rng.randn(e, H, M).astype(np.float32)
  got = dropless.ExpertFFN(tf.constant(x), tf.constant(expert_index), tf.constant(gate), tf.constant(wi),
                           tf.constant(wo), block=block).numpy()
  np.testing.assert_allclose(got, _NumpyFFN(x, expert_index, gate, wi, wo), rtol=1e-4, atol=1e-4)


def test_transposed_wi_layout_gives_the_same_values():
  rng = np.random.RandomState(3)
  x, wi, wo = rng.randn(10, M), rng.randn(4, M, H), rng.randn(4, H, M)
  x, wi, wo = (tf.constant(t, tf.float32) for t in (x, wi, wo))
  idx, gate = tf.constant(rng.randint(0, 4, (10, 2)), tf.int32), tf.constant(rng.rand(10, 2), tf.float32)
  want = dropless.ExpertFFN(x, idx, gate, wi, wo, block=4)
  got = dropless.ExpertFFN(x, idx, gate, tf.transpose(wi, [0, 2, 1]), wo, block=4, wi_transposed=True)
  np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_buffer_holds_every_choice_of_the_worst_routing():
  """BufferRows bounds sum_e ceil(n_e / b) * b for every split of the choices over the experts."""
  for choices, experts, block in ((256, 16, 64), (7, 3, 4), (1, 128, 32)):
    worst = choices + experts * (block - 1)  # each expert used pads at most block - 1 rows
    assert dropless.BufferRows(choices, experts, block) >= worst
    assert dropless.BufferRows(choices, experts, block) % block == 0


def _Layer(**kw):
  p = moe_layer.MoELayer.Params().Set(name='moe', input_dim=M, hidden_dim=H, num_experts=6, group_size=64, **kw)
  return p.Instantiate().InstantiateVariables()


@pytest.mark.parametrize('gating', ['top2', 'top1'])
@pytest.mark.parametrize('mode', ['eager', 'graph', 'xla'])
def test_decode_step_equals_the_capacity_path_with_room_for_every_token(gating, mode):
  """MoELayer.ExtendStep (dropless) against the capacity dispatch with C = N on a step whose tokens crowd a
  few experts (8 copies of 5 tokens, as the beams of a first step) with some rows padded."""
  layer = _Layer(gating=gating, decode_block=4)
  rng = np.random.RandomState(0)
  x = tf.constant(np.repeat(rng.randn(5, M).astype(np.float32), 8, axis=0)[:, None, :])
  pad = tf.constant((rng.rand(40, 1) < 0.3).astype(np.float32))
  # pylint: disable-next=protected-access
  want = layer._Route(x, pad, None, capacity_factor=0.0, whole_group=True)[0].numpy()
  step = {'eager': layer.ExtendStep, 'graph': tf.function(layer.ExtendStep),
          'xla': tf.function(layer.ExtendStep, jit_compile=True)}[mode]
  got = step(x, pad).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(got[pad.numpy()[:, 0] > 0], 0)
  assert np.abs(want).max() > 0.1
