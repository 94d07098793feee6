"""A run's dev loss: the dev batches, the metrics of one evaluation, the dev log every job appends to
(LOGDIR/dev_eval.jsonl), its best row and early stopping. The training loop evaluates through it, and so does
the evaler job (eval/dev_eval.py), so a resumed run and the evaler read one history."""

import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from lingvo_gshard.runtime import learner as learner_lib
from lingvo_gshard.utils import files

DEV_LOG = 'dev_eval.jsonl'


def DevBatches(input_params, max_batches: int) -> List[Dict[str, np.ndarray]]:
  """The first `max_batches` batches of `input_params` as NumPy arrays. The dev input is deterministic (its
  shuffles and mixture draws are seeded), so a job reads them once and every evaluation scores the same
  batches: building the 100-language dev pipeline again cost more than scoring its 20 batches."""
  batches = []
  for batch in input_params.Instantiate(log=lambda line: None).Dataset():
    if len(batches) >= max_batches:
      break
    batches.append({k: v.numpy() for k, v in batch.items()})
  return batches


def DevMetrics(learner: learner_lib.Learner, batches: Sequence[Dict[str, np.ndarray]]
               ) -> Optional[Dict[str, float]]:
  """Token-weighted mean of the eval metrics over `batches` (from DevBatches)."""
  totals, tokens = {}, 0.0
  for batch in batches:
    m = {k: float(learner.Fetch(v)) for k, v in learner.EvalStep(batch).items()}
    n = m['num_tokens']
    tokens += n
    for k, v in m.items():
      totals[k] = totals.get(k, 0.0) + v * n
  if not tokens:
    return None
  return {k: v / tokens for k, v in totals.items()}


def ReadDevLog(logdir: str, job: Optional[str] = None) -> List[Dict]:
  """The rows of LOGDIR/dev_eval.jsonl ({'step', 'checkpoint', 'job', 'loss', 'xent', ...}) of `job` ('trainer',
  'evaler'; None: both), by step, the last row of a step kept (an evaluation repeated after a resume). A line
  that does not parse (a write cut short) is skipped."""
  rows = {}
  for row in files.ReadJsonl(os.path.join(logdir, DEV_LOG)):
    if job is None or row.get('job', 'evaler') == job:
      rows[row['step']] = row
  return [rows[s] for s in sorted(rows)]


def DevRow(step: int, metrics: Dict[str, float], checkpoint: str = '', job: str = 'evaler') -> Dict:
  """A dev_eval.jsonl row: metrics rounded as the file keeps them (a resumed run decides on the same values)."""
  return {'step': step, 'checkpoint': checkpoint or f'ckpt-{step}', 'job': job,
          **{k: round(v, 5) for k, v in metrics.items()}}


def AppendDevLog(logdir: str, row: Dict):
  """Appends DevRow `row`: the evaler's (job 'evaler') or the training loop's ('trainer'). On gs:// an append
  rewrites the file (utils/files.py AppendText)."""
  files.AppendText(os.path.join(logdir, DEV_LOG), json.dumps(row) + '\n')


def Best(rows: Sequence[Dict], metric: str = 'xent') -> Optional[Dict]:
  """The row with the lowest `metric` (the earliest of equals), or None."""
  rows = [r for r in rows if metric in r]
  return min(rows, key=lambda r: (r[metric], r['step'])) if rows else None


def EarlyStop(rows: Sequence[Dict], patience: int, tolerance: float = 0.0,
              metric: str = 'xent') -> Optional[str]:
  """Why training should stop, or None: the last `patience` evaluations (by step) have not lowered the best
  earlier value of `metric` by more than `tolerance`."""
  rows = [r for r in sorted(rows, key=lambda r: r['step']) if metric in r]
  if patience <= 0 or len(rows) <= patience:
    return None
  best_before = min(r[metric] for r in rows[:-patience])
  recent = rows[-patience:]
  if min(r[metric] for r in recent) < best_before - tolerance:
    return None
  best = Best(rows, metric)
  return (f'dev {metric} has not improved on {best_before:.4f} by more than {tolerance:g} in the last '
          f'{patience} evaluations (steps {recent[0]["step"]}-{recent[-1]["step"]}); best {best[metric]:.4f} '
          f'at step {best["step"]}')


def FirstEarlyStop(rows: Sequence[Dict], patience: int, tolerance: float, max_steps: int,
                   metric: str = 'xent') -> Optional[Tuple[int, str]]:
  """(step, why) of the first evaluation at which EarlyStop fired, or None. A firing at max_steps or later is
  no early stop: the run had used its budget."""
  if patience <= 0:
    return None
  rows = sorted(rows, key=lambda r: r['step'])
  for n in range(patience + 1, len(rows) + 1):
    if rows[n - 1]['step'] >= max_steps:
      break
    why = EarlyStop(rows[:n], patience, tolerance, metric)
    if why:
      return rows[n - 1]['step'], why
  return None
