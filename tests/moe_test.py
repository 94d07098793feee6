"""Tests for lingvo_gshard.layers.moe.moe_ffn: dispatch paths agree, and the MoE invariants hold.

The NumPy reference takes the routing decision (expert, gate per choice) from gating.py and recomputes every
token's output with a loop over its kept choices, so it checks dispatch, the expert FFNs and combine together.
"""
import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.layers import gating
from lingvo_gshard.layers import moe
from lingvo_gshard.runtime import step_runner

G, S, M, H, E = 2, 16, 8, 12, 4
RTOL = 1e-5


def _weights(seed, e=E, m=M, h=H, router_scale=1.0):
  rng = np.random.RandomState(seed)
  x = rng.normal(size=(G, S, m)).astype(np.float32)
  w_gate = (rng.normal(size=(m, e)) * router_scale).astype(np.float32)
  wi = (rng.normal(size=(e, m, h)) / np.sqrt(m)).astype(np.float32)
  wo = (rng.normal(size=(e, h, m)) / np.sqrt(h)).astype(np.float32)
  return x, w_gate, wi, wo


def _rel_err(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)


def _reference(x, wi, wo, expert_index, gate):
  """y[g,s] = sum over kept choices k of gate * relu(x wi[e]) wo[e], in float64 loops."""
  y = np.zeros(x.shape, np.float64)
  for g, s, k in zip(*np.nonzero(gate > 0)):
    e = expert_index[g, s, k]
    h = np.maximum(x[g, s].astype(np.float64) @ wi[e], 0.0)
    y[g, s] += gate[g, s, k] * (h @ wo[e])
  return y


def _routing(x, w_gate, capacity, **kwargs):
  return moe.route(tf.constant(x), tf.constant(w_gate), capacity=capacity, **kwargs)


@pytest.mark.parametrize('dispatch', moe.DISPATCH_MODES)
def test_matches_numpy_reference(dispatch):
  x, w_gate, wi, wo = _weights(0)
  y, aux, stats = moe.moe_ffn(x, w_gate, wi, wo, capacity_factor=1.0, dispatch=dispatch)
  c = gating.expert_capacity(S, E, 1.0)
  r = _routing(x, w_gate, c)
  assert 0 < stats['overflow_2'].numpy()  # cf = 1 must drop some second choices for this test to mean much
  want = _reference(x, wi, wo, r.expert_index.numpy(), r.gate.numpy())
  assert _rel_err(y, want) <= RTOL
  np.testing.assert_allclose(aux.numpy(), r.aux_loss.numpy(), rtol=1e-6)


_JIT = {'function': False, 'jit': True}


@pytest.mark.parametrize('gating_name,policy,compile_mode', [
    ('top2', 'all', 'function'), ('top2', 'all', 'jit'), ('top2', 'random', 'jit'),
    ('top1', 'all', 'function'), ('expert_choice', 'all', 'jit')])
def test_index_equals_einsum_values_and_gradients(gating_name, policy, compile_mode):
  x, w_gate, wi, wo = _weights(1)
  target = tf.constant(np.random.RandomState(2).normal(size=(G, S, M)).astype(np.float32))
  paddings = np.zeros((G, S), np.float32)
  paddings[1, -3:] = 1.0

  @tf.function(jit_compile=_JIT[compile_mode])
  def _step(x, w_gate, wi, wo, dispatch):
    with tf.GradientTape() as tape:
      tape.watch([x, w_gate, wi, wo])
      y, aux, _ = moe.moe_ffn(x, w_gate, wi, wo, capacity_factor=1.5, dispatch=dispatch, gating=gating_name,
                              second_expert_policy=policy, paddings=paddings,
                              seed=tf.constant([3, 4]) if policy != 'all' else None)
      loss = tf.reduce_sum(tf.tanh(y) * target) + 0.1 * aux
    return [y, aux] + tape.gradient(loss, [x, w_gate, wi, wo])

  args = [tf.constant(a) for a in (x, w_gate, wi, wo)]
  got = _step(*args, dispatch='index')
  want = _step(*args, dispatch='einsum')
  for name, a, b in zip(('y', 'aux', 'dx', 'dw_gate', 'dwi', 'dwo'), got, want):
    assert np.max(np.abs(b.numpy())) > 0 or (name == 'aux' and gating_name == 'expert_choice'), name
    assert _rel_err(a, b) <= RTOL, (name, _rel_err(a, b))


