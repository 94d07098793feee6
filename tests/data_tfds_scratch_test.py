"""Building a corpus, reading a TFDS dataset to download and reading an unbuilt data directory leave nothing
in the system's temp dir (TFDS alone leaves an empty `tmp*tfds` directory each time: data/tfds_scratch.py)."""
import os
import tempfile

import pytest
import tensorflow_datasets as tfds

from lingvo_gshard.data import build
from lingvo_gshard.data import corpus
from lingvo_gshard.data import gettext_m4
from lingvo_gshard.data import reader
from lingvo_gshard.data import report
from lingvo_gshard.data import sources
from lingvo_gshard.data import tfds_published
from lingvo_gshard.data import tfds_scratch
import data_helpers


class TfdsScratchTestTranslation(tfds.core.GeneratorBasedBuilder):
  """A local dataset TFDS prepares itself when asked to download it (no network: nothing to fetch)."""

  VERSION = tfds.core.Version('1.0.0')

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.Translation(languages=['de', 'en']))

  def _split_generators(self, dl_manager):
    return {split: self._generate_examples(split) for split in ('train', 'validation', 'test')}

  def _generate_examples(self, split):
    for i in range(30):
      yield i, {'de': f'Satz {split} {i}', 'en': f'sentence {split} {i}'}


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
  """Python's temp dir, empty at the start, where TFDS would leave its directories."""
  path = tmp_path / 'system_tmp'
  path.mkdir()
  monkeypatch.setattr(tempfile, 'tempdir', str(path))
  return path


def test_scratch_is_the_temp_dir_inside_and_is_removed_with_its_content_even_on_error(temp_dir):
  with pytest.raises(RuntimeError):
    with tfds_scratch.Scratch() as scratch:
      assert tempfile.gettempdir() == scratch and os.path.dirname(scratch) == str(temp_dir)
      tempfile.mkdtemp('tfds')
      raise RuntimeError('a failed build')
  assert tempfile.gettempdir() == str(temp_dir) and os.listdir(temp_dir) == []


def test_a_corpus_build_and_its_reads_leave_nothing_in_the_temp_dir(temp_dir, tmp_path):
  english = data_helpers.Sentences(40)
  root = data_helpers.WriteLocaleTree(str(tmp_path / 'locale'), {
      ('de', 'app'): [(e, f'de {e.lower()}') for e in english], ('fr', 'app'): [(e, f'fr {e}') for e in english]})
  config = corpus.CorpusConfig(dev_fraction=0.15, test_fraction=0.15, max_dev=5, max_test=5)
  manifest, built = build.Build(str(tmp_path / 'data'), [sources.GettextSource([root])], config,
                                log=lambda line: None)
  assert built and len(reader.Pairs(str(tmp_path / 'data'), 'de', 'train')) == manifest['languages']['de']['train']
  with pytest.raises(report.DataError):
    reader.Pairs(str(tmp_path / 'unbuilt'), 'de', 'train')
  assert os.listdir(temp_dir) == []


def test_tfds_datasets_prepared_on_read_leave_nothing_in_the_temp_dir(temp_dir, tmp_path):
  loaded = sources.TfdsSource('tfds_scratch_test_translation', data_dir=str(tmp_path / 'a'), download=True)
  assert sum(len(unit.pairs) for unit in loaded.Units(report.BuildReport())) == 30  # its train split
  splits = {'train': 'train', 'dev': 'validation', 'test': 'test'}
  published = tfds_published.PublishedTfds('tfds_scratch_test_translation', splits, str(tmp_path / 'b'),
                                           download=True)
  assert len(list(published.Pairs('test', report.BuildReport().skips))) == 30
  assert os.listdir(temp_dir) == []


def test_tfds_load_of_an_unbuilt_gettext_m4_dir_fails_and_leaves_nothing_in_the_temp_dir(temp_dir, tmp_path):
  gettext_m4.Register()
  with pytest.raises(report.DataError, match='gettext_m4: no prepared data'):
    tfds.load(gettext_m4.NAME, split='train', data_dir=str(tmp_path / 'unbuilt'))
  assert os.listdir(temp_dir) == []
