"""How large a MoE's router logits grow over training, read from the run's TensorBoard training summaries.

Every MoE layer logs `moe/<layer>/router_logit_max` (the largest |router logit| of the step's batch) and
`moe/<layer>/router_z_loss` (the mean over tokens of logsumexp(logits)²) each summary step, with the z-loss
on or off (`task.router_z_loss_weight`). A single step's maximum is noisy, so growth is measured between
windows: the mean over the first and over the last `window` fraction of the steps the series spans.
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


def _ReadEvents(path: str, tags) -> Tuple[float, List[Tuple[str, int, float]]]:
  """(wall time of the file's first event, [(tag, step, value)]). A run killed while writing leaves its last
  record truncated; what was written before it is kept."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  wall_time, rows = None, []
  try:
    for event in tf.compat.v1.train.summary_iterator(path):
      wall_time = event.wall_time if wall_time is None else wall_time
      for value in event.summary.value:
        if value.tag.startswith('moe/') and value.tag.rsplit('/', 1)[-1] in tags:
          rows.append((value.tag[len('moe/'):], int(event.step), _Value(value)))
  except tf.errors.DataLossError:
    pass
  return wall_time or 0.0, rows


def ReadSeries(logdir: str, tags=TAGS) -> Dict[str, List[Tuple[int, float]]]:
  """'<layer>/<tag>' -> [(step, value)] sorted by step, from LOGDIR/train's event files.

  A resumed run starts a new event file at the step after its checkpoint; what the earlier files logged from
  that step on belongs to the abandoned stretch, so the files are applied in the order they started, each
  dropping the earlier files' points from its first step on.
  """
  train_dir = os.path.join(logdir, 'train')
  event_files = sorted(files.Glob(os.path.join(train_dir, 'events.out.tfevents.*')))
  if not event_files:
    raise RouterLogitsError(f'{train_dir}: no TensorBoard event files (the trainer writes them there)')
  series: Dict[str, Dict[int, float]] = {}
  read = [(*_ReadEvents(path, tags), path) for path in event_files]  # (wall time, rows, path)
  for _, rows, _ in sorted(read, key=lambda r: (r[0], r[2])):
    if not rows:
      continue
    start = min(step for _, step, _ in rows)
    for points in series.values():
      for step in [s for s in points if s >= start]:
        del points[step]
    for tag, step, value in rows:
      series.setdefault(tag, {})[step] = value
  if not series:
    raise RouterLogitsError(f'{train_dir}: no moe/*/{"|".join(tags)} summaries (a dense run has no router)')
  return {tag: sorted(points.items()) for tag, points in sorted(series.items())}


def Growth(points: List[Tuple[int, float]], window: float = 0.1) -> Dict:
  """{'first', 'last': mean over the first / last `window` of the steps the points span; 'growth': last -
  first; 'max': the largest value; 'steps': the last step}. Each window holds at least its end point."""
  if not points:
    raise RouterLogitsError('no points')
  if not 0.0 < window <= 0.5:
    raise RouterLogitsError(f'window={window}: want 0 < window <= 0.5')
  start, end = points[0][0], points[-1][0]
  span = window * (end - start)
  early = [v for s, v in points if s <= start + span]
  late = [v for s, v in points if s >= end - span]
  first, last = sum(early) / len(early), sum(late) / len(late)
  return {'first': round(first, 4), 'last': round(last, 4), 'growth': round(last - first, 4),
          'max': round(max(v for _, v in points), 4), 'steps': end}


def Summary(series: Dict[str, List[Tuple[int, float]]], window: float = 0.1) -> Dict:
  """'<layer>/<tag>' -> Growth of that series, for every series ReadSeries returned for one run."""
  return {tag: Growth(points, window) for tag, points in series.items()}


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
