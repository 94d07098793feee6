"""SentencePiece vocabularies: trained on a temperature-sampled text sample, used inside tf.data.

    vocab = tokenizer.Vocabulary.Load('/data/vocab/spm_shared_8000.model')
    ids = vocab.Tokenize(tf.constant(['Hallo Welt']))      # tf.RaggedTensor [N, None] int32, no eos
    vocab.TagId('en')                                      # the decoder start symbol <2en>
    vocab.Decode([523, 87, 1, 0, 0])                       # 'hello world': cut at eos, tags dropped

Reserved ids (every model trained here): 0 = <pad>, 1 = </s> (eos), 2 = <unk>, no bos; then one
user-defined piece `<2xx>` per language tag (`<2en>` first, then the corpus' languages, largest first), so
many-to-many translation can pick any target language with the same vocabulary; then 256 byte pieces
(byte fallback: a character outside the vocabulary becomes its UTF-8 bytes instead of <unk>, which matters
for scripts with thousands of rare characters); then the learned pieces.

Why temperature sampling for the text sample: with the corpus' natural proportions (56k French pairs, 1k
Luganda pairs) the unigram model would spend almost no pieces on the small languages' scripts. Sampling
language l with p_l ∝ n_l^(1/T) gives them a share close to uniform (see mixture.py).

Text is normalised by SentencePiece's `nmt_nfkc` rule (NFKC, whitespace runs collapsed, edges stripped), so
Decode(Encode(x)) == Normalize(x), not x.
"""
import hashlib
import io
import json
import os
import time

import numpy as np
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as sp_model_pb2
import tensorflow as tf
import tensorflow_text as tf_text

from lingvo_gshard.data import directions
from lingvo_gshard.data import reader
from lingvo_gshard.data import report as report_lib
from lingvo_gshard.input import mixture
from lingvo_gshard.utils import files

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
TARGET_LANGUAGE = 'en'  # The default target: a corpus key without one is X -> English (data/directions.py).
KINDS = ('shared', 'source', 'target')


def TagPiece(lang):
  """The piece that tells the decoder which language to produce: '<2en>', '<2pt-BR>'."""
  return f'<2{lang}>'


