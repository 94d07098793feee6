"""The evaluator: restores a run as trained (overrides included), scores like the sacrebleu command line,
decodes TSV test sets with clear errors, writes aligned hypothesis files and merges results."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import sacrebleu

from lingvo_gshard.core import sharding
from lingvo_gshard.data import reader
from lingvo_gshard.data import report
from lingvo_gshard.eval import evaluator
from lingvo_gshard.eval import heldout
from lingvo_gshard.input import tokenizer
from lingvo_gshard.train import checkpoints
from lingvo_gshard.train import trainer as trainer_lib
from trainer_test import _SmallMoE
from trainer_test import data_dir  # pylint: disable=unused-import  (the small built corpus fixture)

OVERRIDES = 'task.encoder.num_layers : 3; learner.max_steps : 4; learner.save_interval : 4'


@pytest.fixture(scope='module')
def run(data_dir, tmp_path_factory):
  """A 4-step run trained with a 3-layer encoder (the experiment's is 2)."""
  logdir = str(tmp_path_factory.mktemp('run'))
  trainer = trainer_lib.Trainer(_SmallMoE(data_dir), sharding.Partitioner('none'), logdir, overrides=OVERRIDES,
                                log=lambda line: None)
  trainer.Train()
  return logdir


def test_metrics_equal_the_sacrebleu_command_line(tmp_path):
  refs = ['The cat sat on the mat.', 'Open the file %s', 'Cannot save: disk full', 'Undo']
  hyps = ['The cat sat on a mat.', 'Open file %s', 'Could not save: the disk is full', 'Redo']
  for name, lines in (('ref', refs), ('hyp', hyps)):
    (tmp_path / name).write_text(''.join(l + '\n' for l in lines))
  out = subprocess.run([sys.executable, '-m', 'sacrebleu', str(tmp_path / 'ref'), '-i', str(tmp_path / 'hyp'),
                        '-m', 'bleu', 'chrf', '-b', '-w', '4'], capture_output=True, text=True, check=True)
  cli_bleu, cli_chrf = json.loads(out.stdout)  # with -b, sacrebleu prints the scores as a JSON list
  bleu, bleu_sig = evaluator.Bleu(hyps, refs)
  chrf, chrf_sig = evaluator.Chrf(hyps, refs)
  assert round(bleu, 4) == cli_bleu and round(chrf, 4) == cli_chrf
  assert 'tok:13a' in bleu_sig and 'nc:6' in chrf_sig
  assert 0 < bleu < 100 and 0 < chrf < 100
  assert evaluator.Bleu(refs, refs)[0] == pytest.approx(100.0)
  assert evaluator.Chrf(refs, refs)[0] == pytest.approx(100.0)


def test_references_through_the_vocabulary_score_100(data_dir):
  """The scoring path (ids -> Decode -> sacrebleu) gives 100 when the ids are the references' own pieces."""
  _, tgt_vocab = _SmallMoE(data_dir).Test().Instantiate().Vocabularies()
  refs = [t for _, t in reader.Pairs(data_dir, 'de', 'test')]
  hyps = [tgt_vocab.Decode(tgt_vocab.Encode(r) + [tokenizer.EOS_ID, 7, 7]) for r in refs]
  norm = [tgt_vocab.Normalize(r) for r in refs]
  assert evaluator.Bleu(hyps, norm)[0] == pytest.approx(100.0)
  assert evaluator.Chrf(hyps, norm)[0] == pytest.approx(100.0)
  assert evaluator.Bleu(hyps[1:] + hyps[:1], norm)[0] < 50


def test_restores_the_run_with_its_overrides_and_writes_aligned_files(data_dir, run):
  ev = evaluator.Evaluator(_SmallMoE(data_dir), run, beam_size=2, log=lambda line: None)
  assert ev.params.task.encoder.num_layers == 3
  assert len([n for n, _ in ev.model.IterVariables() if 'encoder.layers_2.' in n]) > 0
  res = ev.Evaluate(heldout.FromCorpus(data_dir, 'test', max_sentences=10, log=lambda line: None), examples=2)
  manifest = reader.LoadManifest(data_dir)
  assert set(res['languages']) == set(manifest['languages'])
  out_dir = ev.ResultDir('test')
  for lang, r in res['languages'].items():
    pairs = reader.Pairs(data_dir, lang, 'test')[:10]
    assert r['sentences'] == len(pairs) and 0 <= r['bleu'] <= 100 and 0 <= r['chrf'] <= 100
    lines = {ext: open(os.path.join(out_dir, f'{lang}.{ext}'), encoding='utf-8').read().split('\n')[:-1]
             for ext in ('src', 'ref', 'hyp')}
    assert lines['src'] == [s for s, _ in pairs] and lines['ref'] == [t for _, t in pairs]
    assert len(lines['hyp']) == len(pairs)
    # The stored scores are the hypotheses files' scores.
    assert r['bleu'] == pytest.approx(evaluator.Bleu(lines['hyp'], lines['ref'])[0])
    assert r['distinct'] == len(set(lines['hyp'])) / len(pairs)
  assert res['step'] == 4 and res['checkpoint'].endswith('ckpt-4')
  avg = res['averages']
  assert avg['all']['languages'] == len(manifest['languages'])
  high = [l for l in res['languages'] if manifest['languages'][l]['bucket'] == 'high']
  assert avg['high']['bleu'] == pytest.approx(np.mean([res['languages'][l]['bleu'] for l in high]))
  assert len(res['examples']) == 2 and len({e['lang'] for e in res['examples']}) == 2


def test_results_are_merged_not_overwritten(data_dir, run, tmp_path):
  ev = evaluator.Evaluator(_SmallMoE(data_dir), run, beam_size=1, log=lambda line: None)
  tsv = tmp_path / 'ui'
  tsv.mkdir()
  pairs = reader.Pairs(data_dir, 'ru', 'test')[:5]
  (tsv / 'ru.tsv').write_text(''.join(f'{s}\t{t}\n' for s, t in pairs), encoding='utf-8')
  ev.Evaluate(heldout.FromTsvDir(str(tsv), ['de', 'ru']))
  (tsv / 'ru.tsv').unlink()
  (tsv / 'de.tsv').write_text('Hallo\tHello\n', encoding='utf-8')
  res = ev.Evaluate(heldout.FromTsvDir(str(tsv), ['de', 'ru']))
  assert set(res['languages']) == {'de', 'ru'} and res['languages']['ru']['sentences'] == 5
  stored = json.load(open(os.path.join(ev.ResultDir('tsv-ui'), 'results.json')))
  assert set(stored['languages']) == {'de', 'ru'} and stored['set'] == 'tsv-ui'
  # Results of another beam are not mixed into these, and that is said before anything is decoded.
  lines = []
  other = evaluator.Evaluator(_SmallMoE(data_dir), run, beam_size=3, log=lines.append)
  with pytest.raises(ValueError, match=r'holds results of beam 1, alpha 0.6, no-repeat n-gram 0; not merging beam 3'):
    other.Evaluate(heldout.FromTsvDir(str(tsv), ['de', 'ru']))
  assert not [l for l in lines if 'decod' in l], lines


def test_a_checkpoint_of_another_architecture_is_one_line(data_dir, run, tmp_path):
  # The same checkpoint, with the params.txt that says 3 encoder layers removed: the experiment's 2 layers
  # no longer match it, and the error names a weight.
  copy = tmp_path / 'run'
  copy.mkdir()
  for name in os.listdir(run):
    if name.startswith('ckpt') or name == 'checkpoint':
      (copy / name).write_bytes(open(os.path.join(run, name), 'rb').read())
  with pytest.raises(checkpoints.CheckpointMismatchError, match=r'has 1\d* weights the model lacks, e\.g\. '
                     r'w/mt/encoder/layers_2/'):
    evaluator.Evaluator(_SmallMoE(data_dir), str(copy), log=lambda line: None)


def test_tsv_errors_name_file_and_line(tmp_path):
  d = tmp_path / 'ts'
  d.mkdir()
  (d / 'de.tsv').write_text('a\tb\nc\td\te\n', encoding='utf-8')
  with pytest.raises(report.DataError, match=r'de\.tsv:2: expected 2 tab-separated columns .*got 3'):
    heldout.FromTsvDir(str(d), ['de'])
  (d / 'de.tsv').write_bytes(b'a\tb\nok\tfine\n\xff\xfe\tx\n')
  with pytest.raises(report.DataError, match=r'de\.tsv:3: not UTF-8'):
    heldout.FromTsvDir(str(d), ['de'])
  (d / 'de.tsv').write_text('a\tb\n', encoding='utf-8')
  (d / 'xx.tsv').write_text('a\tb\n', encoding='utf-8')
  with pytest.raises(report.DataError, match=r"xx\.tsv: language 'xx' is not in the languages the model was trained on"):
    heldout.FromTsvDir(str(d), ['de'])
  (d / 'xx.tsv').unlink()
  (d / 'ru.tsv').write_text('\n\n', encoding='utf-8')
  ts = heldout.FromTsvDir(str(d), ['de', 'ru'])
  assert list(ts.pairs) == ['de'] and ts.skipped == {'empty files': 1}


def test_evaluate_tool_checks_flags_before_decoding(tmp_path):
  for args, message in [(['--max_sentences=-1'], 'flag --max_sentences=-1: -1 is not a non-negative integer'),
                        (['--baselines=/tmp/bilingual'], 'has no {lang} placeholder'),
                        (['--baselines=/tmp/{lang}/{split}'], 'only {lang} may be a placeholder'),
                        (['--baselines=/tmp/{lang}', f'--plot={tmp_path}/nodir/x.png'], 'is not writable'),
                        (['--beam_size=0'], 'flag --beam_size=0: 0 is not a positive integer'),
                        (['--no_repeat_ngram=-2'], 'flag --no_repeat_ngram=-2: -2 is not a non-negative integer')]:
    out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.evaluate', '--model=M4TinyMoE',
                          f'--logdir={tmp_path}'] + args, capture_output=True, text=True, timeout=120)
    err = [l for l in out.stderr.splitlines() if l.startswith('evaluate:')]
    assert out.returncode == 1 and len(err) == 1 and message in err[0], out.stderr[-1500:]
