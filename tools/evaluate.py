r"""BLEU and chrF per language pair of a trained run, bucket averages, and delta-BLEU against bilingual runs.

  python -m lingvo_gshard.tools.evaluate --model=M4TinyMoE --logdir=/tmp/m4tiny_moe --max_sentences=50 \
      --examples=5
  python -m lingvo_gshard.tools.evaluate --model=M4TinyMoE --logdir=/tmp/m4tiny_moe --test_dir=/data/ui
  python -m lingvo_gshard.tools.evaluate --model=M4TinyMoE --logdir=/tmp/m4tiny_moe \
      --baselines='/tmp/bilingual/{lang}' --plot=/tmp/delta_bleu.png

Decodes the --split of the corpus (or every <lang>.tsv of --test_dir: source<TAB>reference) with beam search,
restoring the run as it was trained (its params.txt), and scores with sacrebleu (signatures printed and
stored). Results and aligned .src/.ref/.hyp files go to LOGDIR/decode_<set>/<checkpoint>/; evaluating more
languages later merges into the same results.json. With --baselines, each pair's bilingual result is read
from the pattern's newest results of the same set, and delta-BLEU is printed and plotted, languages from high
to low resource, as in the paper. Every flag is checked before decoding; bad input exits 1 with one line.
"""
import os

from absl import app
from absl import flags

from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files

_MODEL = flags.DEFINE_string('model', None, 'Experiment that was trained in --logdir, named as the trainer\'s '
                             '--model was (registered name, dotted path or file.py:Name).')
_LOGDIR = flags.DEFINE_string('logdir', None, 'The trainer\'s log directory (params.txt, checkpoints).')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Built corpus; default: the one the run was trained on.')
_SPLIT = flags.DEFINE_enum('split', 'test', ['dev', 'test'], 'Corpus split to translate.')
_TEST_DIR = flags.DEFINE_string('test_dir', '', 'Instead of a corpus split: a directory of <lang>.tsv files '
                                '(source<TAB>reference per line).')
_LANGUAGES = flags.DEFINE_list('languages', [], 'Languages to evaluate; default: all.')
_MAX_SENTENCES = flags.DEFINE_integer('max_sentences', 0, 'First N sentences per language (0 = all).', lower_bound=0)
_BEAM = flags.DEFINE_integer('beam_size', 4, 'Beam size.', lower_bound=1)
_ALPHA = flags.DEFINE_float('length_alpha', 0.6, 'GNMT length normalisation exponent.', lower_bound=0.0)
_NO_REPEAT = flags.DEFINE_integer('no_repeat_ngram', 0, 'N > 0: no hypothesis repeats an N-token sequence '
                                  "(fairseq's --no-repeat-ngram-size); 0 = off.", lower_bound=0)
_BATCH_TOKENS = flags.DEFINE_integer('batch_tokens', 2048, 'Source tokens per decoding batch (sentences x '
                                     'bucket length).', lower_bound=64)
_CHECKPOINT = flags.DEFINE_string('checkpoint', '', 'Checkpoint prefix to evaluate; default: the latest.')
_EXAMPLES = flags.DEFINE_integer('examples', 0, 'Print this many example translations from different '
                                 'languages.', lower_bound=0)
_BASELINES = flags.DEFINE_string('baselines', '', 'Log directory pattern of bilingual runs, with {lang}.')
_PLOT = flags.DEFINE_string('plot', '', 'Write a delta-BLEU plot (PNG) here (needs matplotlib).')
flags.mark_flags_as_required(['model', 'logdir'])


def _Fail(message):
  _common.Fail('evaluate', message)


def _CheckFlags():
  """Everything that can be wrong with the flags, found before any decoding."""
  # Numbers are checked by their flags' bounds while the flags are parsed (_common.Main).
  if not files.IsDir(_LOGDIR.value):
    _Fail(f'--logdir {_LOGDIR.value}: no such directory')
  if _BASELINES.value:
    if '{lang}' not in _BASELINES.value:
      _Fail(f'--baselines {_BASELINES.value!r} has no {{lang}} placeholder')
    try:
      _BASELINES.value.format(lang='xx')
    except (KeyError, IndexError, ValueError) as e:
      _Fail(f'--baselines {_BASELINES.value!r}: only {{lang}} may be a placeholder ({type(e).__name__}: {e})')
  if _PLOT.value:
    if not _BASELINES.value:
      _Fail('--plot draws delta-BLEU against bilingual runs: give --baselines too')
    try:
      import matplotlib  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      _Fail('--plot needs matplotlib (pip install matplotlib, or the [plots] extra)')
    parent = os.path.dirname(files.AbsPath(_PLOT.value))
    if not files.IsUrl(parent) and (not os.path.isdir(parent) or not os.access(parent, os.W_OK)):
      _Fail(f'--plot {_PLOT.value}: directory {parent} does not exist or is not writable')


def _Plot(rows, path, title):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  rows = [r for r in rows if r['delta'] is not None]
  fig, ax = plt.subplots(figsize=(max(6, 0.18 * len(rows)), 3.5))
  colors = {'high': 'tab:blue', 'medium': 'tab:orange', 'low': 'tab:green'}
  ax.bar(range(len(rows)), [r['delta'] for r in rows], color=[colors.get(r['bucket'], 'gray') for r in rows])
  ax.axhline(0, color='black', linewidth=0.5)
  ax.set_xticks(range(len(rows)), [r['lang'] for r in rows], rotation=90, fontsize=6)
  ax.set_ylabel('delta BLEU vs bilingual')
  ax.set_title(title)
  fig.tight_layout()
  files.SaveFigure(fig, path, dpi=150)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  _CheckFlags()
  _common.QuietLogs()
  from lingvo_gshard.eval import decode_job  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.eval import evaluator  # pylint: disable=g-import-not-at-top
  log = lambda line: print(line, flush=True)
  try:
    exp = _common.Experiment(_MODEL.value)
    results, ev, ts, manifest = decode_job.Decode(
        exp, _LOGDIR.value, _DATA_DIR.value, _SPLIT.value, _TEST_DIR.value, _LANGUAGES.value,
        _MAX_SENTENCES.value, _BEAM.value, _ALPHA.value, _BATCH_TOKENS.value, _CHECKPOINT.value,
        _EXAMPLES.value, log=log, no_repeat_ngram=_NO_REPEAT.value)
  except _common.UserErrors() as e:
    _Fail(str(e))
  baselines = {}
  if _BASELINES.value:
    for lang in results['languages']:
      found = evaluator.LatestResults(_BASELINES.value.format(lang=lang), ts.name)
      if found and lang in found.get('languages', {}):
        baselines[lang] = found
    print(f'{len(baselines)} of {len(results["languages"])} languages have a bilingual result')
  rows = evaluator.CompareToBaselines(results, baselines, manifest)
  print('\n'.join(decode_job.FormatResults(results, rows)))
  print(f'wrote {ev.ResultDir(ts.name)}/results.json')
  if _PLOT.value:
    _Plot(rows, _PLOT.value, f'{_MODEL.value} vs bilingual ({ts.name})')
    print(f'wrote {_PLOT.value}')


def run():
  """The console script's entry point."""
  _common.Main('evaluate', main)


if __name__ == '__main__':
  run()
