"""How many distinct English targets (and pairs) a run's training stream contains: the real pipeline's
string mixture (Mixture(): temperature draws over per-language shuffle buffers), first N examples."""
import sys, itertools
from lingvo_gshard.core import registry
registry.LoadAll()
from lingvo_gshard.input import pipeline
data_dir, n = sys.argv[1], int(sys.argv[2])
import json, os
if json.load(open(os.path.join(data_dir, 'manifest.json')))['version'] == '1.0.0':  # the build before
  import tensorflow_datasets as tfds
  from lingvo_gshard.data import gettext_m4
  gettext_m4.DATASET_VERSION = '1.0.0'
  gettext_m4.GettextM4.VERSION = tfds.core.Version('1.0.0')
exp = registry.GetClass('M4TinyMoEDemo')()
p = exp.Train().Set(data_dir=data_dir)
inp = p.Instantiate() if hasattr(p, 'Instantiate') else pipeline.MTInput(p)
targets, pairs = set(), set()
for ex in itertools.islice(inp.Mixture().as_numpy_iterator(), n):
  targets.add(ex['target']); pairs.add((ex['lang'], ex['source']))
print(f'{data_dir}: first {n} examples: {len(targets)} distinct English targets, {len(pairs)} distinct pairs')
if len(sys.argv) > 3:
  import numpy as np
  counts = [int(np.sum(b['tgt_segment_ids'].max(axis=1))) for b in
            itertools.islice(pipeline.MTInput(p).Dataset().as_numpy_iterator(), int(sys.argv[3]))]
  print(f'examples per batch of {p.batch_rows} rows: mean {np.mean(counts):.1f} over {len(counts)} batches')
