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
import json
import os
import sys
import time

from absl import app
from absl import flags

from lingvo_gshard.tools import _common

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
  from lingvo_gshard.utils import files  # pylint: disable=g-import-not-at-top
  if _SAVED_MODEL.value is not None:
    if _MODEL.value or _LOGDIR.value or _CHECKPOINT.value or _DATA_DIR.value:
      _Fail('--saved_model translates with an export; --model, --logdir, --checkpoint and --data_dir name a run '
            'instead: give one or the other')
  elif not (_MODEL.value and _LOGDIR.value):
    _Fail('give --model and --logdir (a trained run), or --saved_model (an export)')
  elif not os.path.isdir(_LOGDIR.value):
    _Fail(f'--logdir={_LOGDIR.value}: no such directory')
  nbest, beam = _NBEST.value, _BEAM.value or _DEFAULTS['beam_size']
  if _SAVED_MODEL.value is None and nbest > beam:
    _Fail(f'--nbest={nbest} needs a beam of at least {nbest} (--beam_size={beam})')
  if _INPUT.value != '-' and not os.path.isfile(_INPUT.value):
    _Fail(f'--input={_INPUT.value}: no such file')
  if _OUTPUT.value != '-':
    if _INPUT.value != '-' and os.path.abspath(_OUTPUT.value) == os.path.abspath(_INPUT.value):
      _Fail(f'--output={_OUTPUT.value} is the input file')
    if os.path.isdir(_OUTPUT.value):
      _Fail(f'--output={_OUTPUT.value}: a directory')
    try:
      files.CheckWritableDir(os.path.dirname(os.path.abspath(_OUTPUT.value)), '--output')
    except ValueError as e:
      _Fail(str(e))


def _Translator():
  from lingvo_gshard.data import language_codes  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.serve import translator  # pylint: disable=g-import-not-at-top
  if _SAVED_MODEL.value is not None:
    t = translator.FromSavedModel(_SAVED_MODEL.value)
    given = {k: getattr(_FLAGS[k], 'value') for k in _DEFAULTS if _FLAGS[k].value is not None}
    fixed = {k: getattr(t.settings, k) for k in given if given[k] != getattr(t.settings, k)}
    if fixed:
      raise ValueError(f'--saved_model={_SAVED_MODEL.value} was exported with '
                       + ', '.join(f'--{k}={v}' for k, v in fixed.items()) + '; export it again to change them')
  else:
    settings = {k: _FLAGS[k].value if _FLAGS[k].value is not None else v for k, v in _DEFAULTS.items()}
    t = translator.FromRun(_common.Experiment(_MODEL.value), _LOGDIR.value, _DATA_DIR.value, _CHECKPOINT.value,
                           log=lambda line: None, **settings)
  if _NBEST.value > t.settings.beam_size:
    raise ValueError(f'--nbest={_NBEST.value} is more than the beam ({t.settings.beam_size})')
  if _SOURCE_LANGUAGE.value and t.source_languages:
    language_codes.CheckIn([_SOURCE_LANGUAGE.value], t.source_languages, '--source_language',
                           'the languages the model was trained on')
  return t


_FLAGS = flags.FLAGS


def _Lines(stream, name):
  """Yields (line number, text) of a binary stream, decoded as --errors says; bad UTF-8 under 'strict' is a
  ValueError naming the line."""
  for number, raw in enumerate(stream, 1):
    raw = raw.rstrip(b'\n').rstrip(b'\r')
    try:
      yield number, raw.decode('utf-8'), False
    except UnicodeDecodeError as e:
      if _ERRORS.value == 'strict':
        raise ValueError(f'{name}:{number}: not UTF-8 (byte {e.start + 1} of the line); --errors=replace '
                         'translates it with U+FFFD for the bad bytes') from None
      yield number, raw.decode('utf-8', errors='replace'), True


def _Format(number, source, nbest, truncated):
  best, score = nbest[0] if nbest else ('', 0.0)
  if _FORMAT.value == 'jsonl':
    row = {'line': number, 'source': source, 'translation': best, 'score': round(score, 4),
           'truncated': truncated}
    if _SOURCE_LANGUAGE.value:
      row['source_language'] = _SOURCE_LANGUAGE.value
    if _NBEST.value > 1:
      row['nbest'] = [{'translation': h, 'score': round(s, 4)} for h, s in nbest]
    return json.dumps(row, ensure_ascii=False) + '\n'
  if _NBEST.value > 1:
    return ''.join(f'{number}\t{rank}\t{s:.4f}\t{h}\n' for rank, (h, s) in enumerate(nbest, 1))
  return best + '\n'


