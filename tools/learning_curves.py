r"""Learning curves of training runs: BLEU and chrF of every evaluated checkpoint against steps and wall-clock.

  python -m lingvo_gshard.tools.learning_curves --runs=MoE=/tmp/m4tiny_moe,Dense=/tmp/m4tiny_dense \
      --set=dev --average=top10 --plot=docs/curves.png --json=docs/curves.json

Reads each run's checkpoints.jsonl (step, training seconds) and the results of the checkpoints evaluated with
tools/evaluate.py (--checkpoint=LOGDIR/ckpt-N for the older ones); prints a table, optionally writes the
points as JSON and a PNG (BLEU and chrF against steps and against minutes).
"""
import json
import os
import sys

from absl import app
from absl import flags

_RUNS = flags.DEFINE_list('runs', None, 'NAME=LOGDIR pairs.', required=True)
_SET = flags.DEFINE_string('set', 'dev', 'Evaluated test set: dev, test or tsv-<dir>.')
_AVERAGE = flags.DEFINE_string('average', 'top10', 'Average of results.json to plot: top10, high, medium, '
                               'low or all.')
_PLOT = flags.DEFINE_string('plot', '', 'Write the curves as PNG here.')
_JSON = flags.DEFINE_string('json', '', 'Write the points as JSON here.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  from lingvo_gshard.train import curves  # pylint: disable=g-import-not-at-top
  runs = {}
  for item in _RUNS.value:
    name, sep, logdir = item.partition('=')
    if not sep or not name or not logdir:
      print(f'learning_curves: --runs item {item!r} is not NAME=LOGDIR', file=sys.stderr)
      return 1
    if not os.path.isdir(logdir):
      print(f'learning_curves: {logdir}: no such log directory', file=sys.stderr)
      return 1
    runs[name] = curves.Points(logdir, _SET.value, _AVERAGE.value)
  print(f'{"run":<14}{"step":>7}{"minutes":>9}{"BLEU":>7}{"chrF":>7}{"langs":>6}{"sentences":>10}')
  for name, points in runs.items():
    if not points:
      print(f'{name:<14} no evaluated checkpoint in {_SET.value}')
    for p in points:
      print(f'{name:<14}{p["step"]:>7}{p["train_seconds"] / 60:>9.1f}{p["bleu"]:>7.2f}{p["chrf"]:>7.2f}'
            f'{p["languages"]:>6}{p["sentences"]:>10}')
  if _JSON.value:
    with open(_JSON.value, 'w') as f:
      json.dump({'set': _SET.value, 'average': _AVERAGE.value, 'runs': runs}, f, indent=1)
    print(f'wrote {_JSON.value}')
  if _PLOT.value:
    curves.Plot(runs, _PLOT.value, f'{_AVERAGE.value} average on {_SET.value}')
    print(f'wrote {_PLOT.value}')
  return 0


if __name__ == '__main__':
  app.run(main)
