r"""Measures the translation input pipeline on a built corpus: packed training tokens per second, how full
the rows are, the length filter, and the effective language distribution (expected and drawn).

  python -m lingvo_gshard.tools.prepare_data --data_dir=/tmp/gshard_data      # once
  python -m lingvo_gshard.tools.input_benchmark --data_dir=/tmp/gshard_data [--batches=200 \
      --batch_rows=32 --packed_length=256 --max_length=64 --vocab_size=8000 --temperature=5 \
      --input_params_override='vocab.kind=separate,shuffle_buffer=0'] [--json=out.json]

The vocabulary is trained into DATA_DIR/vocab on first use (timed and reported) and loaded afterwards.
Tokens are the non-padding source plus target tokens of the rows the pipeline yields, over --batches
batches after --warmup_batches (the first batch also waits for the shuffle buffers: reported apart).
--model_tokens_per_sec, if given, adds the ratio to what a model consumes (the issue asks for >= 5x).
"""
import json
import math
import sys
import time

from absl import app
from absl import flags
from absl import logging

from lingvo_gshard.bench import input_speed
from lingvo_gshard.input import mixture
from lingvo_gshard.input import pipeline
from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files

_DATA_DIR = flags.DEFINE_string('data_dir', None, 'A built data directory (tools/prepare_data).',
                                required=True)
_SPLIT = flags.DEFINE_string('split', 'train', 'Split to read.')
_LANGUAGES = flags.DEFINE_list('languages', [], 'Languages (empty = all in the manifest).')
_TEMPERATURE = flags.DEFINE_float('temperature', 5.0, 'Mixture temperature T.', lower_bound=1e-06)
_BATCH_ROWS = flags.DEFINE_integer('batch_rows', 32, 'Rows per batch.', lower_bound=1)
_PACKED_LENGTH = flags.DEFINE_integer('packed_length', 256, 'Ls = Lt of packed rows.', lower_bound=1)
_MAX_LENGTH = flags.DEFINE_integer('max_length', 64, 'Longest source / target kept (pieces + eos).', lower_bound=1)
_VOCAB_SIZE = flags.DEFINE_integer('vocab_size', 8000, 'Size of the shared (or each) vocabulary.', lower_bound=1)
_OVERRIDE = flags.DEFINE_string('input_params_override', '', 'Overrides of MTInput params (a=1,b.c=2).')
_WARMUP = flags.DEFINE_integer('warmup_batches', 20, 'Batches read before timing.', lower_bound=0)
_BATCHES = flags.DEFINE_integer('batches', 200, 'Batches timed.', lower_bound=1)
_DRAWS = flags.DEFINE_integer('draws', 20000, 'Mixture draws for the observed language distribution.', lower_bound=1)
_MODEL_TPS = flags.DEFINE_float('model_tokens_per_sec', 0.0, 'Tokens/s a model consumes (for the ratio).',
                                lower_bound=0.0)
_JSON = flags.DEFINE_string('json', '', 'Also write the figures to this JSON file.')


def _Params():
  p = pipeline.MTInput.Params().Set(
      data_dir=_DATA_DIR.value, split=_SPLIT.value, languages=list(_LANGUAGES.value),
      temperature=_TEMPERATURE.value, batch_rows=_BATCH_ROWS.value, packed_source_length=_PACKED_LENGTH.value,
      packed_target_length=_PACKED_LENGTH.value, max_source_length=_MAX_LENGTH.value,
      max_target_length=_MAX_LENGTH.value)
  p.vocab.Set(source_size=_VOCAB_SIZE.value, target_size=_VOCAB_SIZE.value)
  return p.Override(_OVERRIDE.value) if _OVERRIDE.value else p


def _Log(line):
  print(line, file=sys.stderr, flush=True)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # TFDS logs a few lines per language read at INFO.
  try:
    inp = _Params().Instantiate(_Log)
    start = time.time()
    inp.Vocabularies()
    vocab_seconds = time.time() - start
    counts = inp.Counts()
    describe = mixture.Describe(counts, mixture.TemperatureWeights(counts, inp.p.temperature),
                                inp.p.temperature)
    figures = input_speed.Throughput(inp, _WARMUP.value, _BATCHES.value)
    dist = input_speed.Distribution(inp, _DRAWS.value) if _DRAWS.value else None
  except _common.UserErrors() as e:  # a corpus that does not read, an unknown language or input param
    print(f'input_benchmark: error: {e}', file=sys.stderr)
    return 1
  src_vocab, tgt_vocab = inp.Vocabularies()
  figures.update(vocab_seconds=round(vocab_seconds, 1), vocab=[src_vocab.path, tgt_vocab.path],
                 languages=len(counts), mixture=describe, distribution=dist)
  print(f'{len(counts)} languages, {_SPLIT.value} split; vocabularies {src_vocab.path} '
        f'({src_vocab.size} pieces, ready in {vocab_seconds:.1f}s)')
  print(describe)
  print(f'rows {figures["batch_rows"]} x {figures["row_lengths"]}; first batch after '
        f'{figures["first_batch_seconds"]}s; {figures["timed_batches"]} batches in {figures["seconds"]:.2f}s '
        f'(process CPU {figures["process_cpu_seconds"]}s)')
  print(f'tokens/s {figures["tokens_per_sec"]} (source {figures["source_tokens_per_sec"]}, target '
        f'{figures["target_tokens_per_sec"]}); examples/s {figures["examples_per_sec"]}; '
        f'{figures["examples_per_row"]} examples per row; fill source {figures["source_fill"]:.1%}, '
        f'target {figures["target_fill"]:.1%}; dropped as too long {figures["dropped_fraction"]:.2%}')
  if _MODEL_TPS.value > 0:
    ratio = figures['tokens_per_sec'] / _MODEL_TPS.value
    figures['model_ratio'] = round(ratio, 1)
    print(f'{ratio:.1f}x the {_MODEL_TPS.value:g} tokens/s a model consumes (target: >= 5x)')
  if dist:
    gaps = sorted(dist['expected'], key=lambda k: -abs(dist['observed'][k] - dist['expected'][k]))
    worst = ', '.join(f'{k} {100 * dist["observed"][k]:.2f}% vs {100 * dist["expected"][k]:.2f}%'
                      for k in gaps[:3])
    print(f'observed over {dist["draws"]} draws: chi2 {dist["chi2"]} on {dist["dof"]} dof '
          f'(mean {dist["dof"]}, sd {math.sqrt(2 * dist["dof"]):.1f}); largest gaps: {worst}')
  if _JSON.value:
    files.WriteText(_JSON.value, json.dumps(figures, indent=1, ensure_ascii=False))
  return 0


if __name__ == '__main__':
  _common.Main('input_benchmark', main)
