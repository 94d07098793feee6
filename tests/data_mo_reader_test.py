"""Tests of data/mo_reader.py: both byte orders, charsets, plurals, contexts, broken files, and parity
with the standard library's own .mo parser (gettext.GNUTranslations) on real system catalogs."""
import glob
import gettext
import io

import pytest

from lingvo_gshard.data import mo_reader
import data_helpers

_ENTRIES = [
    ('File', 'Datei'),
    ('Open', 'Öffnen'),
    ('Open', 'Öffnen (Verb)', 'verb'),
    (('%d file', '%d files'), ['%d Datei', '%d Dateien'], None),
]


def _ByKey(catalog):
  return {(e.context, e.msgid, e.msgid_plural): e.msgstrs for e in catalog.entries}


@pytest.mark.parametrize('byte_order', ['<', '>'])
def test_both_byte_orders_read_the_same_entries(byte_order):
  catalog = mo_reader.ParseMo(data_helpers.MoBytes(_ENTRIES, byte_order=byte_order))
  assert catalog.byte_order == byte_order
  assert catalog.charset == 'utf-8'
  assert _ByKey(catalog) == {
      (None, 'File', None): ('Datei',),
      (None, 'Open', None): ('Öffnen',),
      ('verb', 'Open', None): ('Öffnen (Verb)',),
      (None, '%d file', '%d files'): ('%d Datei', '%d Dateien'),
  }
  assert catalog.headers['Plural-Forms'] == 'nplurals=2; plural=(n != 1);'


@pytest.mark.parametrize('charset,text', [('ISO-8859-1', 'Öffnen à la française'),
                                          ('KOI8-R', 'Открыть файл'),
                                          ('EUC-JP', 'ファイルを開く'),
                                          ('ISO-8859-7', 'Άνοιγμα αρχείου')])
def test_declared_legacy_charsets_are_decoded(charset, text):
  data = data_helpers.MoBytes([('Open file', text)], charset=charset)
  assert text.encode(charset) in data  # The test really wrote legacy bytes, not UTF-8.
  catalog = mo_reader.ParseMo(data)
  assert [(e.msgid, e.msgstrs) for e in catalog.entries] == [('Open file', (text,))]
  assert catalog.charset_note == ''


def test_mislabelled_utf8_is_detected_and_noted():
  header = 'Content-Type: text/plain; charset=ISO-8859-1\n'
  data = data_helpers.MoBytes([('Open file', 'Öffnen')], charset='UTF-8', header=header)
  catalog = mo_reader.ParseMo(data, 'x.mo')
  assert catalog.entries[0].msgstrs == ('Öffnen',)  # Not the mojibake 'Ã\x96ffnen'.
  assert catalog.charset_note == 'declared ISO-8859-1 but the text is UTF-8'


def test_undeclared_charset_accepts_ascii_and_utf8_only():
  catalog = mo_reader.ParseMo(data_helpers.MoBytes([('Open', 'Öffnen')], charset=None))
  assert catalog.entries[0].msgstrs == ('Öffnen',)
  assert catalog.charset_note == 'no charset declared; decoded as UTF-8'
  latin1 = data_helpers.MoBytes([('Open', 'Öffnen')], charset=None, header='Project-Id-Version: x\n')
  latin1 = latin1.replace('Öffnen'.encode('utf-8'), 'Öffnen'.encode('latin-1') + b'\x00')
  with pytest.raises(mo_reader.MoFormatError,
                     match=r'^bad\.mo: no charset declared and the text is not UTF-8$'):
    mo_reader.ParseMo(latin1, 'bad.mo')


def test_unknown_charset_name_is_treated_as_undeclared():
  header = 'Content-Type: text/plain; charset=CHARSET\n'
  catalog = mo_reader.ParseMo(data_helpers.MoBytes([('Open', 'Abrir')], header=header))
  assert catalog.entries[0].msgstrs == ('Abrir',)
  assert catalog.charset_note == "charset 'CHARSET' unknown"


def test_invalid_utf8_entries_are_counted_not_fatal():
  data = data_helpers.MoBytes([('Open', 'Öffnen'), ('Save', 'Speichern')])
  broken = data.replace(b'Speichern', b'Speich\xffrn')
  catalog = mo_reader.ParseMo(broken, 'x.mo')
  assert [e.msgid for e in catalog.entries] == ['Open']
  assert catalog.undecodable == 1


@pytest.mark.parametrize('mutate,message', [
    (lambda d: b'', r'^f\.mo: not a \.mo file \(only 0 bytes\)$'),
    (lambda d: b'\x00' * 4 + d[4:], r'^f\.mo: not a \.mo file \(bad magic 00000000\)$'),
    (lambda d: d[:4] + b'\x00\x00\x05\x00' + d[8:], r'^f\.mo: unsupported \.mo major revision 5$'),
    (lambda d: d[:40],
     r'^f\.mo: truncated: original table of 3 entries at byte 28 exceeds the file size 40$'),
    (lambda d: d[:-12], r'^f\.mo: truncated: string 1 at byte \d+ \(\+\d+\) exceeds the file size \d+$'),
])
def test_broken_files_raise_one_line_errors_naming_the_file(mutate, message):
  data = data_helpers.MoBytes([('Open', 'Öffnen'), ('Save', 'Speichern')])
  with pytest.raises(mo_reader.MoFormatError, match=message):
    mo_reader.ParseMo(mutate(data), 'f.mo')


def test_unreadable_path_names_the_file(tmp_path):
  with pytest.raises(mo_reader.MoFormatError, match=r'missing\.mo: cannot read: No such file'):
    mo_reader.ReadMo(str(tmp_path / 'missing.mo'))


def _StdlibCatalog(data):
  """Entries as gettext.GNUTranslations stores them: {msgid: str} / {(msgid, i): str}, context-prefixed."""
  return gettext.GNUTranslations(io.BytesIO(data))._catalog  # pylint: disable=protected-access


def _OurCatalog(catalog):
  out = {}
  for e in catalog.entries:
    key = e.msgid if e.context is None else f'{e.context}\x04{e.msgid}'
    if e.msgid_plural is None:
      out[key] = e.msgstrs[0]
    else:
      for i, s in enumerate(e.msgstrs):
        out[(key, i)] = s
  return out


@pytest.mark.parametrize('byte_order', ['<', '>'])
def test_parity_with_stdlib_parser_on_written_catalogs(byte_order):
  data = data_helpers.MoBytes(_ENTRIES, charset='ISO-8859-1', byte_order=byte_order)
  ours = _OurCatalog(mo_reader.ParseMo(data))
  theirs = {k: v for k, v in _StdlibCatalog(data).items() if k != ''}
  assert ours == theirs


def test_parity_with_stdlib_parser_on_system_catalogs():
  paths = sorted(glob.glob('/usr/share/locale/*/LC_MESSAGES/*.mo'))
  assert len(paths) > 1000, 'expected the Debian system catalogs'
  compared = 0
  for path in paths[::97]:  # ~40 catalogs across languages and domains.
    with open(path, 'rb') as f:
      data = f.read()
    try:
      theirs = _StdlibCatalog(data)
    except (UnicodeDecodeError, LookupError):
      continue  # The stdlib parser is stricter about charsets; parity is on what it can read.
    ours = _OurCatalog(mo_reader.ParseMo(data, path))
    theirs = {k: v for k, v in theirs.items() if k != ''}
    assert ours == theirs, path
    compared += 1
  assert compared >= 30
