"""Paired bootstrap of two runs' decodes (report/significance.py, tools/compare_runs.py): point scores equal
sacrebleu's corpus scores, resampled scores from summed sentence statistics equal sacrebleu on the resampled
sentence lists, and the intervals behave (zero for one run against itself, excluding zero for a clearly
better run)."""
import json
import os
import shutil
import subprocess
import sys
import tarfile

import numpy as np
import pytest

from lingvo_gshard.eval import evaluator
from lingvo_gshard.eval import heldout
from lingvo_gshard.report import significance
import input_helpers

_WORDS = ('the file could not be opened because it is missing a folder name on this disk for now '
          'please try again later with another account or save changes before you quit the program').split()


def _Corpus(rng, n, error_rate, refs=None):
  """n English-like references (or the given ones) and hypotheses with a share of words replaced."""
  if refs is None:
    refs = [' '.join(rng.choice(_WORDS, rng.integers(3, 15))) for _ in range(n)]
  hyps = [' '.join(w if rng.random() > error_rate else str(rng.choice(_WORDS)) + 's' for w in r.split())
          for r in refs]
  return refs, hyps


def _WriteRun(result_dir, corpora, buckets, beam_size=4):
  os.makedirs(result_dir)
  for lang, (refs, hyps) in corpora.items():
    for ext, lines in (('ref', refs), ('hyp', hyps)):
      with open(os.path.join(result_dir, f'{lang}.{ext}'), 'w', encoding='utf-8') as f:
        f.write(''.join(line + '\n' for line in lines))
  with open(os.path.join(result_dir, 'results.json'), 'w') as f:
    json.dump({'set': 'test', 'beam_size': beam_size, 'length_alpha': 0.6, 'no_repeat_ngram': 0,
               'languages': {lang: {'bucket': buckets[lang]} for lang in corpora}}, f)


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
  for metric_name in evaluator.METRICS:
    result = significance.PairedBootstrap(da, db, metric_name, resamples=200, seed=1)
    metric = evaluator.Metric(metric_name)
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
    counts = significance.ResampleCounts('lg', len(refs), 5, seed=1)
    fast = significance.ResampledScores(metric, significance.SentenceStats(metric, hyps, refs), counts)
    for row, score in zip(counts, fast):
      picked = np.repeat(np.arange(len(refs)), row)
      slow = metric.corpus_score([hyps[i] for i in picked], [[refs[i] for i in picked]]).score
      assert score == pytest.approx(slow, abs=1e-9)


def test_bucket_interval_against_a_reference_on_the_resampled_sentence_lists(runs):
  """The high bucket's interval recomputed the slow way: per resample, each language's resampled sentence
  lists scored by sacrebleu, the bucket mean of b minus that of a, its percentiles and the share above 0."""
  tmp_path, a, b = runs
  da, db = (significance.LoadDecodes(str(tmp_path / r / 'decode_test' / 'ckpt-100')) for r in ('a', 'b'))
  result = significance.PairedBootstrap(da, db, 'bleu', resamples=40, seed=7)
  metric = evaluator.Metric('bleu')
  diffs = np.zeros(40)
  for lang in ('fr', 'de'):
    refs = a[lang][0]
    for r, row in enumerate(significance.ResampleCounts(lang, len(refs), 40, seed=7)):
      picked = np.repeat(np.arange(len(refs)), row)
      score = {name: metric.corpus_score([run[lang][1][i] for i in picked], [[refs[i] for i in picked]]).score
               for name, run in (('a', a), ('b', b))}
      diffs[r] += (score['b'] - score['a']) / 2
  high = result['buckets']['high']
  np.testing.assert_allclose(high['ci95'], np.percentile(diffs, [2.5, 97.5]), atol=1e-9)
  assert high['b_better'] == np.mean(diffs > 0)
  # A language's draws do not depend on the others compared with it.
  only = significance.PairedBootstrap(
      *(significance.LoadDecodes(str(tmp_path / r / 'decode_test' / 'ckpt-100'), ['fr']) for r in ('a', 'b')),
      'bleu', resamples=40, seed=7)
  assert only['languages']['fr'] == result['languages']['fr']


