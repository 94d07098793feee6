"""gshard_translate and gshard_export on a tiny trained run: the evaluator's translations in input order, empty
lines, bad UTF-8, long sources, n-best, jsonl; a SavedModel that a fresh process with only TensorFlow and
TensorFlow Text loads and that translates as gshard_translate does; refusals in one line."""
import json
import os
import subprocess
import sys

import pytest

from lingvo_gshard.core import sharding
from lingvo_gshard.data import reader
from lingvo_gshard.eval import evaluator
from lingvo_gshard.serve import export
from lingvo_gshard.serve import translator
from lingvo_gshard.train import trainer as trainer_lib
from trainer_test import _SmallMoE
from trainer_test import data_dir  # pylint: disable=unused-import  (the small built corpus fixture)

_DATA_DIR_ENV = 'TRANSLATE_TEST_DATA_DIR'


class TinyTranslator(_SmallMoE):
  """_SmallMoE with the argument-free constructor the tools need (its corpus from the environment); the tools
  take it as --model=<this file>:TinyTranslator (not registered: the registry is shared by every test)."""

  def __init__(self):
    super().__init__(os.environ[_DATA_DIR_ENV])


@pytest.fixture(scope='module')
def run(data_dir, tmp_path_factory):
  """(log directory, test sources, evaluator hypotheses) of a 6-step run of TinyTranslator."""
  os.environ[_DATA_DIR_ENV] = data_dir
  logdir = str(tmp_path_factory.mktemp('run'))
  trainer_lib.Trainer(TinyTranslator(), sharding.Partitioner('none'), logdir, log=lambda line: None).Train()
  pairs = [p for lang in reader.LoadManifest(data_dir)['languages'] for p in reader.Pairs(data_dir, lang, 'test')]
  sources = [s for s, _ in pairs][:40]
  hyps, _ = evaluator.Evaluator(TinyTranslator(), logdir, log=lambda line: None).Translate(sources)
  return logdir, sources, hyps


def _Main(tool, args, stdin=b'', capsys=None):
  """Runs the tool's binary with `args` (--model=TinyTranslator meaning this file's class); returns (exit
  status, stdout, last stderr line). A subprocess: two tools' flags cannot share a test worker."""
  del capsys
  args = [f'--model={os.path.abspath(__file__)}:TinyTranslator' if a == '--model=TinyTranslator' else a
          for a in args]
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.abspath(__file__))] +
                                                     os.environ.get('PYTHONPATH', '').split(os.pathsep)))
  out = subprocess.run([sys.executable, '-m', f'lingvo_gshard.tools.{tool}'] + args, input=stdin, env=env,
                       capture_output=True, timeout=600)
  err = out.stderr.decode('utf-8', errors='replace').strip().splitlines()
  return out.returncode, out.stdout.decode('utf-8'), err[-1] if err else ''


def test_translate_gives_the_evaluator_translations_in_input_order(run, tmp_path, capsys):
  logdir, sources, hyps = run
  (tmp_path / 'in.txt').write_text(''.join(s + '\n' for s in sources), encoding='utf-8')
  status, _, last = _Main('translate', ['--model=TinyTranslator', f'--logdir={logdir}',
                                        f'--input={tmp_path / "in.txt"}', f'--output={tmp_path / "out.txt"}'],
                          capsys=capsys)
  assert status == 0 and last.startswith(f'translated {len(sources)} lines of '), last
  assert (tmp_path / 'out.txt').read_text(encoding='utf-8').splitlines() == hyps
  # The same through stdin, small buffers (several decode calls), stdout.
  status, out, _ = _Main('translate', ['--model=TinyTranslator', f'--logdir={logdir}', '--buffer_size=7'],
                         stdin=''.join(s + '\n' for s in sources).encode(), capsys=capsys)
  assert status == 0 and len(out.splitlines()) == len(sources)


