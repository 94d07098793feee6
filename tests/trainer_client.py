"""Trains one of trainer_faults_test's experiments in its own process, printing the log (run by
trainer_faults_test.py, which kills it or runs two of them as the clients of one DTensor mesh; not a test).

  python tests/trainer_client.py DATA_DIR LOGDIR [--deterministic] [--max_steps=N] [--mesh=data:2,expert:4]
  python tests/trainer_client.py DATA_DIR LOGDIR --decode     # the trainer's --mode=decode path instead

With --mesh the process owns 4 virtual CPU devices and, when DTENSOR_JOBS & co. are set, joins the other
clients in one mesh, as tools/trainer.py does on several hosts.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

parser = argparse.ArgumentParser()
parser.add_argument('data_dir')
parser.add_argument('logdir')
parser.add_argument('--mesh', default='')
parser.add_argument('--max_steps', type=int, default=None)
parser.add_argument('--deterministic', action='store_true')
parser.add_argument('--decode', action='store_true')
args = parser.parse_args()

import tensorflow as tf  # pylint: disable=g-import-not-at-top

if args.mesh:
  cpus = tf.config.list_physical_devices('CPU')
  tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 4)
  if os.environ.get('DTENSOR_JOBS'):
    from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
    dtensor.initialize_accelerator_system('CPU')

from lingvo_gshard.core import sharding  # pylint: disable=g-import-not-at-top
from lingvo_gshard.train import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
import trainer_faults_test  # pylint: disable=g-import-not-at-top

exp = (trainer_faults_test._Deterministic if args.deterministic else trainer_faults_test._Exp)(args.data_dir)  # pylint: disable=protected-access
if args.decode:
  from lingvo_gshard.eval import decode_job  # pylint: disable=g-import-not-at-top
  decode_job.Decode(exp, args.logdir, args.data_dir, 'test', **trainer_faults_test.DECODE_ARGS,
                    log=lambda line: print(line, flush=True))
  sys.exit(0)
partitioner = sharding.Partitioner('dtensor', args.mesh) if args.mesh else sharding.Partitioner('none')
trainer_lib.Trainer(exp, partitioner, args.logdir, max_steps=args.max_steps,
                    log=lambda line: print(line, flush=True)).Train()