def test_a_near_tie_has_an_interval_around_zero(runs):
  """b is a with one 'fr' sentence made right and another made wrong: which of the two a resample draws
  decides its sign, so the interval spans 0 and b is ahead in some resamples only."""
  tmp_path, a, _ = runs
  refs, hyps = a['fr']
  better = list(hyps)
  better[3] = refs[3]
  better[8] = 'quit quit quit'
  _WriteRun(str(tmp_path / 'tie' / 'decode_test' / 'ckpt-100'), {'fr': (refs, better)}, {'fr': 'high'})
  da = significance.LoadDecodes(str(tmp_path / 'a' / 'decode_test' / 'ckpt-100'), ['fr'])
  result = significance.PairedBootstrap(da, significance.LoadDecodes(str(tmp_path / 'tie' / 'decode_test' /
                                                                          'ckpt-100')), 'bleu', resamples=300)
  high = result['buckets']['high']
  assert high['ci95'][0] < 0 < high['ci95'][1] and 0.1 < high['b_better'] < 0.9, high


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
  with pytest.raises(ValueError, match=r"decoded different languages \(only in the first: \[\], only in the "
                     r"second: \['lg'\]\); choose common ones with --languages"):
    significance.PairedBootstrap(da, significance.LoadDecodes(str(tmp_path / 'b' / 'decode_test' / 'ckpt-100'),
                                                              ['de', 'lg']))
  beam1 = tmp_path / 'beam1' / 'decode_test' / 'ckpt-100'
  _WriteRun(str(beam1), {'de': (da.references['de'], da.hypotheses['de'])}, {'de': 'high'}, beam_size=1)
  with pytest.raises(ValueError, match=r'decoded with different beam_size: 4 vs 1'):
    significance.PairedBootstrap(da, significance.LoadDecodes(str(beam1)))
  (tmp_path / 'empty').mkdir()
  (tmp_path / 'empty' / 'results.json').write_text('{"bleu": 1}')
  with pytest.raises(ValueError, match=r'empty/results.json: no "languages" object'):
    significance.LoadDecodes(str(tmp_path / 'empty'))


def test_sentences_are_split_on_newlines_only(tmp_path):
  """A '\\r', U+2028 or form feed inside a sentence stays in it; an empty hypothesis is a line."""
  (tmp_path / 'x.hyp').write_bytes('a\u2028b\nc\rd\n\ne\x0cf\n'.encode('utf-8'))
  assert significance._Lines(str(tmp_path / 'x.hyp')) == ['a\u2028b', 'c\rd', '', 'e\x0cf']
  (tmp_path / 'none.hyp').write_bytes(b'')
  assert significance._Lines(str(tmp_path / 'none.hyp')) == []


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


def _Pack(result_dir, archive, names, arcdir=''):
  with tarfile.open(archive, 'w:gz') as tar:
    for name in names:
      tar.add(os.path.join(result_dir, name), arcname=os.path.join(arcdir, name))