def _island_calls(concrete_function):
  """Names of the XLA-compiled functions that `concrete_function`'s graph calls."""
  return [op.get_attr('f').name for op in concrete_function.graph.get_operations()
          if op.type in ('PartitionedCall', 'StatefulPartitionedCall') and
          op.node_def.attr['_XlaMustCompile'].b]


@pytest.mark.parametrize('dispatch,gating_name,policy,outer', [
    ('index', 'top2', 'all', 'function'), ('index', 'top2', 'random', 'function'),
    ('einsum', 'top2', 'all', 'function'), ('index', 'expert_choice', 'all', 'function'),
    ('index', 'top2', 'sampling', 'jit'), ('einsum', 'top1', 'all', 'jit')])
def test_xla_islands_equal_the_plain_path(dispatch, gating_name, policy, outer):
  """Values, stats and gradients with XLA islands equal those without, in a graph-mode caller (where the
  islands are XLA functions called from the graph) and in a jit-compiled one (where they are nested).

  The random policies draw inside the routing island, i.e. with XLA's Philox, which in TF 2.21 differs from
  the CPU kernel's for a seed known only at run time: their reference is the plain path jit-compiled.
  """
  x, w_gate, wi, wo = _weights(12)
  target = tf.constant(np.random.RandomState(13).normal(size=(G, S, M)).astype(np.float32))
  paddings = np.zeros((G, S), np.float32)
  paddings[0, :2] = 1.0

  def _step(x, w_gate, wi, wo, seed, xla_islands):
    with tf.GradientTape() as tape:
      tape.watch([x, w_gate, wi, wo])
      y, aux, stats = moe.moe_ffn(x, w_gate, wi, wo, capacity_factor=1.5, dispatch=dispatch,
                                  gating=gating_name, second_expert_policy=policy, paddings=paddings,
                                  seed=seed if policy != 'all' else None,
                                  island=step_runner.CompileIsland if xla_islands else None)
      loss = tf.reduce_sum(tf.tanh(y) * target) + 0.1 * aux
    return [y, aux] + tape.gradient(loss, [x, w_gate, wi, wo]), stats

  step = tf.function(_step, jit_compile=_JIT[outer])
  reference = step if policy == 'all' else tf.function(_step, jit_compile=True)
  args = [tf.constant(a) for a in (x, w_gate, wi, wo)] + [tf.constant([5, 6])]
  got, got_stats = step(*args, xla_islands=True)
  want, want_stats = reference(*args, xla_islands=False)
  for name, a, b in zip(('y', 'aux', 'dx', 'dw_gate', 'dwi', 'dwo'), got, want):
    assert np.max(np.abs(b.numpy())) > 0 or (name == 'aux' and gating_name == 'expert_choice'), name
    assert _rel_err(a, b) <= RTOL, (name, _rel_err(a, b))
  assert sorted(got_stats) == sorted(want_stats)
  for k in want_stats:
    np.testing.assert_allclose(got_stats[k].numpy(), want_stats[k].numpy(), rtol=1e-6, atol=1e-7, err_msg=k)
  if outer == 'function':
    # The graph calls the two islands (routing + dispatch, combine) and their two compiled gradients; the
    # plain path calls none.
    calls = _island_calls(step.get_concrete_function(*args, xla_islands=True))
    assert len(calls) == 4, calls
    assert sum('route_and_dispatch' in c for c in calls) == 2 and sum('combine' in c for c in calls) == 2
    assert not _island_calls(step.get_concrete_function(*args, xla_islands=False))


def test_xla_islands_keep_the_expert_matmuls_in_the_callers_graph():
  """In a graph-mode caller the expert and router matmuls are TF ops of the caller's graph, not XLA."""
  x, w_gate, wi, wo = _weights(14)
  step = tf.function(lambda x: moe.moe_ffn(x, w_gate, wi, wo, island=step_runner.CompileIsland)[0])
  ops = step.get_concrete_function(tf.constant(x)).graph.get_operations()
  assert sum(op.type == 'BatchMatMulV2' for op in ops) == 2  # x·wi and hidden·wo, [E, G·C, ·]
  assert any(op.type in ('Einsum', 'MatMul') for op in ops)  # the router


