"""Checkpoint averaging: the mean of two real checkpoints is NumPy's mean of their weights, the evaluator
decodes it as it is, and runs or counts that do not fit are refused in one line before anything is written.
"""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.core import experiment as experiment_lib
from lingvo_gshard.core import sharding
from lingvo_gshard.eval import evaluator
from lingvo_gshard.eval import heldout
from lingvo_gshard.train import averaging
from lingvo_gshard.train import checkpoints
from lingvo_gshard.train import trainer as trainer_lib
from trainer_test import _SmallMoE
from trainer_test import data_dir  # pylint: disable=unused-import  (the small built corpus fixture)

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _Train(data_dir, logdir, overrides):
  trainer_lib.Trainer(_SmallMoE(data_dir), sharding.Partitioner('none'), logdir, log=lambda line: None,
                      overrides='learner.log_interval : 2; learner.eval_interval : 0; ' + overrides).Train()
  return logdir


@pytest.fixture(scope='module')
def run(data_dir, tmp_path_factory):
  """A 4-step run keeping ckpt-2 and ckpt-4."""
  return _Train(data_dir, str(tmp_path_factory.mktemp('run')), 'learner.max_steps : 4; learner.save_interval : 2')


@pytest.fixture(scope='module')
def average(data_dir, run, tmp_path_factory):
  """The run's two checkpoints averaged into a directory of its own: (plan, checkpoint path)."""
  plan = averaging.Plan(_SmallMoE(data_dir), run, last=2)
  out = str(tmp_path_factory.mktemp('avg') / 'avg2')
  return plan, averaging.Write(plan, out, log=lambda line: None)


def _Weights(path):
  reader = tf.train.load_checkpoint(path)
  return {n: reader.get_tensor(n) for n in averaging.StoredWeights(path)}


def test_the_mean_of_two_checkpoints_is_the_numpy_mean_of_their_weights(run, average):
  plan, path = average
  assert plan.steps == [2, 4] and path.endswith('ckpt-4')
  two, four, mean = _Weights(os.path.join(run, 'ckpt-2')), _Weights(os.path.join(run, 'ckpt-4')), _Weights(path)
  assert sorted(mean) == sorted(two) == sorted(four) and len(mean) > 20
  moved = 0
  for name, value in mean.items():
    assert value.dtype == np.float32, name
    np.testing.assert_allclose(value, np.mean([two[name], four[name]], axis=0), rtol=1e-6, atol=1e-7,
                               err_msg=name)
    moved += not np.array_equal(two[name], four[name])
  assert moved > len(mean) // 2  # training changed most weights, so the mean is no copy of either
  # The step is the newest checkpoint's; optimizer slots and the input position are not carried over.
  assert checkpoints.Step(path) == 4
  stored = [averaging.Key(n) for n, _ in tf.train.list_variables(path)]
  assert not [k for k in stored if k.startswith(('opt/', 'input'))]
  assert plan.dropped == ['input', 'opt']


def test_the_average_is_a_log_directory_that_says_what_it_averages(run, average):
  plan, path = average
  out = os.path.dirname(path)
  assert tf.train.latest_checkpoint(out) == path
  for name in averaging.RUN_FILES:
    assert open(os.path.join(out, name)).read() == open(os.path.join(run, name)).read(), name
  record = averaging.Record(path)
  assert record['steps'] == [2, 4] and record['method'] == 'mean' and record['logdir'] == run
  assert record['checkpoints'] == [os.path.join(run, 'ckpt-2'), os.path.join(run, 'ckpt-4')]
  assert averaging.Record(os.path.join(run, 'ckpt-4')) is None  # a trained checkpoint is no average
  # The reports' training seconds: the newest averaged checkpoint's.
  assert checkpoints.TrainSeconds(out) == {'ckpt-4': checkpoints.TrainSeconds(run)['ckpt-4']}
  assert not [n for n in os.listdir(os.path.dirname(out)) if n.startswith('.')]  # no temporary left


