"""Tests of data/build.py, data/gettext_m4.py and data/reader.py: the TFDS round trip through tfds.load,
per-language reads, the manifest, idempotent reruns, and builds that fail or are killed half-way."""
import datetime
import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import tensorflow_datasets as tfds

from lingvo_gshard.data import build
from lingvo_gshard.data import corpus
from lingvo_gshard.data import gettext_m4
from lingvo_gshard.data import reader
from lingvo_gshard.data import report
from lingvo_gshard.data import sources
import data_helpers

_CONFIG = corpus.CorpusConfig(dev_fraction=0.15, test_fraction=0.15, max_dev=8, max_test=9)


def _Tree(root, sizes):
  english = data_helpers.Sentences(max(sizes.values()))
  return data_helpers.WriteLocaleTree(root, {
      (locale, 'app'): [(e, f'{locale} {e.lower()}') for e in english[:n]] for locale, n in sizes.items()})


def _Quiet(line):
  del line


def _Build(data_dir, root, config=_CONFIG, **kwargs):
  return build.Build(str(data_dir), [sources.GettextSource([root])], config, log=_Quiet, **kwargs)


def _Expected(root, config=_CONFIG):
  rep = report.BuildReport()
  return corpus.Assemble(sources.GettextSource([root]).Units(rep), config, rep)


def _Decode(examples):
  return [(ex['lang'].decode(), ex['source'].decode(), ex['target'].decode()) for ex in examples]


def test_round_trip_through_tfds_load(tmp_path):
  root = _Tree(str(tmp_path / 'locale'), {'de': 60, 'pt_BR': 45, 'sr@latin': 30, 'en_GB': 50})
  manifest, built = _Build(tmp_path / 'data', root)
  assert built
  expected = _Expected(root)
  gettext_m4.Register()
  for split in corpus.SPLITS:
    loaded = _Decode(tfds.as_numpy(tfds.load('gettext_m4', split=split, data_dir=str(tmp_path / 'data'))))
    want = [(tag, s, t) for tag, lang in expected.languages.items() for s, t in lang.splits[split]]
    assert loaded == want
    assert len(loaded) == manifest['totals'][split]
  assert list(manifest['languages']) == ['de', 'pt-BR', 'sr-Latn']
  de = manifest['languages']['de']
  assert (de['dev'], de['test'], de['bucket'], de['inputs']) == (8, 9, 'high', 1)
  assert de['train'] + de['dev'] + de['test'] <= 60
  assert manifest['skips']['english_catalog'] == 1
  assert [s['tag'] for s in manifest['sources']] == ['de', 'pt-BR', 'sr-Latn']
  assert all(len(s['sha256']) == 64 for s in manifest['sources'])
  assert manifest['name'] == 'gettext_m4' and manifest['build_seconds'] >= 0
  built_at = datetime.datetime.fromisoformat(manifest['built_at'])
  assert abs((datetime.datetime.now(datetime.timezone.utc) - built_at).total_seconds()) < 600
  # tfds.load reads the manifest-free way too: as_supervised gives (source, target).
  sup = tfds.load('gettext_m4', split='train[:1]', data_dir=str(tmp_path / 'data'), as_supervised=True)
  (src, tgt), = tfds.as_numpy(sup)
  assert (src.decode(), tgt.decode()) == expected.languages['de'].splits['train'][0]


def test_a_writer_that_spills_to_disk_keeps_the_order(tmp_path, monkeypatch):
  """With TFDS's writer held to 2 KB in memory, the examples go through its on-disk buckets, spread over
  many of them by the keys, and come back in the order of the in-memory build."""
  from tensorflow_datasets.core import shuffle  # pylint: disable=g-import-not-at-top
  root = _Tree(str(tmp_path / 'locale'), {'de': 60, 'pt_BR': 45, 'ja': 50})
  _Build(tmp_path / 'memory', root)
  buckets = set()
  add = shuffle.Shuffler._add_to_bucket

  def Seen(self, hkey, data):
    buckets.add(shuffle.get_bucket_number(hkey, shuffle.BUCKETS_NUMBER))
    return add(self, hkey, data)

  monkeypatch.setattr(shuffle.Shuffler, '_add_to_bucket', Seen)
  monkeypatch.setattr(gettext_m4, 'WRITER_MEMORY_BYTES', 2048)
  with gettext_m4.BoundedWriterMemory(2048):
    assert shuffle.MAX_MEM_BUFFER_SIZE == 2048
  assert shuffle.MAX_MEM_BUFFER_SIZE > 2048  # restored
  build.Build(str(tmp_path / 'disk'), [sources.GettextSource([root])], _CONFIG, log=_Quiet)
  assert len(buckets) > 50  # spilled, and spread (keys 0, 1, 2, ... would all be bucket 0)
  for tag in ('de', 'pt-BR', 'ja'):
    for split in corpus.SPLITS:
      assert reader.Pairs(str(tmp_path / 'disk'), tag, split) == reader.Pairs(str(tmp_path / 'memory'), tag, split)


