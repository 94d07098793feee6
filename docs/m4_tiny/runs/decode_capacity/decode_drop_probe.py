"""Probe: does MoE capacity dropping during beam-search decode cost BLEU?

usage: python decode_drop_probe.py LOGDIR CKPT N OUT_JSON CF
Decodes the first N test sentences of every language. In code with MoELayer.decode_capacity_factor it sets
that (0: C = S); in older code (decoding with eval_capacity_factor, no paddings) it sets eval_capacity_factor.
"""
import json, sys, time
from lingvo_gshard.core import experiment as experiment_lib
from lingvo_gshard.core import registry
import lingvo_gshard; print("code:", lingvo_gshard.__file__, flush=True)
from lingvo_gshard.train import evaluator as evaluator_lib
from lingvo_gshard.train import test_sets

logdir, ckpt, n, out_path, cf = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
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
exp = registry.Get('M4TinyMoE')
ev = evaluator_lib.Evaluator(exp, logdir, data_dir='/tmp/gshard_data', checkpoint=ckpt, log=print)
ts = test_sets.FromCorpus('/tmp/gshard_data', 'test', max_sentences=n, log=lambda s: None)
ts.name = f'test-{n}-{out_path.rsplit("/", 1)[-1].replace(".json", "")}'
t0 = time.time()
r = ev.Evaluate(ts)
out = {'averages': r['averages'], 'seconds': time.time() - t0, 'cf': cf, 'checkpoint': ckpt,
       'languages': {l: {k: v[k] for k in ('bleu', 'chrf')} for l, v in r['languages'].items()}}
print(json.dumps(out['averages']), f'{out["seconds"]:.0f}s', flush=True)
json.dump(out, open(out_path, 'w'), indent=1)
