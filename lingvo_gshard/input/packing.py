"""Tokenized examples -> the model's fixed-length rows, packed (several examples per row) or one per row.

Input: a window of K examples as ragged int32 tensors `src` [K, None] (source pieces + eos), `tgt` [K, None]
(target pieces + eos, i.e. the labels) and `tags` [K] (the decoder start symbol of each example, <2en>).
Output: a dict of [R, L] tensors, the batch format of models/transformer_mt.py:

  src_ids, src_segment_ids, src_positions                 [R, Ls] int32
  tgt_ids, tgt_labels, tgt_segment_ids, tgt_positions     [R, Lt] int32
  tgt_weights                                             [R, Lt] float32

Segment 0 is padding (ids 0, weight 0); an example's source and target share one row and one segment
number k = 1, 2, ... (its rank in the row); positions restart at 0 in every segment; tgt_ids is the tag
followed by the labels without their last piece. Sources and targets are packed independently inside a row,
so a row holds as many examples as fit on both sides.

Packing is greedy first-fit inside the window, in example order: each example goes into the first row whose
source and target both still have room. The window is the unit of packing, so all of its rows are emitted
together and only the last few rows of a window are part-filled. It is pure TensorFlow (a while loop over
the window's examples deciding rows, then one scatter per feature), so it runs inside tf.data's parallel map.
"""
import tensorflow as tf

FEATURES = ('src_ids', 'src_segment_ids', 'src_positions', 'tgt_ids', 'tgt_labels', 'tgt_segment_ids',
            'tgt_positions', 'tgt_weights')


def FirstFit(src_lengths, tgt_lengths, src_capacity, tgt_capacity):
  """Assigns each example to a row, greedy first-fit in order.

  Args:
    src_lengths: [K] int32, each <= src_capacity.
    tgt_lengths: [K] int32, each <= tgt_capacity.
    src_capacity: row length Ls.
    tgt_capacity: row length Lt.

  Returns:
    (rows [K], segments [K] (1-based rank in its row), src_offsets [K], tgt_offsets [K], num_rows scalar).
  """
  k = tf.shape(src_lengths)[0]

  def Body(i, src_fill, tgt_fill, count, rows, segments, src_offsets, tgt_offsets):
    fits = (src_fill + src_lengths[i] <= src_capacity) & (tgt_fill + tgt_lengths[i] <= tgt_capacity)
    # There are K candidate rows, so an unused (empty) one always fits: argmax finds the first True.
    row = tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int32)
    rows = rows.write(i, row)
    segments = segments.write(i, count[row] + 1)
    src_offsets = src_offsets.write(i, src_fill[row])
    tgt_offsets = tgt_offsets.write(i, tgt_fill[row])
    hot = tf.one_hot(row, k, dtype=tf.int32)
    return (i + 1, src_fill + hot * src_lengths[i], tgt_fill + hot * tgt_lengths[i], count + hot, rows,
            segments, src_offsets, tgt_offsets)

  zeros = tf.zeros([k], tf.int32)
  arrays = [tf.TensorArray(tf.int32, size=k, element_shape=[]) for _ in range(4)]
  out = tf.while_loop(lambda i, *_: i < k, Body, [tf.constant(0), zeros, zeros, zeros] + arrays)
  rows, segments, src_offsets, tgt_offsets = [a.stack() for a in out[4:]]
  count = out[3]
  num_rows = tf.reduce_sum(tf.cast(count > 0, tf.int32))  # First-fit fills rows 0, 1, ... without gaps.
  return rows, segments, src_offsets, tgt_offsets, num_rows


def _Scatter(ragged, rows, segments, offsets, num_rows, length):
  """Writes ragged[i] at row rows[i], columns offsets[i]...; returns (ids, segment_ids, positions)."""
  lengths = tf.cast(ragged.row_lengths(), tf.int32)
  positions = tf.ragged.range(lengths).flat_values
  index = tf.stack([tf.repeat(rows, lengths), tf.repeat(offsets, lengths) + positions], axis=1)
  shape = tf.stack([num_rows, length])
  return (tf.scatter_nd(index, ragged.flat_values, shape),
          tf.scatter_nd(index, tf.repeat(segments, lengths), shape),
          tf.scatter_nd(index, positions, shape))


def Place(src, tgt, tags, rows, segments, src_offsets, tgt_offsets, num_rows, src_length, tgt_length):
  """The batch dict of [num_rows, L] tensors, example i placed as the row/segment/offsets say."""
  src_ids, src_seg, src_pos = _Scatter(src, rows, segments, src_offsets, num_rows, src_length)
  labels, tgt_seg, tgt_pos = _Scatter(tgt, rows, segments, tgt_offsets, num_rows, tgt_length)
  # Decoder input: the tag, then the labels shifted right by one inside each example.
  shifted = tf.concat([tf.RaggedTensor.from_tensor(tags[:, tf.newaxis]), tgt[:, :-1]], axis=1)
  tgt_ids, _, _ = _Scatter(shifted, rows, segments, tgt_offsets, num_rows, tgt_length)
  return {
      'src_ids': src_ids, 'src_segment_ids': src_seg, 'src_positions': src_pos,
      'tgt_ids': tgt_ids, 'tgt_labels': labels, 'tgt_segment_ids': tgt_seg, 'tgt_positions': tgt_pos,
      'tgt_weights': tf.cast(tgt_seg > 0, tf.float32),
  }


def Pack(src, tgt, tags, src_length, tgt_length):
  """Packs a window of examples (all fitting: see module docstring) into [R, L] rows, R <= K."""
  src_lengths = tf.cast(src.row_lengths(), tf.int32)
  tgt_lengths = tf.cast(tgt.row_lengths(), tf.int32)
  rows, segments, src_offsets, tgt_offsets, num_rows = FirstFit(src_lengths, tgt_lengths, src_length,
                                                                tgt_length)
  return Place(src, tgt, tags, rows, segments, src_offsets, tgt_offsets, num_rows, src_length, tgt_length)


def Unpacked(src, tgt, tags, src_length, tgt_length):
  """One example per row: [K, L] rows, segment 1 (0 on padding)."""
  k = tf.shape(tags)[0]
  zeros = tf.zeros([k], tf.int32)
  return Place(src, tgt, tags, tf.range(k), zeros + 1, zeros, zeros, k, src_length, tgt_length)


def PadRows(batch, num_rows):
  """Pads a batch dict with empty rows (segment 0, weight 0) up to num_rows, for a static batch shape."""
  out = {}
  for name, value in batch.items():
    missing = num_rows - tf.shape(value)[0]
    out[name] = tf.pad(value, [[0, missing], [0, 0]])
  return out
