"""Inputs of the corpus pipeline: gettext catalogs, TSV files and TFDS translation datasets.

Every source yields `Unit`s: the clean (source, target) pairs of one input file or dataset split, tagged
with the BCP-47 tag of the source language; English is always the target side. Sources record what they
read and skip in a shared `report.BuildReport`. Missing inputs are fatal (`report.DataError`); bad content
inside an input is skipped and counted.
"""
import dataclasses
import hashlib
import os
import re

from lingvo_gshard.data import cleaning
from lingvo_gshard.data import debian
from lingvo_gshard.data import directions
from lingvo_gshard.data import language_codes
from lingvo_gshard.data import languages
from lingvo_gshard.data import mo_reader
from lingvo_gshard.data import report as report_lib
from lingvo_gshard.data import tfds_scratch

DEFAULT_LOCALE_ROOTS = ('/usr/share/locale',)


@dataclasses.dataclass
class Unit:
  """Clean pairs from one input: `pairs` is a list of (foreign source, English target)."""
  tag: str
  origin: str
  pairs: list[tuple[str, str]]


def _Sha256(data):
  return hashlib.sha256(data).hexdigest()


def _LocaleOf(relpath):
  """The locale of a catalog path `.../<locale>/LC_MESSAGES/<domain>.mo`, or None if not that layout.

  Other categories (`LC_TIME/coreutils.mo` holds date formats) are not translations of messages.
  """
  parts = relpath.replace(os.sep, '/').split('/')
  if len(parts) >= 3 and parts[-2] == 'LC_MESSAGES':
    return parts[-3]
  return None


class GettextSource:
  """Every `<locale>/LC_MESSAGES/*.mo` under some directories and in some Debian packages."""

  def __init__(self, roots=DEFAULT_LOCALE_ROOTS, debs=(), max_chars=cleaning.DEFAULT_MAX_CHARS):
    """Constructor.

    Args:
      roots: directories laid out like /usr/share/locale (searched recursively, so a package tree with
        several such directories works too).
      debs: paths of .deb files whose catalogs are read as well (see debian.py).
      max_chars: longest side kept, in characters.
    """
    self.roots = [str(r) for r in roots]
    self.debs = [str(d) for d in debs]
    self.max_chars = max_chars

  def _Catalogs(self):
    """Yields (origin, locale, bytes or a one-line error) for every catalog, in a deterministic order."""
    for root in self.roots:
      if not os.path.isdir(root):
        raise report_lib.DataError(f'{root}: locale directory does not exist')
      found = []
      for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
          if name.endswith('.mo'):
            path = os.path.join(dirpath, name)
            found.append((path, _LocaleOf(os.path.relpath(path, root))))
      if not found:
        raise report_lib.DataError(f'{root}: no .mo catalogs found under this directory')
      for path, locale in found:
        try:
          with open(path, 'rb') as f:
            yield path, locale, f.read()
        except OSError as e:
          yield path, locale, f'cannot read: {e.strerror or e}'
    for deb in self.debs:
      try:
        members = debian.MoMembers(deb)
      except debian.DebError as e:
        yield deb, None, str(e).split(': ', 1)[-1]
        continue
      for member, data in members:
        yield f'{deb}:{member}', _LocaleOf(member), data

  def Units(self, report):
    cleaner = cleaning.Cleaner(strip_mnemonics=True, max_chars=self.max_chars, skips=report.skips)
    for origin, locale, data in self._Catalogs():
      if isinstance(data, str):  # The reason the file could not be read.
        report.SkipFile(origin, data, 'unreadable_file')
        continue
      if locale is None:
        report.SkipFile(origin, 'not in a <locale>/LC_MESSAGES/ directory', 'not_a_message_catalog')
        continue
      tag = languages.LocaleToTag(locale)
      if tag is None:
        report.SkipFile(origin, f'{locale!r} is not a language locale', 'not_a_language_catalog')
        continue
      if not language_codes.Registered(tag):
        report.SkipFile(origin, f'{tag!r} is not a registered language tag', 'unknown_language')
        continue
      if languages.IsEnglish(tag):
        report.skips['english_catalog'] += 1
        continue
      try:
        catalog = mo_reader.ParseMo(data, origin)
      except mo_reader.MoFormatError as e:
        report.SkipFile(origin, str(e).split(': ', 1)[-1], 'bad_catalog')
        continue
      if catalog.charset_note:
        report.notes.append((origin, catalog.charset_note))
      if catalog.undecodable:
        report.skips['undecodable'] += catalog.undecodable
      pairs = cleaning.CatalogPairs(catalog, cleaner)
      report.sources.append(report_lib.SourceRecord(origin, tag, _Sha256(data), len(pairs)))
      yield Unit(tag, origin, pairs)


