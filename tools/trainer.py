r"""Trains, evaluates and decodes a registered experiment by name (Lingvo's trainer binary).

  python -m lingvo_gshard.tools.trainer --model=M4TinyMoE --logdir=/tmp/m4tiny_moe
  python -m lingvo_gshard.tools.trainer --model=M4TinyMoE --logdir=/tmp/m4tiny_moe --mode=eval    # evaler
  python -m lingvo_gshard.tools.trainer --model=M4TinyMoE --logdir=/tmp/m4tiny_moe --mode=decode  # BLEU
  python -m lingvo_gshard.tools.trainer --model=M4TinyMoE --backend=dtensor --mesh=data:2,expert:4 ...
  python -m lingvo_gshard.tools.trainer --model=Bilingual_de --max_steps=2000 \
      --model_params_override='task.encoder.num_layers : 2; learner.optimizer.learning_rate : 2.0'

Backends: none (one device: whole steps XLA-compiled with a GPU, TF graphs with XLA islands on a CPU; --jit),
dtensor (a CPU/GPU mesh; 8 virtual CPU devices with --virtual_devices=8), xla (annotated for XLA SPMD; on
Cloud TPU pass --tpu). A rerun resumes from the latest readable checkpoint in --logdir, input position
included. SIGTERM/SIGINT save a checkpoint of the current step, then exit 143/130. Bad names, meshes,
overrides, data or checkpoints exit 1 with one line.

Modes: train (training only), train_and_eval (the default: dev loss every eval_interval steps in the same
process), eval (watch --logdir and write the dev loss of each new checkpoint, overall and per language, until
the final step's; with --checkpoint, that checkpoint's only), decode (beam search over every language's test
split for the latest or --checkpoint, BLEU and chrF into --logdir/decode_test/; the same code path as
tools/evaluate.py). A flag the mode does not use fails in one line rather than being ignored.

Several hosts (DTensor multi-client): every host runs the same command with --backend=dtensor and the global
--mesh, and DTENSOR_JOBS (host:port of every client), DTENSOR_CLIENT_ID, DTENSOR_NUM_CLIENTS and
DTENSOR_JOB_NAME in its environment; each reads the same input and keeps its share of every batch on its
devices, each saves its shards of the checkpoints, client 0 writes the logs and summaries.
"""
import os

from absl import app
from absl import flags

from lingvo_gshard.tools import _common
from lingvo_gshard.train import dev_metrics

_MODEL = flags.DEFINE_string('model', None, 'Experiment: a registered name (M4TinyMoE), a dotted path '
                             '(my_pkg.my_module.MyExperiment) or path/to/file.py:Name.')
_MODE = flags.DEFINE_enum('mode', 'train_and_eval', ['train', 'train_and_eval', 'eval', 'decode'],
                          'What to run (see the module docstring).')
_CHECKPOINT = flags.DEFINE_string('checkpoint', '', '--mode=decode: checkpoint to decode (default: latest); '
                                  '--mode=eval: evaluate this one checkpoint and stop (default: watch).')
_MAX_SENTENCES = flags.DEFINE_integer('max_sentences', 0, '--mode=decode: first N test sentences per language '
                                      '(0 = all).', lower_bound=0)
_EVAL_TIMEOUT = flags.DEFINE_float('eval_timeout', None, '--mode=eval: stop after this many seconds without a '
                                   'new checkpoint (default: wait for the final step\'s).', lower_bound=0.0)
_LOGDIR = flags.DEFINE_string('logdir', None, 'Where params, summaries and checkpoints go.')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Built corpus (prepare_data); default: the experiment\'s.')
_BACKEND = flags.DEFINE_enum('backend', 'none', ['none', 'dtensor', 'xla'], 'Sharding backend.')
_MESH = flags.DEFINE_string('mesh', '', 'Mesh such as data:2,expert:4; default: the experiment\'s.')
_VIRTUAL = flags.DEFINE_integer('virtual_devices', 0, 'Split the CPU into this many logical devices.', lower_bound=0,
                                upper_bound=1024)
