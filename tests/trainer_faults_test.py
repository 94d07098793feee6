"""The trainer under faults: SIGTERM mid-run, kill -9 at three moments of training and during a decode, a
truncated or garbage checkpoint, NaN losses; the evaler job.

Each fault is checked against an uninterrupted run of the same experiment: after the fault and a restart the
losses are the same step for step, and no checkpoint is lost or silently replaced by a fresh start.
"""
import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.core import experiment
from lingvo_gshard.core import sharding
from lingvo_gshard.eval import dev_eval
from lingvo_gshard.eval import evaluator
from lingvo_gshard.runtime import hardware
from lingvo_gshard.runtime import learner as learner_lib
from lingvo_gshard.train import checkpoints
from lingvo_gshard.train import dev_metrics
from lingvo_gshard.train import trainer as trainer_lib
import loopback
import trainer_test
from trainer_test import data_dir  # pylint: disable=unused-import  (the corpus fixture)


class _Exp(trainer_test._SmallMoE):  # pylint: disable=protected-access
  def Learner(self):
    p = super().Learner()
    p.Set(max_steps=6, log_interval=1, eval_interval=3, eval_batches=2, save_interval=3, keep_checkpoints=5)
    p.optimizer.Set(schedule='cosine', total_steps=6)
    return p


def _Train(data_dir, logdir, lines, max_steps=None, exp=None):
  t = trainer_lib.Trainer(exp or _Exp(data_dir), sharding.Partitioner('none'), str(logdir),
                          max_steps=max_steps, log=lines.append)
  t.Train()
  return t


@pytest.fixture(scope='module')
def whole(data_dir, tmp_path_factory):
  """An uninterrupted 6-step run: (logdir, log lines)."""
  logdir, lines = tmp_path_factory.mktemp('whole'), []
  _Train(data_dir, logdir, lines)
  return logdir, lines


def _AssertSameLosses(got_lines, want_lines, steps):
  got, want = trainer_test._Losses(got_lines), trainer_test._Losses(want_lines)  # pylint: disable=protected-access
  for step in steps:
    assert got[step] == pytest.approx(want[step], rel=1e-5), (step, got, want)


def test_sigterm_saves_the_current_step_and_the_rerun_continues_it(data_dir, whole, tmp_path):
  lines = []

  def Log(line):
    lines.append(line)
    if line.startswith('step      4/'):
      os.kill(os.getpid(), signal.SIGTERM)  # arrives mid-run, between steps 4 and 5

  t = trainer_lib.Trainer(_Exp(data_dir), sharding.Partitioner('none'), str(tmp_path), log=Log)
  with pytest.raises(trainer_lib.Preempted, match='SIGTERM: saved .*ckpt-4') as e:
    t.Train()
  assert e.value.signum == signal.SIGTERM
  assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handler removed again
  assert os.path.exists(tmp_path / 'ckpt-4.index')
  _Train(data_dir, tmp_path, lines)
  assert any('restored' in l and 'ckpt-4' in l for l in lines)
  _AssertSameLosses(lines, whole[1], range(1, 7))


_CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'trainer_client.py')


