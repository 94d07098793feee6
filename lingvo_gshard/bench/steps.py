"""The training and decoding cases of tools/model_benchmark.py: a registered experiment's real step on a
synthetic batch of its Train() shape, and cached vs recomputing greedy decoding."""
import re
import time

import numpy as np
import tensorflow as tf

from lingvo_gshard.bench import timing
from lingvo_gshard.core import experiment
from lingvo_gshard.core import registry
from lingvo_gshard.models import analysis
from lingvo_gshard.models import decoding
from lingvo_gshard.runtime import hardware
from lingvo_gshard.runtime import learner as learner_lib
from lingvo_gshard.runtime import step_runner


# A trainer log line's seconds per step over its window (train/trainer.py).
STEP_LINE = r'^step\s+\d+/\d+ .* ([0-9.]+) s/step'


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


def TrainCase(name, mode='jit'):
  """(result dict without timings, step call, learner, task), compiled."""
  exp = registry.Get(name)
  root = experiment.ExperimentParams(exp)
  hardware.ResolveAuto(root)  # the dtype and rows this machine trains with, as the trainer resolves them
  inp = root.input.train
  rows = inp.batch_rows
  if inp.packing:
    src_len, length = inp.packed_source_length, inp.packed_target_length
  else:
    src_len, length = inp.max_source_length, inp.max_target_length
  task = root.task
  lp = experiment.ResolveLearner(root.learner)
  partitioner = exp.Partitioner('none')
  learner = learner_lib.Learner(task, lp.optimizer, partitioner, lp.seed,
                                runner=step_runner.StepRunner(partitioner, jit=mode == 'jit'))
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
  t_cached = timing.Median(lambda: cached(*args).numpy(), repeats)
  t_recompute = timing.Median(lambda: recompute(*args).numpy(), repeats)
  return dict(name=name, batch=batch_size, length=length, cached_s=t_cached, recompute_s=t_recompute,
              speedup=t_recompute / t_cached, same_output=bool(same))


def BinaryCase(name, mode, data_dir, steps, log_interval=10):
  """The trainer binary's own seconds per step: `python -m lingvo_gshard.tools.trainer --mode=train` for
  `steps` steps of experiment `name` on the corpus in `data_dir` (a fresh log directory, no evaluations, one
  save at the end), median of the s/step its log windows print after the first two (compilation, warm-up).
  Returns {'name', 'mode', 'steps', 'binary_step_s', 'windows'}."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as logdir:
    cmd = [sys.executable, '-m', 'lingvo_gshard.tools.trainer', f'--model={name}', f'--logdir={logdir}',
           f'--data_dir={data_dir}', '--mode=train', f'--max_steps={steps}', '--jit' if mode == 'jit' else '--nojit',
           f'--model_params_override=learner.log_interval : {log_interval}; learner.save_interval : {10 ** 9}; '
           f'learner.optimizer.warmup_steps : {min(10, steps // 2)}']  # a short run: the rate, not the loss
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
  if out.returncode:
    raise RuntimeError(f'{" ".join(cmd)} exited {out.returncode}: {out.stderr.strip().splitlines()[-1:]}')
  windows = [float(m.group(1)) for m in re.finditer(STEP_LINE, out.stdout, re.M)]
  timed = windows[2:]
  if not timed:
    raise RuntimeError(f'{name}: {steps} steps gave {len(windows)} log windows; run more steps')
  return dict(name=name, mode=mode, steps=steps, binary_step_s=float(np.median(timed)), windows=windows)
