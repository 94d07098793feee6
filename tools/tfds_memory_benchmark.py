r"""Peak memory of building a corpus from a TFDS dataset kept as published, against the dataset's size.

  python -m lingvo_gshard.tools.tfds_memory_benchmark --work_dir=/tmp/tfds_memory --pairs=2000000,4000000 \
      [--json=out.json]

For each size it writes a local TFDS translation dataset (the WMT feature spec, German and English; train
of that many pairs, validation and test of 3,000; synthetic sentences, all distinct) through the real
`download_and_prepare`, then builds the corpus from it as `prepare_data --tfds_train_split=train
--tfds_dev_split=validation --tfds_test_split=test` does (data/tfds_published.py), each in a fresh process
whose peak resident memory (ru_maxrss) is read at its end. A streamed build's peak must not grow with the
dataset: the figures and the ratio of the largest to the smallest size are printed.
"""
import json
import os
import resource
import subprocess
import sys
import time

from absl import app
from absl import flags

from lingvo_gshard.tools import _common

_WORK_DIR = flags.DEFINE_string('work_dir', None, 'Where the datasets and corpora are written (GBs).',
                                required=True)
_PAIRS = flags.DEFINE_list('pairs', ['2000000', '4000000'], 'Training pairs of each dataset, smallest first.')
_JSON = flags.DEFINE_string('json', '', "Write the figures as JSON here ('-' = stdout).")

_HELD_OUT = 3000
_WORDS = ('open close save print delete rename copy move show hide file folder window menu page view edit '
          'tools help search replace select none undo redo new recent settings account network').split()

# Run in a fresh interpreter: (dataset dir, train pairs, step) -> prints its peak RSS (KiB) last.
_CHILD = r'''
import resource, sys, time
import tensorflow_datasets as tfds
root, pairs, step = sys.argv[1], int(sys.argv[2]), sys.argv[3]
WORDS = %r
HELD_OUT = %d

def Sentence(i):
  words, n = [], i
  while True:
    words.append(WORDS[n %% len(WORDS)])
    n //= len(WORDS)
    if not n:
      return ' '.join(words) + f' {i}'

class SyntheticTranslation(tfds.core.GeneratorBasedBuilder):
  VERSION = tfds.core.Version('1.0.0')
  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.Translation(languages=['de', 'en']))
  def _split_generators(self, dl_manager):
    sizes = {'train': pairs, 'validation': HELD_OUT, 'test': HELD_OUT}
    offsets = {'train': 0, 'validation': pairs, 'test': pairs + HELD_OUT}
    return {s: self._generate_examples(offsets[s], n) for s, n in sizes.items()}
  def _generate_examples(self, offset, n):
    for i in range(offset, offset + n):
      english = Sentence(i)
      yield i, {'en': english.capitalize(), 'de': 'de ' + english}

start = time.time()
if step == 'dataset':
  from lingvo_gshard.data import tfds_scratch
  with tfds_scratch.Scratch():  # TFDS leaves a temp dir when making a builder of an unprepared dataset
    SyntheticTranslation(data_dir=root + '/tfds').download_and_prepare()
else:
  from lingvo_gshard.data import build, corpus, tfds_published
  source = tfds_published.PublishedTfds('synthetic_translation',
                                        {'train': 'train', 'dev': 'validation', 'test': 'test'},
                                        root + '/tfds', download=False)
  manifest, _ = build.Build(root + '/data', [source], corpus.CorpusConfig(), log=lambda line: None, force=True)
  assert manifest['totals']['train'] == pairs, manifest['totals']
print(round(time.time() - start, 1), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
''' % (_WORDS, _HELD_OUT)


def _Run(root, pairs, step):
  out = subprocess.run([sys.executable, '-c', _CHILD, root, str(pairs), step], capture_output=True, text=True)
  if out.returncode:
    _common.Fail('tfds_memory_benchmark',
                 f'{step} of {pairs} pairs failed: {(out.stderr.strip().splitlines() or ["?"])[-1]}')
  seconds, kib = out.stdout.strip().splitlines()[-1].split()
  return float(seconds), int(kib) / 1024 ** 2


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  try:
    sizes = [int(p) for p in _PAIRS.value]
  except ValueError:
    _common.Fail('tfds_memory_benchmark', f'--pairs={",".join(_PAIRS.value)}: not whole numbers')
  if not sizes or min(sizes) < 1 or sizes != sorted(sizes):
    _common.Fail('tfds_memory_benchmark', '--pairs needs sizes >= 1, smallest first')
  from lingvo_gshard.utils import files  # pylint: disable=g-import-not-at-top
  try:
    files.CheckWritableDir(_WORK_DIR.value, '--work_dir')
  except ValueError as e:
    _common.Fail('tfds_memory_benchmark', str(e))
  rows = []
  for pairs in sizes:
    root = os.path.join(_WORK_DIR.value, f'pairs_{pairs}')
    os.makedirs(root, exist_ok=True)
    if os.path.isdir(os.path.join(root, 'tfds', 'synthetic_translation')):
      dataset_seconds, dataset_gib = float('nan'), float('nan')  # written by an earlier run: reused
    else:
      dataset_seconds, dataset_gib = _Run(root, pairs, 'dataset')
    build_seconds, build_gib = _Run(root, pairs, 'build')
    rows.append({'train_pairs': pairs, 'dataset_seconds': dataset_seconds, 'build_seconds': build_seconds,
                 'build_peak_rss_gib': round(build_gib, 3), 'dataset_peak_rss_gib': round(dataset_gib, 3)})
    print(f'{pairs:>10,} pairs: build {build_seconds:7.1f}s, peak RSS {build_gib:.3f} GiB '
          f'(writing the dataset: {dataset_seconds:.1f}s, {dataset_gib:.3f} GiB)', flush=True)
  ratio = rows[-1]['build_peak_rss_gib'] / rows[0]['build_peak_rss_gib']
  print(f'peak RSS, largest / smallest dataset: {ratio:.3f} (target <= 1.10; each <= 1.5 GB)')
  out = {'rows': rows, 'largest_over_smallest': round(ratio, 3),
         'when': time.strftime('%Y-%m-%dT%H:%M:%S'), 'cpu_count': os.cpu_count()}
  if _JSON.value == '-':
    print(json.dumps(out, indent=1))
  elif _JSON.value:
    with open(_JSON.value, 'w') as f:
      f.write(json.dumps(out, indent=1) + '\n')
  return 0


def run():
  _common.Main('tfds_memory_benchmark', main)


if __name__ == '__main__':
  run()
