"""The source reaches the decoder: a tiny model learns to reverse random sequences it has never seen.

A decoder that ignored its input could not get below the entropy of the random tokens (ln 20 ~ 3 nats a
token); this one reaches near-zero loss and reverses fresh sequences exactly, through greedy and through beam
search, with and without the beam's early stop.
"""
import numpy as np
import tensorflow as tf

from lingvo_gshard.core import optimizers
from lingvo_gshard.core import sharding
from lingvo_gshard.models import decoding
from lingvo_gshard.models import transformer_mt
from lingvo_gshard.runtime import learner as learner_lib

VOCAB, EOS, TAG, LENGTH = 24, 1, 2, 12   # tokens 3..23 are data


def _Batch(rng, rows, length=LENGTH):
  batch = {k: np.zeros((rows, length), np.int32) for k in (
      'src_ids', 'src_segment_ids', 'src_positions', 'tgt_ids', 'tgt_labels', 'tgt_segment_ids',
      'tgt_positions')}
  batch['tgt_weights'] = np.zeros((rows, length), np.float32)
  for r in range(rows):
    n = rng.randint(3, length - 1)
    src = rng.randint(3, VOCAB, size=n).tolist() + [EOS]
    tgt = src[-2::-1] + [EOS]
    batch['src_ids'][r, :n + 1] = src
    batch['src_segment_ids'][r, :n + 1] = 1
    batch['src_positions'][r, :n + 1] = np.arange(n + 1)
    batch['tgt_ids'][r, :n + 1] = [TAG] + tgt[:-1]
    batch['tgt_labels'][r, :n + 1] = tgt
    batch['tgt_segment_ids'][r, :n + 1] = 1
    batch['tgt_positions'][r, :n + 1] = np.arange(n + 1)
    batch['tgt_weights'][r, :n + 1] = 1.0
  return batch


def test_tiny_model_learns_to_reverse_unseen_sequences():
  p = transformer_mt.TransformerMT.Params().Set(
      source_vocab_size=VOCAB, target_vocab_size=VOCAB, model_dim=64, num_heads=4, hidden_dim=128,
      label_smoothing=0.0)
  p.encoder.num_layers = p.decoder.num_layers = 2
  opt = optimizers.Adam.Params().Set(learning_rate=3e-3, warmup_steps=50, schedule='cosine',
                                     total_steps=700, final_fraction=0.05)
  learner = learner_lib.Learner(p, opt, sharding.Partitioner('none'), seed=5)
  rng = np.random.RandomState(0)
  xents = []
  for _ in range(700):
    xents.append(float(learner.TrainStep(_Batch(rng, 64))['xent']))
  assert np.mean(xents[:10]) > 2.5          # starts at about ln(24)
  assert np.mean(xents[-20:]) < 0.05, xents[-20:]

  test = _Batch(np.random.RandomState(99), 32)   # sequences never trained on
  src = [tf.constant(test[k]) for k in ('src_ids', 'src_segment_ids', 'src_positions')]
  start = tf.fill([32], TAG)
  want = [list(row[row > 0]) for row in test['tgt_labels']]
  greedy, _, _ = decoding.GreedyDecode(learner.model, *src, start, EOS, LENGTH)
  got = [list(row[:list(row).index(EOS) + 1]) if EOS in row else list(row) for row in greedy.numpy()]
  assert sum(g == w for g, w in zip(got, want)) >= 30, (got[:3], want[:3])

  # Beam search with its early stop returns what running every step returns, and reverses as well.
  # Decoding up to 3x the length the model was trained on: the stop comes long before.
  stopped, s_scores, steps = decoding.BeamSearch(learner.model, *src, start, EOS, 3 * LENGTH, beam_size=3,
                                                 with_steps=True)
  full, f_scores, all_steps = decoding.BeamSearch(learner.model, *src, start, EOS, 3 * LENGTH, beam_size=3,
                                                  early_stop=False, with_steps=True)
  assert int(all_steps) == 3 * LENGTH and int(steps) <= LENGTH + 2, int(steps)
  np.testing.assert_array_equal(stopped.numpy(), full.numpy())
  np.testing.assert_allclose(s_scores.numpy(), f_scores.numpy(), rtol=1e-6)
  best = [list(row[:list(row).index(EOS) + 1]) if EOS in row else list(row) for row in stopped.numpy()[:, 0]]
  assert sum(g == w for g, w in zip(best, want)) >= 30
