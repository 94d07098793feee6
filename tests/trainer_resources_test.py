"""Resource faults while training: a checkpoint that cannot be written (a file-size limit: what a full disk
does to the write), and a loss that runs away while staying finite.

The full disk is real: the trainer runs in its own process under RLIMIT_FSIZE smaller than a checkpoint, so
TensorFlow's write fails with EFBIG as it would with ENOSPC. The run must stop in one line naming the
checkpoint, leave the checkpoint before it the latest, and resume from it once the limit is gone.
"""
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from lingvo_gshard.core import sharding
from lingvo_gshard.train import trainer as trainer_lib
import trainer_faults_test
from trainer_test import data_dir  # pylint: disable=unused-import  (the corpus fixture)

_TESTS = os.path.dirname(os.path.abspath(__file__))

# Resumes trainer_faults_test's experiment to step 6 under a file-size limit; prints the error as the trainer
# binary does (tools/_common.Fail) and exits 1.
_LIMITED = f'''
import resource, sys
sys.path.insert(0, {_TESTS!r})
data_dir, logdir, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
from lingvo_gshard.core import sharding
from lingvo_gshard.train import checkpoints
from lingvo_gshard.train import trainer as trainer_lib
import trainer_faults_test
trainer = trainer_lib.Trainer(trainer_faults_test._Exp(data_dir), sharding.Partitioner('none'), logdir,
                              log=lambda line: None)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))  # from here on: a full disk
try:
  trainer.Train()
except checkpoints.WriteFailed as e:
  print(f'trainer: {{e}}', file=sys.stderr)
  sys.exit(1)
'''


def test_a_checkpoint_write_that_fails_leaves_the_one_before_latest(data_dir, tmp_path):
  logdir = tmp_path / 'run'
  lines = []
  trainer_faults_test._Train(data_dir, logdir, lines, max_steps=3)  # pylint: disable=protected-access
  assert os.path.basename(tf.train.latest_checkpoint(str(logdir))) == 'ckpt-3'
  data = [f for f in os.listdir(logdir) if f.startswith('ckpt-3.data')]
  limit = os.path.getsize(logdir / data[0]) // 2
  out = subprocess.run([sys.executable, '-c', _LIMITED, data_dir, str(logdir), str(limit)],
                       capture_output=True, text=True, timeout=600)
  err = [l for l in out.stderr.splitlines() if l.startswith('trainer:')]
  assert out.returncode == 1 and len(err) == 1, out.stderr[-3000:]
  assert err[0].startswith(f'trainer: {logdir}/ckpt-6: cannot write the checkpoint (')
  assert err[0].endswith('the latest is still ckpt-3'), err[0]
  assert 'Traceback' not in out.stderr
  # Nothing half-written is left, ckpt-3 is still the latest and restores: the run resumes and finishes.
  assert not [f for f in os.listdir(logdir) if f.startswith('ckpt-6')], sorted(os.listdir(logdir))
  assert os.path.basename(tf.train.latest_checkpoint(str(logdir))) == 'ckpt-3'
  resumed = trainer_lib.Trainer(trainer_faults_test._Exp(data_dir), sharding.Partitioner('none'), str(logdir),  # pylint: disable=protected-access
                                log=lines.append)
  assert resumed.Restore() == 3
  resumed.Train()
  assert os.path.basename(tf.train.latest_checkpoint(str(logdir))) == 'ckpt-6'


def _RunawayLearner(p):
  from lingvo_gshard.core import optimizers  # pylint: disable=g-import-not-at-top
  p.optimizer = optimizers.Adam.Params().Set(learning_rate=3.0, warmup_steps=0, schedule='rsqrt')
  return p


@pytest.mark.parametrize('policy', ['stop', 'warn'])
def test_a_runaway_finite_loss_stops_the_run_or_is_reported(data_dir, tmp_path, policy):
  class Exp(trainer_faults_test._Exp):  # pylint: disable=protected-access
    def Learner(self):
      p = _RunawayLearner(super().Learner())
      p.Set(max_steps=30, log_interval=1, eval_interval=0, save_interval=30, on_divergence=policy,
            divergence_factor=1.5, divergence_patience=2)
      return p

  lines = []
  trainer = trainer_lib.Trainer(Exp(data_dir), sharding.Partitioner('none'), str(tmp_path / policy),
                                log=lines.append)
  if policy == 'stop':
    with pytest.raises(trainer_lib.Diverged) as e:
      trainer.Train()
    message = str(e.value)
    assert '\n' not in message and message.startswith('training diverged: loss ')
    assert message.endswith('stopped without saving (last checkpoint: step 0); learner.on_divergence : warn '
                            'would train on')
    assert tf.train.latest_checkpoint(str(tmp_path / policy)) is None  # no diverged weights were saved
  else:
    last = trainer.Train()
    assert last and trainer.Step() == 30
    warned = [l for l in lines if 'training diverged' in l]
    assert warned and all(l.endswith('training on (learner.on_divergence : warn)') for l in warned)
