"""Random bytes as each kind of file a user hands the library (issue #35, by class): a gettext .mo catalog, a
TSV file, a corpus manifest, a log directory's checkpoint state file and its checkpoints.jsonl. Each ends in a
result, a counted skip or one error line naming the file, never another exception (a traceback in a tool).

Hypothesis draws the inputs derandomized (the same examples on every run, no example database) and a bounded
number per class (_EXAMPLES), so the whole file runs in well under a minute on 2 cores.
"""
import encodings.aliases
import json
import os
import shutil
import struct
import tempfile

from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest
import tensorflow as tf

from lingvo_gshard.campaigns import bilingual_baselines
from lingvo_gshard.core import sharding
from lingvo_gshard.data import build
from lingvo_gshard.data import integrity
from lingvo_gshard.data import mo_reader
from lingvo_gshard.data import reader
from lingvo_gshard.data import report
from lingvo_gshard.data import sources
from lingvo_gshard.eval import evaluator
from lingvo_gshard.input import mixture
from lingvo_gshard.train import checkpoints
from lingvo_gshard.train import trainer as trainer_lib
from lingvo_gshard.utils import files
import data_helpers
import input_helpers
import trainer_test

_EXAMPLES = {'mo': 300, 'tsv': 120, 'manifest': 150, 'state': 80, 'log': 120}


def _Settings(kind):
  return settings(max_examples=_EXAMPLES[kind], derandomize=True, database=None, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _OneLine(error, path):
  """The error's message is one line that names `path`."""
  message = str(error)
  assert '\n' not in message and '\r' not in message, repr(message)
  assert path in message, (path, message)
  return message


# Lines without the two separators bytes.splitlines and text files split on, so that a test knows its lines.
_LINE_BYTES = st.binary(max_size=40).map(lambda b: b.replace(b'\n', b' ').replace(b'\r', b' '))
_LINE_TEXT = st.text(max_size=40).map(lambda t: t.replace('\n', ' ').replace('\r', ' '))
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=3), max_leaves=8)

# ---- gettext .mo catalogs ---------------------------------------------------------------------------------

_MAGIC = struct.pack('<I', 0x950412de)
# Every name Python knows a codec by (text codecs, binary transforms such as base64, and 'undefined'), and
# names it does not know: what a catalog's header may declare.
_CHARSETS = sorted(set(encodings.aliases.aliases) | set(encodings.aliases.aliases.values()) |
                   {'CHARSET', 'utf-8', 'ISO-8859-1', 'no-such-charset', 'base64', 'rot13', 'idna', 'punycode'})


def _CheckMo(data):
  try:
    catalog = mo_reader.ParseMo(data, 'x.mo')
  except mo_reader.MoFormatError as e:
    assert _OneLine(e, 'x.mo').startswith('x.mo: ')
    return None
  assert all(isinstance(s, str) for e in catalog.entries for s in (e.msgid,) + e.msgstrs)
  return catalog


@_Settings('mo')
@given(st.one_of(st.binary(max_size=200), st.binary(max_size=200).map(lambda b: _MAGIC + b),
                 st.lists(st.integers(0, 120), min_size=6, max_size=6).flatmap(
                     lambda head: st.binary(max_size=120).map(
                         lambda tail: _MAGIC + struct.pack('<6I', *head) + tail))))
def test_random_bytes_as_a_mo_file_parse_or_fail_in_one_line(data):
  _CheckMo(data)


@_Settings('mo')
@given(st.sampled_from(_CHARSETS), st.lists(st.tuples(_LINE_TEXT, _LINE_TEXT), max_size=4),
       st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=4))
def test_a_catalog_declaring_any_charset_with_bytes_flipped(charset, entries, flips):
  header = f'Content-Type: text/plain; charset={charset}\nPlural-Forms: nplurals=2; plural=(n != 1);\n'
  data = bytearray(data_helpers.MoBytes([e for e in entries if e[0]], header=header))
  for where, value in flips:
    data[int(where * len(data))] = value
  _CheckMo(bytes(data))


