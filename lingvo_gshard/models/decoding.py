"""Greedy and beam-search decoding with the incremental cache of `TransformerMT.ExtendStep`.

Dimensions: B batch, K beam size, T max decode length, V target vocabulary. The first decoder input is the
target-language tag (`<2en>`-style start id per example); outputs exclude it. Both run as `tf.while_loop`s
with static shapes (one per self-attention cache length: CacheLengths), so they compile once under XLA.
"""
import functools

import tensorflow as tf

_NEG_INF = -1e9

# Activations of (XLA-compiled) decoding, whatever training used: the activation dtype is no part of the
# weights, and XLA's CPU backend computes bfloat16 by converting to float32 and back, so bfloat16 beam search
# was only slower there (docs/guides/design_measurements.md).
DECODE_FPROP_DTYPE = tf.float32


def _Tile(x, k):
  """[B,...] -> [B*K,...] (each example repeated k times, adjacent)."""
  return tf.repeat(x, k, axis=0)


def _Lengths(ids, eos_id, max_len):
  """[B] lengths including the first eos (max_len when there is none)."""
  is_eos = tf.equal(ids, eos_id)
  first = tf.cast(tf.argmax(tf.cast(is_eos, tf.int32), 1), tf.int32) + 1
  return tf.where(tf.reduce_any(is_eos, 1), first, max_len)


def CacheLengths(max_len, first_cache_len=8):
  """Self-attention cache lengths of the successive decode loops: first_cache_len, doubling, then max_len.

  Every step reads, and a beam search also gathers, the whole self-attention cache, however few positions
  are filled yet. Decoding in loops whose caches grow (steps 0-7 with 8 positions, 8-15 with 16, ...) reads
  about two thirds as much over a full-length decode as one loop with max_len positions from the first
  step, and far less when outputs end well before max_len (the evaluator decodes up to training's longest target).
  Masked positions add exact zeros to the softmax, so the outputs do not depend on the split.
  """
  out, n = [], max(1, first_cache_len)
  while n < max_len:
    out.append(n)
    n *= 2
  return out + [max_len]


def _GrowSelfCaches(state, length):
  """Pads every self-attention cache of `state` with zeros to `length` positions."""

  def Pad(t):
    pad = [[0, 0]] * len(t.shape)
    pad[1] = [0, length - t.shape[1]]
    return tf.pad(t, pad)

  caches = [dict(c, self={n: Pad(t) for n, t in c['self'].items()}) for c in state['caches']]
  return dict(state, caches=caches)


def _SegmentedLoop(cond, body, loop_vars, cache_lengths):
  """Runs `tf.while_loop(cond, body(cache_len, *loop_vars))` once per cache length, each loop until its caches
  are full; loop_vars[0] is the step and loop_vars[-1] the decoder state, whose caches grow between loops."""
  for length in cache_lengths:
    loop_vars = loop_vars[:-1] + (_GrowSelfCaches(loop_vars[-1], length),)
    loop_vars = tf.while_loop(lambda step, *rest, n=length: (step < n) & cond(step, *rest),
                              functools.partial(body, length), loop_vars)
  return loop_vars


def GreedyDecode(model, src_ids, src_segment_ids, src_positions, start_ids, eos_id, max_len,
                 first_cache_len=None):
  """-> (ids [B,T] int32, padded with eos after the first eos; lengths [B] incl. eos; scores [B]).

  `first_cache_len`: see CacheLengths (>= max_len: one loop over full-length caches; default: the model's
  decode_first_cache_length)."""
  lengths = CacheLengths(max_len, first_cache_len or model.p.decode_first_cache_length)
  state = model.InitDecoderState(src_ids, src_segment_ids, src_positions, lengths[0])
  b = tf.shape(src_ids)[0]

  def Body(cache_len, step, ids, prev, done, score, state):
    log_probs, state = model.ExtendStep(prev, step, state, cache_len, paddings=done)
    nxt = tf.cast(tf.argmax(log_probs, -1), tf.int32)
    nxt = tf.where(done, eos_id, nxt)
    score += tf.where(done, 0.0, tf.gather(log_probs, nxt, batch_dims=1))
    ids = ids + tf.one_hot(step, max_len, dtype=tf.int32)[None, :] * nxt[:, None]
    return step + 1, ids, nxt, done | tf.equal(nxt, eos_id), score, state

  init = (tf.constant(0), tf.zeros([b, max_len], tf.int32), tf.cast(start_ids, tf.int32),
          tf.zeros([b], tf.bool), tf.zeros([b]), state)
  _, ids, _, _, score, _ = _SegmentedLoop(lambda step, *_: step < max_len, Body, init, lengths)
  return ids, _Lengths(ids, eos_id, max_len), score