_TPU = flags.DEFINE_string('tpu', None, 'Cloud TPU name or address (xla backend on TPU).')
_JIT = flags.DEFINE_bool('jit', None, 'none backend: XLA-compile whole steps; --nojit: TF graphs with XLA '
                         'islands around MoE routing and the losses. Default: the step runner\'s rule for this '
                         'machine (jit on accelerators and CPUs without AVX-512; printed at start-up).')
_MAX_STEPS = flags.DEFINE_integer('max_steps', None, 'Override the experiment\'s max_steps.', lower_bound=1)
_MAX_TRAIN_SECONDS = flags.DEFINE_float(
    'max_train_seconds', None, 'Override the experiment\'s wall-clock budget (learner.max_train_seconds): '
    'the steps that fit are decided inside the warm-up and kept in LOGDIR/budget.json; 0 = none (max_steps).',
    lower_bound=0.0)
_OVERRIDES = flags.DEFINE_string(
    'model_params_override', '', 'Params overrides, keys as params.txt prints them: Lingvo\'s '
    '"task.encoder.num_layers : 4; learner.max_steps : 900" or "a.b=1,c=2" (keys outside task/learner/input '
    'are task keys).')
flags.mark_flags_as_required(['model', 'logdir'])


def _Fail(message, code=1):
  _common.Fail('trainer', message, code)


def _Runner(exp):
  from lingvo_gshard.runtime import step_runner  # pylint: disable=g-import-not-at-top
  return step_runner.StepRunner(exp.Partitioner(_BACKEND.value, _MESH.value or None), jit=_JIT.value)


def _CheckDevices():
  """The mesh against the devices the flags ask for, before TensorFlow sets its devices up (once a process):
  what the flags alone decide fails here in one line; how many GPUs a machine has is asked of TensorFlow."""
  from lingvo_gshard.core import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  if _VIRTUAL.value and (_TPU.value is not None or os.environ.get('DTENSOR_JOBS')):
    _Fail('--virtual_devices splits this machine\'s CPU; a TPU or multi-client job takes the devices it has')
  if not _MESH.value:
    return
  try:
    size = mesh_lib.MeshSpec.Parse(_MESH.value).size
  except mesh_lib.MeshError as e:
    _Fail(f'--mesh={_MESH.value}: {e}')
  if _BACKEND.value == 'none' and size > 1:
    _Fail(f'--mesh={_MESH.value} has {size} devices; --backend=none runs on one (use --backend=dtensor or xla)')
  if _VIRTUAL.value and size > _VIRTUAL.value:
    _Fail(f'--mesh={_MESH.value} needs {size} devices; --virtual_devices={_VIRTUAL.value} makes {_VIRTUAL.value}')


