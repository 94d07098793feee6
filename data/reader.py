"""Reads a built gettext_m4 data directory: the API the tf.data input pipeline consumes.

    manifest = reader.LoadManifest(data_dir)            # sizes, buckets, offsets per language
    ds = reader.LoadSplit(data_dir, 'de', 'train')      # tf.data.Dataset of {'lang','source','target'}
    for source, target in reader.Pairs(data_dir, 'de', 'dev'): ...   # Python strings, for eval/BLEU

A language is a contiguous slice of each split (see gettext_m4.py), so LoadSplit reads only its shards.
Everything refuses a data dir without a finished build (no manifest, or sizes that do not match it) with a
one-line DataError, so a half-built directory can never be read as a small dataset.
"""
import os

from lingvo_gshard.data import build
from lingvo_gshard.data import corpus as corpus_lib
from lingvo_gshard.data import gettext_m4
from lingvo_gshard.data import integrity
from lingvo_gshard.data import report as report_lib
from lingvo_gshard.utils import files


def LoadManifest(data_dir):
  """The manifest of the finished build in data_dir; DataError if there is none."""
  manifest = build.ReadManifest(data_dir)
  if manifest is None:
    raise report_lib.DataError(f'{os.path.join(data_dir, build.MANIFEST)}: no finished gettext_m4 build '
                               f'here (build it with python -m lingvo_gshard.tools.prepare_data)')
  if manifest.get('version') == gettext_m4.DATASET_VERSION:  # another version: the builder says rebuild
    integrity.CheckSizes(data_dir, manifest)
  return manifest


def Languages(data_dir):
  """Tags of the languages in data_dir, largest first."""
  return list(LoadManifest(data_dir)['languages'])


_BUILDERS = {}


def _Builder(data_dir, manifest):
  # One checked builder per build: making one reads and checks the dataset info (a fixed cost per call), and
  # the vocabulary sample and the evaluator open every language's slice in turn.
  key = (files.AbsPath(data_dir), manifest.get('fingerprint'), manifest.get('built_at'))
  if key not in _BUILDERS:
    _BUILDERS.clear()
    _BUILDERS[key] = _NewBuilder(data_dir, manifest)
  return _BUILDERS[key]


def _NewBuilder(data_dir, manifest):
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  gettext_m4.Register()
  builder = tfds.builder(gettext_m4.NAME, data_dir=data_dir)
  if not builder.is_prepared():
    built = manifest.get('version')
    if built != gettext_m4.DATASET_VERSION:
      raise report_lib.DataError(
          f'{data_dir}: built as {gettext_m4.NAME} {built}, this code reads {gettext_m4.DATASET_VERSION}: '
          f'rebuild it with python -m lingvo_gshard.tools.prepare_data --data_dir={data_dir}')
    raise report_lib.DataError(f'{data_dir}: manifest present but no prepared {gettext_m4.NAME} dataset')
  for name in corpus_lib.SPLITS:
    written = builder.info.splits[name].num_examples if name in builder.info.splits else 0
    if written != manifest['totals'][name]:
      raise report_lib.DataError(f'{data_dir}: {name} split has {written} examples but the manifest says '
                                 f'{manifest["totals"][name]}; rebuild')
  return builder


def LoadSplit(data_dir, lang=None, split='train', shuffle_files=False):
  """A tf.data.Dataset of {'lang', 'source', 'target'} string features.

  Args:
    data_dir: a built data directory.
    lang: a language tag from the manifest, or None for every language.
    split: 'train', 'dev' or 'test'.
    shuffle_files: passed to TFDS (examples within a file stay in order; shuffle in the pipeline).
  """
  manifest = LoadManifest(data_dir)
  if split not in corpus_lib.SPLITS:
    raise report_lib.DataError(f'unknown split {split!r} (have: {", ".join(corpus_lib.SPLITS)})')
  expr = split
  if lang is not None:
    if lang not in manifest['languages']:
      raise report_lib.DataError(f'language {lang!r} is not in {os.path.join(data_dir, build.MANIFEST)} '
                                 f'(have: {", ".join(manifest["languages"])})')
    start, end = manifest['languages'][lang]['offsets'][split]
    if start == end:
      raise report_lib.DataError(f'language {lang!r} has no {split} examples in {data_dir}')
    expr = f'{split}[{start}:{end}]'
  if not manifest['totals'][split]:
    raise report_lib.DataError(f'{data_dir}: the {split} split is empty in this build')
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  # No TFDS auto-cache: it would keep every language's slice in memory, and a checkpointed iterator (the
  # trainer's exact resume) would then carry the whole cache in each checkpoint (~100 MB and growing).
  # Reading the records again each epoch is far faster than training consumes them.
  return _Builder(data_dir, manifest).as_dataset(split=expr, shuffle_files=shuffle_files,
                                                 read_config=tfds.ReadConfig(try_autocache=False))


def Pairs(data_dir, lang, split):
  """All (source, target) pairs of one language and split as Python strings, in stored order."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  with CorruptRecords(data_dir):
    return [(ex['source'].decode('utf-8'), ex['target'].decode('utf-8'))
            for ex in tfds.as_numpy(LoadSplit(data_dir, lang, split))]


class CorruptRecords:
  """Within it, a record that fails its checksum while being read is a one-line DataError naming the data
  directory, TensorFlow's account of the record, and the files of the build whose sha256 no longer matches
  (the manifest's records; where they cannot tell, how to check every file)."""

  def __init__(self, data_dir: str, context: str = ''):
    self.data_dir, self.context = data_dir, context

  def __enter__(self):
    return self

  def __exit__(self, kind, value, traceback):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if kind is not None and issubclass(kind, tf.errors.DataLossError):
      what = ' '.join(str(value.message if hasattr(value, 'message') else value).split())
      what = what.split('{{function_node')[0].strip() or what.split('}}')[-1].split('[Op:')[0].strip()
      manifest = build.ReadManifest(self.data_dir) or {}
      bad = [line.split(': ')[0] for line in integrity.Verify(self.data_dir, manifest)]
      where = (f' in {", ".join(bad[:3])}{" and more" if len(bad) > 3 else ""}' if bad else
               f'; check every file with python -m lingvo_gshard.tools.prepare_data --verify '
               f'--data_dir={self.data_dir}')
      raise report_lib.DataError(f'{self.data_dir}: a corrupt record ({what[:200]}){where}{self.context}') from None
    return False
