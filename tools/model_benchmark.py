r"""Training and decoding speed of the CPU-sized experiments, against references measured in the same run.

  python -m lingvo_gshard.tools.model_benchmark [--models=M4TinyDense,M4TinyMoE] [--json=-]

Training: a full step (forward, backward, Adafactor update; no dropout draws skipped) on a synthetic batch of
the experiment's Train() shape, in each of --modes, median of repeated steps; tokens/s (source + target) and
achieved FLOP/s = 3 x forward FLOPs per token (models/analysis.py) x tokens / step time, as a fraction of one
large jit-compiled matmul (target >= 50%). The matmul and the steps are timed round-robin (one call of each
per round), so load from other processes slows the reference and the steps alike.
Decoding: greedy to length --decode_len with the incremental cache vs recomputing the whole prefix every step
(target >= 5x), both jit-compiled, on the same random model and sources.
"""
import json
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context

from lingvo_gshard.core import experiment
from lingvo_gshard.core import learner as learner_lib
from lingvo_gshard.core import registry
from lingvo_gshard.models import analysis
from lingvo_gshard.models import decoding

_MODELS = flags.DEFINE_list('models', ['M4TinyDense', 'M4TinyMoE'], 'Experiments to time.')
_REPEATS = flags.DEFINE_integer('repeats', 7,
                                'Timed rounds (one call of the matmul and of every step per round).')
_DECODE_LEN = flags.DEFINE_integer('decode_len', 64, 'Decoded length.')
_DECODE_BATCH = flags.DEFINE_integer('decode_batch', 16, 'Sentences decoded together.')
_MATMUL = flags.DEFINE_integer('matmul_dim', 2048, 'N of the reference N^3 matmul.')
_JSON = flags.DEFINE_string('json', '', "Write results as JSON to this path ('-' = stdout).")
_MODES = flags.DEFINE_list('modes', ['jit', 'graph'], "Step modes: 'jit' (whole step XLA) and 'graph' (TF "
                           "graph, MoE routing in XLA islands; the none backend's jit=False).")

_TARGET_FLOPS_FRACTION = 0.5
_TARGET_DECODE_SPEEDUP = 5.0


def _Median(fn, repeats):
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def SyntheticBatch(rows, src_len, tgt_len, src_vocab, tgt_vocab, seed=0):
  """Full rows of random tokens, one segment per row (packed rows are as dense as this)."""
  rng = np.random.RandomState(seed)
  batch = {'src_ids': rng.randint(3, src_vocab, (rows, src_len)), 'tgt_ids': rng.randint(3, tgt_vocab, (rows, tgt_len)),
           'tgt_labels': rng.randint(3, tgt_vocab, (rows, tgt_len))}
  batch = {k: v.astype(np.int32) for k, v in batch.items()}
  for side, length in (('src', src_len), ('tgt', tgt_len)):
    batch[f'{side}_segment_ids'] = np.ones((rows, length), np.int32)
    batch[f'{side}_positions'] = np.tile(np.arange(length, dtype=np.int32), (rows, 1))
  batch['tgt_weights'] = np.ones((rows, length), np.float32)
  return batch


def RoundRobin(fns, repeats):
  """Median seconds of each fn, timed one call of each per round."""
  times = [[] for _ in fns]
  for _ in range(repeats):
    for fn, t in zip(fns, times):
      start = time.perf_counter()
      fn()
      t.append(time.perf_counter() - start)
  return [float(np.median(t)) for t in times]


def Matmul(n):
  """(FLOPs, call) of one jit-compiled n^3 matmul, compiled."""
  a = tf.random.normal([n, n])
  mm = tf.function(lambda a: tf.matmul(a, a), jit_compile=True)
  mm(a)
  # Not `.numpy()`: copying the 16 MB result out would add ~4% to the reference's time. A tf.function call
  # in synchronous eager mode returns computed outputs on a CPU (GPU kernels would still be queued);
  # async_wait also covers async eager mode.
  return 2 * n**3, lambda: (mm(a), context.async_wait())


def TrainCase(name, mode='jit'):
  """(result dict without timings, step call, learner, task), compiled."""
  exp = registry.Get(name)
  inp = exp.Train()
  rows = inp.batch_rows
  if inp.packing:
    src_len, length = inp.packed_source_length, inp.packed_target_length
  else:
    src_len, length = inp.max_source_length, inp.max_target_length
  task = exp.Task()
  lp = experiment.ResolveLearner(exp.Learner())
  partitioner = exp.Partitioner('none', jit=(mode == 'jit'))
  learner = learner_lib.Learner(task, lp.optimizer, partitioner, lp.seed)
  batch = SyntheticBatch(rows, src_len, length, task.source_vocab_size, task.target_vocab_size)
  start = time.perf_counter()
  float(learner.TrainStep(batch)['loss'])
  compile_s = time.perf_counter() - start
  a = analysis.Analyze(name, task.Instantiate(), exp.Partitioner('none'), tokens_per_step=rows * length,
                       seq_len=length)
  tokens = rows * length
  # Training = 3x forward: the encoder's FLOPs per source token, the decoder's (softmax included) per target.
  flops = 3 * rows * (a.encoder_flops_per_token * src_len + a.decoder_flops_per_token * length)
  result = dict(name=name, mode=mode, rows=rows, src_length=src_len, length=length, compile_s=compile_s,
                tokens=tokens, flops_per_step=flops, params=a.total_params,
                active_params=a.active_params_per_token)
  return result, lambda: float(learner.TrainStep(batch)['loss']), learner, task


