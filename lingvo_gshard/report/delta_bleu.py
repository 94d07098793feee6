"""The paper's figure: each multilingual model's BLEU gain over each pair's bilingual baseline, high to low
resource, rebuilt from small committed JSON files only.

    RUNS/corpus.json               the corpus' languages (training pairs, bucket), from its manifest
    RUNS/bilingual/<code>.json     a baseline's test scores (tools/train_baselines.py)
    RUNS/multilingual/<name>-<set>-<all|N>-<checkpoint>.json
                                   a multilingual run's per-language scores at one checkpoint (AddRun)

    results = delta_bleu.Build('docs/experiments/m4_tiny/runs')
    open('RESULTS.md', 'w').write(delta_bleu.Markdown(results, dense='dense', moe='moe', larger_moe='moe64'))
    delta_bleu.Plot(results, 'delta_bleu.png')

A run's column is its newest checkpoint of the report's set and sample size (the whole test split by
default) among those trained on the corpus build corpus.json names (the trainer's data.json fingerprint);
records of runs on another build, or from before data.json, are listed as not compared. A missing baseline
or run score is None in results.json, a dash in the table and no point in the plot — never a zero.
"""
import collections
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from lingvo_gshard.train import checkpoints
from lingvo_gshard.train import corpus_identity
from lingvo_gshard.utils import files
from lingvo_gshard.utils import provenance

BUCKETS = ('high', 'medium', 'low')
CORPUS_FILE = 'corpus.json'


def WriteCorpus(runs_dir: str, manifest: Dict) -> str:
  """RUNS/corpus.json: {'name', 'version', 'fingerprint', 'languages': {code: {'train', 'test', 'bucket'}}}."""
  path = os.path.join(runs_dir, CORPUS_FILE)
  files.WriteJson(path, {
      'name': manifest.get('name'), 'version': manifest.get('version'), 'fingerprint': manifest.get('fingerprint'),
      'languages': {l: {'train': v['train'], 'test': v.get('test'), 'bucket': v.get('bucket')}
                    for l, v in manifest['languages'].items()}})
  return path


def SampleSize(results: Dict, corpus: Dict) -> int:
  """0 if `results` scored every test sentence of each of its languages (per `corpus`, corpus.json's
  'languages'), else the largest per-language sample (an evaluate --max_sentences run)."""
  langs = results['languages']
  full = all(r['sentences'] == corpus.get(l, {}).get('test') for l, r in langs.items())
  return 0 if full else max(r['sentences'] for r in langs.values())


def AddRun(runs_dir: str, name: str, logdir: str, results: Dict) -> str:
  """Records one evaluated checkpoint of a multilingual run (an evaluate results.json) as
  RUNS/multilingual/<name>-<set>-<all|N>-<checkpoint>.json, with the corpus build it trained on (the run's
  data.json; {} for a run from before it); returns the path."""
  corpus = json.loads(files.ReadText(os.path.join(runs_dir, CORPUS_FILE)))['languages']
  seconds = checkpoints.TrainSeconds(logdir)
  ckpt = os.path.basename(results['checkpoint'])
  max_sentences = SampleSize(results, corpus)
  piece = {
      'name': name, 'experiment': results['experiment'], 'logdir': logdir, 'checkpoint': ckpt,
      'checkpoint_step': results['step'], 'steps': max([results['step']] + [
          int(c.rsplit('-', 1)[1]) for c in seconds]),
      'wall_clock_s': seconds.get(ckpt), 'set': results['set'],
      'max_sentences': max_sentences, 'beam_size': results.get('beam_size'),
      'decode_seconds': results.get('decode_seconds'),
      'bleu_signature': results['bleu_signature'], 'chrf_signature': results['chrf_signature'],
      'commit': provenance.CodeCommit(),  # the code that evaluated it
      'train_commit': checkpoints.TrainCommits(logdir).get(ckpt, ''),  # '' for a run from before the record
      'data': {k: v for k, v in corpus_identity.ReadData(logdir).items() if k != 'data_dir'},
      'languages': {l: {k: r[k] for k in ('bleu', 'chrf', 'sentences') if k in r}
                    for l, r in results['languages'].items()},
  }
  path = os.path.join(runs_dir, 'multilingual', f'{name}-{results["set"]}-{max_sentences or "all"}-{ckpt}.json')
  files.WriteJson(path, piece)
  return path


