r"""The mean of a run's last checkpoints (fairseq's average_checkpoints.py), as a log directory to evaluate.

  python -m lingvo_gshard.tools.average_checkpoints --model=M4TinyMoEDemo --logdir=/tmp/m4tiny_moe_demo \
      --last=3 --output_logdir=/tmp/m4tiny_moe_demo_avg3
  python -m lingvo_gshard.tools.average_checkpoints --model=M4TinyMoEDemo --logdir=/tmp/m4tiny_moe_demo \
      --checkpoints=ckpt-1200,ckpt-1390 --output_logdir=/tmp/m4tiny_moe_demo_avg2
  python -m lingvo_gshard.tools.evaluate --model=M4TinyMoEDemo --logdir=/tmp/m4tiny_moe_demo_avg3

Averages the model's float weights of the --last N checkpoints the run keeps (or the --checkpoints named)
and writes them, with the run's params.txt and data.json, as checkpoint ckpt-<newest step> of
--output_logdir, next to ckpt-<step>.average.json saying which checkpoints and steps were averaged
(train/averaging.py says what is kept and dropped). The checkpoints must be of one run: the same params,
corpus and weights, else one line names the two log directories or the first differing weight. Every flag
and path is checked before anything is written; the run's log directory is only read, and the output
appears whole or not at all.
"""
import os

from absl import app
from absl import flags

from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files

_MODEL = flags.DEFINE_string('model', None, 'Registered experiment that was trained in --logdir.')
_LOGDIR = flags.DEFINE_string('logdir', None, 'The trainer\'s log directory whose checkpoints are averaged.')
_LAST = flags.DEFINE_integer('last', None, 'Average the N newest checkpoints the run keeps.', lower_bound=2,
                             upper_bound=1000)
_CHECKPOINTS = flags.DEFINE_list('checkpoints', [], 'Instead of --last: the checkpoints to average, names in '
                                 '--logdir (ckpt-800) or paths to checkpoints of the same run.')
_OUTPUT = flags.DEFINE_string('output_logdir', None, 'Directory to write the average to, as a log directory '
                              'the evaluator reads (created; must be absent or empty).')
_OVERWRITE = flags.DEFINE_bool('overwrite', False, 'Replace an earlier average in --output_logdir.')


def _Fail(message):
  _common.Fail('average_checkpoints', message)


def _CheckFlags():
  """What the flags alone can say is wrong, before TensorFlow is imported."""
  # Numbers are checked by their flags' bounds while the flags are parsed (_common.Main).
  for flag in (_MODEL, _LOGDIR, _OUTPUT):
    if not flag.value:
      _Fail(f'--{flag.name} is required')
  if not files.IsDir(_LOGDIR.value):
    _Fail(f'--logdir {_LOGDIR.value}: no such directory')
  if (_LAST.value is None) == (not _CHECKPOINTS.value):
    _Fail('give --last=N (the newest N checkpoints) or --checkpoints=NAME,NAME,... (not both)')
  if _CHECKPOINTS.value and len(_CHECKPOINTS.value) < 2:
    _Fail(f'--checkpoints names {len(_CHECKPOINTS.value)} checkpoint; a mean needs at least 2')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  _CheckFlags()
  _common.QuietLogs()
  from lingvo_gshard.train import averaging  # pylint: disable=g-import-not-at-top
  log = lambda line: print(line, flush=True)
  try:
    exp = _common.Experiment(_MODEL.value)
    averaging.CheckOutput(_OUTPUT.value, [_LOGDIR.value], _OVERWRITE.value)  # before reading any checkpoint
    plan = averaging.Plan(exp, _LOGDIR.value, _LAST.value or 0, _CHECKPOINTS.value)
    path = averaging.Write(plan, _OUTPUT.value, _OVERWRITE.value, log=log)
  except _common.UserErrors() as e:
    _Fail(str(e))
  print(f'wrote {path} (the mean of {", ".join(os.path.basename(p) for p in plan.checkpoints)}; '
        f'{os.path.basename(path)}{averaging.AVERAGE_SUFFIX} records them)')
  print(f'evaluate it: python -m lingvo_gshard.tools.evaluate --model={_MODEL.value} --logdir={_OUTPUT.value}')
  return 0


def run():
  """The console script's entry point."""
  _common.Main('average_checkpoints', main)


if __name__ == '__main__':
  run()
