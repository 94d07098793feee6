"""The study report: summary.json rebuilt from committed runs and compare_runs output equals what those
files say (the paired bootstrap's delta and interval, each run's last dev cross-entropy and test BLEU), the
regime with the largest MoE - dense gain is the headline, and the experts curve is sorted by E."""
import json
import os
import subprocess
import sys

import pytest

from lingvo_gshard.report import moe_study
from lingvo_gshard.report import significance
from lingvo_gshard.train import dev_metrics

_HYPS = {'de': ['the cat sat on the mat', 'a dog ran home', 'open the file now'],
         'fr': ['good morning to you', 'save the document', 'close all windows']}
_REFS = {'de': ['the cat sat on the mat', 'the dog ran home', 'open the file'],
         'fr': ['good morning', 'save the document', 'close the windows']}
_SETTINGS = {'beam_size': 4, 'length_alpha': 0.6, 'no_repeat_ngram': 0, 'set': 'test'}


def _Decodes(name, damage):
  hyps = {lang: [h if i >= damage else 'x' for i, h in enumerate(lines)] for lang, lines in _HYPS.items()}
  return significance.Decodes(name, hyps, _REFS, {'de': 'high', 'fr': 'low'},
                              {k: v for k, v in _SETTINGS.items() if k in significance.DECODE_SETTINGS})


def _Run(study, name, experts, xents, bleu, extra_params=''):
  run = os.path.join(study, 'runs', name)
  os.makedirs(run)
  with open(os.path.join(run, 'params.txt'), 'w') as f:
    f.write('task.model_dim : 128\n' + (f'task.encoder.moe_tpl.num_experts : {experts}\n' if experts > 1 else '')
            + extra_params)
  for step, xent in enumerate(xents, 1):
    dev_metrics.AppendDevLog(run, dev_metrics.DevRow(400 * step, {'loss': xent + 0.1, 'xent': xent}))
  with open(os.path.join(run, 'results.json'), 'w') as f:
    json.dump({'set': 'test', 'checkpoint': 'ckpt-800', 'averages': {'all': {'bleu': bleu, 'chrf': bleu + 5}}}, f)


def _Compare(study, file, a, b, damage_a, damage_b):
  out = {'a': {'name': a}, 'b': {'name': b}}
  for metric in ('bleu', 'chrf'):
    out[metric] = significance.PairedBootstrap(_Decodes(a, damage_a), _Decodes(b, damage_b), metric, 200, 0)
  os.makedirs(os.path.join(study, 'comparisons'), exist_ok=True)
  with open(os.path.join(study, 'comparisons', file), 'w') as f:
    json.dump(out, f)
  return out


