r"""The paper's figure on the embedded corpus: ΔBLEU of multilingual runs against the bilingual baselines.

  # record an evaluated checkpoint of each multilingual run (evaluate it first: tools/evaluate.py)
  python -m lingvo_gshard.tools.m4_report --data_dir=/tmp/gshard_data \
      --add=dense=/tmp/runs/dense --add=moe=/tmp/runs/moe@ckpt-8500
  # rebuild results.json, RESULTS.md and delta_bleu.png from docs/experiments/m4_tiny/runs/ alone
  python -m lingvo_gshard.tools.m4_report

--add=NAME=LOGDIR[@CHECKPOINT] copies the scores of that checkpoint (default: the newest evaluated one) of
--set from LOGDIR/decode_<set>/ into RUNS_DIR/multilingual/ (a small JSON to commit). The report takes, per
run name, its newest checkpoint scored on the whole --set (or the first --max_sentences of it), the baselines
from RUNS_DIR/bilingual/ (tools/train_baselines.py), and writes OUT_DIR/results.json, RESULTS.md (tables and
the targets) and delta_bleu.png. Missing baselines stay missing: a dash, never a zero. A hand-written
RUNS_DIR/commentary.md, if there is one, goes into RESULTS.md under "What the figures say".
"""
import json
import os

from absl import app
from absl import flags

from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files

_RUNS_DIR = flags.DEFINE_string('runs_dir', 'docs/experiments/m4_tiny/runs', 'The committed pieces '
                                '(corpus.json, bilingual/, multilingual/).')
_OUT_DIR = flags.DEFINE_string('out_dir', 'docs/experiments/m4_tiny', 'Where results.json, RESULTS.md and the '
                               'plot go.')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Built corpus: (re)writes RUNS_DIR/corpus.json from its '
                                'manifest (needed once).')
_ADD = flags.DEFINE_multi_string('add', [], 'NAME=LOGDIR[@CHECKPOINT]: record a multilingual run\'s scores.')
_SET = flags.DEFINE_string('set', 'test', 'Test set the report compares (decode_<set>/ of the runs).')
_MAX_SENTENCES = flags.DEFINE_integer('max_sentences', 0, 'Compare scores of the first N sentences per '
                                      'language (0: the whole split).', lower_bound=0)
_DENSE = flags.DEFINE_string('dense', 'dense', 'Run name of the dense model (for the targets).')
_MOE = flags.DEFINE_string('moe', 'moe', 'Run name of the MoE model.')
_LARGER = flags.DEFINE_string('larger_moe', 'moe64', 'Run name of the larger MoE model.')


def _Fail(message):
  _common.Fail('m4_report', message)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  adds = []
  for spec in _ADD.value:
    name, logdir, ckpt = _common.RunSpec('m4_report', 'add', spec)
    if not name.replace('_', '').replace('-', '').isalnum():
      _Fail(f'--add={spec}: run name {name!r} must be letters, digits, _ or -')
    adds.append((name, logdir, ckpt))
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    _Fail('the plot needs matplotlib (pip install matplotlib, or the [plots] extra)')
  from lingvo_gshard.data import reader  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.report import delta_bleu  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.eval import evaluator  # pylint: disable=g-import-not-at-top
  try:
    if _DATA_DIR.value:
      print(f'wrote {delta_bleu.WriteCorpus(_RUNS_DIR.value, reader.LoadManifest(_DATA_DIR.value))}')
    for name, logdir, ckpt in adds:
      if ckpt:
        path = os.path.join(logdir, f'decode_{_SET.value}', ckpt, 'results.json')
        if not files.Exists(path):
          raise FileNotFoundError(f'--add={name}: {path} does not exist (evaluate {ckpt} first)')
        results = json.loads(files.ReadText(path))
      else:
        results = evaluator.LatestResults(logdir, _SET.value)
        if results is None:
          raise FileNotFoundError(f'--add={name}: {logdir} has no decode_{_SET.value}/*/results.json '
                                  '(evaluate it first)')
      print(f'wrote {delta_bleu.AddRun(_RUNS_DIR.value, name, logdir, results)}')
    results = delta_bleu.Build(_RUNS_DIR.value, _SET.value, _MAX_SENTENCES.value)
  except _common.UserErrors() as e:
    _Fail(str(e))
  files.MakeDirs(_OUT_DIR.value)
  files.WriteJson(os.path.join(_OUT_DIR.value, 'results.json'), results)
  commentary = ''
  commentary_path = os.path.join(_RUNS_DIR.value, 'commentary.md')
  if files.Exists(commentary_path):
    commentary = files.ReadText(commentary_path)
  text = delta_bleu.Markdown(results, _DENSE.value, _MOE.value, _LARGER.value, commentary)
  files.WriteText(os.path.join(_OUT_DIR.value, 'RESULTS.md'), text)
  delta_bleu.Plot(results, os.path.join(_OUT_DIR.value, 'delta_bleu.png'))
  a = results['averages']
  print(f'{len(results["languages"])} languages, {a["all"]["with_bilingual"]} with a baseline; runs: '
        + (', '.join(results['runs']) or 'none'))
  for t in delta_bleu.Targets(results, _DENSE.value, _MOE.value, _LARGER.value):
    met = 'not measured yet' if t['met'] is None else ('met' if t['met'] else 'MISSED')
    value = '' if t['measured'] is None else f' ({t["measured"]:+.2f} over {t["languages"]} of {t["of"]} languages)'
    print(f'  {t["target"]}: {met}{value}')
  print(f'wrote {_OUT_DIR.value}/results.json, RESULTS.md, delta_bleu.png')
  return 0


def run():
  """The console script's entry point."""
  _common.Main('m4_report', main)


if __name__ == '__main__':
  run()
