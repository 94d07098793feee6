"""report/router_logits.py and tools/router_logits.py: router logit growth read back from real event files."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.report import router_logits

_LAYER = 'encoder/layers_1'


def _Write(train_dir, steps, values, extra_tags=()):
  with tf.summary.create_file_writer(train_dir).as_default():
    for step, value in zip(steps, values):
      tf.summary.scalar(f'moe/{_LAYER}/router_logit_max', value, step=step)
      tf.summary.scalar(f'moe/{_LAYER}/router_z_loss', value / 10, step=step)
      tf.summary.scalar('loss', 1.0, step=step)
      for tag in extra_tags:
        tf.summary.scalar(tag, 2.0, step=step)


def test_series_are_read_back_and_a_resumption_overrides_the_steps_it_repeats(tmp_path):
  train_dir = str(tmp_path / 'train')
  _Write(train_dir, range(20, 120, 20), [1.0, 2.0, 3.0, 4.0, 5.0])
  time.sleep(0.05)
  # Stopped after step 100 with its last checkpoint at 60: steps 80 and 100 are logged again.
  _Write(train_dir, range(80, 220, 20), [40.0, 50.0, 6.0, 7.0, 8.0, 9.0, 10.0],
         extra_tags=['moe/decoder/layers_1/expert_fill'])
  series = router_logits.ReadSeries(str(tmp_path))
  assert sorted(series) == [f'{_LAYER}/router_logit_max', f'{_LAYER}/router_z_loss']
  points = series[f'{_LAYER}/router_logit_max']
  assert [s for s, _ in points] == list(range(20, 220, 20))
  np.testing.assert_allclose([v for _, v in points], [1, 2, 3, 40, 50, 6, 7, 8, 9, 10])
  np.testing.assert_allclose([v for _, v in series[f'{_LAYER}/router_z_loss']],
                             np.array([1, 2, 3, 40, 50, 6, 7, 8, 9, 10]) / 10, rtol=1e-6)


def test_a_resumption_that_stopped_early_drops_the_abandoned_stretch(tmp_path):
  train_dir = str(tmp_path / 'train')
  _Write(train_dir, range(20, 220, 20), [float(v) for v in range(1, 11)])
  time.sleep(0.05)
  _Write(train_dir, [80, 100, 120], [40.0, 50.0, 60.0])  # resumed from step 60, stopped again after 120
  points = router_logits.ReadSeries(str(tmp_path))[f'{_LAYER}/router_logit_max']
  assert points == [(20, 1.0), (40, 2.0), (60, 3.0), (80, 40.0), (100, 50.0), (120, 60.0)]


def test_a_truncated_last_record_keeps_what_was_written_before_it(tmp_path):
  train_dir = tmp_path / 'train'
  _Write(str(train_dir), [20, 40, 60], [1.0, 2.0, 3.0])
  (path,) = train_dir.iterdir()
  path.write_bytes(path.read_bytes()[:-5])  # the last record (step 60's 'loss') loses its end
  series = router_logits.ReadSeries(str(tmp_path))
  assert series[f'{_LAYER}/router_logit_max'] == [(20, 1.0), (40, 2.0), (60, 3.0)]


def test_growth_is_the_difference_of_the_window_means():
  points = [(100, 1.0), (200, 2.0), (300, 3.0), (400, 4.0), (500, 5.0), (600, 7.0)]
  # window 0.2 of the 500 steps spanned: steps <= 200 and >= 500.
  assert router_logits.Growth(points, window=0.2) == {'first': 1.5, 'last': 6.0, 'growth': 4.5, 'max': 7.0,
                                                       'steps': 600}
  # A series that starts late (a warm start) is windowed from its first point, not from step 0.
  late = [(1000, 10.0), (1100, 20.0), (1500, 99.0), (2000, 30.0), (2100, 50.0)]
  g = router_logits.Growth(late, window=0.1)
  assert (g['first'], g['last'], g['growth'], g['max']) == (15.0, 40.0, 25.0, 99.0)
  # A window narrower than the summary spacing still holds the first and the last point.
  g = router_logits.Growth([(100, 1.0), (200, 3.0)], window=0.01)
  assert (g['first'], g['last'], g['growth']) == (1.0, 3.0, 2.0)


def test_smoothing_is_a_trailing_mean():
  points = [(i, float(v)) for i, v in enumerate([4, 2, 6, 8, 0])]
  np.testing.assert_allclose([v for _, v in router_logits.Smooth(points, width=2)], [4, 3, 4, 7, 4])


def test_a_run_without_routers_or_events_is_one_error(tmp_path):
  with pytest.raises(router_logits.RouterLogitsError, match='no TensorBoard event files'):
    router_logits.ReadSeries(str(tmp_path))
  with tf.summary.create_file_writer(str(tmp_path / 'train')).as_default():
    tf.summary.scalar('loss', 1.0, step=1)
  with pytest.raises(router_logits.RouterLogitsError, match='a dense run has no router'):
    router_logits.ReadSeries(str(tmp_path))


def test_the_tool_writes_what_the_library_computes(tmp_path):
  for name, values in (('off', [1.0, 2.0, 4.0, 8.0, 16.0]), ('on', [1.0, 1.5, 1.5, 2.0, 2.0])):
    _Write(str(tmp_path / name / 'train'), [100, 200, 300, 400, 500], values)
  out_json = tmp_path / 'out' / 'router.json'
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.router_logits',
                        f'--runs=off={tmp_path / "off"},on={tmp_path / "on"}', '--window=0.25',
                        f'--json={out_json}', f'--plot={tmp_path / "out" / "router.png"}'],
                       capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  written = json.loads(out_json.read_text())
  # window 0.25 of the 400 steps spanned: the means of steps 100-200 and 400-500.
  assert written['summary']['off'][f'{_LAYER}/router_logit_max'] == {'first': 1.5, 'last': 12.0, 'growth': 10.5,
                                                                      'max': 16.0, 'steps': 500}
  assert written['summary']['on'][f'{_LAYER}/router_logit_max']['growth'] == 0.75
  assert written['summary']['on'][f'{_LAYER}/router_z_loss']['growth'] == pytest.approx(0.075, abs=1e-4)
  assert written['series']['off'][f'{_LAYER}/router_logit_max'] == [[100, 1.0], [200, 2.0], [300, 4.0],
                                                                     [400, 8.0], [500, 16.0]]
  assert os.path.getsize(tmp_path / 'out' / 'router.png') > 0
  missing = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.router_logits',
                            f'--runs=dense={tmp_path / "nowhere"}'], capture_output=True, text=True, timeout=300)
  assert missing.returncode == 1
  assert missing.stderr.strip().splitlines()[-1] == (f'router_logits: --runs dense={tmp_path / "nowhere"}: '
                                                     'no such log directory')
