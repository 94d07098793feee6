"""Tests of data/sources.py and data/debian.py on inputs the tests write: locale trees with broken catalogs,
Debian packages, TSV files, and a TFDS translation dataset prepared locally."""
import os
import shutil
import subprocess

import pytest
import tensorflow_datasets as tfds

from lingvo_gshard.data import debian
from lingvo_gshard.data import report
from lingvo_gshard.data import sources
from lingvo_gshard.data import tfds_scratch
import data_helpers


def _Read(source):
  rep = report.BuildReport()
  units = list(source.Units(rep))
  return {(u.tag, os.path.basename(u.origin)): u.pairs for u in units}, rep


def test_gettext_source_reads_every_locale_and_skips_bad_files(tmp_path):
  root = data_helpers.WriteLocaleTree(str(tmp_path / 'locale'), {
      ('de', 'app'): [('_Open', '_Öffnen'), ('Save', 'Speichern'), ('%s', '%s'), ('Quit', '')],
      ('pt_BR', 'app'): ([('Open', 'Abrir')], {'byte_order': '>'}),
      ('pt_PT', 'app'): ([('Save', 'Guardar')], {'charset': 'ISO-8859-1'}),
      ('ru', 'app'): ([('Open file', 'Открыть файл')], {'charset': 'KOI8-R'}),
      ('sr@latin', 'app'): [('Open', 'Otvori')],
      ('en_GB', 'app'): [('Color', 'Colour')],
      ('C', 'app'): [('Open', 'Open it')],
  })
  broken = os.path.join(root, 'fr', 'LC_MESSAGES')
  os.makedirs(broken)
  with open(os.path.join(broken, 'truncated.mo'), 'wb') as f:
    f.write(data_helpers.MoBytes([('Open', 'Ouvrir')])[:50])
  with open(os.path.join(broken, 'notmo.mo'), 'wb') as f:
    f.write(b'msgid "Open"\nmsgstr "Ouvrir"\n')
  os.makedirs(os.path.join(root, 'de', 'LC_TIME'))
  shutil.copy(os.path.join(root, 'de', 'LC_MESSAGES', 'app.mo'), os.path.join(root, 'de', 'LC_TIME', 'x.mo'))

  units, rep = _Read(sources.GettextSource([root]))
  assert units == {
      ('de', 'app.mo'): [('Speichern', 'Save'), ('Öffnen', 'Open')],  # Catalog order: sorted msgids.
      ('pt-BR', 'app.mo'): [('Abrir', 'Open')],
      ('pt', 'app.mo'): [('Guardar', 'Save')],
      ('ru', 'app.mo'): [('Открыть файл', 'Open file')],
      ('sr-Latn', 'app.mo'): [('Otvori', 'Open')],
  }
  assert rep.skips == {'no_text': 1, 'untranslated': 1, 'english_catalog': 1, 'not_a_language_catalog': 1,
                       'bad_catalog': 2, 'not_a_message_catalog': 1}
  reasons = {os.path.relpath(p, root): r for p, r in rep.skipped_files}
  assert reasons['fr/LC_MESSAGES/notmo.mo'] == 'not a .mo file (bad magic 6d736769)'
  assert reasons['fr/LC_MESSAGES/truncated.mo'].startswith('truncated: ')
  assert reasons['C/LC_MESSAGES/app.mo'] == "'C' is not a language locale"
  assert reasons['de/LC_TIME/x.mo'] == 'not in a <locale>/LC_MESSAGES/ directory'
  assert {s.tag for s in rep.sources} == {'de', 'pt-BR', 'pt', 'ru', 'sr-Latn'}
  assert all(len(s.sha256) == 64 for s in rep.sources)


def test_missing_or_empty_locale_roots_are_fatal(tmp_path):
  with pytest.raises(report.DataError, match=r'/nonexistent: locale directory does not exist$'):
    _Read(sources.GettextSource([str(tmp_path / 'nonexistent')]))
  (tmp_path / 'empty' / 'de' / 'LC_MESSAGES').mkdir(parents=True)
  with pytest.raises(report.DataError, match=r'/empty: no \.mo catalogs found under this directory$'):
    _Read(sources.GettextSource([str(tmp_path / 'empty')]))


def _BuildDeb(tmp_path, name):
  tree = tmp_path / name
  data_helpers.WriteLocaleTree(str(tree / 'usr' / 'share' / 'locale'), {
      ('de', name): [('Print', 'Drucken')], ('en_GB', name): [('Color', 'Colour')]})
  data_helpers.WriteMo(str(tree / 'usr' / 'lib' / 'office' / 'resource' / 'fr' / 'LC_MESSAGES' / 'x.mo'),
                       [('Print', 'Imprimer')])
  (tree / 'DEBIAN').mkdir()
  (tree / 'DEBIAN' / 'control').write_text(
      f'Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: t\n')
  deb = str(tmp_path / f'{name}_1.0_all.deb')
  subprocess.run(['dpkg-deb', '-Zxz', '--build', str(tree), deb], check=True, capture_output=True)
  return deb


