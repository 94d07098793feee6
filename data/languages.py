"""Maps gettext locale names to BCP-47 language tags, and buckets languages by resource size.

A gettext locale is `language[_TERRITORY][.codeset][@modifier]`. The tag keeps what distinguishes a written
language and drops what does not:
  - the codeset is dropped (`ja.eucJP` -> `ja`);
  - a territory is kept unless it is the language's home territory in gettext's own convention, where the
    bare code means the home variant (`pt` is European Portuguese, so `pt_PT` -> `pt` and `pt_BR` -> `pt-BR`;
    `de_DE` -> `de`, `de_CH` -> `de-CH`); Chinese always keeps its territory (`zh_CN` -> `zh-CN`);
  - script modifiers become script subtags (`sr@latin` -> `sr-Latn`, `uz@cyrillic` -> `uz-Cyrl`), other
    registered variants become variant subtags (`ca@valencia` -> `ca-valencia`, the IANA-registered
    Valencian variant; it stays separate from `ca` because its catalogs are written to differ from it);
  - deprecated or macrolanguage codes that gettext uses for one specific language take their IANA preferred
    value (`no` -> `nb`, `mo` -> `ro`, `iw` -> `he`); `zh_Hans`/`zh_Hant` join `zh-CN`/`zh-TW`.
Every English variant (`en`, `en_GB`, `en@quot`, `en@shaw`...) maps to a tag whose language is `en`, which
`IsEnglish` recognises: English is the target side and never a source language.
"""
import re

# Territories that gettext treats as the default of a language (its bare code means this variant).
# Languages whose home territory is their own code upper-cased (de_DE, fr_FR, pt_PT...) need no entry.
_HOME_TERRITORY = {
    'af': 'ZA', 'am': 'ET', 'ar': 'EG', 'as': 'IN', 'ast': 'ES', 'az': 'AZ', 'be': 'BY', 'bn': 'BD',
    'br': 'FR', 'bs': 'BA', 'ca': 'ES', 'cs': 'CZ', 'cy': 'GB', 'da': 'DK', 'el': 'GR', 'en': 'US',
    'et': 'EE', 'eu': 'ES', 'fa': 'IR', 'fur': 'IT', 'ga': 'IE', 'gd': 'GB', 'gl': 'ES', 'gu': 'IN',
    'he': 'IL', 'hi': 'IN', 'hy': 'AM', 'ja': 'JP', 'ka': 'GE', 'kk': 'KZ', 'km': 'KH', 'kn': 'IN',
    'ko': 'KR', 'kw': 'GB', 'ky': 'KG', 'lo': 'LA', 'mai': 'IN', 'ml': 'IN', 'mr': 'IN', 'ms': 'MY',
    'my': 'MM', 'nb': 'NO', 'ne': 'NP', 'nn': 'NO', 'oc': 'FR', 'or': 'IN', 'pa': 'IN', 'ps': 'AF',
    'sl': 'SI', 'sq': 'AL', 'sr': 'RS', 'sv': 'SE', 'sw': 'TZ', 'ta': 'IN', 'te': 'IN', 'tg': 'TJ',
    'uk': 'UA', 'ur': 'PK', 'vi': 'VN', 'wa': 'BE', 'xh': 'ZA', 'zu': 'ZA',
}
# Languages that are written differently per territory, so the territory always stays.
_ALWAYS_TERRITORY = frozenset(['zh'])
# IANA preferred values of deprecated codes, and the specific language gettext means by a macrolanguage.
_LANGUAGE_ALIASES = {'iw': 'he', 'in': 'id', 'ji': 'yi', 'jw': 'jv', 'mo': 'ro', 'no': 'nb', 'tl': 'fil'}
# Modifiers that name a script, by their gettext spellings.
_SCRIPT_MODIFIERS = {
    'latin': 'Latn', 'latn': 'Latn', 'cyrillic': 'Cyrl', 'cyrl': 'Cyrl', 'devanagari': 'Deva',
    'deva': 'Deva', 'arabic': 'Arab', 'arab': 'Arab', 'iqtelif': 'Latn', 'shaw': 'Shaw', 'shavian': 'Shaw',
    'hans': 'Hans', 'hant': 'Hant',
}
# Modifiers that name a registered variant subtag ('ijekavianlatin' is a script and a variant).
_VARIANT_MODIFIERS = {'valencia': ('', 'valencia'), 'ije': ('', 'ijekavsk'),
                      'ijekavian': ('', 'ijekavsk'), 'ijekavianlatin': ('Latn', 'ijekavsk')}
