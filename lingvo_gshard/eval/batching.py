"""How sentences are batched for decoding: one static shape per source-length bucket, sentences sorted by length.

The evaluator, `gshard_translate` and the exported SavedModel's client all batch with these functions, so the
same sentences meet the same batch-mates in the same shapes wherever they are decoded. That matters for an MoE:
the tokens of a batch share the experts' capacity, so a sentence's translation can depend on what it is
decoded with. Rows past a batch's sentences are empty (all padding), which beam search treats as absent.
"""
import dataclasses
from typing import Iterator, List, Sequence, Tuple

import numpy as np

from lingvo_gshard.input import tokenizer

_FIRST_BUCKET = 8


def Buckets(max_source_length: int) -> List[int]:
  """Source lengths of the static batch shapes: 8, 16, 32, ... up to max_source_length."""
  out, b = [], _FIRST_BUCKET
  while b < max_source_length:
    out.append(b)
    b *= 2
  return out + [max_source_length]


def RowsOf(length: int, batch_tokens: int) -> int:
  """Rows of a batch of sources padded to `length` pieces: about `batch_tokens` source pieces a batch."""
  return max(1, batch_tokens // length)


def SourceIds(ids: Sequence[int], max_source_length: int) -> Tuple[List[int], bool]:
  """The ids a source is decoded from (its pieces, cut to max_source_length - 1, then eos) and whether it was
  cut: training dropped longer examples, so the model never saw them."""
  ids = list(ids)
  return ids[:max_source_length - 1] + [tokenizer.EOS_ID], len(ids) + 1 > max_source_length


@dataclasses.dataclass
class Batch:
  """Sentences (their indices in the input) decoded together, padded to `length` pieces and `rows` rows."""
  length: int
  rows: int
  indices: List[int]

  def Arrays(self, encoded: Sequence[Sequence[int]]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, segment ids, positions), int32 [rows, length]: the model's source inputs for this batch."""
    ids = np.zeros((self.rows, self.length), np.int32)
    for r, j in enumerate(self.indices):
      ids[r, :len(encoded[j])] = encoded[j]
    segment = (ids != 0).astype(np.int32)
    positions = np.where(segment, np.arange(self.length, dtype=np.int32)[None], 0).astype(np.int32)
    return ids, segment, positions


def Batches(lengths: Sequence[int], max_source_length: int, batch_tokens: int) -> Iterator[Batch]:
  """The batches of sources of `lengths` (with eos, each <= max_source_length), shortest first: each takes the
  smallest bucket that holds its shortest source and as many sources that fit it as its rows allow."""
  buckets = Buckets(max_source_length)
  order = sorted(range(len(lengths)), key=lambda i: lengths[i])
  i = 0
  while i < len(order):
    length = next(b for b in buckets if b >= lengths[order[i]])
    rows = RowsOf(length, batch_tokens)
    chunk = []
    while i < len(order) and len(chunk) < rows and lengths[order[i]] <= length:
      chunk.append(order[i])
      i += 1
    yield Batch(length, rows, chunk)
