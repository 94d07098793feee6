"""Turns raw translation entries into clean (source, target) sentence pairs.

The same functions run on every source (gettext catalogs, TSV files, TFDS datasets); only UI mnemonic
stripping is specific to user-interface catalogs and is switched by the caller. Every entry that yields no
pair is counted under a named reason in a `collections.Counter`, so the build report can say where data went.

Skip reasons (keys of the counter):
  untranslated     the translation is empty (also how gettext marks fuzzy entries dropped by msgfmt).
  translator_credits  the gettext convention for listing translators' names: not a translation.
  empty            a side is empty after cleaning.
  no_text          a side is only placeholders, markup, digits or punctuation (`%s`, `<b>%s</b>`, `{0}`).
  identical        both sides are equal after cleaning (untranslated copy, product name, number...).
  too_long         a side has more than `max_chars` characters (log dumps, licences, 100k-character lines).
  line_mismatch    (not a skip) a multi-line entry whose line counts differ, kept joined into one pair.
"""
import collections
import re
import unicodedata

from lingvo_gshard.data import mo_reader

# Longest side kept, in characters: long enough for any real UI sentence or paragraph line, short enough to
# drop licence texts and log dumps that would dominate the token budget of a 100-language batch.
DEFAULT_MAX_CHARS = 400

_CREDIT_MSGIDS = frozenset(['translator-credits', 'translator_credits', 'TRANSLATOR-CREDITS',
                            'Your names', 'Your emails'])
_CREDIT_CONTEXTS = frozenset(['NAME OF TRANSLATORS', 'EMAIL OF TRANSLATORS'])

# A parenthesised accelerator appended to a translated label, e.g. CJK 'ファイル(_F)' or '文件(&F)'.
_PAREN_MNEMONIC_RE = re.compile(r'\s*[(（][_&][^\W_][)）]')
# Qt/KDE accelerators: '&' before a letter, unless it starts an entity such as '&amp;' or '&#160;'.
_AMP_MNEMONIC_RE = re.compile(r'&(?=[^\W_])(?!#?\w+;)')
# GTK accelerator: '_' before a letter. Only stripped when a string has exactly one (see _StripMnemonics).
_UNDERSCORE_MNEMONIC_RE = re.compile(r'(?<!_)_(?=[^\W_])')

# What carries no words: printf conversions (%s, %1$d, %-10.3lf, %%), Qt %1, {0}/{name} fields, Python
# %(name)s, shell $VAR/${VAR}, markup tags and entities.
_PLACEHOLDER_RE = re.compile(
    r'%(?:\d+\$)?[-+ #0\']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t|I64|I32)?'
    r'[diouxXeEfFgGaAcspnmC%]'
    r'|%\d+|%\([^)]*\)[a-zA-Z]|\{[^{}\s]*\}|\$\{?\w+\}?|<[^<>]*>|&#?\w+;|<PRI\w+>')
_LETTER_RE = re.compile(r'[^\W\d_]')  # A word character that is not a digit or '_': a letter.
_PLACEHOLDER_START_RE = re.compile(r'[%{$<&]')
# Control characters (and the byte-order mark). Format characters such as ZWNJ stay: Persian and Indic
# spelling needs them.
_CONTROL_RE = re.compile('[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufeff]')


def _StripMnemonics(text):
  # The membership tests skip the regexes for the ~90% of strings that have no accelerator at all.
  if '(' in text or '\uff08' in text:
    text = _PAREN_MNEMONIC_RE.sub('', text)
  if '&' in text:
    text = text.replace('&&', '\x00')
    text = _AMP_MNEMONIC_RE.sub('', text).replace('\x00', '&')
  if '_' in text:
    # Identifiers (snake_case, %s_%d) contain underscores too; a label has exactly one accelerator, so
    # more than one candidate means these are not mnemonics and the text is left alone.
    if len(_UNDERSCORE_MNEMONIC_RE.findall(text)) == 1:
      text = _UNDERSCORE_MNEMONIC_RE.sub('', text)
    text = text.replace('__', '_')
  return text


def _NormaliseLine(text):
  # NFC so that the same word in precomposed and decomposed form deduplicates; every run of Unicode
  # space (tabs, NBSP, ideographic space) becomes one ASCII space; control characters are dropped.
  text = ' '.join(unicodedata.normalize('NFC', text).split())
  if not text.isprintable():
    text = _CONTROL_RE.sub('', text)
  return text


