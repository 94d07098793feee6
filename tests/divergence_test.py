"""Divergence: the watch's rule on loss sequences, and the trainer stopping (or going on) on a run whose loss
climbs while staying finite."""
import pytest

from lingvo_gshard.train import divergence


def _Feed(watch, losses, start=10, every=10):
  return [watch.Update(start + i * every, loss) for i, loss in enumerate(losses)]


def test_patience_log_lines_in_a_row_above_factor_times_the_lowest():
  watch = divergence.DivergenceWatch(factor=3.0, patience=3)
  out = _Feed(watch, [9.0, 4.0, 2.0, 7.0, 7.0, 5.0, 6.5, 6.1, 6.2])
  # 7.0 > 3 x 2.0 twice, then 5.0 breaks the run; 6.5, 6.1, 6.2 make three in a row.
  assert out[:8] == [None] * 8
  assert out[8] == ('training diverged: loss 6.2 at step 90, above 3 x its lowest 2 (step 30) in 3 log lines '
                    'in a row since step 70')
  assert watch.Ratio(6.2) == pytest.approx(3.1)


def test_a_spike_shorter_than_patience_and_a_falling_loss_never_fire():
  watch = divergence.DivergenceWatch(factor=3.0, patience=3)
  assert _Feed(watch, [8.0, 6.0, 2.0, 100.0, 100.0, 2.1] + [2.0 - 0.01 * i for i in range(50)]) == [None] * 56


def test_off_when_factor_is_zero():
  watch = divergence.DivergenceWatch(factor=0.0, patience=1)
  assert not watch.enabled and _Feed(watch, [1.0, 1e9, 1e12]) == [None] * 3


def test_a_resumed_watch_measures_against_the_lowest_before_the_restart():
  before = divergence.DivergenceWatch(factor=3.0, patience=2)
  _Feed(before, [9.0, 2.0, 3.0])
  state = before.State()
  assert state == {'lowest_loss': 2.0, 'lowest_loss_step': 20}
  resumed, fresh = (divergence.DivergenceWatch(factor=3.0, patience=2) for _ in range(2))
  resumed.Resume(state)
  fresh.Resume({})  # a checkpoint that predates the record: start afresh
  climbed = [7.0, 7.5, 8.0]
  assert _Feed(resumed, climbed, start=40)[1] == ('training diverged: loss 7.5 at step 50, above 3 x its lowest '
                                                  '2 (step 20) in 2 log lines in a row since step 40')
  assert _Feed(fresh, climbed, start=40) == [None] * 3
