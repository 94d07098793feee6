"""Resource faults while training: a checkpoint that cannot be written (a file-size limit: what a full disk
does to the write), and a loss that runs away while staying finite.

The full disk is real: the trainer runs in its own process under RLIMIT_FSIZE smaller than a checkpoint, so
TensorFlow's write fails with EFBIG as it would with ENOSPC. The run must stop in one line naming the
checkpoint, leave the checkpoint before it the latest, and resume from it once the limit is gone.
"""
import json
import os
import shutil
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

# Trains trainer_faults_test's experiment to step 6, its log directory made read-only (chmod 555) right after
# the step-3 checkpoint, as an administrator's permission change would; errors go out as the trainer binary
# puts them (tools/_common: UserErrors, one line, exit 1).
_READ_ONLY = f'''
import os, sys
sys.path.insert(0, {_TESTS!r})
data_dir, logdir = sys.argv[1], sys.argv[2]
from lingvo_gshard.core import sharding
from lingvo_gshard.tools import _common
from lingvo_gshard.train import trainer as trainer_lib
import trainer_faults_test


class Trainer(trainer_lib.Trainer):
  def _Save(self, step, seconds):
    super()._Save(step, seconds)
    if step == 3:
      os.chmod(logdir, 0o555)


try:
  Trainer(trainer_faults_test._Exp(data_dir), sharding.Partitioner('none'), logdir, log=lambda line: None).Train()
except _common.UserErrors() as e:
  _common.Fail('trainer', str(e))
'''


def _ObeyingPermissions():
  """The command prefix under which this user's processes obey permission bits: none for a user; for root
  (which overrides them), dropping the capabilities that do so (util-linux's setpriv)."""
  if os.geteuid() != 0:
    return []
  if not shutil.which('setpriv'):
    pytest.skip('root overrides permission bits, and setpriv (util-linux) is not here to drop that')
  return ['setpriv', '--bounding-set=-dac_override,-dac_read_search']


def test_a_log_directory_made_read_only_mid_run_fails_in_one_line_and_resumes(data_dir, tmp_path):
  logdir = tmp_path / 'run'
  out = subprocess.run(_ObeyingPermissions() + [sys.executable, '-c', _READ_ONLY, data_dir, str(logdir)],
                       capture_output=True, text=True, timeout=600)
  os.chmod(logdir, 0o755)
  err = [l for l in out.stderr.splitlines() if l.startswith('trainer:')]
  assert out.returncode == 1 and len(err) == 1, out.stderr[-3000:]
  assert 'Traceback' not in out.stderr, out.stderr[-3000:]
  assert err[0].startswith(f'trainer: {logdir}/ckpt-6: cannot write the checkpoint (PermissionDeniedError: '), err[0]
  assert err[0].endswith('Permission denied); the latest is still ckpt-3'), err[0]
  # Writable again: ckpt-3 is still the latest, restores, and the run goes on to the end.
  assert os.path.basename(tf.train.latest_checkpoint(str(logdir))) == 'ckpt-3', err[0]
  resumed = trainer_lib.Trainer(trainer_faults_test._Exp(data_dir), sharding.Partitioner('none'), str(logdir),  # pylint: disable=protected-access
                                log=lambda line: None)
  assert resumed.Restore() == 3
  resumed.Train()
  assert os.path.basename(tf.train.latest_checkpoint(str(logdir))) == 'ckpt-6'


def test_a_checkpoint_write_that_fails_leaves_the_one_before_latest(data_dir, tmp_path):
  logdir = tmp_path / 'run'
  lines = []
  trainer_faults_test._Train(data_dir, logdir, lines, max_steps=3)  # pylint: disable=protected-access
  assert os.path.basename(tf.train.latest_checkpoint(str(logdir))) == 'ckpt-3'
  data = [f for f in os.listdir(logdir) if f.startswith('ckpt-3.data')]
  limit = os.path.getsize(logdir / data[0]) // 2
  # The file-size limit would also stop the run's writes into the tests' shared XLA compilation cache
  # (conftest.py), which then fails the first step before any checkpoint: this process compiles afresh.
  env = dict(os.environ, TF_XLA_FLAGS=' '.join(f for f in os.environ.get('TF_XLA_FLAGS', '').split()
                                               if not f.startswith('--tf_xla_persistent_cache_directory=')))
  out = subprocess.run([sys.executable, '-c', _LIMITED, data_dir, str(logdir), str(limit)],
                       capture_output=True, text=True, timeout=600, env=env)
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


