"""The MoE layer under the sharding backends: DTensor on 8 devices equals 1 device; XLA HLO shardings."""
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.experimental import dtensor

from lingvo_gshard.core import base_layer
from lingvo_gshard.core import sharding
from lingvo_gshard.layers import basic
from lingvo_gshard.layers import moe_layer
from lingvo_gshard.runtime import step_runner

B, L, M, H = 8, 16, 16, 32


def _Layer(num_experts, **kw):
  kw.setdefault('group_size', 16)
  return moe_layer.MoELayer.Params().Set(input_dim=M, hidden_dim=H, num_experts=num_experts, **kw)


def _AssertGradientsClose(got, want):
  """Per gradient: float32 sums over tokens in another order round relative to the tensor's scale (an entry
  of 0.15 in a gate gradient reaching 47 differed by 4e-6 between 1 and 8 devices)."""
  for k in want:
    scale = max(1.0, float(np.abs(want[k]).max()))
    np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6 * scale, err_msg=k)


def _Run(partitioner, num_experts, dispatch='index', length=L, **layer_params):
  """Output, aux loss and gradients (wrt x and every weight) of one layer call under `partitioner`."""
  with sharding.use(partitioner):
    layer = _Layer(num_experts, dispatch=dispatch, **layer_params).Instantiate().InstantiateVariables(
        partitioner)
    variables = dict(layer.IterVariables())

    def Step(x, paddings):
      with sharding.use(partitioner):
        with tf.GradientTape() as tape:
          tape.watch(x)
          y, aux, stats = layer.FProp(x, paddings)
          loss = tf.reduce_sum(y * y) + aux
        grads = tape.gradient(loss, [x] + list(variables.values()))
        return y, aux, stats['load'], dict(zip(['x'] + list(variables), grads))

    x = tf.random.stateless_normal([B, length, M], seed=[4, 2])
    paddings = tf.cast(tf.random.stateless_uniform([B, length], seed=[5, 5]) < 0.2, tf.float32)
    runner = step_runner.StepRunner(partitioner, jit=True if partitioner.backend == 'none' else None)
    out = runner.Compile(Step)(partitioner.ToDevice(x, ('batch', 'length', 'model')),
                               partitioner.ToDevice(paddings, ('batch', 'length')))
    y, aux, load, grads = out
    return (partitioner.Fetch(y), partitioner.Fetch(aux), partitioner.Fetch(load),
            {k: partitioner.Fetch(g) for k, g in grads.items()}, layer)


@pytest.mark.parametrize('num_experts,mesh', [(8, 'data:8'), (16, 'data:8'), (8, 'data:2,expert:4'),
                                              (16, 'data:2,expert:4')])
