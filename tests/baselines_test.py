"""Bilingual baselines (train_baselines) and the ΔBLEU report (m4_report) on a two-language corpus.

The baselines really train (a few steps of a tiny model through the registered experiments' override path),
decode and score; the report is checked against the files it is built from.
"""
import dataclasses
import json
import os
import struct
import subprocess
import sys

import pytest

from lingvo_gshard.campaigns import bilingual_baselines
from lingvo_gshard.core import sharding
from lingvo_gshard.data import gettext_m4
from lingvo_gshard.data import reader
from lingvo_gshard.data import report
from lingvo_gshard.eval import dev_eval
from lingvo_gshard.params import bilingual
from lingvo_gshard.report import delta_bleu
from lingvo_gshard.train import dev_metrics
from lingvo_gshard.train import trainer as trainer_lib
from lingvo_gshard.utils import files
from lingvo_gshard.utils import provenance
import input_helpers

SIZES = {'de': 400, 'ru': 200}
# After each pair's own overrides (its tier's sizes and budget): the test corpus' sizes, 4 steps.
TINY = ('task.model_dim : 32; task.hidden_dim : 64; task.num_heads : 2; task.encoder.num_layers : 1; '
        'task.decoder.num_layers : 1; learner.max_steps : 4; learner.eval_interval : 2; '
        'learner.save_interval : 2; learner.eval_batches : 1; learner.optimizer.warmup_steps : 1; '
        'input.train.batch_rows : 4')


class _Tiny(bilingual.BilingualBase):
  """Bilingual_<lang> on the test corpus, with 400-piece vocabularies (two languages have too few pieces for
  the other tests' 600)."""
  SOURCE_VOCAB = TARGET_VOCAB = 400
  MAX_LENGTH = 48

  def __init__(self, data_dir, lang):
    self.DATA_DIR, self.LANGUAGE = data_dir, lang

  def _Input(self, split, repeat):
    p = input_helpers.InputParams(self.DATA_DIR, split=split, repeat=repeat, batch_rows=4,
                                  languages=[self.LANGUAGE])
    p.vocab.Set(source_size=self.SOURCE_VOCAB, target_size=self.TARGET_VOCAB)
    return p


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  return input_helpers.BuildCorpus(str(tmp_path_factory.mktemp('corpus')), SIZES)


def _Runner(data_dir, root, runs, lines):
  return bilingual_baselines.BaselineRunner(str(root), data_dir, str(runs), max_sentences=5, beam_size=2,
                                  extra_overrides=TINY, make_experiment=lambda p: _Tiny(data_dir, p.lang),
                                  log=lines.append)


@pytest.fixture(scope='module')
def ran(data_dir, tmp_path_factory):
  """de interrupted at step 2, then a run of [de, a pair with no data, ru]: (root, runs, plans, summary,
  log lines)."""
  root, runs = tmp_path_factory.mktemp('root'), tmp_path_factory.mktemp('runs')
  plans = bilingual_baselines.Plan(reader.LoadManifest(data_dir))
  assert [p.lang for p in plans] == ['de', 'ru']  # largest first
  de, ru = plans
  # A killed pair: its log directory holds a checkpoint at step 2 of 4.
  partial = trainer_lib.Trainer(_Tiny(data_dir, 'de'), sharding.Partitioner('none'), str(root / 'de'),
                                overrides=f'{de.overrides}; {TINY}', max_steps=2, log=lambda l: None)
  partial.Train()
  assert partial.Step() == 2
  broken = dataclasses.replace(ru, lang='xx', experiment='Bilingual_xx')
  lines = []
  summary = _Runner(data_dir, root, runs, lines).Run([de, broken, ru])
  return root, runs, plans, summary, lines


