r"""Translates text with a trained run or an exported SavedModel: a sentence a line in, a translation a line out.

  echo 'Ouvrir le fichier' | python -m lingvo_gshard.tools.translate --model=M4TinyMoEDemo \
      --logdir=/tmp/m4tiny_moe_demo
  python -m lingvo_gshard.tools.translate --saved_model=/tmp/m4tiny_export --input=fr.txt --output=en.txt
  python -m lingvo_gshard.tools.translate ... --nbest=4 --format=jsonl    # {"source", "translation", ...}

Lines are read from --input (or stdin) and written in the same order to --output (or stdout); an empty line
gives an empty line. Sentences are decoded in buffers of --buffer_size lines, sorted by length into the
evaluator's batches (so a whole test file gives the evaluator's translations); on a terminal each line is
translated as it is typed. Progress and sentences/s go to stderr. Sources longer than the model's longest
are cut to it, counted and reported. --format=jsonl writes {"line", "source", "translation", "score",
"truncated"} (and "nbest": [{"translation", "score"}, ...] with --nbest > 1); --format=text with --nbest > 1
writes LINE<TAB>RANK<TAB>SCORE<TAB>TRANSLATION rows. Scores are length-normalised log-probabilities.
"""
import os
import sys
import time

from absl import app
from absl import flags

from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files

_MODEL = flags.DEFINE_string('model', None, 'Experiment trained in --logdir: a registered name, a dotted path or '
                             'path/to/file.py:Name.')
_LOGDIR = flags.DEFINE_string('logdir', None, 'The run\'s log directory (params.txt, checkpoints).')
_CHECKPOINT = flags.DEFINE_string('checkpoint', '', 'Checkpoint of --logdir (ckpt-N or a path); default: the latest.')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Corpus of the run (its vocabularies); default: the one it trained on.')
_SAVED_MODEL = flags.DEFINE_string('saved_model', None, 'Instead of --model/--logdir: an export of tools/export.py.')
_INPUT = flags.DEFINE_string('input', '-', 'File of source sentences, one a line (- = stdin).')
_OUTPUT = flags.DEFINE_string('output', '-', 'Where translations go (- = stdout); written when all are done.')
_FORMAT = flags.DEFINE_enum('format', 'text', ['text', 'jsonl'], 'Output format (see the module docstring).')
_BEAM = flags.DEFINE_integer('beam_size', None, 'Beam size (default 4; an export keeps its own).', lower_bound=1,
                             upper_bound=64)
_ALPHA = flags.DEFINE_float('length_alpha', None, 'GNMT length-normalisation exponent (default 0.6).',
                            lower_bound=0.0, upper_bound=10.0)
_NO_REPEAT = flags.DEFINE_integer('no_repeat_ngram', None, 'N > 0: no hypothesis repeats an N-token sequence '
                                  '(default 0).', lower_bound=0, upper_bound=16)
_BATCH_TOKENS = flags.DEFINE_integer('batch_tokens', None, 'Source tokens per decoding batch (default 2048).',
                                     lower_bound=1, upper_bound=1 << 20)
_NBEST = flags.DEFINE_integer('nbest', 1, 'Hypotheses per sentence, best first (<= beam size).', lower_bound=1,
                              upper_bound=64)
_SOURCE_LANGUAGE = flags.DEFINE_string('source_language', '', 'Language of the input (checked against the '
                                       'languages the model was trained on; recorded in jsonl).')
_TARGET_LANGUAGE = flags.DEFINE_string('target_language', '', 'Language to translate into (its tag starts the '
                                       'decoder), one the model was trained to produce; default English.')
_BUFFER = flags.DEFINE_integer('buffer_size', 10000, 'Lines read before they are translated together (a '
                               'terminal: 1).', lower_bound=1, upper_bound=10_000_000)
_ERRORS = flags.DEFINE_enum('errors', 'strict', ['strict', 'replace'], 'Input that is not UTF-8: strict = an '
                            'error naming the line; replace = U+FFFD for the bad bytes (counted).')

_DEFAULTS = {'beam_size': 4, 'length_alpha': 0.6, 'no_repeat_ngram': 0, 'batch_tokens': 2048}


def _Fail(message):
  _common.Fail('translate', message)


def _Log(line):
  print(line, file=sys.stderr, flush=True)


