"""Builds the `gettext_m4` dataset into a data directory, atomically, and writes its manifest.

Layout of a data directory after a build:

    DATA_DIR/gettext_m4/1.1.0/...   the TFDS dataset (tfds.load('gettext_m4', data_dir=DATA_DIR))
    DATA_DIR/manifest.json          per-language sizes, offsets and buckets; inputs and checksums; skip
                                    counts; build time. Written last: a data dir without it is not a build.

Atomicity: everything is written into `DATA_DIR/.gettext_m4.staging-*` and moved into place by renames
at the end, the old manifest removed first and the new one renamed in last. A build killed at any point
leaves either the previous complete dataset or no dataset under `gettext_m4/` (TFDS itself writes into an
`incomplete.*` directory that it renames only when done), never a partial one that loads silently; a
rerun removes stale staging directories and builds again. A lock file keeps two builds out of one data dir.

A gs:// data directory goes through the same steps (utils/files.py, and TFDS's own path library), with two
differences: a rename there moves one object at a time, so the atomicity above is lost to a kill in the
middle of _Commit, and there is no lock, so two builds into one bucket directory are not detected. Building
into a local directory and copying it (`gsutil -m cp -r`) keeps both (docs/guides/cloud_tpu.md).

Idempotence: the manifest holds a fingerprint of the inputs (every catalog's checksum), the corpus
settings and the pipeline version; a rerun with the same fingerprint leaves the data dir untouched.
"""
import dataclasses
import datetime
import hashlib
import json
import os
import time

from lingvo_gshard.data import corpus as corpus_lib
from lingvo_gshard.data import integrity
from lingvo_gshard.data import report as report_lib
from lingvo_gshard.utils import files

MANIFEST = 'manifest.json'
# Bump when cleaning, splitting or the example format changes, so that old builds are rebuilt.
PIPELINE_VERSION = 2  # 2: training pairs in a per-language order (corpus.TrainOrderKey)
_STAGING_PREFIX = '.gettext_m4.staging-'
_LOCK = '.gettext_m4.lock'


def _Fingerprint(config, report):
  settings = dataclasses.asdict(config)
  for key, default in (('new_languages', ()), ('direction', 'xx-en')):
    if settings[key] == default:  # builds that leave it at its default keep the fingerprint they always had
      del settings[key]
  blob = json.dumps({'pipeline': PIPELINE_VERSION, 'config': settings,
                     'inputs': sorted((s.origin, s.tag, s.sha256, s.pairs) for s in report.sources)},
                    sort_keys=True)
  return hashlib.sha256(blob.encode('utf-8')).hexdigest()


def _Count(value):
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _Number(value):
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def _Text(value):
  return isinstance(value, str)


def _Range(value):
  return isinstance(value, list) and len(value) == 2 and all(map(_Count, value)) and value[0] <= value[1]


class _Each:
  """A JSON object whose keys are data (language tags, file paths) and whose values all have `shape`."""

  def __init__(self, shape, at_least=0):
    self.shape, self.at_least = shape, at_least


class _Optional:
  """A key that older builds lack."""

  def __init__(self, shape):
    self.shape = shape


_SPLIT_COUNTS = {name: _Count for name in corpus_lib.SPLITS}
# What the readers of a build index (reader.py, the input pipeline, the evaluator, prepare_data's summary):
# a manifest of another shape is refused where it is read, naming the key, rather than failing later as a
# KeyError or TypeError downstream. Keys beyond these are allowed.
_SHAPE = {
    'name': _Text, 'version': _Text, 'fingerprint': _Text, 'built_at': _Text, 'build_seconds': _Number,
    'totals': _SPLIT_COUNTS,
    'languages': _Each(dict(_SPLIT_COUNTS, bucket=_Text, inputs=_Count,
                            offsets={name: _Range for name in corpus_lib.SPLITS}), at_least=1),
    'left_out_languages': _Each(_Count), 'skips': _Each(_Count),
    'skipped_files': [{'path': _Text, 'reason': _Text}], 'notes': [{'path': _Text, 'note': _Text}],
    'sources': [{}],
    integrity.FILES: _Optional(_Each({'bytes': _Count, 'sha256': _Text})),
}


def _Where(where, key):
  # Keys are data (language tags, file paths): quoted when they could break the one-line message.
  return f'{where}{"." if where else ""}{key if key.replace("-", "_").isidentifier() else json.dumps(key)}'