@pytest.mark.parametrize('dispatch', moe.DISPATCH_MODES)
def test_one_expert_with_full_capacity_is_a_dense_ffn(dispatch):
  x, w_gate, wi, wo = _weights(3, e=1)
  y, _, stats = moe.moe_ffn(x, w_gate, wi, wo, gating='top1', capacity=S, dispatch=dispatch)
  dense = np.maximum(np.einsum('gsm,mh->gsh', x, wi[0]), 0) @ wo[0]
  assert stats['dropped_fraction'].numpy() == 0
  assert _rel_err(y, dense) <= RTOL


@pytest.mark.parametrize('dispatch', moe.DISPATCH_MODES)
def test_identical_experts_with_full_capacity_are_a_dense_ffn(dispatch):
  """Top-2 gates are normalised to sum to 1, so two copies of one FFN give that FFN back."""
  x, w_gate, wi, wo = _weights(4)
  wi, wo = np.repeat(wi[:1], E, axis=0), np.repeat(wo[:1], E, axis=0)
  y, _, _ = moe.moe_ffn(x, w_gate, wi, wo, capacity=2 * S, dispatch=dispatch)
  dense = np.maximum(np.einsum('gsm,mh->gsh', x, wi[0]), 0) @ wo[0]
  assert _rel_err(y, dense) <= RTOL


@pytest.mark.parametrize('dispatch', moe.DISPATCH_MODES)
def test_no_expert_exceeds_capacity_and_dropped_tokens_get_zero(dispatch):
  # A strong router sends most tokens to few experts, so capacity binds hard.
  x, w_gate, wi, wo = _weights(5, router_scale=3.0)
  c = gating.expert_capacity(S, E, 0.5, min_capacity=1)
  y, _, stats = moe.moe_ffn(x, w_gate, wi, wo, capacity_factor=0.5, min_capacity=1, dispatch=dispatch)
  r = _routing(x, w_gate, c)
  kept, expert_index = r.gate.numpy() > 0, r.expert_index.numpy()
  per_expert = np.stack([np.bincount(expert_index[g][kept[g]], minlength=E) for g in range(G)])
  assert per_expert.max() <= c
  assert per_expert.max() == c  # capacity was reached, so the bound above was tested
  np.testing.assert_allclose(stats['expert_fill'].numpy(), per_expert.sum(0) / (G * c), rtol=1e-6)
  dropped = ~kept.any(-1)
  assert dropped.any() and (~dropped).any()
  np.testing.assert_allclose(stats['dropped_fraction'].numpy(), dropped.mean(), rtol=1e-6)
  y = y.numpy()
  assert np.all(y[dropped] == 0)
  assert np.all(np.abs(y[~dropped]).max(-1) > 0)


@pytest.mark.parametrize('dispatch', moe.DISPATCH_MODES)
def test_padding_gets_zero_output(dispatch):
  x, w_gate, wi, wo = _weights(6)
  paddings = np.zeros((G, S), np.float32)
  paddings[0, ::2] = 1.0
  paddings[1, -5:] = 1.0
  y, _, stats = moe.moe_ffn(x, w_gate, wi, wo, capacity=2 * S, paddings=paddings, dispatch=dispatch)
  y = y.numpy()
  pad = paddings > 0
  assert np.all(y[pad] == 0)
  assert np.all(np.abs(y[~pad]).max(-1) > 0)
  # Padding is excluded from the load statistics: loads are fractions of the real tokens.
  np.testing.assert_allclose(stats['load'].numpy().sum(), 1.0, rtol=1e-6)


def test_stats():
  x, w_gate, wi, wo = _weights(7, router_scale=2.0)
  _, aux, stats = moe.moe_ffn(x, w_gate, wi, wo, capacity_factor=1.0)
  load = stats['load'].numpy()
  assert load.shape == (E,) and stats['expert_fill'].shape == (E,)
  np.testing.assert_allclose(load.sum(), 1.0, rtol=1e-6)
  np.testing.assert_allclose(stats['load_max'].numpy(), load.max(), rtol=1e-6)
  np.testing.assert_allclose(stats['load_mean'].numpy(), 1.0 / E, rtol=1e-6)
  np.testing.assert_allclose(stats['load_max_over_mean'].numpy(), load.max() * E, rtol=1e-5)
  for k in ('overflow_1', 'overflow_2'):
    assert 0.0 <= stats[k].numpy() <= 1.0
  assert stats['overflow_2'].numpy() >= stats['overflow_1'].numpy()  # second choices queue behind
  assert 0.0 < stats['router_entropy'].numpy() <= np.log(E) + 1e-6
  assert stats['aux_loss'].numpy() == aux.numpy()


