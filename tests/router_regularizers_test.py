"""Router z-loss, router jitter and expert output masking: NumPy references, where their gradients and noise
go, train-only, and all three off by default."""
import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.layers import gating
from lingvo_gshard.layers import moe
from lingvo_gshard.layers import moe_layer
from lingvo_gshard.models import transformer_mt
import mt_model_test

B, L, M, H, E = 4, 16, 16, 32, 4


def _Layer(**kw):
  kw.setdefault('group_size', 64)
  kw.setdefault('capacity_factor', float(E))  # C = S: no choice is dropped, so outputs are exact sums
  kw.setdefault('eval_capacity_factor', float(E))
  return moe_layer.MoELayer.Params().Set(input_dim=M, hidden_dim=H, num_experts=E, **kw).Instantiate(
  ).InstantiateVariables(seed=3)


def _LogSumExp(a):
  top = a.max(-1, keepdims=True)
  return (top + np.log(np.exp(a - top).sum(-1, keepdims=True)))[..., 0]


def test_z_loss_and_max_logit_match_numpy_over_non_padding_tokens():
  logits = tf.random.stateless_normal([2, 24, E], seed=[1, 2]) * 3.0
  paddings = tf.cast(tf.random.stateless_uniform([2, 24], seed=[3, 4]) < 0.3, tf.float32)
  real = paddings.numpy() < 0.5
  for fn, kw in ((gating.top2_gating, {}), (gating.top1_gating, {}), (gating.expert_choice_gating, {})):
    r = fn(logits, capacity=8, paddings=paddings, **kw)
    lse = _LogSumExp(logits.numpy())
    np.testing.assert_allclose(r.router_z_loss.numpy(), np.mean(lse[real] ** 2), rtol=1e-5)
    np.testing.assert_allclose(r.router_logit_max.numpy(), np.abs(logits.numpy()[real]).max(), rtol=1e-6)
    first = logits.numpy().argmax(-1)
    np.testing.assert_array_equal(r.expert_tokens.numpy(), np.bincount(first[real], minlength=E))


def test_z_loss_gradient_is_numpys_and_reaches_the_router_but_not_the_experts():
  """d/dW mean_t lse_t^2 = mean_t 2 lse_t x_t softmax_t^T for logits = x W; wi and wo get nothing."""
  x = tf.random.stateless_normal([1, 32, M], seed=[5, 6])
  w_gate = tf.Variable(tf.random.stateless_normal([M, E], seed=[7, 8]))
  wi = tf.Variable(tf.random.stateless_normal([E, M, H], seed=[9, 1]) * 0.1)
  wo = tf.Variable(tf.random.stateless_normal([E, H, M], seed=[2, 3]) * 0.1)
  with tf.GradientTape() as tape:
    _, _, stats = moe.moe_ffn(x, w_gate, wi, wo, capacity=32)
    z = stats['router_z_loss']
  g_gate, g_wi, g_wo = tape.gradient(z, [w_gate, wi, wo])
  xs, logits = x.numpy()[0], x.numpy()[0] @ w_gate.numpy()
  lse = _LogSumExp(logits)
  soft = np.exp(logits - lse[:, None])
  np.testing.assert_allclose(z.numpy(), np.mean(lse ** 2), rtol=1e-5)
  np.testing.assert_allclose(g_gate.numpy(), xs.T @ (2 * lse[:, None] * soft) / len(xs), rtol=1e-4, atol=1e-6)
  assert g_wi is None and g_wo is None


def _TinyMoE(**kw):
  p = mt_model_test.TinyParams(**kw)
  p.encoder.moe_tpl = moe_layer.MoELayer.Params().Set(num_experts=E, group_size=64)
  p.decoder.moe_tpl = moe_layer.MoELayer.Params().Set(num_experts=E, group_size=64)
  p.encoder.remat = True  # the z-loss leaves a layer as a stat: its gradient must survive recompute_grad
  return p.Instantiate().InstantiateVariables(seed=1)


def test_the_model_adds_the_weighted_z_loss_and_its_gradient_reaches_only_the_routers():
  batch = mt_model_test.Unpacked(mt_model_test.Examples())
  losses, metrics, grads = {}, {}, {}
  for weight in (0.0, 0.5):
    model = _TinyMoE(router_z_loss_weight=weight)
    variables = dict(model.IterVariables())
    with tf.GradientTape() as tape:
      losses[weight], metrics[weight] = model.FProp(batch, None)
    grads[weight] = {k: tf.convert_to_tensor(g).numpy() for k, g in
                     zip(variables, tape.gradient(losses[weight], list(variables.values())))}
  z = metrics[0.0]['router_z_loss'].numpy()
  assert z > 0 and z == metrics[0.5]['router_z_loss'].numpy()  # logged while off; the same weights
  np.testing.assert_allclose(losses[0.5].numpy() - losses[0.0].numpy(), 0.5 * z, rtol=1e-5)
  moved = {k for k in grads[0.0] if np.abs(grads[0.5][k] - grads[0.0][k]).max() > 1e-7}
  # The z-loss reaches the routers, and through the routers' inputs every layer below a router (a decoder
  # router reads the encoder's output through cross-attention, so the encoder's experts too); never the
  # experts of the layer it routes (moe_ffn's test above), so nothing above the decoder's router.
  assert {k for k in moved if k.endswith('gate')} == {k for k in grads[0.0] if k.endswith('gate')}
  top = 'transformermt.decoder.layers_1.ffn.'
  assert not [k for k in moved if k.startswith((top + 'wi', top + 'wo', 'transformermt.decoder.final_ln'))]
  assert top + 'wi' in grads[0.0] and 'transformermt.decoder.final_ln.scale' in grads[0.0]


