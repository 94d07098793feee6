"""Divergence: a training loss that stays far above its running best while staying finite (so the NaN guard
never fires), e.g. after a learning rate too high for the model. The trainer feeds it every logged loss."""
from typing import Dict, Optional


class DivergenceWatch:
  """Says a run diverged when `patience` logged losses in a row exceed `factor` x the lowest logged so far.

  The lowest loss is the run's, not the process's: each checkpoint records it (`State`, in the checkpoint
  log) and a resumed run starts from the restored checkpoint's (`Resume`), so a loss that climbed before a
  restart is still measured against the lowest it reached.
  """

  def __init__(self, factor: float, patience: int):
    self.factor, self.patience = factor, patience
    self.best: Optional[float] = None
    self.best_step: Optional[int] = None
    self.first_above: Optional[int] = None  # the first step of the current run of losses above the limit
    self._above = 0

  def State(self) -> Dict[str, float]:
    """What a checkpoint keeps of the watch: the lowest loss so far and its step ({} before the first)."""
    if self.best is None:
      return {}
    return {'lowest_loss': self.best, 'lowest_loss_step': self.best_step}

  def Resume(self, state: Dict) -> None:
    """Starts from a checkpoint's `State()` (a checkpoint that predates it has none: start afresh)."""
    if isinstance(state.get('lowest_loss'), (int, float)) and isinstance(state.get('lowest_loss_step'), int):
      self.best, self.best_step = float(state['lowest_loss']), state['lowest_loss_step']

  @property
  def enabled(self) -> bool:
    return self.factor > 0

  def Ratio(self, loss: float) -> float:
    """loss / lowest loss so far (1 before the first)."""
    return loss / self.best if self.best else 1.0

  def Update(self, step: int, loss: float) -> Optional[str]:
    """Takes the loss logged at `step`; returns why the run diverged, or None."""
    if not self.enabled:
      return None
    if self.best is None or loss < self.best:
      self.best, self.best_step = loss, step
    if loss > self.factor * self.best:
      self._above += 1
      self.first_above = self.first_above if self._above > 1 else step
    else:
      self._above, self.first_above = 0, None
    if self._above >= self.patience:
      return (f'training diverged: loss {loss:.4g} at step {step}, above {self.factor:g} x its lowest '
              f'{self.best:.4g} (step {self.best_step}) in {self._above} log lines in a row since step '
              f'{self.first_above}')
    return None
