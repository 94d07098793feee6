"""Checkpoints do not depend on the MoE layer's wi_layout (a CPU speed choice): a checkpoint written under
one layout restores under the other and training continues with the same losses and weights. (1 device <->
8 devices: tests/train_step_test.py.)
"""
import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.core import optimizers
from lingvo_gshard.core import sharding
from lingvo_gshard.layers import moe_layer
from lingvo_gshard.runtime import learner
from lingvo_gshard.train import checkpoints
import train_step_test


def _Learner(wi_layout, opt, partitioner, **opt_params):
  p = train_step_test.TinyMoE()
  for stack in (p.encoder, p.decoder):
    stack.moe_tpl.wi_layout = wi_layout
  return learner.Learner(p, opt.Params().Set(learning_rate=0.01, warmup_steps=1, **opt_params), partitioner)


def _Canonical(weights):
  """Weights with every ehm-stored wi turned back to [E,M,H] (emh weights pass unchanged)."""
  return {k: np.transpose(w, [0, 2, 1]) if w.ndim == 3 and k.endswith('ffn.wi') and w.shape[1] > w.shape[2] else w
          for k, w in weights.items()}


def _Save(lrn, path):
  return tf.train.Checkpoint(step=lrn.global_step,
                             **checkpoints.CheckpointObjects(lrn.model, lrn.optimizer)).write(path)


def _Restore(lrn, path):
  objects = checkpoints.CheckpointObjects(lrn.model, lrn.optimizer)
  checkpoints.CheckCheckpoint(path, objects)
  tf.train.Checkpoint(step=lrn.global_step, **objects).read(path).assert_consumed()


def test_ehm_layout_starts_from_the_transposed_emh_weights():
  emh = moe_layer.MoELayer.Params().Set(name='moe', input_dim=8, hidden_dim=16, num_experts=4)
  a = emh.Instantiate().InstantiateVariables(sharding.Partitioner('none'))
  b = emh.Copy().Set(wi_layout='ehm').Instantiate().InstantiateVariables(sharding.Partitioner('none'))
  assert b.w.wi.shape == (4, 16, 8)
  np.testing.assert_array_equal(np.transpose(b.w.wi.numpy(), [0, 2, 1]), a.w.wi.numpy())
  np.testing.assert_array_equal(b.w.wo.numpy(), a.w.wo.numpy())


@pytest.mark.parametrize('beta1', [0.0, 0.9])
def test_a_checkpoint_restores_whatever_the_wi_layout(tmp_path, beta1):
  """emh -> ehm -> emh: each restore continues the other layout's training with the same losses (Adafactor,
  whose factored row/column statistics swap between the layouts; with momentum, its weight-shaped slot is
  transposed like the weight)."""
  opt, one = optimizers.Adafactor, sharding.Partitioner('none')
  batch = train_step_test.Batch()
  emh, ehm = _Learner('emh', opt, one, beta1=beta1), _Learner('ehm', opt, one, beta1=beta1)
  for _ in range(2):
    emh.TrainStep(batch)
  for lrn, other, name in ((ehm, emh, 'a'), (emh, ehm, 'b')):
    path = _Save(other, str(tmp_path / name))
    stored = dict(tf.train.list_variables(path))
    wi = [s for k, s in stored.items() if k.endswith('ffn.Swi/.ATTRIBUTES/VARIABLE_VALUE') and len(s) == 3]
    assert wi and all(s[1] < s[2] for s in wi)  # [E,M,H] (M=32 < H=64) whatever the run's layout
    _Restore(lrn, path)
    assert int(lrn.Fetch(lrn.global_step)) == int(other.Fetch(other.global_step))
    want = _Canonical(other.Weights())
    for k, w in _Canonical(lrn.Weights()).items():
      np.testing.assert_array_equal(w, want[k], err_msg=k)
    # Optimizer state came along: the next step matches the run it was restored from.
    np.testing.assert_allclose(float(lrn.TrainStep(batch)['loss']), float(other.TrainStep(batch)['loss']),
                               rtol=1e-5)
  want = _Canonical(ehm.Weights())
  for k, w in _Canonical(emh.Weights()).items():
    np.testing.assert_allclose(w, want[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_adam_slots_are_transposed_with_the_weight(tmp_path):
  """Adam's m and v have the weight's shape: an ehm checkpoint holds them [E,M,H] like the weight."""
  def Layer(layout):
    p = moe_layer.MoELayer.Params().Set(name='moe', input_dim=8, hidden_dim=16, num_experts=4, wi_layout=layout)
    layer = p.Instantiate().InstantiateVariables(sharding.Partitioner('none'))
    opt = optimizers.Adam(optimizers.Adam.Params())
    opt.CreateSlots(list(layer.IterVariablesWithSpecs()), sharding.Partitioner('none'))
    return layer, opt
  ehm, ehm_opt = Layer('ehm')
  for path, slots in ehm_opt.slots.items():  # distinct slot values, to follow through the checkpoint
    for name, v in slots.items():
      v.assign(tf.random.stateless_normal(v.shape, seed=[len(path), len(name)]))
  path = tf.train.Checkpoint(**checkpoints.CheckpointObjects(ehm, ehm_opt)).write(str(tmp_path / 'c'))
  emh, emh_opt = Layer('emh')
  tf.train.Checkpoint(**checkpoints.CheckpointObjects(emh, emh_opt)).read(path).assert_consumed()
  for name in ('m', 'v'):
    np.testing.assert_array_equal(emh_opt.slots['moe.wi'][name].numpy(),
                                  np.transpose(ehm_opt.slots['moe.wi'][name].numpy(), [0, 2, 1]))
    np.testing.assert_array_equal(emh_opt.slots['moe.wo'][name].numpy(), ehm_opt.slots['moe.wo'][name].numpy())


def test_a_permuted_layout_on_a_mesh_is_refused_in_one_line():
  p = moe_layer.MoELayer.Params().Set(name='moe', input_dim=8, hidden_dim=16, num_experts=4, wi_layout='ehm')
  layer = p.Instantiate().InstantiateVariables(sharding.Partitioner('dtensor', 'data:2,expert:4'))
  with pytest.raises(ValueError, match=r"stored permuted \(e.g. wi_layout='ehm'\) is a one-device layout"):
    checkpoints.CheckpointObjects(layer)


def test_a_slot_without_a_layout_rule_is_refused():
  spec = moe_layer.base_layer.WeightSpec((2, 3, 4), ('expert', 'hidden', 'model'), checkpoint_perm=(0, 2, 1))
  slots = {'odd': tf.Variable(tf.zeros([2, 4]))}
  with pytest.raises(NotImplementedError, match='slot odd'):
    optimizers.Adam(optimizers.Adam.Params()).CanonicalSlots(spec, slots)
  with pytest.raises(ValueError, match='not a permutation'):
    moe_layer.base_layer.WeightSpec((2, 3), ('a', 'b'), checkpoint_perm=(0, 0))
