"""Paired bootstrap resampling (Koehn, 2004) of the BLEU / chrF difference between two runs' decodes of the
same test sets, per language and for the mean over a bucket of languages.

A bucket's figure is a mean of per-language corpus scores over languages of a few hundred sentences or fewer;
whether a difference of a few tenths is more than the noise of which sentences were drawn is what this
answers. Each resample draws, for every language independently, as many sentences as it has (with
replacement), the same draw for both systems; each language's corpus score is recomputed from sacrebleu's
per-sentence sufficient statistics (summing them is how sacrebleu scores a corpus, for BLEU and chrF alike),
so a resample costs a sum and a score, not a re-tokenisation.
"""
import dataclasses
import json
import os
import tarfile
import zlib
from typing import Dict, List, Optional, Sequence

import numpy as np

from lingvo_gshard.eval import evaluator
from lingvo_gshard.eval import heldout
from lingvo_gshard.utils import files as files_lib

# results.json keys that change what a decode is; two decodes compared must agree on all of them.
DECODE_SETTINGS = ('set', 'beam_size', 'length_alpha', 'no_repeat_ngram')


@dataclasses.dataclass
class Decodes:
  """One run's decode of one test set: per language, hypotheses and references (aligned lines)."""
  path: str
  hypotheses: Dict[str, List[str]]
  references: Dict[str, List[str]]
  buckets: Dict[str, str]  # language -> 'high' | 'medium' | 'low' (results.json)
  settings: Dict  # DECODE_SETTINGS from results.json


# A result directory packed as one file (docs/experiments/m4_tiny/runs/hypotheses/ keeps decodes this way:
# results.json and the <lang>.hyp files; the references are the corpus's and are rebuilt from it).
ARCHIVE_SUFFIXES = ('.tar.gz', '.tgz', '.tar')


def _SplitLines(text: str) -> List[str]:
  # Split on '\n' only: the evaluator ends each sentence with '\n'; a '\r', U+2028 or form feed inside one
  # must not split it.
  lines = text.split('\n')
  return lines[:-1] if text.endswith('\n') or not text else lines


def _Lines(path: str) -> List[str]:
  return _SplitLines(files_lib.ReadText(path))


def _Buckets(results: Dict, results_path: str, languages: Optional[Sequence[str]]) -> Dict[str, str]:
  """{language: bucket} of the `languages` asked for (default: all evaluated), checked against results.json."""
  if not isinstance(results.get('languages'), dict):
    raise ValueError(f'{results_path}: no "languages" object (not an evaluator results.json)')
  buckets = {lang: r.get('bucket', '?') for lang, r in results['languages'].items()}
  for lang in languages or ():
    if lang not in buckets:
      raise ValueError(f'{results_path}: language {lang!r} was not evaluated')
  return {lang: buckets[lang] for lang in (languages or sorted(buckets))}


def _Settings(results: Dict) -> Dict:
  return {k: results.get(k) for k in DECODE_SETTINGS}


def LoadDecodes(result_dir: str, languages: Optional[Sequence[str]] = None) -> Decodes:
  """Reads <lang>.hyp / <lang>.ref of an evaluator result directory (decode_<set>/ckpt-N) and the languages'
  buckets from its results.json. Raises ValueError naming the file for anything missing or misaligned."""
  results_path = os.path.join(result_dir, 'results.json')
  if not files_lib.Exists(results_path):
    raise ValueError(f'{results_path}: no such file (not an evaluator result directory)')
  try:
    results = json.loads(files_lib.ReadText(results_path))
  except ValueError as e:
    raise ValueError(f'{results_path}: not JSON ({e})') from None
  buckets = _Buckets(results, results_path, languages)
  hyps, refs = {}, {}
  for lang in buckets:
    hyp_path, ref_path = (os.path.join(result_dir, f'{lang}.{ext}') for ext in ('hyp', 'ref'))
    for path in (hyp_path, ref_path):
      if not files_lib.Exists(path):
        raise ValueError(f'{path}: no such file')
    hyps[lang], refs[lang] = _Lines(hyp_path), _Lines(ref_path)
    if len(hyps[lang]) != len(refs[lang]):
      raise ValueError(f'{hyp_path}: {len(hyps[lang])} lines, but {ref_path} has {len(refs[lang])}')
  return Decodes(result_dir, hyps, refs, buckets, _Settings(results))


