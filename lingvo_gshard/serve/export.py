"""A trained run as a SavedModel that translates: strings in, translations and scores out, no Python at serving.

    python -m lingvo_gshard.tools.export --model=M4TinyMoEDemo --logdir=/tmp/m4tiny_moe_demo --export_dir=/tmp/x

The `serving_default` signature takes `sources` (tf.string [N]) and returns `translations` (tf.string [N]),
`scores` (float32 [N], beam search's length-normalised log-probability), `nbest_translations` and
`nbest_scores` ([N, K], best first) and `truncated` (bool [N], sources cut to the model's longest).
Both SentencePiece models run in the graph (TensorFlow Text's SentencepieceOp), and so does the beam search:
the request is padded into the evaluator's static shapes (batching.py: the smallest length bucket that holds
its longest source, rows of batch_tokens // length, more batches if it has more sentences), each decoded by an
XLA-compiled beam search. A client that sends the batches `batching.Batches` makes (gshard_translate does)
gets exactly the evaluator's translations.

Beside the graph, `assets.extra/` (which model servers ignore) holds what the export is: METADATA_FILE (the
experiment, checkpoint and step, decoding settings, corpus identity, code commit, SentencePiece checksums),
the run's params.txt and the source SentencePiece model (what a client batches by).
"""
import functools
import hashlib
import json
import os
import time
from typing import Callable, Dict

import tensorflow as tf

from lingvo_gshard.data import directions
from lingvo_gshard.data import reader
from lingvo_gshard.eval import batching
from lingvo_gshard.eval import evaluator as evaluator_lib
from lingvo_gshard.input import tokenizer
from lingvo_gshard.models import decoding
from lingvo_gshard.train import corpus_identity
from lingvo_gshard.utils import files
from lingvo_gshard.utils import provenance

EXTRA = 'assets.extra'
METADATA_FILE = 'lingvo_gshard.json'
SOURCE_SPM = 'source.spm.model'
PARAMS_COPY = 'params.txt'
FORMAT_VERSION = 1


class ExportError(ValueError):
  """An export that cannot be written or read: the message is one line naming the directory or file."""


