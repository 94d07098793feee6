"""Translation quality of a trained run per language pair: beam search, sacrebleu BLEU and chrF, averages by
resource bucket, and deltas against bilingual baselines (the paper's figure).

    ev = evaluator.Evaluator(exp, '/tmp/m4tiny_moe', data_dir='/tmp/gshard_data')
    res = ev.Evaluate(heldout.FromCorpus('/tmp/gshard_data', 'test', max_sentences=50))
    res['averages']['top10']['chrf'], res['languages']['de']['bleu']

The model is rebuilt from the run's own params.txt (the overrides it was trained with), and the checkpoint is
checked against it before restoring. Sentences of all languages are decoded together, sorted by length, in
batches of one static shape per length bucket (one compilation each); a batch stops as soon as no beam can
still change its result. Sources longer than training's max_source_length are truncated to it (training
dropped such examples), counted and reported.

Results are kept per (test set, checkpoint) under LOGDIR/decode_<set>/<checkpoint>/: results.json (languages
merged across evaluations: evaluating one language adds or replaces that language only; other beam settings
are refused) and <lang>.src / .ref / .hyp, aligned lines, for rescoring or sacrebleu's paired bootstrap.
"""
import json
import os
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import sacrebleu
import tensorflow as tf

from lingvo_gshard.core import experiment as experiment_lib
from lingvo_gshard.core import sharding
from lingvo_gshard.data import directions
from lingvo_gshard.data import reader
from lingvo_gshard.eval import batching
from lingvo_gshard.eval import heldout
from lingvo_gshard.input import tokenizer
from lingvo_gshard.models import decoding
from lingvo_gshard.runtime import hardware
from lingvo_gshard.train import checkpoints
from lingvo_gshard.utils import files

BUCKETS = ('high', 'medium', 'low')
TOP_N = 10  # the "10 largest languages" average


def CheckpointPath(logdir: str, checkpoint: str = '') -> str:
  """The path of `checkpoint` (a path, or a name in `logdir` such as ckpt-400; default: the latest, which the
  log directory's state file names: checkpoints.StateUnreadable, naming the file, if it does not parse)."""
  try:
    ckpt_path = checkpoint or checkpoints.LatestCheckpoint(logdir)
  except checkpoints.StateUnreadable as e:
    raise checkpoints.StateUnreadable(f'{e}; name the checkpoint to read instead (--checkpoint=ckpt-N)') from None
  if ckpt_path is None:
    raise FileNotFoundError(f'{logdir}: no checkpoint (train it with python -m lingvo_gshard.tools.trainer)')
  if not files.Exists(ckpt_path + '.index') and files.Exists(os.path.join(logdir, ckpt_path + '.index')):
    ckpt_path = os.path.join(logdir, ckpt_path)  # --checkpoint=ckpt-400 names one in the log directory
  if not files.Exists(ckpt_path + '.index'):
    raise FileNotFoundError(f'{ckpt_path}: no such checkpoint (no {ckpt_path}.index)')
  return ckpt_path


def RestoreModel(params, logdir: str, partitioner: sharding.Partitioner, checkpoint: str = ''):
  """The run's model with the weights of `checkpoint` (default: the latest in `logdir`), checked first."""
  ckpt_path = CheckpointPath(logdir, checkpoint)
  with sharding.use(partitioner):
    model = params.task.Instantiate().InstantiateVariables(partitioner, params.learner.seed)
  objects = checkpoints.CheckpointObjects(model)
  checkpoints.CheckCheckpoint(ckpt_path, objects)
  tf.train.Checkpoint(**objects).restore(ckpt_path).expect_partial().assert_existing_objects_matched()
  return model, ckpt_path


METRICS = ('bleu', 'chrf')


def Metric(name: str, target_lang: str = tokenizer.TARGET_LANGUAGE):
  """The sacrebleu metric reported as `name`: BLEU with the target language's default tokenizer, or chrF
  (character 6-grams, beta 2)."""
  if name == 'bleu':
    try:
      return sacrebleu.BLEU(trg_lang=target_lang)
    except (ImportError, RuntimeError):  # sacrebleu raises RuntimeError when MeCab's packages are missing
      # ja and ko default to MeCab tokenizers whose packages are optional; characters instead, which the
      # signature states (tok:char).
      return sacrebleu.BLEU(tokenize='char')
  if name == 'chrf':
    return sacrebleu.CHRF()
  raise ValueError(f'unknown metric {name!r}; one of {", ".join(METRICS)}')


