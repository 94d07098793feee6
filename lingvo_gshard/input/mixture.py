"""Temperature-sampled multilingual mixtures: which language the next training example comes from.

Language l, with n_l training pairs, is drawn with probability p_l ∝ n_l^(1/T) (the M4 papers' rule,
T = 5 by default): T = 1 keeps the natural proportions, T -> inf is uniform. High-resource languages are
down-sampled and low-resource ones up-sampled (seen several times per pass over the big ones).

    weights = mixture.TemperatureWeights({'fr': 56828, 'lg': 942}, 5.0)   # {'fr': 0.69, 'lg': 0.31}
    print(mixture.Describe(counts, weights, 5.0))                           # the log line
    ds = mixture.Mix({'fr': fr_ds, 'lg': lg_ds}, weights, seed=1)         # tf.data, deterministic

One language is a mixture of one: bilingual input comes out of the same code.
"""
import math
import os

import tensorflow as tf

from lingvo_gshard.data import build
from lingvo_gshard.data import language_codes
from lingvo_gshard.data import report as report_lib


def CheckLanguages(manifest, languages, data_dir):
  """The requested language tags (all of the manifest's, largest first, if empty), validated.

  Raises:
    report.DataError: a tag the manifest does not have (named, with the closest ones) or a repeated tag.
  """
  have = list(manifest['languages'])
  if not languages:
    return have
  languages = language_codes.CheckIn(languages, have, 'languages',
                                     os.path.join(data_dir, build.MANIFEST))
  repeated = sorted({lang for lang in languages if languages.count(lang) > 1})
  if repeated:
    raise report_lib.DataError(f'languages lists {", ".join(repeated)} more than once')
  return languages


def TemperatureWeights(counts, temperature):
  """{lang: p_l} with p_l ∝ n_l^(1/T), summing to 1, in the order of `counts`.

  Args:
    counts: {lang: n_l}, every n_l > 0.
    temperature: T > 0 (float('inf') gives the uniform distribution).
  """
  if not counts:
    raise report_lib.DataError('a mixture needs at least one language')
  if not temperature > 0:
    raise report_lib.DataError(f'mixture temperature must be > 0, got {temperature}')
  empty = [lang for lang, n in counts.items() if n <= 0]
  if empty:
    raise report_lib.DataError(f'languages without examples cannot be mixed: {", ".join(empty)}')
  # Scaling by the largest count first keeps n^(1/T) in range for any T and size.
  top = max(counts.values())
  raw = {lang: (n / top) ** (1.0 / temperature) for lang, n in counts.items()}
  total = sum(raw.values())
  return {lang: w / total for lang, w in raw.items()}


def Apportion(weights, total):
  """Integer shares of `total` proportional to `weights` (largest remainder), summing to `total`."""
  exact = {lang: w * total for lang, w in weights.items()}
  shares = {lang: int(math.floor(x)) for lang, x in exact.items()}
  left = total - sum(shares.values())
  for lang in sorted(exact, key=lambda k: (shares[k] - exact[k], k))[:left]:
    shares[lang] += 1
  return shares


def Describe(counts, weights, temperature):
  """One log line: the effective distribution against the natural one.

  Gives the largest and smallest language's natural share -> sampled share, the largest up-sampling factor
  (sampled share / natural share) and the effective number of languages exp(entropy of p).
  """
  total = sum(counts.values())
  natural = {lang: n / total for lang, n in counts.items()}
  big = max(counts, key=lambda k: (counts[k], k))
  small = min(counts, key=lambda k: (counts[k], k))
  up = max(counts, key=lambda k: weights[k] / natural[k])
  entropy = -sum(w * math.log(w) for w in weights.values() if w > 0)
  return (f'mixture of {len(counts)} languages at T={temperature:g} over {total} examples: largest {big} '
          f'{100 * natural[big]:.2f}% -> {100 * weights[big]:.2f}%, smallest {small} '
          f'{100 * natural[small]:.2f}% -> {100 * weights[small]:.2f}%; most up-sampled {up} '
          f'x{weights[up] / natural[up]:.2f}; effective languages {math.exp(entropy):.1f}')


def Mix(datasets, weights, seed, stop_on_empty_dataset=True):
  """Draws each element from dataset l with probability weights[l] (tf.data.Dataset.sample_from_datasets).

  Args:
    datasets: {lang: tf.data.Dataset}, all with the same element structure.
    weights: {lang: p_l} (for example TemperatureWeights); only the languages in `datasets` are used.
    seed: the draw sequence is a function of the seed.
    stop_on_empty_dataset: for repeated (infinite) inputs irrelevant; for finite ones False reads every
      element of every dataset (the proportions then drift as the small ones run out).
  """
  langs = list(datasets)
  probs = [weights[lang] for lang in langs]
  total = sum(probs)
  return tf.data.Dataset.sample_from_datasets(
      [datasets[lang] for lang in langs], weights=[w / total for w in probs], seed=seed,
      stop_on_empty_dataset=stop_on_empty_dataset)
