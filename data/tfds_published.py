"""A TFDS translation dataset kept as published: its own train, dev and test splits, streamed.

`sources.TfdsSource` reads one split into the corpus, which re-splits it by a hash of the English side (and
caps dev and test), as the gettext catalogs need. A WMT user wants the dataset's own splits instead —
train on `train`, report on `newstest` (`validation`, `test`) — and a 40 M-pair dataset must not have to fit
in memory. `PublishedTfds.StreamedCorpus` therefore makes a corpus whose splits are the dataset's, read
twice through `tfds.load`: a first pass counts each language's cleaned pairs per split (counters only),
then the builder streams each language's pairs of each split into gettext_m4 as it writes them (languages
largest first, each a contiguous slice, as every build stores them). Memory stays that of one example and
TFDS's read buffers, whatever the dataset's size; reading takes (languages + 1) passes over each split.

Pairs are kept as published: cleaned (the same rules as every input), not deduplicated, re-split or capped
(`max_pairs` caps a split if asked). The manifest records the dataset's name, version and split names.
"""
import dataclasses
from typing import Dict, Iterator, Optional, Tuple

from lingvo_gshard.data import cleaning
from lingvo_gshard.data import corpus as corpus_lib
from lingvo_gshard.data import language_codes
from lingvo_gshard.data import languages
from lingvo_gshard.data import report as report_lib
from lingvo_gshard.data import sources
from lingvo_gshard.data import tfds_scratch


class _Stream:
  """One language's pairs of one split, read from TFDS each time it is iterated; its length is counted."""

  def __init__(self, owner: 'PublishedTfds', split: str, tag: str, count: int):
    self.owner, self.split, self.tag, self.count = owner, split, tag, count

  def __len__(self):
    return self.count

  def __bool__(self):
    return self.count > 0

  def __iter__(self) -> Iterator[Tuple[str, str]]:
    n = 0
    for tag, pair in self.owner.Pairs(self.split, report_lib.BuildReport().skips):
      if tag == self.tag:
        yield pair
        n += 1
        if n == self.count:
          return
    if n != self.count:
      raise report_lib.DataError(f'TFDS dataset {self.owner.name} ({self.split}): {self.tag} gave {n} pairs on '
                                 f'a second read, {self.count} on the first (did the dataset change?)')


class PublishedTfds:
  """A TFDS translation dataset with its own splits (see the module docstring)."""

  def __init__(self, name: str, splits: Dict[str, str], data_dir: Optional[str] = None, download: bool = True,
               max_chars: int = cleaning.DEFAULT_MAX_CHARS, max_pairs: int = 0):
    """`splits`: {corpus split ('train', 'dev', 'test'): the dataset's split ('train', 'validation', ...)};
    a corpus split not named is empty. `max_pairs` > 0: at most this many pairs per language and split."""
    unknown = set(splits) - set(corpus_lib.SPLITS)
    if unknown:
      raise report_lib.DataError(f'TFDS dataset {name}: {sorted(unknown)[0]} is not a corpus split '
                                 f'({", ".join(corpus_lib.SPLITS)})')
    self.name, self.splits, self.data_dir, self.download = name, dict(splits), data_dir, download
    self.max_chars, self.max_pairs = max_chars, max_pairs
    self.version = ''

  def _Load(self, split: str):
    """The examples of a corpus split's published split, as NumPy, streamed."""
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    return tfds.as_numpy(self.Dataset(split))

  def Dataset(self, split: str):
    """The tf.data pipeline that reads a corpus split's published split."""
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    published = self.splits[split]
    try:
      with tfds_scratch.Scratch():
        builder = tfds.builder(self.name, data_dir=self.data_dir)
        if self.download:
          builder.download_and_prepare()
      available = list(builder.info.splits)
      if published not in available:
        raise report_lib.DataError(f'TFDS dataset {self.name}: no split {published!r} (--tfds_{split}_split); '
                                   f'it has {", ".join(sorted(available))}')
      self.version = str(builder.info.version)
      # One file at a time, in order: every pass reads the pairs in the same (the dataset's) order. No
      # auto-cache: TFDS caches a split it finds small in memory on first read, which makes memory grow
      # with the split's size while the passes stream it.
      read_config = tfds.ReadConfig(interleave_cycle_length=1, try_autocache=False)
      return builder.as_dataset(split=published, shuffle_files=False, read_config=read_config)
    except report_lib.DataError:
      raise
    except Exception as e:  # pylint: disable=broad-except  (TFDS raises many kinds for a missing dataset)
      first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise report_lib.DataError(f'TFDS dataset {self.name} ({published}): cannot load: {first_line}') from None

  def Pairs(self, split: str, skips) -> Iterator[Tuple[str, Tuple[str, str]]]:
    """(tag, (source, English)) of every cleaned pair of a corpus split, in the dataset's order; what is
    skipped is counted in `skips`."""
    if split not in self.splits:
      return
    cleaner = cleaning.Cleaner(strip_mnemonics=False, max_chars=self.max_chars, skips=skips)
    for example in self._Load(split):
      for lang, source, target in sources.TranslationExamplePairs(example):
        tag = languages.LocaleToTag(lang.replace('-', '_')) if sources.TFDS_LANG_RE.match(lang) else None
        if tag is None or languages.IsEnglish(tag) or not language_codes.Registered(tag):
          skips['tfds_unknown_language'] += 1
          continue
        for pair in cleaner.Pairs(source, target):
          yield tag, pair

  def StreamedCorpus(self, config: corpus_lib.CorpusConfig, report, log) -> corpus_lib.Corpus:
    """The corpus of the dataset's splits, counted now and read again as the builder writes it."""
    counts: Dict[str, Dict[str, int]] = {}
    for split in corpus_lib.SPLITS:
      n = 0
      for tag, _ in self.Pairs(split, report.skips):
        per = counts.setdefault(tag, dict.fromkeys(corpus_lib.SPLITS, 0))
        if not self.max_pairs or per[split] < self.max_pairs:
          per[split] += 1
        n += 1
      if split in self.splits:
        log(f'  {self.name} {self.splits[split]} (the corpus\' {split}): {n} clean pairs')
    trained = {tag: c for tag, c in counts.items() if c['train']}
    if not trained:
      raise report_lib.DataError(f'TFDS dataset {self.name} ({self.splits.get("train", "no train split")}): '
                                 'no English-paired training examples')
    order = sorted(trained, key=lambda tag: (-trained[tag]['train'], tag))
    if config.languages:
      order = [t for t in language_codes.CheckIn(config.languages, order, 'languages',
                                                f'TFDS dataset {self.name}')]
    kept, left_out = order[:config.num_languages], {t: trained[t]['train'] for t in order[config.num_languages:]}
    buckets = languages.Buckets({t: trained[t]['train'] for t in kept})
    langs = {}
    for tag in kept:
      origin = f'tfds:{self.name}:{self.version}:{tag}'
      report.sources.append(report_lib.SourceRecord(origin, tag, '', trained[tag]['train']))
      langs[tag] = corpus_lib.Language(
          tag=tag, splits={s: _Stream(self, s, tag, trained[tag][s]) for s in corpus_lib.SPLITS},
          origins=[origin], bucket=buckets[tag])
    built = corpus_lib.Corpus(languages=langs, left_out=left_out, config=config)
    built.published = {'name': self.name, 'version': self.version, 'splits': dict(self.splits),
                       'max_pairs': self.max_pairs}
    return built
