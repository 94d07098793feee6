"""Language codes as a user types them, checked against the IANA registry or a corpus' language table.

A code comes from a flag (`--languages=fr`, `--tsv=de=...`), a locale directory or a dataset's config. It is
first read the way the corpus reads it (a gettext locale such as `pt_BR` becomes the tag `pt-BR`, see
languages.LocaleToTag), then:
  - `Registered` asks the IANA language subtag registry (the `langcodes` library), so `fr`, `frr`, `sr-Latn`
    or `ca-valencia` pass and a typo such as `fx` does not;
  - `CheckNew` refuses a tag the registry lacks unless the user declared it (`--new_languages=xx`), since a
    typo would otherwise become a language of its own, and a registered code in a non-standard spelling
    (`fre` for `fr`), which would split one language in two;
  - `CheckIn` refuses a code that is not in a corpus' language table.
Every refusal is one line naming what the user typed, where it came from and the closest codes: the same tag
written differently (`fre`, `fra`, `French` -> `fr`) and near spellings among the candidates.
"""
import difflib
from typing import Iterable, List, Optional, Sequence

import langcodes

from lingvo_gshard.data import languages
from lingvo_gshard.data import report as report_lib


def AsTag(code: str) -> str:
  """The corpus' spelling of a code: a locale (`pt_BR`, `sr@latin`) as its tag, anything else unchanged."""
  code = code.strip()
  return languages.LocaleToTag(code.replace('-', '_')) or code


def Registered(tag: str) -> bool:
  """Whether every subtag of `tag` is in the IANA registry (private-use `qaa`..`qtz` included)."""
  try:
    return langcodes.tag_is_valid(tag)
  except (ValueError, LookupError):
    return False


def Name(tag: str) -> str:
  """English name of a registered tag (`fr` -> 'French'), '' for any other."""
  if not Registered(tag):
    return ''
  return langcodes.Language.get(tag).display_name()


def _SameLanguage(code: str) -> List[str]:
  """Tags that write `code` another way: an ISO 639-2/3 code (`fre`, `fra`), a name (`French`), a locale."""
  out = []
  if Registered(code):
    out.append(langcodes.standardize_tag(code))
  try:
    out.append(langcodes.find(code).to_tag())
  except (LookupError, ValueError):
    pass
  out.append(AsTag(code))
  return [t for t in dict.fromkeys(out) if t and t != code]


def Closest(code: str, candidates: Optional[Iterable[str]] = None, n: int = 3) -> List[str]:
  """The nearest tags to `code`: the same language spelled as a tag first, then its regional or script
  variants among `candidates`, then close spellings among them (without candidates, only the first)."""
  pool = None if candidates is None else list(candidates)
  out = [t for t in _SameLanguage(code) if pool is None or t in pool]
  if pool:
    # The same language in another region or script: `pt` -> `pt-BR`, `zh` -> `zh-CN`, `zh-TW`.
    forms = {code.lower()} | {t.lower() for t in _SameLanguage(code)}
    out += [c for c in pool if c.split('-')[0].lower() in forms]
    lowered = {c.lower(): c for c in pool}
    out += [lowered[c] for c in difflib.get_close_matches(code.lower(), list(lowered), n=n, cutoff=0.6)]
  return list(dict.fromkeys(out))[:n]


def _Hint(code: str, candidates: Optional[Sequence[str]] = None) -> str:
  close = Closest(code, candidates)
  if not close:
    return ''
  return '; closest: ' + ', '.join(f'{t} ({Name(t)})' if Name(t) else t for t in close)


def CheckNew(code: str, what: str, new_languages: Sequence[str] = ()) -> str:
  """The tag of `code` if the registry has it or the user declared it in `new_languages`.

  Raises:
    report.DataError: one line naming `what` (the flag or file it came from), the code and the closest tags.
  """
  tag = AsTag(code)
  if tag in new_languages or code in new_languages:
    return tag
  if Registered(tag):
    standard = langcodes.standardize_tag(tag)
    if standard == tag:
      return tag
    # `fre` and `fr` are one language: two spellings would split its data into two corpus languages.
    raise report_lib.DataError(f'{what}: write {code!r} as {standard} ({Name(standard)}), the tag the corpus '
                               'uses for it')
  shown = code if code.isprintable() else repr(code)  # the error stays one line whatever was typed
  raise report_lib.DataError(
      f'{what}: {code!r} is not a registered language tag{_Hint(code)}; to add a language that has no '
      f'tag, declare it with --new_languages={shown}')


def CheckIn(codes: Iterable[str], known: Sequence[str], what: str, where: str) -> List[str]:
  """`codes` as tags, each of which must be in `known` (a corpus' language table, described by `where`).

  Raises:
    report.DataError: one line naming `what`, the first unknown code, `where` and the closest tags in it.
  """
  out = []
  for code in codes:
    tag = AsTag(code)
    if tag not in known:
      tag = code if code in known else tag
    if tag not in known:
      raise report_lib.DataError(
          f'{what}: language {code!r} is not in {where}{_Hint(code, known)} ({len(known)} languages)')
    out.append(tag)
  return out


def CheckDeclared(new_languages: Sequence[str], what: str = '--new_languages') -> List[str]:
  """The declared new languages, each a well-formed tag (letters, digits and hyphens, a 2-8 letter first
  subtag), so a declaration cannot smuggle in a path or an empty name."""
  out = []
  for code in new_languages:
    first, *rest = code.split('-')
    if not (2 <= len(first) <= 8 and first.isalpha() and first.isascii()
            and all(p and p.isalnum() and p.isascii() and len(p) <= 8 for p in rest)):
      raise report_lib.DataError(f'{what}: {code!r} is not a language tag (letters, then -subtags)')
    out.append(code)
  return out
