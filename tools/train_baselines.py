r"""Trains and scores the bilingual baseline of every corpus pair (or of --languages), one after the other.

  python -m lingvo_gshard.tools.train_baselines --root=/tmp/bilingual \
      --runs_dir=docs/experiments/m4_tiny/runs/bilingual
  python -m lingvo_gshard.tools.train_baselines --languages=de,lg --max_sentences=50 --dry_run

Each pair trains `Bilingual_<code>` sized for its data and with a step budget proportional to it (the rule
is params/bilingual.py's TIERS and Steps: --dry_run prints every pair's plan), stopping early when the dev
loss stops falling; the kept checkpoint with the lowest dev cross-entropy decodes the pair's test split
(beam 4), and BLEU/chrF (sacrebleu, signatures) go to RUNS_DIR/<code>.json, written whole. A rerun skips
pairs that have their file and resumes a killed one from its checkpoints; a failing pair is reported and the
others go on (exit 1 at the end if any failed).
"""
from absl import app
from absl import flags

from lingvo_gshard.tools import _common
from lingvo_gshard.utils import paths

_ROOT = flags.DEFINE_string('root', '/tmp/bilingual', 'Log directories of the runs (ROOT/<code>).')
_RUNS_DIR = flags.DEFINE_string('runs_dir', 'docs/experiments/m4_tiny/runs/bilingual', 'Where each pair\'s '
                                'result JSON goes (commit them: the report is built from these files).')
_DATA_DIR = flags.DEFINE_string('data_dir', paths.DefaultDataDir(), 'Built corpus (prepare_data).')
_LANGUAGES = flags.DEFINE_list('languages', [], 'Pairs to run (language codes); default: every corpus pair.')
_MAX_SENTENCES = flags.DEFINE_integer('max_sentences', 0, 'Score the first N test sentences (0 = the whole '
                                      'test split).', lower_bound=0)
_BEAM = flags.DEFINE_integer('beam_size', 4, 'Beam size.', lower_bound=1)
_OVERRIDES = flags.DEFINE_string('model_params_override', '', 'Applied after each pair\'s own overrides '
                                 '(params.txt keys, "a : 1; b : 2").')
_DRY_RUN = flags.DEFINE_bool('dry_run', False, 'Print the plan (tier, steps, overrides per pair) and exit.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  _common.QuietLogs()
  from lingvo_gshard.data import reader  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.campaigns import bilingual_baselines  # pylint: disable=g-import-not-at-top
  try:
    plans = bilingual_baselines.Plan(reader.LoadManifest(_DATA_DIR.value), _LANGUAGES.value)
  except _common.UserErrors() as e:
    _common.Fail('train_baselines', str(e))
  total = {}
  for p in plans:
    total[p.tier] = total.get(p.tier, 0) + p.steps
  print(f'{len(plans)} pairs; planned steps by tier: ' + ', '.join(f'{t} {n}' for t, n in total.items()),
        flush=True)
  if _DRY_RUN.value:
    for p in plans:
      print(f'{p.lang:<12} {p.bucket:<7} {p.train:>7} {p.tier:<7} {p.steps:>5}  {p.overrides}')
    return 0
  runner = bilingual_baselines.BaselineRunner(_ROOT.value, _DATA_DIR.value, _RUNS_DIR.value, _MAX_SENTENCES.value,
                                    _BEAM.value, _OVERRIDES.value, log=lambda line: print(line, flush=True))
  from lingvo_gshard.train import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  try:
    summary = runner.Run(plans)
  except trainer_lib.Preempted as e:  # the pair's checkpoint is saved: a rerun resumes it
    _common.Fail('train_baselines', str(e), 128 + e.signum)
  return 1 if summary['failed'] else 0


def run():
  """The console script's entry point."""
  _common.Main('train_baselines', main)


if __name__ == '__main__':
  run()
