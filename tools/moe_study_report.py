r"""Rebuilds a MoE-versus-dense study's summary.json from the runs and comparisons its folder commits.

  python -m lingvo_gshard.tools.moe_study_report --study_dir=docs/experiments/moe_vs_dense

Reads STUDY_DIR/study.json (the regimes compared), runs/<run>/ (params.txt, dev_eval.jsonl, results.json) and
comparisons/*.json (compare_runs --json), prints a table per regime and writes STUDY_DIR/summary.json
(report/moe_study.py says what it holds).
"""
import os

from absl import app
from absl import flags

from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files

_STUDY_DIR = flags.DEFINE_string('study_dir', None, 'The study folder (study.json, runs/, comparisons/).',
                                 required=True)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if not files.IsDir(_STUDY_DIR.value):
    _common.Fail('moe_study_report', f'--study_dir={_STUDY_DIR.value}: no such directory')
  from lingvo_gshard.report import moe_study  # pylint: disable=g-import-not-at-top
  try:
    summary = moe_study.Summary(_STUDY_DIR.value)
  except (moe_study.StudyError, OSError, KeyError) as e:
    _common.Fail('moe_study_report', str(e) if not isinstance(e, KeyError) else f'a study file lacks {e}')
  print(f'{"regime":<24}{"dense steps":>12}{"moe steps":>10}{"dense xent":>11}{"moe xent":>9}'
        f'{"MoE-dense BLEU [95%]":>28}')
  for r in summary['regimes']:
    d = r['moe_minus_dense']
    ci = d.get('ci95', [float('nan')] * 2)
    print(f'{r["name"]:<24}{r["steps"]["dense"]!s:>12}{r["steps"]["moe"]!s:>10}{r["dev_xent"]["dense"]!s:>11}'
          f'{r["dev_xent"]["moe"]!s:>9}{d.get("bleu", float("nan")):>+12.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}] '
          f'({d["bucket"]})')
    if 'dev_xent_by_bucket' in r:
      print(f'{"":<24}dev xent MoE - dense by bucket: ' + ', '.join(
          f'{b} {v["moe_minus_dense"]:+.3f} (lower in {v["moe_lower"]}/{v["languages"]})'
          for b, v in r['dev_xent_by_bucket'].items()))
    for v in r.get('variants', []):
      d = v['on_minus_off']
      ci = d.get('ci95', [float('nan')] * 2)
      print(f'{"":<24}{v["name"]} on - off: {d.get("bleu", float("nan")):+.2f} BLEU [{ci[0]:+.2f}, {ci[1]:+.2f}] '
            f'(all); dev xent {v["dev_xent"]["off"]} -> {v["dev_xent"]["on"]}')
    z = r.get('router_z_loss')
    if z:
      d = z['on_minus_off']
      ci = d.get('ci95', [float('nan')] * 2)
      logits = ', '.join(f'{layer} {z["router_logit_max"][role][layer]["last"]:.2f}'
                         for role in ('off', 'on') for layer in z['router_logit_max'][role])
      print(f'{"":<24}z-loss {z["weight"]:g} on - off: {d.get("bleu", float("nan")):+.2f} BLEU '
            f'[{ci[0]:+.2f}, {ci[1]:+.2f}] (all); dev xent {z["dev_xent"]["off"]} -> {z["dev_xent"]["on"]}; '
            f'router logit max at the end, off then on: {logits}')
  path = os.path.join(_STUDY_DIR.value, 'summary.json')
  files.WriteJson(path, summary, sort_keys=False)
  print(f'wrote {path}')


def run():
  """The console script's entry point."""
  _common.Main('moe_study_report', main)


if __name__ == '__main__':
  run()
