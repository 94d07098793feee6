"""DTensor backend: the same routed step on 1 device and on 8 virtual CPU devices gives the same values."""
import numpy as np
import pytest
from tensorflow.experimental import dtensor

from lingvo_gshard.core import sharding
import sharding_model_fixture as fx


@pytest.fixture(scope='module')
def reference():
  loss, grads, _, _, _ = fx.RunStep(sharding.Partitioner('none'))
  return loss, grads


@pytest.mark.parametrize('mesh', ['data:8', 'data:2,expert:4', 'data:4,expert:2'])
def test_dtensor_step_matches_single_device(reference, mesh):
  ref_loss, ref_grads = reference
  partitioner = sharding.Partitioner('dtensor', mesh)
  loss, grads, layer, _, _ = fx.RunStep(partitioner)
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
  assert set(grads) == set(ref_grads)
  for name, g in grads.items():
    np.testing.assert_allclose(g, ref_grads[name], rtol=1e-5, atol=1e-7, err_msg=name)
    assert np.abs(g).max() > 0, name  # every weight really gets a gradient

  # Each device holds the slice the rules say: w_e split over the expert axis (or data on a 1-D mesh).
  expert_axis = 'expert' if 'expert' in mesh else 'data'
  e_split = partitioner.mesh.AxisSize(expert_axis)
  variables = dict(layer.IterVariables())
  w_e = variables['routedstep.w_e']
  shards = dtensor.unpack(w_e.read_value())
  assert len(shards) == 8
  assert all(tuple(s.shape) == (fx.E // e_split, fx.M, fx.H) for s in shards)
  assert dtensor.fetch_layout(w_e).sharding_specs == [expert_axis, dtensor.UNSHARDED, dtensor.UNSHARDED]
  # Per-device slices are distinct experts, not copies: device d holds experts of its mesh coordinate.
  full = partitioner.Fetch(w_e)
  coords = np.unravel_index(np.arange(8), partitioner.mesh.shape)
  e_coord = coords[partitioner.mesh.AxisIndex(expert_axis)]
  for d, s in enumerate(shards):
    k = fx.E // e_split
    np.testing.assert_array_equal(s.numpy(), full[e_coord[d] * k:(e_coord[d] + 1) * k])
  w_in = dtensor.unpack(variables['routedstep.w_in'].read_value())
  assert all(tuple(s.shape) == (fx.M, fx.M) for s in w_in)  # replicated


def test_shard_shape_follows_rules():
  p = sharding.Partitioner('dtensor', 'data:2,expert:4')
  assert p.ShardShape((16, 8, 32), ('expert', 'group', 'model')) == (4, 4, 32)
  assert p.ShardShape((8, 4, 32), ('group', 'length', 'model')) == (4, 4, 32)
  p1 = sharding.Partitioner('dtensor', 'data:8')
  # On a 1-D mesh the expert dim takes the only axis; the group dim of the same tensor stays whole.
  assert p1.MeshAxes(('expert', 'group', 'model')) == ('data', None, None)
  assert p1.MeshAxes(('group', 'length', 'model')) == ('data', None, None)


@pytest.mark.parametrize('mesh', ['data:2,expert:4', 'data:4,expert:2'])
def test_to_device_gives_each_device_its_block(mesh):
  """ToDevice cuts every device's block on the host (what a client of a multi-host mesh sends its own
  devices): device d of a [rows, length] batch on 'data' holds rows of its data coordinate, the rest whole."""
  partitioner = sharding.Partitioner('dtensor', mesh)
  x = np.arange(8 * 6, dtype=np.int32).reshape(8, 6)
  t = partitioner.ToDevice(x, ('batch', 'length'))
  data = partitioner.mesh.AxisSize('data')
  coords = np.unravel_index(np.arange(8), partitioner.mesh.shape)[partitioner.mesh.AxisIndex('data')]
  for d, block in enumerate(dtensor.unpack(t)):
    rows = 8 // data
    np.testing.assert_array_equal(block.numpy(), x[coords[d] * rows:(coords[d] + 1) * rows])
  np.testing.assert_array_equal(partitioner.Fetch(t), x)
  w = np.random.RandomState(0).randn(4, 3).astype(np.float32)  # experts on 'expert' (or on 'data')
  np.testing.assert_array_equal(partitioner.Fetch(partitioner.ToDevice(w, ('expert', None))), w)
