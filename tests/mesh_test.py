"""Mesh parsing and validation: every problem is a one-line error before any compute."""
import pytest

from lingvo_gshard.core import mesh as mesh_lib
from lingvo_gshard.core import sharding


def test_parse():
  m = mesh_lib.MeshSpec.Parse('data:2,expert:4')
  assert m.names == ('data', 'expert') and m.shape == (2, 4) and m.size == 8 and str(m) == 'data:2,expert:4'
  assert mesh_lib.MeshSpec.Parse('8').axes == (('data', 8),)


@pytest.mark.parametrize('text,message', [
    ('', 'empty mesh'),
    ('data=2', "'data=2' is not of the form name:size"),
    ('data:two', 'is not of the form name:size'),
    ('data:0', "axis 'data' has size 0"),
    ('data:2,data:4', "axis 'data' appears twice"),
    ('1x:2', 'is not an identifier'),
])
def test_parse_errors(text, message):
  with pytest.raises(mesh_lib.MeshError, match=message):
    mesh_lib.MeshSpec.Parse(text)


def test_partitioner_validation_errors():
  with pytest.raises(mesh_lib.MeshError, match='needs 16 devices, only 8 CPU devices exist'):
    sharding.Partitioner('dtensor', 'data:4,expert:4')
  with pytest.raises(mesh_lib.MeshError, match="mesh axis 'tensor' is not used by the sharding rules"):
    sharding.Partitioner('xla', 'data:2,tensor:4')
  with pytest.raises(mesh_lib.MeshError, match="unknown sharding backend 'tpu'"):
    sharding.Partitioner('tpu', 'data:2')
  with pytest.raises(mesh_lib.MeshError, match='backend "none" runs on one device'):
    sharding.Partitioner('none', 'data:2')
  p = sharding.Partitioner('xla', 'data:2,expert:4')
  with pytest.raises(mesh_lib.MeshError, match=r"dim 0 \(expert\) of size 6 is not divisible by mesh axis "
                     r"'expert' of size 4"):
    p.MeshAxes(('expert', 'model'), shape=(6, 8))
  with pytest.raises(mesh_lib.MeshError, match="logical axis 'experts' has no sharding rule"):
    p.MeshAxes(('experts', 'model'))
  with pytest.raises(mesh_lib.MeshError, match=r'variable w: dim 0 \(group\) of size 3'):
    import tensorflow as tf
    p.CreateVariable('w', lambda: tf.zeros([3, 4]), ('group', 'model'))


def test_rules_first_unused_axis_wins():
  rules = sharding.ShardingRules([('expert', 'expert'), ('expert', 'data'), ('group', 'data'),
                                  ('model', None)])
  two_d = mesh_lib.MeshSpec.Parse('data:2,expert:4')
  one_d = mesh_lib.MeshSpec.Parse('data:8')
  assert rules.Resolve(('expert', 'group', 'model'), two_d) == ('expert', 'data', None)
  assert rules.Resolve(('expert', 'group', 'model'), one_d) == ('data', None, None)
  assert rules.Resolve(('group', 'expert'), one_d) == ('data', None)


def test_tpu_device_mesh():
  # Connecting to a TPU needs one (and the network); the mesh logic around it is checked here.
  from lingvo_gshard.runtime import tpu
  mesh = mesh_lib.MeshSpec.Parse('data:2,expert:4')
  assert tpu.TPUDeviceMesh(mesh, 8).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
  with pytest.raises(tpu.TPUError, match='mesh data:2,expert:4 has 8 devices; this TPU has 32 cores'):
    tpu.TPUDeviceMesh(mesh, 32)
