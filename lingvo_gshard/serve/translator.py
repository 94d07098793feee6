"""What translates a list of sentences: a run's restored model in this process, or an exported SavedModel.

Both batch the same way (eval/batching.py: sorted by length, one static shape per length bucket), so they give
the evaluator's translations of the same checkpoint and settings, sentence for sentence:

    t = translator.FromRun(exp, '/tmp/m4tiny_moe_demo', beam_size=4)       # or FromSavedModel('/tmp/export')
    nbest, truncated = t.TranslateNbest(['Ouvrir le fichier'], nbest=2)
    nbest[0][0]  # ('Open File', -0.41): the best hypothesis and its length-normalised log-probability
"""
import dataclasses
import os
from typing import Callable, List, Optional, Sequence, Tuple

import tensorflow as tf

from lingvo_gshard.data import directions
from lingvo_gshard.eval import batching
from lingvo_gshard.serve import export

Nbest = List[List[Tuple[str, float]]]


@dataclasses.dataclass
class Settings:
  """How a translator decodes (an export fixes them when it is written)."""
  beam_size: int
  length_alpha: float
  no_repeat_ngram: int
  batch_tokens: int
  max_source_length: int


class Translator:
  """Translates sentences: `TranslateNbest` (see the module docstring)."""

  settings: Settings
  source_languages: List[str]  # the languages the model was trained to translate from ([] if unknown)
  target_languages: List[str]  # and into (['en'] for an X->English model)
  description: str  # what is translating, for the log: the checkpoint or the export

  def TranslateNbest(self, sources: Sequence[str], nbest: int = 1,
                     progress: Optional[Callable[[int, int], None]] = None,
                     target_language: Optional[str] = None) -> Tuple[Nbest, List[bool]]:
    """`target_language`: the language to translate into (its tag starts the decoder; default English)."""
    raise NotImplementedError


class _RunTranslator(Translator):
  """A run's checkpoint, restored in this process by the evaluator (same code path as its decodes)."""

  def __init__(self, evaluator, keys: List[str]):
    """`keys`: the directions of the run's corpus (data/directions.py)."""
    self.evaluator = evaluator
    self.settings = Settings(evaluator.beam_size, evaluator.length_alpha, evaluator.no_repeat_ngram,
                             evaluator.batch_tokens, evaluator.max_src_len)
    self.source_languages = list(dict.fromkeys(directions.Source(k) for k in keys))
    self.target_languages = directions.Targets(keys)
    self.description = evaluator.checkpoint

  def TranslateNbest(self, sources, nbest=1, progress=None, target_language=None):
    targets = None if target_language is None else [target_language] * len(sources)
    return self.evaluator.TranslateNbest(sources, nbest, progress, targets=targets)


def FromRun(exp, logdir: str, data_dir: str = '', checkpoint: str = '', beam_size: int = 4,
            length_alpha: float = 0.6, no_repeat_ngram: int = 0, batch_tokens: int = 2048,
            log: Callable[[str], None] = print) -> Translator:
  """The run in `logdir` (its params.txt), at `checkpoint` (default: the latest)."""
  from lingvo_gshard.data import reader  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.eval import evaluator  # pylint: disable=g-import-not-at-top
  ev = evaluator.Evaluator(exp, logdir, data_dir, beam_size=beam_size, length_alpha=length_alpha,
                           batch_tokens=batch_tokens, checkpoint=checkpoint, log=log,
                           no_repeat_ngram=no_repeat_ngram)
  return _RunTranslator(ev, list(reader.LoadManifest(ev.data_dir)['languages']))


class _SavedModelTranslator(Translator):
  """An export (export.py), loaded with TensorFlow (and TensorFlow Text's ops); only its serving signature
  runs. Sentences are measured with the export's own source SentencePiece model to batch them."""

  def __init__(self, export_dir: str):
    import sentencepiece as spm  # pylint: disable=g-import-not-at-top
    import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import  (registers SentencepieceOp)
    self.metadata = export.ReadMetadata(export_dir)
    m = self.metadata
    self.settings = Settings(m['beam_size'], m['length_alpha'], m['no_repeat_ngram'], m['batch_tokens'],
                             m['max_source_length'])
    self.source_languages = list(m.get('source_languages', []))
    self.target_languages = list(m.get('target_languages', [m.get('target_language', 'en')]))
    self.description = f'{export_dir} ({m["experiment"]} {m["checkpoint"]})'
    with tf.io.gfile.GFile(os.path.join(export_dir, export.EXTRA, export.SOURCE_SPM), 'rb') as f:
      self._spm = spm.SentencePieceProcessor(model_proto=f.read())
    try:
      signatures = tf.saved_model.load(export_dir).signatures
      self._serve = signatures['serving_default']
      self._serve_to = signatures.get('translate_to')  # exports written before directions have none
    except (tf.errors.OpError, ValueError, KeyError, OSError) as e:
      raise export.ExportError(f'--saved_model={export_dir}: cannot load it '
                               f'({(str(e).splitlines() or [type(e).__name__])[0][:160]})') from None

  def TranslateNbest(self, sources, nbest=1, progress=None, target_language=None):
    if target_language == self.metadata.get('target_language', 'en'):
      target_language = None  # serving_default's
    if target_language not in (None, *self.target_languages) or (target_language and not self._serve_to):
      raise ValueError(f'this export translates into {", ".join(self.target_languages)}, not {target_language}')
    s = self.settings
    if not 1 <= nbest <= s.beam_size:
      raise ValueError(f'nbest must be in [1, beam_size {s.beam_size}], got {nbest}')
    lengths = [len(batching.SourceIds(self._spm.EncodeAsIds(x), s.max_source_length)[0]) for x in sources]
    out: Nbest = [[] for _ in sources]
    truncated = [False] * len(sources)
    done = 0
    for batch in batching.Batches(lengths, s.max_source_length, s.batch_tokens):
      texts_in = tf.constant([sources[j] for j in batch.indices], tf.string)
      if target_language:
        result = self._serve_to(sources=texts_in, target_languages=tf.fill(tf.shape(texts_in), target_language))
      else:
        result = self._serve(sources=texts_in)
      texts, scores = result['nbest_translations'].numpy(), result['nbest_scores'].numpy()
      cut = result['truncated'].numpy()
      for r, j in enumerate(batch.indices):
        out[j] = [(texts[r, k].decode('utf-8'), float(scores[r, k])) for k in range(nbest)]
        truncated[j] = bool(cut[r])
      done += len(batch.indices)
      if progress:
        progress(done, len(sources))
    return out, truncated


def FromSavedModel(export_dir: str) -> Translator:
  """An export written by tools/export.py (ExportError, one line, if it is not a whole one)."""
  return _SavedModelTranslator(export_dir)

