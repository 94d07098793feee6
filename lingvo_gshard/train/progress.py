"""What the training loop reports as it goes: target tokens a second, seconds a step, elapsed time and the ETA.

Apart from the loop (as T5X keeps its metrics manager apart from its trainer): the loop says what happened
(a step trained, the step compiled, the budget was decided), this class keeps the clocks and windows and
writes the line a user reads every log_interval steps.
"""
from typing import Callable, Dict


def Hms(seconds: float) -> str:
  seconds = int(seconds)
  return f'{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}'


class Progress:
  """Rates over the steps since the last log line; the ETA over the steps since start-up costs ended."""

  def __init__(self, clock: Callable[[], float], step: int):
    self._clock = clock
    self.began = self._clock()  # this process's loop started: the elapsed time counts from here
    self._start, self._start_step = self.began, step  # where the ETA's rate is measured from
    self._ResetWindow()

  def _ResetWindow(self):
    self._window_tokens, self._window_steps, self._window_start = 0.0, 0, self._clock()
    self._elapsed = 0.0

  def Restart(self, step: int):
    """Rates and the ETA count from here (after a compilation or the budget's decision: neither recurs)."""
    self._start, self._start_step = self._clock(), step
    self._ResetWindow()

  def Count(self, target_tokens: float):
    """One more step of a compiled train step, with this many target tokens."""
    self._window_tokens += target_tokens
    self._window_steps += 1

  def Rate(self, metrics: Dict[str, float]):
    """Sets metrics['target_tokens_per_sec'] over the window (the steps since the last log line)."""
    self._elapsed = self._clock() - self._window_start
    metrics['target_tokens_per_sec'] = self._window_tokens / max(self._elapsed, 1e-9)

  def Line(self, step: int, max_steps: int, metrics: Dict[str, float]) -> str:
    """The log line of `step` (after Rate): losses, tokens/s, seconds a step, elapsed time and the ETA."""
    now = self._clock()
    eta = (now - self._start) / max(step - self._start_step, 1) * (max_steps - step)
    return (f'step {step:6d}/{max_steps} loss {metrics["loss"]:.4f} xent {metrics["xent"]:.4f} '
            f'aux {metrics["aux_loss"]:.3f} lr {metrics["learning_rate"]:.2e} '
            f'{metrics["target_tokens_per_sec"]:.0f} tgt tok/s '
            + (f'{self._elapsed / self._window_steps:.3f} s/step ' if self._window_steps else '')
            + f' elapsed {Hms(now - self.began)} eta {Hms(eta)}')

  def NextWindow(self):
    """The line is written: the next window starts now."""
    self._ResetWindow()
