"""BLEU of a trained experiment per language pair, and deltas against bilingual baselines (sacrebleu).

Decodes a split of the built corpus language by language with beam search, detokenizes with the target
SentencePiece model and scores with sacrebleu (tokenizer chosen for the target language, signature stored),
as the paper reports: per-language BLEU, then delta-BLEU against a bilingual model of the same pair, languages
ordered from high to low resource.
"""
import json
import os
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import sacrebleu
import tensorflow as tf

from lingvo_gshard.core import experiment as experiment_lib
from lingvo_gshard.core import sharding
from lingvo_gshard.data import reader
from lingvo_gshard.input import tokenizer
from lingvo_gshard.models import decoding
from lingvo_gshard.train import trainer


def RestoreModel(exp: experiment_lib.Experiment, logdir: str, partitioner: sharding.Partitioner):
  """The experiment's model with the weights of the latest checkpoint in `logdir` (the trainer's layout)."""
  ckpt_path = tf.train.latest_checkpoint(logdir)
  if ckpt_path is None:
    raise FileNotFoundError(f'{logdir}: no checkpoint (train it with python -m lingvo_gshard.tools.trainer)')
  with sharding.use(partitioner):
    model = exp.Task().Instantiate().InstantiateVariables(partitioner, exp.Learner().seed)
  tf.train.Checkpoint(**trainer.CheckpointObjects(model)).restore(ckpt_path).expect_partial().assert_existing_objects_matched()
  return model, ckpt_path


def Bleu(hypotheses: List[str], references: List[str], target_lang: str = tokenizer.TARGET_LANGUAGE):
  """(score, signature) of sacrebleu's corpus BLEU with the target language's default tokenizer."""
  metric = sacrebleu.BLEU(trg_lang=target_lang)
  return metric.corpus_score(hypotheses, [references]).score, str(metric.get_signature())


class Evaluator:
  """Decodes and scores one split of the corpus with a restored model."""

  def __init__(self, exp: experiment_lib.Experiment, logdir: str, data_dir: Optional[str] = None,
               split: str = 'test', beam_size: int = 4, length_alpha: float = 0.6, batch_size: int = 32,
               max_decode_length: int = 0, log: Callable[[str], None] = print):
    self.exp, self.logdir, self.split, self.log = exp, logdir, split, log
    inp = {'test': exp.Test, 'dev': exp.Dev, 'train': exp.Train}[split]()
    if inp is None:
      raise ValueError(f'{type(exp).__name__} has no {split} input')
    if data_dir:
      inp.data_dir = data_dir
    self.input_p = inp
    self.data_dir = inp.data_dir
    self.src_vocab, self.tgt_vocab = inp.Instantiate().Vocabularies()
    self.partitioner = sharding.Partitioner('none')
    self.model, self.checkpoint = RestoreModel(exp, logdir, self.partitioner)
    self.batch_size = batch_size
    self.src_len = inp.max_source_length
    self.max_len = max_decode_length or inp.max_target_length
    start = self.tgt_vocab.TagId(tokenizer.TARGET_LANGUAGE)
    model, eos = self.model, tokenizer.EOS_ID

    @tf.function(jit_compile=True)
    def _Decode(src_ids, src_segment_ids, src_positions):
      start_ids = tf.fill([tf.shape(src_ids)[0]], start)
      ids, _ = decoding.BeamSearch(model, src_ids, src_segment_ids, src_positions, start_ids, eos,
                                   self.max_len, beam_size=beam_size, length_alpha=length_alpha)
      return ids[:, 0]

    self._decode = _Decode

  def _SourceBatch(self, sources: List[str]):
    """[batch_size, Ls] arrays; sources longer than Ls are truncated (keeping eos), missing rows padded."""
    n, length = self.batch_size, self.src_len
    ids = np.zeros((n, length), np.int32)
    for row, text in enumerate(sources):
      pieces = list(self.src_vocab.Encode(text))[:length - 1] + [tokenizer.EOS_ID]
      ids[row, :len(pieces)] = pieces
    segment = (ids != 0).astype(np.int32)
    positions = np.where(segment, np.arange(length, dtype=np.int32)[None], 0).astype(np.int32)
    return ids, segment, positions

  def Translate(self, sources: List[str]) -> List[str]:
    out = []
    for i in range(0, len(sources), self.batch_size):
      chunk = sources[i:i + self.batch_size]
      ids = self._decode(*[tf.constant(a) for a in self._SourceBatch(chunk)]).numpy()
      out += [self.tgt_vocab.Decode(row) for row in ids[:len(chunk)]]  # up to eos, tags dropped
    return out

  def Evaluate(self, languages: Optional[Sequence[str]] = None, max_sentences: int = 0) -> Dict:
    """{'checkpoint', 'split', 'signature', 'languages': {lang: {'bleu', 'sentences'}}}; also written to
    LOGDIR/bleu_<split>.json."""
    manifest = reader.LoadManifest(self.data_dir)
    langs = list(languages or self.input_p.languages or manifest['languages'])
    results, signature = {}, ''
    for lang in langs:
      pairs = reader.Pairs(self.data_dir, lang, self.split)
      if max_sentences:
        pairs = pairs[:max_sentences]
      if not pairs:
        self.log(f'{lang}: no {self.split} sentences, skipped')
        continue
      hyps = self.Translate([s for s, _ in pairs])
      score, signature = Bleu(hyps, [t for _, t in pairs])
      results[lang] = {'bleu': score, 'sentences': len(pairs)}
      self.log(f'{lang:<12} BLEU {score:6.2f}  ({len(pairs)} sentences)')
    out = {'experiment': type(self.exp).__name__, 'checkpoint': self.checkpoint, 'split': self.split,
           'signature': signature, 'languages': results}
    with open(os.path.join(self.logdir, f'bleu_{self.split}.json'), 'w') as f:
      json.dump(out, f, indent=1)
    return out


def CompareToBaselines(results: Dict, baselines: Dict[str, Dict], manifest: Dict) -> List[Dict]:
  """Rows {lang, bucket, train, bleu, baseline, delta} ordered high -> low resource (training pairs)."""
  rows = []
  for lang, r in results['languages'].items():
    info = manifest['languages'].get(lang, {})
    base = baselines.get(lang, {}).get('languages', {}).get(lang, {}).get('bleu')
    rows.append({'lang': lang, 'bucket': info.get('bucket', '?'), 'train': info.get('train', 0),
                 'bleu': r['bleu'], 'baseline': base, 'delta': None if base is None else r['bleu'] - base})
  return sorted(rows, key=lambda row: -row['train'])
