"""The training loop on a small built corpus: logs, summaries, checkpoints, resume; the trainer tool's errors.

Exact resume (the same losses step for step after an interruption) is tested in trainer_faults_test.py.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.bench import steps as steps_lib
from lingvo_gshard.core import sharding
from lingvo_gshard.params import m4_tiny
from lingvo_gshard.train import checkpoints
from lingvo_gshard.train import corpus_identity
from lingvo_gshard.train import trainer as trainer_lib
from lingvo_gshard.utils import provenance
import input_helpers


class _SmallMoE(m4_tiny.M4TinyBase):
  """M4TinyMoE shrunk to the test corpus: 600-piece vocabulary, M=32, 4 experts."""
  MODEL_DIM, NUM_HEADS, HIDDEN_DIM, NUM_LAYERS, NUM_EXPERTS, GROUP_SIZE = 32, 2, 64, 2, 4, 64
  SOURCE_VOCAB = TARGET_VOCAB = 600
  BATCH_ROWS, MAX_LENGTH = 4, 48
  # One decode loop (full-length caches): a quarter of the program to trace and compile in every process
  # that decodes; mt_model_test checks growing caches against it.
  DECODE_FIRST_CACHE_LENGTH = 48

  def __init__(self, data_dir):
    self.DATA_DIR = data_dir

  def _Input(self, split, repeat):
    p = input_helpers.InputParams(self.DATA_DIR, split=split, repeat=repeat, batch_rows=self.BATCH_ROWS)
    return p

  def Learner(self):
    p = super().Learner()
    p.Set(max_steps=6, log_interval=2, eval_interval=3, eval_batches=2, save_interval=3)
    p.optimizer.Set(learning_rate=0.5, warmup_steps=2)
    return p


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  return input_helpers.BuildCorpus(str(tmp_path_factory.mktemp('corpus')))


@pytest.fixture(scope='module')
def trained(data_dir, tmp_path_factory):
  """A 6-step run: (logdir, trainer, last metrics, log lines)."""
  logdir = str(tmp_path_factory.mktemp('run'))
  lines = []
  trainer = trainer_lib.Trainer(_SmallMoE(data_dir), sharding.Partitioner('none'), logdir, log=lines.append)
  last = trainer.Train()
  return logdir, trainer, last, lines


def test_train_writes_logs_and_resumes(data_dir, trained):
  logdir, trainer, last, lines = trained
  assert trainer.Step() == 6 and np.isfinite(last['loss']) and last['aux_loss'] > 0
  assert sum(l.startswith('step') and 'dev loss' in l for l in lines) == 2  # steps 3 and 6
  # Each log window's seconds per step (what model_benchmark --binary_steps reads), after the first step.
  rates = [float(m.group(1)) for l in lines for m in [re.match(steps_lib.STEP_LINE, l)] if m]
  assert len(rates) == 3 and all(0 < r < 60 for r in rates), lines
  params = open(os.path.join(logdir, 'params.txt')).read()
  assert 'task.encoder.moe_tpl.num_experts : 4' in params and 'input.train.batch_rows : 4' in params
  assert 'learner.optimizer.learning_rate : 0.5' in params and 'expert -> expert' in params
  summary = open(os.path.join(logdir, 'post_init_model_params.txt')).read()
  assert 'encoder.layers_1.ffn.wi' in summary and "logical=('expert', 'model', 'hidden')" in summary
  assert os.listdir(os.path.join(logdir, 'train')) and os.listdir(os.path.join(logdir, 'dev'))
  events = _Events(os.path.join(logdir, 'train'))
  # Per MoE layer, the per-expert vectors as histograms over the 4 experts (counts add up to E) at each log
  # step, with their extremes as scalars; and the run's params as text.
  for layer in ('encoder/layers_1', 'decoder/layers_1'):
    for name in ('load', 'expert_fill'):
      hists = events[f'moe/{layer}/{name}']
      assert [step for step, _ in hists] == [2, 4, 6], (layer, name)
      counts = tf.make_ndarray(hists[-1][1].tensor)[:, 2]
      assert counts.sum() == 4 and hists[-1][1].metadata.plugin_data.plugin_name == 'histograms'
    load_max = tf.make_ndarray(events[f'moe/{layer}/load_max'][-1][1].tensor)
    assert 0.25 <= load_max <= 1.0
    assert 0.0 <= tf.make_ndarray(events[f'moe/{layer}/expert_fill_min'][-1][1].tensor) <= 1.0
  text = tf.make_ndarray(events['params'][0][1].tensor).item().decode()
  assert 'task.encoder.moe_tpl.num_experts : 4' in text
  weights = trainer.learner.Weights()

  # A new trainer on the same logdir resumes at step 6 with the same weights, and goes on to 8.
  exp2 = _SmallMoE(data_dir)
  resumed = trainer_lib.Trainer(exp2, sharding.Partitioner('none'), logdir, max_steps=8, log=lines.append)
  assert resumed.Restore() == 6
  for path, w in resumed.learner.Weights().items():
    np.testing.assert_array_equal(w, weights[path], err_msg=path)
  resumed.Train()
  assert resumed.Step() == 8
  assert any('restored' in l and 'ckpt-6' in l for l in lines)
  # Every save logs its step and the training wall-clock so far, which adds up across the resume.
  rows = [json.loads(l) for l in open(os.path.join(logdir, checkpoints.CHECKPOINT_LOG))]
  assert [r['step'] for r in rows] == [3, 6, 8] and [r['checkpoint'] for r in rows] == ['ckpt-3', 'ckpt-6', 'ckpt-8']
  assert 0 < rows[0]['train_seconds'] < rows[1]['train_seconds'] < rows[2]['train_seconds']
  # ... and the code that trained it (a resumed run may change code between its stretches).
  assert [r['commit'] for r in rows] == [provenance.CodeCommit()] * 3
  assert checkpoints.TrainCommits(logdir) == {f'ckpt-{s}': provenance.CodeCommit() for s in (3, 6, 8)}


def test_a_run_records_its_corpus_build_and_refuses_to_resume_on_another(data_dir, trained, tmp_path):
  logdir = trained[0]
  manifest = json.load(open(os.path.join(data_dir, 'manifest.json')))
  data = json.load(open(os.path.join(logdir, corpus_identity.DATA_FILE)))
  assert data == {'name': manifest['name'], 'version': manifest['version'], 'fingerprint': manifest['fingerprint'],
                  'data_dir': os.path.abspath(data_dir)}
  # The same run, as if trained on another build (a rebuilt corpus has other vocabularies): refused in one
  # line before anything in the log directory is rewritten.
  other = str(tmp_path / 'run')
  shutil.copytree(logdir, other)
  with open(os.path.join(other, corpus_identity.DATA_FILE), 'w') as f:
    json.dump(dict(data, version='0.9.0', fingerprint='0ld' * 10), f)
  params_before = open(os.path.join(other, 'params.txt')).read()
  with pytest.raises(ValueError, match=r'data.json: this run trained on gettext_m4 0.9.0 \(fingerprint 0ld0ld'):
    trainer_lib.Trainer(_SmallMoE(data_dir), sharding.Partitioner('none'), other, log=lambda _: None)
  assert open(os.path.join(other, 'params.txt')).read() == params_before
  # Without checkpoints the directory holds no weights to mismatch: a fresh run may reuse it.
  empty = tmp_path / 'fresh'
  empty.mkdir()
  shutil.copy(os.path.join(other, corpus_identity.DATA_FILE), empty)
  corpus_identity.CheckData(str(empty), data, resuming=False)


def test_same_seed_gives_the_same_first_20_losses(data_dir, tmp_path):
  """Two fresh runs of one experiment and seed (dropout and the random second expert included) log the
  same 20 losses."""
  def Run(name, steps, seed=1234):
    lines = []
    trainer_lib.Trainer(_SmallMoE(data_dir), sharding.Partitioner('none'), str(tmp_path / name),
                        overrides=f'learner.max_steps : {steps}; learner.log_interval : 1; learner.eval_interval : 0; '
                                  f'learner.save_interval : {steps}; learner.seed : {seed}',
                        log=lines.append).Train()
    return _Losses(lines)

  first, second = Run('a', 20), Run('b', 20)
  assert sorted(first) == list(range(1, 21)) and first == second
  assert first[20] < first[1] and len(set(first.values())) == 20  # it trains: 20 different losses


def test_moe_groups_the_mesh_cannot_split_fail_before_anything_runs(data_dir, tmp_path):
  # 4 rows x 96 packed tokens = 384 = 6 groups of 64: not a multiple of data:8's 8 group shards.
  with pytest.raises(ValueError, match=r'6 groups of 64 tokens cannot be split over the 8 devices.*num_groups'):
    trainer_lib.Trainer(_SmallMoE(data_dir), sharding.Partitioner('dtensor', 'data:8'), str(tmp_path / 'x'))
  assert not (tmp_path / 'x').exists()


def test_trainer_tool_errors_are_one_line(tmp_path):
  for args, message in [(['--model=NoSuchModel'], "unknown experiment 'NoSuchModel'"),
                        (['--model=M4TinyMoE', '--backend=dtensor', '--mesh=data:16'],
                         'needs 16 devices, only 1 CPU devices exist'),
                        (['--model=M4TinyMoE', '--model_params_override=encoder.num_layrs=2'],
                         "unknown param 'task.encoder.num_layrs'; closest: task.encoder.num_layers"),
                        (['--model=M4TinyMoE', '--model_params_override=learner.max_steps : many'],
                         "param 'learner.max_steps': cannot parse 'many' as int"),
                        (['--model=M4TinyMoE', '--model_params_override=learner.optimizer.schedule : exp'],
                         "learner.optimizer.schedule = 'exp': must be one of {'cosine', 'linear', 'rsqrt'}"),
                        (['--model=MoE2048E36L'], 'MoE2048E36L needs 4'),
                        (['--model=M4TinyMoEDemo', '--max_train_seconds=-5'],
                         'flag --max_train_seconds=-5: -5.0 is not a non-negative number'),
                        # Decided by the flags alone, before TensorFlow sets its devices up:
                        (['--model=M4TinyMoE', '--backend=dtensor', '--mesh=data:4,expert:2',
                          '--virtual_devices=4'], '--mesh=data:4,expert:2 needs 8 devices; --virtual_devices=4 '
                                                  'makes 4'),
                        (['--model=M4TinyMoE', '--mesh=data:2'],
                         '--mesh=data:2 has 2 devices; --backend=none runs on one'),
                        (['--model=M4TinyMoE', '--backend=xla', '--tpu=local', '--virtual_devices=8'],
                         '--virtual_devices splits this machine\'s CPU; a TPU or multi-client job'),
                        ]:
    out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.trainer', f'--logdir={tmp_path}/x',
                          '--data_dir=/nonexistent'] + args, capture_output=True, text=True, timeout=300)
    err = [l for l in out.stderr.splitlines() if l.startswith('trainer:')]
    assert out.returncode == 1, out.stderr[-2000:]
    assert len(err) == 1 and message in err[0], out.stderr[-2000:]
    assert not os.path.exists(tmp_path / 'x')


def _Events(directory):
  """tag -> [(step, summary value)] of every TensorBoard event file in `directory`."""
  out = {}
  for name in sorted(os.listdir(directory)):
    for event in tf.compat.v1.train.summary_iterator(os.path.join(directory, name)):
      for value in event.summary.value:
        out.setdefault(value.tag, []).append((event.step, value))
  return out


def _Losses(lines):
  return {int(l.split()[1].split('/')[0]): float(l.split()[3]) for l in lines
          if l.startswith('step') and ' loss ' in l and 'dev' not in l}