def _RunUntil(data_dir, logdir, trigger, *flags):
  """Trains _Exp in its own process (tests/trainer_client.py; decodes with --decode) and SIGKILLs it as soon
  as a log line starts with `trigger`; returns the lines it printed."""
  proc = subprocess.Popen([sys.executable, _CLIENT, data_dir, str(logdir), *flags], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
  lines = []
  for line in proc.stdout:
    lines.append(line.rstrip('\n'))
    if line.startswith(trigger):
      proc.send_signal(signal.SIGKILL)
      break
  proc.wait(timeout=300)
  assert proc.returncode == -signal.SIGKILL, ('the run ended before the trigger', trigger, lines[-5:])
  return lines


def test_kill_9_at_three_moments_then_the_losses_of_an_uninterrupted_run(data_dir, whole, tmp_path):
  """No handler runs on SIGKILL. One run is killed three times, each restart a new process: before its first
  checkpoint, as the dev evaluation starts, and just as the checkpoint after it is written (the kill lands
  within the save or right after it). A last restart trains to the end: every step any process logged has the
  uninterrupted run's loss, and every checkpoint present reads whole."""
  segments = [_RunUntil(data_dir, tmp_path, 'step      2/'),          # before the first checkpoint (step 3)
              _RunUntil(data_dir, tmp_path, 'step      3/'),          # the dev evaluation is next
              _RunUntil(data_dir, tmp_path, 'step      3 dev loss')]  # evaluated; ckpt-3 is being written
  assert not any('restored' in l for l in segments[0] + segments[1])  # nothing to restore yet
  lines = []
  t = _Train(data_dir, tmp_path, lines)
  assert t.Step() == 6
  restored = [l for l in lines if 'restored' in l]
  assert not restored or 'ckpt-3' in restored[0], restored  # from ckpt-3 if its save finished, else step 0
  objects = checkpoints.CheckpointObjects(t.learner.model, t.learner.optimizer)
  for path in checkpoints.CheckpointCandidates(str(tmp_path), log=lambda l: None):
    checkpoints.CheckCheckpoint(path, objects)
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith('ckpt-6')
  for segment in segments + [lines]:
    _AssertSameLosses(segment, whole[1], trainer_test._Losses(segment))  # pylint: disable=protected-access
  assert {1, 2} <= set(trainer_test._Losses(segments[0])) and {4, 5, 6} <= set(trainer_test._Losses(lines))  # pylint: disable=protected-access


# The test split's decode of tests/trainer_client.py --decode and of the test below: the same settings.
DECODE_ARGS = dict(languages=['de'], max_sentences=3, beam_size=2)


def test_kill_9_during_decode_loses_no_result(data_dir, whole, tmp_path):
  """A decode killed mid-way (the trainer's --mode=decode path, in its own process) leaves the earlier
  results.json of that checkpoint as it was, and a rerun writes the same scores."""
  from lingvo_gshard.eval import decode_job  # pylint: disable=g-import-not-at-top
  logdir = _Copy(whole[0], tmp_path)
  first, ev, ts, _ = decode_job.Decode(_Exp(data_dir), str(logdir), data_dir, 'test', **DECODE_ARGS,
                                       log=lambda l: None)
  path = os.path.join(ev.ResultDir(ts.name), 'results.json')
  before = open(path, 'rb').read()
  lines = _RunUntil(data_dir, logdir, 'decoding ', '--decode')  # compiling or decoding when it dies
  n = sum(r['sentences'] for r in first['languages'].values())
  assert lines[-1].startswith(f'decoding {n} sentences of {len(first["languages"])} languages'), lines[-3:]
  assert open(path, 'rb').read() == before
  assert not [f for f in os.listdir(ev.ResultDir(ts.name)) if f.endswith('.tmp')]
  again = ev.Evaluate(ts)  # the same evaluator: its compiled decoder is reused
  for lang, r in first['languages'].items():
    assert again['languages'][lang]['bleu'] == r['bleu'] and again['languages'][lang]['chrf'] == r['chrf']


class _Deterministic(_Exp):
  """_Exp without dropout and random routing, whose draws differ between one device and a mesh's shards, and
  in float32 (bfloat16 sums over other shards round differently: 1e-3 apart after two steps)."""
  DROPOUT = 0.0
  FPROP_DTYPE = tf.float32

  def Task(self):
    p = super().Task()
    for stack in (p.encoder, p.decoder):
      stack.moe_tpl.second_expert_policy = 'all'
    return p


def test_two_trainer_processes_train_one_mesh_like_one_device(data_dir, tmp_path):
  """Two trainer clients on loopback, 4 virtual CPU devices each, form one 8-device DTensor mesh
  (data:2,expert:4) and train 3 steps of a tiny MoE: their losses are the one-device run's, client 0 alone
  writes the logs, and the checkpoint they wrote together restores on one device."""
  lines = []
  ref = _Train(data_dir, tmp_path / 'one', lines, max_steps=3, exp=_Deterministic(data_dir))
  jobs = ','.join(f'localhost:{p}' for p in loopback.FreePorts(2))
  procs = [subprocess.Popen(
      [sys.executable, _CLIENT, data_dir, str(tmp_path / 'mesh'), '--mesh=data:2,expert:4', '--deterministic',
       '--max_steps=3'], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env=dict(os.environ, DTENSOR_CLIENT_ID=str(client), DTENSOR_NUM_CLIENTS='2', DTENSOR_JOB_NAME='worker',
               DTENSOR_JOBS=jobs)) for client in range(2)]
  outputs = [p.communicate(timeout=600) for p in procs]
  for p, (out, err) in zip(procs, outputs):
    assert p.returncode == 0, err[-3000:]
  want = trainer_test._Losses(lines)  # pylint: disable=protected-access
  for out, _ in outputs:
    got = trainer_test._Losses(out.splitlines())  # pylint: disable=protected-access
    # Logged to 4 decimals; sharded sums may round the last one the other way.
    assert sorted(got) == [1, 2, 3] and all(abs(got[k] - want[k]) <= 1.5e-4 for k in got), (got, want)
  rows = [json.loads(l) for l in open(tmp_path / 'mesh' / checkpoints.CHECKPOINT_LOG)]
  assert [r['step'] for r in rows] == [3]  # one line: client 0's
  assert len(os.listdir(tmp_path / 'mesh' / 'train')) == 1
  back = trainer_lib.Trainer(_Deterministic(data_dir), sharding.Partitioner('none'), str(tmp_path / 'mesh'),
                             max_steps=3, log=lambda l: None)
  assert back.Restore() == 3
  want = ref.learner.Weights()
  for path, w in back.learner.Weights().items():  # 3 steps of differently ordered sums: ~1e-4 relative
    np.testing.assert_allclose(w, want[path], rtol=1e-4, atol=1e-5, err_msg=path)


def _Truncate(prefix):
  data = [f for f in os.listdir(os.path.dirname(prefix)) if f.startswith(os.path.basename(prefix) + '.data')]
  path = os.path.join(os.path.dirname(prefix), data[0])
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 2)


