r"""Trains a registered experiment by name.

  python -m lingvo_gshard.tools.trainer --model=M4TinyMoE --logdir=/tmp/m4tiny_moe
  python -m lingvo_gshard.tools.trainer --model=M4TinyMoE --backend=dtensor --mesh=data:2,expert:4 ...
  python -m lingvo_gshard.tools.trainer --model=Bilingual_de --max_steps=2000 \
      --model_params_override='task.encoder.num_layers : 2; learner.optimizer.learning_rate : 2.0'

Backends: none (one device: whole steps XLA-compiled with a GPU, TF graphs with XLA islands on a CPU; --jit),
dtensor (a CPU/GPU mesh; 8 virtual CPU devices with --virtual_devices=8), xla (annotated for XLA SPMD; on
Cloud TPU pass --tpu). A rerun resumes from the latest checkpoint in --logdir. Bad names, meshes or overrides
exit 1 with one line.
"""
import sys

from absl import app
from absl import flags

_MODEL = flags.DEFINE_string('model', None, 'Registered experiment, e.g. M4TinyMoE.')
_LOGDIR = flags.DEFINE_string('logdir', None, 'Where params, summaries and checkpoints go.')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Built corpus (prepare_data); default: the experiment\'s.')
_BACKEND = flags.DEFINE_enum('backend', 'none', ['none', 'dtensor', 'xla'], 'Sharding backend.')
_MESH = flags.DEFINE_string('mesh', '', 'Mesh such as data:2,expert:4; default: the experiment\'s.')
_VIRTUAL = flags.DEFINE_integer('virtual_devices', 0, 'Split the CPU into this many logical devices.')
_TPU = flags.DEFINE_string('tpu', None, 'Cloud TPU name or address (xla backend on TPU).')
_JIT = flags.DEFINE_bool('jit', None, 'none backend: XLA-compile whole steps (default with a GPU). --nojit '
                         '(default on a CPU-only machine) runs TF graphs with XLA islands around MoE routing: '
                         'oneDNN matmuls make M4Tiny steps 1.25-1.4x faster on a CPU '
                         '(tools/model_benchmark.py).')
_MAX_STEPS = flags.DEFINE_integer('max_steps', None, 'Override the experiment\'s max_steps.')
_OVERRIDES = flags.DEFINE_string(
    'model_params_override', '', 'Params overrides, keys as params.txt prints them: Lingvo\'s '
    '"task.encoder.num_layers : 4; learner.max_steps : 900" or "a.b=1,c=2" (keys outside task/learner/input '
    'are task keys).')
flags.mark_flags_as_required(['model', 'logdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  from absl import logging  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  logging.set_verbosity(logging.WARNING)  # TFDS logs a line per language slice it opens
  if _VIRTUAL.value:
    cpus = tf.config.list_physical_devices('CPU')
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] *
                                               _VIRTUAL.value)
  from lingvo_gshard.core import hyperparams  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.core import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.core import registry  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.train import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  registry.LoadAll()
  try:
    exp = registry.Get(_MODEL.value)
    if _TPU.value is not None:
      from lingvo_gshard.core import tpu  # pylint: disable=g-import-not-at-top
      strategy, partitioner = tpu.CreateTPUStrategy(exp.Mesh(_MESH.value or None), exp.ShardingRules(),
                                                    _TPU.value)
      with strategy.scope():
        trainer = trainer_lib.Trainer(exp, partitioner, _LOGDIR.value, _DATA_DIR.value, _OVERRIDES.value,
                                      _MAX_STEPS.value)
    else:
      jit = _JIT.value
      if jit is None:  # TF graphs + islands only on a CPU-only machine's none backend
        jit = _BACKEND.value != 'none' or bool(tf.config.list_physical_devices('GPU'))
      kwargs = {} if jit else {'jit': False}
      partitioner = exp.Partitioner(_BACKEND.value, _MESH.value or None, **kwargs)
      trainer = trainer_lib.Trainer(exp, partitioner, _LOGDIR.value, _DATA_DIR.value, _OVERRIDES.value,
                                    _MAX_STEPS.value)
  except (registry.RegistryError, mesh_lib.MeshError, hyperparams.ParamsError, ValueError,
          FileNotFoundError) as e:
    print(f'trainer: {e}', file=sys.stderr)
    sys.exit(1)
  try:
    trainer.Train()
  except trainer_lib.CheckpointMismatchError as e:
    print(f'trainer: {e}', file=sys.stderr)
    sys.exit(1)


if __name__ == '__main__':
  app.run(main)
