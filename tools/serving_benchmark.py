r"""How fast gshard_translate and an exported SavedModel translate, against the in-process evaluator, same run.

  python -m lingvo_gshard.tools.serving_benchmark --model=M4TinyMoEDemo --logdir=/tmp/m4tiny_moe_demo \
      --json=docs/guides/performance/serving_xeon.json

Prints, with the reference matmul rate of this machine measured in the same run:
  - translate: the tool's path (read a file, batch, decode, format) against Evaluator.Translate on the same
    --translate_sentences test sentences, both warm (every batch shape compiled by a first pass), hypotheses
    compared; the start-up (restoring the run) reported apart;
  - export: its wall-clock and size on disk;
  - SavedModel: loaded in a fresh process that imports only TensorFlow and TensorFlow Text, fed the
    evaluator's batches of --export_sentences test sentences, warm, against the evaluator on the same batches;
    hypotheses compared with the tool's.
"""
import io
import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from lingvo_gshard.tools import _common
from lingvo_gshard.utils import files

_MODEL = flags.DEFINE_string('model', 'M4TinyMoEDemo', 'Experiment trained in --logdir.')
_LOGDIR = flags.DEFINE_string('logdir', None, 'A trained run.', required=True)
_TRANSLATE_SENTENCES = flags.DEFINE_integer('translate_sentences', 2000, 'Test sentences for translate.',
                                            lower_bound=1, upper_bound=1_000_000)
_EXPORT_SENTENCES = flags.DEFINE_integer('export_sentences', 500, 'Test sentences for the SavedModel.',
                                         lower_bound=1, upper_bound=1_000_000)
_JSON = flags.DEFINE_string('json', '', 'Write the figures as JSON here.')

# The fresh process: only TensorFlow and TensorFlow Text. Reads {"export": dir, "batches": [[sentence, ...]]}
# on stdin; decodes every batch once (compiling), then times a second pass; prints JSON.
_FRESH = r'''
import json, sys, time
import tensorflow as tf
import tensorflow_text
job = json.load(sys.stdin)
began = time.time()
serve = tf.saved_model.load(job['export']).signatures['serving_default']
load = time.time() - began
batches = [tf.constant(b) for b in job['batches']]
for b in batches:
  serve(sources=b)
began = time.time()
outs = [serve(sources=b)['translations'].numpy() for b in batches]
seconds = time.time() - began
print(json.dumps({'load_seconds': load, 'seconds': seconds,
                  'translations': [t.decode() for o in outs for t in o],
                  'ours': sorted(m for m in sys.modules if m.startswith('lingvo_gshard'))}))
'''


def _TestSentences(data_dir, n):
  """The first test sentences of every language, round-robin, up to n."""
  from lingvo_gshard.data import reader  # pylint: disable=g-import-not-at-top
  per_lang = [[s for s, _ in reader.Pairs(data_dir, lang, 'test')] for lang in reader.LoadManifest(data_dir)['languages']]
  out, i = [], 0
  while len(out) < n and any(i < len(p) for p in per_lang):
    out += [p[i] for p in per_lang if i < len(p)]
    i += 1
  return out[:n]


