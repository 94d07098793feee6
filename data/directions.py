"""Translation directions: which language a corpus pair goes from and to, and the key that names it.

A corpus is keyed by direction. X->English, the paper's setting and the default, keeps the bare source tag
as its key ('fr', 'pt-BR'), so every corpus, experiment and report written before directions existed reads
the same; any other direction is 'source-target' ('en-fr', 'de-fr', 'en-zh-CN'). `Parse` reads either form,
and also 'fr-en', which is the key 'fr'.

Language tags contain hyphens themselves ('zh-CN', 'sr-Latn'), so 'en-zh-CN' is split where the part after
the hyphen starts with a language subtag (2-3 lowercase letters): regions are upper case ('CN'), scripts
capitalised ('Latn') and variants 5-8 characters long, in the spelling the corpus uses for every tag
(language_codes.AsTag / CheckNew).
"""
import re
from typing import Iterable, List, Sequence, Tuple

from lingvo_gshard.data import report as report_lib

ENGLISH = 'en'
# What a build turns English-pivot inputs (gettext catalogs, X->English TSV files and datasets) into.
DIRECTIONS = ('xx-en', 'en-xx', 'both')

_LANGUAGE_SUBTAG = re.compile(r'[a-z]{2,3}(?:$|[_@])')  # '@', '_': a locale as typed (pt_BR)


def Key(source: str, target: str) -> str:
  """The corpus key of a direction: the bare source tag into English, else 'source-target'."""
  return source if target == ENGLISH else f'{source}-{target}'


def Parse(key: str, what: str = 'direction') -> Tuple[str, str]:
  """(source tag, target tag) of a key or of a 'source-target' spelling ('fr' and 'fr-en' -> ('fr', 'en')).

  Raises:
    report.DataError: one line naming `what`, when the key splits into two languages in more than one way or
      names the same language on both sides.
  """
  parts = key.split('-')
  splits = [('-'.join(parts[:i]), '-'.join(parts[i:])) for i in range(1, len(parts))
            if _LANGUAGE_SUBTAG.match(parts[i]) and _LANGUAGE_SUBTAG.match(parts[0])]
  if not splits:
    return key, ENGLISH
  if len(splits) > 1:
    options = ' or '.join(f'{s} -> {t}' for s, t in splits)
    raise report_lib.DataError(f'{what}: {key!r} reads as {options}; write regions in upper case (pt-BR) and '
                               'scripts capitalised (sr-Latn)')
  source, target = splits[0]
  if source == target:
    raise report_lib.DataError(f'{what}: {key!r} translates {source} into itself')
  return source, target


def Normalize(key: str, what: str = 'direction') -> str:
  """The corpus key of any spelling: 'fr-en' -> 'fr', 'en-fr' -> 'en-fr'."""
  return Key(*Parse(key, what))


def Source(key: str) -> str:
  return Parse(key)[0]


def Target(key: str) -> str:
  return Parse(key)[1]


def Label(key: str) -> str:
  """'fr' -> 'fr-en': the direction spelled out, for tables."""
  return '-'.join(Parse(key))


def Languages(keys: Iterable[str]) -> List[str]:
  """Every language of the directions, English first, then in order of first appearance."""
  out = [ENGLISH]
  for key in keys:
    out += Parse(key)
  return list(dict.fromkeys(out))


def Targets(keys: Iterable[str]) -> List[str]:
  """The target languages of the directions, in order of first appearance."""
  return list(dict.fromkeys(Target(k) for k in keys))


def IsEnglishPivot(key: str) -> bool:
  return ENGLISH in Parse(key)


def Orient(tag: str, pairs: Sequence[Tuple[str, str]], direction: str) -> List[Tuple[str, List]]:
  """The (key, pairs) an X->English input gives under a build's `direction` (one of DIRECTIONS): itself for
  'xx-en', its pairs swapped under the key 'en-<tag>' for 'en-xx', both for 'both'."""
  if direction not in DIRECTIONS:
    raise report_lib.DataError(f'--direction must be one of {", ".join(DIRECTIONS)}, got {direction!r}')
  out = []
  if direction in ('xx-en', 'both'):
    out.append((tag, list(pairs)))
  if direction in ('en-xx', 'both'):
    out.append((Key(ENGLISH, tag), [(t, s) for s, t in pairs]))
  return out
