"""tools/input_benchmark.py on a small corpus: it runs, its figures follow their definitions, and a bad data
dir is a one-line error with exit status 1. (Run as a subprocess: its absl flags would clash with other
tools' flags in the pytest process.)"""
import json
import subprocess
import sys

from lingvo_gshard.data import reader
from lingvo_gshard.input import mixture
import input_helpers

_CHI2_3DOF_999 = 16.27


def _Run(*args):
  return subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.input_benchmark', *args],
                        capture_output=True, text=True, check=False, timeout=300)


def test_benchmark_figures(tmp_path):
  data_dir = input_helpers.BuildCorpus(str(tmp_path))
  out = tmp_path / 'figures.json'
  result = _Run(f'--data_dir={data_dir}', '--vocab_size=600', '--batch_rows=4', '--packed_length=96',
                '--max_length=48', '--warmup_batches=1', '--batches=5', '--draws=3000',
                '--model_tokens_per_sec=1000', f'--json={out}',
                '--input_params_override=vocab.sample_sentences=3000,pack_window=64,shuffle_buffer=100')
  assert result.returncode == 0, result.stderr[-2000:]
  figures = json.loads(out.read_text())
  lines = result.stdout.splitlines()
  assert lines[0].startswith(f'4 languages, train split; vocabularies {data_dir}/vocab/spm_shared_600.model '
                             '(600 pieces, ready in ')
  assert 'trained' in result.stderr  # The vocabulary did not exist: trained and timed.
  counts = {lang: info['train'] for lang, info in reader.LoadManifest(data_dir)['languages'].items()}
  assert lines[1] == mixture.Describe(counts, mixture.TemperatureWeights(counts, 5.0), 5.0)
  assert figures['row_lengths'] == [96, 96] and figures['batch_rows'] == 4 and figures['timed_batches'] == 5
  tokens = figures['source_tokens'] + figures['target_tokens']
  assert abs(figures['tokens_per_sec'] - tokens / figures['seconds']) <= 0.01 * figures['tokens_per_sec']
  # Fill = real tokens / slots, over the 5 batches of 4 rows of 96.
  assert figures['rows'] == 20
  assert figures['target_fill'] == round(figures['target_tokens'] / (20 * 96), 4)
  assert 0 < figures['source_fill'] <= 1 and figures['examples_per_row'] == round(figures['examples'] / 20, 2)
  assert figures['examples_per_row'] > 1  # Rows are packed.
  assert figures['model_ratio'] == round(figures['tokens_per_sec'] / 1000, 1)
  dist = figures['distribution']
  weights = mixture.TemperatureWeights(counts, 5.0)
  assert dist['expected'] == {k: round(v, 5) for k, v in weights.items()}
  assert abs(sum(dist['observed'].values()) - 1) < 1e-3 and dist['dof'] == 3
  assert dist['chi2'] < _CHI2_3DOF_999
  assert lines[-1].startswith(f'observed over 3000 draws: chi2 {dist["chi2"]} on 3 dof')


def test_benchmark_error_is_one_line(tmp_path):
  result = _Run(f'--data_dir={tmp_path}/none')
  assert result.returncode == 1
  assert 'Traceback' not in result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
      f'input_benchmark: error: {tmp_path}/none/manifest.json: no finished gettext_m4 build here (build it '
      'with python -m lingvo_gshard.tools.prepare_data)')