def _Timed(fn):
  began = time.time()
  out = fn()
  return out, time.time() - began


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  _common.QuietLogs()
  from lingvo_gshard.bench import timing  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.eval import batching  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.serve import export  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.serve import translator  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.serve import text_io  # pylint: disable=g-import-not-at-top
  log = lambda line: print(line, flush=True)
  try:  # a run that cannot be restored is one line, before anything is timed
    exp = _common.Experiment(_MODEL.value)
    t, startup = _Timed(lambda: translator.FromRun(exp, _LOGDIR.value, log=lambda line: None))
  except _common.UserErrors() as e:
    _common.Fail('serving_benchmark', str(e))
  rate = timing.MatmulRate()
  log(f'reference matmul (2048^3 float32, jit): {rate:.0f} GFLOP/s')
  ev = t.evaluator
  sources = _TestSentences(ev.data_dir, _TRANSLATE_SENTENCES.value)
  _Timed(lambda: ev.Translate(sources))  # compiles every batch shape
  (ev_hyps, _), ev_seconds = _Timed(lambda: ev.Translate(sources))
  text = ''.join(s + '\n' for s in sources).encode('utf-8')
  out = io.StringIO()
  _, tool_seconds = _Timed(lambda: text_io.TranslateStream(t, io.BytesIO(text), 'bench', out, text_io.Options()))
  tool_hyps = out.getvalue().splitlines()
  figures = {'machine_matmul_gflops': round(rate, 1), 'model': _MODEL.value, 'checkpoint': ev.checkpoint,
             'translate': {'sentences': len(sources), 'startup_seconds': round(startup, 2),
                           'evaluator_sentences_per_second': round(len(sources) / ev_seconds, 2),
                           'translate_sentences_per_second': round(len(sources) / tool_seconds, 2),
                           'ratio': round(ev_seconds / tool_seconds, 3), 'identical': tool_hyps == ev_hyps}}
  log(f'translate, {len(sources)} sentences (warm): evaluator {len(sources) / ev_seconds:.1f}/s, gshard_translate '
      f'{len(sources) / tool_seconds:.1f}/s = {ev_seconds / tool_seconds:.2f}x; start-up {startup:.1f}s; '
      f'identical hypotheses: {tool_hyps == ev_hyps}')

  with tempfile.TemporaryDirectory() as tmp:
    export_dir = os.path.join(tmp, 'export')
    metadata, export_seconds = _Timed(lambda: export.Export(ev, _MODEL.value, export_dir, log=lambda line: None))
    few = sources[:_EXPORT_SENTENCES.value]
    pieces = [batching.SourceIds(ev.src_vocab.Encode(s), ev.max_src_len)[0] for s in few]
    batches = list(batching.Batches([len(p) for p in pieces], ev.max_src_len, ev.batch_tokens))
    arrays = [b.Arrays(pieces) for b in batches]
    for a in arrays:
      ev.DecodeBatch(*a)
    _, in_process = _Timed(lambda: [ev.DecodeBatch(*a) for a in arrays])
    job = json.dumps({'export': export_dir, 'batches': [[few[j] for j in b.indices] for b in batches]})
    fresh = subprocess.run([sys.executable, '-c', _FRESH], input=job, capture_output=True, text=True, check=True)
    got = json.loads(fresh.stdout.strip().splitlines()[-1])
  # gshard_translate on the same sentences (alone: batch-mates, which share MoE capacity, are those sentences).
  few_out = io.StringIO()
  text_io.TranslateStream(t, io.BytesIO(''.join(s + '\n' for s in few).encode('utf-8')), 'bench', few_out,
                          text_io.Options())
  few_hyps = few_out.getvalue().splitlines()
  want = [few_hyps[j] for b in batches for j in b.indices]
  figures['export'] = {'seconds': round(export_seconds, 1), 'megabytes': round(metadata['bytes'] / 1e6, 1),
                       'sentences': len(few), 'batches': len(batches),
                       'load_seconds_fresh_process': round(got['load_seconds'], 1),
                       'evaluator_sentences_per_second': round(len(few) / in_process, 2),
                       'saved_model_sentences_per_second': round(len(few) / got['seconds'], 2),
                       'ratio': round(in_process / got['seconds'], 3),
                       'identical_to_translate': got['translations'] == want,
                       'fresh_process_imports_lingvo_gshard': bool(got['ours'])}
  log(f'export: {export_seconds:.0f}s, {metadata["bytes"] / 1e6:.1f} MB; SavedModel in a fresh process, '
      f'{len(few)} sentences in {len(batches)} batches (warm): {len(few) / got["seconds"]:.1f}/s against the '
      f'evaluator\'s {len(few) / in_process:.1f}/s = {in_process / got["seconds"]:.2f}x; identical to '
      f'gshard_translate: {got["translations"] == want}')
  if _JSON.value:
    files.WriteText(_JSON.value, json.dumps(figures, indent=1))


if __name__ == '__main__':
  _common.Main('serving_benchmark', main)
