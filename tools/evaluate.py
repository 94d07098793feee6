r"""BLEU per language pair of a trained experiment, and delta-BLEU against bilingual baselines.

  python -m lingvo_gshard.tools.evaluate --model=M4TinyMoE --logdir=/tmp/m4tiny_moe
  python -m lingvo_gshard.tools.evaluate --model=M4TinyMoE --logdir=/tmp/m4tiny_moe \
      --baselines='/tmp/bilingual/{lang}' --plot=/tmp/delta_bleu.png

Decodes the --split of the corpus (beam search), scores with sacrebleu (signature printed and stored in
LOGDIR/bleu_<split>.json). With --baselines, reads each pair's bilingual result from the pattern's
bleu_<split>.json (evaluate the Bilingual_<lang> runs first) and prints and plots delta-BLEU, languages from
high to low resource, as the paper's figures do.
"""
import json
import os
import sys

from absl import app
from absl import flags

_MODEL = flags.DEFINE_string('model', None, 'Registered experiment that was trained in --logdir.')
_LOGDIR = flags.DEFINE_string('logdir', None, 'The trainer\'s log directory (checkpoints).')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Built corpus; default: the experiment\'s.')
_SPLIT = flags.DEFINE_enum('split', 'test', ['dev', 'test'], 'Split to translate.')
_LANGUAGES = flags.DEFINE_list('languages', [], 'Languages to evaluate; default: the experiment\'s (all).')
_MAX_SENTENCES = flags.DEFINE_integer('max_sentences', 0, 'Sentences per language (0 = all).')
_BEAM = flags.DEFINE_integer('beam_size', 4, 'Beam size.')
_ALPHA = flags.DEFINE_float('length_alpha', 0.6, 'GNMT length normalisation exponent.')
_BASELINES = flags.DEFINE_string('baselines', '', 'Log directory pattern of bilingual runs with {lang}.')
_PLOT = flags.DEFINE_string('plot', '', 'Write a delta-BLEU bar chart (PNG) here (needs matplotlib).')
flags.mark_flags_as_required(['model', 'logdir'])


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
  fig.savefig(path, dpi=150)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  from absl import logging  # pylint: disable=g-import-not-at-top
  logging.set_verbosity(logging.WARNING)
  from lingvo_gshard.core import registry  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.data import reader  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.data import report  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.train import evaluator  # pylint: disable=g-import-not-at-top
  registry.LoadAll()
  try:
    exp = registry.Get(_MODEL.value)
    ev = evaluator.Evaluator(exp, _LOGDIR.value, _DATA_DIR.value, _SPLIT.value, _BEAM.value, _ALPHA.value)
    results = ev.Evaluate(_LANGUAGES.value, _MAX_SENTENCES.value)
  except (registry.RegistryError, report.DataError, FileNotFoundError, ValueError) as e:
    print(f'evaluate: {e}', file=sys.stderr)
    sys.exit(1)
  print(f'sacrebleu signature: {results["signature"]}')
  baselines = {}
  if _BASELINES.value:
    for lang in results['languages']:
      path = os.path.join(_BASELINES.value.format(lang=lang), f'bleu_{_SPLIT.value}.json')
      if os.path.exists(path):
        with open(path) as f:
          baselines[lang] = json.load(f)
    print(f'{len(baselines)} of {len(results["languages"])} languages have a bilingual result')
  rows = evaluator.CompareToBaselines(results, baselines, reader.LoadManifest(ev.data_dir))
  print(f'{"lang":<12} {"bucket":<7} {"train":>7} {"BLEU":>6} {"bilingual":>9} {"delta":>6}')
  for r in rows:
    base = '' if r['baseline'] is None else f'{r["baseline"]:.2f}'
    delta = '' if r['delta'] is None else f'{r["delta"]:+.2f}'
    print(f'{r["lang"]:<12} {r["bucket"]:<7} {r["train"]:>7} {r["bleu"]:6.2f} {base:>9} {delta:>6}')
  mean = sum(r['bleu'] for r in rows) / max(len(rows), 1)
  print(f'average BLEU over {len(rows)} languages: {mean:.2f}')
  if _PLOT.value:
    _Plot(rows, _PLOT.value, f'{_MODEL.value} vs bilingual ({_SPLIT.value})')
    print(f'wrote {_PLOT.value}')


if __name__ == '__main__':
  app.run(main)
