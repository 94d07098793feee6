"""Tests of data/corpus.py: no English dev/test sentence leaks into any language's training data, caps,
deduplication, language selection, and independence from input order."""
import hashlib
import random

import pytest

from lingvo_gshard.data import corpus
from lingvo_gshard.data import report
from lingvo_gshard.data import sources
import data_helpers


def _Units(sizes, seed=0):
  """Units whose languages translate overlapping slices of one English sentence list, as UI catalogs do."""
  english = data_helpers.Sentences(max(sizes.values()) + 50)
  rng = random.Random(seed)
  units = []
  for tag, n in sizes.items():
    chosen = rng.sample(english, n)
    units.append(sources.Unit(tag, f'{tag}.mo', [(f'{tag}: {e}', e) for e in chosen]))
  return units


def _Assemble(units, **kwargs):
  rep = report.BuildReport()
  return corpus.Assemble(units, corpus.CorpusConfig(**kwargs), rep), rep


def test_no_dev_or_test_english_sentence_is_in_any_training_set():
  c, _ = _Assemble(_Units({'de': 3000, 'fr': 2500, 'ja': 2000, 'sw': 800}), dev_fraction=0.1,
                   test_fraction=0.1, max_dev=100, max_test=100)
  keys = {name: set() for name in corpus.SPLITS}
  for lang in c.languages.values():
    for name in corpus.SPLITS:
      keys[name].update(corpus.EnglishKey(t) for _, t in lang.splits[name])
  assert keys['dev'] and keys['test'] and keys['train']
  assert not keys['train'] & keys['dev']
  assert not keys['train'] & keys['test']
  assert not keys['dev'] & keys['test']


def test_near_identical_english_strings_share_a_split():
  assert corpus.EnglishKey('Open File...') == corpus.EnglishKey('open file') == 'open file'
  config = corpus.CorpusConfig(dev_fraction=0.3, test_fraction=0.3)
  for sentence in data_helpers.Sentences(200):
    assert corpus.SplitOf(sentence, config) == corpus.SplitOf(sentence.upper() + ':', config)


def test_split_hash_is_sha256_of_the_english_key():
  # Pinned to the documented formula: changing it silently reshuffles every existing build's splits, and
  # unlike hash() it does not depend on PYTHONHASHSEED.
  expected = int.from_bytes(hashlib.sha256(b'open file').digest()[:8], 'big') / 2**64
  assert corpus.SplitHash('Open file') == expected == corpus.SplitHash('OPEN   FILE!')
  assert corpus.SplitHash('Save file') != expected


def test_caps_drop_extra_heldout_pairs_instead_of_training_on_them():
  c, rep = _Assemble(_Units({'de': 3000}), dev_fraction=0.2, test_fraction=0.2, max_dev=50, max_test=60)
  de = c.languages['de']
  assert de.Counts()['dev'] == 50 and de.Counts()['test'] == 60
  assert sum(de.Counts().values()) + rep.skips['over_heldout_cap'] == 3000
  assert rep.skips['over_heldout_cap'] > 1000  # ~1200 held out, 110 kept.
  # The kept dev sentences are the ones with the smallest hashes: the same English in every language.
  hashes = [corpus.SplitHash(t) for _, t in de.splits['dev']]
  assert hashes == sorted(hashes)


def test_capped_heldout_sets_are_multiway_parallel():
  c, _ = _Assemble(_Units({'de': 2000, 'fr': 2000}, seed=1), dev_fraction=0.2, test_fraction=0.2,
                   max_dev=40, max_test=40)
  de = {t for _, t in c.languages['de'].splits['test']}
  fr = {t for _, t in c.languages['fr'].splits['test']}
  # Random 2000-of-2050 subsets overlap heavily, so the 40 smallest-hash sentences mostly coincide.
  assert len(de & fr) >= 30


