"""Reads GNU gettext binary catalogs (`.mo` files) with the standard library only.

Layout of a `.mo` file (GNU gettext manual, "The Format of GNU MO Files"), every integer a uint32 in the
byte order given by the magic number:

    0   magic 0x950412de        4   revision (major << 16 | minor; major 0 or 1)
    8   N, number of strings   12   offset of the table of original strings
   16   offset of the table of translated strings
   20   hash table size        24   hash table offset   (unused here: we read every entry)

Each table holds N (length, offset) pairs; a string is `length` bytes at `offset` (plus a NUL we ignore).
An original string is `[context '\\x04'] msgid ['\\0' msgid_plural]`; a translation is the plural forms
joined by NUL. The entry with the empty msgid is the header, whose `Content-Type` names the charset that
every other string is encoded in.

We never raise on a catalog's *content* beyond the structural checks: an entry that cannot be decoded is
counted in `Catalog.undecodable` and left out, so one bad string does not lose a whole catalog.
"""
import codecs
import dataclasses
import re
import struct

_MAGIC = 0x950412de
_HEADER_SIZE = 28
_CHARSET_RE = re.compile(r'charset\s*=\s*([A-Za-z0-9_.:\-]+)', re.IGNORECASE)


class MoFormatError(ValueError):
  """A file is not a readable .mo catalog. The message names the file and the problem on one line."""


@dataclasses.dataclass(frozen=True)
class MoEntry:
  """One translated message.

  Attributes:
    msgid: the English (source-code) string.
    msgstrs: the translations; one item, or one per plural form when `msgid_plural` is set.
    context: the `msgctxt` disambiguator, or None.
    msgid_plural: the English plural string, or None.
  """
  msgid: str
  msgstrs: tuple[str, ...]
  context: str | None = None
  msgid_plural: str | None = None


@dataclasses.dataclass
class Catalog:
  """A decoded catalog.

  Attributes:
    path: where it was read from (for reports and errors).
    byte_order: '<' (little-endian) or '>' (big-endian).
    charset: the Python codec name used to decode strings.
    charset_note: why that charset was used when it is not simply the declared one, else ''.
    headers: the header entry parsed into a dict (`Content-Type`, `Plural-Forms`, ...).
    entries: every non-header entry that decoded.
    undecodable: number of entries left out because they did not decode with `charset`.
  """
  path: str
  byte_order: str
  charset: str
  charset_note: str
  headers: dict[str, str]
  entries: list[MoEntry]
  undecodable: int = 0


def _ParseHeaders(text):
  headers = {}
  for line in text.split('\n'):
    key, sep, value = line.partition(':')
    if sep and key.strip():
      headers[key.strip()] = value.strip()
  return headers


def _LookupCodec(name):
  """Python's name of a text codec that decodes any bytes, or None: a header may name a binary transform
  (base64, zlib), a codec that refuses arbitrary input (idna, punycode) or Python's 'undefined'."""
  try:
    codec = codecs.lookup(name).name
    bytes(range(256)).decode(codec, errors='replace')
  except (LookupError, UnicodeError):
    return None
  return codec


def _ChooseCharset(header_bytes, raw_strings):
  """Returns (codec name, note) for a catalog, or (None, reason) if no charset can be trusted.

  Args:
    header_bytes: the raw header translation (ASCII in every charset gettext supports).
    raw_strings: every raw original and translated string, to test a charset against.
  """
  match = _CHARSET_RE.search(header_bytes.decode('ascii', errors='replace'))
  declared = match.group(1) if match else None
  codec = _LookupCodec(declared) if declared else None
  non_ascii = not all(s.isascii() for s in raw_strings)
  if codec is None:
    # Undeclared (no header, or the template placeholder `charset=CHARSET`) or unknown to Python. An
    # all-ASCII catalog needs no charset; otherwise accept only what is valid UTF-8, never guess further.
    what = f'charset {declared!r} unknown' if declared else 'no charset declared'
    if not non_ascii:
      return 'ascii', what
    if all(_IsUtf8(s) for s in raw_strings):
      return 'utf-8', f'{what}; decoded as UTF-8'
    return None, f'{what} and the text is not UTF-8'
  if codec != 'utf-8' and non_ascii and _IsSingleByte(codec) and all(_IsUtf8(s) for s in raw_strings):
    # A legacy 8-bit label on text that is valid multi-byte UTF-8 throughout is a mislabel (msgfmt run
    # on a re-encoded PO file): random 8-bit text is almost never valid UTF-8, so this guess is safe,
    # while trusting the label would write mojibake into the corpus.
    return 'utf-8', f'declared {declared} but the text is UTF-8'
  return codec, ''