def test_the_evaluator_decodes_the_average(data_dir, average):
  _, path = average
  ev = evaluator.Evaluator(_SmallMoE(data_dir), os.path.dirname(path), beam_size=1, log=lambda line: None)
  assert ev.checkpoint == path and averaging.Record(ev.checkpoint)['steps'] == [2, 4]
  # One short sentence: one batch shape to compile.
  res = ev.Evaluate(heldout.FromCorpus(data_dir, 'test', max_sentences=1, languages=['de'], log=lambda line: None))
  assert set(res['languages']) == {'de'} and res['step'] == 4 and res['checkpoint'] == path
  assert 0 <= res['languages']['de']['bleu'] <= 100 and res['languages']['de']['sentences'] == 1


def test_integer_weights_are_the_newest_checkpoints(tmp_path):
  """Floats are averaged, integers (a count, an index) are not: synthetic checkpoints of the same keys."""
  paths = []
  for i, (w, n) in enumerate([([1.0, 2.0], 3), ([2.0, 5.0], 7), ([6.0, 2.0], 9)]):
    objects = {'w/a': tf.Variable(np.float32(w)), 'w/n': tf.Variable(np.int32(n))}
    paths.append(tf.train.Checkpoint(**objects).write(str(tmp_path / f'ckpt-{i}')))
  weights = averaging.StoredWeights(paths[0])
  assert sorted(averaging.Key(n) for n in weights) == ['w/a', 'w/n']
  mean = {averaging.Key(n): v for n, v in averaging.Mean(paths, weights).items()}
  np.testing.assert_allclose(mean['w/a'], [3.0, 3.0])
  assert mean['w/a'].dtype == np.float32 and mean['w/n'] == 9 and mean['w/n'].dtype == np.int32


def test_too_few_checkpoints_and_unknown_names_are_one_line(data_dir, run):
  with pytest.raises(ValueError, match=r'keeps 2 checkpoints \(ckpt-2, ckpt-4\); averaging the last 3 needs 3$'):
    averaging.Plan(_SmallMoE(data_dir), run, last=3)
  with pytest.raises(FileNotFoundError, match=r'ckpt-3: no such checkpoint .* keeps ckpt-2, ckpt-4$'):
    averaging.Plan(_SmallMoE(data_dir), run, names=['ckpt-2', 'ckpt-3'])


def _OtherModel(data_dir, run, directory, params_text):
  """`directory` as the log directory of another model (a 3-layer encoder; the run's is 2): its initial
  weights as ckpt-2, written the way the trainer writes them, next to `params_text` and the run's data.json."""
  params = experiment_lib.LoadRunParams(_SmallMoE(data_dir), run)
  params.task.encoder.num_layers = 3
  one = sharding.Partitioner('none')
  with sharding.use(one):
    model = params.task.Instantiate().InstantiateVariables(one)
  os.makedirs(directory)
  path = tf.train.Checkpoint(step=tf.Variable(2, dtype=tf.int64), **checkpoints.CheckpointObjects(model)).write(
      os.path.join(directory, 'ckpt-2'))
  with open(os.path.join(directory, 'params.txt'), 'w') as f:
    f.write(params_text)
  shutil.copyfile(os.path.join(run, 'data.json'), os.path.join(directory, 'data.json'))
  return path


