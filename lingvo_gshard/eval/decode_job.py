"""Decoding a trained run's test set and reporting it: one code path for `tools/evaluate.py` and the
trainer's `--mode=decode` (and `train_and_eval`'s final decode)."""
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from lingvo_gshard.core import experiment as experiment_lib
from lingvo_gshard.data import reader
from lingvo_gshard.eval import evaluator
from lingvo_gshard.eval import heldout


def Decode(exp: experiment_lib.Experiment, logdir: str, data_dir: str = '', split: str = 'test',
           test_dir: str = '', languages: Sequence[str] = (), max_sentences: int = 0, beam_size: int = 4,
           length_alpha: float = 0.6, batch_tokens: int = 2048, checkpoint: str = '', examples: int = 0,
           log: Callable[[str], None] = print, no_repeat_ngram: int = 0
           ) -> Tuple[Dict, evaluator.Evaluator, heldout.TestSet, Dict]:
  """Decodes and scores `split` of the corpus (or every <lang>.tsv of `test_dir`) for `checkpoint` (default
  the latest); returns (results, evaluator, test set, manifest). Results are stored under the run's
  decode_<set>/<checkpoint>/ (merged with earlier languages)."""
  ev = evaluator.Evaluator(exp, logdir, data_dir, beam_size, length_alpha, batch_tokens, checkpoint, log=log,
                           no_repeat_ngram=no_repeat_ngram)
  manifest = reader.LoadManifest(ev.data_dir)
  if test_dir:
    ts = heldout.FromTsvDir(test_dir, list(manifest['languages']), max_sentences, list(languages))
  else:
    ts = heldout.FromCorpus(ev.data_dir, split, list(languages), max_sentences, log=log)
  if ts.skipped:
    log('skipped: ' + ', '.join(f'{k} {v}' for k, v in ts.skipped.items()))
  if not ts.pairs:
    raise ValueError(f'nothing to decode in {ts.name}')
  results = ev.Evaluate(ts, examples=examples)
  WriteSummaries(results, os.path.dirname(ev.ResultDir(ts.name)))
  return results, ev, ts, manifest


def WriteSummaries(results: Dict, summary_dir: str):
  """BLEU and chrF per language and per average as TensorBoard scalars (`bleu/de`, `chrf/top10`, ...) at
  the checkpoint's step, next to the results (LOGDIR/decode_<set>/), so they plot beside the training loss."""
  step = results.get('step')
  if step is None:
    return
  scores = [(lang, r) for lang, r in results['languages'].items()] + list(results['averages'].items())
  with tf.summary.create_file_writer(summary_dir).as_default():
    for name, r in scores:
      for metric in ('bleu', 'chrf'):
        if r.get(metric) is not None:
          tf.summary.scalar(f'{metric}/{name}', r[metric], step=step)
    tf.summary.flush()


def _Num(v, fmt='6.2f'):
  return '' if v is None else format(v, fmt)


def FormatResults(results: Dict, rows: Optional[List[Dict]] = None) -> List[str]:
  """The report a user reads: per-language BLEU/chrF (and delta-BLEU when `rows` carry baselines), bucket
  averages, example translations, speed and the sacrebleu signatures."""
  rows = rows if rows is not None else evaluator.CompareToBaselines(results, {}, {'languages': {}})
  out = [f'{"lang":<12} {"bucket":<7} {"train":>7} {"BLEU":>6} {"chrF":>6} {"bilingual":>9} {"delta":>6}']
  for r in rows:
    out.append(f'{r["lang"]:<12} {r["bucket"] or "":<7} {r["train"] or "":>7} {r["bleu"]:6.2f} '
               f'{_Num(r["chrf"])} {_Num(r["baseline"], "9.2f") or " " * 9} {_Num(r["delta"], "+6.2f")}')
  out.append(f'{"average":<16} {"BLEU":>6} {"chrF":>6} languages')
  for name, avg in results['averages'].items():
    out.append(f'{name:<16} {avg["bleu"]:6.2f} {avg["chrf"]:6.2f} {avg["languages"]:>9}')
  for ex in results.get('examples', []):
    pad = ' ' * (len(ex['lang']) + 3)
    out.append(f'[{ex["lang"]}] source:     {ex["source"]}\n{pad}reference:  {ex["reference"]}\n'
               f'{pad}hypothesis: {ex["hypothesis"]}')
  out.append(f'{results["checkpoint"]}: {results["sentences_per_second"]:.1f} sentences/s '
             f'({results["decode_seconds"]:.0f}s)')
  out.append(f'BLEU signature: {results["bleu_signature"]}\nchrF signature: {results["chrf_signature"]}')
  return out
