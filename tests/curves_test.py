"""Learning-curve points come from the trainer's checkpoints.jsonl and the evaluator's results; the tool
prints them and writes a PNG and JSON."""
import json
import os
import subprocess
import sys

from lingvo_gshard.report import curves


def _FakeRun(root, evaluated, dev_xent=()):
  os.makedirs(root)
  with open(os.path.join(root, 'dev_eval.jsonl'), 'w') as f:
    for step, xent in dev_xent:  # the trainer's rows; a step evaluated again after a resume: the last row counts
      f.write(json.dumps({'step': step, 'checkpoint': f'ckpt-{step}', 'job': 'trainer', 'loss': xent + 0.5,
                          'xent': xent}) + '\n')
  with open(os.path.join(root, 'checkpoints.jsonl'), 'w') as f:
    for step, secs in ((400, 300.0), (800, 610.5), (1200, 905.0)):
      f.write(json.dumps({'step': step, 'checkpoint': f'ckpt-{step}', 'train_seconds': secs}) + '\n')
  for step, top10, chrf in evaluated:
    d = os.path.join(root, 'decode_dev', f'ckpt-{step}')
    os.makedirs(d)
    res = {'step': step, 'languages': {'de': {'sentences': 20}, 'fr': {'sentences': 20}},
           'averages': {'top10': {'bleu': top10, 'chrf': chrf, 'languages': 2}}}
    json.dump(res, open(os.path.join(d, 'results.json'), 'w'))


def test_points_pair_each_evaluated_checkpoint_with_its_wall_clock(tmp_path):
  run = str(tmp_path / 'moe')
  _FakeRun(run, [(1200, 9.5, 30.0), (400, 2.0, 12.5)])   # ckpt-800 not evaluated
  points = curves.Points(run, 'dev')
  assert [(p['step'], p['train_seconds'], p['bleu'], p['chrf'], p['sentences']) for p in points] == [
      (400, 300.0, 2.0, 12.5, 40), (1200, 905.0, 9.5, 30.0, 40)]
  assert curves.Points(run, 'test') == [] and curves.Points(run, 'dev', 'high') == []


def test_tool_writes_table_json_and_png(tmp_path):
  _FakeRun(str(tmp_path / 'a'), [(400, 2.0, 12.5), (800, 5.0, 20.0)])
  _FakeRun(str(tmp_path / 'b'), [(400, 1.0, 10.0)])
  png, js = tmp_path / 'c.png', tmp_path / 'c.json'
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.learning_curves',
                        f'--runs=MoE={tmp_path / "a"},Dense={tmp_path / "b"}', f'--plot={png}', f'--json={js}'],
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  assert 'MoE               800     10.2   5.00  20.00' in out.stdout
  assert open(png, 'rb').read(8) == b'\x89PNG\r\n\x1a\n'
  data = json.load(open(js))
  assert [p['step'] for p in data['runs']['MoE']] == [400, 800] and len(data['runs']['Dense']) == 1
  bad = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.learning_curves', '--runs=MoE'],
                       capture_output=True, text=True, timeout=120)
  assert bad.returncode == 1 and "is not NAME=LOGDIR" in bad.stderr


def test_dev_loss_points_and_their_gap_to_a_reference_run(tmp_path):
  _FakeRun(str(tmp_path / 'd'), [], [(400, 3.5), (800, 3.0), (1200, 2.75)])
  # ckpt-1600 is not in checkpoints.jsonl (no wall-clock); 800 evaluated twice (resumed): the last row counts.
  _FakeRun(str(tmp_path / 'm'), [], [(400, 3.25), (800, 3.5), (800, 3.125), (1600, 2.5)])
  moe, dense = curves.DevLossPoints(str(tmp_path / 'm')), curves.DevLossPoints(str(tmp_path / 'd'))
  assert [(p['step'], p['train_seconds'], p['xent']) for p in moe] == [
      (400, 300.0, 3.25), (800, 610.5, 3.125), (1600, None, 2.5)]
  assert [p['loss'] for p in curves.DevLossPoints(str(tmp_path / 'm'), 'loss')] == [3.75, 3.625, 3.0]
  assert curves.Differences(moe, dense, 'xent') == [{'step': 400, 'diff': -0.25}, {'step': 800, 'diff': 0.125}]

  png, js = tmp_path / 'x.png', tmp_path / 'x.json'
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.learning_curves', '--metric=xent',
                        f'--runs=Dense={tmp_path / "d"},MoE={tmp_path / "m"}', f'--plot={png}', f'--json={js}'],
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  assert '    800      3.0000      3.1250         +0.1250' in out.stdout
  assert '   1600           —      2.5000               —' in out.stdout
  # A run name longer than the 12-character column widens its columns; the table stays aligned.
  long = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.learning_curves', '--metric=xent',
                         f'--runs=Dense={tmp_path / "d"},MoE_expert_dropout_0.4={tmp_path / "m"}'],
                        capture_output=True, text=True, timeout=120)
  assert long.returncode == 0, long.stderr[-2000:]
  table = long.stdout.splitlines()
  assert table[0].split() == ['step', 'Dense', 'MoE_expert_dropout_0.4', 'MoE_expert_dropout_0.4-Dense']
  assert table[2].split() == ['800', '3.0000', '3.1250', '+0.1250']
  assert len({len(line) for line in table}) == 1, table
  assert table[0].index('Dense') + 5 == table[2].index('3.0000') + 6
  assert open(png, 'rb').read(8) == b'\x89PNG\r\n\x1a\n'
  data = json.load(open(js))
  assert data['differences']['MoE'] == [{'step': 400, 'diff': -0.25}, {'step': 800, 'diff': 0.125}]
  assert [p['xent'] for p in data['runs']['Dense']] == [3.5, 3.0, 2.75]
  _FakeRun(str(tmp_path / 'none'), [])
  bad = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.learning_curves', '--metric=xent',
                        f'--runs=Dense={tmp_path / "d"},X={tmp_path / "none"}'],
                       capture_output=True, text=True, timeout=120)
  assert bad.returncode == 1 and 'X: no dev_eval.jsonl rows with xent' in bad.stderr
