"""Assembles source units into a multilingual corpus with leak-free dev/test splits.

Steps: merge units by direction key (directions.py: 'fr' is French->English, 'en-fr' the reverse; X->English
inputs are turned into the build's directions), deduplicate each direction's pairs, keep the N largest
languages (or the requested ones) in every direction they have, split every pair by a stable hash of its
**English** side, cap the dev and test sets per direction, and bucket directions into high/medium/low
resource by tercile of training size.

Why hash the English side: the target side is shared across languages (the same English UI string is
translated into 150 languages), so a per-language random split would put the English sentence of a German
test pair into the French training data, and a multilingual model would have seen the answer. Splitting on
the English key sends that sentence to the same split in every language. Dev/test pairs over the per-language
cap go nowhere (not back to train), or they would reintroduce exactly that leak.

More than one direction: the English-side hash sends a pair and its reverse to the same split (fr-en's test
is en-fr's test). The other side can still recur: 'Ouvrir' translates both 'Open' and 'Open...', whose
hashes differ. So a corpus with any direction besides X->English also drops every dev/test pair one of whose
sentences (by the same words-only key, per language) occurs on either side of a training pair of any
direction, before the caps; they are counted as `heldout_seen_in_train`. A pair without English (de-fr)
splits by its target side. X->English corpora keep the split they always had.
"""
import dataclasses
import hashlib
import re

from lingvo_gshard.data import directions
from lingvo_gshard.data import language_codes
from lingvo_gshard.data import languages
from lingvo_gshard.data import report as report_lib

TRAIN, DEV, TEST = 'train', 'dev', 'test'
SPLITS = (TRAIN, DEV, TEST)

_KEY_RE = re.compile(r'[\W_]+')


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
  """Knobs of corpus assembly (all recorded in the manifest).

  Attributes:
    num_languages: keep this many languages, the largest by deduplicated pairs (ties by tag).
    languages: if non-empty, keep exactly these instead (each must exist in the sources): a language in
      every direction the build has it ('fr'), or one direction ('fr-en', 'en-fr').
    dev_fraction: fraction of English keys (by hash) that are dev in every language.
    test_fraction: fraction of English keys (by hash) that are test in every language.
    max_dev: most dev pairs per language; the rest go nowhere.
    max_test: most test pairs per language; the rest go nowhere.
    min_train: languages with fewer training pairs are dropped (reported), so none is near-empty.
    new_languages: tags the IANA registry lacks that the user declared as languages of their own (kept in
      the manifest, so a reader of the corpus sees that they were meant).
    direction: what X->English inputs become (directions.DIRECTIONS): 'xx-en' themselves, 'en-xx' reversed
      (key 'en-<tag>'), 'both'. Inputs that name their own direction (a TSV file given as en-de=...) stay.
  """
  num_languages: int = 100
  languages: tuple[str, ...] = ()
  dev_fraction: float = 0.03
  test_fraction: float = 0.03
  max_dev: int = 1000
  max_test: int = 1000
  min_train: int = 1
  new_languages: tuple[str, ...] = ()
  direction: str = 'xx-en'

  def Validate(self):
    if self.direction not in directions.DIRECTIONS:
      raise report_lib.DataError(f'direction must be one of {", ".join(directions.DIRECTIONS)}, got '
                                 f'{self.direction!r}')
    if self.num_languages < 1:
      raise report_lib.DataError(f'num_languages must be >= 1, got {self.num_languages}')
    for name in ('dev_fraction', 'test_fraction'):
      if not 0.0 <= getattr(self, name) < 1.0:
        raise report_lib.DataError(f'{name} must be in [0, 1), got {getattr(self, name)}')
    if self.dev_fraction + self.test_fraction >= 1.0:
      raise report_lib.DataError('dev_fraction + test_fraction must be < 1 (nothing left to train on)')
    for name in ('max_dev', 'max_test', 'min_train'):
      if getattr(self, name) < 0:
        raise report_lib.DataError(f'{name} must be >= 0, got {getattr(self, name)}')


def EnglishKey(target):
  """The key that decides a pair's split: the English side case-folded, with only its words.

  'Open File...' and 'open file' share a key, so near-identical English strings cannot straddle splits.
  """
  return _KEY_RE.sub(' ', target.casefold()).strip()