@pytest.fixture(name='packed', scope='module')
def _Packed(tmp_path_factory):
  """A decode of a built corpus's test split (each reference with a fifth of its words replaced; 'de' only its
  first 25 sentences, as --max_sentences decodes), as the evaluator leaves it, and packed the way
  docs/experiments/m4_tiny/runs/hypotheses/ keeps decodes: results.json and the hypotheses only."""
  root = tmp_path_factory.mktemp('packed')
  data_dir = input_helpers.BuildCorpus(str(root / 'corpus'))
  corpus = heldout.FromCorpus(data_dir, 'test', log=lambda line: None)
  assert len(corpus.pairs['de']) > 25
  rng = np.random.default_rng(5)
  result_dir = root / 'run' / 'decode_test' / 'ckpt-100'
  result_dir.mkdir(parents=True)
  languages = {}
  for lang, pairs in corpus.pairs.items():
    refs = [t for _, t in pairs[:25 if lang == 'de' else None]]
    hyps = _Corpus(rng, len(refs), 0.2, refs)[1]
    for ext, lines in (('ref', refs), ('hyp', hyps)):
      (result_dir / f'{lang}.{ext}').write_text(''.join(line + '\n' for line in lines), encoding='utf-8')
    languages[lang] = {'bleu': evaluator.Bleu(hyps, refs)[0], 'sentences': len(refs), 'bucket': 'high'}
  results = {'set': 'test', 'beam_size': 4, 'length_alpha': 0.6, 'no_repeat_ngram': 0,
             'bleu_signature': evaluator.Bleu(['a'], ['a'])[1], 'languages': languages}
  (result_dir / 'results.json').write_text(json.dumps(results))
  archive = str(root / 'run.tar.gz')
  _Pack(result_dir, archive, ['results.json'] + [f'{lang}.hyp' for lang in languages])
  return data_dir, str(result_dir), archive


def test_an_archive_with_references_rebuilt_from_the_corpus_equals_its_directory(packed, tmp_path):
  data_dir, result_dir, archive = packed
  unpacked = significance.LoadDecodes(result_dir)
  rebuilt = significance.Load(archive, data_dir=data_dir)
  assert sorted(rebuilt.hypotheses) == ['de', 'el', 'ja', 'ru'] and rebuilt.path == archive
  assert len(rebuilt.references['de']) == 25
  for field in ('hypotheses', 'references', 'buckets', 'settings'):
    assert getattr(rebuilt, field) == getattr(unpacked, field), field
  assert significance.PairedBootstrap(rebuilt, unpacked, 'chrf', resamples=20)['buckets']['all']['ci95'] == [0, 0]
  only = significance.Load(archive, ['ru'], data_dir)
  assert list(only.references) == ['ru'] and only.references['ru'] == unpacked.references['ru']
  # References packed in the archive are read from it: no corpus needed.
  with_refs = str(tmp_path / 'with_refs.tar.gz')
  _Pack(result_dir, with_refs, sorted(os.listdir(result_dir)))
  assert significance.Load(with_refs).references == unpacked.references


def _Variant(tmp_path, name, result_dir, edit=None, hyps=None, arcdir=''):
  """The packed decode with its results.json edited (`edit(results)`) and/or hypotheses replaced."""
  variant = tmp_path / name
  shutil.copytree(result_dir, variant)
  results = json.loads((variant / 'results.json').read_text())
  if edit:
    edit(results)
  (variant / 'results.json').write_text(json.dumps(results))
  for lang, lines in (hyps or {}).items():
    (variant / f'{lang}.hyp').write_text(''.join(line + '\n' for line in lines), encoding='utf-8')
  archive = str(tmp_path / f'{name}.tar.gz')
  _Pack(str(variant), archive, ['results.json'] + [f'{lang}.hyp' for lang in results['languages']], arcdir)
  return archive