def _Load(pattern: str) -> List[Dict]:
  out = []
  for path in sorted(files.Glob(pattern)):
    try:
      out.append(json.loads(files.ReadText(path)))
    except ValueError as e:
      raise ValueError(f'{path}: not JSON ({e})') from None
  return out


def _Mean(values: Sequence[Optional[float]]) -> Optional[float]:
  values = [v for v in values if v is not None]
  return float(np.mean(values)) if values else None


def Build(runs_dir: str, test_set: str = 'test', max_sentences: int = 0) -> Dict:
  """results.json's content from the files under `runs_dir` (see the module docstring)."""
  path = os.path.join(runs_dir, CORPUS_FILE)
  if not files.Exists(path):
    raise FileNotFoundError(f'{path}: missing (m4_report --data_dir=CORPUS writes it from the manifest)')
  corpus_file = json.loads(files.ReadText(path))
  corpus = corpus_file['languages']
  def SameSample(r, lang):  # a whole-split score serves a sample when the split is no larger than it
    if not max_sentences:
      return r.get('max_sentences', 0) == 0
    return r['sentences'] == min(max_sentences, corpus.get(lang, {}).get('test') or r['sentences'])

  bilingual = {r['lang']: r for r in _Load(os.path.join(runs_dir, 'bilingual', '*.json'))
               if r.get('set', 'test') == test_set and SameSample(r, r['lang'])}
  runs, other_corpus = {}, []
  for piece in _Load(os.path.join(runs_dir, 'multilingual', '*.json')):
    if piece['set'] != test_set or piece['max_sentences'] != max_sentences:
      continue
    data = piece.get('data') or {}
    if data.get('fingerprint') != corpus_file.get('fingerprint'):
      other_corpus.append({'name': piece['name'], 'experiment': piece['experiment'],
                           'checkpoint_step': piece['checkpoint_step'],
                           'data': f'{data.get("name")} {data.get("version")}' if data else 'unrecorded'})
      continue
    if piece['name'] not in runs or piece['checkpoint_step'] > runs[piece['name']]['checkpoint_step']:
      runs[piece['name']] = piece
  names = sorted(runs)
  languages = {}
  for lang in sorted(corpus, key=lambda l: (-corpus[l]['train'], l)):
    entry = {'bucket': corpus[lang]['bucket'], 'train': corpus[lang]['train']}
    base = bilingual.get(lang)
    entry['bilingual'] = base['bleu'] if base else None
    entry['bilingual_chrf'] = base['chrf'] if base else None
    for name in names:
      score = runs[name]['languages'].get(lang)
      entry[name] = score['bleu'] if score else None
      entry[f'{name}_chrf'] = score['chrf'] if score else None
      entry[f'delta_{name}'] = (entry[name] - entry['bilingual']
                                if entry[name] is not None and entry['bilingual'] is not None else None)
    languages[lang] = entry
  columns = ['bilingual', 'bilingual_chrf'] + [c for n in names for c in (n, f'{n}_chrf', f'delta_{n}')]
  averages = {}
  for bucket in BUCKETS + ('all',):
    rows = [e for e in languages.values() if bucket in ('all', e['bucket'])]
    averages[bucket] = {c: _Mean([e[c] for e in rows]) for c in columns}
    averages[bucket]['languages'] = len(rows)
    averages[bucket]['with_bilingual'] = sum(e['bilingual'] is not None for e in rows)
  signatures = {r['bleu_signature'] for r in bilingual.values()} | {r['bleu_signature'] for r in runs.values()}
  return {
      'set': test_set, 'max_sentences': max_sentences, 'languages': languages, 'averages': averages,
      'runs': {n: {k: runs[n][k] for k in ('experiment', 'steps', 'wall_clock_s', 'checkpoint_step',
                                           'bleu_signature', 'chrf_signature', 'commit', 'decode_seconds')}
                   | {'train_commit': runs[n].get('train_commit', '')} for n in names},
      'not_compared': other_corpus,  # trained on another corpus build (or from before data.json)
      'corpus': {k: corpus_file.get(k) for k in ('name', 'version', 'fingerprint')},
      # Sums over the pairs that have the figure ('with_wall_clock' of 'pairs'): a missing one is not a zero.
      'bilingual': {'pairs': len(bilingual),
                    'wall_clock_s': sum(r['wall_clock_s'] for r in bilingual.values() if r.get('wall_clock_s')),
                    'with_wall_clock': sum(1 for r in bilingual.values() if r.get('wall_clock_s')),
                    'steps': sum(r.get('steps_trained') or 0 for r in bilingual.values()),
                    'commits': sorted({r.get('commit', '') for r in bilingual.values()}),
                    # The baselines' test splits are the same in every build since 1.0.0 (1.1.0 reordered
                    # training pairs only, which a one-language run reads shuffled either way).
                    'data_versions': dict(sorted(collections.Counter(
                        r.get('data_version', '1.0.0') for r in bilingual.values()).items()))},
      'signatures': sorted(signatures),
  }