class _Counts:
  def __init__(self):
    self.lines = self.empty = self.truncated = self.replaced = 0
    self.decode_seconds = 0.0


def _TranslateBuffer(t, rows, out, counts, progress):
  """Translates the non-empty lines of `rows` [(number, text, replaced)] together, writes all in order."""
  todo = [i for i, (_, text, _) in enumerate(rows) if text.strip()]
  start = time.time()
  nbest, truncated = t.TranslateNbest([rows[i][1] for i in todo], _NBEST.value, progress) if todo else ([], [])
  counts.decode_seconds += time.time() - start
  results = {i: (n, c) for i, n, c in zip(todo, nbest, truncated)}
  for i, (number, text, replaced) in enumerate(rows):
    n, cut = results.get(i, ([], False))
    out.write(_Format(number, text, n, cut))
    counts.lines += 1
    counts.empty += i not in results
    counts.truncated += cut
    counts.replaced += replaced
  out.flush()


def _Run(t, stream, name, out, interactive):
  counts, rows, done_before = _Counts(), [], [0]
  last = [time.time()]

  def Progress(done, total):
    now = time.time()
    if not interactive and (now - last[0] >= 5 or done == total) and total > 1:
      last[0] = now
      rate = (done_before[0] + done) / max(counts.decode_seconds + now - began[0], 1e-9)
      _Log(f'  {done_before[0] + done} sentences, {rate:.1f}/s')

  began = [time.time()]
  buffer = 1 if interactive else _BUFFER.value
  for row in _Lines(stream, name):
    rows.append(row)
    if len(rows) >= buffer:
      began[0] = time.time()
      _TranslateBuffer(t, rows, out, counts, Progress)
      done_before[0] = counts.lines - counts.empty
      rows = []
  if rows:
    began[0] = time.time()
    _TranslateBuffer(t, rows, out, counts, Progress)
  return counts


def _Summary(counts, startup, name):
  rate = (counts.lines - counts.empty) / max(counts.decode_seconds, 1e-9)
  extra = [f'{counts.empty} empty'] if counts.empty else []
  if counts.truncated:
    extra.append(f'{counts.truncated} cut to the model\'s longest source')
  if counts.replaced:
    extra.append(f'{counts.replaced} with bytes that are not UTF-8 replaced')
  _Log(f'translated {counts.lines} lines of {name}{" (" + ", ".join(extra) + ")" if extra else ""} in '
       f'{counts.decode_seconds:.1f}s: {rate:.1f} sentences/s (start-up {startup:.1f}s)')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  _CheckFlags()
  began = time.time()
  _common.QuietLogs()
  from lingvo_gshard.serve import export  # pylint: disable=g-import-not-at-top
  stream = sys.stdin.buffer if _INPUT.value == '-' else open(_INPUT.value, 'rb')  # pylint: disable=consider-using-with
  name = '<stdin>' if _INPUT.value == '-' else _INPUT.value
  interactive = _INPUT.value == '-' and sys.stdin.isatty()
  partial = None
  try:
    t = _Translator()
    startup = time.time() - began
    if not interactive:
      _Log(f'translating {name} with {t.description}')
    if _OUTPUT.value == '-':
      counts = _Run(t, stream, name, sys.stdout, interactive)
    else:
      # Written beside the output and moved over it at the end: an error leaves an earlier output whole.
      partial = f'{_OUTPUT.value}.partial-{os.getpid()}'
      with open(partial, 'w', encoding='utf-8') as out:
        counts = _Run(t, stream, name, out, interactive)
      os.replace(partial, _OUTPUT.value)
      partial = None
  except _common.UserErrors() + (export.ExportError,) as e:
    _Fail(str(e))
  finally:
    if partial and os.path.exists(partial):
      os.remove(partial)
    if stream is not sys.stdin.buffer:
      stream.close()
  if not interactive:
    _Summary(counts, startup, name)


def run():
  """The console script's entry point."""
  _common.Main('translate', main)


if __name__ == '__main__':
  run()
