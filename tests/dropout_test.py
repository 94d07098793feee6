"""base_layer.Dropout: rate, scaling, independence of the two 16-bit draws per word, determinism, modes."""
import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.core import base_layer

SEED = tf.constant([5, 6], tf.int32)


def _Threshold(rate):
  return round(rate * 2**16)


def test_dropped_fraction_and_scale():
  rate = 0.1
  y = base_layer.Dropout(tf.ones([256, 1024]), rate, SEED, 'layer.dropout').numpy()
  kept = y != 0
  n = kept.size
  sigma = np.sqrt(rate * (1 - rate) / n)
  assert abs((1 - kept.mean()) - rate) < 4 * sigma
  # Kept elements are scaled by 1 / P(keep) of the 16-bit threshold, so E[y] = x exactly.
  np.testing.assert_allclose(y[kept], 2**16 / (2**16 - _Threshold(rate)), rtol=1e-7)
  assert abs(y.mean() - 1.0) < 4 * sigma / (1 - rate)


def test_two_halves_of_a_word_are_independent():
  """Neighbours share one uint32 draw (low and high 16 bits): both dropped must happen with P = rate^2."""
  rate = 0.1
  dropped = base_layer.Dropout(tf.ones([512, 512]), rate, SEED, 'pairs').numpy() == 0
  even, odd = dropped[:, 0::2], dropped[:, 1::2]
  pairs = even.size
  both = np.logical_and(even, odd).mean()
  sigma = np.sqrt(rate**2 * (1 - rate**2) / pairs)
  assert abs(both - rate**2) < 4 * sigma
  assert abs(even.mean() - rate) < 0.005 and abs(odd.mean() - rate) < 0.005


def test_deterministic_per_seed_and_name():
  x = tf.random.stateless_normal([64, 130], [1, 2])
  a = base_layer.Dropout(x, 0.3, SEED, 'a').numpy()
  np.testing.assert_array_equal(base_layer.Dropout(x, 0.3, SEED, 'a').numpy(), a)
  b = base_layer.Dropout(x, 0.3, SEED, 'b').numpy()
  c = base_layer.Dropout(x, 0.3, tf.constant([5, 7]), 'a').numpy()
  assert (a == 0).mean() > 0.25
  for other in (b, c):
    assert np.mean((a == 0) != (other == 0)) > 0.3  # independent masks differ on ~2 p (1 - p) = 42%


def test_identity_without_seed_or_rate():
  x = tf.random.stateless_normal([4, 8], [1, 2])
  assert base_layer.Dropout(x, 0.5, None, 'eval') is x
  assert base_layer.Dropout(x, 0.0, SEED, 'off') is x
  with pytest.raises(ValueError, match="dropout rate of 'bad'"):
    base_layer.Dropout(x, 1.0, SEED, 'bad')


def test_gradient_is_the_mask():
  x = tf.random.stateless_normal([32, 64], [3, 4])
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = base_layer.Dropout(x, 0.2, SEED, 'g')
  grad = tape.gradient(y, x).numpy()
  mask = (y.numpy() != 0) * (2**16 / (2**16 - _Threshold(0.2)))
  np.testing.assert_allclose(grad, mask, rtol=1e-7)
  np.testing.assert_allclose(y.numpy(), x.numpy() * mask, rtol=1e-6)


@pytest.mark.parametrize('shape', [[7], [3, 5, 9], [2, 1], []])
def test_odd_and_small_shapes(shape):
  x = tf.fill(shape, 2.0)
  y = base_layer.Dropout(x, 0.5, SEED, 'odd').numpy()
  assert y.shape == tuple(shape)
  assert set(np.unique(y)) <= {0.0, 4.0}
  if y.size >= 100:
    assert 0.3 < (y != 0).mean() < 0.7


def test_unknown_last_dim_equals_static():
  x = tf.random.stateless_normal([6, 11], [1, 2])
  dynamic = tf.function(lambda x: base_layer.Dropout(x, 0.4, SEED, 'dyn'),
                        input_signature=[tf.TensorSpec([None, None], tf.float32)])
  np.testing.assert_array_equal(dynamic(x).numpy(), base_layer.Dropout(x, 0.4, SEED, 'dyn').numpy())


def test_same_mask_eager_graph_and_jit():
  """One seed, one mask, however the step runs (the trainer's graph and jit steps drop the same units)."""
  x = tf.random.stateless_normal([16, 128], [1, 2])
  def fn(x, seed):
    return base_layer.Dropout(x, 0.1, seed, 'modes')
  eager = fn(x, SEED).numpy()
  np.testing.assert_array_equal(tf.function(fn)(x, SEED).numpy(), eager)
  np.testing.assert_array_equal(tf.function(fn, jit_compile=True)(x, SEED).numpy(), eager)


def test_bfloat16_keeps_dtype():
  x = tf.ones([8, 64], tf.bfloat16)
  y = base_layer.Dropout(x, 0.1, SEED, 'bf16')
  assert y.dtype == tf.bfloat16
  y = y.numpy().astype(np.float32)
  assert 0 < (y == 0).mean() < 0.3
  # The scale 2^16 / (2^16 - 6554) = 1.1111 rounds to bfloat16's 1.109375.
  np.testing.assert_array_equal(y[y != 0], 1.109375)


def test_both_ways_of_splitting_a_word_give_the_same_mask():
  """The bitcast (none backend) and the comparisons (DTensor, XLA SPMD) read the same low and high halves."""
  bits = tf.random.stateless_uniform([64, 33], [9, 9], minval=None, maxval=None, dtype=tf.uint32, alg='philox')
  for threshold in (1, 6554, 32768, 65535):
    via_bitcast = base_layer._KeepHalves(bits, threshold, bitcast=True).numpy()
    via_compare = base_layer._KeepHalves(bits, threshold, bitcast=False).numpy()
    np.testing.assert_array_equal(via_bitcast, via_compare)
    b = bits.numpy()
    np.testing.assert_array_equal(via_bitcast[..., 0], (b & 0xFFFF) >= threshold)
    np.testing.assert_array_equal(via_bitcast[..., 1], (b >> 16) >= threshold)


@pytest.mark.parametrize('mesh,axes', [('data:8', ('batch', None, None)),
                                       ('data:2,model:4', ('batch', None, 'model'))])
def test_dtensor_sharded_dropout(mesh, axes):
  """On a mesh each shard draws its own bits (DTensor's stateless RNG), so masks differ from one device's;
  the rate and the scale hold."""
  from lingvo_gshard.core import sharding  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.runtime import step_runner  # pylint: disable=g-import-not-at-top
  rate = 0.3
  x = np.ones([8, 64, 32], np.float32)
  partitioner = sharding.Partitioner('dtensor', mesh)
  with sharding.use(partitioner):
    step = step_runner.StepRunner(partitioner).Compile(lambda x, seed: base_layer.Dropout(x, rate, seed, 'dt'))
    y = partitioner.Fetch(step(partitioner.ToDevice(x, axes),
                               partitioner.ToDevice(np.array([5, 6], np.int32), (None,))))
  assert y.shape == x.shape
  kept = y != 0
  assert abs((1 - kept.mean()) - rate) < 4 * np.sqrt(rate * (1 - rate) / y.size)
  np.testing.assert_allclose(y[kept], 2**16 / (2**16 - _Threshold(rate)), rtol=1e-7)
