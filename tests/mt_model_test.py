"""Translation model: initial loss, packing, cached decoding, beam search, overfitting a batch."""
import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.models import decoding
from lingvo_gshard.models import transformer_mt

SRC_V, TGT_V = 40, 32
EOS = 2


def TinyParams(**kw):
  p = transformer_mt.TransformerMT.Params().Set(source_vocab_size=SRC_V, target_vocab_size=TGT_V, model_dim=32,
                                                num_heads=4, hidden_dim=64, **kw)
  p.encoder.num_layers = 2
  p.decoder.num_layers = 2
  return p


def Examples(n=4, seed=0):
  """n (source, target) pairs of different lengths; targets end with EOS."""
  rng = np.random.RandomState(seed)
  out = []
  for i in range(n):
    src = rng.randint(3, SRC_V, size=3 + 2 * i).tolist()
    tgt = rng.randint(3, TGT_V, size=2 + i).tolist() + [EOS]
    out.append((src, tgt))
  return out


def Unpacked(examples, length=12, tag=1):
  """One example per row."""
  b = len(examples)
  batch = {k: np.zeros((b, length), np.int32) for k in (
      'src_ids', 'src_segment_ids', 'src_positions', 'tgt_ids', 'tgt_labels', 'tgt_segment_ids',
      'tgt_positions')}
  batch['tgt_weights'] = np.zeros((b, length), np.float32)
  for r, (src, tgt) in enumerate(examples):
    _Put(batch, r, 0, src, tgt, 1, tag)
  return batch


def _Put(batch, row, offset_src, src, tgt, segment, tag, offset_tgt=None):
  offset_tgt = offset_src if offset_tgt is None else offset_tgt
  s = slice(offset_src, offset_src + len(src))
  batch['src_ids'][row, s] = src
  batch['src_segment_ids'][row, s] = segment
  batch['src_positions'][row, s] = np.arange(len(src))
  t = slice(offset_tgt, offset_tgt + len(tgt))
  batch['tgt_ids'][row, t] = [tag] + tgt[:-1]
  batch['tgt_labels'][row, t] = tgt
  batch['tgt_segment_ids'][row, t] = segment
  batch['tgt_positions'][row, t] = np.arange(len(tgt))
  batch['tgt_weights'][row, t] = 1.0


def Packed(examples, length=24, tag=1):
  """Examples 0+3 in row 0, 1+2 in row 1 (sources and targets packed independently)."""
  batch = {k: np.zeros((2, length), np.int32) for k in (
      'src_ids', 'src_segment_ids', 'src_positions', 'tgt_ids', 'tgt_labels', 'tgt_segment_ids',
      'tgt_positions')}
  batch['tgt_weights'] = np.zeros((2, length), np.float32)
  places = {}
  for row, members in enumerate(((0, 3), (1, 2))):
    so = to = 0
    for seg, i in enumerate(members, 1):
      src, tgt = examples[i]
      _Put(batch, row, so, src, tgt, seg, tag, offset_tgt=to)
      places[i] = (row, to)
      so += len(src)
      to += len(tgt)
  return batch, places


@pytest.fixture(scope='module')
def model():
  return TinyParams().Instantiate().InstantiateVariables()


def test_initial_loss_is_ln_vocab(model):
  _, metrics = tf.function(model.FProp, jit_compile=True)(Unpacked(Examples()))
  assert abs(float(metrics['xent']) - np.log(TGT_V)) < 0.15, float(metrics['xent'])


