r"""A map of the experts of a trained MoE run: the fraction of each language's dev tokens routed to each expert
(first choice), per MoE layer, and how language-specific each layer's routing is (mutual information between
language and expert).

  python -m lingvo_gshard.tools.expert_map --model=M4TinyMoEDemo --logdir=/tmp/m4tiny_moe_demo
  python -m lingvo_gshard.tools.expert_map --model=M4TinyMoE --logdir=/tmp/m4tiny_moe --checkpoint=ckpt-8000 \
      --batches_per_language=8 --output_dir=/tmp/moe_map

Restores the run as it was trained (its params.txt), routes --batches_per_language dev batches of every
language as an evaluation does, and writes expert_map.json (report/expert_map.py says what it holds) and
expert_map.png (a heatmap per layer, languages from the largest down, experts clustered) to --output_dir
(default LOGDIR/expert_map/<checkpoint>/).
"""
import os

from absl import app
from absl import flags

from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files

_MODEL = flags.DEFINE_string('model', None, 'Experiment trained in --logdir: a registered name, a dotted path or '
                             'path/to/file.py:Name.')
_LOGDIR = flags.DEFINE_string('logdir', None, 'The run\'s log directory (params.txt, checkpoints).')
_CHECKPOINT = flags.DEFINE_string('checkpoint', '', 'Checkpoint of --logdir (ckpt-N or a path); default: the latest.')
_DATA_DIR = flags.DEFINE_string('data_dir', '', 'Corpus whose dev split is routed; default: the run\'s.')
_BATCHES = flags.DEFINE_integer('batches_per_language', 4, 'Dev batches routed per language.', lower_bound=1,
                                upper_bound=10_000)
_OUTPUT_DIR = flags.DEFINE_string('output_dir', '', 'Where expert_map.json and .png go; default: '
                                  'LOGDIR/expert_map/<checkpoint>.')
flags.mark_flags_as_required(['model', 'logdir'])


def _Fail(message):
  _common.Fail('expert_map', message)


def _CheckFlags():
  if not files.IsDir(_LOGDIR.value):
    _Fail(f'--logdir={_LOGDIR.value}: no such directory')
  if _OUTPUT_DIR.value:
    if files.Exists(_OUTPUT_DIR.value) and not files.IsDir(_OUTPUT_DIR.value):
      _Fail(f'--output_dir={_OUTPUT_DIR.value}: a file, not a directory')
    try:
      files.CheckWritableDir(_OUTPUT_DIR.value, '--output_dir')
    except ValueError as e:
      _Fail(str(e))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  _CheckFlags()
  _common.QuietLogs()
  from lingvo_gshard.core import sharding  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.data import reader  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.eval import dev_eval  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.eval import evaluator  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.report import expert_map  # pylint: disable=g-import-not-at-top
  log = lambda line: print(line, flush=True)
  try:
    exp = _common.Experiment(_MODEL.value)
    path = evaluator.CheckpointPath(_LOGDIR.value, _CHECKPOINT.value)
    evaler = dev_eval.DevEvaler(exp, sharding.Partitioner('none'), _LOGDIR.value, _DATA_DIR.value,
                                per_language_batches=_BATCHES.value, log=log)
    if not evaler.languages:
      raise ValueError(f'{_MODEL.value}: its dev input names no language to map')
    step = evaler.Restore(path)
    counts = expert_map.Collect(evaler.learner, {lang: evaler.Batches(lang) for lang in evaler.languages})
    if not counts:
      raise ValueError(f'{_MODEL.value} has no MoE layer: there are no experts to map')
    manifest = reader.LoadManifest(evaler.dev.data_dir)
  except _common.UserErrors() as e:
    _Fail(str(e))
  langs = manifest['languages']
  result = expert_map.Build(counts, {k: v['train'] for k, v in langs.items()},
                            {k: v.get('bucket', '') for k, v in langs.items()})
  result.update(experiment=_MODEL.value, checkpoint=os.path.basename(path), step=step,
                batches_per_language=_BATCHES.value, corpus=manifest.get('fingerprint', ''))
  out = _OUTPUT_DIR.value or os.path.join(_LOGDIR.value, 'expert_map', os.path.basename(path))
  files.MakeDirs(out)
  files.WriteJson(os.path.join(out, 'expert_map.json'), result)
  expert_map.Plot(result, os.path.join(out, 'expert_map.png'), f'{_MODEL.value} {os.path.basename(path)}')
  for name, layer in result['layers'].items():
    tokens = sum(layer['tokens'].values())
    log(f'{name}: {layer["experts"]} experts, {tokens} tokens of {len(layer["tokens"])} languages, '
        f'I(language; expert) = {layer["mutual_information_bits"]:.3f} bits '
        f'({100 * layer["normalized_mutual_information"]:.1f}% of H(expert))')
  log(f'wrote {out}/expert_map.json and expert_map.png')


def run():
  """The console script's entry point."""
  _common.Main('expert_map', main)


if __name__ == '__main__':
  run()
