"""Tests of data/cleaning.py: mnemonics, whitespace, line splitting, placeholders, plurals, skip counts."""
import pytest

from lingvo_gshard.data import cleaning
from lingvo_gshard.data import mo_reader


def _Pairs(source, target, **kwargs):
  cleaner = cleaning.Cleaner(**kwargs)
  return cleaner.Pairs(source, target), dict(cleaner.skips)


@pytest.mark.parametrize('source,target,expected', [
    ('_Datei', '_File', ('Datei', 'File')),
    ('Ö_ffnen', 'O_pen', ('Öffnen', 'Open')),
    ('&Öffnen', '&Open', ('Öffnen', 'Open')),
    ('ファイル(_F)', '_File', ('ファイル', 'File')),
    ('文件（&F）', '&File', ('文件', 'File')),
    ('Drag && Drop', 'Drag && Drop it', ('Drag & Drop', 'Drag & Drop it')),
    ('Laden &amp; Speichern', 'Load &amp; save', ('Laden &amp; Speichern', 'Load &amp; save')),
    # Two candidate underscores: identifiers, not an accelerator; left alone on both sides.
    ('Variable my_var_name fehlt', 'Variable my_var_name missing',
     ('Variable my_var_name fehlt', 'Variable my_var_name missing')),
    ('Name__mit Unterstrich', 'Name__with underscore', ('Name_mit Unterstrich', 'Name_with underscore')),
])
def test_mnemonics_are_stripped_the_same_way_on_both_sides(source, target, expected):
  assert _Pairs(source, target)[0] == [expected]


def test_mnemonics_are_kept_for_non_ui_sources():
  assert _Pairs('&Öffnen', '&Open', strip_mnemonics=False)[0] == [('&Öffnen', '&Open')]


def test_whitespace_and_control_characters_are_normalised():
  source = '  Datei\u00a0\t öffnen\u3000jetzt\x07  '
  target = 'Open \u2003 file\x1b now\u200c'
  # NBSP, tab, ideographic and em spaces collapse; BEL/ESC go; ZWNJ (a format character) stays.
  assert _Pairs(source, target)[0] == [('Datei öffnen jetzt', 'Open file now\u200c')]


def test_nfc_normalisation_makes_decomposed_forms_equal():
  decomposed = 'O\u0308ffnen'
  assert _Pairs(decomposed, 'Open')[0] == [('\u00d6ffnen', 'Open')]


def test_multi_line_entries_split_when_line_counts_match():
  pairs, skips = _Pairs('Erste Zeile\nZweite Zeile\n', 'First line\nSecond line\n')
  assert pairs == [('Erste Zeile', 'First line'), ('Zweite Zeile', 'Second line')]
  assert skips == {}


def test_multi_line_entries_are_joined_when_line_counts_differ():
  pairs, skips = _Pairs('Ein langer Satz über zwei Zeilen', 'A long sentence\nover two lines')
  assert pairs == [('Ein langer Satz über zwei Zeilen', 'A long sentence over two lines')]
  assert skips == {'line_mismatch': 1}


def test_split_lines_are_checked_one_by_one():
  pairs, skips = _Pairs('Kopieren\n%s\nEinfügen', 'Copy\n%s\nPaste')
  assert pairs == [('Kopieren', 'Copy'), ('Einfügen', 'Paste')]
  assert skips == {'no_text': 1}


@pytest.mark.parametrize('text', ['%s', '%d%%', '%1$s: %2$s', '{0}', '{name} ({count})', '<b>%s</b>',
                                  '%(name)s', '${HOME}', '&nbsp;', '%-10.3lf', '100 %', '<PRIu64>'])
def test_placeholder_or_markup_only_entries_are_dropped(text):
  assert _Pairs(text + ' x', text)[1] == {'no_text': 1}
  assert not cleaning.HasText(text)


def test_text_with_placeholders_is_kept():
  assert _Pairs('Datei %s nicht gefunden', 'File %s not found')[0] == [
      ('Datei %s nicht gefunden', 'File %s not found')]
  assert cleaning.HasText('<b>Bold</b> {0}')
  assert cleaning.HasText('\u0915\u093e')  # Devanagari letter with a vowel sign.


@pytest.mark.parametrize('source,target,reason', [
    ('', 'Open', 'untranslated'),
    ('   ', 'Open', 'untranslated'),
    ('Open', 'Open', 'identical'),
    ('_Open', 'Op_en', 'identical'),  # Identical once mnemonics are gone.
    ('Ö' * 401, 'Open', 'too_long'),
    ('Öffnen', 'x' * 100_000, 'too_long'),
    ('   ', '   ', 'empty'),
])
def test_skips_are_counted_by_reason(source, target, reason):
  pairs, skips = _Pairs(source, target)
  assert pairs == []
  assert skips == {reason: 1}


def test_plural_entries_pair_singular_with_first_and_plural_with_last_form():
  cleaner = cleaning.Cleaner()
  russian = mo_reader.MoEntry(msgid='%d file deleted', msgid_plural='%d files deleted',
                              msgstrs=('%d файл удалён', '%d файла удалено', '%d файлов удалено'))
  assert cleaner.EntryPairs(russian) == [('%d файл удалён', '%d file deleted'),
                                         ('%d файлов удалено', '%d files deleted')]
  japanese = mo_reader.MoEntry(msgid='%d file', msgid_plural='%d files', msgstrs=('%d 個のファイル',))
  assert cleaner.EntryPairs(japanese) == [('%d 個のファイル', '%d file'), ('%d 個のファイル', '%d files')]
  untranslated = mo_reader.MoEntry(msgid='%d file', msgid_plural='%d files', msgstrs=('', ''))
  assert cleaner.EntryPairs(untranslated) == []
  assert cleaner.skips == {'untranslated': 1}


def test_context_does_not_change_the_pair_and_credits_are_skipped():
  cleaner = cleaning.Cleaner()
  assert cleaner.EntryPairs(mo_reader.MoEntry('Open', ('Offen',), context='adjective')) == [('Offen', 'Open')]
  assert cleaner.EntryPairs(mo_reader.MoEntry('translator-credits', ('Hans Muster',))) == []
  assert cleaner.EntryPairs(mo_reader.MoEntry('Your names', ('Hans',), context='NAME OF TRANSLATORS')) == []
  assert cleaner.skips == {'translator_credits': 2}