def SplitHash(target):
  """A stable number in [0, 1) for an English sentence (same on every machine and Python version)."""
  digest = hashlib.sha256(EnglishKey(target).encode('utf-8')).digest()
  return int.from_bytes(digest[:8], 'big') / 2.0**64


def TrainOrderKey(tag, source, target):
  """Where a training pair is stored in its language's train split: a stable hash of the language tag and
  the pair, so each language has its own order, independent of the order the inputs were read in."""
  return hashlib.sha256('\0'.join((tag, source, target)).encode('utf-8')).digest()


def EnglishSide(key, source, target):
  """The side of a pair whose hash decides its split: the English one, else (no English) the target."""
  return source if directions.Source(key) == directions.ENGLISH else target


def SplitOf(target, config):
  """The split an English sentence belongs to, before per-language caps."""
  h = SplitHash(target)
  if h < config.dev_fraction:
    return DEV
  if h < config.dev_fraction + config.test_fraction:
    return TEST
  return TRAIN


@dataclasses.dataclass
class Language:
  """One language's data. `splits[name]` lists (source, target) pairs; `origins` the inputs it came from."""
  tag: str
  splits: dict[str, list[tuple[str, str]]]
  origins: list[str]
  bucket: str = ''
  dropped_over_cap: int = 0

  def Counts(self):
    return {name: len(self.splits[name]) for name in SPLITS}


@dataclasses.dataclass
class Corpus:
  """The assembled corpus: kept languages, largest first, and the languages left out with their sizes."""
  languages: dict[str, Language]
  left_out: dict[str, int]
  config: CorpusConfig


def Assemble(units, config, report):
  """Builds a Corpus from source units.

  Args:
    units: iterable of sources.Unit (consumed once).
    config: CorpusConfig.
    report: report.BuildReport; duplicates and over-cap pairs are counted in it.

  Returns:
    A Corpus.

  Raises:
    report.DataError: no data at all, or a requested language that is not in the sources.
  """
  config.Validate()
  merged, origins = {}, {}
  for unit in units:
    oriented = (directions.Orient(unit.tag, unit.pairs, config.direction)
                if directions.Parse(unit.tag)[1] == directions.ENGLISH else [(unit.tag, unit.pairs)])
    for key, unit_pairs in oriented:
      # A dict keeps the first occurrence of each pair and the order, so deduplication is deterministic.
      pairs = merged.setdefault(key, {})
      before = len(pairs)
      pairs.update(dict.fromkeys(unit_pairs))
      report.skips['duplicate'] += len(unit_pairs) - (len(pairs) - before)
      origins.setdefault(key, []).append(unit.origin)
  if not any(merged.values()):
    skipped = ', '.join(f'{k} {v}' for k, v in report.skips.most_common(4)) or 'nothing read'
    raise report_lib.DataError(f'the sources gave no usable pairs (skipped: {skipped})')

  if config.languages:
    wanted = []
    have = sorted(t for t in merged if merged[t])
    for code in config.languages:
      tag = language_codes.AsTag(code)
      if directions.Parse(code, '--languages')[0] != code:  # a direction: fr-en, en-fr
        source, target = (language_codes.AsTag(t) for t in directions.Parse(code))
        wanted += language_codes.CheckIn([directions.Key(source, target)], have, '--languages', 'the sources read')
      else:  # a language: in every direction the build has it
        wanted += ([k for k in (tag, directions.Key(directions.ENGLISH, tag)) if k in have] or
                   language_codes.CheckIn([code], have, '--languages', 'the sources read'))
    chosen = list(dict.fromkeys(wanted))
  else:
    chosen = _LargestLanguages(merged, config.num_languages)

  kept = {}
  left_out = {}
  multi = any(directions.Parse(tag)[1] != directions.ENGLISH for tag in chosen)
  split = {tag: _SplitLanguage(tag, list(merged[tag]), origins[tag], config, capped=not multi)
           for tag in chosen}
  if multi:
    _DropHeldoutSeenInTrain(split, report)
    for lang in split.values():
      _Cap(lang, config)
  for tag in chosen:
    lang = split[tag]
    if len(lang.splits[TRAIN]) < max(config.min_train, 1):
      left_out[tag] = len(merged[tag])
      report.skips['language_too_small'] += 1
      continue
    report.skips['over_heldout_cap'] += lang.dropped_over_cap
    kept[tag] = lang
  for tag in merged:
    if tag not in kept and tag not in left_out:
      left_out[tag] = len(merged[tag])
  if not kept:
    raise report_lib.DataError(f'no language has at least {max(config.min_train, 1)} training pairs')
  buckets = languages.Buckets({tag: len(lang.splits[TRAIN]) for tag, lang in kept.items()})
  for tag, lang in kept.items():
    lang.bucket = buckets[tag]
  order = sorted(kept, key=lambda t: (-len(kept[t].splits[TRAIN]), t))
  return Corpus(languages={t: kept[t] for t in order}, left_out=left_out, config=config)