def test_an_archive_is_refused_without_its_corpus_or_against_another(packed, tmp_path):
  data_dir, result_dir, archive = packed
  with pytest.raises(ValueError, match=r'run\.tar\.gz: holds no de\.ref; the references are rebuilt from the '
                     r'corpus the run was decoded from \(--data_dir\)'):
    significance.Load(archive)

  def Bump(results):  # a score the corpus's references do not give: decoded from another corpus
    results['languages']['el']['bleu'] += 0.5
  with pytest.raises(ValueError, match=r'bump\.tar\.gz: el scores BLEU [0-9.]+ against the test references of '
                     r'.*, results\.json recorded [0-9.]+: not the corpus it was decoded from'):
    significance.Load(_Variant(tmp_path, 'bump', result_dir, Bump), data_dir=data_dir)
  ja = significance.LoadDecodes(result_dir).hypotheses['ja']

  def MoreJa(results):
    results['languages']['ja']['sentences'] = len(ja) + 1
  with pytest.raises(ValueError, match=rf"{len(ja)} test sentences of 'ja', but .*long\.tar\.gz decoded "
                     rf"{len(ja) + 1}: not the corpus it was decoded from"):
    significance.Load(_Variant(tmp_path, 'long', result_dir, MoreJa, {'ja': ja + ['one more']}), data_dir=data_dir)
  with pytest.raises(ValueError, match=rf'count\.tar\.gz: ja\.hyp has {len(ja) + 1} lines, but results\.json '
                     rf'says {len(ja)} sentences'):
    significance.Load(_Variant(tmp_path, 'count', result_dir, hyps={'ja': ja + ['one more']}), data_dir=data_dir)
  with pytest.raises(ValueError, match=r"tsv\.tar\.gz: decoded on 'tsv-ui', not a corpus split"):
    significance.Load(_Variant(tmp_path, 'tsv', result_dir, lambda r: r.update(set='tsv-ui')), data_dir=data_dir)
  with pytest.raises(ValueError, match=r"old\.tar\.gz: scored with BLEU 'nrefs:1\|version:1\.0', this sacrebleu "
                     r"is 'nrefs:1\|case:mixed"):
    significance.Load(_Variant(tmp_path, 'old', result_dir, lambda r: r.update(bleu_signature='nrefs:1|version:1.0')),
                      data_dir=data_dir)
  with pytest.raises(ValueError, match=r'nested\.tar\.gz: holds no results\.json at its top level .*members: '
                     r'ckpt-100/de\.hyp, ckpt-100/el\.hyp, ckpt-100/ja\.hyp, \.\.\.\)'):
    significance.Load(_Variant(tmp_path, 'nested', result_dir, arcdir='ckpt-100'), data_dir=data_dir)
  with pytest.raises(ValueError, match=r"short\.tar\.gz: holds no el\.hyp \(choose the languages it holds with "
                     r"--languages\)"):
    _Pack(result_dir, str(tmp_path / 'short.tar.gz'), ['results.json', 'de.hyp'])
    significance.Load(str(tmp_path / 'short.tar.gz'), data_dir=data_dir)
  (tmp_path / 'broken.tar.gz').write_bytes(b'\x1f\x8b not really gzip')
  with pytest.raises(ValueError, match=r'broken\.tar\.gz: not a readable tar of decodes'):
    significance.Load(str(tmp_path / 'broken.tar.gz'), data_dir=data_dir)


def test_compare_runs_reads_an_archive(packed):
  data_dir, result_dir, archive = packed
  logdir = os.path.dirname(os.path.dirname(result_dir))
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.compare_runs', f'--a=packed={archive}',
                        f'--b=dir={logdir}', f'--data_dir={data_dir}', '--metrics=bleu', '--resamples=10'],
                       capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  assert '| all | 4 |' in out.stdout and '| +0.00 | [+0.00, +0.00] | 0.0% |' in out.stdout, out.stdout
  bad = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.compare_runs', f'--a=packed={archive}@ckpt-100',
                        f'--b=dir={logdir}'], capture_output=True, text=True, timeout=300)
  assert bad.returncode == 1 and bad.stderr.strip().splitlines()[-1] == (
      f"compare_runs: --a=packed={archive}@ckpt-100: an archive holds one checkpoint's decode; drop @ckpt-100")
  bad = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.compare_runs', f'--a={archive}',
                        f'--b=dir={logdir}'], capture_output=True, text=True, timeout=300)
  assert bad.returncode == 1 and bad.stderr.strip().splitlines()[-1] == (
      f'compare_runs: --a={archive}: expected NAME=LOGDIR[@CHECKPOINT] or NAME=ARCHIVE.tar.gz')
