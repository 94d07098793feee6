"""Input pipeline figures of tools/input_benchmark.py: throughput of an MTInput and its mixture's observed
language distribution against the expected one."""
import collections
import time


def Throughput(inp, warmup, batches):
  """Reads warmup + batches batches; returns the figures of the timed ones."""
  start = time.time()
  it = inp.Dataset().as_numpy_iterator()
  next(it)
  first = time.time() - start
  for _ in range(warmup):
    next(it)
  before = inp.Stats()
  src_tokens = tgt_tokens = rows = examples = 0
  start, cpu = time.time(), time.process_time()
  for _ in range(batches):
    b = next(it)
    src_tokens += int((b['src_segment_ids'] > 0).sum())
    tgt_tokens += int(b['tgt_weights'].sum())
    rows += b['src_ids'].shape[0]
    examples += int(b['tgt_segment_ids'].max(axis=1).sum())  # Segments are numbered 1..k in each row.
  seconds, cpu = time.time() - start, time.process_time() - cpu
  after = inp.Stats()
  ls, lt = inp.RowLengths()
  read = after['examples'] - before['examples']
  # 7 decimals of seconds: on a tiny corpus the timed batches take milliseconds, and 4 decimals would skew
  # a tokens/s recomputed from them by whole percents.
  return {
      'first_batch_seconds': round(first, 2), 'timed_batches': batches, 'seconds': round(seconds, 7),
      'source_tokens': src_tokens, 'target_tokens': tgt_tokens, 'rows': rows, 'examples': examples,
      'process_cpu_seconds': round(cpu, 2),
      'tokens_per_sec': round((src_tokens + tgt_tokens) / seconds),
      'target_tokens_per_sec': round(tgt_tokens / seconds),
      'source_tokens_per_sec': round(src_tokens / seconds),
      'examples_per_sec': round(examples / seconds), 'batches_per_sec': round(batches / seconds, 2),
      'examples_per_row': round(examples / rows, 2),
      'source_fill': round(src_tokens / (rows * ls), 4), 'target_fill': round(tgt_tokens / (rows * lt), 4),
      'dropped_fraction': round((after['dropped'] - before['dropped']) / max(read, 1), 4),
      'row_lengths': [ls, lt], 'batch_rows': inp.p.batch_rows,
  }


def Distribution(inp, draws):
  """Expected shares against shares observed in `draws` mixture draws, and the chi-square statistic."""
  expected = inp.EffectiveDistribution()
  seen = collections.Counter(x['lang'].decode() for x in inp.Mixture().take(draws).as_numpy_iterator())
  chi2 = sum((seen[k] - draws * w) ** 2 / (draws * w) for k, w in expected.items())
  return {'expected': {k: round(v, 5) for k, v in expected.items()},
          'observed': {k: round(seen[k] / draws, 5) for k in expected},
          'draws': draws, 'chi2': round(chi2, 1), 'dof': len(expected) - 1}