def test_reader_reads_one_language_slice(tmp_path):
  root = _Tree(str(tmp_path / 'locale'), {'de': 50, 'fr': 40, 'ja': 30})
  _Build(tmp_path / 'data', root)
  expected = _Expected(root)
  data_dir = str(tmp_path / 'data')
  assert reader.Languages(data_dir) == ['de', 'fr', 'ja']
  for tag in ('de', 'fr', 'ja'):
    for split in corpus.SPLITS:
      assert reader.Pairs(data_dir, tag, split) == expected.languages[tag].splits[split]
      langs = {ex['lang'] for ex in tfds.as_numpy(reader.LoadSplit(data_dir, tag, split))}
      assert langs == {tag.encode()}
  with pytest.raises(report.DataError,
                     match=r"^language 'xx' is not in .*manifest\.json \(have: de, fr, ja\)$"):
    reader.LoadSplit(data_dir, 'xx', 'train')
  with pytest.raises(report.DataError, match=r"^unknown split 'validation'"):
    reader.LoadSplit(data_dir, 'de', 'validation')


def test_rerun_is_a_no_op_and_changed_input_rebuilds(tmp_path):
  root = _Tree(str(tmp_path / 'locale'), {'de': 40, 'fr': 30})
  first, built = _Build(tmp_path / 'data', root)
  assert built
  manifest_path = tmp_path / 'data' / 'manifest.json'
  stamp = manifest_path.stat().st_mtime_ns
  again, built = _Build(tmp_path / 'data', root)
  assert not built and again == first and manifest_path.stat().st_mtime_ns == stamp
  forced, built = _Build(tmp_path / 'data', root, force=True)
  assert built and forced['fingerprint'] == first['fingerprint']
  data_helpers.WriteMo(os.path.join(root, 'it', 'LC_MESSAGES', 'app.mo'),
                       [(e, 'it ' + e) for e in data_helpers.Sentences(20)])
  changed, built = _Build(tmp_path / 'data', root)
  assert built and 'it' in changed['languages'] and changed['fingerprint'] != first['fingerprint']
  assert reader.Languages(str(tmp_path / 'data')) == ['de', 'fr', 'it']
  assert not [n for n in os.listdir(tmp_path / 'data') if n.startswith('.gettext_m4.staging')]


class _FailingSource:
  """Gives some real units, then fails like an unreadable input in the middle of a build."""

  def __init__(self, root):
    self._inner = sources.GettextSource([root])

  def Units(self, rep):
    yield from self._inner.Units(rep)
    raise report.DataError('broken.tsv: cannot read TSV file: Input/output error')


def test_failed_build_keeps_the_previous_dataset(tmp_path):
  root = _Tree(str(tmp_path / 'locale'), {'de': 40, 'fr': 30})
  old, _ = _Build(tmp_path / 'data', root)
  before = reader.Pairs(str(tmp_path / 'data'), 'fr', 'train')
  with pytest.raises(report.DataError, match='broken.tsv'):
    build.Build(str(tmp_path / 'data'), [_FailingSource(root)], _CONFIG, force=True, log=_Quiet)
  assert reader.LoadManifest(str(tmp_path / 'data')) == old
  assert reader.Pairs(str(tmp_path / 'data'), 'fr', 'train') == before


_KILLED_BUILD = textwrap.dedent('''
    import sys
    from lingvo_gshard.data import build, corpus, sources
    build.Build(sys.argv[1], [sources.GettextSource([sys.argv[2]])],
                corpus.CorpusConfig(dev_fraction=0.15, test_fraction=0.15), force=True, log=print)
''')


