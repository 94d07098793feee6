"""Optimizers: the learning-rate schedule and Adafactor's factored update against NumPy."""
import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.core import base_layer
from lingvo_gshard.core import optimizers
from lingvo_gshard.core import sharding


def test_rsqrt_schedule_matches_the_paper():
  lr = lambda step, base, warmup: float(optimizers.RsqrtSchedule(step, base, warmup))
  assert lr(10000, 1.0, 10000) == pytest.approx(0.01)          # the paper's peak
  assert lr(5000, 1.0, 10000) == pytest.approx(0.005)          # linear warm-up
  assert lr(40000, 1.0, 10000) == pytest.approx(0.005)         # rsqrt decay
  assert lr(1, 0.01, 1) == pytest.approx(0.01)


@pytest.mark.parametrize('kind', ['linear', 'cosine'])
def test_decaying_schedules_against_numpy(kind):
  """Warm-up to the peak, then the decay ends at total_steps at final_fraction of the peak, and stays."""
  peak, warmup, total, final = 0.03, 10, 110, 0.1
  for step in [1, 5, 10, 11, 35, 60, 109, 110, 111, 500]:
    ramp = min(1.0, step / warmup)
    progress = min(max((step - warmup) / (total - warmup), 0.0), 1.0)
    decay = 1 - progress if kind == 'linear' else 0.5 * (1 + np.cos(np.pi * progress))
    want = peak * ramp * (final + (1 - final) * decay)
    got = float(optimizers.Schedule(step, kind, peak, warmup, total, final))
    assert got == pytest.approx(want, rel=1e-5), step
  assert float(optimizers.Schedule(10, kind, peak, warmup, total)) == pytest.approx(peak)
  assert float(optimizers.Schedule(110, kind, peak, warmup, total)) == pytest.approx(0.0, abs=1e-9)


def test_schedule_errors_name_the_param():
  with pytest.raises(ValueError, match="unknown 'exp'"):
    optimizers.Adafactor.Params().Set(schedule='exp').Instantiate()
  with pytest.raises(ValueError, match=r'total_steps \(0\) must exceed warmup_steps \(100\)'):
    optimizers.Adam.Params().Set(schedule='cosine').Instantiate()
  optimizers.Adam.Params().Set(schedule='cosine', total_steps=101).Instantiate()


def _NumpyAdafactor(w, grads, lr_fn, eps1=1e-30, eps2=1e-3, clip=1.0, decay_exp=0.8, beta1=0.0):
  """Adafactor (second moments factored for matrices, update clipping, parameter scale, momentum beta1 on
  the scaled update as in T5's) in NumPy float64."""
  w = w.astype(np.float64).copy()
  factored = w.ndim >= 2
  row = np.zeros(w.shape[:-1])
  col = np.zeros(w.shape[:-2] + w.shape[-1:])
  v = np.zeros(w.shape)
  m = np.zeros(w.shape)
  for t, g in enumerate(grads, 1):
    g = g.astype(np.float64)
    decay = 1 - t ** -decay_exp
    g2 = g * g + eps1
    if factored:
      row = decay * row + (1 - decay) * g2.mean(-1)
      col = decay * col + (1 - decay) * g2.mean(-2)
      v = row[..., :, None] * col[..., None, :] / row.mean(-1)[..., None, None]
    else:
      v = decay * v + (1 - decay) * g2
    u = g / np.sqrt(v)
    u /= max(1.0, np.sqrt(np.mean(u * u)) / clip)
    u = lr_fn(t) * max(eps2, np.sqrt(np.mean(w * w))) * u
    m = beta1 * m + (1 - beta1) * u
    w -= m
  return w


def _Train(opt_params, spec, w0, grads):
  """Applies `grads` as steps 1, 2, ... to one weight of initial value w0; returns (variable, optimizer)."""
  opt = opt_params.Instantiate()
  partitioner = sharding.Partitioner('none')
  var = partitioner.CreateVariable('w', lambda: tf.constant(w0), spec.logical_axes)
  opt.CreateSlots([('w', var, spec)], partitioner)
  for t, g in enumerate(grads, 1):
    opt.Apply([tf.constant(g)], tf.constant(t, tf.int64))
  return var, opt