@_Settings('mo')
@given(st.binary(max_size=300).filter(lambda b: not b.startswith(_MAGIC)))
def test_a_corrupt_catalog_among_the_system_catalogs_is_skipped_and_counted(tmp_path, garbage):
  root = str(tmp_path / f'locale-{len(os.listdir(tmp_path))}')
  data_helpers.WriteLocaleTree(root, {('de', 'app'): [('Open file', 'Datei öffnen')]})
  bad = os.path.join(root, 'fr', 'LC_MESSAGES', 'app.mo')
  os.makedirs(os.path.dirname(bad))
  with open(bad, 'wb') as f:
    f.write(garbage)
  rep = report.BuildReport()
  units = list(sources.GettextSource([root]).Units(rep))
  assert [u.tag for u in units] == ['de'] and rep.skips['bad_catalog'] == 1
  assert [path for path, _ in rep.skipped_files] == [bad]


def test_the_corpus_build_reports_the_skipped_catalogs(tmp_path):
  root = data_helpers.WriteLocaleTree(str(tmp_path / 'locale'), {
      ('de', 'app'): [(s, f'{s} (de)') for s in data_helpers.Sentences(30)],
      ('fr', 'app'): [('Open', 'Ouvrir')]})
  cut = os.path.join(root, 'fr', 'LC_MESSAGES', 'app.mo')
  with open(cut, 'r+b') as f:
    f.truncate(60)
  random_bytes = os.path.join(root, 'ru', 'LC_MESSAGES', 'app.mo')
  os.makedirs(os.path.dirname(random_bytes))
  with open(random_bytes, 'wb') as f:
    f.write(os.urandom(500))
  manifest, _ = build.Build(str(tmp_path / 'data'), [sources.GettextSource([root])], log=lambda line: None)
  assert list(manifest['languages']) == ['de'] and manifest['skips']['bad_catalog'] == 2
  assert sorted(item['path'] for item in manifest['skipped_files']) == [cut, random_bytes]


# ---- TSV files --------------------------------------------------------------------------------------------

_GOOD_LINE = st.sampled_from(['Datei öffnen\tOpen file', 'Speichern unter\tSave as', 'Hilfe\tHelp'])


@_Settings('tsv')
@given(st.lists(st.one_of(_GOOD_LINE.map(str.encode), _LINE_BYTES, _LINE_TEXT.map(str.encode)), max_size=12))
def test_random_lines_as_a_tsv_file_are_skipped_and_counted(tmp_path, lines):
  path = str(tmp_path / 'de.tsv')
  with open(path, 'wb') as f:
    f.write(b'\n'.join(lines))
  bad_utf8 = bad_columns = 0
  for line in lines:
    try:
      text = line.decode('utf-8')
    except UnicodeDecodeError:
      bad_utf8 += 1
      continue
    bad_columns += bool(text.strip()) and len(text.split('\t')) != 2
  rep = report.BuildReport()
  try:
    units = list(sources.TsvSource([('de', path)]).Units(rep))
  except report.DataError as e:
    assert 'no usable pairs' in _OneLine(e, path)
    if bad_utf8 or bad_columns:
      assert f'{bad_utf8 + bad_columns} lines skipped, the first is line ' in str(e)
    return
  assert len(units) == 1 and units[0].pairs
  assert rep.skips['invalid_utf8'] == bad_utf8 and rep.skips['tsv_bad_columns'] == bad_columns
  assert len(rep.skipped_files) == bool(bad_utf8) + bool(bad_columns)


@_Settings('tsv')
@given(st.lists(st.one_of(_LINE_TEXT, st.sampled_from(['de=x.tsv', 'pt_BR=x.tsv', '=x.tsv', 'de=', 'xx=x.tsv'])),
                min_size=1, max_size=3))
def test_random_tsv_flag_values_parse_or_fail_in_one_line(specs):
  try:
    assert all(tag and path for tag, path in sources.ParseLanguageFiles(specs, '--tsv'))
  except report.DataError as e:
    _OneLine(e, '--tsv')


# ---- the corpus manifest ----------------------------------------------------------------------------------


@pytest.fixture(scope='module')
def built(tmp_path_factory):
  """A built corpus, and a data directory sharing its dataset whose manifest.json each example rewrites."""
  data_dir = input_helpers.BuildCorpus(str(tmp_path_factory.mktemp('corpus')), {'de': 40, 'ru': 20})
  scratch = str(tmp_path_factory.mktemp('scratch'))
  os.symlink(os.path.join(data_dir, 'gettext_m4'), os.path.join(scratch, 'gettext_m4'))
  with open(os.path.join(data_dir, build.MANIFEST), 'rb') as f:
    return data_dir, scratch, f.read()


