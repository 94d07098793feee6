"""Tests of lingvo_gshard/input/mixture.py: temperature weights against the formula, apportioning, seeded
draws, sampled proportions against the weights (chi-square), the log line, language checks."""
import collections
import math

import numpy as np
import pytest
import tensorflow as tf

from lingvo_gshard.data import report
from lingvo_gshard.input import mixture

_COUNTS = {'fr': 56828, 'de': 20000, 'ja': 5000, 'lg': 942}
# Chi-square critical value at p = 0.001 for 3 degrees of freedom (4 languages).
_CHI2_3DOF_999 = 16.27


def _Chi2(observed, weights, n):
  return sum((observed[k] - n * w) ** 2 / (n * w) for k, w in weights.items())


def test_weights_follow_the_formula():
  n = np.array(list(_COUNTS.values()), np.float64)
  for t in (1.0, 2.0, 5.0, 100.0):
    want = (n / n.sum()) ** (1 / t)  # The notes' form: p_l ∝ (n_l / Σn)^(1/T).
    got = mixture.TemperatureWeights(_COUNTS, t)
    assert list(got) == list(_COUNTS)
    np.testing.assert_allclose(list(got.values()), want / want.sum(), rtol=1e-12)
  np.testing.assert_allclose(list(mixture.TemperatureWeights(_COUNTS, 1.0).values()), n / n.sum())
  np.testing.assert_allclose(list(mixture.TemperatureWeights(_COUNTS, math.inf).values()), 0.25)
  # Huge counts and temperatures stay finite.
  big = mixture.TemperatureWeights({'a': 10 ** 12, 'b': 1}, 0.05)
  assert big['a'] == pytest.approx(1.0) and big['b'] >= 0.0


def test_weight_errors():
  with pytest.raises(report.DataError, match='temperature must be > 0, got 0'):
    mixture.TemperatureWeights(_COUNTS, 0)
  with pytest.raises(report.DataError, match='languages without examples cannot be mixed: ja'):
    mixture.TemperatureWeights(dict(_COUNTS, ja=0), 5.0)
  with pytest.raises(report.DataError, match='at least one language'):
    mixture.TemperatureWeights({}, 5.0)


def test_apportion_sums_and_is_proportional():
  weights = mixture.TemperatureWeights(_COUNTS, 5.0)
  for total in (0, 1, 7, 1000, 12345):
    shares = mixture.Apportion(weights, total)
    assert sum(shares.values()) == total
    for k, w in weights.items():
      assert abs(shares[k] - w * total) < 1.0
  assert mixture.Apportion({'a': 0.5, 'b': 0.5}, 3) == {'a': 2, 'b': 1}  # Ties go to the first tag.


def _Draws(weights, seed, n):
  datasets = {lang: tf.data.Dataset.from_tensors(lang).repeat() for lang in weights}
  return [x.decode() for x in mixture.Mix(datasets, weights, seed).take(n).as_numpy_iterator()]


def test_draws_are_seeded_and_match_the_weights():
  weights = mixture.TemperatureWeights(_COUNTS, 5.0)
  draws = _Draws(weights, seed=11, n=6000)
  assert _Draws(weights, seed=11, n=6000) == draws
  assert _Draws(weights, seed=12, n=6000) != draws
  assert _Chi2(collections.Counter(draws), weights, len(draws)) < _CHI2_3DOF_999
  # The same draws fail the test against the natural proportions: T really changed the distribution.
  natural = mixture.TemperatureWeights(_COUNTS, 1.0)
  assert _Chi2(collections.Counter(draws), natural, len(draws)) > 100 * _CHI2_3DOF_999


def test_mixture_of_one_and_finite_inputs():
  one = {'de': tf.data.Dataset.range(5)}
  assert list(mixture.Mix(one, {'de': 1.0}, seed=1).as_numpy_iterator()) == [0, 1, 2, 3, 4]
  # Finite inputs without stop_on_empty_dataset: every element of every input exactly once.
  datasets = {'a': tf.data.Dataset.range(0, 50), 'b': tf.data.Dataset.range(100, 103)}
  got = list(mixture.Mix(datasets, {'a': 0.5, 'b': 0.5}, seed=3, stop_on_empty_dataset=False)
             .as_numpy_iterator())
  assert sorted(got) == list(range(50)) + [100, 101, 102]


def test_describe_line():
  weights = mixture.TemperatureWeights(_COUNTS, 5.0)
  line = mixture.Describe(_COUNTS, weights, 5.0)
  total = sum(_COUNTS.values())
  assert line.startswith(f'mixture of 4 languages at T=5 over {total} examples: ')
  assert f'largest fr {100 * 56828 / total:.2f}% -> {100 * weights["fr"]:.2f}%' in line
  assert f'smallest lg {100 * 942 / total:.2f}% -> {100 * weights["lg"]:.2f}%' in line
  assert f'most up-sampled lg x{weights["lg"] * total / 942:.2f}' in line
  entropy = -sum(w * math.log(w) for w in weights.values())
  assert line.endswith(f'effective languages {math.exp(entropy):.1f}')


def test_check_languages():
  manifest = {'languages': {'fr': {}, 'pt-BR': {}, 'de': {}}}
  assert mixture.CheckLanguages(manifest, [], '/d') == ['fr', 'pt-BR', 'de']
  assert mixture.CheckLanguages(manifest, ['de'], '/d') == ['de']
  with pytest.raises(report.DataError, match=r"^languages: language 'pt-PT' is not in /d/manifest.json; closest: "
                     r"pt-BR \(Portuguese \(Brazil\)\) \(3 languages\)$"):
    mixture.CheckLanguages(manifest, ['de', 'pt-PT'], '/d')
  with pytest.raises(report.DataError, match='languages lists de more than once'):
    mixture.CheckLanguages(manifest, ['de', 'fr', 'de'], '/d')