def test_killed_build_leaves_a_loadable_old_dataset_and_a_rerun_finishes(tmp_path):
  root = _Tree(str(tmp_path / 'locale'), {'de': 40, 'fr': 30})
  data_dir = tmp_path / 'data'
  old, _ = _Build(data_dir, root)
  big = _Tree(str(tmp_path / 'big'), {'de': 3000, 'fr': 3000, 'es': 3000, 'it': 3000})
  proc = subprocess.Popen([sys.executable, '-c', _KILLED_BUILD, str(data_dir), big],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    deadline = time.time() + 120

    def _Writing():  # TFDS is writing its shards: data_dir/.gettext_m4.staging-*/gettext_m4/incomplete.*
      for name in os.listdir(data_dir):
        if name.startswith('.gettext_m4.staging'):
          try:
            if any(n.startswith('incomplete') for n in os.listdir(data_dir / name / 'gettext_m4')):
              return True
          except FileNotFoundError:  # Not created yet.
            pass
      return False

    while not _Writing():
      assert proc.poll() is None, 'the build finished before it could be killed'
      assert time.time() < deadline
      time.sleep(0.002)
  finally:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
  # The killed build changed nothing that a reader sees.
  assert reader.LoadManifest(str(data_dir)) == old
  assert reader.Languages(str(data_dir)) == ['de', 'fr']
  assert len(reader.Pairs(str(data_dir), 'de', 'train')) == old['languages']['de']['train']
  # A rerun cleans up the leftovers and builds.
  new, built = _Build(data_dir, big)
  assert built and sorted(new['languages']) == ['de', 'es', 'fr', 'it']
  assert not [n for n in os.listdir(data_dir) if n.startswith('.gettext_m4.staging')]


def test_data_dir_without_a_finished_build_is_refused(tmp_path):
  root = _Tree(str(tmp_path / 'locale'), {'de': 40})
  _Build(tmp_path / 'data', root)
  os.remove(tmp_path / 'data' / 'manifest.json')  # What a build killed before its last rename leaves.
  with pytest.raises(report.DataError, match=r'manifest\.json: no finished gettext_m4 build here'):
    reader.LoadSplit(str(tmp_path / 'data'), 'de', 'train')
  manifest, built = _Build(tmp_path / 'data', root)
  assert built and reader.Languages(str(tmp_path / 'data')) == ['de']
  manifest['totals']['train'] += 1  # A manifest that does not match the data is refused too.
  (tmp_path / 'data' / 'manifest.json').write_text(json.dumps(manifest))
  with pytest.raises(report.DataError, match=r'train split has \d+ examples but the manifest says'):
    reader.LoadSplit(str(tmp_path / 'data'), 'de', 'train')


def test_a_build_of_an_older_dataset_version_is_refused_and_rebuilt(tmp_path):
  root = _Tree(str(tmp_path / 'locale'), {'de': 40})
  manifest, _ = _Build(tmp_path / 'data', root)
  # What a data dir built by the previous release looks like to this code: its files under the old version,
  # its manifest with the old version and pipeline fingerprint.
  versions = tmp_path / 'data' / 'gettext_m4'
  os.rename(versions / gettext_m4.DATASET_VERSION, versions / '1.0.0')
  old = dict(manifest, version='1.0.0', fingerprint='v1')
  (tmp_path / 'data' / 'manifest.json').write_text(json.dumps(old))
  with pytest.raises(report.DataError, match=(
      rf'^{tmp_path}/data: built as gettext_m4 1\.0\.0, this code reads {gettext_m4.DATASET_VERSION}: '
      rf'rebuild it with python -m lingvo_gshard.tools.prepare_data --data_dir={tmp_path}/data$')):
    reader.LoadSplit(str(tmp_path / 'data'), 'de', 'train')
  rebuilt, built = _Build(tmp_path / 'data', root)
  assert built and rebuilt['version'] == gettext_m4.DATASET_VERSION
  assert os.listdir(versions) == [gettext_m4.DATASET_VERSION]
  assert len(reader.Pairs(str(tmp_path / 'data'), 'de', 'train')) == manifest['languages']['de']['train']


def test_loading_an_unbuilt_data_dir_through_tfds_names_the_tool(tmp_path):
  gettext_m4.Register()
  with pytest.raises(report.DataError, match=r'gettext_m4: no prepared data in .*prepare_data'):
    tfds.load('gettext_m4', split='train', data_dir=str(tmp_path))


def test_concurrent_build_into_the_same_data_dir_is_refused(tmp_path):
  root = _Tree(str(tmp_path / 'locale'), {'de': 40})
  (tmp_path / 'data').mkdir()
  with open(tmp_path / 'data' / '.gettext_m4.lock', 'w') as held:
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # What a running build holds.
    with pytest.raises(report.DataError,
                       match=r'/data: another build is running into this data directory \(.*: held by another'):
      _Build(tmp_path / 'data', root)
  _, built = _Build(tmp_path / 'data', root)  # Released: builds.
  assert built


def test_empty_heldout_splits_build_and_read_as_clear_errors(tmp_path):
  root = _Tree(str(tmp_path / 'locale'), {'de': 30})
  manifest, _ = _Build(tmp_path / 'data', root, corpus.CorpusConfig(dev_fraction=0.2, max_dev=0, max_test=0))
  assert manifest['totals'] == {'train': manifest['languages']['de']['train'], 'dev': 0, 'test': 0}
  assert len(reader.Pairs(str(tmp_path / 'data'), 'de', 'train')) == manifest['totals']['train']
  with pytest.raises(report.DataError, match=r"^language 'de' has no dev examples in "):
    reader.LoadSplit(str(tmp_path / 'data'), 'de', 'dev')
  with pytest.raises(report.DataError, match=r'the test split is empty in this build$'):
    reader.LoadSplit(str(tmp_path / 'data'), None, 'test')