def Bleu(hypotheses: List[str], references: List[str], target_lang: str = tokenizer.TARGET_LANGUAGE):
  """(score, signature) of sacrebleu's corpus BLEU."""
  metric = Metric('bleu', target_lang)
  return metric.corpus_score(hypotheses, [references]).score, str(metric.get_signature())


def Chrf(hypotheses: List[str], references: List[str]):
  """(score, signature) of sacrebleu's corpus chrF."""
  metric = Metric('chrf')
  return metric.corpus_score(hypotheses, [references]).score, str(metric.get_signature())


def Averages(languages: Dict[str, Dict], manifest: Dict) -> Dict[str, Dict]:
  """Mean BLEU/chrF per resource bucket, over the TOP_N largest languages, and over all, of the scored
  languages (directions): {'high': {'bleu', 'chrf', 'languages'}, ..., 'top10': ..., 'all': ...}; with
  directions both into and out of English also 'xx-en/all', 'xx-en/top10', 'en-xx/all', 'en-xx/top10'."""
  info = manifest['languages']
  groups = {b: [l for l in languages if info.get(l, {}).get('bucket') == b] for b in BUCKETS}
  largest = sorted(info, key=lambda l: -info[l]['train'])[:TOP_N]
  groups[f'top{TOP_N}'] = [l for l in largest if l in languages]
  groups['all'] = list(languages)
  into_english = [l for l in languages if directions.Target(l) == tokenizer.TARGET_LANGUAGE]
  out_of_english = [l for l in languages if directions.Source(l) == tokenizer.TARGET_LANGUAGE]
  if into_english and out_of_english:  # a many-to-many run: each kind of direction on its own too
    for kind, keys in (('xx-en', into_english), ('en-xx', out_of_english)):
      groups[f'{kind}/all'] = keys
      groups[f'{kind}/top{TOP_N}'] = sorted(keys, key=lambda l: -info.get(l, {}).get('train', 0))[:TOP_N]
  out = {}
  for name, langs in groups.items():
    if langs:
      out[name] = {m: float(np.mean([languages[l][m] for l in langs])) for m in ('bleu', 'chrf')}
      out[name]['languages'] = len(langs)
  return out


