"""The MoE-versus-dense study's summary, rebuilt from what the study folder commits.

A study folder holds `study.json` (what was compared), `runs/<run>/` (each run's params.txt and
dev_eval.jsonl, and its results.json of the test split) and `comparisons/<name>.json` (compare_runs --json
of two runs: the paired bootstrap). `Summary` reads them and returns summary.json's content:

  {"regimes": [{"name", "varied": {...}, "dense", "moe", "steps": {...}, "dev_xent": {...},
                "moe_minus_dense": {"bucket", "bleu", "ci95", "chrf", "chrf_ci95", "b_better"},
                "dev_xent_by_bucket": {bucket: {"dense", "moe", "moe_minus_dense", "moe_lower", "languages"}}
                (when both runs' dev_eval.jsonl hold the evaler's per-language xent at their last step:
                one dev batch per language, so moe_lower counts are noisy; buckets as the dense run's test
                results name them, "all" the unweighted mean over languages)}, ...],
   "regime": the regime with the largest MoE - dense BLEU, "moe_minus_dense": its figure with "runs",
   "experts_curve": [{"experts", "dev_xent", "bleu", "chrf", "run"}, ...] of the regime's E sweep (dense as
   E = 1), sorted by E,
   "router_z_loss": the regime's z-loss pair, if it has one: {"weight", "off", "on", "dev_xent": {"off", "on"},
   "on_minus_off": {"bucket", "bleu", "ci95", ...},
   "router_logit_max": {"off"|"on": {layer: {"first", "last", "growth", "max"}}}}}

so the headline can be checked by a program, and a figure that changes is rebuilt, not edited.

A regime's optional "variants": [{"name", "off", "on", "comparison": compare_runs --json of off (a) and on
(b)}] (a regulariser or router setting switched on in one MoE run, the rest equal) give the row's
"variants": [{"name", "off", "on", "dev_xent": {"off", "on"}, "on_minus_off": {"bucket": "all", ...}}].
A regime's optional "router_z_loss": {"off": run, "on": run, "comparison": compare_runs --json of off (a)
and on (b), "router_logits": tools/router_logits --json of both runs, named as the study names them}.
"""
import json
import os
from typing import Dict, List, Optional

from lingvo_gshard.train import dev_metrics
from lingvo_gshard.utils import files

STUDY = 'study.json'


class StudyError(ValueError):
  pass


def _Json(path: str):
  try:
    return json.loads(files.ReadText(path))
  except FileNotFoundError:
    raise StudyError(f'{path}: missing (the study commits it)') from None
  except ValueError as e:
    raise StudyError(f'{path}: not JSON ({str(e)[:80]})') from None


def RunFigures(run_dir: str) -> Dict:
  """{'experts', 'steps', 'dev_xent' (the last dev evaluation's), 'bleu', 'chrf' (all languages, test)}."""
  experts = 1
  for line in files.ReadText(os.path.join(run_dir, 'params.txt')).splitlines():
    if line.startswith('task.encoder.moe_tpl.num_experts : '):
      experts = int(line.split(' : ')[1])
  rows = dev_metrics.ReadDevLog(run_dir)
  last = rows[-1] if rows else {}
  results = _Json(os.path.join(run_dir, 'results.json'))
  average = results.get('averages', {}).get('all', {})
  return {'experts': experts, 'steps': last.get('step'), 'dev_xent': last.get('xent'),
          'bleu': average.get('bleu'), 'chrf': average.get('chrf'), 'set': results.get('set'),
          'checkpoint': results.get('checkpoint')}


def LanguageXent(run_dir: str) -> Dict[str, float]:
  """{lang: dev xent} of the evaler's row at the run's last step (trainer --mode=eval --checkpoint=ckpt-N),
  whichever job wrote that step last; {} if the evaler has no row there."""
  rows = dev_metrics.ReadDevLog(run_dir)
  if not rows:
    return {}
  evaler = {r['step']: r for r in dev_metrics.ReadDevLog(run_dir, 'evaler')}
  row = evaler.get(rows[-1]['step'], {})
  return {k[len('xent/'):]: v for k, v in row.items() if k.startswith('xent/')}


BUCKETS = ('high', 'medium', 'low')


def XentByBucket(dense: Dict[str, float], moe: Dict[str, float], buckets: Dict[str, str]) -> Dict:
  """Mean per-language dev xent of each model over each bucket's languages (and 'all': the unweighted mean
  over the languages of every bucket), their difference and in how many of the bucket's languages the MoE
  is lower."""
  out = {}
  order = [b for b in BUCKETS if b in buckets.values()] + sorted(set(buckets.values()) - set(BUCKETS))
  for bucket in order + ['all']:
    langs = [l for l, b in buckets.items() if bucket in (b, 'all') and l in dense and l in moe]
    if not langs:
      continue
    d, m = (sum(x[l] for l in langs) / len(langs) for x in (dense, moe))
    out[bucket] = {'dense': round(d, 4), 'moe': round(m, 4), 'moe_minus_dense': round(m - d, 4),
                   'moe_lower': sum(moe[l] < dense[l] for l in langs), 'languages': len(langs)}
  return out