def LoadArchive(path: str, languages: Optional[Sequence[str]] = None, data_dir: str = '') -> Decodes:
  """Reads a result directory packed as a tar (ARCHIVE_SUFFIXES): results.json and <lang>.hyp, and <lang>.ref
  where packed. References not packed are rebuilt from the corpus at `data_dir`: the first `sentences` pairs
  (results.json) of each language's split, as the evaluator took them. Each rebuilt language's BLEU must equal
  the one results.json recorded, so a decode is never scored against another corpus's references."""
  try:
    with files_lib.Open(path, 'rb') as raw, tarfile.open(fileobj=raw) as tar:
      files = {os.path.normpath(m.name): tar.extractfile(m).read().decode('utf-8')
               for m in tar.getmembers() if m.isfile()}
  except (tarfile.TarError, OSError, EOFError, UnicodeDecodeError) as e:
    raise ValueError(f'{path}: not a readable tar of decodes ({type(e).__name__}: {e})') from None
  if 'results.json' not in files:
    raise ValueError(f'{path}: holds no results.json at its top level (not a packed evaluator result directory; '
                     f'members: {", ".join(sorted(files)[:3]) or "none"}{", ..." if len(files) > 3 else ""})')
  results_path = f'{path}:results.json'
  try:
    results = json.loads(files['results.json'])
  except ValueError as e:
    raise ValueError(f'{results_path}: not JSON ({e})') from None
  buckets = _Buckets(results, results_path, languages)
  hyps, refs = {}, {}
  for lang in buckets:
    if f'{lang}.hyp' not in files:
      raise ValueError(f'{path}: holds no {lang}.hyp (choose the languages it holds with --languages)')
    hyps[lang] = _SplitLines(files[f'{lang}.hyp'])
    sentences = results['languages'][lang].get('sentences', len(hyps[lang]))
    if len(hyps[lang]) != sentences:
      raise ValueError(f'{path}: {lang}.hyp has {len(hyps[lang])} lines, but results.json says {sentences} '
                       'sentences')
    if f'{lang}.ref' in files:
      refs[lang] = _SplitLines(files[f'{lang}.ref'])
      if len(refs[lang]) != sentences:
        raise ValueError(f'{path}: {lang}.ref has {len(refs[lang])} lines, but {lang}.hyp has {sentences}')
  rebuild = [lang for lang in buckets if lang not in refs]
  if rebuild:
    _RebuildReferences(path, results, hyps, refs, rebuild, data_dir)
  return Decodes(path, hyps, refs, buckets, _Settings(results))


def _RebuildReferences(path: str, results: Dict, hyps: Dict[str, List[str]], refs: Dict[str, List[str]],
                       languages: Sequence[str], data_dir: str):
  """Fills refs[lang] of `languages` from the corpus split `results` was decoded on, checking that each
  language's rescored BLEU is the one recorded."""
  split = results.get('set')
  if not data_dir:
    raise ValueError(f'{path}: holds no {languages[0]}.ref; the references are rebuilt from the corpus the run '
                     'was decoded from (--data_dir)')
  if split not in ('test', 'dev'):
    raise ValueError(f'{path}: decoded on {split!r}, not a corpus split: its references cannot be rebuilt from '
                     'a corpus (pack the <lang>.ref files)')
  signature = evaluator.Bleu(['a'], ['a'])[1]
  if results.get('bleu_signature') != signature:
    raise ValueError(f'{path}: scored with BLEU {results.get("bleu_signature")!r}, this sacrebleu is '
                     f'{signature!r}: the rebuilt references cannot be checked against its scores (pack the '
                     '<lang>.ref files, or install the sacrebleu it names)')
  corpus = heldout.FromCorpus(data_dir, split, languages, log=lambda line: None)
  for lang in languages:
    pairs = corpus.pairs.get(lang, [])[:len(hyps[lang])]  # the evaluator decodes a split's first N sentences
    if len(pairs) < len(hyps[lang]):
      raise ValueError(f'{data_dir}: {len(pairs)} {split} sentences of {lang!r}, but {path} decoded '
                       f'{len(hyps[lang])}: not the corpus it was decoded from')
    recorded = results['languages'][lang].get('bleu')
    if not isinstance(recorded, (int, float)):
      raise ValueError(f'{path}: results.json records no BLEU for {lang!r} to check the rebuilt references by')
    rescored = evaluator.Bleu(hyps[lang], [t for _, t in pairs])[0]  # the text the evaluator scored
    if abs(rescored - recorded) > 1e-6:
      raise ValueError(f'{path}: {lang} scores BLEU {rescored:.2f} against the {split} references of {data_dir}, '
                       f'results.json recorded {recorded:.2f}: not the corpus it was decoded from')
    refs[lang] = [t.replace('\n', ' ') for _, t in pairs]  # the lines the evaluator writes to <lang>.ref


def Load(path: str, languages: Optional[Sequence[str]] = None, data_dir: str = '') -> Decodes:
  """A result directory (LoadDecodes) or a packed one (LoadArchive)."""
  if path.endswith(ARCHIVE_SUFFIXES):
    return LoadArchive(path, languages, data_dir)
  return LoadDecodes(path, languages)


def SentenceStats(metric, hypotheses: List[str], references: List[str]) -> np.ndarray:
  """[sentences, statistics]: sacrebleu's per-sentence sufficient statistics, whose column sums give the
  corpus score."""
  return np.asarray(metric._extract_corpus_statistics(hypotheses, [references]),  # pylint: disable=protected-access
                    dtype=np.int64)


def Score(metric, summed_stats: np.ndarray) -> float:
  return metric._compute_score_from_stats(summed_stats.tolist()).score  # pylint: disable=protected-access