def _CheckFlags():
  """Everything the flags decide, before TensorFlow is imported or anything is read or written."""
  if _SAVED_MODEL.value is not None:
    if _MODEL.value or _LOGDIR.value or _CHECKPOINT.value or _DATA_DIR.value:
      _Fail('--saved_model translates with an export; --model, --logdir, --checkpoint and --data_dir name a run '
            'instead: give one or the other')
  elif not (_MODEL.value and _LOGDIR.value):
    _Fail('give --model and --logdir (a trained run), or --saved_model (an export)')
  elif not files.IsDir(_LOGDIR.value):
    _Fail(f'--logdir={_LOGDIR.value}: no such directory')
  nbest, beam = _NBEST.value, _BEAM.value or _DEFAULTS['beam_size']
  if _SAVED_MODEL.value is None and nbest > beam:
    _Fail(f'--nbest={nbest} needs a beam of at least {nbest} (--beam_size={beam})')
  if _INPUT.value != '-' and not files.IsFile(_INPUT.value):
    _Fail(f'--input={_INPUT.value}: no such file')
  if _OUTPUT.value != '-':
    if _INPUT.value != '-' and files.AbsPath(_OUTPUT.value) == files.AbsPath(_INPUT.value):
      _Fail(f'--output={_OUTPUT.value} is the input file')
    if files.IsDir(_OUTPUT.value):
      _Fail(f'--output={_OUTPUT.value}: a directory')
    try:
      files.CheckWritableDir(os.path.dirname(files.AbsPath(_OUTPUT.value)), '--output')
    except ValueError as e:
      _Fail(str(e))


def _Translator():
  from lingvo_gshard.data import language_codes  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.serve import translator  # pylint: disable=g-import-not-at-top
  if _SAVED_MODEL.value is not None:
    t = translator.FromSavedModel(_SAVED_MODEL.value)
    given = {k: flags.FLAGS[k].value for k in _DEFAULTS if flags.FLAGS[k].value is not None}
    fixed = {k: getattr(t.settings, k) for k in given if given[k] != getattr(t.settings, k)}
    if fixed:
      raise ValueError(f'--saved_model={_SAVED_MODEL.value} was exported with '
                       + ', '.join(f'--{k}={v}' for k, v in fixed.items()) + '; export it again to change them')
  else:
    settings = {k: v if flags.FLAGS[k].value is None else flags.FLAGS[k].value for k, v in _DEFAULTS.items()}
    t = translator.FromRun(_common.Experiment(_MODEL.value), _LOGDIR.value, _DATA_DIR.value, _CHECKPOINT.value,
                           log=lambda line: None, **settings)
  if _NBEST.value > t.settings.beam_size:
    raise ValueError(f'--nbest={_NBEST.value} is more than the beam ({t.settings.beam_size})')
  if _SOURCE_LANGUAGE.value and t.source_languages:
    language_codes.CheckIn([_SOURCE_LANGUAGE.value], t.source_languages, '--source_language',
                           'the languages the model was trained on')
  if _TARGET_LANGUAGE.value:
    language_codes.CheckIn([_TARGET_LANGUAGE.value], t.target_languages, '--target_language',
                           'the languages the model was trained to translate into')
  return t



def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  _CheckFlags()
  began = time.time()
  _common.QuietLogs()
  from lingvo_gshard.serve import export  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.serve import text_io  # pylint: disable=g-import-not-at-top
  options = text_io.Options(nbest=_NBEST.value, format=_FORMAT.value, errors=_ERRORS.value,
                            source_language=_SOURCE_LANGUAGE.value, target_language=_TARGET_LANGUAGE.value,
                            buffer_size=_BUFFER.value)
  stream = sys.stdin.buffer if _INPUT.value == '-' else files.Open(_INPUT.value, 'rb')
  name = '<stdin>' if _INPUT.value == '-' else _INPUT.value
  interactive = _INPUT.value == '-' and sys.stdin.isatty()
  try:
    t = _Translator()
    startup = time.time() - began
    if not interactive:
      _Log(f'translating {name} with {t.description}')
    if _OUTPUT.value == '-':
      counts = text_io.TranslateStream(t, stream, name, sys.stdout, options, interactive, _Log)
    else:
      counts = text_io.TranslateInto(t, stream, name, _OUTPUT.value, options, interactive, _Log)
  except _common.UserErrors() + (export.ExportError,) as e:
    _Fail(str(e))
  finally:
    if stream is not sys.stdin.buffer:
      stream.close()
  if not interactive:
    _Log(counts.Summary(name, startup))


def run():
  """The console script's entry point."""
  _common.Main('translate', main)


if __name__ == '__main__':
  run()