def test_packed_equals_unpacked(model):
  examples = Examples()
  unpacked = Unpacked(examples)
  packed, places = Packed(examples)
  _, mu = model.FProp(unpacked)
  _, mp = model.FProp(packed)
  xu, xp = mu['per_token_xent'].numpy(), mp['per_token_xent'].numpy()
  for i, (_, tgt) in enumerate(examples):
    row, off = places[i]
    np.testing.assert_allclose(xp[row, off:off + len(tgt)], xu[i, :len(tgt)], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(float(mp['xent']), float(mu['xent']), rtol=1e-5)


def test_cached_decoding_equals_recompute(model):
  examples = Examples()
  batch = Unpacked(examples)
  logits, _, _ = model.ComputeLogits(batch)
  ref = tf.nn.log_softmax(logits).numpy()
  max_len = batch['tgt_ids'].shape[1]
  state = model.InitDecoderState(batch['src_ids'], batch['src_segment_ids'], batch['src_positions'], max_len)
  for t in range(max_len):
    log_probs, state = model.ExtendStep(tf.constant(batch['tgt_ids'][:, t]), t, state, max_len)
    real = batch['tgt_weights'][:, t] > 0  # teacher-forced logits at padding positions are meaningless
    np.testing.assert_allclose(log_probs.numpy()[real], ref[real, t], rtol=1e-4, atol=1e-5, err_msg=f'step {t}')


def test_beam_one_equals_greedy(model):
  batch = Unpacked(Examples())
  src = [tf.constant(batch[k]) for k in ('src_ids', 'src_segment_ids', 'src_positions')]
  start = tf.ones([4], tf.int32)
  g_ids, _, g_score = decoding.GreedyDecode(model, *src, start, EOS, 10)
  b_ids, b_score = decoding.BeamSearch(model, *src, start, EOS, 10, beam_size=1, length_alpha=0.0)
  np.testing.assert_array_equal(b_ids.numpy()[:, 0], g_ids.numpy())
  np.testing.assert_allclose(b_score.numpy()[:, 0], g_score.numpy(), rtol=1e-5)
  # A wider beam finds a hypothesis at least as likely (same unnormalised score) as greedy's.
  _, b4 = decoding.BeamSearch(model, *src, start, EOS, 10, beam_size=4, length_alpha=0.0)
  assert np.all(b4.numpy()[:, 0] >= g_score.numpy() - 1e-4)
  assert np.all(np.diff(b4.numpy(), axis=1) <= 1e-6)  # sorted best first


@pytest.mark.parametrize('n, chunk', [(1000, 8), (1003, 16), (32000, 128)])
def test_top_k_by_chunks_equals_top_k(n, chunk):
  """decoding.TopK (a max per chunk, then top-k within the best chunks) gives tf.math.top_k's values and
  indices: random rows, a row whose k largest share one chunk, one with most values at beam search's -1e9."""
  k = 8
  rng = np.random.RandomState(n)
  x = rng.randn(6, n).astype(np.float32)
  x[1, 40:40 + k] += 100.0                                  # the top k in one chunk (or two)
  x[2, :n - 3] = -1e9 + x[2, :n - 3]                        # dead beams' candidates; 3 live values at the end
  x[3] = -np.abs(x[3])                                      # log-probs: all <= 0
  want = tf.math.top_k(x, k)
  for got in (decoding.TopK(tf.constant(x), k, chunk),
              tf.function(lambda t: decoding.TopK(t, k, chunk), jit_compile=True)(tf.constant(x))):
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    np.testing.assert_array_equal(np.take_along_axis(x, got[1].numpy(), 1), want[0].numpy())
    # Indices too, except among equal values (row 2's -1e9 + small values round to -1e9 in float32).
    np.testing.assert_array_equal(np.delete(got[1].numpy(), 2, 0), np.delete(want[1].numpy(), 2, 0))
    assert len(set(got[1].numpy()[2])) == k


def test_every_beam_hypothesis_scores_what_the_model_gives_it(model):
  """Each of the K hypotheses of every row, rescored by teacher forcing, has the log-probability beam search
  reports (over its length penalty): the per-beam caches followed their beams, and the K beams of a row
  attended to their own row's source."""
  examples = Examples()
  batch = Unpacked(examples)
  src = [tf.constant(batch[k]) for k in ('src_ids', 'src_segment_ids', 'src_positions')]
  start, t, k, alpha = 1, 10, 4, 0.6
  ids, scores = decoding.BeamSearch(model, *src, tf.fill([4], start), EOS, t, beam_size=k, length_alpha=alpha)
  ids, scores = ids.numpy(), scores.numpy()
  rescored = []
  for j in range(k):
    hyps = []
    for r in range(4):
      row = list(ids[r, j])
      hyps.append((examples[r][0], row[:row.index(EOS) + 1] if EOS in row else row))
    forced = Unpacked(hyps, length=t, tag=start)
    logits, _, _ = model.ComputeLogits(forced)
    lp = tf.gather(tf.nn.log_softmax(logits), forced['tgt_labels'], batch_dims=2).numpy()
    lengths = forced['tgt_weights'].sum(1)
    total = (lp * forced['tgt_weights']).sum(1)
    rescored.append(total / decoding.LengthPenalty(lengths, alpha).numpy())
  np.testing.assert_allclose(np.stack(rescored, 1), scores, rtol=1e-4, atol=1e-4)
  assert all(len({tuple(ids[r, j]) for j in range(k)}) == k for r in range(4))  # K different hypotheses


def test_cached_greedy_equals_recompute_greedy(model):
  batch = Unpacked(Examples())
  src = [tf.constant(batch[k]) for k in ('src_ids', 'src_segment_ids', 'src_positions')]
  start = tf.ones([4], tf.int32)
  ids, lengths, score = decoding.GreedyDecode(model, *src, start, EOS, 10)
  ids_r, lengths_r, score_r = tf.function(lambda *a: decoding.GreedyDecodeRecompute(model, *a, start, EOS, 10),
                                          jit_compile=True)(*src)
  np.testing.assert_array_equal(ids_r.numpy(), ids.numpy())
  np.testing.assert_array_equal(lengths_r.numpy(), lengths.numpy())
  np.testing.assert_allclose(score_r.numpy(), score.numpy(), rtol=1e-4)


def test_cache_lengths_double_from_the_first_up_to_max_len():
  assert decoding.CacheLengths(64) == [8, 16, 32, 64]
  assert decoding.CacheLengths(10, 2) == [2, 4, 8, 10]
  assert decoding.CacheLengths(8) == [8]
  assert decoding.CacheLengths(5, 8) == [5]


@pytest.mark.parametrize('jit', [False, True])
def test_growing_caches_decode_what_full_length_caches_do(model, jit):
  """Loops over caches of 2, 4, 8, then 11 positions give the ids and scores of one loop over 11-position
  caches: beam search (with and without its early stop, whose condition spans the loops) and greedy."""
  batch = Unpacked(Examples())
  src = [tf.constant(batch[k]) for k in ('src_ids', 'src_segment_ids', 'src_positions')]
  start, t = tf.ones([4], tf.int32), 11

  def Run(first):
    def Fn(*a):
      beam = decoding.BeamSearch(model, *a, start, EOS, t, beam_size=3, with_steps=True, first_cache_len=first)
      full = decoding.BeamSearch(model, *a, start, EOS, t, beam_size=3, early_stop=False, first_cache_len=first)
      return beam, full, decoding.GreedyDecode(model, *a, start, EOS, t, first_cache_len=first)
    return tf.nest.map_structure(lambda x: x.numpy(),
                                 (tf.function(Fn, jit_compile=True) if jit else Fn)(*src))

  (ids, scores, steps), (ids_f, scores_f), (g_ids, g_len, g_score) = Run(2)
  (ids1, scores1, steps1), (ids_f1, scores_f1), (g_ids1, g_len1, g_score1) = Run(t)
  assert steps == steps1 and steps > 2
  for got, want in ((ids, ids1), (ids_f, ids_f1), (g_ids, g_ids1), (g_len, g_len1)):
    np.testing.assert_array_equal(got, want)
  for got, want in ((scores, scores1), (scores_f, scores_f1), (g_score, g_score1)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def Overfit(p, steps, lr=1e-2):
  model = p.Instantiate().InstantiateVariables()
  batch = Unpacked(Examples())
  variables = [v for _, v in model.IterVariables()]
  opt = tf.keras.optimizers.Adam(lr)

  @tf.function(jit_compile=True)
  def Step(seed):
    with tf.GradientTape() as tape:
      loss, metrics = model.FProp(batch, seed)
    opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return metrics['xent']

  for i in range(steps):
    xent = Step(tf.constant([i, 0]))
  _, metrics = model.FProp(batch)
  return float(metrics['xent'])


def test_tiny_dense_overfits():
  assert Overfit(TinyParams(label_smoothing=0.0), 200) < 0.05


def _LossAndGrads(model, batch):
  variables = [v for _, v in model.IterVariables()]
  with tf.GradientTape() as tape:
    loss, _ = model.FProp(batch)
  return float(loss), [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, variables)]


def test_remat_gives_the_same_loss_and_gradients():
  from lingvo_gshard.layers import moe_layer
  def Params(remat):
    p = TinyParams()
    for stack in (p.encoder, p.decoder):
      stack.remat = remat
      stack.moe_tpl = moe_layer.MoELayer.Params().Set(num_experts=4, group_size=12)
    return p
  batch = Unpacked(Examples())
  plain, remat = (Params(r).Instantiate().InstantiateVariables() for r in (False, True))
  loss0, g0 = _LossAndGrads(plain, batch)
  loss1, g1 = _LossAndGrads(remat, batch)
  # MoE routing stats survive rematerialisation (encoder and decoder MoE layers).
  stats = [k for k in remat.FProp(batch)[1] if k.startswith('moe/') and k.endswith('/aux_loss')]
  assert len(stats) == 2, stats
  assert loss0 == pytest.approx(loss1, rel=1e-6)
  for a, b in zip(g0, g1):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


def test_bfloat16_activations_track_float32():
  batch = Unpacked(Examples())
  f32 = TinyParams().Instantiate().InstantiateVariables()
  bf16 = TinyParams(fprop_dtype=tf.bfloat16).Instantiate().InstantiateVariables()  # same seeds: same weights
  loss32, g32 = _LossAndGrads(f32, batch)
  loss16, g16 = _LossAndGrads(bf16, batch)
  assert loss16 == pytest.approx(loss32, rel=0.02)
  assert all(np.isfinite(g).all() for g in g16)
  _, m = bf16.FProp(batch)
  assert m['per_token_xent'].dtype == tf.float32
  cos = [np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30) for a, b in zip(g32, g16)
         if np.linalg.norm(a) > 0]
  assert np.median(cos) > 0.99


