"""Fraction of decoder MoE tokens dropped per beam-search step on one evaluator-sized batch.

usage: python drop_stats.py LOGDIR CKPT CF OUT_JSON   (run from the checkout whose code is probed)
"""
import json, sys
import numpy as np
import tensorflow as tf
from lingvo_gshard.core import experiment as experiment_lib
from lingvo_gshard.core import registry
import lingvo_gshard; print("code:", lingvo_gshard.__file__, flush=True)
from lingvo_gshard.layers import moe as moe_lib
from lingvo_gshard.layers import moe_layer
from lingvo_gshard.layers import transformer
from lingvo_gshard.models import decoding
from lingvo_gshard.train import evaluator as evaluator_lib
from lingvo_gshard.train import test_sets
from lingvo_gshard.input import tokenizer

logdir, ckpt, cf, out_path = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
orig = experiment_lib.LoadRunParams
def Patched(exp, logdir, data_dir=''):
  p = orig(exp, logdir, data_dir)
  for stack in (p.task.encoder, p.task.decoder):
    if 'decode_capacity_factor' in stack.moe_tpl:
      stack.moe_tpl.decode_capacity_factor = cf
    else:
      stack.moe_tpl.eval_capacity_factor = cf
  return p
experiment_lib.LoadRunParams = Patched
registry.LoadAll()
ev = evaluator_lib.Evaluator(registry.Get('M4TinyMoE'), logdir, data_dir='/tmp/gshard_data', checkpoint=ckpt,
                             log=print)
T = ev.max_tgt_len
sums = tf.Variable(tf.zeros([T, 3]))   # dropped_fraction, overflow_1, overflow_2 summed per step
counts = tf.Variable(tf.zeros([T]))
ctx = {'step': None}
orig_ffn = moe_lib.moe_ffn
def Wrapped(*a, **kw):
  y, aux, stats = orig_ffn(*a, **kw)
  if ctx['step'] is not None:
    v = tf.stack([stats['dropped_fraction'], stats['overflow_1'], stats['overflow_2']])
    sums.scatter_nd_add([[ctx['step']]], [v])
    counts.scatter_nd_add([[ctx['step']]], [1.0])
  return y, aux, stats
moe_layer.moe.moe_ffn = Wrapped
orig_ext = transformer.TransformerLayer.ExtendStep
def Ext(self, x, cache, step, *a, **kw):
  ctx['step'] = step
  try:
    return orig_ext(self, x, cache, step, *a, **kw)
  finally:
    ctx['step'] = None
transformer.TransformerLayer.ExtendStep = Ext

ts = test_sets.FromCorpus('/tmp/gshard_data', 'test', max_sentences=6, log=lambda s: None)
sources = [s for l in ts.pairs for s, _ in ts.pairs[l]]
encoded = [list(ev.src_vocab.Encode(s))[:ev.max_src_len - 1] + [tokenizer.EOS_ID] for s in sources]
encoded = [e for e in encoded if 9 <= len(e) <= 16][:128]   # one full 16-token bucket: 128 rows
ids = np.zeros((128, 16), np.int32)
for r, e in enumerate(encoded):
  ids[r, :len(e)] = e
seg = (ids != 0).astype(np.int32)
pos = np.where(seg, np.arange(16)[None], 0).astype(np.int32)
print(len(encoded), 'sentences')
start = ev.tgt_vocab.TagId(tokenizer.TARGET_LANGUAGE)
fn = tf.function(lambda a, b, c: decoding.BeamSearch(ev.model, a, b, c, tf.fill([128], start), tokenizer.EOS_ID, T,
                                                   beam_size=4, with_steps=True))
_, _, steps = fn(tf.constant(ids), tf.constant(seg), tf.constant(pos))
n = counts.numpy()
mean = sums.numpy() / np.maximum(n, 1)[:, None]
out = {'cf': cf, 'checkpoint': ckpt, 'sentences': len(encoded), 'steps': int(steps),
       'per_step': {int(t): dict(zip(('dropped_fraction', 'overflow_1', 'overflow_2'), map(float, mean[t])))
                    for t in range(T) if n[t]},
       'mean_over_steps': dict(zip(('dropped_fraction', 'overflow_1', 'overflow_2'),
                                   map(float, mean[n > 0].mean(0))))}
print(json.dumps(out['mean_over_steps']), {t: round(v['dropped_fraction'], 3) for t, v in list(out['per_step'].items())[:6]})
json.dump(out, open(out_path, 'w'), indent=1)