def test_plans_follow_the_tiers_and_budget(data_dir):
  plans = bilingual_baselines.Plan(reader.LoadManifest(data_dir), ['ru'])
  assert len(plans) == 1 and plans[0].tier == 'small' and plans[0].steps == bilingual.MIN_STEPS
  assert 'task.model_dim : 128' in plans[0].overrides and 'learner.early_stop_patience : 2' in plans[0].overrides
  assert [bilingual.Tier(n)[0] for n in (40000, 30000, 29999, 8000, 7999, 0)] == [
      'large', 'large', 'medium', 'medium', 'small', 'small']
  assert [bilingual.Steps(n) for n in (100, 2500, 3000, 10 ** 6)] == [1500, 1500, 1800, 2000]
  with pytest.raises(report.DataError, match=r"^languages: language 'xx' is not in the corpus \(2 languages\)$"):
    bilingual_baselines.Plan(reader.LoadManifest(data_dir), ['de', 'xx'])


def test_pairs_train_resume_and_record_their_scores(ran):
  root, runs, _, summary, lines = ran
  assert summary['finished'] == ['de', 'ru'] and summary['skipped'] == []
  # The killed pair resumed from its checkpoint instead of starting again.
  assert any('restored' in l and 'ckpt-2' in l for l in lines), lines
  for lang in ('de', 'ru'):
    record = json.load(open(runs / f'{lang}.json'))
    # The scores are the evaluator's, of the checkpoint with the lowest dev cross-entropy.
    best = dev_metrics.Best([r for r in dev_metrics.ReadDevLog(str(root / lang)) if r['job'] == 'trainer'])
    assert record['checkpoint_step'] == best['step'] and record['dev_xent'] == best['xent']
    decoded = json.load(open(root / lang / 'decode_test' / f'ckpt-{best["step"]}' / 'results.json'))
    assert record['bleu'] == decoded['languages'][lang]['bleu']
    assert record['chrf'] == decoded['languages'][lang]['chrf']
    assert record['sentences'] == 5 and record['steps_trained'] == 4 and record['tier'] == 'small'
    assert record['bleu_signature'].startswith('nrefs:1|case:mixed') and 'learner.max_steps : 4' in record[
        'overrides']
    assert 'learner.max_steps : 4' in open(root / lang / 'params.txt').read()
    assert record['data_version'] == gettext_m4.DATASET_VERSION


def test_a_failing_pair_is_reported_and_the_rest_finish(ran):
  _, runs, _, summary, lines = ran
  assert list(summary['failed']) == ['xx'] and 'xx' in summary['failed']['xx']
  assert len(summary['failed']['xx'].splitlines()) == 1
  assert any('xx FAILED' in l for l in lines) and not (runs / 'xx.json').exists()
  assert '2 finished, 0 skipped, 1 failed' in lines[-2] or '2 finished, 0 skipped, 1 failed' in lines[-1]


def test_a_rerun_skips_finished_pairs(data_dir, ran):
  root, runs, plans, _, _ = ran
  before = {p: os.stat(runs / f'{p}.json').st_mtime_ns for p in ('de', 'ru')}
  ckpts = sorted(os.listdir(root / 'de'))
  lines = []
  summary = _Runner(data_dir, root, runs, lines).Run(plans)
  assert summary == {'finished': [], 'skipped': ['de', 'ru'], 'failed': {}}
  assert {p: os.stat(runs / f'{p}.json').st_mtime_ns for p in ('de', 'ru')} == before
  assert sorted(os.listdir(root / 'de')) == ckpts  # nothing trained or decoded again


def test_early_stopping_rule():
  rows = [{'step': s, 'xent': x} for s, x in [(100, 3.0), (200, 2.5), (300, 2.6), (400, 2.55)]]
  assert dev_metrics.EarlyStop(rows[:3], patience=2) is None          # too few evaluations
  why = dev_metrics.EarlyStop(rows, patience=2)
  assert 'best 2.5000 at step 200' in why and 'steps 300-400' in why
  assert dev_metrics.EarlyStop(rows, patience=3) is None               # 2.5 < 3.0
  assert dev_metrics.EarlyStop(rows[:2], patience=1, tolerance=0.4) is None   # 0.5 better than 3.0 - 0.4
  assert dev_metrics.EarlyStop(rows[:2], patience=1, tolerance=0.6)   # not by more than 0.6
  assert dev_metrics.Best(rows)['step'] == 200
  assert dev_metrics.FirstEarlyStop(rows, 2, 0.0, max_steps=1000)[0] == 400
  assert dev_metrics.FirstEarlyStop(rows, 2, 0.0, max_steps=400) is None   # at the budget's end: no early stop
  assert dev_metrics.FirstEarlyStop(rows + [{'step': 500, 'xent': 2.0}], 2, 0.0, 1000)[0] == 400  # the first


