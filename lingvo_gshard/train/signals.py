"""Preemption: SIGTERM or SIGINT during training is recorded, the loop saves the current step and stops
(Preempted); a second signal kills the process as it would have."""
import os
import signal


class Preempted(Exception):
  """SIGTERM or SIGINT arrived during training; a checkpoint of the current step was written."""

  def __init__(self, signum: int, path: str):
    super().__init__(f'{signal.Signals(signum).name}: saved {path}')
    self.signum, self.path = signum, path


class SignalsSaved:
  """Within it, SIGTERM and SIGINT are recorded instead of killing the process (the loop then saves a
  checkpoint and stops); outside the main thread (where handlers cannot be set) it changes nothing."""

  def __init__(self):
    self.received, self._old = 0, {}

  def _Handle(self, signum, frame):  # pylint: disable=unused-argument
    if self.received:  # a second signal: the user insists
      signal.signal(signum, self._old.get(signum, signal.SIG_DFL))
      os.kill(os.getpid(), signum)
    self.received = signum

  def __enter__(self):
    for signum in (signal.SIGTERM, signal.SIGINT):
      try:
        self._old[signum] = signal.signal(signum, self._Handle)
      except ValueError:  # not the main thread
        pass
    return self

  def __exit__(self, *exc):
    for signum, old in self._old.items():
      signal.signal(signum, old)
    return False