def _F(v, fmt='.2f', sign=False):
  return '—' if v is None else format(v, ('+' if sign else '') + fmt)


# A target is judged only when its figures cover this share of the bucket's languages.
COVERAGE = 0.9


def _Gap(results: Dict, bucket: str, a: str, b: str) -> Tuple[Optional[float], int, int]:
  """(mean over `bucket`'s languages that have both columns of a - b, how many have both, bucket size)."""
  rows = [e for e in results['languages'].values() if e['bucket'] == bucket]
  both = [e[a] - e[b] for e in rows if e.get(a) is not None and e.get(b) is not None]
  return (float(np.mean(both)) if both else None), len(both), len(rows)


def Targets(results: Dict, dense: str, moe: str, larger_moe: str) -> List[Dict]:
  """The issue's three targets, each {'target', 'measured', 'languages', 'of', 'met'}: a per-language mean
  difference over the bucket's languages that have both scores; 'met' is None (not measured) below COVERAGE."""
  out = []
  for text, bucket, a, b, need in (
      (f'{moe} beats {dense} on the high-resource bucket by >= 1 BLEU', 'high', moe, dense, 1.0),
      (f'{dense} beats the bilingual baselines on the low-resource bucket', 'low', dense, 'bilingual', 0.0),
      (f'{moe} beats the bilingual baselines on the low-resource bucket', 'low', moe, 'bilingual', 0.0),
      (f'{larger_moe} beats {moe} on the high-resource bucket', 'high', larger_moe, moe, 0.0)):
    gap, n, of = _Gap(results, bucket, a, b)
    judged = gap is not None and n >= COVERAGE * of
    met = (gap >= need if need else gap > 0) if judged else None
    out.append({'target': text, 'measured': gap, 'languages': n, 'of': of, 'met': met})
  return out


def Markdown(results: Dict, dense: str = 'dense', moe: str = 'moe', larger_moe: str = 'moe64',
             commentary: str = '') -> str:
  """RESULTS.md: the runs, the targets, what the figures say, bucket averages, and every language by size.

  `commentary` is hand-written markdown (the analysis: why a target was missed, what would close it); it goes
  under its own heading after the targets, because the tables are rebuilt from data and prose is not.
  """
  names = list(results['runs'])
  lines = [f'# ΔBLEU against bilingual baselines ({results["set"]} split'
           + (f', first {results["max_sentences"]} sentences' if results['max_sentences'] else ', every sentence')
           + ')', '', '## Runs', '',
           '| run | experiment | steps | checkpoint | training wall-clock | trained by | evaluated by |',
           '|---|---|---|---|---|---|---|']
  for n, r in results['runs'].items():
    clock = '—' if r['wall_clock_s'] is None else f'{r["wall_clock_s"] / 60:.0f} min'
    lines.append(f'| {n} | {r["experiment"]} | {r["steps"]} | {r["checkpoint_step"]} | {clock} | '
                 f'{(r.get("train_commit") or "—")[:12]} | {(r["commit"] or "—")[:12]} |')
  b = results['bilingual']
  lines += [f'| bilingual | Bilingual_<code> ×{b["pairs"]} | {b["steps"]} (sum) | best dev xent each | '
            f'{b["wall_clock_s"] / 3600:.1f} h (sum of {b["with_wall_clock"]}) | '
            f'{", ".join(c[:12] for c in b["commits"]) or "—"} | (same) |', '']
  c = results.get('corpus') or {}
  lines += [f'Multilingual runs trained on {c.get("name")} {c.get("version")} (fingerprint '
            f'`{str(c.get("fingerprint"))[:12]}`, the runs\' data.json); bilingual baselines on '
            + ', '.join(f'{v} ×{n}' for v, n in b.get('data_versions', {}).items()) + '.']
  if results.get('not_compared'):
    lines.append('Not compared (trained on another corpus build): ' + ', '.join(
        f'{r["name"]} ckpt-{r["checkpoint_step"]} ({r["experiment"]}, {r["data"]})'
        for r in results['not_compared']) + '.')
  lines.append('')
  lines += ['## Targets (mean per-language difference over the bucket\'s languages that have both scores)', '',
            '| target | measured | languages | met |', '|---|---|---|---|']
  for t in Targets(results, dense, moe, larger_moe):
    met = 'not measured yet' if t['met'] is None else ('yes' if t['met'] else 'no')
    lines.append(f'| {t["target"]} | {_F(t["measured"], sign=True)} | {t["languages"]} of {t["of"]} | {met} |')
  if commentary.strip():
    lines += ['', '## What the figures say', '', commentary.strip()]
  cols = ['bilingual'] + names + [f'delta_{n}' for n in names]
  lines += ['', '## Bucket averages (BLEU; ΔBLEU over the languages that have both scores)', '',
            '| bucket | languages | with baseline | ' + ' | '.join(cols) + ' |',
            '|---|---|---|' + '---|' * len(cols)]
  for bucket, a in results['averages'].items():
    lines.append(f'| {bucket} | {a["languages"]} | {a["with_bilingual"]} | '
                 + ' | '.join(_F(a[c], sign=c.startswith('delta_')) for c in cols) + ' |')
  lines += ['', '## Per language (BLEU / chrF), by training pairs', '',
            '| lang | bucket | train | bilingual | ' + ' | '.join(names) + ' | '
            + ' | '.join(f'Δ {n}' for n in names) + ' |',
            '|---|---|---|---|' + '---|' * (2 * len(names))]
  for lang, e in results['languages'].items():
    pair = lambda c: '—' if e[c] is None else f'{e[c]:.2f} / {e[c + "_chrf"]:.1f}'
    lines.append(f'| {lang} | {e["bucket"]} | {e["train"]} | {pair("bilingual")} | '
                 + ' | '.join(pair(n) for n in names) + ' | '
                 + ' | '.join(_F(e[f'delta_{n}'], sign=True) for n in names) + ' |')
  lines += ['', 'Signatures: ' + '; '.join(f'`{s}`' for s in results['signatures']), '']
  return '\n'.join(lines)