def test_training_stops_early_and_a_rerun_does_not_go_on(data_dir, tmp_path):
  # Any drop smaller than 100 nats counts as no improvement: the second evaluation (step 4) stops the run.
  overrides = (f'{TINY}; learner.max_steps : 12; learner.early_stop_patience : 1; '
               'learner.early_stop_tolerance : 100.0')
  lines = []
  t = trainer_lib.Trainer(_Tiny(data_dir, 'de'), sharding.Partitioner('none'), str(tmp_path), overrides=overrides,
                          log=lines.append)
  t.Train()
  assert t.Step() == 4 and t.EarlyStopped()[0] == 4
  assert any('early stop' in l for l in lines)
  assert os.path.exists(tmp_path / 'ckpt-4.index')
  # The evaler job knows no newer checkpoint will come (it would wait for step 12 forever), and its rows in
  # dev_eval.jsonl do not hide the trainer's history from the rerun below.
  evaler_lines = []
  evaler = dev_eval.DevEvaler(_Tiny(data_dir, 'de'), sharding.Partitioner('none'), str(tmp_path),
                              log=evaler_lines.append)
  assert evaler.Watch(timeout=120) == 2 and any('stopped early at step 4' in l for l in evaler_lines)
  lines.clear()
  again = trainer_lib.Trainer(_Tiny(data_dir, 'de'), sharding.Partitioner('none'), str(tmp_path),
                              overrides=overrides, log=lines.append)
  assert again.Train() == {} and again.Step() == 0  # returns before restoring anything
  assert any('stopped early at step 4' in l for l in lines)


def _PngSize(path):
  with open(path, 'rb') as f:
    head = f.read(24)
  assert head[:8] == b'\x89PNG\r\n\x1a\n' and head[12:16] == b'IHDR'
  return struct.unpack('>II', head[16:24])


def _Corpus(runs):
  corpus = {'name': 'gettext_m4', 'version': '1.1.0', 'fingerprint': 'f11',
            'languages': {'aa': {'train': 900, 'test': 10, 'bucket': 'high'},
                          'bb': {'train': 500, 'test': 10, 'bucket': 'medium'},
                          'cc': {'train': 100, 'test': 8, 'bucket': 'low'}}}
  files.WriteJson(str(runs / 'corpus.json'), corpus)
  return corpus


