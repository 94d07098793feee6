"""Learning curves of training runs: dev/test BLEU and chrF of each evaluated checkpoint, against steps and
against training wall-clock, and the dev loss the training loop records, from what the trainer and the
evaluator leave in a log directory.

    points = curves.Points('/tmp/runs/moe', 'dev')    # [{'step', 'train_seconds', 'bleu', 'chrf', ...}]
    curves.Plot({'MoE': points, 'Dense': other}, '/tmp/curves.png', 'top10')
    losses = curves.DevLossPoints('/tmp/runs/moe')    # [{'step', 'train_seconds', 'xent'}]
    curves.PlotDevLoss({'Dense': dense, 'MoE': losses}, '/tmp/xent.png', 'xent')

A BLEU point needs the checkpoint's line in checkpoints.jsonl (step, train_seconds) and its results.json under
decode_<set>/<checkpoint>/ (evaluate it with tools/evaluate.py --checkpoint=...); a loss point, its line in
dev_eval.jsonl (the trainer writes one every eval_interval_steps).
"""
import json
import os
from typing import Dict, List

from lingvo_gshard.train import checkpoints
from lingvo_gshard.train import dev_metrics
from lingvo_gshard.utils import files


def Points(logdir: str, test_set: str, average: str = 'top10') -> List[Dict]:
  """Evaluated checkpoints of one run, by step: {'step', 'train_seconds', 'bleu', 'chrf', 'languages',
  'sentences'} with BLEU/chrF the `average` of results.json ('top10', 'high', 'all', ...)."""
  seconds = checkpoints.TrainSeconds(logdir)
  base = os.path.join(logdir, f'decode_{test_set}')
  out = []
  for name in sorted(files.ListDir(base)) if files.IsDir(base) else []:
    path = os.path.join(base, name, 'results.json')
    if not files.Exists(path) or name not in seconds:
      continue
    res = json.loads(files.ReadText(path))
    avg = res['averages'].get(average)
    if avg is None:
      continue
    out.append({'step': res['step'], 'train_seconds': seconds[name], 'bleu': avg['bleu'], 'chrf': avg['chrf'],
                'languages': avg['languages'],
                'sentences': sum(r['sentences'] for r in res['languages'].values())})
  return sorted(out, key=lambda p: p['step'])


def DevLossPoints(logdir: str, metric: str = 'xent') -> List[Dict]:
  """Dev-set `metric` of every evaluated step of one run, by step: {'step', 'train_seconds', metric};
  train_seconds is None for a step whose checkpoint is not in checkpoints.jsonl."""
  seconds = checkpoints.TrainSeconds(logdir)
  return [{'step': r['step'], 'train_seconds': seconds.get(r['checkpoint']), metric: r[metric]}
          for r in dev_metrics.ReadDevLog(logdir) if metric in r]


def Differences(points: List[Dict], reference: List[Dict], metric: str) -> List[Dict]:
  """{'step', 'diff'}: `metric` of `points` minus the reference run's at each step both runs evaluated."""
  ref = {p['step']: p[metric] for p in reference}
  return [{'step': p['step'], 'diff': p[metric] - ref[p['step']]} for p in points if p['step'] in ref]


def PlotDevLoss(runs: Dict[str, List[Dict]], path: str, metric: str = 'xent'):
  """Two panels: dev `metric` against steps, and each run's difference from the first run's at equal steps
  (the gap between runs is a few hundredths of a nat where the curves themselves span nats)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, (ax, dax) = plt.subplots(1, 2, figsize=(11, 4.2))
  names = list(runs)
  for i, name in enumerate(names):
    points = runs[name]
    ax.plot([p['step'] for p in points], [p[metric] for p in points], marker='.', color=f'C{i}', label=name)
    if i:
      diffs = Differences(points, runs[names[0]], metric)
      dax.plot([d['step'] for d in diffs], [d['diff'] for d in diffs], marker='.', color=f'C{i}',
               label=f'{name} − {names[0]}')
  dax.axhline(0.0, color='black', linewidth=0.8)
  ax.set_ylabel(f'dev {metric}')
  dax.set_ylabel(f'dev {metric} difference from {names[0]}')
  for a in (ax, dax):
    a.set_xlabel('step')
    a.grid(alpha=0.3)
    a.legend(fontsize=8)
  fig.tight_layout()
  files.SaveFigure(fig, path, dpi=110)
  plt.close(fig)


def Plot(runs: Dict[str, List[Dict]], path: str, title: str):
  """BLEU and chrF against steps and against wall-clock minutes (2 x 2 panels), one line per run."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(2, 2, figsize=(10, 7))
  for name, points in runs.items():
    if not points:
      continue
    for row, metric in enumerate(('bleu', 'chrf')):
      axes[row][0].plot([p['step'] for p in points], [p[metric] for p in points], marker='o', label=name)
      axes[row][1].plot([p['train_seconds'] / 60 for p in points], [p[metric] for p in points], marker='o',
                        label=name)
  for row, metric in enumerate(('BLEU', 'chrF')):
    axes[row][0].set_xlabel('step')
    axes[row][1].set_xlabel('training wall-clock (minutes)')
    for ax in axes[row]:
      ax.set_ylabel(metric)
      ax.grid(alpha=0.3)
  axes[0][0].legend(fontsize=8)
  fig.suptitle(title)
  fig.tight_layout()
  files.SaveFigure(fig, path, dpi=110)
  plt.close(fig)