def _LoadManifest(data_dir, data):
  """reader.LoadManifest of `data` as data_dir's manifest: the manifest, or None after one DataError line."""
  path = os.path.join(data_dir, build.MANIFEST)
  with open(path, 'wb') as f:
    f.write(data)
  try:
    return reader.LoadManifest(data_dir)
  except report.DataError as e:
    _OneLine(e, path)
    return None


@_Settings('manifest')
@given(st.one_of(st.binary(max_size=300), _JSON.map(lambda v: json.dumps(v).encode())))
def test_random_bytes_or_json_as_a_manifest_are_one_line(built, data):
  assert _LoadManifest(built[1], data) is None


@_Settings('manifest')
@given(st.floats(0, 1, exclude_max=True))
def test_a_manifest_cut_short_is_one_line(built, fraction):
  _, scratch, whole = built
  assert _LoadManifest(scratch, whole[:int(fraction * len(whole.rstrip()))]) is None


def _Nodes(value, path=()):
  """Paths of every node of a JSON value."""
  yield path
  items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
  for key, inner in items:
    yield from _Nodes(inner, path + (key,))


@_Settings('manifest')
@given(st.data())
def test_a_manifest_of_another_shape_is_one_line_or_reads(built, data):
  """One node of a real manifest replaced by any JSON value, or deleted: refused naming the file, or (a value
  of the right shape) read by every consumer of the manifest without an exception."""
  _, scratch, whole = built
  manifest = json.loads(whole)
  path = data.draw(st.sampled_from(list(_Nodes(manifest))[1:]))
  parent = manifest
  for key in path[:-1]:
    parent = parent[key]
  if data.draw(st.booleans()):
    del parent[path[-1]]
  else:
    parent[path[-1]] = data.draw(_JSON)
  loaded = _LoadManifest(scratch, json.dumps(manifest).encode())
  if loaded is None:
    return
  mixture.CheckLanguages(loaded, [], scratch)
  bilingual_baselines.Plan(loaded)
  evaluator.Averages({}, loaded)
  integrity.Verify(scratch, loaded)
  try:  # offsets and totals that do not match the dataset: one line naming the data directory
    reader.LoadSplit(scratch, reader.Languages(scratch)[0], 'train')
  except report.DataError as e:
    _OneLine(e, scratch)


def test_a_manifest_that_is_a_directory_is_one_line(tmp_path):
  os.makedirs(tmp_path / build.MANIFEST)
  with pytest.raises(report.DataError) as e:
    reader.LoadManifest(str(tmp_path))
  _OneLine(e.value, str(tmp_path / build.MANIFEST))


# ---- a log directory's checkpoint state file and checkpoints.jsonl -----------------------------------------


@pytest.fixture(scope='module')
def saved(tmp_path_factory):
  """A log directory holding ckpt-1 and ckpt-2 (and the state file naming them)."""
  logdir = str(tmp_path_factory.mktemp('saved'))
  ckpt = tf.train.Checkpoint(step=tf.Variable(0, dtype=tf.int64), w=tf.Variable([1.0, 2.0]))
  manager = tf.train.CheckpointManager(ckpt, logdir, max_to_keep=5)
  for step in (1, 2):
    ckpt.step.assign(step)
    manager.save(checkpoint_number=step)
  return logdir, ckpt


def _Fresh(saved, with_checkpoints):
  logdir = tempfile.mkdtemp(dir=os.path.dirname(saved[0]))
  for name in os.listdir(saved[0]) if with_checkpoints else ():
    if name.startswith('ckpt-'):
      shutil.copy(os.path.join(saved[0], name), logdir)
  return logdir


_STATE_LINE = st.tuples(
    st.sampled_from(['model_checkpoint_path', 'all_model_checkpoint_paths', 'last_preserved_timestamp',
                     'all_model_checkpoint_timestamps', 'no_such_field']),
    st.one_of(_LINE_TEXT.map(json.dumps), st.sampled_from(['"ckpt-1"', '"ckpt-2"', '"ckpt-9"', '"/"']),
              st.floats(allow_nan=True).map(str), _LINE_TEXT)).map(lambda kv: f'{kv[0]}: {kv[1]}')