def test_report_numbers_equal_its_inputs_and_missing_stay_missing(tmp_path):
  runs, out = tmp_path / 'runs', tmp_path / 'out'
  _Corpus(runs)
  sig = {'bleu_signature': 'nrefs:1|tok:13a', 'chrf_signature': 'nrefs:1|nc:6'}
  for lang, bleu, chrf in (('aa', 20.0, 40.0), ('cc', 5.0, 20.0)):  # bb has no baseline
    files.WriteJson(str(runs / 'bilingual' / f'{lang}.json'), dict(
        sig, lang=lang, bleu=bleu, chrf=chrf, set='test', max_sentences=0, sentences=10 if lang == 'aa' else 8,
        steps_trained=300, wall_clock_s=60.0, commit='abc', **({'data_version': '1.1.0'} if lang == 'aa' else {})))
  # Two evaluated checkpoints of the MoE run: the newer one is the report's; a dev-set piece is ignored.
  logdir = tmp_path / 'moe_run'
  logdir.mkdir()
  files.WriteJson(str(logdir / 'data.json'), {'name': 'gettext_m4', 'version': '1.1.0', 'fingerprint': 'f11',
                                                  'data_dir': '/data'})
  with open(logdir / 'checkpoints.jsonl', 'w') as f:
    for step, secs, commit in ((100, 50.0, 'c100'), (200, 110.0, 'c200')):
      f.write(json.dumps({'step': step, 'checkpoint': f'ckpt-{step}', 'train_seconds': secs,
                          'commit': commit}) + '\n')
  for step, scores in ((100, {'aa': 10.0, 'bb': 8.0, 'cc': 1.0}), (200, {'aa': 22.5, 'bb': 12.0, 'cc': 7.0})):
    res = dict(sig, experiment='M4TinyMoE', checkpoint=str(logdir / f'ckpt-{step}'), step=step, set='test',
               languages={l: {'bleu': b, 'chrf': 2 * b, 'sentences': 8 if l == 'cc' else 10}
                          for l, b in scores.items()}, decode_seconds=3.0)
    delta_bleu.AddRun(str(runs), 'moe', str(logdir), res)
  dev = dict(res, set='dev', languages={l: dict(v, bleu=99.0) for l, v in res['languages'].items()})
  delta_bleu.AddRun(str(runs), 'moe', str(logdir), dev)
  # The dense run scored only part of the test split: not the report's, unless it asks for that sample.
  part = dict(res, experiment='M4TinyDense', step=200, languages={'aa': {'bleu': 18.0, 'chrf': 30.0,
                                                                          'sentences': 5}})
  delta_bleu.AddRun(str(runs), 'dense', str(logdir), part)
  # A newer checkpoint of a run trained on another build of the corpus, and one from before data.json:
  # neither is compared, both are listed.
  for name, step, data in (('old', 900, {'name': 'gettext_m4', 'version': '1.0.0', 'fingerprint': 'f10'}),
                           ('older', 800, None)):
    other = tmp_path / name
    other.mkdir()
    if data:
      files.WriteJson(str(other / 'data.json'), data)
    delta_bleu.AddRun(str(runs), 'moe', str(other), dict(res, step=step, checkpoint=str(other / f'ckpt-{step}')))

  (runs / 'commentary.md').write_text('The MoE run wins on aa.\n\n- and on cc.\n')  # the hand-written analysis
  out_run = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.m4_report', f'--runs_dir={runs}',
                            f'--out_dir={out}'], capture_output=True, text=True, timeout=300)
  assert out_run.returncode == 0, out_run.stderr[-2000:]
  results = json.load(open(out / 'results.json'))
  assert list(results['runs']) == ['moe']
  assert results['runs']['moe']['checkpoint_step'] == 200 and results['runs']['moe']['wall_clock_s'] == 110.0
  # The commit that trained the reported checkpoint, beside the one that evaluated it.
  assert results['runs']['moe']['train_commit'] == 'c200'
  assert results['runs']['moe']['commit'] == provenance.CodeCommit()
  assert sorted(r['data'] for r in results['not_compared']) == ['gettext_m4 1.0.0', 'unrecorded']
  assert results['corpus'] == {'name': 'gettext_m4', 'version': '1.1.0', 'fingerprint': 'f11'}
  assert results['bilingual']['data_versions'] == {'1.0.0': 1, '1.1.0': 1}  # unrecorded: before 1.1.0
  la = results['languages']
  assert list(la) == ['aa', 'bb', 'cc']  # high to low resource
  assert la['aa']['moe'] == 22.5 and la['aa']['moe_chrf'] == 45.0 and la['aa']['bilingual'] == 20.0
  assert la['aa']['delta_moe'] == pytest.approx(2.5) and la['cc']['delta_moe'] == pytest.approx(2.0)
  assert la['bb']['bilingual'] is None and la['bb']['delta_moe'] is None and la['bb']['moe'] == 12.0
  assert results['averages']['all']['delta_moe'] == pytest.approx(2.25)  # over aa and cc only
  assert results['averages']['all']['with_bilingual'] == 2 and results['averages']['medium']['bilingual'] is None
  md = open(out / 'RESULTS.md').read()
  assert '| bb | medium | 500 | — | 12.00 / 24.0 | — |' in md
  assert ('Not compared (trained on another corpus build): moe ckpt-800 (M4TinyMoE, unrecorded), moe ckpt-900 '
          '(M4TinyMoE, gettext_m4 1.0.0).') in md
  assert '| aa | high | 900 | 20.00 / 40.0 | 22.50 / 45.0 | +2.50 |' in md
  assert f'| moe | M4TinyMoE | 200 | 200 | 2 min | c200 | {provenance.CodeCommit()[:12]} |' in md
  assert 'moe beats the bilingual baselines on the low-resource bucket | +2.00 | 1 of 1 | yes |' in md
  assert 'dense beats the bilingual baselines on the low-resource bucket | — | 0 of 1 | not measured yet |' in md
  # The commentary follows the targets, under its heading, as written; the tables come after it.
  assert ('| not measured yet |\n\n## What the figures say\n\nThe MoE run wins on aa.\n\n- and on cc.\n\n'
          '## Bucket averages') in md
  assert '## What the figures say' not in delta_bleu.Markdown(results)  # no commentary, no empty heading
  assert _PngSize(out / 'delta_bleu.png') == (1200, 480)
  assert 'moe beats the bilingual baselines on the low-resource bucket: met (+2.00 over 1 of 1' in out_run.stdout

  partial = delta_bleu.Build(str(runs), max_sentences=10)  # the dense run's 5-sentence sample is not 10
  assert 'dense' not in partial['runs']
  partial = delta_bleu.Build(str(runs), max_sentences=5)
  assert partial['languages']['aa']['dense'] == 18.0 and partial['languages']['aa']['bilingual'] is None
  # cc's whole test split (8 sentences) is its first 10: that baseline serves a 10-sentence report.
  assert delta_bleu.Build(str(runs), max_sentences=10)['languages']['cc']['bilingual'] == 5.0