def test_tiny_moe_overfits():
  from lingvo_gshard.layers import moe_layer
  p = TinyParams(label_smoothing=0.0)
  for stack in (p.encoder, p.decoder):
    stack.moe_tpl = moe_layer.MoELayer.Params().Set(num_experts=4, group_size=12)
  assert Overfit(p, 500) < 0.05


def _RepeatsNgram(tokens, n):
  grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
  return len(grams) != len(set(grams))


@pytest.mark.parametrize('n', [2, 3])
def test_repeated_ngram_bans_equal_a_python_reference(n):
  """RepeatedNgramBans at every step of random sequences over 4 tokens (repeats everywhere) bans exactly the
  tokens that would repeat an n-gram of the tokens before that step."""
  rng = np.random.RandomState(n)
  seq = rng.randint(0, 4, size=(5, 9)).astype(np.int32)
  for step in range(10):
    got = decoding.RepeatedNgramBans(tf.constant(seq), tf.constant(step), n, 6).numpy()
    for r in range(5):
      prefix = list(seq[r, :step])
      earlier = {tuple(prefix[i:i + n]) for i in range(len(prefix) - n + 1)}
      want = {v for v in range(6) if step >= n - 1 and tuple(prefix[step - n + 1:] + [v]) in earlier}
      assert set(np.flatnonzero(got[r])) == want, (step, r, prefix)


