r"""Learning curves of training runs: BLEU and chrF of every evaluated checkpoint against steps and wall-clock,
or (--metric=xent) the dev cross-entropy the training loop records, with each run's gap to the first run.

  python -m lingvo_gshard.tools.learning_curves --runs=MoE=/tmp/m4tiny_moe,Dense=/tmp/m4tiny_dense \
      --set=dev --average=top10 --plot=/tmp/curves.png --json=/tmp/curves.json
  python -m lingvo_gshard.tools.learning_curves --runs=Dense=/tmp/m4tiny_dense,MoE=/tmp/m4tiny_moe \
      --metric=xent --plot=docs/experiments/m4_tiny/dev_xent.png \
      --json=docs/experiments/m4_tiny/dev_xent.json

Reads each run's checkpoints.jsonl (step, training seconds) and the results of the checkpoints evaluated with
tools/evaluate.py (--checkpoint=LOGDIR/ckpt-N for the older ones); prints a table, optionally writes the
points as JSON and a PNG (BLEU and chrF against steps and against minutes).
"""
import json
import sys

from absl import app
from absl import flags

from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files

_RUNS = flags.DEFINE_list('runs', None, 'NAME=LOGDIR pairs.', required=True)
_SET = flags.DEFINE_string('set', 'dev', 'Evaluated test set: dev, test or tsv-<dir>.')
_AVERAGE = flags.DEFINE_string('average', 'top10', 'Average of results.json to plot: top10, high, medium, '
                               'low or all.')
_PLOT = flags.DEFINE_string('plot', '', 'Write the curves as PNG here.')
_JSON = flags.DEFINE_string('json', '', 'Write the points as JSON here.')
_METRIC = flags.DEFINE_enum('metric', 'bleu', ['bleu', 'xent', 'loss'], 'bleu: BLEU and chrF of the evaluated '
                            'checkpoints (--set, --average); xent or loss: the dev value every run\'s '
                            'dev_eval.jsonl holds, and its difference from the first run\'s at equal steps.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  from lingvo_gshard.report import curves  # pylint: disable=g-import-not-at-top
  runs = {}
  for item in _RUNS.value:
    name, sep, logdir = item.partition('=')
    if not sep or not name or not logdir:
      print(f'learning_curves: --runs item {item!r} is not NAME=LOGDIR', file=sys.stderr)
      return 1
    if not files.IsDir(logdir):
      print(f'learning_curves: {logdir}: no such log directory', file=sys.stderr)
      return 1
    try:
      runs[name] = (curves.Points(logdir, _SET.value, _AVERAGE.value) if _METRIC.value == 'bleu'
                    else curves.DevLossPoints(logdir, _METRIC.value))
    except _common.UserErrors() as e:  # a checkpoints.jsonl or results.json that does not read
      print(f'learning_curves: {e}', file=sys.stderr)
      return 1
  if _METRIC.value != 'bleu':
    return _DevLoss(runs, _METRIC.value)
  print(f'{"run":<14}{"step":>7}{"minutes":>9}{"BLEU":>7}{"chrF":>7}{"langs":>6}{"sentences":>10}')
  for name, points in runs.items():
    if not points:
      print(f'{name:<14} no evaluated checkpoint in {_SET.value}')
    for p in points:
      print(f'{name:<14}{p["step"]:>7}{p["train_seconds"] / 60:>9.1f}{p["bleu"]:>7.2f}{p["chrf"]:>7.2f}'
            f'{p["languages"]:>6}{p["sentences"]:>10}')
  if _JSON.value:
    files.WriteText(_JSON.value, json.dumps({'set': _SET.value, 'average': _AVERAGE.value, 'runs': runs}, indent=1))
    print(f'wrote {_JSON.value}')
  if _PLOT.value:
    curves.Plot(runs, _PLOT.value, f'{_AVERAGE.value} average on {_SET.value}')
    print(f'wrote {_PLOT.value}')
  return 0


def _DevLoss(runs, metric):
  """The --metric=xent|loss report: a table by step, one column per run and its gap to the first run."""
  from lingvo_gshard.report import curves  # pylint: disable=g-import-not-at-top
  names = list(runs)
  for name, points in runs.items():
    if not points:
      print(f'learning_curves: {name}: no dev_eval.jsonl rows with {metric}', file=sys.stderr)
      return 1
  values = {n: {p['step']: p[metric] for p in points} for n, points in runs.items()}
  steps = sorted(set().union(*values.values()))
  # Columns as wide as their headers, so long run names keep the table aligned.
  width = {n: max(12, len(n) + 1) for n in names}
  gap_width = {n: max(16, len(n) + len(names[0]) + 2) for n in names[1:]}
  print(f'{"step":>7}' + ''.join(f'{n:>{width[n]}}' for n in names)
        + ''.join(f'{n + "-" + names[0]:>{gap_width[n]}}' for n in names[1:]))
  for step in steps:
    cells = [f'{values[n][step]:>{width[n]}.4f}' if step in values[n] else f'{"—":>{width[n]}}' for n in names]
    gaps = [f'{values[n][step] - values[names[0]][step]:>+{gap_width[n]}.4f}'
            if step in values[n] and step in values[names[0]] else f'{"—":>{gap_width[n]}}' for n in names[1:]]
    print(f'{step:>7}' + ''.join(cells) + ''.join(gaps))
  if _JSON.value:
    files.WriteText(_JSON.value, json.dumps({
        'metric': metric, 'runs': runs,
        'differences': {n: curves.Differences(runs[n], runs[names[0]], metric) for n in names[1:]}}, indent=1))
    print(f'wrote {_JSON.value}')
  if _PLOT.value:
    curves.PlotDevLoss(runs, _PLOT.value, metric)
    print(f'wrote {_PLOT.value}')
  return 0


if __name__ == '__main__':
  _common.Main('learning_curves', main)