@pytest.mark.skipif(shutil.which('dpkg-deb') is None, reason='needs dpkg-deb to make a .deb')
def test_catalogs_inside_debian_packages_are_read(tmp_path):
  deb = _BuildDeb(tmp_path, 'demo-l10n')
  members = [m for m, _ in debian.MoMembers(deb)]
  assert members == ['usr/lib/office/resource/fr/LC_MESSAGES/x.mo',
                     'usr/share/locale/de/LC_MESSAGES/demo-l10n.mo',
                     'usr/share/locale/en_GB/LC_MESSAGES/demo-l10n.mo']
  (tmp_path / 'root' / 'es' / 'LC_MESSAGES').mkdir(parents=True)
  data_helpers.WriteMo(str(tmp_path / 'root' / 'es' / 'LC_MESSAGES' / 'a.mo'), [('Print', 'Imprimir')])
  bad = tmp_path / 'bad.deb'
  bad.write_bytes(b'!<arch>\ngarbage')
  units, rep = _Read(sources.GettextSource([str(tmp_path / 'root')], debs=[deb, str(bad)]))
  assert sorted((tag, pairs[0]) for (tag, _), pairs in units.items()) == [
      ('de', ('Drucken', 'Print')), ('es', ('Imprimir', 'Print')), ('fr', ('Imprimer', 'Print'))]
  assert f'{deb}:usr/share/locale/de/LC_MESSAGES/demo-l10n.mo' in {s.origin for s in rep.sources}
  assert rep.skipped_files == [(str(bad), 'no data.tar member')]
  assert rep.skips['english_catalog'] == 1


def test_debian_fetch_uses_the_cache_without_apt(tmp_path):
  cached = tmp_path / 'demo_1.0_all.deb'
  cached.write_bytes(b'')
  # Already in the cache: apt-get is not run (this test has no network), and the path comes back.
  assert debian.FetchDebs(['demo', 'demo=1.0'], str(tmp_path)) == [str(cached), str(cached)]


def test_tsv_source_counts_bad_lines_and_keeps_good_ones(tmp_path):
  path = tmp_path / 'de.tsv'
  lines = [b'Hallo Welt\tHello world', b'nur eine Spalte', b'a\tb\tc', b'\xff\xfe kaputt\tbroken',
           b'', b'Gleich\tGleich', b'x' * 100_000 + b'\tlong', b'\tOpen', b'Mehr &Text\tMore &text\r']
  path.write_bytes(b'\n'.join(lines))
  units, rep = _Read(sources.TsvSource([('de', str(path))]))
  assert units == {('de', 'de.tsv'): [('Hallo Welt', 'Hello world'), ('Mehr &Text', 'More &text')]}
  assert rep.skips == {'tsv_bad_columns': 2, 'invalid_utf8': 1, 'identical': 1, 'too_long': 1,
                       'untranslated': 1}
  assert rep.skipped_files == [(str(path), '2 lines skipped (not 2 tab-separated columns): line 2, 3'),
                               (str(path), '1 lines skipped (invalid UTF-8): line 4')]


def test_tsv_errors_are_one_line_and_name_the_file(tmp_path):
  with pytest.raises(report.DataError, match=r'nope\.tsv: cannot read TSV file: No such file or directory$'):
    _Read(sources.TsvSource([('de', str(tmp_path / 'nope.tsv'))]))
  empty = tmp_path / 'empty.tsv'
  empty.write_text('one column only\n')
  with pytest.raises(report.DataError, match=r'empty\.tsv: no usable pairs in this TSV file'):
    _Read(sources.TsvSource([('de', str(empty))]))
  with pytest.raises(report.DataError, match=r"--tsv: 'de:x.tsv' is not LANG=PATH"):
    sources.ParseLanguageFiles(['de:x.tsv'], '--tsv')
  assert sources.ParseLanguageFiles(['pt_BR=a.tsv', 'de = b.tsv'], '--tsv') == [('pt-BR', 'a.tsv'),
                                                                              ('de', 'b.tsv')]


def test_translation_examples_of_both_tfds_feature_kinds():
  assert sources.TranslationExamplePairs({'de': b'Hallo', 'en': b'Hello'}) == [('de', 'Hallo', 'Hello')]
  ted = {'talk_name': b't', 'translations': {'language': [b'de', b'en', b'pt-br'],
                                             'translation': [b'Hallo', b'Hello', b'Ol\xc3\xa1']}}
  assert sources.TranslationExamplePairs(ted) == [('de', 'Hallo', 'Hello'), ('pt-br', 'Olá', 'Hello')]
  assert sources.TranslationExamplePairs({'de': b'Hallo', 'fr': b'Salut'}) == []


class DataSourcesTestTranslation(tfds.core.GeneratorBasedBuilder):
  """A local stand-in for wmt19_translate: the real tfds.load path, no network."""

  VERSION = tfds.core.Version('1.0.0')

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.Translation(languages=['de', 'en']))

  def _split_generators(self, dl_manager):
    return {'train': self._generate_examples()}

  def _generate_examples(self):
    for i, (de, en) in enumerate([('Guten Morgen', 'Good morning'), ('Danke', 'Thank you'),
                                  ('Danke', 'Thank you'), ('5', '5')]):
      yield i, {'de': de, 'en': en}


def test_tfds_source_reads_a_prepared_dataset_through_tfds_load(tmp_path):
  with tfds_scratch.Scratch():  # TFDS leaves a temp dir when making a builder of an unprepared dataset
    DataSourcesTestTranslation(data_dir=str(tmp_path)).download_and_prepare()
  source = sources.TfdsSource('data_sources_test_translation', data_dir=str(tmp_path), download=False)
  units, rep = _Read(source)
  assert {k: sorted(v) for k, v in units.items()} == {
      ('de', 'tfds:data_sources_test_translation[train]:de'): [('Danke', 'Thank you'), ('Danke', 'Thank you'),
                                                          ('Guten Morgen', 'Good morning')]}
  assert rep.skips == {'no_text': 1}
  missing = sources.TfdsSource('data_sources_test_translation', data_dir=str(tmp_path / 'none'),
                               download=False)
  with pytest.raises(report.DataError, match=r'^TFDS dataset data_sources_test_translation \(train\): '
                                             r'cannot load: '):
    _Read(missing)
