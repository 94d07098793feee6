"""MoE layers in incremental decoding: a decoding step drops no token, padded tokens (dead beams, settled or
absent rows) claim no expert capacity, and a sentence decodes the same whatever shares its batch."""
import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.layers import moe_layer
from lingvo_gshard.models import decoding

import mt_model_test as mt

M, H, E = 16, 32, 4


def _Layer(**kw):
  p = moe_layer.MoELayer.Params().Set(name='moe', input_dim=M, hidden_dim=H, num_experts=E, group_size=64, **kw)
  return p.Instantiate().InstantiateVariables()


def _NumpyTop2(layer, x):
  """[N,M] -> [N,M]: every token through its two best experts, gates renormalised (nothing dropped)."""
  gate, wi, wo = (getattr(layer.w, k).numpy() for k in ('gate', 'wi', 'wo'))
  logits = x @ gate
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  out = np.zeros_like(x)
  for n in range(len(x)):
    e1, e2 = np.argsort(-probs[n])[:2]
    g1, g2 = probs[n, e1], probs[n, e2]
    for e, g in ((e1, g1), (e2, g2)):
      out[n] += g / (g1 + g2) * (np.maximum(x[n] @ wi[e], 0) @ wo[e])
  return out


def test_decode_step_routes_every_token_to_its_two_experts():
  """The default decode capacity is the group size: 48 tokens of one step, many on the same experts, each get
  the NumPy top-2 output; FProp at training's capacity factor (C = 2S/E) drops some of these."""
  layer = _Layer()
  rng = np.random.RandomState(0)
  # 3 distinct tokens, 16 copies each: the copies share their experts, as the start tags of a first step do.
  x = np.repeat(rng.randn(3, M).astype(np.float32), 16, axis=0)[:, None, :]
  y = layer.ExtendStep(tf.constant(x)).numpy()
  np.testing.assert_allclose(y[:, 0], _NumpyTop2(layer, x[:, 0]), rtol=1e-4, atol=1e-5)
  y_eval, _, stats = layer.FProp(tf.constant(x), tf.zeros([48, 1]))
  assert float(stats['dropped_fraction']) > 0.1
  assert np.sum(np.all(y_eval[:, 0] == 0, axis=-1)) == int(round(48 * float(stats['dropped_fraction'])))


def test_padded_tokens_claim_no_capacity():
  """With a capacity of 4 slots an expert, 16 copies of a token: unpadded, the first 4 take both experts'
  slots and 12 get nothing; with copies 1..15 padded, copy 0 keeps its full output and the rest output 0."""
  layer = _Layer(decode_capacity_factor=0.5)  # C = max(int(16 * 0.5 / 4), min_capacity 4) = 4
  rng = np.random.RandomState(1)
  x = np.repeat(rng.randn(1, M).astype(np.float32), 16, axis=0)[:, None, :]
  want = _NumpyTop2(layer, x[:1, 0])
  y = layer.ExtendStep(tf.constant(x)).numpy()[:, 0]
  np.testing.assert_allclose(y[:4], np.repeat(want, 4, 0), rtol=1e-4, atol=1e-5)
  np.testing.assert_array_equal(y[4:], 0)
  paddings = np.ones([16, 1], np.float32)
  paddings[0] = 0
  y = layer.ExtendStep(tf.constant(x), tf.constant(paddings)).numpy()[:, 0]
  np.testing.assert_allclose(y[:1], want, rtol=1e-4, atol=1e-5)
  np.testing.assert_array_equal(y[1:], 0)


@pytest.fixture(scope='module')
def moe_model():
  """The tiny translation model with an MoE FFN in the second layer of each stack; teacher-forced FProp at
  capacity factor E drops no token either, so it is the reference for decoding."""
  p = mt.TinyParams()
  for stack in (p.encoder, p.decoder):
    stack.moe_tpl = moe_layer.MoELayer.Params().Set(num_experts=E, hidden_dim=32, group_size=64,
                                                    eval_capacity_factor=float(E))
  return p.Instantiate().InstantiateVariables()


def _Sources(batch):
  return [tf.constant(batch[k]) for k in ('src_ids', 'src_segment_ids', 'src_positions')]


def test_moe_cached_decoding_equals_teacher_forcing(moe_model):
  batch = mt.Unpacked(mt.Examples())
  ref = tf.nn.log_softmax(moe_model.ComputeLogits(batch)[0]).numpy()
  max_len = batch['tgt_ids'].shape[1]
  state = moe_model.InitDecoderState(*_Sources(batch), max_len)
  for t in range(max_len):
    log_probs, state = moe_model.ExtendStep(tf.constant(batch['tgt_ids'][:, t]), t, state, max_len)
    real = batch['tgt_weights'][:, t] > 0
    np.testing.assert_allclose(log_probs.numpy()[real], ref[real, t], rtol=1e-4, atol=1e-5, err_msg=f'step {t}')


def test_moe_greedy_equals_recompute(moe_model):
  src = _Sources(mt.Unpacked(mt.Examples()))
  start = tf.ones([4], tf.int32)
  ids, lengths, score = decoding.GreedyDecode(moe_model, *src, start, mt.EOS, 10)
  ids_r, lengths_r, score_r = decoding.GreedyDecodeRecompute(moe_model, *src, start, mt.EOS, 10)
  np.testing.assert_array_equal(ids.numpy(), ids_r.numpy())
  np.testing.assert_array_equal(lengths.numpy(), lengths_r.numpy())
  np.testing.assert_allclose(score.numpy(), score_r.numpy(), rtol=1e-4)


def _Beam(model, batch, n_rows=None):
  src = _Sources(batch)
  b = src[0].shape[0]
  fn = tf.function(lambda *a: decoding.BeamSearch(model, *a, tf.ones([b], tf.int32), mt.EOS, 10, beam_size=3,
                                                  with_steps=True))
  ids, scores, steps = fn(*src)
  return ids.numpy()[:n_rows], scores.numpy()[:n_rows], int(steps)


@pytest.mark.parametrize('which', ['dense', 'moe'])
def test_a_sentence_decodes_the_same_alone_in_a_batch_or_beside_absent_rows(moe_model, which):
  """Beam search of each example alone equals its row of the 4-example batch and of that batch padded with
  4 empty rows (absent: they add no steps and, in the MoE, claim no capacity)."""
  model = moe_model if which == 'moe' else mt.TinyParams().Instantiate().InstantiateVariables()
  examples = mt.Examples()
  ids, scores, steps = _Beam(model, mt.Unpacked(examples))
  padded = mt.Unpacked(examples + [([], [mt.EOS])] * 4)
  padded['src_ids'][4:] = padded['src_segment_ids'][4:] = padded['src_positions'][4:] = 0
  ids_p, scores_p, steps_p = _Beam(model, padded, 4)
  np.testing.assert_array_equal(ids_p, ids)
  np.testing.assert_allclose(scores_p, scores, rtol=1e-5, atol=1e-5)
  assert steps_p == steps
  for i, example in enumerate(examples):
    ids_1, scores_1, _ = _Beam(model, mt.Unpacked([example]))
    np.testing.assert_array_equal(ids_1[0], ids[i])
    np.testing.assert_allclose(scores_1[0], scores[i], rtol=1e-4, atol=1e-4)
