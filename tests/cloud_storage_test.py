"""The whole cycle on storage TensorFlow reaches through its filesystem API, as gs:// is: prepare-data on a TSV
corpus, train, SIGTERM and resume, decode, reports, averaging, export and translate, with every log,
vocabulary, export and report path under `ram://` (TensorFlow's in-memory filesystem, the same API as gs://);
and nothing written to local disk outside the test's temporary directory.

ram:// lives in one process's memory, so the whole cycle runs in this one: the trainer in-process, SIGTERM
sent to this process at a chosen step. TFDS reads through its own path library, which has no ram://, so the
built corpus (a TFDS data directory) stays local, in the temporary directory; its vocabularies do not
(`input.vocab.dir`).

What "nothing written locally" checks: every write Python makes (an audit hook sees open() for writing,
mkdir, rename, remove, copies, temporary files) is under the temporary directory; the working directory and
$HOME, pointed into it for the test, stay empty; and it holds nothing but the corpus and $TMPDIR's files
($TMPDIR is pointed there too). A URL made into a local path by mistake (os.path.abspath('ram://x') is
./ram:/x) would land in the working directory, TensorFlow's own writes (which no audit hook sees) included.
"""
import json
import os
import signal
import sys
import tempfile
import uuid

import pytest
import tensorflow as tf

from lingvo_gshard.core import sharding
from lingvo_gshard.eval import decode_job
from lingvo_gshard.report import curves
from lingvo_gshard.report import significance
from lingvo_gshard.serve import export
from lingvo_gshard.serve import text_io
from lingvo_gshard.serve import translator
from lingvo_gshard.train import averaging
from lingvo_gshard.train import checkpoints
from lingvo_gshard.train import trainer as trainer_lib
from lingvo_gshard.utils import files
import input_helpers
from trainer_test import _SmallMoE

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
# Audit events of writes, and which of their arguments are paths.
_WRITE_EVENTS = {'os.mkdir': (0,), 'os.rename': (0, 1), 'os.remove': (0,), 'os.rmdir': (0,),
                 'os.truncate': (0,), 'os.chmod': (0,), 'os.link': (1,), 'os.symlink': (1,),
                 'shutil.copyfile': (1,), 'shutil.rmtree': (0,), 'tempfile.mkstemp': (0,),
                 'tempfile.mkdtemp': (0,)}
_recording = []  # while a test records: [(root it may write under, writes outside it)]


def _Audit(event, args):
  if not _recording:
    return
  if event == 'open':
    path, mode, flags_ = args
    if not (isinstance(mode, str) and set(mode) & set('wax+')) and not (flags_ or 0) & _WRITE_FLAGS:
      return
    paths = [path]
  elif event in _WRITE_EVENTS:
    paths = [args[i] for i in _WRITE_EVENTS[event]]
  else:
    return
  root, outside = _recording[-1]
  for path in paths:
    if isinstance(path, int) or path is None:
      continue  # a file descriptor: opened (and checked) before
    path = os.path.abspath(os.fsdecode(path))
    if not (path + '/').startswith(root + '/') and not path.startswith(('/dev/', '/proc/')):
      outside.append(f'{event} {path}')


sys.addaudithook(_Audit)  # hooks cannot be removed: it records only while _recording holds a root


class _RamMoE(_SmallMoE):
  """_SmallMoE with its vocabularies in `vocab_dir`, a run of 6 steps saved at 3 and at the end."""

  def __init__(self, data_dir, vocab_dir):
    super().__init__(data_dir)
    self.VOCAB_DIR = vocab_dir

  def _Input(self, split, repeat):
    p = super()._Input(split, repeat)
    p.vocab.dir = self.VOCAB_DIR
    return p


def _LocalFiles(root):
  return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


@pytest.fixture
def no_local_writes(tmp_path, monkeypatch):
  """Working directory, $HOME and the temporary files' directory inside tmp_path; every Python write
  recorded. Yields (the list of writes outside tmp_path, the working directory, home, temp)."""
  places = {name: tmp_path / name for name in ('cwd', 'home', 'tmp')}
  for place in places.values():
    place.mkdir()
  monkeypatch.chdir(places['cwd'])
  monkeypatch.setenv('HOME', str(places['home']))
  monkeypatch.setenv('TMPDIR', str(places['tmp']))
  monkeypatch.setattr(tempfile, 'tempdir', str(places['tmp']))
  monkeypatch.setattr(sys, 'dont_write_bytecode', True)  # a module imported late would write its .pyc
  outside = []
  _recording.append((os.path.realpath(tmp_path), outside))
  try:
    yield outside, places
  finally:
    _recording.clear()