def ParseLanguageFiles(specs, what, new_languages=()):
  """Parses `key=path` specifications (e.g. from a flag) into (direction key, path) pairs.

  Args:
    specs: iterable of strings: 'de=/data/de-en.tsv' (German into English; a locale such as 'pt_BR' works
      too), 'de-en=...' (the same), 'en-de=...' (English into German), 'de-fr=...' (directions.py).
    what: the name of the option, for error messages.
    new_languages: tags the IANA registry lacks that the user declared (language_codes.CheckNew).
  """
  out = []
  for spec in specs:
    lang, sep, path = spec.partition('=')
    if not sep or not lang.strip() or not path.strip():
      raise report_lib.DataError(
          f'{what}: {spec!r} is not LANG=PATH or SOURCE-TARGET=PATH with language codes such as de, pt_BR, '
          'en-de')
    out.append((CheckDirection(lang.strip(), f'{what}={spec}', new_languages), path.strip()))
  return out


def CheckDirection(code, what, new_languages=()):
  """The corpus key of a language ('de': into English) or a direction ('en-de', 'de-en'), every language in it
  checked by language_codes.CheckNew (one line naming `what` otherwise)."""
  source, target = directions.Parse(code, what)  # as typed: AsTag would read 'en-qq' as a region
  if source == code:
    return language_codes.CheckNew(code, what, new_languages)
  return directions.Key(language_codes.CheckNew(source, what, new_languages),
                        language_codes.CheckNew(target, what, new_languages))


class TsvSource:
  """Plain text files of `source<TAB>target` lines, one file per direction (key 'de': English targets)."""

  def __init__(self, files, max_chars=cleaning.DEFAULT_MAX_CHARS):
    """Constructor.

    Args:
      files: iterable of (tag, path).
      max_chars: longest side kept, in characters.
    """
    self.files = list(files)
    self.max_chars = max_chars

  def Units(self, report):
    cleaner = cleaning.Cleaner(strip_mnemonics=False, max_chars=self.max_chars, skips=report.skips)
    for tag, path in self.files:
      if languages.IsEnglish(directions.Source(tag)) and directions.Target(tag) == directions.ENGLISH:
        raise report_lib.DataError(f'{path}: the file is given as {tag}, English into English; name the '
                                   f'direction (en-de=...)')
      try:
        with open(path, 'rb') as f:
          data = f.read()
      except OSError as e:
        raise report_lib.DataError(f'{path}: cannot read TSV file: {e.strerror or e}') from None
      pairs, bad_columns, bad_utf8 = [], [], []
      for number, raw in enumerate(data.splitlines(), 1):
        try:
          line = raw.decode('utf-8')
        except UnicodeDecodeError:
          bad_utf8.append(number)
          continue
        if not line.strip():
          continue
        fields = line.split('\t')
        if len(fields) != 2:
          bad_columns.append(number)
          continue
        pairs.extend(cleaner.Pairs(fields[0], fields[1]))
      report.skips['tsv_bad_columns'] += len(bad_columns)
      report.skips['invalid_utf8'] += len(bad_utf8)
      for lines, why in ((bad_columns, 'not 2 tab-separated columns'), (bad_utf8, 'invalid UTF-8')):
        if lines:
          shown = ', '.join(map(str, lines[:5])) + (', ...' if len(lines) > 5 else '')
          report.skipped_files.append((path, f'{len(lines)} lines skipped ({why}): line {shown}'))
      if not pairs:  # the build stops here and its skip counts are never shown: name the first bad line
        bad = sorted([(n, 'not UTF-8') for n in bad_utf8[:1]] + [(n, 'not 2 columns') for n in bad_columns[:1]])
        why = (f'; {len(bad_utf8) + len(bad_columns)} lines skipped, the first is line {bad[0][0]}: {bad[0][1]}'
               if bad else '; every line was empty or dropped by cleaning: identical sides, no text, too long')
        raise report_lib.DataError(f'{path}: no usable pairs in this TSV file (expected source<TAB>target '
                                   f'lines{why})')
      report.sources.append(report_lib.SourceRecord(path, tag, _Sha256(data), len(pairs)))
      yield Unit(tag, path, pairs)


