"""A wall-clock budget for a training run: how many steps fit this machine, decided once and kept.

A run of known length learns fastest with a schedule that ends where it does (`optimizers.Schedule`), but
how many steps fit in, say, 15 minutes depends on the machine. With `learner.max_train_seconds` the trainer
times steps inside the learning-rate warm-up (where the schedule does not yet depend on where it ends; the
later half of them, once the input pipeline has started) and a dev evaluation, then fixes `max_steps` (and
the schedule's end) so that training, its evaluations and the step's recompilation end within the budget.
The decision is written to `budget.json` in the log directory: a resumed run reuses it, so it trains exactly
the run an uninterrupted one would have (and `--max_steps=N` with no budget reproduces it on any machine).
A machine whose speed drifts after the decision (a shared VM) could still run over: the process that decided
stops at the budget's end whatever step it has reached, saves it and records the step (`stopped_at_step`),
which is then the run's last: a rerun does not train past it and the evaler stops there.
"""
import json
import os
import time
from typing import Dict, Optional

from lingvo_gshard.utils import files

BUDGET_FILE = 'budget.json'
PROBE_STEPS = 100      # steps run before deciding, after the first (compiling) one; the later half is timed
MIN_PROBE_STEPS = 5    # fewer timed steps than this would not say much about the step time
MARGIN = 0.02          # of the budget, kept for checkpoint saves and a machine whose speed drifts


class BudgetError(ValueError):
  """A budget that cannot be honoured, or a log directory whose recorded budget disagrees with the params."""


def Read(logdir: str) -> Optional[Dict]:
  """The decision recorded in `logdir`, or None."""
  path = os.path.join(logdir, BUDGET_FILE)
  if not files.Exists(path):
    return None
  try:
    record = json.loads(files.ReadText(path))
    int(record['max_steps']), float(record['max_train_seconds'])
  except (ValueError, KeyError, TypeError) as e:
    raise BudgetError(f'{path}: not a budget record ({type(e).__name__}: {e}); remove it to size the run '
                      'again') from None
  return record


def FinalStep(record: Dict) -> int:
  """The last step of a run with this budget record: where the deadline stopped it, else its max_steps."""
  return int(record.get('stopped_at_step') or record['max_steps'])


def RecordStop(logdir: str, step: int, seconds: float):
  """Adds to the recorded decision that the budget's end stopped the run at `step`, `seconds` into it."""
  record = Read(logdir)
  record.update(stopped_at_step=int(step), stopped_at_seconds=round(seconds, 1))
  _Write(logdir, record)


def _Write(logdir: str, record: Dict):
  files.WriteJson(os.path.join(logdir, BUDGET_FILE), record, sort_keys=False)


class TimeBudget:
  """Decides `max_steps` for `seconds` of training from timings taken inside the warm-up.

  `last_free_step` is the last step whose update does not depend on the decision (the warm-up's end when
  the schedule decays to max_steps; any step otherwise); `cap` is the experiment's max_steps, which the
  budget never exceeds.
  """

  def __init__(self, seconds: float, cap: int, last_free_step: int, eval_interval: int, min_steps: int = 0):
    if seconds <= 0:
      raise BudgetError(f'learner.max_train_seconds must be > 0, got {seconds}')
    self.seconds, self.cap, self.last_free_step = float(seconds), int(cap), int(last_free_step)
    self.eval_interval, self.min_steps = int(eval_interval), int(min_steps)

  def DecisionStep(self, first_timed_step: int) -> int:
    """The step after which to decide, given the first step of this process that runs compiled (timed
    steps are those after it); a BudgetError if too few such steps are left before `last_free_step`."""
    step = min(first_timed_step + PROBE_STEPS, self.last_free_step)
    if step - first_timed_step < MIN_PROBE_STEPS:
      raise BudgetError(
          f'learner.max_train_seconds: only {max(step - first_timed_step, 0)} steps can be timed before step '
          f'{self.last_free_step}, after which the learning rate depends on max_steps (need '
          f'{MIN_PROBE_STEPS}; a longer learner.optimizer.warmup_steps gives them)')
    return step

  def Decide(self, step: int, elapsed: float, seconds_per_step: float, eval_seconds: float,
             recompile_seconds: float) -> Dict:
    """The record of the decision at `step`, `elapsed` seconds into the budget: as many steps as fit in what
    is left after the recompilation, one dev evaluation per eval_interval (and one at the end) and MARGIN."""
    left = self.seconds * (1 - MARGIN) - elapsed - recompile_seconds
    steps = min(max(int(left / seconds_per_step), 0), max(self.cap - step, 0))
    while steps and steps * seconds_per_step + self.Evaluations(step, step + steps) * eval_seconds > left:
      steps -= 1
    max_steps = min(step + steps, self.cap)
    if max_steps <= max(step, self.min_steps):
      raise BudgetError(
          f'learner.max_train_seconds {self.seconds:g}: at {seconds_per_step:.3f} s a step, {elapsed:.0f} s '
          f'already spent and {recompile_seconds + eval_seconds:.0f} s for a recompilation and an evaluation, '
          f'the run would end at step {max_steps}, not past step {max(step, self.min_steps)}')
    return {'max_train_seconds': self.seconds, 'max_steps': max_steps, 'decided_at_step': step,
            'elapsed_seconds': round(elapsed, 1), 'seconds_per_step': round(seconds_per_step, 4),
            'eval_seconds': round(eval_seconds, 1), 'recompile_seconds': round(recompile_seconds, 1),
            'capped': max_steps == self.cap, 'time': time.strftime('%Y-%m-%dT%H:%M:%S')}

  def Evaluations(self, step: int, max_steps: int) -> int:
    """Dev evaluations of a run from `step` to `max_steps`: every eval_interval, and at the end."""
    if not self.eval_interval:
      return 0
    every = max_steps // self.eval_interval - step // self.eval_interval
    return every + (1 if max_steps % self.eval_interval else 0)

  def Record(self, logdir: str, record: Dict):
    _Write(logdir, record)

  def Recorded(self, logdir: str) -> Optional[int]:
    """max_steps recorded in `logdir` for this budget, None if none was; a BudgetError if the record was
    made for another budget (the schedule has already run toward its end)."""
    record = Read(logdir)
    if record is None:
      return None
    if float(record['max_train_seconds']) != self.seconds:
      raise BudgetError(
          f'{os.path.join(logdir, BUDGET_FILE)}: the run was sized for {record["max_train_seconds"]:g} s '
          f'(max_steps {record["max_steps"]}), learner.max_train_seconds is now {self.seconds:g}; remove the '
          'file to size it again (its schedule has already run toward the old end)')
    return int(record['max_steps'])
