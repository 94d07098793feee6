"""How large a MoE's router logits grow over training, read from the run's TensorBoard training summaries.

Every MoE layer logs `moe/<layer>/router_logit_max` (the largest router logit of the step's batch) and
`moe/<layer>/router_z_loss` (the mean over tokens of logsumexp(logits)²) each summary step, with the z-loss
on or off (`task.router_z_loss_weight`). A single step's maximum is noisy, so growth is measured between
windows: the mean over the first and over the last `window` fraction of the run's steps.
"""
import os
from typing import Dict, List, Tuple

from lingvo_gshard.utils import files

TAGS = ('router_logit_max', 'router_z_loss')


class RouterLogitsError(ValueError):
  pass


def _Value(value) -> float:
  if value.HasField('simple_value'):
    return float(value.simple_value)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return float(tf.make_ndarray(value.tensor))


def ReadSeries(logdir: str, tags=TAGS) -> Dict[str, List[Tuple[int, float]]]:
  """'<layer>/<tag>' -> [(step, value)] sorted by step, from LOGDIR/train's event files.

  A resumed run logs the steps between its last checkpoint and where it stopped twice; the event file that
  started later (the resumption, which the run's final weights come from) wins.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  train_dir = os.path.join(logdir, 'train')
  event_files = sorted(files.Glob(os.path.join(train_dir, 'events.out.tfevents.*')))
  if not event_files:
    raise RouterLogitsError(f'{train_dir}: no TensorBoard event files (the trainer writes them there)')
  runs = []  # (wall time of the file's first event, path, [(tag, step, value)])
  for path in event_files:
    wall_time, rows = None, []
    for event in tf.compat.v1.train.summary_iterator(path):
      wall_time = event.wall_time if wall_time is None else wall_time
      for value in event.summary.value:
        if value.tag.startswith('moe/') and value.tag.rsplit('/', 1)[-1] in tags:
          rows.append((value.tag[len('moe/'):], int(event.step), _Value(value)))
    runs.append((wall_time or 0.0, path, rows))
  series: Dict[str, Dict[int, float]] = {}
  for _, _, rows in sorted(runs, key=lambda r: r[:2]):
    for tag, step, value in rows:
      series.setdefault(tag, {})[step] = value
  if not series:
    raise RouterLogitsError(f'{train_dir}: no moe/*/{"|".join(tags)} summaries (a dense run has no router)')
  return {tag: sorted(points.items()) for tag, points in sorted(series.items())}


def Growth(points: List[Tuple[int, float]], window: float = 0.1) -> Dict:
  """{'first', 'last': mean over the first / last `window` of the steps; 'growth': last - first;
  'max': the largest value; 'steps': the last step}. Windows hold at least one point."""
  if not points:
    raise RouterLogitsError('no points')
  if not 0.0 < window <= 0.5:
    raise RouterLogitsError(f'window={window}: want 0 < window <= 0.5')
  last_step = points[-1][0]
  span = window * last_step
  early = [v for s, v in points if s <= span] or [points[0][1]]
  late = [v for s, v in points if s >= last_step - span] or [points[-1][1]]
  first, last = sum(early) / len(early), sum(late) / len(late)
  return {'first': round(first, 4), 'last': round(last, 4), 'growth': round(last - first, 4),
          'max': round(max(v for _, v in points), 4), 'steps': last_step}


def Summary(logdir: str, window: float = 0.1) -> Dict:
  """'<layer>/<tag>' -> Growth of that series, for every MoE layer and tag of one run."""
  return {tag: Growth(points, window) for tag, points in ReadSeries(logdir).items()}


def Smooth(points: List[Tuple[int, float]], width: int = 10) -> List[Tuple[int, float]]:
  """A trailing moving average over `width` points, for plotting a per-batch maximum."""
  out, total = [], 0.0
  for i, (step, value) in enumerate(points):
    total += value
    if i >= width:
      total -= points[i - width][1]
    out.append((step, total / min(i + 1, width)))
  return out


def Plot(runs: Dict[str, Dict[str, List[Tuple[int, float]]]], path: str, tag: str = 'router_logit_max'):
  """One panel per MoE layer: `tag` against steps, one line per run (smoothed over 10 summaries)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  layers = sorted({key.rsplit('/', 1)[0] for series in runs.values() for key in series
                   if key.endswith('/' + tag)})
  fig, axes = plt.subplots(1, max(1, len(layers)), figsize=(5.5 * max(1, len(layers)), 4), squeeze=False)
  for ax, layer in zip(axes[0], layers):
    for i, (name, series) in enumerate(runs.items()):
      points = Smooth(series.get(f'{layer}/{tag}', []))
      ax.plot([s for s, _ in points], [v for _, v in points], color=f'C{i}', label=name)
    ax.set_title(layer, fontsize=9)
    ax.set_xlabel('step')
    ax.set_ylabel(f'{tag} (mean of 10 summaries)')
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.tight_layout()
  files.SaveFigure(fig, path, dpi=110)
  plt.close(fig)
