"""One trainer a log directory: a second one is refused in one line before it writes anything, and a trainer
killed with SIGKILL does not leave the lock stuck."""
import os
import signal
import subprocess
import sys

import pytest

from lingvo_gshard.core import sharding
from lingvo_gshard.train import trainer as trainer_lib
from lingvo_gshard.utils import files
import trainer_test
from trainer_test import data_dir  # pylint: disable=unused-import  (the corpus fixture)

_HOLD = ('import sys, time\n'
         'from lingvo_gshard.utils import files\n'
         'lock = files.ProcessLock(sys.argv[1]).Acquire()\n'
         'print("held", flush=True)\n'
         'time.sleep(600)\n')


def _Holder(path):
  """A process that takes the lock as a training process does, and keeps it until it is killed."""
  proc = subprocess.Popen([sys.executable, '-c', _HOLD, path], stdout=subprocess.PIPE, text=True)
  assert proc.stdout.readline().strip() == 'held'
  return proc


def test_a_second_trainer_is_refused_and_a_killed_one_leaves_no_stuck_lock(data_dir, tmp_path):
  logdir = tmp_path / 'run'
  logdir.mkdir()
  holder = _Holder(str(logdir / trainer_lib.LOCK_FILE))
  try:
    with pytest.raises(ValueError) as e:
      trainer_lib.Trainer(trainer_test._SmallMoE(data_dir), sharding.Partitioner('none'), str(logdir),
                          log=lambda line: None)
    message = str(e.value)
    assert '\n' not in message and 'another trainer is running in it' in message
    assert f'process {holder.pid}' in message
    assert sorted(os.listdir(logdir)) == [trainer_lib.LOCK_FILE]  # nothing written before the refusal
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  # Killed: the kernel dropped the lock with the process; a trainer takes over and trains.
  trainer = trainer_lib.Trainer(trainer_test._SmallMoE(data_dir), sharding.Partitioner('none'), str(logdir),
                                max_steps=3, log=lambda line: None)
  assert trainer.Train()['loss'] > 0
  # Released when Train returns: a resumed trainer in the same process takes it again.
  again = trainer_lib.Trainer(trainer_test._SmallMoE(data_dir), sharding.Partitioner('none'), str(logdir),
                              max_steps=4, log=lambda line: None)
  assert again.Train() and again.Step() == 4


def test_process_lock_names_its_holder(tmp_path):
  path = str(tmp_path / 'lock')
  first = files.ProcessLock(path).Acquire()
  with pytest.raises(files.LockHeld, match=rf'lock: held by process {os.getpid()}$'):
    files.ProcessLock(path).Acquire()
  first.Release()
  files.ProcessLock(path).Acquire().Release()