def _IsUtf8(raw):
  try:
    raw.decode('utf-8')
    return True
  except UnicodeError:
    return False


def _IsSingleByte(codec):
  # Multi-byte codecs (Shift-JIS, GB18030, Big5, EUC-*) pair high bytes up, so fewer than 256 characters
  # come out of the 256 byte values.
  return len(bytes(range(256)).decode(codec, errors='replace')) == 256


def ParseMo(data, path='<bytes>'):
  """Parses the bytes of a .mo file.

  Args:
    data: the whole file.
    path: name used in error messages and in the result.

  Returns:
    A Catalog.

  Raises:
    MoFormatError: wrong magic, unsupported revision, truncated tables or strings, or no usable charset.
  """
  if len(data) < _HEADER_SIZE:
    raise MoFormatError(f'{path}: not a .mo file (only {len(data)} bytes)')
  for order in ('<', '>'):
    if struct.unpack_from(order + 'I', data, 0)[0] == _MAGIC:
      break
  else:
    raise MoFormatError(f'{path}: not a .mo file (bad magic {data[:4].hex()})')
  revision, count, orig_offset, trans_offset = struct.unpack_from(order + '4I', data, 4)
  if revision >> 16 not in (0, 1):
    raise MoFormatError(f'{path}: unsupported .mo major revision {revision >> 16}')
  size = len(data)
  for name, offset in (('original', orig_offset), ('translation', trans_offset)):
    if offset + 8 * count > size:
      raise MoFormatError(f'{path}: truncated: {name} table of {count} entries at byte {offset} '
                          f'exceeds the file size {size}')

  def _Strings(offset):
    table = struct.unpack_from(f'{order}{2 * count}I', data, offset)
    out = []
    for i in range(count):
      length, start = table[2 * i], table[2 * i + 1]
      if start + length > size:
        raise MoFormatError(f'{path}: truncated: string {i} at byte {start} (+{length}) exceeds the '
                            f'file size {size}')
      out.append(data[start:start + length])
    return out

  originals = _Strings(orig_offset)
  translations = _Strings(trans_offset)
  header_raw = b''
  for orig, trans in zip(originals, translations):
    if orig == b'':
      header_raw = trans
      break
  charset, note = _ChooseCharset(header_raw, originals + translations)
  if charset is None:
    raise MoFormatError(f'{path}: {note}')

  entries = []
  undecodable = 0
  headers = {}
  for orig, trans in zip(originals, translations):
    try:
      orig_text = orig.decode(charset)
      trans_text = trans.decode(charset)
    except UnicodeError:
      undecodable += 1
      continue
    if orig_text == '':
      headers = _ParseHeaders(trans_text)
      continue
    context = None
    if '\x04' in orig_text:
      context, orig_text = orig_text.split('\x04', 1)
    msgid, _, plural = orig_text.partition('\x00')
    entries.append(MoEntry(msgid=msgid, msgstrs=tuple(trans_text.split('\x00')), context=context,
                           msgid_plural=plural if '\x00' in orig_text else None))
  return Catalog(path=path, byte_order=order, charset=charset, charset_note=note, headers=headers,
                 entries=entries, undecodable=undecodable)


def ReadMo(path):
  """Reads and parses one .mo file; see ParseMo. An unreadable file raises MoFormatError naming it."""
  try:
    with open(path, 'rb') as f:
      data = f.read()
  except OSError as e:
    raise MoFormatError(f'{path}: cannot read: {e.strerror or e}') from None
  return ParseMo(data, path)