def _Text(value):
  return value.decode('utf-8') if isinstance(value, bytes) else str(value)


def TranslationExamplePairs(example):
  """(language, foreign text, English text) triples of one TFDS translation example.

  Handles both TFDS translation feature kinds:
    `Translation` (wmt19_translate/de-en...): {'de': b'...', 'en': b'...'}.
    `TranslationVariableLanguages` (ted_multi_translate):
        {'translations': {'language': [b'de', b'en', ...], 'translation': [b'...', b'...', ...]}, ...}.
  Examples without English give nothing.
  """
  if 'translations' in example and isinstance(example['translations'], dict):
    langs = [_Text(l) for l in example['translations']['language']]
    texts = [_Text(t) for t in example['translations']['translation']]
    by_lang = dict(zip(langs, texts))
  else:
    by_lang = {k: _Text(v) for k, v in example.items() if isinstance(v, (bytes, str))}
  english = by_lang.get('en')
  if english is None:
    return []
  return [(lang, text, english) for lang, text in by_lang.items() if lang != 'en']


TFDS_LANG_RE = re.compile(r'^[a-z]{2,3}([-_][A-Za-z0-9]+)*$')  # a TFDS language code a tag can come from


class TfdsSource:
  """A TFDS translation dataset, e.g. `wmt19_translate/de-en` or `ted_multi_translate`.

  This is the path real users take to train on web-scale data; it calls `tfds.load` exactly as written
  here, so it downloads (or reads an already-prepared `data_dir`) as TFDS does.
  """

  def __init__(self, name, split='train', data_dir=None, languages_wanted=None, download=True,
               max_chars=cleaning.DEFAULT_MAX_CHARS):
    """Constructor.

    Args:
      name: TFDS dataset name with optional config ('wmt19_translate/de-en').
      split: TFDS split expression to read.
      data_dir: TFDS data directory (None: TFDS default).
      languages_wanted: if set, only these source languages (TFDS codes) are kept.
      download: let tfds.load download and prepare the dataset if it is not there.
      max_chars: longest side kept, in characters.
    """
    self.name, self.split, self.data_dir = name, split, data_dir
    self.languages_wanted = set(languages_wanted) if languages_wanted else None
    self.download = download
    self.max_chars = max_chars

  def Units(self, report):
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    try:
      with tfds_scratch.Scratch():
        dataset = tfds.load(self.name, split=self.split, data_dir=self.data_dir, download=self.download)
    except Exception as e:  # pylint: disable=broad-except
      first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise report_lib.DataError(
          f'TFDS dataset {self.name} ({self.split}): cannot load: {first_line}') from None
    cleaner = cleaning.Cleaner(strip_mnemonics=False, max_chars=self.max_chars, skips=report.skips)
    by_tag = {}
    for example in tfds.as_numpy(dataset):
      for lang, source, target in TranslationExamplePairs(example):
        if self.languages_wanted and lang not in self.languages_wanted:
          continue
        tag = languages.LocaleToTag(lang.replace('-', '_')) if TFDS_LANG_RE.match(lang) else None
        if tag is None or languages.IsEnglish(tag) or not language_codes.Registered(tag):
          report.skips['tfds_unknown_language'] += 1
          continue
        by_tag.setdefault(tag, []).extend(cleaner.Pairs(source, target))
    if not by_tag:
      raise report_lib.DataError(f'TFDS dataset {self.name} ({self.split}): no English-paired examples')
    for tag, pairs in sorted(by_tag.items()):
      origin = f'tfds:{self.name}[{self.split}]:{tag}'
      report.sources.append(report_lib.SourceRecord(origin, tag, '', len(pairs)))
      yield Unit(tag, origin, pairs)