def test_the_summary_is_what_the_committed_files_say(tmp_path):
  study = str(tmp_path)
  _Run(study, 'dense_a', 1, [3.0, 2.5], 20.0)
  _Run(study, 'moe_a', 16, [2.9, 2.4], 21.0)
  _Run(study, 'dense_b', 1, [2.8, 2.6], 22.0)
  _Run(study, 'moe_b', 16, [2.9, 2.7], 21.5)
  _Run(study, 'moe4_a', 4, [2.95, 2.45], 20.5)
  _Run(study, 'moe_a_zloss', 16, [2.9, 2.41], 20.8, 'task.router_z_loss_weight : 0.001\n')
  gain = _Compare(study, 'a.json', 'dense_a', 'moe_a', 2, 0)  # the MoE hypotheses are the better ones
  _Compare(study, 'b.json', 'dense_b', 'moe_b', 0, 1)
  zloss = _Compare(study, 'z.json', 'moe_a', 'moe_a_zloss', 0, 1)
  growth = {'first': 3.0, 'last': 15.0, 'growth': 12.0, 'max': 17.0, 'steps': 800}
  with open(os.path.join(study, 'router_logits.json'), 'w') as f:
    json.dump({'summary': {
        'moe_a': {'encoder/layers_1/router_logit_max': growth, 'encoder/layers_1/router_z_loss': growth},
        'moe_a_zloss': {'encoder/layers_1/router_logit_max': dict(growth, last=4.0, growth=1.0)}}}, f)
  with open(os.path.join(study, 'study.json'), 'w') as f:
    json.dump({'regimes': [
        {'name': 'small', 'varied': {'model': 'M=128'}, 'dense': 'dense_a', 'moe': 'moe_a', 'comparison': 'a.json',
         'experts_runs': ['moe_a', 'dense_a', 'moe4_a'],
         'variants': [{'name': 'z-loss', 'off': 'moe_a', 'on': 'moe_a_zloss', 'comparison': 'z.json'}],
         'router_z_loss': {'off': 'moe_a', 'on': 'moe_a_zloss', 'comparison': 'z.json',
                           'router_logits': 'router_logits.json'}},
        {'name': 'large', 'varied': {'model': 'M=256'}, 'dense': 'dense_b', 'moe': 'moe_b', 'comparison': 'b.json'},
    ]}, f)
  summary = moe_study.Summary(study)
  assert summary['regime'] == {'name': 'small', 'model': 'M=128'}
  head = summary['moe_minus_dense']
  want = gain['bleu']['buckets']['all']
  assert head['bleu'] == round(want['delta'], 3) > 0 and head['ci95'] == [round(x, 3) for x in want['ci95']]
  assert head['chrf'] == round(gain['chrf']['buckets']['all']['delta'], 3) and head['runs'] == ['dense_a', 'moe_a']
  assert summary['experts_curve'] == [
      {'experts': 1, 'dev_xent': 2.5, 'bleu': 20.0, 'chrf': 25.0, 'run': 'dense_a'},
      {'experts': 4, 'dev_xent': 2.45, 'bleu': 20.5, 'chrf': 25.5, 'run': 'moe4_a'},
      {'experts': 16, 'dev_xent': 2.4, 'bleu': 21.0, 'chrf': 26.0, 'run': 'moe_a'}]
  z = summary['router_z_loss']
  assert z['weight'] == 0.001 and (z['off'], z['on']) == ('moe_a', 'moe_a_zloss')
  assert z['dev_xent'] == {'off': 2.4, 'on': 2.41}
  assert z['on_minus_off']['bleu'] == round(zloss['bleu']['buckets']['all']['delta'], 3) < 0
  assert z['router_logit_max'] == {
      'off': {'encoder/layers_1': {'first': 3.0, 'last': 15.0, 'growth': 12.0, 'max': 17.0}},
      'on': {'encoder/layers_1': {'first': 3.0, 'last': 4.0, 'growth': 1.0, 'max': 17.0}}}
  assert summary['regimes'][0]['variants'] == [
      {'name': 'z-loss', 'off': 'moe_a', 'on': 'moe_a_zloss', 'dev_xent': {'off': 2.4, 'on': 2.41},
       'on_minus_off': z['on_minus_off']}]
  large = summary['regimes'][1]
  assert 'router_z_loss' not in large and 'variants' not in large and 'dev_xent_by_bucket' not in large  # no per-language rows
  assert large['moe_minus_dense']['bleu'] < 0 and large['steps'] == {'dense': 800, 'moe': 800}
  # The tool writes it, and says what is wrong with a study in one line.
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.moe_study_report', f'--study_dir={study}'],
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  assert json.load(open(os.path.join(study, 'summary.json'))) == json.loads(json.dumps(summary))
  os.remove(os.path.join(study, 'comparisons', 'b.json'))
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.moe_study_report', f'--study_dir={study}'],
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 1 and out.stderr.strip().splitlines()[-1] == (
      f'moe_study_report: {study}/comparisons/b.json: missing (the study commits it)')


def test_a_comparison_of_other_runs_is_refused(tmp_path):
  study = str(tmp_path)
  _Run(study, 'dense_a', 1, [3.0], 20.0)
  _Run(study, 'moe_a', 16, [2.9], 21.0)
  _Compare(study, 'a.json', 'moe_a', 'dense_a', 0, 0)
  with open(os.path.join(study, 'study.json'), 'w') as f:
    json.dump({'regimes': [{'name': 'r', 'dense': 'dense_a', 'moe': 'moe_a', 'comparison': 'a.json'}]}, f)
  with pytest.raises(moe_study.StudyError, match='compares dense_a with moe_a, not moe_a with dense_a'):
    moe_study.Summary(study)