def test_beam_search_without_repeated_ngrams(model):
  """With no_repeat_ngram=2 no hypothesis repeats a bigram (the untrained model's do), and each still scores
  what the model gives it: the bans remove candidates, they do not change the chosen tokens' log-probs."""
  batch = Unpacked(Examples())
  src = [tf.constant(batch[k]) for k in ('src_ids', 'src_segment_ids', 'src_positions')]
  start, t = tf.ones([4], tf.int32), 12

  def Hyps(ids):
    rows = [list(r) for r in ids.numpy()[:, 0]]
    return [r[:r.index(EOS)] if EOS in r else r for r in rows]

  free, _ = decoding.BeamSearch(model, *src, start, EOS, t, beam_size=4, length_alpha=0.0)
  assert any(_RepeatsNgram(h, 2) for h in Hyps(free))
  ids, scores = decoding.BeamSearch(model, *src, start, EOS, t, beam_size=4, length_alpha=0.0, no_repeat_ngram=2)
  assert not any(_RepeatsNgram(h, 2) for h in Hyps(ids))
  hyps = [(e[0], list(r[:list(r).index(EOS) + 1]) if EOS in r else list(r))
          for e, r in zip(Examples(), ids.numpy()[:, 0])]
  forced = Unpacked(hyps, length=t, tag=1)
  logits, _, _ = model.ComputeLogits(forced)
  lp = tf.gather(tf.nn.log_softmax(logits), forced['tgt_labels'], batch_dims=2).numpy()
  np.testing.assert_allclose((lp * forced['tgt_weights']).sum(1), scores.numpy()[:, 0], rtol=1e-4, atol=1e-4)