def test_targets_compare_the_same_languages_and_need_coverage():
  langs = {f'h{i}': {'bucket': 'high', 'dense': 10.0, 'moe': 12.0 if i < 9 else None, 'bilingual': None}
           for i in range(10)}
  langs['h9']['dense'] = 0.0  # a language only dense has does not enter the MoE-dense gap
  t = {x['target'][:20]: x for x in delta_bleu.Targets({'languages': langs}, 'dense', 'moe', 'moe64')}
  gap = t['moe beats dense on t']
  assert gap['measured'] == pytest.approx(2.0) and (gap['languages'], gap['of']) == (9, 10) and gap['met']
  langs['h8']['moe'] = None  # 8 of 10 languages: below the 90% coverage, not judged
  t = {x['target'][:20]: x for x in delta_bleu.Targets({'languages': langs}, 'dense', 'moe', 'moe64')}
  assert t['moe beats dense on t']['met'] is None and t['moe beats dense on t']['languages'] == 8


def test_tools_check_their_input_in_one_line(data_dir, tmp_path):
  for args, message in [
      (['m4_report', f'--runs_dir={tmp_path}/none'], 'corpus.json: missing'),
      (['m4_report', f'--runs_dir={tmp_path}', '--add=moe'], 'expected NAME=LOGDIR'),
      (['m4_report', f'--runs_dir={tmp_path}', f'--add=moe={tmp_path}'], 'has no decode_test'),
      (['train_baselines', f'--data_dir={data_dir}', '--languages=de,xx'],
       "language 'xx' is not in the corpus"),
      (['train_baselines', '--data_dir=/nonexistent'], '/nonexistent'),
      (['train_baselines', '--max_sentences=-1'], 'flag --max_sentences=-1: -1 is not a non-negative integer')]:
    out = subprocess.run([sys.executable, '-m', f'lingvo_gshard.tools.{args[0]}'] + args[1:],
                         capture_output=True, text=True, timeout=300)
    err = [l for l in out.stderr.splitlines() if l.startswith(f'{args[0]}:')]
    assert out.returncode == 1 and len(err) == 1 and message in err[0], (args, out.stderr[-1500:])
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.train_baselines', f'--data_dir={data_dir}',
                        '--dry_run'], capture_output=True, text=True, timeout=300)
  planned = f'2 pairs; planned steps by tier: small {2 * bilingual.MIN_STEPS}'  # both pairs < 2,500 training pairs
  assert out.returncode == 0 and planned in out.stdout, out.stderr[-1500:]
  assert any(l.startswith('de ') and 'task.model_dim : 128' in l for l in out.stdout.splitlines())
