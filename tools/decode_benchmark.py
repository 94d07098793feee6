r"""Beam-search sentences/s against Hugging Face's NLLB-MoE generate, same shape, same run, same threads.

  python -m pip install -e '.[bench]'     # torch and transformers (not runtime dependencies)
  python -m lingvo_gshard.tools.decode_benchmark --data_dir=/tmp/gshard_data [--json=-]

Sources are real test sentences of the built corpus (the --languages' first sentences, tokenized with the
experiment's source vocabulary); both models have random weights and decode exactly --length tokens per
sentence with beam --beam_size (see lingvo_gshard/bench/decode.py). Prints the reference matmul rate, both
rates and their ratio (target >= 2x).
"""
import json
import sys

from absl import app
from absl import flags

from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files
from lingvo_gshard.utils import paths

_MODEL = flags.DEFINE_string('model', 'M4TinyMoE', 'Experiment whose shape both sides take.')
_OVERRIDES = flags.DEFINE_string(
    'model_params_override',
    'task.target_vocab_size : 8000; task.encoder.moe_tpl.hidden_dim : 1024; task.decoder.moe_tpl.hidden_dim : '
    '1024', 'Overrides of the experiment for the shared shape (default: experts as wide as the dense FFN and '
    'an 8k vocabulary on both sides, the issue\'s D256 F1024 E16 V8000 shape; HF NLLB-MoE has one).')
_DATA_DIR = flags.DEFINE_string('data_dir', paths.DefaultDataDir(), 'Built corpus (prepare_data).')
_LANGUAGES = flags.DEFINE_list('languages', ['fr', 'de', 'ru', 'es', 'ja', 'zh-CN', 'pl', 'uk'],
                               'Languages whose test sentences are decoded.')
_SENTENCES = flags.DEFINE_integer('sentences', 16, 'Sentences per language.', lower_bound=1)
_BATCH = flags.DEFINE_integer('batch_size', 32, 'Sentences per generate call.', lower_bound=1)
_BEAM = flags.DEFINE_integer('beam_size', 4, 'Beam size.', lower_bound=1)
_LENGTH = flags.DEFINE_integer('length', 32, 'Output tokens per sentence (forced on both sides).', lower_bound=1)
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'Timed passes of each decoder, the two taking turns (best kept).',
                              lower_bound=1)
_JSON = flags.DEFINE_string('json', '', "Write the figures as JSON here ('-' = stdout).")

_TARGET = 2.0


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  try:
    import torch  # pylint: disable=g-import-not-at-top,unused-import
    import transformers  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    print(f'decode_benchmark: needs torch and transformers (pip install -e ".[bench]"): {e}', file=sys.stderr)
    return 1
  from lingvo_gshard.bench import decode  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.bench import timing  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.core import experiment  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.core import hyperparams  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.core import registry  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.data import report  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.eval import heldout  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.runtime import hardware  # pylint: disable=g-import-not-at-top
  from lingvo_gshard import params as params_lib  # pylint: disable=g-import-not-at-top
  params_lib.LoadAll()
  try:
    root = experiment.ExperimentParams(registry.Get(_MODEL.value), _DATA_DIR.value)
    experiment.ApplyOverrides(root, _OVERRIDES.value)
    hardware.ResolveAuto(root)
    root.Validate()
    ours = decode.Ours(root, _BEAM.value, _LENGTH.value)
    if 'test' not in root.input:
      raise ValueError(f'{_MODEL.value} has no Test() input to take sentences from')
    inp = root.input.test
    # The experiment's trained source vocabulary; its ids are folded into the model's (HF's one) vocabulary.
    src_vocab, _ = inp.Instantiate(log=lambda line: None).Vocabularies()
    ts = heldout.FromCorpus(_DATA_DIR.value, 'test', _LANGUAGES.value, _SENTENCES.value, log=lambda l: None)
  except (registry.RegistryError, report.DataError, hyperparams.ParamsError, ValueError) as e:
    print(f'decode_benchmark: {e}', file=sys.stderr)
    return 1
  vocab = ours.params.source_vocab_size
  sentences = [[3 + (i - 3) % (vocab - 3) for i in src_vocab.Encode(s)]
               for lang in ts.pairs for s, _ in ts.pairs[lang]]
  batches = decode.Batches(sentences, _BATCH.value, inp.max_source_length)
  if not batches:
    print(f'decode_benchmark: fewer than --batch_size={_BATCH.value} sentences', file=sys.stderr)
    return 1
  hf = decode.HuggingFace(ours.params, _BEAM.value, _LENGTH.value)
  out = {'matmul_gflops': timing.MatmulRate(), 'beam_size': _BEAM.value, 'length': _LENGTH.value,
         'batch_size': _BATCH.value, 'sentences': sum(len(b) for b in batches),
         'threads': {'tf_intra_op': tf_threads(), 'torch': torch.get_num_threads()}}
  out.update(decode.TimeDecoders({'ours': ours, 'huggingface': hf}, batches, _ROUNDS.value))
  out['ratio'] = out['ours']['sentences_per_second'] / out['huggingface']['sentences_per_second']
  print(f'reference matmul 2048^3 (jit): {out["matmul_gflops"]:.1f} GFLOP/s')
  print(f'{out["sentences"]} test sentences in batches of {_BATCH.value}, beam {_BEAM.value}, '
        f'{_LENGTH.value} tokens each')
  print(f'lingvo_gshard BeamSearch (XLA)         {out["ours"]["sentences_per_second"]:8.2f} sentences/s')
  print(f'transformers NllbMoe generate (torch)  {out["huggingface"]["sentences_per_second"]:8.2f} sentences/s')
  print(f'ratio {out["ratio"]:.2f}x (target >= {_TARGET:g}x: {"ok" if out["ratio"] >= _TARGET else "MISSED"})')
  if _JSON.value:
    text = json.dumps(out, indent=1)
    if _JSON.value == '-':
      print(text)
    else:
      files.WriteText(_JSON.value, text + '\n')
  return 0


def tf_threads():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.config.threading.get_intra_op_parallelism_threads()


if __name__ == '__main__':
  _common.Main('decode_benchmark', main)