def _Copy(run, tmp_path):
  """A copy of the uninterrupted run's log directory (ckpt-3 and ckpt-6), to damage."""
  logdir = tmp_path / 'run'
  shutil.copytree(run, logdir)
  return logdir


def test_a_truncated_latest_checkpoint_falls_back_to_the_previous_one(data_dir, whole, tmp_path):
  logdir = _Copy(whole[0], tmp_path)
  _Truncate(str(logdir / 'ckpt-6'))
  lines = []
  t = _Train(data_dir, logdir, lines, max_steps=6)
  assert any('ckpt-6: unreadable checkpoint' in l and 'trying the previous' in l for l in lines), lines
  assert any('restored' in l and 'ckpt-3' in l for l in lines)
  assert t.Step() == 6
  _AssertSameLosses(lines, whole[1], range(4, 7))  # steps 4-6 trained again from ckpt-3's input position


def test_a_garbage_state_file_keeps_the_checkpoints(data_dir, whole, tmp_path):
  logdir = _Copy(whole[0], tmp_path)
  (logdir / 'checkpoint').write_text('garbage {{{\n')
  lines = []
  t = _Train(data_dir, logdir, lines, max_steps=6)
  assert any('unreadable checkpoint state' in l for l in lines), lines
  assert any('already at step 6' in l for l in lines) and t.Step() == 6  # not a fresh start from step 0
  assert tf.train.latest_checkpoint(str(logdir)).endswith('ckpt-6')
  assert (logdir / 'checkpoint.unreadable').exists() and (logdir / 'ckpt-3.index').exists()


def test_no_readable_checkpoint_is_an_error_not_a_fresh_start(data_dir, whole, tmp_path):
  logdir = _Copy(whole[0], tmp_path)
  _Truncate(str(logdir / 'ckpt-3'))
  _Truncate(str(logdir / 'ckpt-6'))
  with pytest.raises(checkpoints.CheckpointMismatchError, match='none of its 2 checkpoints can be read'):
    _Train(data_dir, logdir, [], max_steps=6)
  assert (logdir / 'ckpt-6.index').exists()


def test_another_models_checkpoint_is_refused_before_params_are_rewritten(data_dir, whole, tmp_path):
  logdir = _Copy(whole[0], tmp_path)
  before = (logdir / 'params.txt').read_text()

  class _Wider(_Exp):
    MODEL_DIM = 48
  with pytest.raises(checkpoints.CheckpointMismatchError, match='does not match the model'):
    trainer_lib.Trainer(_Wider(data_dir), sharding.Partitioner('none'), str(logdir), log=lambda l: None)
  assert (logdir / 'params.txt').read_text() == before


class _Diverges(_Exp):
  def Learner(self):
    p = super().Learner()
    p.optimizer.Set(learning_rate=float('inf'))  # step 1's update makes every later loss NaN
    return p


def test_a_nan_loss_stops_at_its_step_without_saving(data_dir, tmp_path):
  with pytest.raises(FloatingPointError, match=r'step 2: loss nan.*last checkpoint: step 0'):
    _Train(data_dir, tmp_path, [], exp=_Diverges(data_dir))
  assert not [f for f in os.listdir(tmp_path) if f.startswith('ckpt-')]


