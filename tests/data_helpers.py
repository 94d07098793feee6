"""Test helpers for the data tests: a tiny GNU .mo writer and small corpus fixtures.

The writer produces the same layout as `msgfmt` (header, sorted original strings, no hash table), in either
byte order and any charset, so tests can make catalogs with exactly the quirks they need.
"""
import os
import struct


def MoBytes(entries, charset='UTF-8', byte_order='<', header=None, magic=0x950412de, revision=0):
  """The bytes of a .mo file.

  Args:
    entries: list of (msgid, msgstr) or (msgid, msgstr, context) or
      ((msgid, msgid_plural), [msgstr0, msgstr1, ...], context-or-None).
    charset: the declared charset, also used to encode the strings; None writes no charset declaration.
    byte_order: '<' or '>'.
    header: full header text to use instead of the default one (None: the default with `charset`).
    magic: the magic number to write (to make broken files).
    revision: the revision number to write.
  """
  codec = charset or 'utf-8'
  if header is None:
    header = 'Project-Id-Version: test 1.0\nMIME-Version: 1.0\n'
    if charset:
      header += f'Content-Type: text/plain; charset={charset}\n'
    header += 'Plural-Forms: nplurals=2; plural=(n != 1);\n'
  pairs = [(b'', header.encode(codec))]
  for entry in entries:
    msgid, msgstr = entry[0], entry[1]
    context = entry[2] if len(entry) > 2 else None
    if isinstance(msgid, tuple):
      orig = '\x00'.join(msgid)
      trans = '\x00'.join(msgstr)
    else:
      orig, trans = msgid, msgstr
    if context is not None:
      orig = context + '\x04' + orig
    pairs.append((orig.encode(codec), trans.encode(codec)))
  pairs.sort()
  count = len(pairs)
  orig_table = 28
  trans_table = orig_table + 8 * count
  data_start = trans_table + 8 * count
  blob = b''
  orig_entries, trans_entries = [], []
  for raw, out in ((p[0] for p in pairs), orig_entries), ((p[1] for p in pairs), trans_entries):
    for s in raw:
      out.append((len(s), data_start + len(blob)))
      blob += s + b'\x00'
  head = struct.pack(byte_order + '7I', magic, revision, count, orig_table, trans_table, 0, 0)
  tables = b''.join(struct.pack(byte_order + '2I', *e) for e in orig_entries + trans_entries)
  return head + tables + blob


def WriteMo(path, entries, **kwargs):
  """Writes MoBytes(entries, **kwargs) to path (directories created) and returns the path."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'wb') as f:
    f.write(MoBytes(entries, **kwargs))
  return path


def WriteLocaleTree(root, catalogs):
  """Writes `root/<locale>/LC_MESSAGES/<domain>.mo` files.

  Args:
    root: directory to create the tree in.
    catalogs: dict (locale, domain) -> list of entries (see MoBytes), or -> (entries, kwargs dict).
  """
  for (locale, domain), spec in catalogs.items():
    entries, kwargs = spec if isinstance(spec, tuple) else (spec, {})
    WriteMo(os.path.join(root, locale, 'LC_MESSAGES', domain + '.mo'), entries, **kwargs)
  return root


def Sentences(n, offset=0):
  """n distinct English sentences (different words, so their split keys differ)."""
  words = ['open', 'close', 'save', 'print', 'delete', 'rename', 'copy', 'move', 'show', 'hide']
  out = []
  for i in range(offset, offset + n):
    parts, k = [], i
    for _ in range(4):
      parts.append(words[k % 10])
      k //= 10
    out.append(' '.join(parts).capitalize() + f' item{i}')
  return out
