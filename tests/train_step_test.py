"""One full training step of a tiny MoE translation model: 8 DTensor devices == 1 device."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.experimental import dtensor

from lingvo_gshard.core import optimizers
from lingvo_gshard.core import sharding
from lingvo_gshard.layers import moe_layer
from lingvo_gshard.runtime import learner
from lingvo_gshard.runtime import step_runner
import mt_model_test


def TinyMoE(num_experts=8):
  p = mt_model_test.TinyParams(label_smoothing=0.1)
  for stack in (p.encoder, p.decoder):
    # Random routing draws per-shard under DTensor; the equality test uses the deterministic policy.
    stack.moe_tpl = moe_layer.MoELayer.Params().Set(num_experts=num_experts, group_size=8,
                                                    second_expert_policy='all')
  return p


def Batch():
  """8 rows x 8 tokens: 64 tokens = 8 groups of 8, so groups split evenly over 8 devices."""
  rng = np.random.RandomState(3)
  examples = [(rng.randint(3, mt_model_test.SRC_V, size=rng.randint(2, 8)).tolist(),
               rng.randint(3, mt_model_test.TGT_V, size=rng.randint(1, 7)).tolist() + [mt_model_test.EOS])
              for _ in range(8)]
  return mt_model_test.Unpacked(examples, length=8)


@pytest.mark.parametrize('mesh,opt', [('data:2,expert:4', optimizers.Adafactor), ('data:8', optimizers.Adam)])
def test_train_step_dtensor_matches_single_device(mesh, opt, tmp_path):
  opt_p = opt.Params().Set(learning_rate=0.01, warmup_steps=1)
  if opt is optimizers.Adam:
    # Adam's first update is lr*g/(|g|+eps), nearly sign(g): a gradient entry of ~1e-6 that two summation
    # orders give as 1.000e-6 and 1.005e-6 moves visibly apart. With eps=1e-3 the update is ~linear in g
    # for such entries and the comparison measures the sharding, not that conditioning.
    opt_p.epsilon = 1e-3
  ref = learner.Learner(TinyMoE(), opt_p, sharding.Partitioner('none'))
  dist = learner.Learner(TinyMoE(), opt_p, sharding.Partitioner('dtensor', mesh))
  w0 = ref.Weights()
  for path, w in dist.Weights().items():
    np.testing.assert_array_equal(w, w0[path])  # same initial weights on both backends
  batch = Batch()
  m_ref = ref.TrainStep(batch)
  m_dist = dist.TrainStep(batch)
  for k in ('loss', 'xent', 'aux_loss', 'grad_norm'):
    np.testing.assert_allclose(dist.Fetch(m_dist[k]), ref.Fetch(m_ref[k]), rtol=1e-5, err_msg=k)
  assert float(ref.Fetch(m_ref['aux_loss'])) > 0  # the MoE layers ran
  w1_ref, w1_dist = ref.Weights(), dist.Weights()
  moved = 0
  for path, w in w1_ref.items():
    np.testing.assert_allclose(w1_dist[path], w, rtol=1e-5, atol=1e-6, err_msg=path)
    moved += not np.array_equal(w, w0[path])
  assert moved > 0.9 * len(w1_ref)  # the step really updated (almost) every weight
  # Experts are sharded: each device holds E / expert-axis-size experts of every MoE layer.
  expert_axis = 'expert' if 'expert' in mesh else 'data'
  e_local = 8 // dist.partitioner.mesh.AxisSize(expert_axis)
  wi = [v for p, v in dist.model.IterVariables() if p.endswith('ffn.wi') and v.shape.rank == 3]
  assert wi and all(s.shape[0] == e_local for v in wi for s in dtensor.unpack(v.read_value()))
  if mesh == 'data:2,expert:4':
    _CheckpointsMoveBetweenMeshes(ref, dist, batch, tmp_path)


def _CheckpointsMoveBetweenMeshes(ref, dist, batch, tmp_path):
  """A checkpoint of the 1-device run restores on the 8-device mesh, and the mesh's back on 1 device: each
  continues with the losses of the run that stayed on one device (weights, Adafactor state and step)."""
  from lingvo_gshard.train import checkpoints  # pylint: disable=g-import-not-at-top

  def Save(lrn, name):
    objects = checkpoints.CheckpointObjects(lrn.model, lrn.optimizer)
    return tf.train.Checkpoint(step=lrn.global_step, **objects).write(str(tmp_path / name))

  def Restore(lrn, path):
    objects = checkpoints.CheckpointObjects(lrn.model, lrn.optimizer)
    checkpoints.CheckCheckpoint(path, objects)
    tf.train.Checkpoint(step=lrn.global_step, **objects).read(path).assert_consumed()

  ref.TrainStep(batch)
  at_2 = Save(ref, 'one')
  want = [float(ref.TrainStep(batch)['loss']) for _ in range(2)]  # the uninterrupted steps 3 and 4
  Restore(dist, at_2)
  np.testing.assert_allclose(float(dist.Fetch(dist.TrainStep(batch)['loss'])), want[0], rtol=1e-5)
  Restore(ref, Save(dist, 'eight'))  # ref goes back to step 3, where the mesh left it
  assert int(ref.Fetch(ref.global_step)) == 3
  np.testing.assert_allclose(float(ref.TrainStep(batch)['loss']), want[1], rtol=1e-5)


def test_graph_mode_with_xla_islands_matches_jit():
  """The CPU fast path (TF graph step, MoE routing and the losses in XLA islands) trains exactly like the
  jit step; the rule that picks it depends on the CPU's AVX-512, whatever the machine running the test."""
  assert step_runner.DefaultJit(frozenset({'avx2', 'fma'}))[0] is True
  assert step_runner.DefaultJit(frozenset({'avx2', 'avx512f'}))[0] is (
      bool(tf.config.list_physical_devices('GPU')))
  opt_p = optimizers.Adafactor.Params().Set(learning_rate=0.01, warmup_steps=1)
  one = sharding.Partitioner('none')
  jit = learner.Learner(TinyMoE(), opt_p, one, runner=step_runner.StepRunner(one, jit=True))
  graph = learner.Learner(TinyMoE(), opt_p, one, runner=step_runner.StepRunner(one, jit=False))
  assert (jit.runner.mode, graph.runner.mode) == ('jit', 'graph')
  batch = Batch()
  m_jit, m_graph = jit.TrainStep(batch), graph.TrainStep(batch)
  for k in ('loss', 'aux_loss', 'grad_norm'):
    np.testing.assert_allclose(float(m_graph[k]), float(m_jit[k]), rtol=1e-5, err_msg=k)
  w_jit = jit.Weights()
  for path, w in graph.Weights().items():
    np.testing.assert_allclose(w, w_jit[path], rtol=1e-5, atol=1e-6, err_msg=path)


