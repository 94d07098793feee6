"""Smoke test on this machine's real gettext catalogs (/usr/share/locale): parse, clean and split only (no
TFDS write), to check that the default corpus has the shape the paper's setup needs."""
import pytest

from lingvo_gshard.data import corpus
from lingvo_gshard.data import languages
from lingvo_gshard.data import report
from lingvo_gshard.data import sources


@pytest.fixture(scope='module', name='system')
def _System():
  rep = report.BuildReport()
  c = corpus.Assemble(sources.GettextSource().Units(rep), corpus.CorpusConfig(), rep)
  return c, rep


def test_at_least_100_languages_with_500_training_pairs_each(system):
  c, _ = system
  assert len(c.languages) + len(c.left_out) >= 100
  assert len(c.languages) == 100
  sizes = [len(lang.splits['train']) for lang in c.languages.values()]
  assert sizes == sorted(sizes, reverse=True)
  assert sizes[-1] >= 500
  assert sizes[0] >= 20 * sizes[-1]  # A power-law-ish spread from high to low resource.
  assert not any(languages.IsEnglish(tag) for tag in list(c.languages) + list(c.left_out))
  assert {'pt-BR', 'pt', 'zh-CN', 'zh-TW', 'sr-Latn', 'sr', 'de', 'ja'} <= set(c.languages)
  buckets = [lang.bucket for lang in c.languages.values()]
  assert buckets == ['high'] * 34 + ['medium'] * 33 + ['low'] * 33


def test_real_splits_do_not_leak_and_are_capped(system):
  c, _ = system
  train, heldout = set(), set()
  for lang in c.languages.values():
    counts = lang.Counts()
    assert counts['dev'] <= 1000 and counts['test'] <= 1000 and counts['dev'] > 0 and counts['test'] > 0
    train.update(corpus.EnglishKey(t) for _, t in lang.splits['train'])
    heldout.update(corpus.EnglishKey(t) for name in ('dev', 'test') for _, t in lang.splits[name])
  assert not train & heldout


def test_real_pairs_are_clean(system):
  c, rep = system
  for tag in ('de', 'ja', 'ru'):
    for source, target in c.languages[tag].splits['train']:
      assert source != target and source.strip() == source and '\n' not in source + target
      assert '  ' not in source and '  ' not in target
  assert rep.skips['identical'] > 0 and rep.skips['duplicate'] > 0 and rep.skips['bad_catalog'] == 0
