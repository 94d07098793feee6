"""Paired bootstrap of two runs' decodes (train/significance.py, tools/compare_runs.py): point scores equal
sacrebleu's corpus scores, resampled scores from summed sentence statistics equal sacrebleu on the resampled
sentence lists, and the intervals behave (zero for one run against itself, excluding zero for a clearly
better run)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from lingvo_gshard.train import evaluator
from lingvo_gshard.train import significance

_WORDS = ('the file could not be opened because it is missing a folder name on this disk for now '
          'please try again later with another account or save changes before you quit the program').split()


def _Corpus(rng, n, error_rate, refs=None):
  """n English-like references (or the given ones) and hypotheses with a share of words replaced."""
  if refs is None:
    refs = [' '.join(rng.choice(_WORDS, rng.integers(3, 15))) for _ in range(n)]
  hyps = [' '.join(w if rng.random() > error_rate else str(rng.choice(_WORDS)) + 's' for w in r.split())
          for r in refs]
  return refs, hyps


def _WriteRun(result_dir, corpora, buckets):
  os.makedirs(result_dir)
  for lang, (refs, hyps) in corpora.items():
    for ext, lines in (('ref', refs), ('hyp', hyps)):
      with open(os.path.join(result_dir, f'{lang}.{ext}'), 'w', encoding='utf-8') as f:
        f.write(''.join(line + '\n' for line in lines))
  with open(os.path.join(result_dir, 'results.json'), 'w') as f:
    json.dump({'languages': {lang: {'bucket': buckets[lang]} for lang in corpora}}, f)


@pytest.fixture(name='runs')
def _Runs(tmp_path):
  """Run a (30% of words wrong) and run b (10% wrong) on three languages of 300, 200 and 40 sentences."""
  rng = np.random.default_rng(3)
  sizes, buckets = {'fr': 300, 'de': 200, 'lg': 40}, {'fr': 'high', 'de': 'high', 'lg': 'low'}
  a, b = {}, {}
  for lang, n in sizes.items():
    refs, hyps_a = _Corpus(rng, n, 0.3)
    a[lang] = (refs, hyps_a)
    b[lang] = (refs, _Corpus(rng, n, 0.1, refs)[1])
  for name, corpora in (('a', a), ('b', b)):
    _WriteRun(str(tmp_path / name / 'decode_test' / 'ckpt-100'), corpora, buckets)
  return tmp_path, a, b


def test_point_scores_are_sacrebleus_and_resampled_scores_equal_sacrebleu_on_the_resampled_lists(runs):
  tmp_path, a, b = runs
  da = significance.LoadDecodes(str(tmp_path / 'a' / 'decode_test' / 'ckpt-100'))
  db = significance.LoadDecodes(str(tmp_path / 'b' / 'decode_test' / 'ckpt-100'))
  assert da.buckets == {'de': 'high', 'fr': 'high', 'lg': 'low'} and da.references['lg'] == a['lg'][0]
  for metric_name in significance.METRICS:
    result = significance.PairedBootstrap(da, db, metric_name, resamples=200, seed=1)
    metric = significance.Metric(metric_name)
    for lang, (refs, hyps) in a.items():
      assert result['languages'][lang]['a'] == pytest.approx(metric.corpus_score(hyps, [refs]).score, abs=1e-9)
      assert result['languages'][lang]['b'] == pytest.approx(
          metric.corpus_score(b[lang][1], [refs]).score, abs=1e-9)
    high = result['buckets']['high']
    assert high['languages'] == 2
    assert high['delta'] == pytest.approx(np.mean([result['languages'][l]['delta'] for l in ('fr', 'de')]))
    # b is 20 points of word errors better: every resample agrees, the interval is well above zero.
    assert high['b_better'] == 1.0 and high['ci95'][0] > 5, high
    assert result['buckets']['all']['languages'] == 3
    assert result == significance.PairedBootstrap(da, db, metric_name, resamples=200, seed=1)  # seeded

    # The fast path (sum the sentence statistics, score once) against sacrebleu on the resampled sentences.
    refs, hyps = a['lg']
    counts = np.stack([np.bincount(np.random.default_rng(r).integers(0, len(refs), len(refs)),
                                   minlength=len(refs)) for r in range(5)])
    fast = significance.ResampledScores(metric, significance.SentenceStats(metric, hyps, refs), counts)
    for row, score in zip(counts, fast):
      picked = np.repeat(np.arange(len(refs)), row)
      slow = metric.corpus_score([hyps[i] for i in picked], [[refs[i] for i in picked]]).score
      assert score == pytest.approx(slow, abs=1e-9)


def test_a_run_against_itself_has_a_zero_interval(runs):
  tmp_path, _, _ = runs
  da = significance.LoadDecodes(str(tmp_path / 'a' / 'decode_test' / 'ckpt-100'), ['fr', 'lg'])
  result = significance.PairedBootstrap(da, da, 'bleu', resamples=50)
  assert set(result['languages']) == {'fr', 'lg'}
  for row in list(result['languages'].values()) + list(result['buckets'].values()):
    assert (row['delta'], row['ci95'], row['b_better']) == (0.0, [0.0, 0.0], 0.0)


def test_bad_decodes_are_refused_naming_the_file(runs):
  tmp_path, _, _ = runs
  run_a = tmp_path / 'a' / 'decode_test' / 'ckpt-100'
  with pytest.raises(ValueError, match=r"language 'xx' was not evaluated"):
    significance.LoadDecodes(str(run_a), ['xx'])
  with open(run_a / 'fr.hyp', 'a', encoding='utf-8') as f:
    f.write('one line too many\n')
  with pytest.raises(ValueError, match=r'fr\.hyp: 301 lines, but .*fr\.ref has 300'):
    significance.LoadDecodes(str(run_a))
  da = significance.LoadDecodes(str(run_a), ['de'])
  other = significance.LoadDecodes(str(tmp_path / 'b' / 'decode_test' / 'ckpt-100'), ['de'])
  other.references['de'] = other.references['de'][::-1]
  with pytest.raises(ValueError, match=r"the references of 'de' differ"):
    significance.PairedBootstrap(da, other)
  with pytest.raises(ValueError, match=r"decoded different languages: \['lg'\]"):
    significance.PairedBootstrap(da, significance.LoadDecodes(str(tmp_path / 'b' / 'decode_test' / 'ckpt-100'),
                                                              ['de', 'lg']))


def test_compare_runs_tool(runs):
  tmp_path, _, _ = runs
  out_json = tmp_path / 'cmp.json'
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.compare_runs', f'--a=A={tmp_path / "a"}',
                        f'--b=B={tmp_path / "b"}@ckpt-100', '--resamples=100', f'--json={out_json}'],
                       capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  data = json.load(open(out_json))
  assert data['a']['result_dir'].endswith(os.path.join('a', 'decode_test', 'ckpt-100'))
  for metric in ('bleu', 'chrf'):
    high = data[metric]['buckets']['high']
    assert (f'| high | 2 | {high["a"]:.2f} | {high["b"]:.2f} | {high["delta"]:+.2f} '
            f'| [{high["ci95"][0]:+.2f}, {high["ci95"][1]:+.2f}] | 100.0% |') in out.stdout
  # The signatures the evaluator prints with its scores: the same metrics, settings and version.
  assert data['bleu']['signature'] == evaluator.Bleu(['a b c d'], ['a b c d'])[1]
  assert data['chrf']['signature'] == evaluator.Chrf(['a b c d'], ['a b c d'])[1]
  bad = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.compare_runs', f'--a=A={tmp_path / "a"}',
                        f'--b=B={tmp_path / "b"}@ckpt-7'], capture_output=True, text=True, timeout=300)
  assert bad.returncode == 1
  assert bad.stderr.strip().splitlines()[-1] == (
      f'compare_runs: --b: {tmp_path / "b"}/decode_test/ckpt-7/results.json does not exist (evaluate ckpt-7 '
      'first)')