def _Difference(comparison: Dict, bucket: str) -> Dict:
  out = {'bucket': bucket}
  for metric in ('bleu', 'chrf'):
    if metric in comparison and bucket in comparison[metric]['buckets']:
      row = comparison[metric]['buckets'][bucket]
      key = '' if metric == 'bleu' else 'chrf_'
      out[f'{metric}'] = round(row['delta'], 3)
      out[f'{key}ci95'] = [round(x, 3) for x in row['ci95']]
      if metric == 'bleu':
        out['b_better'] = row.get('b_better')
  return out


def _Weight(run_dir: str) -> float:
  path = os.path.join(run_dir, 'params.txt')
  for line in files.ReadText(path).splitlines():
    if line.startswith('task.router_z_loss_weight : '):
      return float(line.split(' : ')[1])
  raise StudyError(f'{path}: no task.router_z_loss_weight (the z-loss run\'s params.txt has it)')


def _Pair(study_dir: str, pair: Dict) -> Dict:
  """compare_runs --json of pair's off (a) and on (b) run, checked to compare those two."""
  comparison = _Json(os.path.join(study_dir, 'comparisons', pair['comparison']))
  names = (comparison['a']['name'], comparison['b']['name'])
  if names != (pair['off'], pair['on']):
    raise StudyError(f'comparisons/{pair["comparison"]} compares {names[1]} with {names[0]}, not '
                     f'{pair["on"]} with {pair["off"]}')
  return comparison


def _Variant(study_dir: str, pair: Dict) -> Dict:
  comparison = _Pair(study_dir, pair)
  xent = {role: RunFigures(os.path.join(study_dir, 'runs', pair[role]))['dev_xent'] for role in ('off', 'on')}
  return {'name': pair['name'], 'off': pair['off'], 'on': pair['on'], 'dev_xent': xent,
          'on_minus_off': _Difference(comparison, 'all')}


def _ZLoss(study_dir: str, pair: Dict) -> Dict:
  """The regime's z-loss off/on pair: the weight, dev xent, on - off over all languages, each run's router
  logit growth."""
  logits = _Json(os.path.join(study_dir, pair['router_logits']))['summary']
  growth = {}
  for role in ('off', 'on'):
    if pair[role] not in logits:
      raise StudyError(f'{pair["router_logits"]} has no run named {pair[role]} (it has {", ".join(logits)})')
    growth[role] = {key[:-len('/router_logit_max')]: {k: v[k] for k in ('first', 'last', 'growth', 'max')}
                    for key, v in logits[pair[role]].items() if key.endswith('/router_logit_max')}
  variant = _Variant(study_dir, dict(pair, name='router z-loss'))
  return {'weight': _Weight(os.path.join(study_dir, 'runs', pair['on'])),
          **{k: variant[k] for k in ('off', 'on', 'dev_xent', 'on_minus_off')}, 'router_logit_max': growth}


def Summary(study_dir: str) -> Dict:
  study = _Json(os.path.join(study_dir, STUDY))
  regimes: List[Dict] = []
  for regime in study.get('regimes', []):
    runs = {role: RunFigures(os.path.join(study_dir, 'runs', regime[role])) for role in ('dense', 'moe')}
    comparison = _Pair(study_dir, {'off': regime['dense'], 'on': regime['moe'], 'comparison': regime['comparison']})
    row = {'name': regime['name'], 'varied': regime.get('varied', {}), 'dense': regime['dense'],
           'moe': regime['moe'], 'steps': {r: runs[r]['steps'] for r in runs},
           'dev_xent': {r: runs[r]['dev_xent'] for r in runs},
           'moe_minus_dense': _Difference(comparison, regime.get('bucket', 'all'))}
    xent = {r: LanguageXent(os.path.join(study_dir, 'runs', regime[r])) for r in ('dense', 'moe')}
    if xent['dense'] and xent['moe']:
      results = _Json(os.path.join(study_dir, 'runs', regime['dense'], 'results.json'))
      buckets = {l: v['bucket'] for l, v in results.get('languages', {}).items() if 'bucket' in v}
      by_bucket = XentByBucket(xent['dense'], xent['moe'], buckets)
      if by_bucket:
        row['dev_xent_by_bucket'] = by_bucket
    curve = [dict(RunFigures(os.path.join(study_dir, 'runs', run)), run=run)
             for run in regime.get('experts_runs', [regime['dense'], regime['moe']])]
    row['experts_curve'] = sorted(({k: c[k] for k in ('experts', 'dev_xent', 'bleu', 'chrf', 'run')}
                                   for c in curve), key=lambda c: c['experts'])
    if 'variants' in regime:
      row['variants'] = [_Variant(study_dir, pair) for pair in regime['variants']]
    if 'router_z_loss' in regime:
      row['router_z_loss'] = _ZLoss(study_dir, regime['router_z_loss'])
    regimes.append(row)
  best: Optional[Dict] = max(regimes, key=lambda r: r['moe_minus_dense'].get('bleu', float('-inf')),
                             default=None)
  return {
      'regimes': regimes,
      'regime': {'name': best['name'], **best['varied']} if best else {},
      'moe_minus_dense': dict(best['moe_minus_dense'], runs=[best['dense'], best['moe']]) if best else {},
      'experts_curve': best['experts_curve'] if best else [],
      **({'router_z_loss': best['router_z_loss']} if best and 'router_z_loss' in best else {}),
  }
