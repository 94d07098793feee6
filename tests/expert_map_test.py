"""The map of the experts: a tiny MoE whose routers are forced to send language A's tokens to expert 0 and
B's to expert 1 (in the encoder and the decoder) gives exactly that map, fractions summing to 1, and the
mutual information of a language that decides the expert; the statistics against NumPy."""
import numpy as np
import pytest

from lingvo_gshard.core import optimizers
from lingvo_gshard.core import sharding
from lingvo_gshard.layers import moe_layer
from lingvo_gshard.report import expert_map
from lingvo_gshard.runtime import learner as learner_lib
import mt_model_test

E = 4
A_IDS, B_IDS = list(range(3, 12)), list(range(12, 21))  # each language's source and target pieces (and tag)


def _ForcedLearner():
  """Attention and FFN outputs zeroed and positions learned and zero, so each MoE layer's input is its
  token's embedding; A's embeddings point one way, B's the other, and the routers read that direction."""
  p = mt_model_test.TinyParams(position='learned', max_length=32)
  for stack in (p.encoder, p.decoder):
    stack.moe_tpl = moe_layer.MoELayer.Params().Set(num_experts=E, group_size=64)
  learner = learner_lib.Learner(p, optimizers.Adafactor.Params(), sharding.Partitioner('none'))
  direction = np.zeros(32, np.float32)
  direction[0], direction[1] = 1.0, -1.0
  for path, var in learner.model.IterVariables():
    value = var.numpy()
    if path.endswith(('.post', 'ffn.wo', 'pos_emb')):  # attention outputs, dense and expert FFN outputs
      value = np.zeros_like(value)
    elif path.endswith(('src_emb.emb', 'tgt_emb.emb')):
      value = np.zeros_like(value)
      value[A_IDS] = direction
      value[B_IDS] = -direction
    elif path.endswith('ffn.gate'):
      value = np.zeros_like(value)
      value[:, 0], value[:, 1] = direction, -direction
    var.assign(value)
  return learner


def _Batch(ids, seed):
  rng = np.random.RandomState(seed)
  examples = [(rng.choice(ids, size=3 + i).tolist(), rng.choice(ids, size=2 + i).tolist() + [ids[0]])
              for i in range(4)]
  return mt_model_test.Unpacked(examples, length=12, tag=ids[1])


def test_a_router_forced_by_language_gives_exactly_that_map():
  learner = _ForcedLearner()
  batches = {'aa': [_Batch(A_IDS, 1), _Batch(A_IDS, 2)], 'bb': [_Batch(B_IDS, 3), _Batch(B_IDS, 4)]}
  counts = expert_map.Collect(learner, batches)
  assert sorted(counts) == ['decoder/layers_1', 'encoder/layers_1']
  real = {lang: sum(int((b['src_segment_ids'] > 0).sum()) for b in bs) for lang, bs in batches.items()}
  real_tgt = {lang: sum(int((b['tgt_segment_ids'] > 0).sum()) for b in bs) for lang, bs in batches.items()}
  built = expert_map.Build(counts, {'aa': 10, 'bb': 20}, {'aa': 'low', 'bb': 'high'})
  assert built['languages'] == ['bb', 'aa']  # largest first
  for layer, want_tokens in (('encoder/layers_1', real), ('decoder/layers_1', real_tgt)):
    m = built['layers'][layer]
    assert m['tokens'] == want_tokens
    np.testing.assert_array_equal(m['fractions']['aa'], [1, 0, 0, 0])
    np.testing.assert_array_equal(m['fractions']['bb'], [0, 1, 0, 0])
    h_lang = -sum(n / sum(want_tokens.values()) * np.log2(n / sum(want_tokens.values()))
                  for n in want_tokens.values())
    np.testing.assert_allclose(m['mutual_information_bits'], h_lang, atol=1e-4)  # language decides expert
    np.testing.assert_allclose(m['normalized_mutual_information'], 1.0, atol=1e-4)
    assert sorted(m['expert_order']) == list(range(E))


def test_fractions_sum_to_one_and_mutual_information_matches_numpy():
  rng = np.random.RandomState(0)
  counts = {'layer': {f'l{i}': rng.randint(0, 50, size=8).astype(float) for i in range(6)}}
  built = expert_map.Build(counts, {}, {})
  layer = built['layers']['layer']
  for lang, fractions in layer['fractions'].items():
    np.testing.assert_allclose(sum(fractions), 1.0, atol=1e-5)
  joint = np.stack([counts['layer'][lang] for lang in sorted(counts['layer'])])
  joint /= joint.sum()
  pl, pe = joint.sum(1), joint.sum(0)
  mi = sum(joint[i, j] * np.log2(joint[i, j] / (pl[i] * pe[j])) for i in range(6) for j in range(8)
           if joint[i, j] > 0)
  np.testing.assert_allclose(layer['mutual_information_bits'], mi, atol=1e-5)
  np.testing.assert_allclose(layer['normalized_mutual_information'], mi / -np.sum(pe * np.log2(pe)), atol=1e-5)
  # Languages that route alike: no information.
  same = {'layer': {'x': np.array([3., 1, 0, 4]), 'y': np.array([6., 2, 0, 8])}}
  assert expert_map.Build(same, {}, {})['layers']['layer']['mutual_information_bits'] == pytest.approx(0, abs=1e-9)


def test_the_plot_is_a_png(tmp_path):
  counts = {'encoder/layers_1': {'aa': np.array([5., 1, 0, 0]), 'bb': np.array([0., 1, 5, 2])},
            'decoder/layers_1': {'aa': np.array([2., 2, 2, 2]), 'bb': np.array([1., 0, 0, 9])}}
  built = expert_map.Build(counts, {'aa': 2, 'bb': 1}, {'aa': 'high', 'bb': 'low'})
  expert_map.Plot(built, str(tmp_path / 'map.png'), 'title')
  assert (tmp_path / 'map.png').read_bytes().startswith(b'\x89PNG')
