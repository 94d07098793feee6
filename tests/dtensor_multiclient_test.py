"""DTensor across two client processes (the multi-host path): one 8-device mesh over 2 x 4 local devices
gives the single-device values. The clients talk over loopback only."""
import json
import os
import subprocess
import sys

import numpy as np

from lingvo_gshard.core import sharding
import sharding_model_fixture as fx
import loopback

_CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'dtensor_client.py')


def test_two_clients_form_one_mesh_with_single_device_values():
  ref_loss, ref_grads, _, _, _ = fx.RunStep(sharding.Partitioner('none'))
  jobs = ','.join(f'localhost:{p}' for p in loopback.FreePorts(2))
  procs = []
  for client in range(2):
    env = dict(os.environ, DTENSOR_CLIENT_ID=str(client), DTENSOR_NUM_CLIENTS='2', DTENSOR_JOB_NAME='worker',
               DTENSOR_JOBS=jobs, TF_CPP_MIN_LOG_LEVEL='2')
    procs.append(subprocess.Popen([sys.executable, _CLIENT, 'data:2,expert:4'], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
  outputs = []
  for proc in procs:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    outputs.append(json.loads([l for l in out.splitlines() if l.startswith('RESULT ')][0][len('RESULT '):]))
  assert sorted(o['client'] for o in outputs) == [0, 1]
  for o in outputs:
    assert o['global_devices'] == 8
    np.testing.assert_allclose(o['loss'], ref_loss, rtol=1e-5)
    for name, g in o['grads'].items():
      np.testing.assert_allclose(np.array(g), ref_grads[name], rtol=1e-5, atol=1e-7, err_msg=name)
