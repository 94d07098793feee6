r"""Is run B better than run A on the test split, beyond the noise of which sentences were drawn?

  python -m lingvo_gshard.tools.compare_runs --a=dense=/tmp/runs/dense@ckpt-8500 \
      --b=moe=/tmp/runs/moe_xd@ckpt-8500 [--metrics=bleu,chrf] [--resamples=1000] [--json=out.json]
  python -m lingvo_gshard.tools.compare_runs --data_dir=/tmp/gshard_data \
      --a=moe64=docs/experiments/m4_tiny/runs/hypotheses/moe64-test-all-ckpt-8500.tar.gz \
      --b=moe=/tmp/runs/moe_xd@ckpt-8500

Reads both runs' evaluator output (LOGDIR/decode_<set>/<checkpoint>/: <lang>.hyp, <lang>.ref, results.json;
without @CHECKPOINT the newest evaluated one), or such a directory packed as a .tar.gz (results.json and the
<lang>.hyp files, as docs/experiments/m4_tiny/runs/hypotheses/ keeps them: the references are rebuilt from the
corpus at --data_dir, and each language's BLEU must come out as recorded), and prints, per bucket of languages
and for all of them, the mean per-language score of each run, B - A, its 95% paired-bootstrap interval and the
share of resamples in which B was ahead (report/significance.py); --json adds the same per language.
"""
import os

from absl import app
from absl import flags

from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files

_A = flags.DEFINE_string('a', None, 'NAME=LOGDIR[@CHECKPOINT] or NAME=ARCHIVE.tar.gz: the reference run.')
_B = flags.DEFINE_string('b', None, 'NAME=LOGDIR[@CHECKPOINT] or NAME=ARCHIVE.tar.gz: the run compared with it.')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'The built corpus the runs were decoded from: rebuilds the '
                                'references of an archive that does not hold them.')
_SET = flags.DEFINE_string('set', 'test', 'Evaluated set (decode_<set>/ in both log directories; an archive '
                           'holds one decode, of the set its results.json names).')
_METRICS = flags.DEFINE_list('metrics', ['bleu', 'chrf'], 'bleu and/or chrf.')
_LANGUAGES = flags.DEFINE_list('languages', [], 'Languages to compare; default: all that were evaluated.')
_RESAMPLES = flags.DEFINE_integer('resamples', 1000, 'Bootstrap resamples.', lower_bound=10)
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the resampling.', lower_bound=0)
_JSON = flags.DEFINE_string('json', '', 'Write the full result (per language too) as JSON here.')


def _Fail(message):
  _common.Fail('compare_runs', message)


def _ResultDir(flag, spec):
  """(name, result directory or archive) of a NAME=LOGDIR[@CHECKPOINT] or NAME=ARCHIVE flag value."""
  from lingvo_gshard.eval import evaluator  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.report import significance  # pylint: disable=g-import-not-at-top
  name, logdir, ckpt = _common.RunSpec('compare_runs', flag, spec, significance.ARCHIVE_SUFFIXES)
  if logdir.endswith(significance.ARCHIVE_SUFFIXES):
    if not files.IsFile(logdir):
      _Fail(f'--{flag}: {logdir}: no such file')
    return name, logdir
  if ckpt:
    result_dir = os.path.join(logdir, f'decode_{_SET.value}', os.path.basename(ckpt))
    if not files.Exists(os.path.join(result_dir, 'results.json')):
      _Fail(f'--{flag}: {result_dir}/results.json does not exist (evaluate {ckpt} first)')
  else:
    result_dir = evaluator.LatestResultDir(logdir, _SET.value)
    if result_dir is None:
      _Fail(f'--{flag}: {logdir} has no decode_{_SET.value}/*/results.json (evaluate it first)')
  return name, result_dir


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  _common.QuietLogs()  # TFDS logs a line per language split it opens to rebuild an archive's references
  from lingvo_gshard.eval import evaluator  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.report import significance  # pylint: disable=g-import-not-at-top
  for metric in _METRICS.value:
    if metric not in evaluator.METRICS:
      _Fail(f'--metrics: unknown metric {metric!r}; one of {", ".join(evaluator.METRICS)}')
  (name_a, dir_a), (name_b, dir_b) = _ResultDir('a', _A.value), _ResultDir('b', _B.value)
  if name_a == name_b:
    _Fail(f'--a and --b are both named {name_a!r}')
  out = {'a': {'name': name_a, 'result_dir': dir_a}, 'b': {'name': name_b, 'result_dir': dir_b}}
  try:
    a, b = (significance.Load(d, _LANGUAGES.value, _DATA_DIR.value) for d in (dir_a, dir_b))
    for metric in _METRICS.value:
      result = significance.PairedBootstrap(a, b, metric, _RESAMPLES.value, _SEED.value)
      out[metric] = result
      print(f'{name_b} vs {name_a} ({dir_b} vs {dir_a}), {result["resamples"]} paired resamples:')
      print(significance.Table(result, name_a, name_b))
      print(f'signature: {result["signature"]}\n')
  except _common.UserErrors() as e:
    _Fail(str(e))
  if _JSON.value:
    files.WriteJson(_JSON.value, out, sort_keys=False)
    print(f'wrote {_JSON.value}')
  return 0


def run():
  """The console script's entry point."""
  _common.Main('compare_runs', main)


if __name__ == '__main__':
  run()