def test_adafactor_matches_numpy():
  rng = np.random.RandomState(0)
  spec = base_layer.WeightSpec((3, 5, 4), ('expert', 'model', 'hidden'))
  w0 = rng.normal(size=spec.shape).astype(np.float32)
  grads = [rng.normal(size=spec.shape).astype(np.float32) * s for s in (1.0, 0.1, 3.0)]
  var, opt = _Train(optimizers.Adafactor.Params().Set(learning_rate=0.5, warmup_steps=2), spec, w0, grads)
  assert opt.slots['w']['v_row'].shape == (3, 5) and opt.slots['w']['v_col'].shape == (3, 4)
  ref = _NumpyAdafactor(w0, grads, lambda t: float(optimizers.RsqrtSchedule(t, 0.5, 2)))
  np.testing.assert_allclose(var.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_adafactor_vector_and_clipping_match_numpy():
  """The unfactored path (biases, scales), with a gradient spike that triggers update clipping."""
  rng = np.random.RandomState(1)
  spec = base_layer.WeightSpec((7,), ('model',))
  w0 = rng.normal(size=spec.shape).astype(np.float32)
  grads = [rng.normal(size=spec.shape).astype(np.float32) * s for s in (1.0, 50.0, 0.01)]
  var, opt = _Train(optimizers.Adafactor.Params().Set(learning_rate=0.5, warmup_steps=2), spec, w0, grads)
  assert set(opt.slots['w']) == {'v'}
  ref = _NumpyAdafactor(w0, grads, lambda t: float(optimizers.RsqrtSchedule(t, 0.5, 2)))
  np.testing.assert_allclose(var.numpy(), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('shape,axes', [((3, 5, 4), ('expert', 'model', 'hidden')), ((7,), ('model',))])
def test_adafactor_momentum_matches_numpy(shape, axes):
  """beta1 > 0: one weight-sized momentum slot of the scaled, clipped update, factored or not."""
  rng = np.random.RandomState(3)
  spec = base_layer.WeightSpec(shape, axes)
  w0 = rng.normal(size=spec.shape).astype(np.float32)
  grads = [rng.normal(size=spec.shape).astype(np.float32) * s for s in (1.0, 20.0, 0.1, 3.0)]
  var, opt = _Train(optimizers.Adafactor.Params().Set(learning_rate=0.5, warmup_steps=2, beta1=0.9), spec, w0,
                    grads)
  assert opt.slots['w']['m'].shape == shape
  ref = _NumpyAdafactor(w0, grads, lambda t: float(optimizers.RsqrtSchedule(t, 0.5, 2)), beta1=0.9)
  np.testing.assert_allclose(var.numpy(), ref, rtol=1e-5, atol=1e-6)
  assert not np.allclose(ref, _NumpyAdafactor(w0, grads, lambda t: float(optimizers.RsqrtSchedule(t, 0.5, 2))))


def test_adam_matches_numpy():
  rng = np.random.RandomState(2)
  spec = base_layer.WeightSpec((4, 3), ('model', 'hidden'))
  w0 = rng.normal(size=spec.shape).astype(np.float32)
  grads = [rng.normal(size=spec.shape).astype(np.float32) * s for s in (1.0, 0.1, 3.0)]
  var, opt = _Train(optimizers.Adam.Params().Set(learning_rate=0.5, warmup_steps=2, epsilon=1e-6), spec, w0,
                    grads)
  w, m, v = w0.astype(np.float64), 0.0, 0.0
  for t, g in enumerate(grads, 1):
    m = 0.9 * m + 0.1 * g
    v = 0.98 * v + 0.02 * g.astype(np.float64) ** 2
    lr = float(optimizers.RsqrtSchedule(t, 0.5, 2))
    w = w - lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.98**t)) + 1e-6)
  np.testing.assert_allclose(var.numpy(), w, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(opt.slots['w']['m'].numpy(), m, rtol=1e-5, atol=1e-7)