def _Smooth(x: np.ndarray, y: np.ndarray, window: int) -> np.ndarray:
  """Centered moving average of y over the `window` nearest points (by index in x's order)."""
  half = window // 2
  return np.array([y[max(0, i - half):i + half + 1].mean() for i in range(len(y))])


def Plot(results: Dict, path: str, width_px: int = 1200, height_px: int = 480, dpi: int = 100):
  """delta_bleu.png: x = languages from high to low resource, y = ΔBLEU vs bilingual; per multilingual run
  its points and a smoothed line; the zero line and the bucket boundaries drawn."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  langs = list(results['languages'])
  fig, ax = plt.subplots(figsize=(width_px / dpi, height_px / dpi), dpi=dpi)
  for name in results['runs']:
    xs = np.array([i for i, l in enumerate(langs) if results['languages'][l][f'delta_{name}'] is not None])
    if not len(xs):
      continue
    ys = np.array([results['languages'][langs[i]][f'delta_{name}'] for i in xs])
    dots = ax.scatter(xs, ys, s=8, alpha=0.35)
    ax.plot(xs, _Smooth(xs, ys, 9), color=dots.get_facecolor()[0][:3], linewidth=2,
            label=f'{name} ({results["runs"][name]["experiment"]})')
  ax.axhline(0, color='black', linewidth=0.8)
  buckets = [results['languages'][l]['bucket'] for l in langs]
  for i in range(1, len(langs)):
    if buckets[i] != buckets[i - 1]:
      ax.axvline(i - 0.5, color='gray', linestyle='--', linewidth=0.6)
  for bucket in BUCKETS:
    idx = [i for i, b in enumerate(buckets) if b == bucket]
    if idx:
      ax.text(np.mean(idx), 1.0, bucket, transform=ax.get_xaxis_transform(), ha='center', va='bottom',
              fontsize=9)
  step = max(1, len(langs) // 50)
  ax.set_xticks(range(0, len(langs), step), langs[::step], rotation=90, fontsize=6)
  ax.set_xlim(-1, len(langs))
  ax.set_xlabel('language → English, from high to low resource (training pairs)')
  ax.set_ylabel('ΔBLEU vs bilingual')
  if ax.get_legend_handles_labels()[0]:
    ax.legend(fontsize=8, loc='best')
  else:
    ax.text(0.5, 0.5, 'no language has both a bilingual and a multilingual score yet', ha='center',
            transform=ax.transAxes)
  fig.tight_layout()
  files.SaveFigure(fig, path, dpi=dpi)
  plt.close(fig)
