"""tools/model_benchmark.py at toy sizes: it runs, and its figures follow their definitions.

The tool runs as a subprocess (tools define absl flags that clash in one process); its library code
(lingvo_gshard/bench/) is tested in-process."""
import json
import subprocess
import sys

import pytest

from lingvo_gshard import params as params_lib
from lingvo_gshard.bench import steps
from lingvo_gshard.bench import timing
from lingvo_gshard.core import experiment
from lingvo_gshard.core import registry
from lingvo_gshard.models import analysis
from lingvo_gshard.runtime import hardware


def test_tool_reports_consistent_figures(tmp_path):
  out = tmp_path / 'bench.json'
  subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.model_benchmark', '--models=M4TinyDense',
                  '--modes=graph', '--repeats=1', '--decode_len=4', '--decode_batch=2', '--matmul_dim=256',
                  f'--json={out}'], check=True, capture_output=True, text=True)
  results = json.loads(out.read_text())
  [train], [decode] = results['train'], results['decode']
  params_lib.LoadAll()
  exp = registry.Get('M4TinyDense')
  root = experiment.ExperimentParams(exp)
  hardware.ResolveAuto(root)  # the rows the benchmark's subprocess resolved on this machine
  inp = root.input.train
  assert (train['rows'], train['src_length'], train['length']) == (
      inp.batch_rows, inp.packed_source_length, inp.packed_target_length)
  # FLOPs per step = 3 x forward FLOPs of the source and target tokens (models/analysis.py).
  a = analysis.Analyze('M4TinyDense', exp.Task().Instantiate(), exp.Partitioner('none'),
                       tokens_per_step=train['rows'] * train['length'], seq_len=train['length'])
  flops = 3 * train['rows'] * (a.encoder_flops_per_token * train['src_length'] +
                               a.decoder_flops_per_token * train['length'])
  assert train['flops_per_step'] == pytest.approx(flops)
  assert train['flop_per_s'] == pytest.approx(flops / train['step_s'])
  assert train['flops_fraction'] == pytest.approx(train['flop_per_s'] / results['matmul_flop_per_s'])
  assert train['target_tokens_per_s'] == pytest.approx(train['rows'] * train['length'] / train['step_s'])
  assert decode['same_output'] is True
  assert decode['speedup'] == pytest.approx(decode['recompute_s'] / decode['cached_s'])


def test_unknown_model_is_a_usage_error():
  proc = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.model_benchmark', '--models=NoSuchModel'],
                        capture_output=True, text=True)
  assert proc.returncode != 0
  assert 'NoSuchModel' in proc.stderr


def test_round_robin_and_derived_figures():
  """RoundRobin times one call of each function per round; AddTimes derives the rates from a step time.
  (Library code in lingvo_gshard/bench/: tested in-process, unlike the tool.)"""
  calls = []
  medians = timing.RoundRobin([lambda: calls.append('a'), lambda: calls.append('b')], 3)
  assert calls == ['a', 'b'] * 3 and len(medians) == 2, calls
  r = dict(rows=2, src_length=5, length=4, tokens=8, flops_per_step=1e9)
  steps.AddTimes(r, 0.5, 4e9)
  assert r == dict(rows=2, src_length=5, length=4, flops_per_step=1e9, step_s=0.5, target_tokens_per_s=16.0,
                   tokens_per_s=36.0, flop_per_s=2e9, flops_fraction=0.5), r


def test_synthetic_batch_is_full_rows_of_one_segment():
  b = steps.SyntheticBatch(3, 5, 4, 50, 60, seed=1)
  assert b['src_ids'].shape == (3, 5) and b['tgt_ids'].shape == (3, 4) and b['tgt_weights'].shape == (3, 4)
  assert b['src_ids'].min() >= 3 and b['src_ids'].max() < 50 and b['tgt_labels'].max() < 60
  assert (b['src_segment_ids'] == 1).all() and (b['tgt_positions'][1] == [0, 1, 2, 3]).all()
  assert b['tgt_weights'].sum() == 12
