r"""Exports a trained run as a SavedModel that translates (strings in, translations and scores out).

  python -m lingvo_gshard.tools.export --model=M4TinyMoEDemo --logdir=/tmp/m4tiny_moe_demo \
      --export_dir=/tmp/m4tiny_export
  saved_model_cli show --dir=/tmp/m4tiny_export --all
  python -m lingvo_gshard.tools.translate --saved_model=/tmp/m4tiny_export --input=fr.txt

The signature and what is stored beside it: lingvo_gshard/serve/export.py; serving it with TensorFlow Serving:
docs/guides/serving.md. Decoding settings (beam, length penalty, n-gram blocking, batch size) are fixed in the
export. --export_dir may be a local path or any filesystem TensorFlow reaches (gs://...).
"""
import sys

from absl import app
from absl import flags

from lingvo_gshard.tools import _common

_MODEL = flags.DEFINE_string('model', None, 'Experiment trained in --logdir: a registered name, a dotted path or '
                             'path/to/file.py:Name.', required=True)
_LOGDIR = flags.DEFINE_string('logdir', None, 'The run\'s log directory (params.txt, checkpoints).', required=True)
_CHECKPOINT = flags.DEFINE_string('checkpoint', '', 'Checkpoint of --logdir (ckpt-N or a path); default: the latest.')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Corpus of the run (its vocabularies); default: the one it trained on.')
_EXPORT_DIR = flags.DEFINE_string('export_dir', None, 'Where the SavedModel goes.', required=True)
_OVERWRITE = flags.DEFINE_bool('overwrite', False, 'Replace what --export_dir holds.')
_BEAM = flags.DEFINE_integer('beam_size', 4, 'Beam size (also the n-best the signature returns).', lower_bound=1,
                             upper_bound=64)
_ALPHA = flags.DEFINE_float('length_alpha', 0.6, 'GNMT length-normalisation exponent.', lower_bound=0.0,
                            upper_bound=10.0)
_NO_REPEAT = flags.DEFINE_integer('no_repeat_ngram', 0, 'N > 0: no hypothesis repeats an N-token sequence.',
                                  lower_bound=0, upper_bound=16)
_BATCH_TOKENS = flags.DEFINE_integer('batch_tokens', 2048, 'Source tokens per decoding batch.', lower_bound=1,
                                     upper_bound=1 << 20)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  _common.QuietLogs()
  from lingvo_gshard.serve import export  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.serve import translator  # pylint: disable=g-import-not-at-top
  log = lambda line: print(line, file=sys.stderr, flush=True)
  try:
    export.CheckTarget(_EXPORT_DIR.value, _OVERWRITE.value)  # before the run is restored: a refusal costs nothing
    t = translator.FromRun(_common.Experiment(_MODEL.value), _LOGDIR.value, _DATA_DIR.value, _CHECKPOINT.value,
                           beam_size=_BEAM.value, length_alpha=_ALPHA.value, no_repeat_ngram=_NO_REPEAT.value,
                           batch_tokens=_BATCH_TOKENS.value, log=lambda line: None)
    metadata = export.Export(t.evaluator, _MODEL.value, _EXPORT_DIR.value, _OVERWRITE.value, log=log)
  except _common.UserErrors() + (export.ExportError,) as e:
    _common.Fail('export', str(e))
  print(f'{_EXPORT_DIR.value}: {metadata["experiment"]} {metadata["checkpoint"]} (step {metadata["step"]}), '
        f'{metadata["bytes"] / 1e6:.1f} MB')


def run():
  """The console script's entry point."""
  _common.Main('export', main)


if __name__ == '__main__':
  run()