def test_dtensor_layer_equals_single_device(num_experts, mesh):
  y0, aux0, load0, g0, _ = _Run(sharding.Partitioner('none'), num_experts)
  partitioner = sharding.Partitioner('dtensor', mesh)
  y1, aux1, load1, g1, layer = _Run(partitioner, num_experts)
  np.testing.assert_allclose(y1, y0, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(aux1, aux0, rtol=1e-5)
  np.testing.assert_allclose(load1, load0, rtol=1e-5, atol=1e-7)
  assert aux0 > 0 and np.abs(y0).max() > 0
  _AssertGradientsClose(g1, g0)
  for k in g0:
    assert np.abs(g0[k]).max() > 0, k
  # Each device holds E / (expert axis size) experts of wi and wo; the gate is replicated.
  expert_axis = 'expert' if 'expert' in mesh else 'data'
  local = num_experts // partitioner.mesh.AxisSize(expert_axis)
  variables = dict(layer.IterVariables())
  for name in ('wi', 'wo'):
    shards = dtensor.unpack(variables[f'moelayer.{name}'].read_value())
    assert len(shards) == 8 and all(s.shape[0] == local for s in shards)
  assert all(s.shape == (M, num_experts) for s in dtensor.unpack(variables['moelayer.gate'].read_value()))


def test_index_and_einsum_layers_agree():
  y0, aux0, _, g0, _ = _Run(sharding.Partitioner('none'), 8, dispatch='einsum')
  y1, aux1, _, g1, _ = _Run(sharding.Partitioner('none'), 8, dispatch='index')
  np.testing.assert_allclose(y1, y0, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(aux1, aux0, rtol=1e-6)
  _AssertGradientsClose(g1, g0)


def test_one_expert_layer_equals_dense_ffn():
  """E = 1 with capacity >= S: every token goes to the one expert with gate 1, i.e. a dense FFN (top-1
  routing: top-2 needs a second expert)."""
  p = _Layer(1, gating='top1', capacity_factor=1.0, eval_capacity_factor=1.0)
  layer = p.Instantiate().InstantiateVariables()
  dense = basic.FeedForward.Params().Set(input_dim=M, hidden_dim=H).Instantiate().InstantiateVariables()
  dense._vars['wi'].assign(layer._vars['wi'][0])
  dense._vars['wo'].assign(layer._vars['wo'][0])
  x = tf.random.stateless_normal([B, L, M], seed=[1, 9])
  y_moe, _, _ = layer.FProp(x)
  y_dense, _, _ = dense.FProp(x)
  np.testing.assert_allclose(y_moe.numpy(), y_dense.numpy(), rtol=1e-5, atol=1e-6)


def test_xla_hlo_splits_experts_on_e_and_inputs_on_g():
  partitioner = sharding.Partitioner('xla', 'data:2,expert:4')
  with sharding.use(partitioner):
    layer = _Layer(8).Instantiate().InstantiateVariables(partitioner)

    def F(x):
      with sharding.use(partitioner):
        return layer.FProp(x)[0]

    x = tf.random.stateless_normal([B, L, M], seed=[4, 2])
    hlo = tf.function(F, jit_compile=True).experimental_get_compiler_ir(x)(stage='hlo')
  found = set()
  for line in hlo.splitlines():
    if 'custom_call_target="Sharding"' in line:
      shape = re.search(r'= f32\[([\d,]*)\]', line).group(1)
      tiles = re.search(r'sharding=\{(replicated|devices=\[[\d,]+\])', line).group(1)
      found.add((shape, tiles))
  g = B * L // 16
  assert ('8,16,32', 'devices=[4,1,1,2]') in found    # wi [E,M,H]: E over 'expert', copies over 'data'
  assert ('8,32,16', 'devices=[4,1,1,2]') in found    # wo [E,H,M]
  assert (f'{g},16,16', 'devices=[2,1,1,4]') in found  # x [G,S,M]: G over 'data'
  assert ('16,8', 'replicated') in found               # gate [M,E]
  # The dispatched buffer [E,G,C,M]: E over 'expert' and G over 'data' - the all-to-all boundary.
  assert any(s.startswith(f'8,{g},') and t == 'devices=[4,2,1,1]' for s, t in found), found


def _TrainStep(layer, x, paddings, outer_jit, compile_fn=None):
  """y, aux, load, dropped fraction and the gradients wrt x and every weight of one training call, compiled
  by `compile_fn` (default: tf.function, jit-compiled if outer_jit)."""
  variables = [v for _, v in layer.IterVariables()]

  def Step(x, paddings):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y, aux, stats = layer.FProp(x, paddings, seed=tf.constant([7, 8]))
      loss = tf.reduce_sum(y * y) + aux
    return [y, aux, stats['load'], stats['dropped_fraction']] + tape.gradient(loss, [x] + variables)

  compile_fn = compile_fn or (lambda f: tf.function(f, jit_compile=outer_jit))
  return [t.numpy() for t in compile_fn(Step)(x, paddings)]


@pytest.mark.parametrize('policy', ['all', 'random'])
def test_layer_in_a_graph_mode_step_equals_the_plain_layer(policy):
  """Traced by a graph-mode StepRunner, the layer's routing + dispatch and combine become XLA islands (the
  layer only marks them); outputs, stats and gradients equal the plain layer's in a training step with
  padding. Random routing draws inside the island, so its reference is the plain layer jit-compiled (TF 2.21's
  XLA Philox differs from the CPU kernel's for a run-time seed)."""
  x = tf.random.stateless_normal([B, L, M], seed=[3, 1])
  paddings = tf.cast(tf.random.stateless_uniform([B, L], seed=[6, 2]) < 0.2, tf.float32)
  layer = _Layer(8, second_expert_policy=policy).Instantiate().InstantiateVariables()
  plain = _TrainStep(layer, x, paddings, policy != 'all')
  runner = step_runner.StepRunner(sharding.Partitioner('none'), jit=False)
  islands = _TrainStep(layer, x, paddings, False, compile_fn=runner.Compile)
  assert plain[1] > 0 and np.abs(plain[0]).max() > 0
  _AssertGradientsClose(dict(enumerate(islands)), dict(enumerate(plain)))
  for i, b in enumerate(plain):
    assert np.abs(b).max() > 0 or i == 3, i  # every output and gradient is non-zero (3: dropped fraction)
  forward = lambda x, p: layer.FProp(x, p)[0]
  graph = runner.Compile(forward).get_concrete_function(x, paddings).graph
  xla_calls = [op for op in graph.get_operations() if op.type in ('PartitionedCall', 'StatefulPartitionedCall')
               and op.node_def.attr['_XlaMustCompile'].b]
  assert len(xla_calls) == 2  # routing + dispatch, combine
  # Outside a graph-mode runner's trace the layer marks its islands but nothing compiles them.
  plain_graph = tf.function(forward).get_concrete_function(x, paddings).graph
  assert not [op for op in plain_graph.get_operations() if op.node_def.attr['_XlaMustCompile'].b]


@pytest.mark.parametrize('outer_jit', [False, True])
def test_wi_layout_ehm_equals_emh(outer_jit):
  """wi stored as [E,H,M] (used transposed) computes the same layer as [E,M,H], values and gradients."""
  x = tf.random.stateless_normal([B, L, M], seed=[3, 1])
  paddings = tf.cast(tf.random.stateless_uniform([B, L], seed=[6, 2]) < 0.2, tf.float32)
  emh = _Layer(8).Instantiate().InstantiateVariables()
  ehm = _Layer(8, wi_layout='ehm').Instantiate().InstantiateVariables()
  assert ehm.w.wi.shape == (8, H, M) and emh.w.wi.shape == (8, M, H)
  # Fan-in is M for wi and H for wo in both layouts (each expert is its own matrix, E does not count).
  for layer in (emh, ehm):
    assert abs(float(tf.math.reduce_std(layer.w.wi)) * np.sqrt(M) - 1.0) < 0.05
    assert abs(float(tf.math.reduce_std(layer.w.wo)) * np.sqrt(H) - 1.0) < 0.05
  dict(ehm.IterVariables())['moelayer.wi'].assign(tf.transpose(emh.w.wi, [0, 2, 1]))
  want = _TrainStep(emh, x, paddings, outer_jit)
  got = _TrainStep(ehm, x, paddings, outer_jit)
  got[6] = np.transpose(got[6], [0, 2, 1])  # d wi back to [E,M,H]
  _AssertGradientsClose(dict(enumerate(got)), dict(enumerate(want)))
  pad = paddings.numpy() > 0
  assert pad.any() and np.all(got[4][pad] == 0) and np.all(want[4][pad] == 0)  # no gradient leaks to padding
  assert np.abs(want[6]).max() > 0
  with pytest.raises(ValueError, match="wi_layout = 'mhe': must be one of"):
    _Layer(8, wi_layout='mhe').Instantiate()


def test_group_shape_comes_from_the_params_and_the_mesh_only_has_to_divide_it():
  layer = _Layer(4).Set(group_size=256).Instantiate()
  assert layer.GroupShape(2048) == (8, 256)
  assert layer.GroupShape(1280) == (5, 256)  # the fewest groups of at most 256 tokens
  assert layer.GroupShape(1000) == (4, 250)
  assert layer.GroupShape(16) == (1, 16)
  fixed = _Layer(4).Set(group_size=256, num_groups=8).Instantiate()
  assert fixed.GroupShape(1280) == (8, 160) and fixed.GroupShape(16) == (8, 2)
  with pytest.raises(ValueError, match='12 tokens do not split evenly into num_groups=8'):
    fixed.GroupShape(12)
  for mesh in ('data:2,expert:4', 'data:8'):
    with sharding.use(sharding.Partitioner('dtensor', mesh)):
      assert layer.GroupShape(2048) == (8, 256)  # the same groups as on one device
      assert fixed.GroupShape(1280) == (8, 160)
      shards = 8 if mesh == 'data:8' else 2
      with pytest.raises(ValueError, match=f'5 groups of 256 tokens cannot be split over the {shards} devices'
                                           f".*set num_groups to a multiple of {shards}"):
        layer.GroupShape(1280)


@pytest.mark.parametrize('mesh', ['data:8', 'data:2,expert:4'])
def test_explicit_num_groups_routes_a_batch_identically_on_1_and_8_devices(mesh):
  """640 tokens: group_size 128 alone makes 5 groups of 128, which neither 8 nor 2 group shards can split (the
  mesh used to pick other groups: other capacities, other dropped tokens). num_groups=8 fixes G everywhere."""
  kw = dict(length=80, group_size=128, num_groups=8, eval_capacity_factor=0.25)  # _Run calls without a seed
  y0, aux0, load0, g0, _ = _Run(sharding.Partitioner('none'), 8, **kw)
  y1, aux1, load1, g1, _ = _Run(sharding.Partitioner('dtensor', mesh), 8, **kw)
  np.testing.assert_allclose(y1, y0, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(aux1, aux0, rtol=1e-5)
  np.testing.assert_allclose(load1, load0, rtol=1e-5, atol=1e-7)
  _AssertGradientsClose(g1, g0)
  # 8 experts x capacity 4 for ~64 real tokens a group drop real tokens (both choices over capacity: output
  # 0): the equality above covers which ones.
  real = tf.random.stateless_uniform([B, 80], seed=[5, 5]).numpy() >= 0.2  # _Run's paddings
  assert np.mean(np.all(y0[real] == 0, axis=-1)) > 0.02
  with pytest.raises(ValueError, match='5 groups of 128 tokens cannot be split over the'):
    _Run(sharding.Partitioner('dtensor', mesh), 8, **dict(kw, num_groups=0))


def test_expert_dropout_matches_numpy_with_the_layers_mask_and_is_off_at_evaluation():
  """relu_dropout_prob on the experts' hidden activations: with one expert, top-1 and capacity S, slot s of
  group g holds token g·S + s, so the layer equals a NumPy FFN whose hidden units are multiplied by the
  mask base_layer.Dropout draws for [E, G·C, H] under the layer's seed and name; at evaluation (no seed) the
  layer is the plain FFN."""
  rate, seed = 0.3, tf.constant([3, 7])
  layer = _Layer(1, gating='top1', capacity_factor=1.0, eval_capacity_factor=1.0,
                 relu_dropout_prob=rate).Instantiate().InstantiateVariables()
  x = tf.random.stateless_normal([B, L, M], seed=[2, 8])
  g, s = layer.GroupShape(B * L)
  mask = base_layer.Dropout(tf.ones([1, g * s, H]), rate, seed, f'{layer.path}.relu').numpy()[0]
  assert 0.2 < (mask == 0).mean() < 0.4 and np.allclose(mask[mask > 0], 1 / (1 - rate), rtol=1e-3)
  wi, wo = layer._vars['wi'][0].numpy(), layer._vars['wo'][0].numpy()
  hidden = np.maximum(x.numpy().reshape(-1, M) @ wi, 0)
  want_train = ((hidden * mask) @ wo).reshape(B, L, M)
  want_eval = (hidden @ wo).reshape(B, L, M)
  y_train, _, _ = layer.FProp(x, seed=seed)
  y_eval, _, _ = layer.FProp(x)
  np.testing.assert_allclose(y_train.numpy(), want_train, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(y_eval.numpy(), want_eval, rtol=1e-5, atol=1e-5)
  assert np.abs(want_train - want_eval).max() > 0.1


def test_expert_dropout_draws_the_same_mask_under_index_and_einsum_dispatch():
  """Both dispatches fill the same [E, G·C] slots, so one seed drops the same hidden units in both."""
  x = tf.random.stateless_normal([B, L, M], seed=[6, 1])
  seed = tf.constant([1, 2])
  ys = []
  for dispatch in ('index', 'einsum'):
    layer = _Layer(8, dispatch=dispatch, relu_dropout_prob=0.4).Instantiate().InstantiateVariables(seed=5)
    ys.append(layer.FProp(x, seed=seed)[0].numpy())
    no_dropout = layer.FProp(x)[0].numpy()
  np.testing.assert_allclose(ys[0], ys[1], rtol=1e-5, atol=1e-6)
  assert np.abs(ys[1] - no_dropout).max() > 1e-3