def test_empty_lines_long_sources_nbest_and_jsonl(run, tmp_path, capsys):
  logdir, sources, _ = run
  long_source = ' '.join(sources[:12])  # far over the 48-piece maximum
  lines = [sources[0], '', long_source, '   ', sources[1]]
  status, out, last = _Main('translate', ['--model=TinyTranslator', f'--logdir={logdir}', '--format=jsonl',
                                          '--nbest=3'], stdin=''.join(l + '\n' for l in lines).encode(),
                            capsys=capsys)
  assert status == 0, last
  rows = [json.loads(l) for l in out.splitlines()]
  assert [r['line'] for r in rows] == [1, 2, 3, 4, 5] and [r['source'] for r in rows] == lines
  assert rows[1]['translation'] == '' and rows[1]['nbest'] == [] and rows[3]['translation'] == ''
  assert [r['truncated'] for r in rows] == [False, False, True, False, False]
  for r in (rows[0], rows[2], rows[4]):
    scores = [h['score'] for h in r['nbest']]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True) and r['score'] == scores[0]
    assert r['translation'] == r['nbest'][0]['translation']
  assert '2 empty' in last and '1 cut to the model\'s longest source' in last


def test_invalid_utf8_names_the_line_or_is_replaced(run, tmp_path, capsys):
  logdir, sources, _ = run
  data = (sources[0] + '\n').encode() + b'caf\xe9 ouvert\n'
  (tmp_path / 'out.txt').write_text('an earlier output\n')
  args = ['--model=TinyTranslator', f'--logdir={logdir}', f'--output={tmp_path / "out.txt"}']
  status, _, last = _Main('translate', args, stdin=data, capsys=capsys)
  assert (status, last) == (1, 'translate: <stdin>:2: not UTF-8 (byte 4 of the line); --errors=replace '
                               'translates it with U+FFFD for the bad bytes')
  assert (tmp_path / 'out.txt').read_text() == 'an earlier output\n'  # untouched
  assert not [f for f in os.listdir(tmp_path) if '.partial-' in f]
  status, _, last = _Main('translate', args + ['--errors=replace'], stdin=data, capsys=capsys)
  assert status == 0 and 'with bytes that are not UTF-8 replaced' in last
  assert len((tmp_path / 'out.txt').read_text().splitlines()) == 2


@pytest.mark.parametrize('args,message', [
    ([], 'give --model and --logdir (a trained run), or --saved_model (an export)'),
    (['--saved_model=/x', '--model=TinyTranslator'], '--saved_model translates with an export; --model'),
    (['--model=TinyTranslator', '--logdir=/nonexistent'], '--logdir=/nonexistent: no such directory'),
    (['--model=TinyTranslator', '--logdir=/', '--nbest=5'], '--nbest=5 needs a beam of at least 5'),
    (['--model=TinyTranslator', '--logdir=/', '--input=/nonexistent.txt'], '--input=/nonexistent.txt: no such'),
    (['--saved_model=/nonexistent'], '--saved_model=/nonexistent: no such directory'),
])
def test_translate_flag_errors_are_one_line_before_anything_runs(args, message, capsys):
  status, _, last = _Main('translate', args, capsys=capsys)
  assert status == 1 and last.startswith(f'translate: {message}'), last


def test_source_language_is_checked_against_the_run(run, capsys):
  status, _, last = _Main('translate', ['--model=TinyTranslator', f'--logdir={run[0]}', '--source_language=fre'],
                          stdin=b'x\n', capsys=capsys)
  assert status == 1 and last.startswith("translate: --source_language: language 'fre' is not in the languages "
                                         'the model was trained on'), last


@pytest.fixture(scope='module')
def exported(run, tmp_path_factory):
  out = str(tmp_path_factory.mktemp('export') / 'model')
  t = translator.FromRun(TinyTranslator(), run[0], log=lambda line: None)
  export.Export(t.evaluator, 'TinyTranslator', out, log=lambda line: None)
  return out


# A fresh interpreter with only TensorFlow and TensorFlow Text: loads the export, translates argv[2:], prints
# the JSON of its outputs and whether anything of this project was imported.
_FRESH = '''
import json, sys
import tensorflow as tf
import tensorflow_text  # the SentencePiece ops
serve = tf.saved_model.load(sys.argv[1]).signatures['serving_default']
out = serve(sources=tf.constant(sys.argv[2:]))
print(json.dumps({'translations': [t.decode() for t in out['translations'].numpy()],
                  'scores': out['scores'].numpy().tolist(), 'nbest': out['nbest_translations'].shape.as_list(),
                  'ours': sorted(m for m in sys.modules if m.startswith(('lingvo_gshard', 'sentencepiece')))}))
'''