@_Settings('state')
@given(st.one_of(st.binary(max_size=200), st.lists(_STATE_LINE, max_size=4).map(lambda l: '\n'.join(l).encode())),
       st.booleans())
def test_random_bytes_as_a_checkpoint_state_file(saved, data, with_checkpoints):
  """The evaluator names a readable checkpoint or fails in one line naming the file; the trainer's resume
  uses the checkpoint files present (rewriting a state file that does not parse) or, with none to rewrite it
  from, fails in one line; its checkpoint manager then opens the directory without an exception."""
  logdir = _Fresh(saved, with_checkpoints)
  state = os.path.join(logdir, checkpoints.STATE_FILE)
  with open(state, 'wb') as f:
    f.write(data)
  try:
    assert os.path.exists(evaluator.CheckpointPath(logdir) + '.index')
  except (FileNotFoundError, checkpoints.StateUnreadable) as e:
    _OneLine(e, logdir)
  lines = []
  try:
    candidates = checkpoints.CheckpointCandidates(logdir, lines.append)
  except checkpoints.StateUnreadable as e:
    assert not with_checkpoints and _OneLine(e, state)
    return
  assert len(candidates) == (2 if with_checkpoints else 0) and len(lines) <= 1
  tf.train.CheckpointManager(saved[1], logdir, max_to_keep=5)
  shutil.rmtree(logdir)


_ROW = st.fixed_dictionaries({'step': st.integers(0, 10), 'checkpoint': st.sampled_from(['ckpt-1', 'ckpt-2']),
                              'train_seconds': st.floats(0, 100)}).map(json.dumps)


@_Settings('log')
@given(st.lists(st.one_of(_ROW.map(str.encode), _JSON.map(lambda v: json.dumps(v).encode()), _LINE_BYTES,
                          _LINE_TEXT.map(str.encode)), max_size=6))
def test_random_lines_as_checkpoints_jsonl(saved, lines):
  """Refused in one line naming the file and line when the trainer or a report could not use a row; else
  what the trainer computes from it at resume and its first save (tools/trainer.py) works."""
  logdir = _Fresh(saved, True)
  path = os.path.join(logdir, checkpoints.CHECKPOINT_LOG)
  with open(path, 'wb') as f:
    f.write(b'\n'.join(lines))
  try:
    checkpoints.CheckpointCandidates(logdir, lambda line: None)
  except checkpoints.StateUnreadable as e:
    assert _OneLine(e, path).startswith(path + ':')
    with pytest.raises(checkpoints.StateUnreadable):
      checkpoints.TrainSeconds(logdir)
    return
  rows = files.ReadJsonl(path)  # as the trainer reads it (train/trainer.py, Train and _Save)
  max([r['train_seconds'] for r in rows if r['step'] <= 5] or [0.0])
  assert set(checkpoints.TrainSeconds(logdir)) <= {'ckpt-1', 'ckpt-2'}
  checkpoints.TrainCommits(logdir)
  shutil.rmtree(logdir)


def test_the_trainer_refuses_a_corrupt_state_file_or_log_before_writing(built, tmp_path):
  """Resuming in a log directory whose state file or checkpoints.jsonl is corrupt: one line naming the file,
  before the trainer writes params.txt or anything else there."""
  for name, data in ((checkpoints.STATE_FILE, b'\x8f\x00garbage {{'),
                     (checkpoints.CHECKPOINT_LOG, b'{"step": 3, "checkpoint": "ckpt-3", "train_seconds": 1}\n[]\n')):
    logdir = tmp_path / name
    logdir.mkdir()
    (logdir / name).write_bytes(data)
    with pytest.raises(checkpoints.StateUnreadable) as e:
      trainer_lib.Trainer(trainer_test._SmallMoE(built[0]), sharding.Partitioner('none'), str(logdir),
                          log=lambda line: None)
    _OneLine(e.value, str(logdir / name))
    assert os.listdir(logdir) == [name]  # not even the trainer's lock file