class ServingModule(tf.Module):
  """The restored model, its tokenizers and its beam search, behind one string-in, string-out function."""

  def __init__(self, evaluator):
    super().__init__(name='lingvo_gshard_translator')
    ev = evaluator
    self._weights = [var for _, var, _ in ev.model.IterVariablesWithSpecs()]  # tracked: saved with the graph
    self._src_tokenizer, self._tgt_tokenizer = ev.src_vocab.tf_tokenizer, ev.tgt_vocab.tf_tokenizer
    self._detokenize = ev.tgt_vocab.Detokenize
    self._max_src_len, self._beam = ev.max_src_len, ev.beam_size
    self._start = tf.constant(ev.default_start, tf.int32)  # into English, the default direction
    # Language -> its tag's id, for translate_to; -1 for a language the model has no tag for.
    self._targets = list(ev.tgt_vocab.tags)
    self._tag_ids = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant(self._targets), tf.constant([ev.tgt_vocab.TagId(t) for t in self._targets], tf.int32)), -1)
    self._buckets = batching.Buckets(ev.max_src_len)
    self._rows = {b: batching.RowsOf(b, ev.batch_tokens) for b in self._buckets}
    # The evaluator's own XLA-compiled beam search per bucket (one compiled program per static shape), held
    # in a closure: the graph of Translate calls them, the module need not save them as functions of its own.
    decoders = {b: ev._Compiled(b) for b in self._buckets}  # pylint: disable=protected-access
    self._decoder = lambda length: decoders[length]

  def _DecodeBucket(self, sources: tf.RaggedTensor, starts, length: int):
    """sources [N, (<= length)], starts [N] (decoder start ids) -> (ids [N, K, T], scores [N, K]), in batches
    of the bucket's static shape."""
    rows = self._rows[length]
    ids = sources.to_tensor(default_value=0, shape=[None, length])
    n = tf.shape(ids)[0]
    batches = (n + rows - 1) // rows
    ids = tf.reshape(tf.pad(ids, [[0, batches * rows - n], [0, 0]]), [batches, rows, length])
    segment = tf.cast(ids != 0, tf.int32)
    positions = tf.where(segment != 0, tf.range(length, dtype=tf.int32)[None, None], 0)
    starts = tf.reshape(tf.pad(starts, [[0, batches * rows - n]], constant_values=self._start), [batches, rows])
    out, scores = tf.map_fn(lambda x: self._decoder(length)(*x), (ids, segment, positions, starts),
                            fn_output_signature=(tf.int32, tf.float32))
    k, t = tf.shape(out)[2], tf.shape(out)[3]
    return tf.reshape(out, [-1, k, t])[:n], tf.reshape(scores, [-1, k])[:n]

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name='sources')], autograph=False)
  def Translate(self, sources):
    """serving_default: into English."""
    return self._Translate(sources, tf.fill(tf.shape(sources), self._start))

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name='sources'),
                                tf.TensorSpec([None], tf.string, name='target_languages')], autograph=False)
  def TranslateTo(self, sources, target_languages):
    """translate_to: each source into its target language ('fr', 'zh-CN'); one the model has no tag for
    fails the call with InvalidArgument naming it."""
    starts = self._tag_ids.lookup(target_languages)
    unknown = tf.boolean_mask(target_languages, starts < 0)
    check = tf.debugging.Assert(tf.size(unknown) == 0, ['target language without a tag in the model:', unknown,
                                                        'known:', tf.constant(self._targets)])
    with tf.control_dependencies([check]):
      return self._Translate(sources, tf.identity(starts))

  def _Translate(self, sources, starts):
    pieces = self._src_tokenizer.tokenize(sources)
    truncated = pieces.row_lengths() + 1 > self._max_src_len
    pieces = pieces[:, :self._max_src_len - 1]
    eos = tf.RaggedTensor.from_tensor(tf.fill([tf.shape(sources)[0], 1], tokenizer.EOS_ID))
    pieces = tf.concat([tf.cast(pieces, tf.int32), eos], axis=1)
    longest = tf.reduce_max(tf.concat([pieces.row_lengths(), [1]], 0))
    bucket = tf.reduce_sum(tf.cast(tf.constant(self._buckets, tf.int64) < longest, tf.int32))
    ids, scores = tf.switch_case(bucket, [functools.partial(self._DecodeBucket, pieces, starts, b)
                                          for b in self._buckets])
    k = self._beam
    texts = tf.reshape(self._detokenize(tf.reshape(ids, [-1, tf.shape(ids)[2]])), [-1, k])
    return {'translations': texts[:, 0], 'scores': scores[:, 0], 'nbest_translations': texts,
            'nbest_scores': scores, 'truncated': truncated}


def Metadata(evaluator, exp_name: str) -> Dict:
  """What METADATA_FILE says of an export."""
  ev = evaluator
  return {
      'format_version': FORMAT_VERSION, 'experiment': exp_name, 'checkpoint': os.path.basename(ev.checkpoint),
      'step': evaluator_lib.CheckpointStep(ev.checkpoint), 'logdir': ev.logdir, 'beam_size': ev.beam_size,
      'length_alpha': ev.length_alpha, 'no_repeat_ngram': ev.no_repeat_ngram, 'batch_tokens': ev.batch_tokens,
      'max_source_length': ev.max_src_len, 'max_target_length': ev.max_tgt_len,
      'buckets': batching.Buckets(ev.max_src_len), 'target_language': tokenizer.TARGET_LANGUAGE,
      'target_languages': directions.Targets(reader.LoadManifest(ev.data_dir)['languages']),
      'corpus': corpus_identity.ReadData(ev.logdir), 'code_commit': provenance.CodeCommit(),
      'source_languages': list(dict.fromkeys(
          directions.Source(k) for k in reader.LoadManifest(ev.data_dir)['languages'])),
      'source_spm_sha256': hashlib.sha256(ev.src_vocab.model_bytes).hexdigest(),
      'target_spm_sha256': hashlib.sha256(ev.tgt_vocab.model_bytes).hexdigest(),
      'exported_at': time.strftime('%Y-%m-%dT%H:%M:%S'),
  }


