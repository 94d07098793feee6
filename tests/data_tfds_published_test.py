"""A TFDS dataset kept as published (prepare_data --tfds_train_split ...): its own train/dev/test splits, in
its order, streamed (its pairs are never held in memory together), recorded in the manifest; bad splits
refused in one line. A locally built TFDS dataset of the WMT feature spec goes through the real tfds path."""
import os
import subprocess
import sys
import tracemalloc

import pytest
import tensorflow_datasets as tfds

from lingvo_gshard.data import build
from lingvo_gshard.data import corpus
from lingvo_gshard.data import reader
from lingvo_gshard.data import report
from lingvo_gshard.data import tfds_published
from lingvo_gshard.data import tfds_scratch

_SIZES = {'train': 3000, 'validation': 40, 'test': 60}


def _Pair(split, i):
  # The same English sentence in train and test on purpose: published splits are kept, not re-split.
  english = f'sentence number {i % 500}' if split != 'test' else f'sentence number {i}'
  return {'de': f'Satz {split} {i}', 'fr': f'phrase {split} {i}' if i % 3 else '', 'en': english}


class PublishedTestTranslation(tfds.core.GeneratorBasedBuilder):
  """A local stand-in for wmt19_translate with three splits (German and French to English)."""

  VERSION = tfds.core.Version('2.0.0')

  def _info(self):
    return tfds.core.DatasetInfo(builder=self,
                                 features=tfds.features.Translation(languages=['de', 'en', 'fr']))

  def _split_generators(self, dl_manager):
    return {split: self._generate_examples(split) for split in _SIZES}

  def _generate_examples(self, split):
    for i in range(_SIZES[split]):
      yield i, _Pair(split, i)


@pytest.fixture(scope='module')
def tfds_dir(tmp_path_factory):
  root = str(tmp_path_factory.mktemp('tfds'))
  with tfds_scratch.Scratch():  # TFDS leaves a temp dir when making a builder of an unprepared dataset
    PublishedTestTranslation(data_dir=root).download_and_prepare()
  return root


_SPLITS = {'train': 'train', 'dev': 'validation', 'test': 'test'}


def _Published(tfds_dir, split, tag):
  """The (tag, English) pairs of a split in the order TFDS stores them (it shuffles at writing)."""
  ds = tfds.load('published_test_translation', split=split, data_dir=tfds_dir, download=False,
                 read_config=tfds.ReadConfig(interleave_cycle_length=1))
  return [(ex[tag].decode(), ex['en'].decode()) for ex in tfds.as_numpy(ds) if ex[tag]]


def test_the_datasets_own_splits_are_kept_in_its_order(tfds_dir, tmp_path):
  source = tfds_published.PublishedTfds('published_test_translation', _SPLITS, tfds_dir, download=False)
  manifest, built = build.Build(str(tmp_path / 'data'), [source], corpus.CorpusConfig(), log=lambda line: None)
  assert built and list(manifest['languages']) == ['de', 'fr']  # largest first
  assert manifest['tfds'] == {'name': 'published_test_translation', 'version': '2.0.0', 'splits': _SPLITS,
                              'max_pairs': 0}
  for tag in ('de', 'fr'):
    for split, published in _SPLITS.items():
      want = _Published(tfds_dir, published, tag)
      assert len(want) == sum(1 for i in range(_SIZES[published]) if _Pair(published, i)[tag])
      assert reader.Pairs(str(tmp_path / 'data'), tag, split) == want, (tag, split)  # every pair, in order
  assert manifest['languages']['de']['train'] == 3000 and manifest['languages']['fr']['test'] == 40
  assert manifest['skips'] == {'untranslated': (3000 + 40 + 60) - (2000 + 26 + 40)}  # French left empty, counted once
  again, rebuilt = build.Build(str(tmp_path / 'data'), [source], corpus.CorpusConfig(), log=lambda line: None)
  assert not rebuilt and again['fingerprint'] == manifest['fingerprint']


def test_a_cap_applies_per_language_and_split_only_when_asked(tfds_dir, tmp_path):
  source = tfds_published.PublishedTfds('published_test_translation', _SPLITS, tfds_dir, download=False,
                                        max_pairs=25)
  manifest, _ = build.Build(str(tmp_path / 'data'), [source], corpus.CorpusConfig(), log=lambda line: None)
  assert {t: (l['train'], l['dev'], l['test']) for t, l in manifest['languages'].items()} == {
      'de': (25, 25, 25), 'fr': (25, 25, 25)}
  assert reader.Pairs(str(tmp_path / 'data'), 'de', 'dev') == _Published(tfds_dir, 'validation', 'de')[:25]


def _ReadPeak(stream):
  """Reads a stream to its end under tracemalloc: (characters read, peak bytes allocated meanwhile)."""
  tracemalloc.reset_peak()
  base = tracemalloc.get_traced_memory()[0]
  total = sum(len(s) + len(t) for s, t in stream)
  return total, tracemalloc.get_traced_memory()[1] - base


