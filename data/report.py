"""What a corpus build read, kept and skipped, and the error type for fatal bad input."""
import collections
import dataclasses


class DataError(Exception):
  """Fatal bad input. The message is one line naming the file, flag or language at fault."""


@dataclasses.dataclass
class SourceRecord:
  """One input unit (a catalog, a TSV file, a TFDS split) as it goes into the manifest.

  Attributes:
    origin: file path (`deb.deb:path/in/archive` for a Debian package member) or TFDS name and split.
    tag: BCP-47 language tag of its source side.
    sha256: checksum of the file's bytes ('' where there is no single file, e.g. a TFDS dataset).
    pairs: clean pairs it contributed (before per-language deduplication).
  """
  origin: str
  tag: str
  sha256: str
  pairs: int


@dataclasses.dataclass
class BuildReport:
  """Counts everything a build dropped, so that no loss is silent.

  Attributes:
    skips: reason -> number of entries or lines dropped (see cleaning.py for the reasons).
    skipped_files: (path, one-line reason) for every file read in part or not at all.
    sources: a SourceRecord per input unit that was read.
    notes: (path, note) for files read with a caveat, e.g. a mislabelled charset.
  """
  skips: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  skipped_files: list[tuple[str, str]] = dataclasses.field(default_factory=list)
  sources: list[SourceRecord] = dataclasses.field(default_factory=list)
  notes: list[tuple[str, str]] = dataclasses.field(default_factory=list)

  def SkipFile(self, path, reason, counter_key):
    """Records a file that contributed nothing, under `counter_key` in `skips`."""
    self.skipped_files.append((str(path), reason))
    self.skips[counter_key] += 1

  def ToJson(self):
    return {
        'skips': dict(sorted(self.skips.items())),
        'skipped_files': [{'path': p, 'reason': r} for p, r in self.skipped_files],
        'notes': [{'path': p, 'note': n} for p, n in self.notes],
        'sources': [dataclasses.asdict(s) for s in self.sources],
    }