def test_prepare_train_resume_decode_export_translate_on_ram(tmp_path, no_local_writes):
  outside, places = no_local_writes
  ram = f'ram://cloud_storage_test_{uuid.uuid4().hex[:8]}'
  logdir, vocab_dir, export_dir, reports = (f'{ram}/{name}' for name in ('run', 'vocab', 'export', 'reports'))
  # prepare-data (data.build.Build on TSV files, as prepare_data --tsv does) into a local TFDS directory.
  data_dir = input_helpers.BuildCorpus(str(tmp_path / 'corpus'))
  exp = _RamMoE(data_dir, vocab_dir)

  # Train; SIGTERM after step 4 saves it and stops the loop (Preempted); a new trainer resumes there.
  lines = []

  def Log(line):
    lines.append(line)
    if line.startswith('step      4/'):
      os.kill(os.getpid(), signal.SIGTERM)

  with pytest.raises(trainer_lib.Preempted, match=f'SIGTERM: saved {logdir}/ckpt-4'):
    trainer_lib.Trainer(exp, sharding.Partitioner('none'), logdir, log=Log).Train()
  assert any('object storage has no lock' in l for l in lines)
  assert checkpoints.CheckpointCandidates(logdir, repair=False) == [f'{logdir}/ckpt-4', f'{logdir}/ckpt-3']
  lines.clear()
  trainer_lib.Trainer(exp, sharding.Partitioner('none'), logdir, log=lines.append).Train()
  assert any(l.startswith(f'restored {logdir}/ckpt-4 at step 4') for l in lines), lines
  assert [r['step'] for r in checkpoints.ReadLog(logdir)] == [3, 4, 6]  # appended across both processes
  assert [r['step'] for r in files.ReadJsonl(f'{logdir}/dev_eval.jsonl')] == [3, 6]

  # Decode the test split: results, hypotheses and summaries in the log directory.
  results, ev, _, _ = decode_job.Decode(exp, logdir, max_sentences=8, log=lambda line: None)
  result_dir = f'{logdir}/decode_test/ckpt-6'
  assert json.loads(files.ReadText(f'{result_dir}/results.json'))['languages'] == results['languages']

  # Reports read the run and its decodes, and write there.
  points = curves.Points(logdir, 'test', 'all')
  assert [p['step'] for p in points] == [6]
  decodes = significance.LoadDecodes(result_dir)
  compared = significance.PairedBootstrap(decodes, decodes, 'chrf', 10, 1)
  files.WriteJson(f'{reports}/compare.json', compared)
  curves.Plot({'run': points}, f'{reports}/curves.png', 'all')
  assert files.ReadBytes(f'{reports}/curves.png').startswith(b'\x89PNG')

  # An average of the last two checkpoints, written as a log directory of its own.
  averaged = averaging.Write(averaging.Plan(exp, logdir, last=2), f'{ram}/average', log=lambda line: None)
  assert averaging.Record(averaged)['steps'] == [4, 6]

  # Export, then translate with the run and with the export: the same translations; the tool reads and
  # writes its files there too (gshard_translate's file path; its flags, which another tool's flags in the
  # same test worker would collide with, are tested in translate_export_test).
  export.Export(ev, '_RamMoE', export_dir, log=lambda line: None)
  sources = [s for lang in decodes.hypotheses for s in files.ReadText(f'{result_dir}/{lang}.src').splitlines()][:12]
  by_run, _ = translator.FromRun(exp, logdir, log=lambda line: None).TranslateNbest(sources)
  loaded = translator.FromSavedModel(export_dir)
  by_export, _ = loaded.TranslateNbest(sources)
  assert [n[0][0] for n in by_export] == [n[0][0] for n in by_run]
  files.WriteText(f'{ram}/in.txt', ''.join(s + '\n' for s in sources))
  with files.Open(f'{ram}/in.txt', 'rb') as stream:
    counts = text_io.TranslateInto(loaded, stream, 'in.txt', f'{reports}/out.txt',
                                   text_io.Options(buffer_size=5))
  assert counts.lines == len(sources)
  assert files.ReadText(f'{reports}/out.txt').splitlines() == [n[0][0] for n in by_run]

  stored = {path for depth in (2, 3, 4) for path in tf.io.gfile.glob(ram + '/*' * depth)}
  for name in ('run/params.txt', 'run/data.json', 'run/checkpoint', 'run/ckpt-6.index', 'run/checkpoints.jsonl',
               'run/dev_eval.jsonl', 'vocab/spm_shared_600.model', 'vocab/spm_shared_600.model.json',
               'run/decode_test/ckpt-6/results.json', 'export/saved_model.pb', 'export/assets.extra/lingvo_gshard.json',
               'average/ckpt-6.index', 'reports/compare.json', 'reports/out.txt'):
    assert f'{ram}/{name}' in stored, name
  assert tf.io.gfile.listdir(f'{logdir}/train')  # TensorBoard summaries
  assert not [p for p in stored if '.tmp-' in p or '.partial-' in p]  # no temporary file left behind

  # Nothing local but the corpus: no write outside tmp_path, none in the working directory or $HOME.
  assert not outside, outside[:10]
  assert _LocalFiles(places['cwd']) == [] and _LocalFiles(places['home']) == []
  assert not [f for f in _LocalFiles(tmp_path) if not f.startswith(('corpus/', 'tmp/'))]