def CheckTarget(export_dir: str, overwrite: bool) -> None:
  """Refuses (ExportError) an export directory that holds anything, unless `overwrite`; checked before the
  model is restored, so a refusal costs nothing."""
  if files.Exists(export_dir):
    if not files.IsDir(export_dir):
      raise ExportError(f'--export_dir={export_dir}: a file, not a directory')
    if files.ListDir(export_dir) and not overwrite:
      raise ExportError(f'--export_dir={export_dir}: not empty; pass --overwrite to replace what is there')


def Export(evaluator, exp_name: str, export_dir: str, overwrite: bool = False,
           log: Callable[[str], None] = print) -> Dict:
  """Writes the SavedModel of `evaluator`'s restored model into `export_dir` (a local path, gs://, ram://:
  utils/files.py); returns its metadata. Written beside the target, then moved into place, so a failed export
  leaves any earlier one whole (on object stores the move is a copy, file by file: see
  docs/guides/serving.md)."""
  CheckTarget(export_dir, overwrite)
  start = time.time()
  module = ServingModule(evaluator)
  staging = f'{export_dir.rstrip("/")}.partial-{os.getpid()}'
  if files.Exists(staging):
    files.RemoveTree(staging)
  try:
    tf.saved_model.save(module, staging, signatures={'serving_default': module.Translate,
                                                     'translate_to': module.TranslateTo})
    extra = os.path.join(staging, EXTRA)
    files.MakeDirs(extra)
    metadata = Metadata(evaluator, exp_name)
    with tf.io.gfile.GFile(os.path.join(extra, SOURCE_SPM), 'wb') as f:
      f.write(evaluator.src_vocab.model_bytes)
    params = os.path.join(evaluator.logdir, PARAMS_COPY)
    if files.Exists(params):
      files.Copy(params, os.path.join(extra, PARAMS_COPY))
    metadata['export_seconds'] = round(time.time() - start, 1)
    with tf.io.gfile.GFile(os.path.join(extra, METADATA_FILE), 'w') as f:
      f.write(json.dumps(metadata, indent=1, ensure_ascii=False) + '\n')
    if files.Exists(export_dir):
      files.RemoveTree(export_dir)
    files.Rename(staging, export_dir)
  except (tf.errors.OpError, OSError) as e:
    raise ExportError(f'--export_dir={export_dir}: cannot write the export ({_Brief(e)})') from None
  finally:
    if files.Exists(staging):
      files.RemoveTree(staging)
  metadata['bytes'] = DirectoryBytes(export_dir)
  log(f'exported {metadata["checkpoint"]} of {exp_name} to {export_dir} in {time.time() - start:.0f}s '
      f'({metadata["bytes"] / 1e6:.1f} MB)')
  return metadata


def DirectoryBytes(path: str) -> int:
  return sum(files.Size(os.path.join(d, f)) for d, _, fs in files.Walk(path) for f in fs)


def _Brief(e: Exception) -> str:
  return (str(e).splitlines() or [type(e).__name__])[0][:200]


def ReadMetadata(export_dir: str) -> Dict:
  """The METADATA_FILE of an export, checked: ExportError naming what is missing or unreadable, so a corrupt or
  incomplete export is refused in one line before TensorFlow tries to load it."""
  if not files.IsDir(export_dir):
    raise ExportError(f'--saved_model={export_dir}: no such directory')
  for needed in ('saved_model.pb', 'variables', os.path.join(EXTRA, METADATA_FILE), os.path.join(EXTRA, SOURCE_SPM)):
    if not files.Exists(os.path.join(export_dir, needed)):
      raise ExportError(f'--saved_model={export_dir}: incomplete export, no {needed} (export it again with '
                        'python -m lingvo_gshard.tools.export)')
  path = os.path.join(export_dir, EXTRA, METADATA_FILE)
  try:
    with tf.io.gfile.GFile(path, 'rb') as f:
      metadata = json.loads(f.read().decode('utf-8'))
  except (ValueError, tf.errors.OpError) as e:
    raise ExportError(f'{path}: unreadable ({_Brief(e)})') from None
  if not isinstance(metadata, dict) or metadata.get('format_version') != FORMAT_VERSION:
    raise ExportError(f'{path}: not a lingvo_gshard export of format {FORMAT_VERSION}')
  return metadata