def test_the_lowest_loss_survives_a_resume_so_a_climb_across_it_is_seen(data_dir, tmp_path):
  logdir = str(tmp_path / 'run')

  class Exp(trainer_faults_test._Exp):  # pylint: disable=protected-access
    def Learner(self):
      return super().Learner().Set(max_steps=self.max_steps, log_interval=1, eval_interval=0, save_interval=3,
                                   on_divergence='stop', divergence_factor=3.0, divergence_patience=2)

  first = Exp(data_dir)
  first.max_steps = 6
  trainer_lib.Trainer(first, sharding.Partitioner('none'), logdir, log=lambda _: None).Train()
  from lingvo_gshard.train import checkpoints  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.utils import files  # pylint: disable=g-import-not-at-top
  log_path = os.path.join(logdir, checkpoints.CHECKPOINT_LOG)
  rows = files.ReadJsonl(log_path)
  assert [r['step'] for r in rows] == [3, 6] and all(r['lowest_loss_step'] <= r['step'] for r in rows)
  assert rows[-1]['lowest_loss'] <= rows[0]['lowest_loss']
  # Say the run had once reached a loss of 0.5 (a third of what it logs now): the resumed run, whose own
  # losses never go that low, must measure against it and stop.
  rows[-1].update(lowest_loss=0.5, lowest_loss_step=5)
  files.WriteText(log_path, ''.join(json.dumps(r) + '\n' for r in rows))
  second = Exp(data_dir)
  second.max_steps = 12
  with pytest.raises(trainer_lib.Diverged) as e:
    trainer_lib.Trainer(second, sharding.Partitioner('none'), logdir, log=lambda _: None).Train()
  assert 'above 3 x its lowest 0.5 (step 5) in 2 log lines in a row since step 7' in str(e.value)
  assert 'last checkpoint: step 6' in str(e.value)


def test_a_run_estimated_near_the_available_memory_is_warned_of_in_one_line(data_dir, tmp_path):
  from lingvo_gshard.runtime import hardware  # pylint: disable=g-import-not-at-top
  _, available = hardware.MemoryBytes()

  class Huge(trainer_faults_test._Exp):  # pylint: disable=protected-access
    def Train(self):
      p = super().Train()
      # Rows enough that the activations alone pass the memory available now (weights are tiny).
      p.batch_rows = int(available / (p.max_target_length * 64 * 4 * 2)) + 1
      return p

  lines = []
  trainer_lib.Trainer(Huge(data_dir), sharding.Partitioner('none'), str(tmp_path / 'run'), log=lines.append)
  warned = [l for l in lines if l.startswith('warning: ')]
  assert len(warned) == 1 and ' may run out of memory: about ' in warned[0], lines
  assert warned[0].endswith('available now; fewer input.batch_rows would need less')
  calm = []
  trainer_lib.Trainer(trainer_faults_test._Exp(data_dir), sharding.Partitioner('none'), str(tmp_path / 'ok'),  # pylint: disable=protected-access
                      log=calm.append)
  assert not [l for l in calm if l.startswith('warning: ')]


def test_memory_is_read_from_the_kernel(tmp_path):
  from lingvo_gshard.runtime import hardware  # pylint: disable=g-import-not-at-top
  total, available = hardware.MemoryBytes()
  assert 0 < available <= total
  (tmp_path / 'meminfo').write_text('MemTotal: 100 kB\nMemAvailable:     2048 kB\n')
  assert hardware.MemoryBytes(str(tmp_path / 'meminfo'))[1] == 2048 * 1024
  (tmp_path / 'garbled').write_bytes(b'\xff\xfeMemAvailable: lots\n')
  assert hardware.MemoryBytes(str(tmp_path / 'garbled')) == (total, total)