def _ShapeProblem(value, shape, where=''):
  """'' if `value` has `shape` (a predicate, {key: shape}, _Each or [shape]), else what differs and where."""
  if isinstance(shape, (dict, _Each)):
    if not isinstance(value, dict):
      return f'{where or "the top level"} is not an object'
    if isinstance(shape, _Each):
      if len(value) < shape.at_least:
        return f'{where} is empty'
      items = [(key, shape.shape) for key in value]
    else:
      missing = [key for key, inner in shape.items() if key not in value and not isinstance(inner, _Optional)]
      if missing:
        return f'{_Where(where, missing[0])} is missing'
      items = [(key, inner.shape if isinstance(inner, _Optional) else inner) for key, inner in shape.items()
               if key in value]
    problems = (_ShapeProblem(value[key], inner, _Where(where, key)) for key, inner in items)
  elif isinstance(shape, list):
    if not isinstance(value, list):
      return f'{where} is not a list'
    problems = (_ShapeProblem(item, shape[0], f'{where}[{i}]') for i, item in enumerate(value))
  else:
    return '' if shape(value) else f'{where} is {json.dumps(value)[:40]}'
  return next(filter(None, problems), '')


def ReadManifest(data_dir):
  """The manifest of a finished build in data_dir, or None if there is none.

  Raises:
    report.DataError: naming the file, if it is there but cannot be read, is not JSON (random bytes, a copy
      cut short) or is JSON of another shape than a build writes.
  """
  path = os.path.join(data_dir, MANIFEST)
  rebuild = f'rebuild with python -m lingvo_gshard.tools.prepare_data --data_dir={data_dir} --force'
  try:
    manifest = json.loads(files.ReadBytes(path).decode('utf-8'))
  except (FileNotFoundError, NotADirectoryError):
    return None
  except OSError as e:
    raise report_lib.DataError(f'{path}: cannot read the manifest: {e.strerror or e}') from None
  except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
    raise report_lib.DataError(f'{path}: not a manifest (not UTF-8 JSON: {str(e)[:80]}); {rebuild}') from None
  problem = _ShapeProblem(manifest, _SHAPE)
  if problem:
    raise report_lib.DataError(f'{path}: not a gettext_m4 manifest ({problem}); {rebuild}')
  return manifest


def _Manifest(corpus, report, fingerprint, seconds, source_names):
  from lingvo_gshard.data import gettext_m4  # pylint: disable=g-import-not-at-top
  langs, offsets = {}, {name: 0 for name in corpus_lib.SPLITS}
  for tag, lang in corpus.languages.items():
    counts = lang.Counts()
    entry = dict(counts, bucket=lang.bucket, inputs=len(lang.origins), offsets={})
    for name in corpus_lib.SPLITS:
      entry['offsets'][name] = [offsets[name], offsets[name] + counts[name]]
      offsets[name] += counts[name]
    langs[tag] = entry
  return {
      'name': gettext_m4.NAME,
      'version': gettext_m4.DATASET_VERSION,
      'pipeline_version': PIPELINE_VERSION,
      'fingerprint': fingerprint,
      'built_at': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
      'build_seconds': round(seconds, 2),
      'source_kinds': source_names,
      'config': dataclasses.asdict(corpus.config),
      'bucket_rule': 'tercile of training size: largest third high, next third medium, rest low',
      **({'tfds': corpus.published} if getattr(corpus, 'published', None) else {}),
      'totals': dict(offsets),
      'languages': langs,
      'left_out_languages': dict(sorted(corpus.left_out.items(), key=lambda kv: (-kv[1], kv[0]))),
      **report.ToJson(),
  }


def _Progress(units, log, every=250):
  start, count, pairs = time.time(), 0, 0
  for unit in units:
    count += 1
    pairs += len(unit.pairs)
    if count % every == 0:
      log(f'  read {count} inputs, {pairs} clean pairs ({time.time() - start:.0f}s)')
    yield unit
  log(f'  read {count} inputs, {pairs} clean pairs ({time.time() - start:.0f}s)')


def _Commit(staging, data_dir, name):
  """Moves a finished staging build into data_dir (see the module docstring for the order)."""
  manifest = os.path.join(data_dir, MANIFEST)
  if files.Exists(manifest):
    files.Remove(manifest)
  target = os.path.join(data_dir, name)
  if files.Exists(target):
    files.Rename(target, os.path.join(staging, 'previous'))
  files.Rename(os.path.join(staging, name), target)
  files.Rename(os.path.join(staging, MANIFEST), manifest)


