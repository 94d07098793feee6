r"""How large the router logits of MoE runs grow over training, from their TensorBoard training summaries.

  python -m lingvo_gshard.tools.router_logits --runs=off=/tmp/runs/moe,on=/tmp/runs/moe_zloss \
      --json=/tmp/router_logits.json --plot=/tmp/router_logits.png

For every MoE layer of every run: the largest |router logit| of a step's batch (`router_logit_max`) and the
router z-loss, averaged over the first and the last --window of the run's steps, their difference (the
growth) and the largest value seen. The z-loss (`task.router_z_loss_weight`) is meant to keep them small.
"""
import json

from absl import app
from absl import flags

from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files

_RUNS = flags.DEFINE_list('runs', None, 'NAME=LOGDIR pairs of MoE training runs.', required=True)
_WINDOW = flags.DEFINE_float('window', 0.1, 'Fraction of the run\'s steps averaged at its start and at its '
                             'end.', lower_bound=0.01, upper_bound=0.5)
_JSON = flags.DEFINE_string('json', '', 'Write the summary and the series as JSON here.')
_PLOT = flags.DEFINE_string('plot', '', 'Write router_logit_max against steps, a panel per layer, as PNG here.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  logdirs = {}
  for item in _RUNS.value:
    name, sep, logdir = item.partition('=')
    if not sep or not name or not logdir:
      _common.Fail('router_logits', f'--runs item {item!r} is not NAME=LOGDIR')
    if name in logdirs:
      _common.Fail('router_logits', f'--runs names {name} twice')
    if not files.IsDir(logdir):
      _common.Fail('router_logits', f'--runs {name}={logdir}: no such log directory')
    logdirs[name] = logdir
  from lingvo_gshard.report import router_logits  # pylint: disable=g-import-not-at-top
  series, summaries = {}, {}
  for name, logdir in logdirs.items():
    try:
      series[name] = router_logits.ReadSeries(logdir)
    except (router_logits.RouterLogitsError, OSError) as e:
      _common.Fail('router_logits', f'--runs {name}: {e}')
    summaries[name] = router_logits.Summary(series[name], _WINDOW.value)
  w = max(len(n) for n in summaries) + 2  # run names as long as the user typed them
  print(f'{"run":<{w}}{"layer / summary":<40}{"first":>9}{"last":>9}{"growth":>9}{"max":>9}{"steps":>7}')
  for name, summary in summaries.items():
    for key, g in summary.items():
      print(f'{name:<{w}}{key:<40}{g["first"]:>9.3f}{g["last"]:>9.3f}{g["growth"]:>+9.3f}{g["max"]:>9.3f}'
            f'{g["steps"]:>7}')
  if _JSON.value:
    files.WriteText(_JSON.value, json.dumps({'window': _WINDOW.value, 'runs': logdirs, 'summary': summaries,
                                             'series': series}, indent=1) + '\n')
    print(f'wrote {_JSON.value}')
  if _PLOT.value:
    router_logits.Plot(series, _PLOT.value)
    print(f'wrote {_PLOT.value}')
  return 0


def run():
  """The console script's entry point."""
  _common.Main('router_logits', main)


if __name__ == '__main__':
  run()