def _CheckModeFlags():
  """Flags that only another mode uses fail in one line (before anything is read): ignoring them would run
  something other than what the user typed."""
  mode, training = _MODE.value, _MODE.value in ('train', 'train_and_eval')
  if not training and (_OVERRIDES.value or _MAX_STEPS.value is not None or _MAX_TRAIN_SECONDS.value is not None):
    _Fail(f'--mode={mode} restores the run as it was trained (its params.txt); '
          '--model_params_override, --max_steps and --max_train_seconds apply to training only')
  if training and (_CHECKPOINT.value or _MAX_SENTENCES.value or _EVAL_TIMEOUT.value is not None):
    _Fail(f'--checkpoint, --max_sentences and --eval_timeout apply to --mode=eval or decode, not --mode={mode}')
  if mode == 'eval' and _MAX_SENTENCES.value:
    _Fail('--max_sentences applies to --mode=decode; --mode=eval scores the dev set')
  if mode == 'decode' and _EVAL_TIMEOUT.value is not None:
    _Fail('--eval_timeout applies to --mode=eval (watching --logdir)')
  if mode == 'eval' and _CHECKPOINT.value and _EVAL_TIMEOUT.value is not None:
    _Fail(f'--eval_timeout applies to watching --logdir; --checkpoint={_CHECKPOINT.value} evaluates that one')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  _CheckModeFlags()
  _CheckDevices()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  _common.QuietLogs()
  if _VIRTUAL.value:
    cpus = tf.config.list_physical_devices('CPU')
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] *
                                               _VIRTUAL.value)
  if os.environ.get('DTENSOR_JOBS'):
    # One of several DTensor clients (hosts) of one mesh: DTENSOR_JOBS, DTENSOR_CLIENT_ID,
    # DTENSOR_NUM_CLIENTS and DTENSOR_JOB_NAME say which; every client runs this same command.
    from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
    dtensor.initialize_accelerator_system()
    print(f'DTensor client {dtensor.client_id()} of {dtensor.num_clients()}: '
          f'{dtensor.num_global_devices(dtensor.preferred_device_type())} devices in all', flush=True)
  from lingvo_gshard.runtime import tpu  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.train import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  log = lambda line: print(line, flush=True)
  try:
    exp = _common.Experiment(_MODEL.value)
    if _MODE.value in ('eval', 'decode'):
      _RunEvalOrDecode(exp, log)
      return
    if _TPU.value is not None:
      strategy, runner = tpu.CreateTPUStrategy(exp.Mesh(_MESH.value or None), exp.ShardingRules(), _TPU.value)
      with strategy.scope():
        trainer = trainer_lib.Trainer(exp, runner.partitioner, _LOGDIR.value, _DATA_DIR.value,
                                      _OVERRIDES.value, _MAX_STEPS.value, log=log, runner=runner,
                                      max_train_seconds=_MAX_TRAIN_SECONDS.value)
    else:
      runner = _Runner(exp)
      trainer = trainer_lib.Trainer(exp, runner.partitioner, _LOGDIR.value, _DATA_DIR.value, _OVERRIDES.value,
                                    _MAX_STEPS.value, log=log, runner=runner,
                                    max_train_seconds=_MAX_TRAIN_SECONDS.value)
    trainer.Train(evaluate=_MODE.value == 'train_and_eval')
  except trainer_lib.Preempted as e:
    _Fail(str(e), 128 + e.signum)
  except _common.UserErrors() + (FloatingPointError,) as e:
    _Fail(str(e))


def _CheckpointToEvaluate() -> str:
  """--checkpoint's path for --mode=eval ('' without it: watch --logdir). It must be one of --logdir's: the
  evaler writes its dev loss into that run's history."""
  from lingvo_gshard.eval import evaluator  # pylint: disable=g-import-not-at-top
  if not _CHECKPOINT.value:
    return ''
  flag = f'--checkpoint={_CHECKPOINT.value}'
  try:
    path = evaluator.CheckpointPath(_LOGDIR.value, _CHECKPOINT.value)
  except FileNotFoundError:
    raise FileNotFoundError(f'{flag}: no such checkpoint in {_LOGDIR.value}') from None
  if os.path.dirname(os.path.abspath(path)) != os.path.abspath(_LOGDIR.value):
    raise ValueError(f'{flag} is not in --logdir={_LOGDIR.value} (the evaler writes to that run\'s history)')
  return path


def _RunEvalOrDecode(exp, log):
  if _MODE.value == 'eval':
    from lingvo_gshard.eval import dev_eval  # pylint: disable=g-import-not-at-top
    path = _CheckpointToEvaluate()
    runner = _Runner(exp)
    evaler = dev_eval.DevEvaler(exp, runner.partitioner, _LOGDIR.value, _DATA_DIR.value, log=log, runner=runner)
    if path:
      evaler.EvalCheckpoint(path)
      n = 1
    else:
      n = evaler.Watch(timeout=_EVAL_TIMEOUT.value)
    log(f'evaluated {n} checkpoint{"" if n == 1 else "s"}; dev losses in {_LOGDIR.value}/{dev_metrics.DEV_LOG}')
    return
  from lingvo_gshard.eval import decode_job  # pylint: disable=g-import-not-at-top
  results, ev, ts, _ = decode_job.Decode(exp, _LOGDIR.value, _DATA_DIR.value, 'test',
                                         max_sentences=_MAX_SENTENCES.value, checkpoint=_CHECKPOINT.value,
                                         log=log)
  log('\n'.join(decode_job.FormatResults(results)))
  log(f'wrote {ev.ResultDir(ts.name)}/results.json')


def run():
  """The console script's entry point."""
  _common.Main('trainer', main)


if __name__ == '__main__':
  run()