class Evaluator:
  """Decodes test sets with a run's restored model and scores them (see the module docstring)."""

  def __init__(self, exp: experiment_lib.Experiment, logdir: str, data_dir: str = '', beam_size: int = 4,
               length_alpha: float = 0.6, batch_tokens: int = 2048, checkpoint: str = '',
               log: Callable[[str], None] = print, no_repeat_ngram: int = 0):
    self.exp, self.logdir, self.log = exp, logdir, log
    CheckpointPath(logdir, checkpoint)  # before the corpus is read: a run with nothing to decode says so first
    self.params = experiment_lib.LoadRunParams(exp, logdir, data_dir)
    hardware.ResolveAuto(self.params)  # a no-op for a trained run: its params.txt holds the resolved values
    self.params.Validate()
    if 'train' not in self.params.input:
      raise ValueError(f'{type(exp).__name__} has no train input (its vocabulary and lengths)')
    inp = self.params.input.train
    self.data_dir = inp.data_dir
    self.src_vocab, self.tgt_vocab = inp.Instantiate(log=lambda line: None).Vocabularies()
    self.partitioner = sharding.Partitioner('none')
    self.params.task.fprop_dtype = decoding.DECODE_FPROP_DTYPE
    self.model, self.checkpoint = RestoreModel(self.params, logdir, self.partitioner, checkpoint)
    self.beam_size, self.length_alpha, self.no_repeat_ngram = beam_size, length_alpha, no_repeat_ngram
    self.batch_tokens = batch_tokens
    self.max_src_len = inp.max_source_length
    self.max_tgt_len = inp.max_target_length
    self.default_start = self.tgt_vocab.TagId(tokenizer.TARGET_LANGUAGE)
    model, eos = self.model, tokenizer.EOS_ID
    self._compiled = {}

    def Decode(src_ids, src_segment_ids, src_positions, start_ids, max_len):
      return decoding.BeamSearch(model, src_ids, src_segment_ids, src_positions, start_ids, eos, max_len,
                                 beam_size=beam_size, length_alpha=length_alpha, no_repeat_ngram=no_repeat_ngram)

    self._decode_fn = Decode

  def Buckets(self) -> List[int]:
    """Source lengths of the static batch shapes: 8, 16, 32, ... up to max_source_length."""
    return batching.Buckets(self.max_src_len)

  def _Compiled(self, src_len):
    if src_len not in self._compiled:
      # Up to training's longest target whatever the bucket; the beam's early stop ends short ones sooner.
      self._compiled[src_len] = tf.function(
          lambda a, b, c, d: self._decode_fn(a, b, c, d, self.max_tgt_len), jit_compile=True,
          autograph=False)
    return self._compiled[src_len]

  def StartId(self, target_language: Optional[str] = None) -> int:
    """The decoder's first token for a target language: its tag <2xx> (English when None)."""
    return self.default_start if target_language is None else self.tgt_vocab.TagId(target_language)

  def DecodeBatch(self, ids: np.ndarray, segment: np.ndarray, positions: np.ndarray,
                  starts: Optional[np.ndarray] = None):
    """One batch of batching.Batch.Arrays -> (ids [rows, K, T], scores [rows, K]) as NumPy, best first;
    `starts` [rows]: each row's decoder start (StartId; default English)."""
    if starts is None:
      starts = np.full([ids.shape[0]], self.default_start, np.int32)
    out, scores = self._Compiled(ids.shape[1])(tf.constant(ids), tf.constant(segment), tf.constant(positions),
                                               tf.constant(starts, tf.int32))
    return out.numpy(), scores.numpy()

  def TranslateNbest(self, sources: Sequence[str], nbest: int = 1,
                     progress: Optional[Callable[[int, int], None]] = None, decode_batch=None,
                     targets: Optional[Sequence[str]] = None):
    """-> ([[(hypothesis, score)] * nbest] per source, best first; [bool] per source: truncated to
    max_source_length). Scores are beam search's length-normalised log-probabilities. `decode_batch`: what
    decodes a batch (default DecodeBatch; an exported SavedModel's client passes its own). `targets`: the
    target language of each source (default: all English)."""
    if not 1 <= nbest <= self.beam_size:
      raise ValueError(f'nbest must be in [1, beam_size {self.beam_size}], got {nbest}')
    starts = None if targets is None else [self.StartId(t) for t in targets]
    return TranslateNbest(sources, self.src_vocab, self.tgt_vocab, self.max_src_len, self.batch_tokens, nbest,
                          decode_batch or self.DecodeBatch, progress, starts=starts, default_start=self.default_start)

  def Translate(self, sources: Sequence[str], progress: Optional[Callable[[int, int], None]] = None,
                targets: Optional[Sequence[str]] = None):
    """-> (hypotheses, [bool] per source: truncated to max_source_length)."""
    nbest, truncated = self.TranslateNbest(sources, 1, progress, targets=targets)
    return [n[0][0] for n in nbest], truncated

  def ResultDir(self, test_set_name: str) -> str:
    return os.path.join(self.logdir, f'decode_{test_set_name}', os.path.basename(self.checkpoint))

  def Evaluate(self, test_set: heldout.TestSet, examples: int = 0) -> Dict:
    """Decodes and scores `test_set`; returns (and merges into ResultDir's results.json) {'experiment',
    'checkpoint', 'step', 'set', 'bleu_signature', 'chrf_signature', 'languages': {lang: {'bleu', 'chrf',
    'sentences', 'distinct', 'truncated', 'bucket', 'train'}}, 'averages': Averages(...), 'skipped',
    'decode_seconds', 'sentences_per_second'}; with `examples`, also 'examples': that many (lang, source,
    reference, hypothesis) rows from different languages."""
    manifest = reader.LoadManifest(self.data_dir)
    results_path = os.path.join(self.ResultDir(test_set.name), 'results.json')
    previous = self._PreviousResults(results_path)  # checked before decoding: a refusal must not cost it
    sources = [s for lang in test_set.pairs for s, _ in test_set.pairs[lang]]
    targets = [directions.Target(lang) for lang in test_set.pairs for _ in test_set.pairs[lang]]
    hyps, truncated, seconds = self._Decode(sources, test_set.name, len(test_set.pairs), targets)
    languages, signatures = self._Score(test_set, hyps, truncated, manifest, previous)
    self._WriteHypotheses(test_set, hyps)
    out = {'experiment': type(self.exp).__name__, 'checkpoint': self.checkpoint,
           'step': CheckpointStep(self.checkpoint), 'set': test_set.name, 'beam_size': self.beam_size,
           'length_alpha': self.length_alpha, 'no_repeat_ngram': self.no_repeat_ngram,
           'bleu_signature': signatures[0] or previous.get('bleu_signature', ''),
           'chrf_signature': signatures[1] or previous.get('chrf_signature', ''), 'languages': languages,
           'averages': Averages(languages, manifest), 'skipped': test_set.skipped,
           'decode_seconds': round(seconds, 2), 'sentences_per_second': round(len(sources) / max(seconds, 1e-9), 2)}
    files.WriteJson(results_path, out, sort_keys=False, ensure_ascii=False)
    rows = _Examples(test_set, hyps, examples) if examples else []
    if rows:
      out['examples'] = rows
    return out

  def _PreviousResults(self, results_path: str) -> Dict:
    """The results already in `results_path` ({} if none), which this evaluation merges into: refused if
    they were decoded with other settings."""
    if not files.Exists(results_path):
      return {}
    previous = json.loads(files.ReadText(results_path))
    settings = (previous.get('beam_size'), previous.get('length_alpha'), previous.get('no_repeat_ngram', 0))
    if settings != (self.beam_size, self.length_alpha, self.no_repeat_ngram):
      raise ValueError(f'{results_path} holds results of beam {settings[0]}, alpha {settings[1]}, no-repeat '
                       f'n-gram {settings[2]}; not merging beam {self.beam_size}, alpha {self.length_alpha}, '
                       f'no-repeat n-gram {self.no_repeat_ngram} into it (move it away first)')
    return previous

  def _Decode(self, sources: List[str], name: str, num_languages: int,
              targets: List[str]) -> Tuple[List[str], List[bool], float]:
    """Translates `sources`, logging progress every 15 s; returns (hypotheses, truncated flags, seconds)."""
    self.log(f'decoding {len(sources)} sentences of {num_languages} languages ({name}, beam '
             f'{self.beam_size}, {os.path.basename(self.checkpoint)})')
    start, last_report = time.time(), [time.time()]

    def Progress(done, total):
      now = time.time()
      if now - last_report[0] >= 15 or done == total:
        last_report[0] = now
        rate = done / max(now - start, 1e-9)
        self.log(f'  decoded {done}/{total} sentences, {rate:.1f}/s, eta {(total - done) / max(rate, 1e-9):.0f}s')

    hyps, truncated = self.Translate(sources, Progress,
                                     targets=None if set(targets) <= {tokenizer.TARGET_LANGUAGE} else targets)
    return hyps, truncated, time.time() - start

  def _Score(self, test_set: heldout.TestSet, hyps: List[str], truncated_flags: List[bool], manifest: Dict,
             previous: Dict) -> Tuple[Dict, Tuple[str, str]]:
    """BLEU and chrF of each language (merged into the previous results' languages), and the signatures."""
    languages = dict(previous.get('languages', {}))
    bleu_sig = chrf_sig = english_sig = ''
    info = manifest['languages']
    for lang, (begin, end) in _Spans(test_set).items():
      lang_hyps, refs = hyps[begin:end], [t for _, t in test_set.pairs[lang]]
      bleu, bleu_sig = Bleu(lang_hyps, refs, directions.Target(lang))
      chrf, chrf_sig = Chrf(lang_hyps, refs)
      truncated = sum(truncated_flags[begin:end])
      languages[lang] = {'bleu': bleu, 'chrf': chrf, 'sentences': len(refs),
                         'distinct': len(set(lang_hyps)) / len(lang_hyps), 'truncated': truncated,
                         'bucket': info.get(lang, {}).get('bucket', '?'), 'train': info.get(lang, {}).get('train', 0)}
      if directions.Target(lang) != tokenizer.TARGET_LANGUAGE:  # its own tokenizer: its own signature
        languages[lang]['bleu_signature'] = bleu_sig
      else:
        english_sig = bleu_sig
      self.log(f'{lang:<12} BLEU {bleu:6.2f}  chrF {chrf:6.2f}  ({len(refs)} sentences, '
               f'{languages[lang]["distinct"]:.0%} distinct{f", {truncated} truncated" if truncated else ""})')
    truncated_total = sum(languages[lang]['truncated'] for lang in test_set.pairs)
    if truncated_total:
      self.log(f'{truncated_total} sources longer than max_source_length={self.max_src_len} pieces were '
               'truncated to it')
    return languages, (english_sig or bleu_sig, chrf_sig)  # the run's signature: its X->English one if any

  def _WriteHypotheses(self, test_set: heldout.TestSet, hyps: List[str]):
    """<lang>.src, .ref and .hyp, a sentence a line, in the result directory (what compare_runs rescores)."""
    out_dir = self.ResultDir(test_set.name)
    files.MakeDirs(out_dir)
    for lang, (begin, end) in _Spans(test_set).items():
      pairs = test_set.pairs[lang]
      for ext, lines in (('src', [s for s, _ in pairs]), ('ref', [t for _, t in pairs]), ('hyp', hyps[begin:end])):
        files.WriteText(os.path.join(out_dir, f'{lang}.{ext}'), ''.join(line.replace('\n', ' ') + '\n'
                                                                         for line in lines))