def test_a_z_loss_pair_must_name_runs_the_router_logits_file_holds(tmp_path):
  study = str(tmp_path)
  _Run(study, 'dense_a', 1, [3.0], 20.0)
  _Run(study, 'moe_a', 16, [2.9], 21.0)
  _Run(study, 'moe_z', 16, [2.9], 21.0, 'task.router_z_loss_weight : 0.001\n')
  _Compare(study, 'a.json', 'dense_a', 'moe_a', 0, 0)
  _Compare(study, 'z.json', 'moe_a', 'moe_z', 0, 0)
  with open(os.path.join(study, 'router_logits.json'), 'w') as f:
    json.dump({'summary': {'off': {}, 'on': {}}}, f)  # the tool's own run names, not the study's
  with open(os.path.join(study, 'study.json'), 'w') as f:
    json.dump({'regimes': [{'name': 'r', 'dense': 'dense_a', 'moe': 'moe_a', 'comparison': 'a.json',
                            'router_z_loss': {'off': 'moe_a', 'on': 'moe_z', 'comparison': 'z.json',
                                              'router_logits': 'router_logits.json'}}]}, f)
  with pytest.raises(moe_study.StudyError, match='router_logits.json has no run named moe_a'):
    moe_study.Summary(study)



def test_dev_xent_by_bucket_is_the_mean_over_the_buckets_languages(tmp_path):
  study = str(tmp_path)
  _Run(study, 'dense_a', 1, [3.0, 2.5], 20.0)
  _Run(study, 'moe_a', 16, [2.9, 2.4], 21.0)
  per_lang = {'dense_a': {'de': 2.0, 'uk': 3.0, 'fr': 2.5}, 'moe_a': {'de': 1.8, 'uk': 3.1, 'fr': 2.0}}
  for run, xents in per_lang.items():  # the evaler's row at the last step, after an earlier one at step 400
    d = os.path.join(study, 'runs', run)
    dev_metrics.AppendDevLog(d, dev_metrics.DevRow(400, {'xent': 9.0, 'xent/de': 9.0, 'xent/uk': 9.0, 'xent/fr': 9.0}))
    dev_metrics.AppendDevLog(d, dev_metrics.DevRow(800, dict({'xent': 2.5}, **{f'xent/{l}': v for l, v in xents.items()})))
  # The training loop's own evaluation of the last step, written after the evaler's, has no per-language rows.
  dev_metrics.AppendDevLog(os.path.join(study, 'runs', 'moe_a'), dev_metrics.DevRow(800, {'xent': 2.4}, job='trainer'))
  with open(os.path.join(study, 'runs', 'dense_a', 'results.json'), 'w') as f:
    json.dump({'set': 'test', 'averages': {'all': {'bleu': 20.0, 'chrf': 25.0}},
               'languages': {'de': {'bucket': 'high'}, 'uk': {'bucket': 'high'}, 'fr': {'bucket': 'low'}}}, f)
  _Compare(study, 'a.json', 'dense_a', 'moe_a', 1, 0)
  with open(os.path.join(study, 'study.json'), 'w') as f:
    json.dump({'regimes': [{'name': 'r', 'dense': 'dense_a', 'moe': 'moe_a', 'comparison': 'a.json'}]}, f)
  got = moe_study.Summary(study)['regimes'][0]['dev_xent_by_bucket']
  assert got == {
      'high': {'dense': 2.5, 'moe': 2.45, 'moe_minus_dense': -0.05, 'moe_lower': 1, 'languages': 2},
      'low': {'dense': 2.5, 'moe': 2.0, 'moe_minus_dense': -0.5, 'moe_lower': 1, 'languages': 1},
      'all': {'dense': 2.5, 'moe': 2.3, 'moe_minus_dense': -0.2, 'moe_lower': 2, 'languages': 3}}
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.moe_study_report', f'--study_dir={study}'],
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  assert ('dev xent MoE - dense by bucket: high -0.050 (lower in 1/2), low -0.500 (lower in 1/1), '
          'all -0.200 (lower in 2/3)') in out.stdout
  # A last step the evaler has not scored (its per-language row is of an earlier step): no figure.
  dev_metrics.AppendDevLog(os.path.join(study, 'runs', 'moe_a'), dev_metrics.DevRow(1200, {'xent': 2.3}, job='trainer'))
  assert 'dev_xent_by_bucket' not in moe_study.Summary(study)['regimes'][0]
