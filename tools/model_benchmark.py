r"""Training and decoding speed of the CPU-sized experiments, against references measured in the same run.

  python -m lingvo_gshard.tools.model_benchmark [--models=M4TinyDense,M4TinyMoE] [--json=-]

Training: a full step (forward, backward, Adafactor update; no dropout draws skipped) on a synthetic batch of
the experiment's Train() shape, in each of --modes, median of repeated steps; tokens/s (source + target) and
achieved FLOP/s = 3 x forward FLOPs per token (models/analysis.py) x tokens / step time, as a fraction of one
large jit-compiled matmul (target >= 50%). The matmul and the steps are timed round-robin (one call of each
per round), so load from other processes slows the reference and the steps alike.
With --binary_steps, the trainer binary then trains each case on the real corpus and its own s/step is set
against the step's (target: at most 10% more; the binary's input pipeline, fetches and logging are the
difference; the corpus' packed rows against synthetic full ones is not: both run the same shapes).
Decoding: greedy to length --decode_len with the incremental cache vs recomputing the whole prefix every step
(target >= 5x), both jit-compiled, on the same random model and sources.
"""
import json

from absl import app
from absl import flags

from lingvo_gshard import params as params_lib
from lingvo_gshard.bench import steps as steps_lib
from lingvo_gshard.bench import timing
from lingvo_gshard.core import registry
from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files
from lingvo_gshard.utils import paths

_MODELS = flags.DEFINE_list('models', ['M4TinyDense', 'M4TinyMoE'], 'Experiments to time.')
_REPEATS = flags.DEFINE_integer('repeats', 7,
                                'Timed rounds (one call of the matmul and of every step per round).', lower_bound=1)
_DECODE_LEN = flags.DEFINE_integer('decode_len', 64, 'Decoded length.', lower_bound=1)
_DECODE_BATCH = flags.DEFINE_integer('decode_batch', 16, 'Sentences decoded together.', lower_bound=1)
_MATMUL = flags.DEFINE_integer('matmul_dim', 2048, 'N of the reference N^3 matmul.', lower_bound=1)
_JSON = flags.DEFINE_string('json', '', "Write results as JSON to this path ('-' = stdout).")
_MODES = flags.DEFINE_list('modes', ['jit', 'graph'], "Step modes: 'jit' (whole step XLA) and 'graph' (TF "
                           "graph, MoE routing and losses in XLA islands: StepRunner(jit=False)).")

_BINARY_STEPS = flags.DEFINE_integer('binary_steps', 0, 'Also run the trainer binary this many steps per model '
                                     'and mode on --data_dir and compare its s/step with the step above (0: off).',
                                     lower_bound=0)
_DATA_DIR = flags.DEFINE_string('data_dir', paths.DefaultDataDir(), 'Corpus of the --binary_steps runs.')

_TARGET_FLOPS_FRACTION = 0.5
_TARGET_BINARY_OVERHEAD = 0.10
_TARGET_DECODE_SPEEDUP = 5.0


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  params_lib.LoadAll()
  try:
    [registry.GetClass(n) for n in _MODELS.value]
  except registry.RegistryError as e:
    raise app.UsageError(str(e))
  for mode in _MODES.value:
    if mode not in ('jit', 'graph'):
      raise app.UsageError(f"--modes: {mode!r} is not 'jit' or 'graph'")
  matmul_flops, matmul_call = timing.Matmul(_MATMUL.value)
  train, steps, decoders = [], [], []
  for name in _MODELS.value:
    for mode in _MODES.value:
      result, step, learner, task = steps_lib.TrainCase(name, mode)
      train.append(result)
      steps.append(step)
    decoders.append((name, learner, task))
  matmul_s, *step_s = timing.RoundRobin([matmul_call] + steps, _REPEATS.value)
  matmul = matmul_flops / matmul_s
  for result, t in zip(train, step_s):
    steps_lib.AddTimes(result, t, matmul)
  decode = [steps_lib.DecodeCase(name, learner, task, _DECODE_BATCH.value, _DECODE_LEN.value, _REPEATS.value)
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
  binary = []
  if _BINARY_STEPS.value:
    # After the round-robin, one process at a time: the binary competes with nothing of this one.
    print(f'{"trainer binary":<20} {"steps":>6} {"s/step":>8} {"bench s/step":>12} {"overhead":>8}')
    for r in train:
      b = steps_lib.BinaryCase(r['name'], r['mode'], _DATA_DIR.value, _BINARY_STEPS.value)
      b['bench_step_s'] = r['step_s']
      b['overhead'] = b['binary_step_s'] / r['step_s'] - 1
      binary.append(b)
      ok = 'ok' if b['overhead'] <= _TARGET_BINARY_OVERHEAD else 'MISSED'
      print(f'{r["name"] + " " + r["mode"]:<20} {b["steps"]:>6} {b["binary_step_s"]:8.3f} {r["step_s"]:12.3f} '
            f'{b["overhead"]:+8.1%}  (target <= {_TARGET_BINARY_OVERHEAD:+.0%}: {ok})')
  if _JSON.value:
    text = json.dumps({'matmul_flop_per_s': matmul, 'train': train, 'decode': decode, 'binary': binary},
                      indent=1)
    if _JSON.value == '-':
      print(text)
    else:
      files.WriteText(_JSON.value, text + '\n')


if __name__ == '__main__':
  _common.Main('model_benchmark', main)