def TranslateNbest(sources: Sequence[str], src_vocab, tgt_vocab, max_src_len: int, batch_tokens: int,
                   nbest: int, decode_batch, progress=None, starts=None, default_start=None):
  """Encodes `sources`, decodes them in batching.Batches with `decode_batch` ((ids, segment, positions) ->
  (ids [rows, K, T], scores [rows, K]); with `starts`, the decoder start id of each source, it is also given
  the [rows] starts of the batch, default_start on padding rows), and decodes the `nbest` best of each: see
  Evaluator.TranslateNbest."""
  pieces = [batching.SourceIds(src_vocab.Encode(s), max_src_len) for s in sources]
  encoded, truncated = [p for p, _ in pieces], [t for _, t in pieces]
  out = [[] for _ in encoded]
  done = 0
  for batch in batching.Batches([len(e) for e in encoded], max_src_len, batch_tokens):
    arrays = batch.Arrays(encoded)
    if starts is not None:
      rows = np.full([arrays[0].shape[0]], default_start, np.int32)
      rows[:len(batch.indices)] = [starts[j] for j in batch.indices]
      arrays += (rows,)
    ids, scores = decode_batch(*arrays)
    for r, j in enumerate(batch.indices):
      out[j] = [(tgt_vocab.Decode(ids[r, k]), float(scores[r, k])) for k in range(nbest)]  # up to eos, no tags
    done += len(batch.indices)
    if progress:
      progress(done, len(encoded))
  return out, truncated


