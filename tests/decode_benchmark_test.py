"""tools/decode_benchmark.py at toy sizes: both decoders run on the same real sentences, and the printed
figures follow their definitions."""
import json
import subprocess
import sys

import numpy as np
import pytest

import input_helpers

_TINY = ('task.model_dim : 32; task.num_heads : 2; task.hidden_dim : 64; task.encoder.num_layers : 2; '
         'task.decoder.num_layers : 2; task.encoder.moe_tpl.hidden_dim : 64; task.decoder.moe_tpl.hidden_dim : '
         '64; task.encoder.moe_tpl.num_experts : 4; task.decoder.moe_tpl.num_experts : 4; '
         'task.encoder.moe_tpl.group_size : 64; task.decoder.moe_tpl.group_size : 64; '
         'task.source_vocab_size : 600; task.target_vocab_size : 600; input.test.vocab.kind : shared; '
         'input.test.vocab.source_size : 600; input.test.vocab.target_size : 600; '
         'input.test.vocab.sample_sentences : 3000')


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  return input_helpers.BuildCorpus(str(tmp_path_factory.mktemp('corpus')))


def test_both_decoders_force_the_same_length(data_dir):
  from lingvo_gshard.bench import decode
  from lingvo_gshard.core import experiment
  from lingvo_gshard.core import registry
  from lingvo_gshard import params as params_lib
  params_lib.LoadAll()
  root = experiment.ExperimentParams(registry.Get('M4TinyMoE'), data_dir)
  experiment.ApplyOverrides(root, _TINY)
  ours = decode.Ours(root, beam_size=2, length=7)
  hf = decode.HuggingFace(root.task, beam_size=2, length=7)
  batches = decode.Batches([[5, 6, 7], [8, 9], [10, 11, 12, 13]], batch_size=2, max_len=48)
  assert len(batches) == 1 and batches[0].tolist() == [[5, 6, 7, 1], [8, 9, 1, 0]]
  assert ours(batches[0]).shape == (2, 7)
  out = hf(batches[0])
  assert out.shape == (2, 1 + 7) and np.all(out[:, 0] == decode.START)   # start token + 7 forced tokens


def test_tool_prints_rates_and_their_ratio(data_dir, tmp_path):
  js = tmp_path / 'b.json'
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.decode_benchmark', f'--data_dir={data_dir}',
                        f'--model_params_override={_TINY}', '--languages=de,ru', '--sentences=4',
                        '--batch_size=4', '--beam_size=2', '--length=6', '--rounds=1', f'--json={js}'],
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  r = json.load(open(js))
  assert r['sentences'] == 8 and r['length'] == 6 and r['beam_size'] == 2
  for side in ('ours', 'huggingface'):
    assert r[side]['sentences_per_second'] == pytest.approx(8 / r[side]['seconds'])
    assert r[side]['rounds_sentences_per_second'] == [pytest.approx(r[side]['sentences_per_second'])]  # 1 round
  assert r['ratio'] == pytest.approx(r['ours']['sentences_per_second'] / r['huggingface']['sentences_per_second'])
  assert f'ratio {r["ratio"]:.2f}x' in out.stdout and 'reference matmul' in out.stdout
  bad = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.decode_benchmark', '--length=0'],
                       capture_output=True, text=True, timeout=120)
  assert bad.returncode == 1 and 'decode_benchmark: flag --length=0: 0 is not a positive integer' in bad.stderr