def test_skip_nonfinite_leaves_the_weights_as_they_were(data_dir):
  root = experiment.ExperimentParams(_Exp(data_dir))
  hardware.ResolveAuto(root)  # the dtype the trainer would train with here
  learner = learner_lib.Learner(root.task, root.learner.optimizer, sharding.Partitioner('none'),
                                skip_nonfinite=True)
  batch = next(iter(root.input.train.Instantiate(log=lambda l: None).Dataset()))
  batch = {k: v.numpy() for k, v in batch.items()}
  learner.TrainStep(batch)
  before = learner.Weights()
  bad = dict(batch, tgt_weights=np.where(batch['tgt_weights'] > 0, np.nan, 0).astype(np.float32))
  m = learner.TrainStep(bad)
  assert float(m['finite']) == 0.0 and int(learner.global_step.numpy()) == 2
  for path, w in learner.Weights().items():
    np.testing.assert_array_equal(w, before[path], err_msg=path)
  assert float(learner.TrainStep(batch)['finite']) == 1.0  # and training goes on


def test_the_evaler_scores_every_checkpoint_like_the_training_loop(data_dir, whole):
  logdir, lines = whole
  evaler = dev_eval.DevEvaler(_Exp(data_dir), sharding.Partitioner('none'), str(logdir), log=lambda l: None)
  assert evaler.Watch(timeout=0) == 2  # ckpt-3 and ckpt-6, then it stops: 6 is max_steps
  rows = [json.loads(l) for l in open(logdir / dev_metrics.DEV_LOG)]
  assert [(r['step'], r['job']) for r in rows] == [(3, 'trainer'), (6, 'trainer'), (3, 'evaler'), (6, 'evaler')]
  rows = rows[2:]
  in_loop = {int(l.split()[1]): float(l.split()[4]) for l in lines if 'dev loss' in l}
  for r in rows:  # the same dev batches through the same eval step
    assert r['loss'] == pytest.approx(in_loop[r['step']], rel=1e-4)
    assert {k for k in r if k.startswith('xent/')} == {f'xent/{lang}' for lang in evaler.languages}
    assert len(evaler.languages) >= 2 and all(np.isfinite(r[f'xent/{lang}']) for lang in evaler.languages)
  assert evaler.Watch(timeout=0) == 0  # nothing new
  # --mode=eval --checkpoint=ckpt-3: that one checkpoint again, the same figures in a new row.
  again = evaler.EvalCheckpoint(evaluator.CheckpointPath(str(logdir), 'ckpt-3'))
  assert again == {k: pytest.approx(v, rel=1e-4, abs=1e-5) for k, v in rows[0].items() if k in again}
  assert len(again) == len(rows[0]) - 3  # all but step, checkpoint and job
  with open(logdir / dev_metrics.DEV_LOG) as f:
    assert [json.loads(l)['step'] for l in f][-1] == 3


def test_the_dev_batches_read_once_are_the_ones_every_evaluation_would_read(data_dir):
  """The trainer and the evaler read the dev batches at their first evaluation and score those at every
  later one: that equals rebuilding the input each time only because the dev input is deterministic."""
  dev = _Exp(data_dir).Dev()
  first, again = dev_metrics.DevBatches(dev, 3), dev_metrics.DevBatches(dev, 3)
  assert len(first) == 3 and len(dev_metrics.DevBatches(dev, 1)) == 1
  for a, b in zip(first, again):
    assert sorted(a) == sorted(b) and (a['src_segment_ids'] > 0).any()
    for k in a:
      np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_trainer_modes_fail_in_one_line(tmp_path):
  for args, message in [(['--mode=decode'], 'no checkpoint'), (['--mode=eval'], 'no params.txt'),
                        (['--mode=eval', '--max_steps=5'], 'apply to training only'),
                        (['--mode=eval', '--checkpoint=ckpt-9'], f'--checkpoint=ckpt-9: no such checkpoint in {tmp_path}/none'),
                        (['--mode=eval', '--checkpoint=ckpt-9', '--eval_timeout=5'], '--eval_timeout applies to watching'),
                        (['--mode=eval', '--max_sentences=5'], '--max_sentences applies to --mode=decode'),
                        (['--checkpoint=ckpt-9'], 'apply to --mode=eval or decode, not --mode=train_and_eval'),
                        (['--mode=decode', '--max_sentences=-1'], 'flag --max_sentences=-1: -1 is not a non-negative integer')]:
    out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.trainer', '--model=M4TinyMoE',
                          f'--logdir={tmp_path}/none'] + args, capture_output=True, text=True, timeout=300)
    err = [l for l in out.stderr.splitlines() if l.startswith('trainer:')]
    assert out.returncode == 1 and len(err) == 1 and message in err[0], out.stderr[-2000:]
