r"""Analyses an experiment without allocating its weights.

  python -m lingvo_gshard.tools.model_analysis --model=MoE2048E36L [--mesh=data:2048] [--json]
  python -m lingvo_gshard.tools.model_analysis --family [--json]

Prints total and active parameters, forward FLOPs per token, per-device bytes of weights, optimizer state and
activations under the mesh, and all-to-all bytes per MoE layer per step (conventions: models/analysis.py).
--family prints the paper's Table 1 family next to the paper's parameter counts.
"""
import json

from absl import app
from absl import flags

from lingvo_gshard import params as params_lib
from lingvo_gshard.core import hyperparams
from lingvo_gshard.core import mesh as mesh_lib
from lingvo_gshard.core import registry
from lingvo_gshard.models import analysis
from lingvo_gshard.tools import _common

_MODEL = flags.DEFINE_string('model', '', 'Experiment: a registered name, my_pkg.my_module.MyExperiment or '
                             'path/to/file.py:Name.')
_MESH = flags.DEFINE_string('mesh', '', 'Mesh such as data:2,expert:4; default: the experiment\'s.')
_FAMILY = flags.DEFINE_bool('family', False, 'Analyse the paper\'s model family (Table 1).')
_JSON = flags.DEFINE_bool('json', False, 'Print a JSON list of objects instead of a table.')
_SEQ_LEN = flags.DEFINE_integer('seq_len', 256, 'Tokens per example (attention context and batch size).', lower_bound=1)
_TOKENS = flags.DEFINE_integer('tokens_per_step', 0, 'Tokens per step; default: the Train() input\'s.', lower_bound=0)
_OVERRIDES = flags.DEFINE_string('model_params_override', '', 'Task params overrides, e.g. num_heads=8.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  params_lib.LoadAll()
  from lingvo_gshard.params import gshard_paper  # pylint: disable=g-import-not-at-top
  if _FAMILY.value:
    names = list(gshard_paper.PAPER_PARAMS)
  elif _MODEL.value:
    names = [_MODEL.value]
  else:
    raise app.UsageError('give --model=NAME or --family')
  try:
    rows = [analysis.AnalyzeExperiment(n, _MESH.value, _SEQ_LEN.value, _TOKENS.value, _OVERRIDES.value) for n in names]
  except (registry.RegistryError, mesh_lib.MeshError, hyperparams.ParamsError, ValueError) as e:
    raise app.UsageError(str(e))
  if _JSON.value:
    out = []
    for r in rows:
      d = r.AsDict()
      if r.name in gshard_paper.PAPER_PARAMS:
        d['paper_total_params'] = gshard_paper.PAPER_PARAMS[r.name]
      out.append(d)
    print(json.dumps(out, indent=1))
    return
  print(analysis.FormatTable(rows))
  paper = [r for r in rows if r.name in gshard_paper.PAPER_PARAMS]
  if paper:
    print('\nTotal parameters vs the paper\'s Table 1:')
    for r in paper:
      ref = gshard_paper.PAPER_PARAMS[r.name]
      print(f'  {r.name:<14} {r.total_params / 1e9:9.2f}B  paper {ref / 1e9:7.1f}B  '
            f'{100 * (r.total_params / ref - 1):+5.1f}%')


if __name__ == '__main__':
  _common.Main('model_analysis', main)