def Build(data_dir, sources, config=corpus_lib.CorpusConfig(), force=False, log=print):
  """Builds gettext_m4 from sources into data_dir unless an identical build is already there.

  Args:
    data_dir: the TFDS data directory (created if missing; other datasets in it are left alone).
    sources: objects with a `Units(report)` generator (see sources.py).
    config: corpus.CorpusConfig.
    force: rebuild even if the fingerprint matches.
    log: callable taking one progress line.

  Returns:
    (manifest dict, built) where built is False if the existing build was up to date.

  Raises:
    report.DataError: bad input that makes the build impossible (message names it), or a concurrent build.
  """
  from lingvo_gshard.data import gettext_m4  # pylint: disable=g-import-not-at-top
  start = time.time()
  lock = files.ProcessLock(os.path.join(data_dir, _LOCK))  # no lock on gs:// (see the module docstring)
  created = not files.IsDir(data_dir)
  try:
    files.MakeDirs(data_dir)
    lock.Acquire()
  except files.LockHeld as e:
    raise report_lib.DataError(f'{data_dir}: another build is running into this data directory ({e})') from None
  except OSError as e:
    raise report_lib.DataError(f'{data_dir}: cannot create the data directory: {e.strerror or e}') from None
  try:
    for stale in files.ListDir(data_dir):
      if stale.startswith(_STAGING_PREFIX):
        log(f'removing {stale} left by an interrupted build')
        files.RemoveTree(os.path.join(data_dir, stale), ignore_errors=True)

    report = report_lib.BuildReport()
    log('reading and cleaning inputs...')

    def _AllUnits():
      for source in sources:
        yield from source.Units(report)

    streamed = [s for s in sources if hasattr(s, 'StreamedCorpus')]
    if streamed and len(sources) > 1:
      raise report_lib.DataError('a TFDS dataset read with its own splits (--tfds_train_split ...) is the only '
                                 'input of its build: leave out the gettext catalogs (--nogettext), TSV files '
                                 'and other datasets')
    if streamed:  # a dataset as published, streamed into the build (tfds_published.py)
      corpus = streamed[0].StreamedCorpus(config, report, log)
    else:
      corpus = corpus_lib.Assemble(_Progress(_AllUnits(), log), config, report)
    fingerprint = _Fingerprint(config, report)
    try:
      old = ReadManifest(data_dir)
    except report_lib.DataError:
      old = None  # a corrupt manifest of an earlier build: this build replaces it
    if (not force and old and old.get('fingerprint') == fingerprint and
        files.IsDir(os.path.join(data_dir, gettext_m4.NAME, gettext_m4.DATASET_VERSION))):
      log(f'{data_dir}: up to date (same inputs and settings as the build of {old.get("built_at")})')
      return old, False

    staging = os.path.join(data_dir, f'{_STAGING_PREFIX}{os.getpid()}')
    files.MakeDirs(staging)
    try:
      log(f'writing {len(corpus.languages)} languages into {staging}...')
      builder = gettext_m4.GettextM4(corpus=corpus, data_dir=staging)
      with gettext_m4.BoundedWriterMemory():
        builder.download_and_prepare(download_dir=os.path.join(staging, 'downloads'))
      for name in corpus_lib.SPLITS:
        expected = sum(len(lang.splits[name]) for lang in corpus.languages.values())
        written = builder.info.splits[name].num_examples if name in builder.info.splits else 0
        if written != expected:
          raise report_lib.DataError(f'{staging}: {name} split has {written} examples, expected {expected}')
      manifest = _Manifest(corpus, report, fingerprint, time.time() - start,
                           sorted({type(s).__name__ for s in sources}))
      manifest[integrity.FILES] = integrity.Record(staging, gettext_m4.NAME)  # paths stay valid after the move
      files.WriteText(os.path.join(staging, MANIFEST), json.dumps(manifest, indent=1, ensure_ascii=False))
      _Commit(staging, data_dir, gettext_m4.NAME)
    finally:
      # Also on failure: a half-written staging directory is of no use to anyone.
      files.RemoveTree(staging, ignore_errors=True)
    return json.loads(json.dumps(manifest)), True  # As a reader sees it (lists, not tuples).
  except BaseException:
    lock.Release()
    if created and not files.IsUrl(data_dir):  # a failed build leaves no local directory it made (only if empty)
      _RemoveEmpty(data_dir, lock.path)
    raise
  finally:
    lock.Release()


def _RemoveEmpty(data_dir, lock_path):
  try:
    os.remove(lock_path)
    os.rmdir(data_dir)
  except OSError:
    pass