def test_checkpoints_of_another_run_are_refused_in_one_line(data_dir, run, tmp_path):
  ckpt4 = os.path.join(run, 'ckpt-4')
  params_text = open(os.path.join(run, 'params.txt')).read()
  assert 'task.encoder.num_layers : 2\n' in params_text
  other = _OtherModel(data_dir, run, str(tmp_path / 'other'),
                      params_text.replace('task.encoder.num_layers : 2\n', 'task.encoder.num_layers : 3\n'))
  with pytest.raises(ValueError, match=rf'^{re.escape(run)} and {re.escape(str(tmp_path))}/other were trained '
                     r"with other params \('task.encoder.num_layers : 2' vs 'task.encoder.num_layers : 3'\); "
                     r'their checkpoints are not averaged$'):
    averaging.Plan(_SmallMoE(data_dir), run, names=[ckpt4, other])
  # The run's own params.txt next to the other model's weights: the first weight one of them lacks is named.
  disguised = _OtherModel(data_dir, run, str(tmp_path / 'disguised'), params_text)
  with pytest.raises(checkpoints.CheckpointMismatchError,
                     match=rf'^{re.escape(disguised)} has w/mt/encoder/layers_2/\S+, {re.escape(ckpt4)} has not: '
                           r'not checkpoints of one model$'):
    averaging.Plan(_SmallMoE(data_dir), run, names=[ckpt4, disguised])


def test_an_existing_output_is_refused_unless_it_is_an_earlier_average(data_dir, run, average, tmp_path):
  plan, path = average
  out = os.path.dirname(path)
  with pytest.raises(ValueError, match=r'exists and is not empty \(\d+ entries\); --overwrite replaces'):
    averaging.CheckOutput(out, [run])
  with pytest.raises(ValueError, match=r'is the log directory .* being averaged'):
    averaging.CheckOutput(run, [run], overwrite=True)
  with pytest.raises(ValueError, match=r'holds the log directory'):
    averaging.CheckOutput(os.path.dirname(run), [run], overwrite=True)
  (tmp_path / 'notes').mkdir()
  (tmp_path / 'notes' / 'keep.txt').write_text('mine')
  with pytest.raises(ValueError, match=r'holds no \*\.average\.json, so it is no earlier average'):
    averaging.Write(plan, str(tmp_path / 'notes'), overwrite=True)
  assert os.listdir(tmp_path / 'notes') == ['keep.txt']
  # An earlier average is replaced whole.
  copy = tmp_path / 'again'
  shutil.copytree(out, copy)
  (copy / 'stale.txt').write_text('old')
  averaging.Write(plan, str(copy), overwrite=True, log=lambda line: None)
  assert 'stale.txt' not in os.listdir(copy) and averaging.Record(str(copy / 'ckpt-4'))['steps'] == [2, 4]
  assert sorted(os.listdir(tmp_path)) == ['again', 'notes']


def _Tool(*args, cwd):
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.average_checkpoints'] + list(args),
                       capture_output=True, text=True, timeout=300, cwd=cwd,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                           [_REPO] + [p for p in [os.environ.get('PYTHONPATH')] if p])))
  lines = [l for l in out.stderr.splitlines() if l.startswith('average_checkpoints: ')]
  return out, lines


def test_the_tool_refuses_in_one_line_and_writes_nothing(run, tmp_path):
  before = sorted(os.listdir(run))
  out, lines = _Tool('--model=M4TinyMoE', f'--logdir={run}', '--last=3', f'--output_logdir={tmp_path}/avg',
                     cwd=tmp_path)
  assert out.returncode == 1 and 'Traceback' not in out.stderr, out.stderr[-2000:]
  assert lines == [f'average_checkpoints: {run} keeps 2 checkpoints (ckpt-2, ckpt-4); averaging the last 3 '
                   'needs 3'], out.stderr[-2000:]
  out, lines = _Tool('--model=M4TinyMoE', f'--logdir={run}', '--last=2', '--checkpoints=ckpt-2,ckpt-4',
                     f'--output_logdir={tmp_path}/avg', cwd=tmp_path)
  assert out.returncode == 1 and lines == ['average_checkpoints: give --last=N (the newest N checkpoints) or '
                                           '--checkpoints=NAME,NAME,... (not both)'], out.stderr[-2000:]
  assert os.listdir(tmp_path) == [] and sorted(os.listdir(run)) == before