def ResampledScores(metric, stats: np.ndarray, counts: np.ndarray) -> np.ndarray:
  """[resamples] corpus scores; counts[r, i]: how often resample r drew sentence i."""
  return np.array([Score(metric, summed) for summed in counts @ stats])


def ResampleCounts(lang: str, sentences: int, resamples: int, seed: int) -> np.ndarray:
  """[resamples, sentences] draw counts of `lang`'s sentences; seeded per language, so a language's draws do
  not depend on which other languages are compared."""
  rng = np.random.default_rng([seed, zlib.crc32(lang.encode('utf-8'))])
  return np.stack([np.bincount(rng.integers(0, sentences, sentences), minlength=sentences)
                   for _ in range(resamples)])


def _Interval(values: np.ndarray, point: float) -> Dict:
  low, high = np.percentile(values, [2.5, 97.5])
  return {'delta': point, 'ci95': [float(low), float(high)], 'b_better': float(np.mean(values > 0))}


def _CheckComparable(a: Decodes, b: Decodes):
  if sorted(a.hypotheses) != sorted(b.hypotheses):
    only_a, only_b = sorted(set(a.hypotheses) - set(b.hypotheses)), sorted(set(b.hypotheses) - set(a.hypotheses))
    raise ValueError(f'{a.path} and {b.path} decoded different languages (only in the first: {only_a}, only in '
                     f'the second: {only_b}); choose common ones with --languages')
  for key in DECODE_SETTINGS:
    if a.settings.get(key) != b.settings.get(key):
      raise ValueError(f'{a.path} and {b.path} were decoded with different {key}: {a.settings.get(key)!r} vs '
                       f'{b.settings.get(key)!r}')
  for lang in a.hypotheses:
    if a.references[lang] != b.references[lang]:
      raise ValueError(f'{a.path} and {b.path}: the references of {lang!r} differ (different test sets)')
  if not any(a.references.values()):
    raise ValueError(f'{a.path}: no sentences in the languages compared')


def PairedBootstrap(a: Decodes, b: Decodes, metric_name: str = 'bleu', resamples: int = 1000,
                    seed: int = 0) -> Dict:
  """Scores of b minus a with 95% intervals, per language and per bucket mean (plus 'all').

  Returns {'languages': {lang: {sentences, a, b, delta, ci95, b_better}}, 'buckets': {bucket: {languages, a,
  b, delta, ci95, b_better}}}; b_better is the fraction of resamples in which b scored higher (Koehn's p-value
  for "b is better" is 1 minus it). Languages with no sentences are left out."""
  _CheckComparable(a, b)
  metric = evaluator.Metric(metric_name)
  languages, resampled = {}, {}
  for lang in sorted(a.hypotheses):
    if not a.references[lang]:
      continue
    stats_a, stats_b = (SentenceStats(metric, d.hypotheses[lang], d.references[lang]) for d in (a, b))
    counts = ResampleCounts(lang, len(stats_a), resamples, seed)  # one draw for both systems: the pairing
    resampled[lang] = ResampledScores(metric, stats_a, counts), ResampledScores(metric, stats_b, counts)
    point_a, point_b = Score(metric, stats_a.sum(0)), Score(metric, stats_b.sum(0))
    languages[lang] = dict(sentences=len(stats_a), a=point_a, b=point_b,
                           **_Interval(resampled[lang][1] - resampled[lang][0], point_b - point_a))
  groups = {}
  for lang in languages:
    groups.setdefault(a.buckets[lang], []).append(lang)
  groups['all'] = list(languages)
  buckets = {}
  for name, langs in groups.items():
    mean_a = np.mean([resampled[lang][0] for lang in langs], axis=0)
    mean_b = np.mean([resampled[lang][1] for lang in langs], axis=0)
    point_a = float(np.mean([languages[lang]['a'] for lang in langs]))
    point_b = float(np.mean([languages[lang]['b'] for lang in langs]))
    buckets[name] = dict(languages=len(langs), a=point_a, b=point_b,
                         **_Interval(mean_b - mean_a, point_b - point_a))
  return {'metric': metric_name, 'signature': str(metric.get_signature()), 'resamples': resamples, 'seed': seed,
          'languages': languages, 'buckets': buckets}


def Table(result: Dict, name_a: str, name_b: str, order: Sequence[str] = ('high', 'medium', 'low', 'all')) -> str:
  """A markdown table of the bucket rows."""
  metric = result['metric'].replace('bleu', 'BLEU').replace('chrf', 'chrF')
  rows = [f'| bucket | languages | {name_a} | {name_b} | {name_b} − {name_a} ({metric}) | 95% interval '
          f'| {name_b} ahead in (resamples) |', '|---|---|---|---|---|---|---|']
  for bucket in [k for k in order if k in result['buckets']] + sorted(set(result['buckets']) - set(order)):
    r = result['buckets'][bucket]
    rows.append(f'| {bucket} | {r["languages"]} | {r["a"]:.2f} | {r["b"]:.2f} | {r["delta"]:+.2f} '
                f'| [{r["ci95"][0]:+.2f}, {r["ci95"][1]:+.2f}] | {100 * r["b_better"]:.1f}% |')
  return '\n'.join(rows)
