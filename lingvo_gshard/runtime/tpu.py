"""Cloud TPU: a TPUStrategy that partitions one computation over every core with XLA SPMD.

This is where the `xla` sharding backend partitions for real: one replica whose computation spans all cores
(`num_replicas=1`), `experimental_spmd_xla_partitioning=True`, and a device mesh of the computation's logical
core ids in the experiment's mesh shape. Model code is unchanged; its `xla_sharding` annotations drive it.
"""
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from lingvo_gshard.core import mesh as mesh_lib
from lingvo_gshard.core import sharding
from lingvo_gshard.runtime import step_runner


class TPUError(RuntimeError):
  """No TPU to connect to, or a mesh that does not fit it."""


def CreateTPUStrategy(mesh: mesh_lib.MeshSpec, rules: Optional[sharding.ShardingRules] = None,
                      tpu: str = '') -> Tuple[tf.distribute.TPUStrategy, step_runner.StepRunner]:
  """Connects to `tpu` and returns (strategy, a StepRunner running the xla backend's steps through it) for
  `mesh`, which must use every core. Create variables under `strategy.scope()`."""
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    topology = tf.tpu.experimental.initialize_tpu_system(resolver)
  except (ValueError, tf.errors.OpError, RuntimeError, OSError) as e:  # OSError: URLError, DNS
    first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise TPUError(f'cannot connect to TPU {tpu!r}: {first_line}') from None
  device_mesh = TPUDeviceMesh(mesh, topology.num_tasks * topology.num_tpus_per_task)
  # One replica spanning the whole topology: SPMD partitions inside it, so data parallelism is a mesh axis.
  assignment = tf.tpu.experimental.DeviceAssignment.build(
      topology, computation_shape=list(topology.mesh_shape), num_replicas=1)
  strategy = tf.distribute.TPUStrategy(
      resolver, experimental_device_assignment=assignment, experimental_spmd_xla_partitioning=True)
  partitioner = sharding.Partitioner('xla', mesh, rules, device_mesh=device_mesh)
  return strategy, step_runner.StepRunner(partitioner, strategy=strategy)


def TPUDeviceMesh(mesh: mesh_lib.MeshSpec, num_cores: int) -> np.ndarray:
  """Logical core ids of the one SPMD computation, laid out in the mesh shape."""
  if mesh.size != num_cores:
    raise TPUError(f'mesh {mesh} has {mesh.size} devices; this TPU has {num_cores} cores: use all of them')
  return np.arange(num_cores).reshape(mesh.shape)