def HasText(text):
  """True if `text` has a letter once placeholders and markup are removed."""
  if not _LETTER_RE.search(text):
    return False
  if not _PLACEHOLDER_START_RE.search(text):
    return True
  return bool(_LETTER_RE.search(_PLACEHOLDER_RE.sub(' ', text)))


class Cleaner:
  """Cleans entries into pairs and counts what it drops.

  Attributes:
    skips: Counter of skip reason -> number of entries (or lines) dropped.
  """

  def __init__(self, strip_mnemonics=True, max_chars=DEFAULT_MAX_CHARS, skips=None):
    """Constructor.

    Args:
      strip_mnemonics: remove UI accelerators (`_File`, `&Open`, `(_F)`) from both sides.
      max_chars: longest side kept, in characters.
      skips: a Counter to add skip counts to (shared across cleaners of one build), or None for a new one.
    """
    self._strip_mnemonics = strip_mnemonics
    self._max_chars = max_chars
    self.skips = collections.Counter() if skips is None else skips

  def _Clean(self, text):
    if self._strip_mnemonics:
      text = _StripMnemonics(text)
    return [_NormaliseLine(line) for line in text.split('\n')]

  def _Check(self, source, target):
    """Returns a skip reason for one line pair, or None if it is kept."""
    if not source or not target:
      return 'empty'
    if len(source) > self._max_chars or len(target) > self._max_chars:
      return 'too_long'
    if not HasText(source) or not HasText(target):
      return 'no_text'
    if source == target:
      return 'identical'
    return None

  def Pairs(self, source, target):
    """Cleans one raw (source, target) entry.

    A multi-line entry whose sides have the same number of non-empty lines becomes one pair per line
    (UI catalogs wrap paragraphs line by line in both languages); otherwise its lines are joined by
    spaces into a single pair.

    Args:
      source: the foreign-language text (a msgstr, or a TSV/TFDS source).
      target: the English text (a msgid, or a TSV/TFDS target).

    Returns:
      A list of (source, target) string pairs, possibly empty; skips are counted in `self.skips`.
    """
    if not source.strip():
      self.skips['untranslated' if target.strip() else 'empty'] += 1
      return []
    # Check the raw length first so that a 100k-character line costs nothing more.
    if len(source) > 20 * self._max_chars or len(target) > 20 * self._max_chars:
      self.skips['too_long'] += 1
      return []
    src_lines = [l for l in self._Clean(source) if l]
    tgt_lines = [l for l in self._Clean(target) if l]
    if len(src_lines) > 1 and len(src_lines) == len(tgt_lines):
      candidates = list(zip(src_lines, tgt_lines))
    else:
      if len(src_lines) != len(tgt_lines):
        self.skips['line_mismatch'] += 1
      candidates = [(' '.join(src_lines), ' '.join(tgt_lines))]
    pairs = []
    for src, tgt in candidates:
      reason = self._Check(src, tgt)
      if reason:
        self.skips[reason] += 1
      else:
        pairs.append((src, tgt))
    return pairs

  def EntryPairs(self, entry):
    """Cleans one gettext entry (a mo_reader.MoEntry) into (source, target) pairs.

    Plural entries give two pairs: the English singular with msgstr[0] and the English plural with the
    last form. msgstr[0] is the singular in every language that has one; the last form is the general
    plural (e.g. Russian '%d файлов', used for 5-20 items) and, in languages with a single form (ja, zh,
    ko, vi...), the same string as msgstr[0]. Middle forms (paucal, dual) have no English counterpart.
    """
    if entry.msgid in _CREDIT_MSGIDS or entry.context in _CREDIT_CONTEXTS:
      self.skips['translator_credits'] += 1
      return []
    if entry.msgid_plural is None:
      return self.Pairs(entry.msgstrs[0], entry.msgid)
    if not any(s.strip() for s in entry.msgstrs):
      self.skips['untranslated'] += 1
      return []
    return (self.Pairs(entry.msgstrs[0], entry.msgid) +
            self.Pairs(entry.msgstrs[-1], entry.msgid_plural))


def CatalogPairs(catalog: mo_reader.Catalog, cleaner: Cleaner):
  """All clean pairs of a catalog, in catalog order (duplicates included)."""
  pairs = []
  for entry in catalog.entries:
    pairs.extend(cleaner.EntryPairs(entry))
  return pairs