def AddTimes(result, step_s, matmul_flop_per_s):
  tokens = result.pop('tokens')
  result.update(step_s=step_s, target_tokens_per_s=tokens / step_s,
                tokens_per_s=result['rows'] * (result['src_length'] + result['length']) / step_s,
                flop_per_s=result['flops_per_step'] / step_s)
  result['flops_fraction'] = result['flop_per_s'] / matmul_flop_per_s


def DecodeCase(name, learner, task, batch_size, length, repeats):
  model = learner.model
  src = SyntheticBatch(batch_size, length, length, task.source_vocab_size, task.target_vocab_size, seed=1)
  args = [tf.constant(src[k]) for k in ('src_ids', 'src_segment_ids', 'src_positions')]
  start_ids = tf.fill([batch_size], 2)
  eos = -1  # never emitted: every sentence decodes the full length, as in a worst-case batch
  cached = tf.function(lambda *a: decoding.GreedyDecode(model, *a, start_ids, eos, length)[0], jit_compile=True)
  recompute = tf.function(lambda *a: decoding.GreedyDecodeRecompute(model, *a, start_ids, eos, length)[0],
                          jit_compile=True)
  same = np.array_equal(cached(*args).numpy(), recompute(*args).numpy())
  t_cached = _Median(lambda: cached(*args).numpy(), repeats)
  t_recompute = _Median(lambda: recompute(*args).numpy(), repeats)
  return dict(name=name, batch=batch_size, length=length, cached_s=t_cached, recompute_s=t_recompute,
              speedup=t_recompute / t_cached, same_output=bool(same))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  registry.LoadAll()
  try:
    [registry.GetClass(n) for n in _MODELS.value]
  except registry.RegistryError as e:
    raise app.UsageError(str(e))
  for mode in _MODES.value:
    if mode not in ('jit', 'graph'):
      raise app.UsageError(f"--modes: {mode!r} is not 'jit' or 'graph'")
  matmul_flops, matmul_call = Matmul(_MATMUL.value)
  train, steps, decoders = [], [], []
  for name in _MODELS.value:
    for mode in _MODES.value:
      result, step, learner, task = TrainCase(name, mode)
      train.append(result)
      steps.append(step)
    decoders.append((name, learner, task))
  matmul_s, *step_s = RoundRobin([matmul_call] + steps, _REPEATS.value)
  matmul = matmul_flops / matmul_s
  for result, t in zip(train, step_s):
    AddTimes(result, t, matmul)
  decode = [DecodeCase(name, learner, task, _DECODE_BATCH.value, _DECODE_LEN.value, _REPEATS.value)
            for name, learner, task in decoders]
  print(f'reference matmul {_MATMUL.value}^3 (jit): {matmul / 1e9:.1f} GFLOP/s')
  print(f'{"train step":<20} {"rows x len":>10} {"step ms":>8} {"tgt tok/s":>10} {"GFLOP/s":>8} '
        f'{"of matmul":>9} {"compile s":>9}')
  for r in train:
    ok = 'ok' if r['flops_fraction'] >= _TARGET_FLOPS_FRACTION else 'MISSED'
    print(f'{r["name"] + " " + r["mode"]:<20} {r["rows"]:>5}x{r["length"]:<4} {1e3 * r["step_s"]:8.1f} '
          f'{r["target_tokens_per_s"]:10.0f} {r["flop_per_s"] / 1e9:8.1f} {r["flops_fraction"]:8.0%} '
          f'{r["compile_s"]:9.1f}  (target >= {_TARGET_FLOPS_FRACTION:.0%}: {ok})')
  print(f'{"decoding":<14} {"batch x len":>11} {"cached ms":>9} {"recompute ms":>12} {"speed-up":>8}')
  for r in decode:
    ok = 'ok' if r['speedup'] >= _TARGET_DECODE_SPEEDUP else 'MISSED'
    print(f'{r["name"]:<14} {r["batch"]:>6}x{r["length"]:<4} {1e3 * r["cached_s"]:9.1f} '
          f'{1e3 * r["recompute_s"]:12.1f} {r["speedup"]:7.1f}x  (target >= {_TARGET_DECODE_SPEEDUP:.0f}x: {ok}; '
          f'same output: {r["same_output"]})')
  if _JSON.value:
    text = json.dumps({'matmul_flop_per_s': matmul, 'train': train, 'decode': decode}, indent=1)
    if _JSON.value == '-':
      print(text)
    else:
      with open(_JSON.value, 'w') as f:
        f.write(text + '\n')


if __name__ == '__main__':
  app.run(main)