def _LargestLanguages(merged, n):
  """The keys of the n largest languages, in every direction they have (the rest are left out): a pivot
  key's language is its non-English side ('fr' and 'en-fr' are French), any other key ('de-fr') its own; a
  language's size is its largest direction's. Ordered by size, then key."""
  def Group(key):
    source, target = directions.Parse(key)
    return target if source == directions.ENGLISH else source if target == directions.ENGLISH else key
  size = {}
  for key, pairs in merged.items():
    size[Group(key)] = max(size.get(Group(key), 0), len(pairs))
  top = set(sorted(size, key=lambda g: (-size[g], g))[:n])
  return [t for t in sorted(merged, key=lambda t: (-len(merged[t]), t)) if Group(t) in top]


def _SentenceKey(text):
  return EnglishKey(text)  # words only, case-folded: the same normalisation in every language


def _DropHeldoutSeenInTrain(split, report):
  """Drops dev/test pairs with a sentence that a training pair of any direction holds (see the docstring)."""
  seen = {}
  for key, lang in split.items():
    source, target = directions.Parse(key)
    for s, t in lang.splits[TRAIN]:
      seen.setdefault(source, set()).add(_SentenceKey(s))
      seen.setdefault(target, set()).add(_SentenceKey(t))
  for key, lang in split.items():
    source, target = directions.Parse(key)
    for name in (DEV, TEST):
      pairs = lang.splits[name]
      lang.splits[name] = [(s, t) for s, t in pairs if _SentenceKey(s) not in seen.get(source, ())
                           and _SentenceKey(t) not in seen.get(target, ())]
      report.skips['heldout_seen_in_train'] += len(pairs) - len(lang.splits[name])


def _Cap(lang, config):
  """Keeps the first max_dev / max_test pairs (in English-hash order) of the held-out splits."""
  for name, cap in ((DEV, config.max_dev), (TEST, config.max_test)):
    lang.dropped_over_cap += max(0, len(lang.splits[name]) - cap)
    lang.splits[name] = lang.splits[name][:cap]


def _SplitLanguage(tag, pairs, origins, config, capped=True):
  """Splits one direction's pairs. Dev and test are ordered by English hash, so that the caps keep the same
  English sentences in every direction (a multi-way parallel dev/test set); train by TrainOrderKey. No
  order depends on the order the inputs were read in. Without `capped`, the caller caps (_Cap)."""
  keyed = sorted((SplitHash(EnglishSide(tag, src, tgt)), src, tgt) for src, tgt in pairs)
  splits = {name: [] for name in SPLITS}
  dropped = 0
  caps = {DEV: config.max_dev, TEST: config.max_test}
  for h, src, tgt in keyed:
    heldout_end = config.dev_fraction + config.test_fraction
    name = DEV if h < config.dev_fraction else TEST if h < heldout_end else TRAIN
    if capped and name != TRAIN and len(splits[name]) >= caps[name]:
      dropped += 1
      continue
    splits[name].append((src, tgt))
  # Training pairs in a per-language pseudo-random order instead: the English-hash order is the same in
  # every language, so the first thousands of each language's stored stream (all a short run's shuffle
  # buffers reach) would share their English sentences, and a multilingual model would see a few thousand
  # English targets again and again under 100 sources.
  splits[TRAIN].sort(key=lambda pair: TrainOrderKey(tag, *pair))
  return Language(tag=tag, splits=splits, origins=list(origins), dropped_over_cap=dropped)