def test_the_pairs_stream_and_are_never_held_together(tfds_dir, monkeypatch):
  """Counting keeps counters, and a language's split is read lazily: the stream has pulled one example from
  TFDS when it gives its first pair, and reading 3,000 train pairs allocates at its peak no more than reading
  60 test pairs does, give or take a quarter of what the 3,000 pairs would take as a list (tf.data's own
  buffers, a constant, cancel out)."""
  source = tfds_published.PublishedTfds('published_test_translation', _SPLITS, tfds_dir, download=False)
  pulled = []
  load = source._Load

  def Counted(split):
    for example in load(split):
      pulled.append(split)
      yield example

  monkeypatch.setattr(source, '_Load', Counted)
  rep = report.BuildReport()
  tracemalloc.start()
  try:
    built = source.StreamedCorpus(corpus.CorpusConfig(), rep, lambda line: None)
    splits = built.languages['de'].splits
    pulled.clear()
    first = next(iter(splits['train']))
    assert first == _Published(tfds_dir, 'train', 'de')[0] and len(pulled) == 1
    _ReadPeak(splits['test'])  # the first read of a split builds tf.data's functions once
    small_total, small_peak = _ReadPeak(splits['test'])
    total, peak = _ReadPeak(splits['train'])
  finally:
    tracemalloc.stop()
  held = sum(len(p['de']) + len(p['en']) + 2 * 49 + 56 for p in (_Pair('train', i) for i in range(3000)))
  assert total > 40 * small_total > 0  # the train read really is the larger one
  assert peak < small_peak + held / 4, (peak, small_peak, held)  # a list of the pairs would take at least `held`


def _Stages(dataset):
  """The class names of every stage of a tf.data pipeline, walking its inputs."""
  names, todo = [], [dataset]
  while todo:
    ds = todo.pop()
    names.append(type(ds).__name__)
    todo.extend(ds._inputs())  # pylint: disable=protected-access
  return names


def test_no_stage_holds_a_split_in_memory(tfds_dir):
  """TFDS caches a split it finds small in memory on its first read (`try_autocache`): native memory that
  grows with the split while every pass streams it (tracemalloc does not see it). The source turns it off;
  TFDS's default read of the same split does cache, so the check can tell."""
  source = tfds_published.PublishedTfds('published_test_translation', _SPLITS, tfds_dir, download=False)
  default = tfds.builder('published_test_translation', data_dir=tfds_dir).as_dataset(split='train',
                                                                                      shuffle_files=False)
  assert any('Cache' in name for name in _Stages(default))
  for split in _SPLITS:
    assert not any('Cache' in name for name in _Stages(source.Dataset(split))), split


@pytest.mark.parametrize('args,message', [
    (['--tfds_dev_split=validation'], "--tfds_dev_split/--tfds_test_split name the dataset's own splits: give "
                                      '--tfds_train_split too'),
    (['--tfds_train_split=train', '--gettext'], '--tfds_train_split reads one --tfds dataset with its own '
                                                'splits, as the only input'),
    (['--tfds_train_split=train', '--tfds_test_split=newstest2030'], "TFDS dataset published_test_translation: "
                                                                      "no split 'newstest2030' "
                                                                      '(--tfds_test_split); it has test, '
                                                                      'train, validation'),
    (['--tfds_max_pairs=5'], '--tfds_max_pairs caps a dataset read with its own splits'),
])
def test_bad_splits_are_one_line_and_write_nothing(tfds_dir, tmp_path, args, message):
  data_dir = tmp_path / 'data'
  # The test dataset's builder is found by name in a fresh process through TFDS's files (no class import).
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.prepare_data', f'--data_dir={data_dir}',
                        '--nogettext', '--tfds=published_test_translation', f'--tfds_data_dir={tfds_dir}'] + args,
                       capture_output=True, text=True, timeout=300)
  lines = [l for l in out.stderr.splitlines() if l.startswith('prepare_data: ')]
  assert out.returncode == 1 and len(lines) == 1 and lines[0].startswith(f'prepare_data: error: {message}'), \
      out.stderr[-2000:]
  assert not os.path.exists(data_dir)


def test_memory_benchmark_builds_each_size_in_a_fresh_process(tmp_path):
  """tools/tfds_memory_benchmark on two small sizes: datasets written, corpora built with every pair, the
  peak RSS of each build measured (that of a TensorFlow process: more than 100 MB) and their ratio."""
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.tfds_memory_benchmark',
                        f'--work_dir={tmp_path}', '--pairs=300,600', '--json=-'],
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-2000:]
  import json  # pylint: disable=g-import-not-at-top
  result = json.loads(out.stdout[out.stdout.index('{'):])
  assert [r['train_pairs'] for r in result['rows']] == [300, 600]
  assert all(r['build_peak_rss_gib'] > 0.1 for r in result['rows'])
  assert result['largest_over_smallest'] == pytest.approx(
      result['rows'][1]['build_peak_rss_gib'] / result['rows'][0]['build_peak_rss_gib'], abs=2e-3)
  assert reader.LoadManifest(str(tmp_path / 'pairs_600' / 'data'))['totals'] == {
      'train': 600, 'dev': 3000, 'test': 3000}
