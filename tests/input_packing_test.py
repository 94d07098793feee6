"""Tests of lingvo_gshard/input/packing.py: first-fit against a NumPy reference, the row invariants, packed ==
unpacked content, and the model computing the same per-token loss on packed and unpacked rows."""
import collections
import itertools

import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.input import packing
from lingvo_gshard.models import transformer_mt

EOS, TAG = 1, 3
SRC_LEN, TGT_LEN = 24, 20


def _Examples(n, seed, src_max=SRC_LEN, tgt_max=TGT_LEN, vocab=32):
  """n random (source, target) id lists ending in EOS, lengths 1..max."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    src = rng.integers(4, vocab, size=int(rng.integers(0, src_max))).tolist() + [EOS]
    tgt = rng.integers(4, vocab, size=int(rng.integers(0, tgt_max))).tolist() + [EOS]
    out.append((src, tgt))
  return out


def _Ragged(examples):
  src = tf.ragged.constant([s for s, _ in examples], dtype=tf.int32, ragged_rank=1)
  tgt = tf.ragged.constant([t for _, t in examples], dtype=tf.int32, ragged_rank=1)
  return src, tgt, tf.fill([len(examples)], TAG)


def _NumpyFirstFit(examples, src_cap, tgt_cap):
  """Reference: rows as lists of example indices."""
  rows, fill = [], []
  for i, (s, t) in enumerate(examples):
    for r, (fs, ft) in enumerate(fill):
      if fs + len(s) <= src_cap and ft + len(t) <= tgt_cap:
        rows[r].append(i)
        fill[r] = (fs + len(s), ft + len(t))
        break
    else:
      rows.append([i])
      fill.append((len(s), len(t)))
  return rows


def _Segments(batch):
  """{(row, segment): (source ids, target labels, decoder inputs)} read back from a batch of rows."""
  b = {k: np.asarray(v) for k, v in batch.items()}
  out = {}
  for r in range(b['src_ids'].shape[0]):
    for seg in sorted(set(b['src_segment_ids'][r]) - {0}):
      s, t = b['src_segment_ids'][r] == seg, b['tgt_segment_ids'][r] == seg
      out[(r, seg)] = (b['src_ids'][r][s].tolist(), b['tgt_labels'][r][t].tolist(),
                       b['tgt_ids'][r][t].tolist())
  return out


def _CheckRows(batch, src_cap, tgt_cap):
  """The invariants every row must satisfy (module docstring of packing.py)."""
  b = {k: np.asarray(v) for k, v in batch.items()}
  assert b['src_ids'].shape[1] == src_cap and b['tgt_ids'].shape[1] == tgt_cap
  for side, names in (('src', ('src_ids',)), ('tgt', ('tgt_ids', 'tgt_labels'))):
    seg, pos = b[f'{side}_segment_ids'], b[f'{side}_positions']
    for r in range(seg.shape[0]):
      # Segments are contiguous runs 1, 2, ..., k followed by padding only.
      runs = [k for k, _ in itertools.groupby(seg[r])]
      real = [k for k in runs if k]
      assert real == list(range(1, len(real) + 1)), (side, r, runs)
      assert runs[-1] == 0 or runs == real  # Padding only at the end.
      for k in real:
        np.testing.assert_array_equal(pos[r][seg[r] == k], np.arange((seg[r] == k).sum()))
      pad = seg[r] == 0
      assert not pos[r][pad].any()
      for name in names:
        assert not b[name][r][pad].any()
  np.testing.assert_array_equal(b['tgt_weights'], (b['tgt_segment_ids'] > 0).astype(np.float32))
  assert b['tgt_weights'].dtype == np.float32 and b['src_ids'].dtype == np.int32
  # Source and target of a row have the same segment numbers (one example = one segment on both sides).
  for r in range(b['src_ids'].shape[0]):
    assert set(b['src_segment_ids'][r]) - {0} == set(b['tgt_segment_ids'][r]) - {0}


@pytest.mark.parametrize('longest', [SRC_LEN, 8])
def test_first_fit_matches_numpy_reference(longest):
  examples = _Examples(200, seed=0, src_max=longest, tgt_max=min(longest, TGT_LEN))
  src, tgt, _ = _Ragged(examples)
  rows, segments, src_off, tgt_off, num_rows = [x.numpy() for x in packing.FirstFit(
      tf.cast(src.row_lengths(), tf.int32), tf.cast(tgt.row_lengths(), tf.int32), SRC_LEN, TGT_LEN)]
  want = _NumpyFirstFit(examples, SRC_LEN, TGT_LEN)
  assert num_rows == len(want)
  for r, members in enumerate(want):
    assert [i for i in range(len(examples)) if rows[i] == r] == members
    assert [segments[i] for i in members] == list(range(1, len(members) + 1))
    for side, offsets in ((0, src_off), (1, tgt_off)):
      starts = np.cumsum([0] + [len(examples[i][side]) for i in members])[:-1]
      assert [offsets[i] for i in members] == starts.tolist()
  # Packing really packs: short examples (4.5 + eos pieces on average) share rows of 20 to 24 slots.
  assert len(want) < len(examples) * (0.7 if longest == SRC_LEN else 0.3)


@pytest.mark.parametrize('pack', [True, False])
def test_rows_hold_every_example_once_with_valid_segments(pack):
  examples = _Examples(150, seed=1)
  fn = packing.Pack if pack else packing.Unpacked
  batch = tf.function(fn)(*_Ragged(examples), SRC_LEN, TGT_LEN)
  _CheckRows(batch, SRC_LEN, TGT_LEN)
  segments = _Segments(batch)
  got = collections.Counter((tuple(s), tuple(t)) for s, t, _ in segments.values())
  assert got == collections.Counter((tuple(s), tuple(t)) for s, t in examples)
  for s, labels, inputs in segments.values():
    assert inputs == [TAG] + labels[:-1]  # Decoder input: tag, then the labels shifted right.
  if not pack:
    assert sorted(segments) == [(r, 1) for r in range(len(examples))]
    assert [tuple(segments[(r, 1)][0]) for r in range(len(examples))] == [tuple(s) for s, _ in examples]


def test_packed_equals_unpacked_content_and_empty_window():
  examples = _Examples(100, seed=2)
  packed = _Segments(packing.Pack(*_Ragged(examples), SRC_LEN, TGT_LEN))
  unpacked = _Segments(packing.Unpacked(*_Ragged(examples), SRC_LEN, TGT_LEN))
  assert len(packed) == len(unpacked) == len(examples)
  assert sorted(packed.values()) == sorted(unpacked.values())
  # A window whose examples were all filtered out gives zero rows of the right width.
  empty = packing.Pack(tf.ragged.constant([[1]], dtype=tf.int32)[:0], tf.ragged.constant([[1]],
                       dtype=tf.int32)[:0], tf.zeros([0], tf.int32), SRC_LEN, TGT_LEN)
  assert all(v.shape == (0, SRC_LEN if k.startswith('src') else TGT_LEN) for k, v in empty.items())


def test_pad_rows_gives_static_batch():
  batch = packing.Unpacked(*_Ragged(_Examples(3, seed=3)), SRC_LEN, TGT_LEN)
  padded = packing.PadRows(batch, 5)
  for name, value in padded.items():
    assert value.shape[0] == 5
    np.testing.assert_array_equal(value[:3], batch[name])
    assert not np.asarray(value[3:]).any()


def test_model_loss_is_the_same_on_packed_and_unpacked_rows():
  # The format contract with models/transformer_mt.py: each example's per-token cross-entropy must not
  # depend on what else shares its row.
  p = transformer_mt.TransformerMT.Params().Set(source_vocab_size=32, target_vocab_size=32, model_dim=32,
                                                num_heads=4, hidden_dim=64)
  p.encoder.num_layers = 1
  p.decoder.num_layers = 1
  model = p.Instantiate().InstantiateVariables()
  examples = _Examples(12, seed=4, src_max=10, tgt_max=8)
  packed = packing.Pack(*_Ragged(examples), SRC_LEN, TGT_LEN)
  unpacked = packing.Unpacked(*_Ragged(examples), SRC_LEN, TGT_LEN)
  assert packed['src_ids'].shape[0] < len(examples)
  _, mp = model.FProp(packed)
  _, mu = model.FProp(unpacked)
  xp, xu = mp['per_token_xent'].numpy(), mu['per_token_xent'].numpy()
  seg_p, seg_u = _Segments(packed), _Segments(unpacked)
  by_content = {tuple(map(tuple, v)): k for k, v in seg_p.items()}
  tgt_seg = packed['tgt_segment_ids'].numpy()
  for (row_u, _), value in seg_u.items():
    row_p, seg = by_content[tuple(map(tuple, value))]
    n = len(value[1])
    np.testing.assert_allclose(xp[row_p][tgt_seg[row_p] == seg], xu[row_u][:n], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(float(mp['xent']), float(mu['xent']), rtol=1e-5)