def test_export_loads_in_a_fresh_process_and_translates_as_translate_does(run, exported, tmp_path, capsys):
  logdir, sources, hyps = run
  t = translator.FromRun(TinyTranslator(), logdir, log=lambda line: None)
  # Sentences of one length bucket (9-16 pieces with eos): one batch for the evaluator's batching and one for
  # a single request, so both decode them with the same batch-mates (MoE capacity is shared in a batch).
  lengths = {s: len(t.evaluator.src_vocab.Encode(s)) + 1 for s in sources}
  batch = [s for s in sources if 8 < lengths[s] <= 16][:5]
  assert len(batch) == 5
  out = subprocess.run([sys.executable, '-c', _FRESH, exported] + batch, capture_output=True, text=True,
                       timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  got = json.loads(out.stdout.strip().splitlines()[-1])
  assert got['ours'] == [] and got['nbest'] == [5, 4]
  in_process, _ = t.TranslateNbest(batch)
  assert got['translations'] == [n[0][0] for n in in_process]
  assert got['scores'] == pytest.approx([n[0][1] for n in in_process], abs=1e-5)
  # Through gshard_translate: the whole test file, batched as the evaluator batches it.
  (tmp_path / 'in.txt').write_text(''.join(s + '\n' for s in sources), encoding='utf-8')
  status, stdout, last = _Main('translate', [f'--saved_model={exported}', f'--input={tmp_path / "in.txt"}'],
                               capsys=capsys)
  assert status == 0, last
  assert stdout.splitlines() == hyps


def test_export_signature_as_saved_model_cli_shows_it(exported):
  out = subprocess.run(['saved_model_cli', 'show', '--dir', exported, '--tag_set', 'serve', '--signature_def',
                        'serving_default'], capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  text = out.stdout
  assert "inputs['sources'] tensor_info:\n      dtype: DT_STRING\n      shape: (-1)" in text
  for name, dtype, shape in [('translations', 'DT_STRING', '(-1)'), ('scores', 'DT_FLOAT', '(-1)'),
                             ('nbest_translations', 'DT_STRING', '(-1, 4)'),
                             ('nbest_scores', 'DT_FLOAT', '(-1, 4)'), ('truncated', 'DT_BOOL', '(-1)')]:
    assert f"outputs['{name}'] tensor_info:\n      dtype: {dtype}\n      shape: {shape}" in text, text
  metadata = export.ReadMetadata(exported)
  assert metadata['experiment'] == 'TinyTranslator' and metadata['step'] == 6
  assert metadata['beam_size'] == 4 and metadata['buckets'] == [8, 16, 32, 48]


def test_export_refuses_a_non_empty_directory_and_translate_an_incomplete_export(run, exported, tmp_path,
                                                                                capsys):
  target = tmp_path / 'busy'
  target.mkdir()
  (target / 'keep.txt').write_text('mine')
  # Through the binary (its flags and translate's cannot share a process); refused before any run is read.
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.export', '--model=M4TinyMoE',
                        f'--logdir={run[0]}', f'--export_dir={target}'], capture_output=True, text=True, timeout=300)
  assert (out.returncode, out.stderr.strip().splitlines()[-1]) == (
      1, f'export: --export_dir={target}: not empty; pass --overwrite to replace what is there')
  assert os.listdir(target) == ['keep.txt']
  broken = tmp_path / 'broken'
  subprocess.run(['cp', '-r', exported, str(broken)], check=True)
  os.remove(broken / 'saved_model.pb')
  status, _, last = _Main('translate', [f'--saved_model={broken}'], stdin=b'x\n', capsys=capsys)
  assert (status, last) == (1, f'translate: --saved_model={broken}: incomplete export, no saved_model.pb '
                               '(export it again with python -m lingvo_gshard.tools.export)')
  status, _, last = _Main('translate', [f'--saved_model={exported}', '--beam_size=2'], stdin=b'x\n', capsys=capsys)
  assert (status, last) == (1, f'translate: --saved_model={exported} was exported with --beam_size=4; export it '
                               'again to change them')