class Vocabulary:
  """One SentencePiece model: Python encode/decode and a tf.data tokenizer built from the same bytes."""

  def __init__(self, model_bytes, path='<memory>'):
    self.path = path
    self.model_bytes = model_bytes
    try:
      self._sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    except (RuntimeError, ValueError) as e:  # a truncated or foreign file: SentencePiece cannot parse it
      raise report_lib.DataError(f'{path}: not a readable SentencePiece model ({len(model_bytes)} bytes; '
                                 f'{(str(e).splitlines() or [""])[0][:120]}); restore it or delete it to '
                                 'retrain it') from None
    if (self._sp.pad_id(), self._sp.eos_id()) != (PAD_ID, EOS_ID):
      raise report_lib.DataError(f'{path}: pad/eos ids are {self._sp.pad_id()}/{self._sp.eos_id()}, this '
                                 f'pipeline needs {PAD_ID}/{EOS_ID} (train it with TrainModel)')
    # Named by the model's digest: the SentencePiece op's resource is shared by node name when a SavedModel is
    # loaded, so two models under one default name would both read the first (a source model detokenizing
    # target ids).
    self._tf = tf_text.SentencepieceTokenizer(
        model=model_bytes, out_type=tf.int32,
        name=f'sentencepiece_{hashlib.sha256(model_bytes).hexdigest()[:16]}')
    # Ids below this are pad, eos, unk and the language tags: never part of a decoded sentence.
    pieces = sp_model_pb2.ModelProto.FromString(model_bytes).pieces
    self.num_reserved = 3
    while (self.num_reserved < len(pieces) and
           pieces[self.num_reserved].type == sp_model_pb2.ModelProto.SentencePiece.USER_DEFINED):
      self.num_reserved += 1

  @classmethod
  def Load(cls, path):
    try:
      return cls(files.ReadBytes(path), path)
    except OSError as e:
      raise report_lib.DataError(f'{path}: cannot read the SentencePiece model: {e.strerror or e}') from None

  @property
  def tf_tokenizer(self):
    """The TensorFlow Text tokenizer of this model (a tf.Module: a SavedModel that holds it keeps the model)."""
    return self._tf

  @property
  def size(self):
    return self._sp.GetPieceSize()

  @property
  def tags(self):
    """Languages that have a tag piece, in id order."""
    return [self._sp.IdToPiece(i)[2:-1] for i in range(3, self.num_reserved)]

  def TagId(self, lang):
    """Id of `<2lang>`; DataError naming the model if it has no such tag."""
    piece = TagPiece(lang)
    i = self._sp.PieceToId(piece)
    if not 3 <= i < self.num_reserved or self._sp.IdToPiece(i) != piece:
      raise report_lib.DataError(f'{self.path}: no tag piece {piece} for language {lang!r}')
    return i

  def Normalize(self, text):
    """The text as Decode(Encode(text)) gives it back (SentencePiece marks spaces with U+2581)."""
    return self._sp.Normalize(text).replace('\u2581', ' ').strip(' ')

  def Encode(self, text):
    """Pieces of one string as a list of ids (no eos)."""
    return self._sp.EncodeAsIds(text)

  def Decode(self, ids):
    """The text of a sequence of ids: up to the first eos; pad and tag ids are dropped."""
    ids = [int(i) for i in ids]
    if EOS_ID in ids:
      ids = ids[:ids.index(EOS_ID)]
    return self._sp.DecodeIds([i for i in ids if i == UNK_ID or i >= self.num_reserved])

  def Tokenize(self, strings):
    """tf.string [N] -> tf.RaggedTensor [N, None] of int32 piece ids (no eos). Usable in tf.data."""
    return self._tf.tokenize(strings)

  def Detokenize(self, ids):
    """int [B, L] (dense, or ragged) -> tf.string [B]; in-graph version of Decode."""
    if not isinstance(ids, tf.RaggedTensor):
      ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids, tf.int32))
    ids = tf.cast(ids, tf.int32)
    # Keep what precedes the first eos of each row, then drop pad and tags.
    before_eos = tf.math.cumsum(tf.cast(ids == EOS_ID, tf.int32), axis=1) == 0
    keep = before_eos & ((ids == UNK_ID) | (ids >= self.num_reserved))
    return self._tf.detokenize(tf.ragged.boolean_mask(ids, keep))


def SamplePairs(data_dir, languages, num_pairs, temperature, seed, log=print):
  """A temperature-sampled list of training (source, target) pairs.

  Language l gets round(num_pairs * p_l) pairs with p_l ∝ n_l^(1/T): a random subset of its training pairs
  when that is fewer than it has; otherwise every pair once or more, each repeated floor or ceil times
  (upsampling, as the training mixture does). Deterministic given the seed.
  """
  manifest = reader.LoadManifest(data_dir)
  languages = mixture.CheckLanguages(manifest, languages, data_dir)
  counts = {lang: manifest['languages'][lang]['train'] for lang in languages}
  weights = mixture.TemperatureWeights(counts, temperature)
  quotas = mixture.Apportion(weights, num_pairs)
  rng = np.random.default_rng(seed)
  pairs = []
  start, reported = time.time(), time.time()
  for k, lang in enumerate(languages, 1):
    sources, targets = [], []
    for batch in reader.LoadSplit(data_dir, lang, 'train').batch(4096).as_numpy_iterator():
      sources += list(batch['source'])
      targets += list(batch['target'])
    order = rng.permutation(len(sources))
    picks = np.resize(order, quotas[lang])  # Cycles through the permutation: floor or ceil copies each.
    # Only the picked pairs are decoded (bytes -> str is most of the cost of reading a large language).
    pairs += [(sources[i].decode('utf-8'), targets[i].decode('utf-8')) for i in picks]
    if time.time() - reported > 10 or k == len(languages):
      reported = time.time()
      log(f'vocabulary sample: {k}/{len(languages)} languages read, {len(pairs)} pairs '
          f'({time.time() - start:.0f}s)')
  log(f'vocabulary sample: {len(pairs)} pairs from {len(languages)} languages at T={temperature:g}')
  return pairs


