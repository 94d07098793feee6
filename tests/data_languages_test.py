"""Tests of data/languages.py: gettext locale -> BCP-47 tag, English detection, resource buckets."""
import collections
import os

import pytest

from lingvo_gshard.data import languages


@pytest.mark.parametrize('locale,tag', [
    ('de', 'de'), ('pt_BR', 'pt-BR'), ('pt_PT', 'pt'), ('pt', 'pt'), ('zh_CN', 'zh-CN'), ('zh_TW', 'zh-TW'),
    ('zh_HK', 'zh-HK'), ('zh_Hans', 'zh-CN'), ('zh_Hant', 'zh-TW'), ('sr@latin', 'sr-Latn'),
    ('sr@Latn', 'sr-Latn'), ('sr@ije', 'sr-ijekavsk'), ('sr@ijekavianlatin', 'sr-Latn-ijekavsk'),
    ('ca@valencia', 'ca-valencia'), ('uz@cyrillic', 'uz-Cyrl'), ('be@latin', 'be-Latn'),
    ('tt@iqtelif', 'tt-Latn'), ('de_DE', 'de'), ('de_CH', 'de-CH'), ('de_DE.UTF-8@euro', 'de'),
    ('ja.eucJP', 'ja'), ('ja_JP', 'ja'), ('nb_NO', 'nb'), ('no', 'nb'), ('mo', 'ro'), ('iw', 'he'),
    ('bn_BD', 'bn'), ('bn_IN', 'bn-IN'), ('kw_GB', 'kw'), ('pa_PK', 'pa-PK'), ('az_IR', 'az-IR'),
    ('ast', 'ast'), ('es_419', 'es-419'),
])
def test_locale_to_tag(locale, tag):
  assert languages.LocaleToTag(locale) == tag


@pytest.mark.parametrize('locale', ['C', 'POSIX', 'locale.alias', '', 'x', 'de_DE_DE'])
def test_non_language_locales_have_no_tag(locale):
  assert languages.LocaleToTag(locale) is None


@pytest.mark.parametrize('locale', ['en', 'en_GB', 'en_AU', 'en_US', 'en@quot', 'en@boldquot', 'en@shaw',
                                    'en_CA.UTF-8'])
def test_english_variants_are_recognised(locale):
  assert languages.IsEnglish(languages.LocaleToTag(locale))


@pytest.mark.parametrize('locale', ['eo', 'ang', 'jam', 'el', 'es'])
def test_other_languages_are_not_english(locale):
  assert not languages.IsEnglish(languages.LocaleToTag(locale))


def test_system_locales_merge_only_true_aliases():
  tags = collections.defaultdict(set)
  for locale in os.listdir('/usr/share/locale'):
    tag = languages.LocaleToTag(locale)
    if tag:
      tags[tag].add(locale)
  # Every merge on this image is one of the documented aliases, nothing else collides.
  merges = {tag: locales for tag, locales in tags.items() if len(locales) > 1}
  allowed = {'bn': {'bn', 'bn_BD'}, 'nb': {'nb', 'nb_NO', 'no'}, 'pt': {'pt', 'pt_PT'}, 'ro': {'ro', 'mo'},
             'sr-Latn': {'sr@latin', 'sr@Latn'}, 'zh-CN': {'zh_CN', 'zh_Hans'}, 'zh-TW': {'zh_TW', 'zh_Hant'},
             'kw': {'kw', 'kw_GB'}, 'fil': {'fil', 'tl'}, 'en': {'en', 'en@quot', 'en@boldquot', 'en_US'}}
  for tag, locales in merges.items():
    assert locales <= allowed.get(tag, set()), (tag, locales)


def test_buckets_are_terciles_of_training_size():
  sizes = {f'l{i}': 1000 - i for i in range(10)}
  buckets = languages.Buckets(sizes)
  assert [buckets[f'l{i}'] for i in range(10)] == ['high'] * 4 + ['medium'] * 3 + ['low'] * 3
  assert languages.Buckets({'a': 5}) == {'a': 'high'}
  assert languages.Buckets({'a': 5, 'b': 5}) == {'a': 'high', 'b': 'medium'}  # Ties broken by tag.
  counts = collections.Counter(languages.Buckets({f'l{i}': i for i in range(100)}).values())
  assert counts == {'high': 34, 'medium': 33, 'low': 33}
