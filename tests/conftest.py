"""Test setup shared by every test file.

Eight virtual CPU devices back the mesh tests (DTensor meshes 8, 2x4, 4x2). They must be configured before
TensorFlow runs any op, so it happens here, at collection time, before a test module is imported. Single-device
code keeps running on CPU:0 as usual.

No test may depend on what the machine holds outside the test's own temporary directories: before anything
else, HOME and the default data directory ($LINGVO_GSHARD_DATA_DIR, else /tmp/gshard_data) point at empty
directories made for this process, so a test that reads a corpus someone built into /tmp, or a cache under
~, fails here as it would on a fresh machine (tests/fresh_machine_test.py checks that this holds).

Compiled XLA programs are kept for the run in one directory the pytest workers and every subprocess they
start share (TensorFlow's persistent compilation cache, keyed by the program): many tests train and decode
the same tiny models in processes of their own, and each would otherwise compile them again. The directory
is made fresh for each run and removed after it, so no run reads another's.
"""
import atexit
import os
import shutil
import tempfile

ISOLATED_ROOT = tempfile.mkdtemp(prefix='lingvo_gshard_tests_')
atexit.register(shutil.rmtree, ISOLATED_ROOT, ignore_errors=True)
for _name in ('home', 'data'):
  os.makedirs(os.path.join(ISOLATED_ROOT, _name))
os.environ['HOME'] = os.path.join(ISOLATED_ROOT, 'home')
os.environ['LINGVO_GSHARD_DATA_DIR'] = os.path.join(ISOLATED_ROOT, 'data')
os.environ['LINGVO_GSHARD_ISOLATED_ROOT'] = ISOLATED_ROOT  # for the check, and inherited by subprocesses

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

if 'LINGVO_GSHARD_TEST_XLA_CACHE' not in os.environ:  # the first process of the run (pytest's, not a worker's)
  os.environ['LINGVO_GSHARD_TEST_XLA_CACHE'] = tempfile.mkdtemp(prefix='lingvo_gshard_xla_cache_')
  atexit.register(shutil.rmtree, os.environ['LINGVO_GSHARD_TEST_XLA_CACHE'], ignore_errors=True)
_CACHE_FLAG = '--tf_xla_persistent_cache_directory=' + os.environ['LINGVO_GSHARD_TEST_XLA_CACHE']
if _CACHE_FLAG not in os.environ.get('TF_XLA_FLAGS', ''):
  os.environ['TF_XLA_FLAGS'] = (os.environ.get('TF_XLA_FLAGS', '') + ' ' + _CACHE_FLAG).strip()

import tensorflow as tf  # pylint: disable=g-import-not-at-top

NUM_VIRTUAL_DEVICES = 8


def _configure_virtual_devices():
  cpus = tf.config.list_physical_devices('CPU')
  try:
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_VIRTUAL_DEVICES)
  except RuntimeError:
    # Already initialised by an earlier import in this process; the check below says whether that is enough.
    pass
  n = len(tf.config.list_logical_devices('CPU'))
  if n < NUM_VIRTUAL_DEVICES:
    raise RuntimeError(f'tests need {NUM_VIRTUAL_DEVICES} virtual CPU devices, found {n}: TensorFlow ran an '
                       'op before tests/conftest.py configured them')


_configure_virtual_devices()

# The files that take longest (each over a minute of a worker's time in a full run) go first: pytest-xdist's
# --dist loadfile hands files to workers in collection order, and one of these left for the end keeps one
# worker busy while the other has nothing to do.
_LONGEST_FIRST = ('trainer_faults_test.py', 'translate_export_test.py', 'trainer_test.py', 'directions_test.py',
                  'trainer_resources_test.py', 'train_step_test.py', 'tool_flags_test.py', 'budget_test.py',
                  'cloud_storage_test.py', 'evaluator_test.py', 'tool_tracebacks_test.py', 'baselines_test.py',
                  'user_experiments_test.py')


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(os.path.basename(str(item.fspath)), len(rank)))  # stable: rest in order