def TopK(x, k, chunk=128):
  """tf.math.top_k(x, k) over the last axis of a [B, N] x (values, indices), for small k and large N.

  XLA's CPU top-k over a beam's K*V candidates is a sizeable share of a beam-search step
  (docs/guides/design_measurements.md), while a max over every value is one cheap pass. The k largest values
  lie in the k chunks with the largest maxima (a value outside those chunks has k chunk maxima, each in a
  different chunk, above it), so a max per chunk, a top-k over the chunk maxima and one over the k*chunk
  values of those chunks give the same values and indices (among equal values the chosen indices may differ).
  """
  n = x.shape[-1]
  if n is None or n <= 2 * k * chunk:
    return tf.math.top_k(x, k)
  pad = -n % chunk
  if pad:
    x = tf.pad(x, [[0, 0], [0, pad]], constant_values=float('-inf'))
  chunks = tf.reshape(x, [-1, (n + pad) // chunk, chunk])                        # [B,C,chunk]
  _, best = tf.math.top_k(tf.reduce_max(chunks, -1), k)                          # [B,k]
  values, at = tf.math.top_k(tf.reshape(tf.gather(chunks, best, batch_dims=1), [-1, k * chunk]), k)
  return values, tf.gather(best, at // chunk, batch_dims=1) * chunk + at % chunk


def LengthPenalty(length, alpha):
  """GNMT's ((5 + |Y|) / 6)^alpha."""
  return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def RepeatedNgramBans(seq, step, n, vocab):
  """[N,V] bool: the tokens that would make the n-gram ending at position `step` of `seq` ([N,T] int32, tokens
  at positions < step) one that already occurs in it (fairseq's and Hugging Face's no_repeat_ngram_size)."""
  t = seq.shape[1]
  starts = t - n + 1
  if starts <= 0:
    return tf.zeros([tf.shape(seq)[0], vocab], tf.bool)
  last = tf.gather(seq, tf.maximum(step - (n - 1), 0) + tf.range(n - 1), axis=1)         # [N,n-1]
  match = tf.broadcast_to(step >= n - 1, tf.shape(seq[:, :starts]))
  for j in range(n - 1):
    match &= tf.equal(seq[:, j:j + starts], last[:, j:j + 1])
  match &= (tf.range(starts) + n - 1 < step)[None, :]  # the earlier n-gram's last token is already there
  rows = tf.broadcast_to(tf.range(tf.shape(seq)[0])[:, None], tf.shape(match))
  index = tf.stack([rows, seq[:, n - 1:]], -1)                                             # [N,starts,2]
  return tf.scatter_nd(tf.reshape(index, [-1, 2]), tf.reshape(tf.cast(match, tf.int32), [-1]),
                       [tf.shape(seq)[0], vocab]) > 0


def BeamSearch(model, src_ids, src_segment_ids, src_positions, start_ids, eos_id, max_len, beam_size=4,
               length_alpha=0.6, early_stop=True, with_steps=False, no_repeat_ngram=0, first_cache_len=None):
  """-> (ids [B,K,T], scores [B,K] length-normalised, best first), and with `with_steps` the number of
  decoder steps run. Hypotheses that never emit eos by
  max_len compete as finished at length T. With `no_repeat_ngram` = n > 0 no hypothesis contains the same
  n tokens twice (RepeatedNgramBans): an under-trained model's beam otherwise loops on a word or phrase.

  With `early_stop` the loop ends as soon as no alive hypothesis of any row can still enter that row's K
  finished ones (T2T's bound: log-probs only fall and the length penalty grows up to LengthPenalty(T), so an
  alive beam's best possible finished score is its log-prob / LengthPenalty(T)). The result is the same as
  running all T steps; only the steps that cannot change it are skipped. `first_cache_len`: see CacheLengths
  (default: the model's decode_first_cache_length).

  Rows whose source is all padding (src_segment_ids 0) are absent: they do not keep the loop running and their
  outputs are meaningless. The tokens of absent rows, of rows that can no longer change (the bound above),
  and of dead beams (the K-1 copies of the first step, beams that fell to -1e9) are padding for the model
  (ExtendStep's paddings): they claim no MoE expert capacity, which the live tokens of the step need.
  """
  if early_stop and length_alpha < 0:
    raise ValueError(f'length_alpha must be >= 0 with early_stop (got {length_alpha}): the stopping bound '
                     'assumes the length penalty grows with length')
  k = beam_size
  b = tf.shape(src_ids)[0]
  # The source is encoded once per row (K copies would repeat the encoder's work K times), and its
  # cross-attention keys, values and mask stay one per row: attention reads them for all K beams of the row.
  # Only the self-attention caches, which differ per beam, are K per row.
  lengths = CacheLengths(max_len, first_cache_len or model.p.decode_first_cache_length)
  state = model.InitDecoderState(src_ids, src_segment_ids, src_positions, lengths[0])
  state['caches'] = [dict(c, self={n: _Tile(t, k) for n, t in c['self'].items()}) for c in state['caches']]
  vocab = model.p.target_vocab_size
  # Only the first beam is alive at the start, so the first step does not pick K copies of one token.
  alive_lp = tf.tile(tf.constant([[0.0] + [_NEG_INF] * (k - 1)]), [b, 1])
  alive_seq = tf.zeros([b, k, max_len], tf.int32)
  fin_seq = tf.zeros([b, k, max_len], tf.int32)
  fin_score = tf.fill([b, k], _NEG_INF)
  prev = _Tile(tf.cast(start_ids, tf.int32), k)
  present = tf.reduce_any(tf.not_equal(src_segment_ids, 0), axis=1)                # [B]
  max_penalty = LengthPenalty(max_len, length_alpha)

  def Settled(alive_lp, fin_score):
    """[B] True where no alive beam can still enter the row's K finished ones (see above), or no row."""
    if length_alpha < 0:  # the bound needs a length penalty that grows with length
      return tf.logical_not(present)
    best_alive = tf.reduce_max(alive_lp, 1) / max_penalty        # log-probs are <= 0
    worst_finished = tf.reduce_min(fin_score, 1)                   # _NEG_INF while a slot is empty
    return tf.logical_not(present & (best_alive > worst_finished))

  def GatherBeams(x, idx):
    """x: [B*K,...], idx: [B,K] beam indices -> [B*K,...]."""
    shape = tf.shape(x)
    x = tf.reshape(x, tf.concat([[b, k], shape[1:]], 0))
    return tf.reshape(tf.gather(x, idx, batch_dims=1), shape)

  def Body(cache_len, step, prev, alive_lp, alive_seq, fin_seq, fin_score, state):
    idle = (alive_lp < _NEG_INF / 2) | Settled(alive_lp, fin_score)[:, None]     # [B,K]
    log_probs, state = model.ExtendStep(prev, step, state, cache_len, paddings=tf.reshape(idle, [-1]))
    if no_repeat_ngram:
      banned = RepeatedNgramBans(tf.reshape(alive_seq, [b * k, max_len]), step, no_repeat_ngram, vocab)
      log_probs = tf.where(banned, _NEG_INF, log_probs)
    cand = alive_lp[:, :, None] + tf.reshape(log_probs, [b, k, vocab])          # [B,K,V]
    top_lp, top_idx = TopK(tf.reshape(cand, [b, k * vocab]), 2 * k)              # [B,2K]
    beam, token = top_idx // vocab, top_idx % vocab
    seq = tf.gather(alive_seq, beam, batch_dims=1)                                # [B,2K,T]
    seq += tf.one_hot(step, max_len, dtype=tf.int32)[None, None, :] * token[:, :, None]
    is_eos = tf.equal(token, eos_id)
    last = tf.equal(step, max_len - 1)
    # Finished candidates: those that emit eos, or every candidate at the last step.
    ends = is_eos | last
    new_fin = tf.where(ends, top_lp / LengthPenalty(step + 1, length_alpha), _NEG_INF)
    all_score = tf.concat([fin_score, new_fin], 1)
    all_seq = tf.concat([fin_seq, seq], 1)
    fin_score, fin_idx = tf.math.top_k(all_score, k)
    fin_seq = tf.gather(all_seq, fin_idx, batch_dims=1)
    # Alive: the best K candidates that did not emit eos.
    alive_cand = tf.where(is_eos, _NEG_INF, top_lp)
    alive_lp, alive_idx = tf.math.top_k(alive_cand, k)
    alive_seq = tf.gather(seq, alive_idx, batch_dims=1)
    src_beam = tf.gather(beam, alive_idx, batch_dims=1)
    prev = tf.reshape(tf.gather(token, alive_idx, batch_dims=1), [-1])
    # Self-attention caches follow their beams; cross-attention caches are identical across a row's beams.
    caches = [dict(c, self={n: GatherBeams(t, src_beam) for n, t in c['self'].items()})
              for c in state['caches']]
    return step + 1, prev, alive_lp, alive_seq, fin_seq, fin_score, dict(state, caches=caches)

  def Continue(step, prev, alive_lp, alive_seq, fin_seq, fin_score, state):
    del prev, alive_seq, fin_seq, state
    if not early_stop:
      return step < max_len
    return (step < max_len) & tf.logical_not(tf.reduce_all(Settled(alive_lp, fin_score)))

  init = (tf.constant(0), prev, alive_lp, alive_seq, fin_seq, fin_score, state)
  out = _SegmentedLoop(Continue, Body, init, lengths)
  fin_seq, fin_score = out[4], out[5]
  # Positions after a hypothesis' eos are filled with eos, as in GreedyDecode.
  after_eos = tf.cumsum(tf.cast(tf.equal(fin_seq, eos_id), tf.int32), axis=-1, exclusive=True) > 0
  ids = tf.where(after_eos, eos_id, fin_seq)
  return (ids, fin_score, out[0]) if with_steps else (ids, fin_score)


def GreedyDecodeRecompute(model, src_ids, src_segment_ids, src_positions, start_ids, eos_id, max_len):
  """Greedy decoding without a cache: every step reruns the decoder over the whole (padded) prefix.

  The reference the cached decoder is checked and benchmarked against: O(T^2) decoder work instead of O(T).
  Returns the same (ids, lengths, scores) as GreedyDecode.
  """
  encoded, _, _ = model.Encode(src_ids, src_segment_ids, src_positions)
  b = tf.shape(src_ids)[0]
  positions = tf.tile(tf.range(max_len)[None], [b, 1])

  def Body(step, inputs, ids, done, score):
    # Segment 1 up to the current step, 0 after: the causal mask already hides the future.
    segment = tf.cast(positions <= step, tf.int32)
    batch = {'tgt_ids': inputs, 'tgt_positions': positions, 'tgt_segment_ids': segment,
             'src_segment_ids': src_segment_ids}
    logits, _, _ = model.Decode(encoded, batch)
    log_probs = tf.nn.log_softmax(tf.gather(logits, step, axis=1))
    nxt = tf.where(done, eos_id, tf.cast(tf.argmax(log_probs, -1), tf.int32))
    score += tf.where(done, 0.0, tf.gather(log_probs, nxt, batch_dims=1))
    at = tf.one_hot(step, max_len, dtype=tf.int32)[None, :]
    ids += at * nxt[:, None]
    nxt_at = tf.one_hot(step + 1, max_len, dtype=tf.int32)[None, :]
    inputs += nxt_at * nxt[:, None]
    return step + 1, inputs, ids, done | tf.equal(nxt, eos_id), score

  inputs = tf.one_hot(0, max_len, dtype=tf.int32)[None, :] * tf.cast(start_ids, tf.int32)[:, None]
  init = (tf.constant(0), inputs, tf.zeros([b, max_len], tf.int32), tf.zeros([b], tf.bool), tf.zeros([b]))
  _, _, ids, _, score = tf.while_loop(lambda step, *_: step < max_len, Body, init)
  return ids, _Lengths(ids, eos_id, max_len), score