def test_dtensor_train_step_with_dropout():
  """Every dropout site (input, attention probabilities, residual, relu) runs on a sharded mesh. Masks are
  drawn per shard there, so the step is compared with one device only in scale: the loss at initialisation
  sits near ln(V) either way, and training moves every weight."""
  p = TinyMoE()
  p.input_dropout_prob = 0.1
  for stack in (p.encoder, p.decoder):
    stack.layer_tpl.Set(atten_dropout_prob=0.1, residual_dropout_prob=0.1)
    stack.layer_tpl.ffn_tpl.Set(relu_dropout_prob=0.1)
  opt_p = optimizers.Adafactor.Params().Set(learning_rate=0.01, warmup_steps=1)
  dist = learner.Learner(p, opt_p, sharding.Partitioner('dtensor', 'data:2,expert:4'))
  ref = learner.Learner(p, opt_p, sharding.Partitioner('none'))
  w0 = dist.Weights()
  loss = float(dist.Fetch(dist.TrainStep(Batch())['loss']))
  ref_loss = float(ref.Fetch(ref.TrainStep(Batch())['loss']))
  assert np.isfinite(loss) and abs(loss - ref_loss) < 0.1 * ref_loss
  w1 = dist.Weights()
  assert sum(not np.array_equal(w1[k], w0[k]) for k in w0) > 0.9 * len(w0)


class _CountingStrategy(tf.distribute.OneDeviceStrategy):
  """The real one-device strategy, counting the steps that go through its `run`."""
  runs = 0

  def run(self, fn, args=(), kwargs=None, options=None):
    type(self).runs += 1
    return super().run(fn, args=args, kwargs=kwargs, options=options)


def test_xla_step_runs_through_the_strategy_like_without_it():
  """--tpu's path with a CPU strategy standing in for TPUStrategy: variables made under its scope, the step
  run by `strategy.run` inside the compiled function, and the same losses and weights as the plain xla step."""
  opt_p = optimizers.Adafactor.Params().Set(learning_rate=0.01, warmup_steps=1)
  strategy = _CountingStrategy('/cpu:0')
  mesh = sharding.Partitioner('xla', 'data:2,expert:4')
  with strategy.scope():
    dist = learner.Learner(TinyMoE(), opt_p, mesh, runner=step_runner.StepRunner(mesh, strategy=strategy))
  plain = learner.Learner(TinyMoE(), opt_p, sharding.Partitioner('xla', 'data:2,expert:4'))
  for _ in range(2):
    m_dist, m_plain = dist.TrainStep(Batch()), plain.TrainStep(Batch())
    for k in ('loss', 'aux_loss', 'grad_norm'):
      np.testing.assert_allclose(float(dist.Fetch(m_dist[k])), float(plain.Fetch(m_plain[k])), rtol=1e-5)
  assert _CountingStrategy.runs >= 1  # traced through strategy.run
  w = plain.Weights()
  for path, v in dist.Weights().items():
    np.testing.assert_allclose(v, w[path], rtol=1e-5, atol=1e-6, err_msg=path)
  with pytest.raises(sharding.mesh_lib.MeshError, match='strategy runs the xla backend'):
    step_runner.StepRunner(sharding.Partitioner('none'), strategy=strategy)
  with pytest.raises(sharding.mesh_lib.MeshError, match='choose how the none backend runs'):
    step_runner.StepRunner(mesh, jit=False)
  with pytest.raises(ValueError, match='runs another partitioner'):
    learner.Learner(TinyMoE(), opt_p, mesh, runner=step_runner.StepRunner(sharding.Partitioner('none')))