def TrainModel(sentences, vocab_size, tags, model_type='unigram', character_coverage=0.9995,
               byte_fallback=True, num_threads=2):
  """Trains a SentencePiece model in-process and returns its serialized bytes.

  Args:
    sentences: list of str, all used (SentencePiece's own sampling is off, so the model depends only on
      this list: sample with SamplePairs for a seeded, temperature-balanced one).
    vocab_size: pieces in the model, including the reserved ones.
    tags: language tags; `<2tag>` becomes a user-defined piece (ids 3, 4, ... in this order).
    model_type: 'unigram' or 'bpe'.
    character_coverage: fraction of characters covered by pieces (the rest go to bytes or <unk>).
    byte_fallback: unknown characters become UTF-8 byte pieces (256 ids) instead of <unk>.
    num_threads: trainer threads.
  """
  model = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size,
        model_type=model_type, character_coverage=character_coverage, byte_fallback=byte_fallback,
        pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
        user_defined_symbols=[TagPiece(t) for t in tags], input_sentence_size=0,
        shuffle_input_sentence=False, num_threads=num_threads, hard_vocab_limit=True, minloglevel=2)
  except RuntimeError as e:
    raise report_lib.DataError(f'SentencePiece training failed: {str(e).splitlines()[0]}') from None
  return model.getvalue()


def ModelPath(vocab_dir, kind, vocab_size):
  return os.path.join(vocab_dir, f'spm_{kind}_{vocab_size}.model')


def _Settings(kind, vocab_size, languages, temperature, sample_sentences, seed, fingerprint):
  """What a trained model depends on; stored next to it and compared on load."""
  return {'kind': kind, 'vocab_size': vocab_size, 'languages': list(languages), 'temperature': temperature,
          'sample_sentences': sample_sentences, 'seed': seed, 'data_fingerprint': fingerprint}



