"""XLA SPMD backend: annotations become `sharding={...}` attributes in the compiled HLO."""
import re

import numpy as np

from lingvo_gshard.core import sharding
from lingvo_gshard.runtime import step_runner
import sharding_model_fixture as fx


def _ShardingTiles(hlo):
  """(shape, tile dims, replicated-last?) of every Sharding custom call in the HLO text."""
  out = []
  for line in hlo.splitlines():
    if 'custom_call_target="Sharding"' not in line:
      continue
    shape = tuple(int(d) for d in re.search(r'= f32\[([\d,]*)\]', line).group(1).split(',') if d)
    m = re.search(r'sharding=\{(replicated|devices=\[([\d,]+)\][^}]*)\}', line)
    if m.group(1) == 'replicated':
      out.append((shape, None, False))
    else:
      tiles = tuple(int(d) for d in m.group(2).split(','))
      out.append((shape, tiles, 'last_tile_dim_replicate' in m.group(1)))
  return out


def test_xla_hlo_carries_expected_shardings():
  partitioner = sharding.Partitioner('xla', 'data:2,expert:4')
  loss, grads, _, step, x = fx.RunStep(partitioner)
  ref_loss, ref_grads, _, _, _ = fx.RunStep(sharding.Partitioner('none'))
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)  # off TPU the annotations do not change values
  for k in grads:
    np.testing.assert_allclose(grads[k], ref_grads[k], rtol=1e-5, atol=1e-7)

  with sharding.use(partitioner):
    hlo = step_runner.StepRunner(partitioner).Compile(step).experimental_get_compiler_ir(x)(stage='hlo')
  tiles = set(_ShardingTiles(hlo))
  E, G, S, M, H = fx.E, fx.G, fx.S, fx.M, fx.H
  # Activations split on G over 'data' (2), replicated over 'expert' (4).
  assert ((G, S, M), (2, 1, 1, 4), True) in tiles
  # The dispatched buffer: E over 'expert' (4), G over 'data' (2) - the G->E reshard.
  assert ((E, G, M), (4, 2, 1), False) in tiles
  assert ((E, G, H), (4, 2, 1), False) in tiles
  # Expert weights split on E over 'expert' (4), replicated over 'data' (2).
  assert ((E, M, H), (4, 1, 1, 2), True) in tiles
  # Dense weights replicated.
  assert ((M, M), None, False) in tiles
  assert ((M, E), None, False) in tiles


def test_xla_low_level_api():
  import tensorflow as tf
  p = sharding.Partitioner('xla', 'data:8')

  def F(x):
    a = sharding.split(x, 0, 8)
    b = sharding.mesh_split(x * 2, np.arange(8).reshape(8), [-1, 0])
    return sharding.replicate(a + b)

  x = tf.ones([8, 16])
  with sharding.use(p):
    hlo = tf.function(F, jit_compile=True).experimental_get_compiler_ir(x)(stage='hlo')
  tiles = _ShardingTiles(hlo)
  assert ((8, 16), (8, 1), False) in tiles
  assert ((8, 16), (1, 8), False) in tiles
  assert ((8, 16), None, False) in tiles
