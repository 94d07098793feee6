"""The wall-clock budget (`learner.max_train_seconds`): its arithmetic, and that a budgeted run trains exactly
the run a fixed step count would (the decision and its recompilation change nothing but where it ends)."""
import json
import os

import numpy as np
import pytest

from lingvo_gshard.core import optimizers
from lingvo_gshard.core import sharding
from lingvo_gshard.runtime import learner as learner_lib
from lingvo_gshard.train import budget as budget_lib
from lingvo_gshard.train import checkpoints
from lingvo_gshard.train import trainer as trainer_lib
from lingvo_gshard.utils import files
import input_helpers
import train_step_test
import trainer_test


def test_decide_fits_steps_evaluations_and_the_recompilation():
  b = budget_lib.TimeBudget(900, cap=5000, last_free_step=100, eval_interval=400, min_steps=100)
  record = b.Decide(step=60, elapsed=100.0, seconds_per_step=0.5, eval_seconds=10.0, recompile_seconds=20.0)
  # 762 s left (900 less the margin, the 100 s spent and the recompilation) for n steps of 0.5 s and the
  # evaluations at steps 400, 800, 1,200 and the last, 10 s each: n = 1,444 fills it exactly.
  left = 900 * (1 - budget_lib.MARGIN) - 100 - 20
  n = record['max_steps'] - 60
  assert b.Evaluations(60, record['max_steps']) == 4
  assert n * 0.5 + 4 * 10 <= left < (n + 1) * 0.5 + 4 * 10
  assert n == 1444 and not record['capped'] and record['decided_at_step'] == 60
  # A run ending on an evaluation step is not evaluated twice there.
  assert (b.Evaluations(100, 1143), b.Evaluations(100, 1200), b.Evaluations(0, 400)) == (3, 3, 1)
  capped = b.Decide(step=60, elapsed=1.0, seconds_per_step=0.01, eval_seconds=0.0, recompile_seconds=0.0)
  assert capped['max_steps'] == 5000 and capped['capped']


def test_budgets_that_cannot_be_kept_are_one_line_errors(tmp_path):
  b = budget_lib.TimeBudget(60, cap=5000, last_free_step=100, eval_interval=0, min_steps=100)
  with pytest.raises(budget_lib.BudgetError, match=r'would end at step 87, not past step 100'):
    b.Decide(step=60, elapsed=45.0, seconds_per_step=0.5, eval_seconds=0.0, recompile_seconds=0.0)
  assert b.DecisionStep(1) == 100 and b.DecisionStep(80) == 100 and budget_lib.TimeBudget(
      60, 5000, 5000, 0).DecisionStep(1) == 1 + budget_lib.PROBE_STEPS
  with pytest.raises(budget_lib.BudgetError, match=r'only 3 steps can be timed before step 100.*warmup_steps'):
    b.DecisionStep(97)
  with pytest.raises(budget_lib.BudgetError, match='must be > 0'):
    budget_lib.TimeBudget(0, cap=10, last_free_step=5, eval_interval=0)
  (tmp_path / budget_lib.BUDGET_FILE).write_text(json.dumps({'max_train_seconds': 900, 'max_steps': 1850}))
  assert budget_lib.TimeBudget(900, 5000, 100, 400).Recorded(str(tmp_path)) == 1850
  with pytest.raises(budget_lib.BudgetError, match=r'sized for 900 s \(max_steps 1850\).*is now 600'):
    budget_lib.TimeBudget(600, 5000, 100, 400).Recorded(str(tmp_path))
  (tmp_path / budget_lib.BUDGET_FILE).write_text('{"max_steps": 1')
  with pytest.raises(budget_lib.BudgetError, match='not a budget record'):
    budget_lib.Read(str(tmp_path))


def test_moving_the_schedule_end_retraces_the_step_with_the_new_end():
  p = optimizers.Adafactor.Params().Set(learning_rate=0.1, warmup_steps=2, schedule='cosine', total_steps=100)
  learner = learner_lib.Learner(train_step_test.TinyMoE(), p, sharding.Partitioner('none'))
  batch = train_step_test.Batch()
  rates = [float(learner.TrainStep(batch)['learning_rate']) for _ in range(3)]
  learner.SetScheduleEnd(10)
  rates += [float(learner.TrainStep(batch)['learning_rate']) for _ in range(2)]
  expected = [float(optimizers.Schedule(s, 'cosine', 0.1, 2, 100)) for s in (1, 2, 3)]
  expected += [float(optimizers.Schedule(s, 'cosine', 0.1, 2, 10)) for s in (4, 5)]
  np.testing.assert_allclose(rates, expected, rtol=1e-6)
  assert learner.optimizer.p.total_steps == 10


class _Small(trainer_test._SmallMoE):
  """The trainer tests' small MoE with a warm-up long enough to time steps inside it."""

  def Learner(self):
    p = super().Learner()
    p.Set(max_steps=14, log_interval=1, eval_interval=7, eval_batches=2, save_interval=7)
    p.optimizer.Set(learning_rate=0.5, warmup_steps=8)
    return p


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  return input_helpers.BuildCorpus(str(tmp_path_factory.mktemp('corpus')))