# Modifiers that change nothing about the language (`@euro` currency, English quote styles).
_IGNORED_MODIFIERS = frozenset(['euro', 'quot', 'boldquot'])
# Chinese written in a script: the territory whose catalogs use it.
_CHINESE_SCRIPT_TERRITORY = {'Hans': 'CN', 'Hant': 'TW'}

_LOCALE_RE = re.compile(r'^([a-zA-Z]{2,3})(?:_([A-Za-z]{2}|[A-Za-z]{4}|\d{3}))?(?:\.([\w-]+))?(?:@(\w+))?$')

HIGH, MEDIUM, LOW = 'high', 'medium', 'low'


def LocaleToTag(locale):
  """Returns the BCP-47 tag of a gettext locale name, or None if it names no language (`C`, `POSIX`).

  Args:
    locale: a locale directory name such as 'pt_BR', 'sr@latin', 'zh_CN.UTF-8', 'ca@valencia'.
  """
  match = _LOCALE_RE.match(locale)
  if not match:
    return None
  language, territory, _, modifier = match.groups()
  language = language.lower()
  if language in ('c',):
    return None
  language = _LANGUAGE_ALIASES.get(language, language)
  script, variant = '', ''
  if territory and len(territory) == 4:  # zh_Hans, sr_Latn: a script written in the territory slot.
    script, territory = territory.title(), None
  if modifier:
    mod = modifier.lower()
    if mod in _SCRIPT_MODIFIERS:
      script = _SCRIPT_MODIFIERS[mod]
    elif mod in _VARIANT_MODIFIERS:
      mod_script, variant = _VARIANT_MODIFIERS[mod]
      script = mod_script or script
    elif mod not in _IGNORED_MODIFIERS:
      variant = mod
  if territory:
    territory = territory.upper()
    home = _HOME_TERRITORY.get(language, language.upper())
    if territory == home and language not in _ALWAYS_TERRITORY:
      territory = None
  if language == 'zh' and script in _CHINESE_SCRIPT_TERRITORY and not territory:
    territory, script = _CHINESE_SCRIPT_TERRITORY[script], ''
  return '-'.join(part for part in (language, script, territory, variant) if part)


def IsEnglish(tag):
  """True for every English tag (en, en-GB, en-Shaw...): English is the target, never a source."""
  return tag == 'en' or tag.startswith('en-')


def Buckets(sizes):
  """Assigns each language a resource bucket by tercile of its training size.

  The largest third (rounded up) is `high`, the next third `medium`, the rest `low`; ties are broken by
  tag so the assignment is deterministic. Terciles, not fixed thresholds, because the same rule must make
  sense for a 40k-pair gettext corpus and a billion-pair web corpus (the paper orders languages from high
  to low resource the same relative way).

  Args:
    sizes: dict tag -> number of training pairs.

  Returns:
    dict tag -> 'high' | 'medium' | 'low'.
  """
  order = sorted(sizes, key=lambda tag: (-sizes[tag], tag))
  n = len(order)
  high_end = -(-n // 3)
  medium_end = high_end + -(-(n - high_end) // 2)
  return {tag: HIGH if i < high_end else MEDIUM if i < medium_end else LOW for i, tag in enumerate(order)}