def test_annotate_names_every_large_activation():
  x, w_gate, wi, wo = _weights(8)
  seen = []

  def _record(t, logical_axes):
    assert t.shape.rank == len(logical_axes), (t.shape, logical_axes)
    seen.append(tuple(logical_axes))
    return t

  for dispatch in moe.DISPATCH_MODES:
    seen.clear()
    moe.moe_ffn(x, w_gate, wi, wo, dispatch=dispatch, annotate=_record)
    for axes in [('group', 'length', 'model'), ('expert', 'group', 'capacity', 'model'),
                 ('expert', 'group', 'capacity', 'hidden')]:
      assert axes in seen, (dispatch, axes, seen)
    assert seen[0] == seen[-1] == ('group', 'length', 'model')


def test_bfloat16_inputs_route_in_float32():
  x, w_gate, wi, wo = _weights(9)
  y32, _, _ = moe.moe_ffn(x, w_gate, wi, wo)
  y16, _, _ = moe.moe_ffn(tf.cast(x, tf.bfloat16), w_gate, tf.cast(wi, tf.bfloat16), tf.cast(wo, tf.bfloat16))
  assert y16.dtype == tf.bfloat16
  assert _rel_err(tf.cast(y16, tf.float32), y32) < 0.05


def test_bad_inputs_raise():
  x, w_gate, wi, wo = _weights(10)
  with pytest.raises(ValueError, match=r'x must be \[G,S,M\]'):
    moe.moe_ffn(x[0], w_gate, wi, wo)
  with pytest.raises(ValueError, match=r'w_gate must be \[M,E\]'):
    moe.moe_ffn(x, w_gate[1:], wi, wo)
  with pytest.raises(ValueError, match=r'wi must be \[E,M,H\]'):
    moe.moe_ffn(x, w_gate, wi[1:], wo)
  with pytest.raises(ValueError, match=r'wo must be \[E,H,M\]'):
    moe.moe_ffn(x, w_gate, wi, wo[:, 1:])
  with pytest.raises(ValueError, match='dispatch must be one of'):
    moe.moe_ffn(x, w_gate, wi, wo, dispatch='scatter')
  with pytest.raises(ValueError, match='only applies to top2'):
    moe.moe_ffn(x, w_gate, wi, wo, gating='top1', second_expert_policy='random')


def test_benchmark_library_refuses_unknown_modes_and_dispatch():
  from lingvo_gshard.bench import moe_ffn  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match="unknown mode 'fast'"):
    moe_ffn.BuildCases(moe_ffn.Config(modes=['fast']))
  with pytest.raises(ValueError, match="unknown dispatch 'sorted'"):
    moe_ffn.BuildCases(moe_ffn.Config(groups=1, group_size=8, model_dim=4, hidden_dim=4, num_experts=2,
                                      dispatch=['sorted'], sweep_experts=[], matmul_dim=8))
  assert moe_ffn.WiLayout('jit') == 'emh' and moe_ffn.WiLayout('graph') == 'ehm'
  assert moe_ffn.WiLayout('graph', 'emh') == 'emh'


