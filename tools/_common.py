"""What the tools share: one-line fatal errors, the errors that mean bad input, experiment lookup, quiet logs.

Not a binary (BUILD makes none of tools/_*.py). TensorFlow and the library are imported inside the
functions, so a tool can check its flags (and fail in one line) before paying for TensorFlow's import.
"""
import sys
from typing import NoReturn, Sequence, Tuple, Type


def Main(tool: str, main) -> None:
  """app.run(main), with every flag error — an unknown flag (with the closest), a value of the wrong type,
  outside its bounds or choices, a missing required flag — as one line `tool: message` and exit 1, before
  main runs: nothing is read, created or written by a command whose flags are wrong. A UsageError raised by
  main (a stray argument, flags that do not go together) is one line too, and so is a RegistryError (an
  experiment that cannot be found or imported)."""
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top

  def Parse(argv):
    try:
      return flags.FLAGS(argv)
    except flags.Error as e:
      Fail(tool, ' '.join(str(e).split()))

  def Checked(argv):
    try:
      return main(argv)
    except app.UsageError as e:  # absl would print the whole usage text around it
      Fail(tool, ' '.join(str(e).split()))
    except LookupError as e:
      # An experiment that cannot be found or loaded, wherever the tool looked it up (a broken entry point
      # surfaces in params.LoadAll()). The registry is imported by then if the error is its own.
      registry = sys.modules.get('lingvo_gshard.core.registry')
      if registry is None or not isinstance(e, registry.RegistryError):
        raise
      Fail(tool, ' '.join(str(e).split()))

  app.run(Checked, flags_parser=Parse)


def Fail(tool: str, message: str, code: int = 1) -> NoReturn:
  """`tool: message` on stderr, exit `code` (1: bad input; 128 + signal: preempted)."""
  print(f'{tool}: {message}', file=sys.stderr)
  sys.exit(code)


def RunSpec(tool: str, flag: str, spec: str, archive_suffixes: Sequence[str] = ()) -> Tuple[str, str, str]:
  """(name, path, checkpoint or '') of a --flag=NAME=LOGDIR[@CHECKPOINT] value, the way the tools that read
  evaluated runs name them; a one-line exit naming the flag if malformed. A path ending in one of
  `archive_suffixes` is one checkpoint's decode packed into a file, so it takes no @CHECKPOINT."""
  name, sep, rest = (spec or '').partition('=')
  path, _, ckpt = rest.partition('@')
  if not sep or not name or not path:
    Fail(tool, f'--{flag}={spec}: expected NAME=LOGDIR[@CHECKPOINT]'
         + (f' or NAME=ARCHIVE{archive_suffixes[0]}' if archive_suffixes else ''))
  if archive_suffixes and path.endswith(tuple(archive_suffixes)) and ckpt:
    Fail(tool, f"--{flag}={spec}: an archive holds one checkpoint's decode; drop @{ckpt}")
  return name, path, ckpt


def UserErrors() -> Tuple[Type[BaseException], ...]:
  """Exceptions that mean bad input (names, meshes, params, data, files, checkpoints, no TPU): reported as one
  line with exit 1, never as a traceback."""
  from lingvo_gshard.core import hyperparams  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.core import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.core import registry  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.runtime import tpu  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.data import report  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.train import checkpoints  # pylint: disable=g-import-not-at-top
  return (registry.RegistryError, mesh_lib.MeshError, hyperparams.ParamsError, report.DataError, ValueError,
          FileNotFoundError, checkpoints.CheckpointMismatchError, checkpoints.WriteFailed, tpu.TPUError)


def Experiment(name: str):
  """The experiment `--model=name` names, every registered one loaded first (the package's and the installed
  entry points'): a registered name or its suffix, my_pkg.my_module.MyExperiment, or path/to/file.py:Name
  (core/registry.py resolves all three). A RegistryError says in one line what is missing, with the closest."""
  from lingvo_gshard.core import registry  # pylint: disable=g-import-not-at-top
  from lingvo_gshard import params as params_lib  # pylint: disable=g-import-not-at-top
  params_lib.LoadAll()
  return registry.Get(name)


def QuietLogs():
  """absl (and TFDS, which logs a line per language slice it opens) at WARNING, unless --verbosity was given:
  the tools print their own progress."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from absl import logging  # pylint: disable=g-import-not-at-top
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)
