"""One client of a multi-client DTensor mesh (run by dtensor_multiclient_test.py, not a test itself).

Each client owns 4 virtual CPU devices; with DTENSOR_* set by the caller, two clients form one 8-device mesh.
Prints the routed step's loss and gradients (full values, fetched through the mesh) as JSON.
"""
import json
import os
import sys

import tensorflow as tf

cpus = tf.config.list_physical_devices('CPU')
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 4)

from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top

dtensor.initialize_accelerator_system('CPU')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lingvo_gshard.core import sharding  # pylint: disable=g-import-not-at-top
import sharding_model_fixture as fx  # pylint: disable=g-import-not-at-top

partitioner = sharding.Partitioner('dtensor', sys.argv[1])
loss, grads, _, _, _ = fx.RunStep(partitioner)
print('RESULT ' + json.dumps({'client': dtensor.client_id(), 'global_devices': dtensor.num_global_devices('CPU'),
                              'loss': float(loss), 'grads': {k: v.tolist() for k, v in grads.items()}}))