def test_training_pairs_are_stored_in_an_order_of_their_own_per_language():
  c, _ = _Assemble(_Units({'de': 2000, 'fr': 2000}, seed=1), dev_fraction=0.05, test_fraction=0.05)
  de, fr = c.languages['de'].splits['train'], c.languages['fr'].splits['train']
  # The two translate ~1,950 common English sentences. In one shared (English-hash) order their first 100
  # would be nearly the same sentences; in independent orders ~100 * 100 / 1,800 ~ 6 of them coincide.
  first = lambda pairs: {t for _, t in pairs[:100]}
  assert len(first(de) & first(fr)) < 25
  # The order is the documented key's (pinned: it decides what every short run reads first).
  key = lambda tag, s, t: hashlib.sha256(f'{tag}\0{s}\0{t}'.encode('utf-8')).digest()
  assert de == sorted(de, key=lambda pair: key('de', *pair))
  assert fr == sorted(fr, key=lambda pair: key('fr', *pair))


def test_duplicates_are_removed_per_language_and_counted():
  units = [sources.Unit('de', 'a.mo', [('Öffnen', 'Open'), ('Öffnen', 'Open'), ('Datei', 'File')]),
           sources.Unit('de', 'b.mo', [('Datei', 'File'), ('Speichern', 'Save')]),
           sources.Unit('fr', 'c.mo', [('Ouvrir', 'Open')])]
  c, rep = _Assemble(units, dev_fraction=0.0, test_fraction=0.0)
  assert sorted(c.languages['de'].splits['train']) == [('Datei', 'File'), ('Speichern', 'Save'),
                                                       ('Öffnen', 'Open')]
  assert c.languages['fr'].splits['train'] == [('Ouvrir', 'Open')]
  assert rep.skips['duplicate'] == 2
  assert c.languages['de'].origins == ['a.mo', 'b.mo']


def test_largest_languages_are_kept_and_bucketed():
  sizes = {'de': 900, 'fr': 800, 'ja': 700, 'sw': 600, 'yo': 500, 'zu': 400, 'lg': 300}
  c, _ = _Assemble(_Units(sizes), num_languages=6, dev_fraction=0.05, test_fraction=0.05)
  assert list(c.languages) == ['de', 'fr', 'ja', 'sw', 'yo', 'zu']
  assert c.left_out == {'lg': 300}
  assert [l.bucket for l in c.languages.values()] == ['high', 'high', 'medium', 'medium', 'low', 'low']


def test_requested_languages_are_kept_exactly_and_unknown_ones_are_fatal():
  units = _Units({'de': 300, 'fr': 200, 'pt-BR': 100})
  c, _ = _Assemble(units, languages=('pt_BR', 'fr'), dev_fraction=0.05, test_fraction=0.05)
  assert sorted(c.languages) == ['fr', 'pt-BR']
  with pytest.raises(report.DataError,
                     match=r"^--languages: language 'xx' is not in the sources read \(3 languages\)$"):
    _Assemble(_Units({'de': 300, 'fr': 200, 'pt-BR': 100}), languages=('xx',))


def test_result_does_not_depend_on_input_order():
  units = _Units({'de': 1000, 'fr': 800}, seed=3)
  shuffled = [sources.Unit(u.tag, u.origin, list(reversed(u.pairs))) for u in reversed(units)]
  a, _ = _Assemble(units, dev_fraction=0.1, test_fraction=0.1, max_dev=30, max_test=30)
  b, _ = _Assemble(shuffled, dev_fraction=0.1, test_fraction=0.1, max_dev=30, max_test=30)
  for tag in ('de', 'fr'):
    assert a.languages[tag].splits == b.languages[tag].splits


def test_empty_input_and_bad_config_are_fatal():
  with pytest.raises(report.DataError, match='the sources gave no usable pairs'):
    _Assemble([sources.Unit('de', 'a.mo', [])])
  with pytest.raises(report.DataError, match='dev_fraction must be in'):
    _Assemble(_Units({'de': 10}), dev_fraction=1.5)
  with pytest.raises(report.DataError, match='no language has at least 50 training pairs'):
    _Assemble(_Units({'de': 10}), min_train=50)