def EnsureVocabularies(data_dir, vocab_dir, kind, source_size, target_size, languages=(), temperature=5.0,
                       sample_sentences=300000, seed=1, train_if_missing=True, log=print, user_models=None,
                       key='vocab'):
  """Loads (training them first if missing) the source and target vocabularies of an experiment.

  Args:
    data_dir: a built data directory (its manifest names the languages and fingerprints the corpus).
    vocab_dir: where the models live ('' = DATA_DIR/vocab; a URL such as gs://... works: utils/files.py). A
      model is `spm_<kind>_<size>.model` with a `.json` of the settings it was trained with; a request with
      other settings is an error, not a silent retrain, since checkpoints depend on the vocabulary.
    kind: 'shared' (one model for both sides, trained on sources and targets) or 'separate' (a source model
      on the sources, a target model on the English targets).
    source_size: vocabulary size of the source (or shared) model.
    target_size: vocabulary size of the target model (must equal source_size when shared).
    languages: languages of the text sample (empty = all in the manifest). Tags cover all of them anyway.
    temperature: T of the text sample.
    sample_sentences: sentences given to SentencePiece (per model).
    seed: of the text sample.
    train_if_missing: train a missing model (else DataError).
    log: callable taking one progress line.
    user_models: {'shared' or 'source'/'target': (path, expected sha256 or '')}: the user's own SentencePiece
      models instead of trained ones (user_vocab.Adopt lays them out; no settings or fingerprint check, but a
      file whose sha256 differs from the expected one is refused).
    key: how errors name these params ('input.train.vocab').

  Returns:
    (source Vocabulary, target Vocabulary); the same object twice when shared.
  """
  if kind not in ('shared', 'separate'):
    raise report_lib.DataError(f"vocabulary kind must be 'shared' or 'separate', got {kind!r}")
  if kind == 'shared' and source_size != target_size:
    raise report_lib.DataError(f'a shared vocabulary has one size, got source {source_size} and target '
                               f'{target_size}')
  manifest = reader.LoadManifest(data_dir)
  languages = mixture.CheckLanguages(manifest, languages, data_dir)
  tags = directions.Languages(manifest['languages'])  # English first, then every language of a direction
  if user_models:
    return _UserVocabularies(kind, {'shared': source_size} if kind == 'shared' else
                             {'source': source_size, 'target': target_size}, user_models, tags, log, key)
  vocab_dir = vocab_dir or os.path.join(data_dir, 'vocab')
  wanted = {'shared': source_size} if kind == 'shared' else {'source': source_size, 'target': target_size}
  models, pairs = {}, None
  for side, size in wanted.items():
    path = ModelPath(vocab_dir, side, size)
    settings = _Settings(side, size, languages, temperature, sample_sentences, seed, manifest['fingerprint'])
    if files.Exists(path):
      stored = _CheckSettings(path, settings)
      models[side] = Vocabulary.Load(path)
      _CheckDigest(models[side], stored)
      continue
    if not train_if_missing:
      raise report_lib.DataError(f'{path}: no such vocabulary (and training it here is switched off)')
    if pairs is None:
      start = time.time()
      pairs = SamplePairs(data_dir, languages, sample_sentences if kind == 'separate' else
                          (sample_sentences + 1) // 2, temperature, seed, log)
      sample_seconds = time.time() - start
    text = {'shared': [x for pair in pairs for x in pair][:sample_sentences],
            'source': [s for s, _ in pairs], 'target': [t for _, t in pairs]}[side]
    start = time.time()
    log(f'training SentencePiece {side} model: {size} pieces on {len(text)} sentences '
        f'(all cores; the model is saved, and later runs load it)...')
    threads = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else (os.cpu_count() or 2)
    model = TrainModel(text, size, tags, num_threads=threads)
    train_seconds = time.time() - start
    log(f'trained {path}: {size} pieces on {len(text)} sentences in {train_seconds:.1f}s '
        f'(sampling took {sample_seconds:.1f}s)')
    files.MakeDirs(vocab_dir)
    files.WriteBytes(path + '.json', json.dumps(dict(
        settings, tags=tags, sentences=len(text), train_seconds=round(train_seconds, 2), num_threads=threads,
        sample_seconds=round(sample_seconds, 2), sentencepiece=spm.__version__,
        model_sha256=hashlib.sha256(model).hexdigest()), indent=1).encode('utf-8'))
    files.WriteBytes(path, model)  # Last: a model without its settings file is never left behind.
    models[side] = Vocabulary(model, path)
  if kind == 'shared':
    return models['shared'], models['shared']
  return models['source'], models['target']


def _UserVocabularies(kind, sizes, user_models, tags, log, key):
  from lingvo_gshard.input import user_vocab  # pylint: disable=g-import-not-at-top
  models = {}
  for side, size in sizes.items():
    path, want = user_models[side]
    if want and user_vocab.Sha256(path) != want:
      raise report_lib.DataError(f'{path}: changed since the run recorded it (its sha256 is not the params\' '
                                 f'{want[:12]}...); restore the file the run trained with')
    model, record = user_vocab.Adopt(path, tags, log)
    if record['pieces'] != size:
      param = f"{key}.{'target_size' if side == 'target' else 'source_size'}"
      added = ((record['tags_added'], 'language tags'), (int(record['pad_added']), 'pad'))
      extra = ''.join(f' + {n} {what}' for n, what in added if n)
      own = record['pieces'] - sum(n for n, _ in added)
      raise report_lib.DataError(f'{path}: {record["pieces"]} pieces as adopted ({own}{extra}), but '
                                 f'{param} is {size}: set {param} (and the model\'s vocabulary size) '
                                 f'to {record["pieces"]}')
    models[side] = Vocabulary(model, path)
  if kind == 'shared':
    return models['shared'], models['shared']
  return models['source'], models['target']


def _CheckSettings(path, settings):
  try:
    stored = json.loads(files.ReadText(path + '.json'))
  except (OSError, ValueError):
    raise report_lib.DataError(f'{path}.json: missing or unreadable; cannot tell how {path} was trained '
                               f'(delete the model to retrain it)') from None
  for key, value in settings.items():
    if stored.get(key) != value:
      raise report_lib.DataError(f'{path}: trained with {key}={stored.get(key)!r}, requested {value!r} '
                                 f'(use another vocab dir, or delete the model to retrain it)')
  return stored


def _CheckDigest(vocab: 'Vocabulary', stored: dict):
  """The model is the one its settings file was written for (models trained before digests were kept pass)."""
  want = stored.get('model_sha256')
  if want and hashlib.sha256(vocab.model_bytes).hexdigest() != want:
    raise report_lib.DataError(f'{vocab.path}: changed since it was trained (its sha256 differs from the one '
                               f'in {os.path.basename(vocab.path)}.json); restore it or delete both to retrain')
