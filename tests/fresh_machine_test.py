"""The suite runs as on a fresh machine: HOME and the default data directory are empty directories of its own.

tests/conftest.py points them there before anything is imported; these tests check that it did, that every
registered experiment's default data directory follows, and that the trainer run as a user would run it (a
subprocess, which inherits the environment) sees the empty directory, not a corpus the machine happens to hold.
"""
import os
import subprocess
import sys

from lingvo_gshard import params as params_lib
from lingvo_gshard.core import experiment
from lingvo_gshard.utils import paths

_ROOT = os.environ.get('LINGVO_GSHARD_ISOLATED_ROOT', '')


def test_home_and_default_data_dir_are_the_suites_own_empty_directories():
  assert _ROOT and os.path.isdir(_ROOT) and os.path.basename(_ROOT).startswith('lingvo_gshard_tests_')
  assert os.path.expanduser('~') == os.path.join(_ROOT, 'home')
  assert paths.DefaultDataDir() == os.path.join(_ROOT, 'data') != paths.DEFAULT_DATA_DIR
  # Nothing has built a corpus into it: a test that needs one builds its own under its tmp_path.
  assert not os.path.exists(os.path.join(paths.DefaultDataDir(), 'manifest.json'))


def test_every_experiment_reads_the_default_data_dir_or_its_own_named_one():
  registry = params_lib.LoadAll()
  defaults = 0
  for key in registry.Keys():
    root = experiment.ExperimentParams(registry.GetClass(key)())
    for split in root.input.IterParams():
      name, value = split
      if name.endswith('.data_dir'):
        assert value == paths.DefaultDataDir() or not value.startswith('/tmp/'), (key, name, value)
        defaults += value == paths.DefaultDataDir()
  assert defaults >= 100  # the tiny family and the 100 bilingual baselines all follow the default


def test_the_trainer_binary_sees_the_empty_default_data_dir(tmp_path):
  # As a user would run it: the subprocess inherits the environment, and finds no corpus where it looks.
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.trainer', '--model=M4TinyMoEDemo',
                        f'--logdir={tmp_path}/run', '--mode=train'], capture_output=True, text=True, timeout=300)
  err = [l for l in out.stderr.splitlines() if l.startswith('trainer:')]
  assert out.returncode == 1 and len(err) == 1, out.stderr[-2000:]
  assert os.path.join(_ROOT, 'data', 'manifest.json') in err[0], err[0]