def _Spans(test_set: heldout.TestSet) -> Dict[str, Tuple[int, int]]:
  """{lang: (begin, end)} of each language's sentences in the test set's order."""
  spans, pos = {}, 0
  for lang, pairs in test_set.pairs.items():
    spans[lang] = (pos, pos + len(pairs))
    pos += len(pairs)
  return spans


def _Examples(test_set: heldout.TestSet, hyps: List[str], examples: int) -> List[Dict]:
  """`examples` (lang, source, reference, hypothesis) rows, from languages spread over the test set."""
  langs, spans, rows = list(test_set.pairs), _Spans(test_set), []
  step = max(1, len(langs) // examples)
  for k, lang in enumerate(langs[::step][:examples]):
    # Catalogs share their first strings across languages: take a different sentence from each.
    j = (k * 7919 + 13) % len(test_set.pairs[lang])
    s, t = test_set.pairs[lang][j]
    rows.append({'lang': lang, 'source': s, 'reference': t, 'hypothesis': hyps[spans[lang][0] + j]})
  return rows


def CheckpointStep(path: str) -> int:
  """The step of a ckpt-N path (-1 for another name)."""
  try:
    return int(path.rsplit('-', 1)[1])
  except (IndexError, ValueError):
    return -1


def LatestResultDir(logdir: str, test_set_name: str) -> Optional[str]:
  """decode_<test_set_name>/ckpt-N of the newest checkpoint evaluated on it in `logdir`, or None."""
  base = os.path.join(logdir, f'decode_{test_set_name}')
  if not files.IsDir(base):
    return None
  found = [(CheckpointStep(d), d) for d in files.ListDir(base)
           if files.Exists(os.path.join(base, d, 'results.json'))]
  return os.path.join(base, max(found)[1]) if found else None


def LatestResults(logdir: str, test_set_name: str) -> Optional[Dict]:
  """The results.json of the newest evaluated checkpoint of `test_set_name` in `logdir`, or None."""
  result_dir = LatestResultDir(logdir, test_set_name)
  if result_dir is None:
    return None
  return json.loads(files.ReadText(os.path.join(result_dir, 'results.json')))


def CompareToBaselines(results: Dict, baselines: Dict[str, Dict], manifest: Dict) -> List[Dict]:
  """Rows {lang, bucket, train, bleu, chrf, baseline, baseline_chrf, delta, delta_chrf} ordered high -> low
  resource (training pairs). `baselines` maps a language to its bilingual run's results; missing ones give
  None, never 0."""
  rows = []
  for lang, r in results['languages'].items():
    info = manifest['languages'].get(lang, {})
    base = baselines.get(lang, {}).get('languages', {}).get(lang, {})
    b, bc = base.get('bleu'), base.get('chrf')
    rows.append({'lang': lang, 'bucket': info.get('bucket', '?'), 'train': info.get('train', 0),
                 'bleu': r['bleu'], 'chrf': r.get('chrf'), 'baseline': b, 'baseline_chrf': bc,
                 'delta': None if b is None else r['bleu'] - b,
                 'delta_chrf': None if bc is None or r.get('chrf') is None else r['chrf'] - bc})
  return sorted(rows, key=lambda row: -row['train'])
