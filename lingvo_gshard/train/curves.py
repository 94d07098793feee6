"""Learning curves of training runs: dev/test BLEU and chrF of each evaluated checkpoint, against steps and
against training wall-clock, from what the trainer and the evaluator leave in a log directory.

    points = curves.Points('/tmp/runs/moe', 'dev')    # [{'step', 'train_seconds', 'bleu', 'chrf', ...}]
    curves.Plot({'MoE': points, 'Dense': other}, '/tmp/curves.png', 'top10')

A point needs the checkpoint's line in checkpoints.jsonl (step, train_seconds) and its results.json under
decode_<set>/<checkpoint>/ (evaluate it with tools/evaluate.py --checkpoint=...).
"""
import json
import os
from typing import Dict, List

from lingvo_gshard.train import checkpoints


def Points(logdir: str, test_set: str, average: str = 'top10') -> List[Dict]:
  """Evaluated checkpoints of one run, by step: {'step', 'train_seconds', 'bleu', 'chrf', 'languages',
  'sentences'} with BLEU/chrF the `average` of results.json ('top10', 'high', 'all', ...)."""
  seconds = checkpoints.TrainSeconds(logdir)
  base = os.path.join(logdir, f'decode_{test_set}')
  out = []
  for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
    path = os.path.join(base, name, 'results.json')
    if not os.path.exists(path) or name not in seconds:
      continue
    with open(path) as f:
      res = json.load(f)
    avg = res['averages'].get(average)
    if avg is None:
      continue
    out.append({'step': res['step'], 'train_seconds': seconds[name], 'bleu': avg['bleu'], 'chrf': avg['chrf'],
                'languages': avg['languages'],
                'sentences': sum(r['sentences'] for r in res['languages'].values())})
  return sorted(out, key=lambda p: p['step'])


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
    axes[row][1].set_xlabel('training wall-clock (minutes, 2 cores)')
    for ax in axes[row]:
      ax.set_ylabel(metric)
      ax.grid(alpha=0.3)
  axes[0][0].legend(fontsize=8)
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
