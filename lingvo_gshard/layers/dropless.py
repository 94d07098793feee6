"""Dropless expert FFN whose cost follows the tokens' load: for decoding, where no token may be dropped.

Dimensions: N tokens, K choices per token, E experts, M model dim, H expert hidden dim, b block rows.

A capacity-based dispatch that drops nothing needs C = N slots per expert, E·N rows of expert FFN for N·K
choices (E/K times the work). Here the kept choices are instead sorted by expert into one buffer in which
each expert's rows start on a multiple of b:

    buffer rows   [ e0: n_0 rows, padded to b | e1: n_1 rows, padded to b | ... ]   at most N·K + E·(b-1)
    blocks        sum_e ceil(n_e / b)   (dynamic), each block holds rows of one expert

and a `tf.while_loop` over the filled blocks runs each block's [b,M]x[M,H]x[H,M] FFN with its expert's
weights: N·K rows plus at most b-1 padding rows per expert used, whatever the routing. Static shapes
throughout (only the trip count is data-dependent), so it compiles under XLA and runs as a TF graph (an
exported SavedModel) alike.

Every row sees the same FFN as in the capacity path, so the result equals `moe.moe_ffn` with C = N up to
floating-point summation order (tests/dropless_test.py).
"""
from typing import Callable

import tensorflow as tf


def BufferRows(num_choices: int, num_experts: int, block: int) -> int:
  """Static size of the sorted buffer: every choice, plus at most block-1 padding rows per expert, rounded up
  to whole blocks."""
  rows = num_choices + num_experts * (block - 1)
  return -(-rows // block) * block


def ExpertFFN(x, expert_index, gate, wi, wo, *, activation: Callable[[tf.Tensor], tf.Tensor] = tf.nn.relu,
              block: int = 32, wi_transposed: bool = False):
  """sum_k gate[n,k] * FFN_{expert_index[n,k]}(x[n]) for every token, dropping no kept choice.

  Args:
    x: [N,M] tokens.
    expert_index: [N,K] int, expert of each choice.
    gate: [N,K] float, its combine weight; 0 marks a choice that is not taken (padding, or not routed).
    wi: [E,M,H] ([E,H,M] with wi_transposed) first expert matmul, in x's dtype.
    wo: [E,H,M] second expert matmul.
    activation: the experts' nonlinearity.
    block: b, rows per expert matmul (a speed choice: larger blocks batch better, smaller ones pad less).

  Returns:
    [N,M] in x's dtype; zero for a token with no kept choice.
  """
  n, m = x.shape.as_list()
  k = expert_index.shape[1]
  e = wi.shape[0]
  if n is None or m is None or k is None:
    raise ValueError(f'x [N,M] and expert_index [N,K] need static shapes, got {x.shape}, {expert_index.shape}')
  rows = BufferRows(n * k, e, block)
  max_blocks = rows // block

  kept = tf.reshape(gate > 0, [n * k])
  choice_expert = tf.where(kept, tf.reshape(tf.cast(expert_index, tf.int32), [n * k]), e)  # e: not taken
  counts = tf.math.unsorted_segment_sum(tf.ones([n * k], tf.int32), choice_expert, e + 1)[:e]  # [E]
  blocks = (counts + block - 1) // block
  blocks_end = tf.cumsum(blocks)                                    # [E], blocks up to and including e
  first_row = (blocks_end - blocks) * block                         # [E], buffer row where e starts
  first_sorted = tf.cumsum(counts, exclusive=True)                  # [E], where e starts in sorted order
  order = tf.argsort(choice_expert, stable=True)                    # choices by expert, not taken last

  # Buffer row r -> its expert (the block's), rank within the expert, and the choice it holds if any.
  r = tf.range(rows, dtype=tf.int32)
  row_expert = tf.minimum(tf.searchsorted(blocks_end, r // block, side='right'), e - 1)
  rank = r - tf.gather(first_row, row_expert)
  filled = rank < tf.gather(counts, row_expert)
  choice = tf.gather(order, tf.where(filled, tf.gather(first_sorted, row_expert) + rank, 0))
  buffer = tf.gather(x, choice // k) * tf.cast(filled, x.dtype)[:, None]           # [rows, M]
  block_expert = tf.reshape(row_expert, [max_blocks, block])[:, 0]                 # [max_blocks]

  def Body(i, out):
    at = i * block
    rows_i = tf.slice(buffer, tf.stack([at, 0]), [block, m])
    h = activation(tf.matmul(rows_i, tf.gather(wi, block_expert[i]), transpose_b=wi_transposed))
    y = tf.matmul(h, tf.gather(wo, block_expert[i]))
    return i + 1, tf.tensor_scatter_nd_update(out, (at + tf.range(block))[:, None], y)

  _, out = tf.while_loop(lambda i, _: i < blocks_end[-1], Body,
                         (tf.constant(0), tf.zeros([rows, m], x.dtype)), maximum_iterations=max_blocks)

  # Choice -> its buffer row (the inverse of `choice`): sorted position minus the expert's start, plus its row.
  sorted_at = tf.math.invert_permutation(order)
  expert = tf.minimum(choice_expert, e - 1)
  row_of_choice = tf.gather(first_row, expert) + sorted_at - tf.gather(first_sorted, expert)
  weight = tf.where(kept, tf.reshape(tf.cast(gate, x.dtype), [n * k]), tf.zeros([], x.dtype))
  picked = tf.gather(out, tf.where(kept, row_of_choice, 0)) * weight[:, None]      # [N·K, M]
  return tf.reduce_sum(tf.reshape(picked, [n, k, m]), axis=1)