def test_benchmark_tool_reports_consistent_figures(tmp_path):
  """tools/moe_benchmark.py at toy sizes: it runs, and its ratios and FLOP counts follow their definitions."""
  import json  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  out = tmp_path / 'bench.json'
  g, s, m, h = 2, 32, 8, 16
  subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.moe_benchmark', f'--groups={g}',
                  f'--group_size={s}', f'--model_dim={m}', f'--hidden_dim={h}', '--num_experts=4',
                  '--dispatch=index', '--sweep_experts=4,8', '--matmul_dim=64', '--repeats=2', '--warmup=0',
                  '--modes=jit,graph', '--keep_freed_memory', f'--json={out}'],
                 check=True, capture_output=True, timeout=300)
  results = json.loads(out.read_text())
  assert results['config']['keep_freed_memory']
  rows = {r['name']: r for r in results['rows']}
  # --num_experts in every mode first, then the sweep.
  moe_names = [f'MoE index E={e} C={c} {mode}' for e, c in ((4, 16), (8, 8)) for mode in ('jit', 'graph')]
  assert list(rows) == (['matmul 64^3 jit', 'matmul 64^3 graph', f'dense FFN H={2 * h} jit',
                         f'dense FFN H={2 * h} graph'] + moe_names)
  dense = {mode: rows[f'dense FFN H={2 * h} {mode}'] for mode in ('jit', 'graph')}
  best = min(dense.values(), key=lambda r: r['median_ms'])
  assert dense['jit']['gflops'] * 1e9 == dense['graph']['gflops'] * 1e9 == 3 * 2 * 2 * g * s * m * 2 * h
  for name in moe_names:
    r = rows[name]
    e, c = r['experts'], r['capacity']
    assert r['gflops'] * 1e9 == pytest.approx(3 * (4 * e * g * c * m * h + 2 * g * s * m * e))
    own = dense['jit' if r['mode'] == 'jit' else 'graph']
    assert r['over_dense'] == pytest.approx(r['median_ms'] / own['median_ms'])
    assert r['over_best_dense'] == pytest.approx(r['median_ms'] / best['median_ms'])
    assert r['gflop_per_s'] == pytest.approx(r['gflops'] / r['median_ms'] * 1e3)
    assert r['flops_fraction'] == pytest.approx(r['gflop_per_s'] / rows['matmul 64^3 jit']['gflop_per_s'])
  checks = {c['name']: c['value'] for c in results['checks']}
  for mode in ('jit', 'graph'):
    main = rows[f'MoE index E=4 C=16 {mode}']
    for d in ('jit', 'graph'):
      name = f'MoE {mode} / dense {d}' + (' (best dense)' if dense[d] is best else '')
      assert checks[name] == pytest.approx(main['median_ms'] / dense[d]['median_ms'])
    assert checks[f'MoE {mode} FLOP/s / matmul jit'] == main['flops_fraction']
    assert checks[f'MoE {mode} E=8 / E=4'] == pytest.approx(rows[f'MoE index E=8 C=8 {mode}']['median_ms'] /
                                                          main['median_ms'])


@pytest.mark.parametrize('dispatch', moe.DISPATCH_MODES)
def test_xla_sharding_annotations_reach_the_hlo(dispatch):
  """With annotate=sharding.shard under the xla backend, the expert buffers carry E-split shardings.

  Off TPU the annotations do not change values; the dispatched [E,G,C,M] buffer is split E over 'expert' and
  G over 'data' (the G->E reshard), the index path's group-major [G,E,C,M] buffers are split G over 'data'.
  """
  import re  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.core import sharding  # pylint: disable=g-import-not-at-top
  x, w_gate, wi, wo = _weights(11, e=8)
  c = gating.expert_capacity(S, 8, 2.0)

  def _fn(x):
    return moe.moe_ffn(x, w_gate, wi, wo, dispatch=dispatch, annotate=sharding.shard)[0]

  partitioner = sharding.Partitioner('xla', 'data:2,expert:4')
  with sharding.use(partitioner):
    step = step_runner.StepRunner(partitioner).Compile(_fn)
    y = step(tf.constant(x))
    hlo = step.experimental_get_compiler_ir(tf.constant(x))(stage='hlo')
  y_ref = tf.function(lambda x: moe.moe_ffn(x, w_gate, wi, wo, dispatch=dispatch)[0], jit_compile=True)(x)
  assert _rel_err(y, y_ref) <= RTOL
  tiles = set()
  for line in hlo.splitlines():
    m = re.search(r'= f32\[([\d,]*)\].*custom_call_target="Sharding".*sharding=\{devices=\[([\d,]+)\]', line)
    if m:
      tiles.add((m.group(1), m.group(2)))
  assert (f'8,{G},{c},{M}', '4,2,1,1') in tiles  # [E,G,C,M]: E on 'expert', G on 'data'
  assert (f'8,{G},{c},{H}', '4,2,1,1') in tiles  # hidden
  assert (f'{G},{S},{M}', '2,1,1,4') in tiles  # x and y: G on 'data', replicated over 'expert'
  if dispatch == 'index':
    assert (f'{G},8,{c},{M}', '2,4,1,1') in tiles  # group-major buffer before the all-to-all