def test_defaults_are_off_and_the_model_loss_does_not_move():
  p = moe_layer.MoELayer.Params()
  assert p.router_jitter == 0.0 and p.expert_output_mask_prob == 0.0
  assert transformer_mt.TransformerMT.Params().router_z_loss_weight == 0.0


def test_jitter_multiplies_the_router_input_only_by_uniform_noise_at_train_and_is_off_at_eval():
  eps = 0.2
  x = tf.random.stateless_normal([B, L, M], seed=[1, 1])
  noise = moe_layer._Jitter(tf.ones([64, 256]), eps, tf.constant([4, 5])).numpy()
  assert noise.min() >= 1 - eps and noise.max() <= 1 + eps
  assert abs(noise.mean() - 1) < 0.005 and abs(noise.std() - eps / np.sqrt(3)) < 0.005  # U(1-e, 1+e)
  plain, jittered = _Layer(), _Layer(router_jitter=eps)
  np.testing.assert_array_equal(jittered.FProp(x)[0].numpy(), plain.FProp(x)[0].numpy())  # eval: off
  seed = tf.constant([2, 9])
  # At train the experts see x itself: with the router's input jittered as the layer does, moe_ffn gives
  # the layer's output exactly.
  w = jittered._vars
  g, s = jittered.GroupShape(B * L)
  xg = tf.reshape(x, [g, s, M])
  from lingvo_gshard.core import base_layer  # pylint: disable=g-import-not-at-top
  want, _, _ = moe.moe_ffn(xg, w['gate'], w['wi'], w['wo'], capacity_factor=float(E),
                           router_input_noise=lambda t: moe_layer._Jitter(
                               t, eps, base_layer.FoldSeed(seed, f'{jittered.path}.jitter')))
  got = jittered.FProp(x, seed=seed)[0].numpy()
  np.testing.assert_allclose(got, tf.reshape(want, [B, L, M]).numpy(), rtol=1e-5, atol=1e-6)
  assert np.abs(got - plain.FProp(x, seed=seed)[0].numpy()).max() > 1e-4  # the routing moved


def test_expert_output_masking_drops_whole_expert_outputs_at_train_only():
  rate = 0.5
  rows = moe_layer._MaskRows(tf.ones([E, 512, M]), rate, tf.constant([3, 3])).numpy()
  per_row = rows.reshape(-1, M)
  assert set(np.unique(per_row)) == {0.0, 2.0} and np.all(per_row.min(1) == per_row.max(1))  # whole rows
  assert abs((per_row[:, 0] == 0).mean() - rate) < 0.03

  x = tf.random.stateless_normal([B, L, M], seed=[8, 8])
  plain, masked = _Layer(), _Layer(expert_output_mask_prob=rate)
  np.testing.assert_array_equal(masked.FProp(x)[0].numpy(), plain.FProp(x)[0].numpy())  # eval: off
  # At train, each token's output is the sum over its two experts of gate * expert output, each term kept
  # (x 1/(1-p)) or dropped on its own: one of 0, 2 g1 o1, 2 g2 o2 or 2 (g1 o1 + g2 o2).
  w = {k: v.numpy() for k, v in masked._vars.items()}
  xs = x.numpy().reshape(-1, M)
  r = gating.top2_gating(tf.constant((xs @ w['gate'])[None]), capacity=B * L)
  idx, gate = r.expert_index.numpy()[0], r.gate.numpy()[0]
  terms = np.stack([gate[:, k, None] * (np.maximum(xs[:, None] @ w['wi'][idx[:, k]], 0) @ w['wo'][idx[:, k]])[:, 0]
                    for k in range(2)], 1) / (1 - rate)  # [T, 2, M]
  y = masked.FProp(x, seed=tf.constant([1, 4]))[0].numpy().reshape(-1, M)
  kinds = []
  for t in range(len(xs)):
    options = [np.zeros(M), terms[t, 0], terms[t, 1], terms[t, 0] + terms[t, 1]]
    errors = [np.abs(y[t] - o).max() for o in options]
    assert min(errors) < 1e-4, (t, errors)
    kinds.append(int(np.argmin(errors)))
  counts = np.bincount(kinds, minlength=4) / len(kinds)
  assert all(0.1 < c < 0.4 for c in counts), counts  # each of the four cases ~ 1/4 at p = 1/2


@pytest.mark.parametrize('name', ['router_jitter', 'expert_output_mask_prob'])
def test_a_rate_of_one_or_below_zero_is_refused_where_the_param_is_declared(name):
  for bad in (1.0, -0.1):
    with pytest.raises(ValueError, match=name):
      moe_layer.MoELayer.Params().Set(input_dim=M, hidden_dim=H, **{name: bad}).Instantiate()


def test_the_router_runs_in_float32_under_bfloat16_activations():
  logits = moe.router_logits(tf.ones([1, 4, M], tf.bfloat16), tf.ones([M, E]))
  assert logits.dtype == tf.float32