def _Run(data_dir, logdir, overrides=''):
  lines = []
  trainer = trainer_lib.Trainer(_Small(data_dir), sharding.Partitioner('none'), str(logdir), overrides=overrides,
                                log=lines.append)
  trainer.Train()
  losses = {int(l.split()[1].split('/')[0]): l.split()[3] for l in lines
            if l.startswith('step') and ' loss ' in l and 'dev' not in l}
  return trainer, losses, lines


def test_a_budgeted_run_trains_what_a_fixed_step_count_does(data_dir, tmp_path):
  ten, ten_losses, _ = _Run(data_dir, tmp_path / 'ten', 'learner.max_steps : 10')
  # A budget far larger than the run: decided at the warm-up's end (after step 8: the first step compiles,
  # 7 are timed), capped at max_steps 10; the timed dev evaluation and the step's recompilation change nothing.
  budgeted, losses, lines = _Run(data_dir, tmp_path / 'budget',
                                 'learner.max_steps : 10; learner.max_train_seconds : 100000')
  record = json.load(open(tmp_path / 'budget' / budget_lib.BUDGET_FILE))
  assert record['max_steps'] == 10 and record['capped'] and record['decided_at_step'] == 8
  assert any('the time budget decides after step 8' in l for l in lines), lines
  assert any(l.startswith('step 9: the train step compiled again') for l in lines), lines
  assert losses == ten_losses and sorted(losses) == list(range(1, 11))
  for name, value in ten.learner.Weights().items():
    np.testing.assert_array_equal(budgeted.learner.Weights()[name], value, err_msg=name)
  # A run whose budget was decided before (here: 10 steps, below the experiment's max_steps 14) trains to
  # that step from the start, with the schedule ending there: the same as --max_steps=10 without a budget.
  os.makedirs(tmp_path / 'recorded')
  (tmp_path / 'recorded' / budget_lib.BUDGET_FILE).write_text(
      json.dumps({'max_train_seconds': 600, 'max_steps': 10}))
  resumed, resumed_losses, lines = _Run(data_dir, tmp_path / 'recorded', 'learner.max_train_seconds : 600')
  assert resumed.Step() == 10 and resumed_losses == ten_losses
  assert any('max_steps 10 (decided before' in l for l in lines), lines
  params = open(tmp_path / 'recorded' / 'params.txt').read()
  assert 'learner.max_steps : 10\n' in params and 'learner.optimizer.total_steps : 10\n' in params
  with pytest.raises(budget_lib.BudgetError, match='sized for 600 s'):
    _Run(data_dir, tmp_path / 'recorded', 'learner.max_train_seconds : 900')


def test_a_machine_slower_than_timed_is_stopped_at_the_budget_end(data_dir, tmp_path):
  """The trainer's clock is a counter the log advances on each step line: 1 s a step up to the budget's
  decision, 3 s after it (a machine whose speed dropped, without waiting for it, and the same on any CI
  machine). The run stops when the budget ends, saves that step and records it, and that step is the run's
  last: a rerun does not train past it."""
  lines, slowed, now = [], [], [0.0]

  def Log(line):
    lines.append(line)
    if line.startswith('time budget'):
      slowed.append(True)
    elif line.startswith('step'):
      now[0] += 3.0 if slowed else 1.0

  # A tenth of the warm-up test's learning rate: this run goes on for some 60 steps, where 0.5 diverges.
  overrides = ('learner.max_train_seconds : 200; learner.max_steps : 5000; learner.eval_interval : 100; '
               'learner.optimizer.learning_rate : 0.05')
  trainer = trainer_lib.Trainer(_Small(data_dir), sharding.Partitioner('none'), str(tmp_path), overrides=overrides,
                                log=Log, clock=lambda: now[0])
  trainer.Train()
  record = budget_lib.Read(str(tmp_path))
  stopped = record['stopped_at_step']
  assert record['decided_at_step'] == 8 and record['seconds_per_step'] == 1.0
  assert 8 < stopped < record['max_steps'] < 5000
  assert budget_lib.FinalStep(record) == stopped and trainer.Step() == stopped
  assert any(l.startswith(f'step {stopped}: the time budget ends') for l in lines), lines[-5:]
  saved = files.ReadJsonl(str(tmp_path / checkpoints.CHECKPOINT_LOG))
  assert saved[-1]['step'] == stopped and record['stopped_at_seconds'] <= 200
  # The rerun (the README's command again) keeps the stopped run as it is.
  again = []
  rerun = trainer_lib.Trainer(_Small(data_dir), sharding.Partitioner('none'), str(tmp_path), overrides=overrides,
                              log=again.append)
  assert rerun.Train() == {}
  assert files.ReadJsonl(str(tmp_path / checkpoints.CHECKPOINT_LOG)) == saved  # nothing trained or saved
  assert any(f'stopped by the time budget at step {stopped}' in l for l in again), again
