"""Small built corpora for the input pipeline tests (tests/input_*_test.py).

A corpus is written as one TSV file per language and built with data.build.Build, exactly as
`prepare_data --tsv=...` would. Sentences are made from a seeded word list; each language writes the English
words in its own script (a fixed letter map), so SentencePiece has Latin, Cyrillic, Greek and kana text to
learn from, with a wide range of lengths (long ones exercise the length filter).
"""
import os

import numpy as np

from lingvo_gshard.data import build
from lingvo_gshard.data import corpus
from lingvo_gshard.data import sources
from lingvo_gshard.input import pipeline

_WORDS = ('open close save print delete rename copy move show hide file folder window menu page view edit '
          'tools help search replace select all none undo redo new recent settings account network sound '
          'image video music document archive backup restore update install remove error warning '
          'information question cancel apply ok yes no next back finish start stop pause resume').split()

_ALPHABET = 'abcdefghijklmnopqrstuvwxyz'
_SCRIPTS = {
    'de': 'äbcdëfghïjklmnöpqrstüvwxyß',
    'ru': 'абцдефгхийклмнопярстуввхыз',
    'el': 'αβψδεφγηιξκλμνοπθρστυωςχυζ',
    'ja': 'アブツデエフグハイジケルムナオプクレスタウヴワクユズ',
}
# Training pairs per language: a power law, as in the real corpus.
SIZES = {'de': 400, 'ru': 200, 'el': 100, 'ja': 50}
CONFIG = corpus.CorpusConfig(dev_fraction=0.1, test_fraction=0.1, max_dev=40, max_test=40)


def Translate(english, lang):
  """English text written in the letters of lang's script."""
  table = str.maketrans(_ALPHABET, _SCRIPTS[lang])
  return english.lower().translate(table)


def Sentences(n, seed):
  """n distinct English sentences of 1 to 12 words (numbered, so none repeats)."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    words = rng.choice(_WORDS, size=int(rng.integers(1, 13)))
    out.append(' '.join(words).capitalize() + f' {i}')
  return out


def WriteTsv(root, sizes=None):
  """Writes root/<lang>.tsv for each language; returns [(lang, path)]."""
  sizes = sizes or SIZES
  os.makedirs(root, exist_ok=True)
  files = []
  for k, (lang, n) in enumerate(sizes.items()):
    # Each language translates its own (mostly different) English sentences, as real catalogs do.
    n_total = int(n / (1 - CONFIG.dev_fraction - CONFIG.test_fraction)) + 1
    english = Sentences(n_total, seed=k)
    path = os.path.join(root, f'{lang}.tsv')
    with open(path, 'w', encoding='utf-8') as f:
      for e in english:
        f.write(f'{Translate(e, lang)}\t{e}\n')
    files.append((lang, path))
  return files


def BuildCorpus(root, sizes=None):
  """Builds a corpus under root/data from TSV files under root/tsv; returns the data dir."""
  data_dir = os.path.join(root, 'data')
  build.Build(data_dir, [sources.TsvSource(WriteTsv(os.path.join(root, 'tsv'), sizes))], CONFIG,
              log=lambda line: None)
  return data_dir


def InputParams(data_dir, **kwargs):
  """MTInput params sized for the small corpora: a 600-piece shared vocabulary, short rows, small batches."""
  p = pipeline.MTInput.Params().Set(data_dir=data_dir, max_source_length=48, max_target_length=48,
                                    packed_source_length=96, packed_target_length=96, batch_rows=8,
                                    pack_window=64, shuffle_buffer=100, seed=7)
  p.vocab.Set(source_size=600, target_size=600, sample_sentences=3000)
  return p.Set(**kwargs)
