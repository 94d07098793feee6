r"""Prints every registered experiment with a one-line summary.

  python -m lingvo_gshard.tools.list_models [--filter=MoE] [--params=M4TinyMoE [--docs]]

The list holds the package's experiments and those of installed distributions' `lingvo_gshard.experiments`
entry points. With --params, prints that experiment's params (task, learner and inputs) as `a.b.c : value`
text instead; with --docs too, each under a `# doc [domain]` line: what it means and the values it may take.
--params takes every form --model does: a registered name, my_pkg.my_module.MyExperiment or file.py:Name.
"""
from absl import app
from absl import flags

from lingvo_gshard import params as params_lib
from lingvo_gshard.core import experiment
from lingvo_gshard.core import registry
from lingvo_gshard.tools import _common

_FILTER = flags.DEFINE_string('filter', '', 'Only list experiments whose name contains this text.')
_PARAMS = flags.DEFINE_string('params', '', 'Print the params of this experiment instead: a registered name, '
                              'my_pkg.my_module.MyExperiment or path/to/file.py:Name.')
_DOCS = flags.DEFINE_bool('docs', False, 'With --params: each param with its documentation and domain.')


def ListModels(name_filter: str = '') -> str:
  reg = params_lib.LoadAll()
  rows = [(key, reg.GetClass(key).Summary()) for key in reg.Keys() if name_filter.lower() in key.lower()]
  width = max((len(k) for k, _ in rows), default=0)
  return '\n'.join(f'{k:<{width}}  {s}' for k, s in rows)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if _PARAMS.value:
    try:
      exp = _common.Experiment(_PARAMS.value)
    except registry.RegistryError as e:
      raise app.UsageError(str(e))
    print(experiment.ExperimentParams(exp).ToText(include_docs=_DOCS.value), end='')
    return
  print(ListModels(_FILTER.value))


def run():
  """The console script's entry point."""
  _common.Main('list_models', main)


if __name__ == '__main__':
  run()
