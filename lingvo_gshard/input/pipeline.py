"""The translation input: a built corpus -> temperature mixture -> SentencePiece -> length filter -> packed,
batched rows in the format of models/transformer_mt.py. What an experiment's Train()/Dev()/Test() configure.

    p = pipeline.MTInput.Params().Set(data_dir='/tmp/gshard_data', batch_rows=32)
    inp = p.Instantiate()
    for batch in inp.Dataset(): ...               # dicts of [batch_rows, L] tensors (packing.FEATURES)
    inp.EffectiveDistribution()                   # {lang: share of the examples drawn}
    inp.Stats()                                   # examples read, dropped as too long (source / target)

Per language: LoadSplit -> shuffle (buffer per language, seeded) -> repeat (training). Then mixture.Mix at
temperature T, windows of `pack_window` examples -> tokenize (one batched SentencePiece call) -> eos -> drop
the too-long (counted) -> pack first-fit or pad one per row -> rows -> batches of `batch_rows` -> prefetch.
Everything is deterministic given `seed` (tf.data's deterministic order is kept through the parallel map).

Batches have static shapes: training repeats forever and batches are full; with repeat=False every example
appears exactly once and the last batch is padded with empty rows (weight 0).
"""
from absl import logging
import tensorflow as tf

from lingvo_gshard.core import domains
from lingvo_gshard.core import hyperparams
from lingvo_gshard.data import corpus
from lingvo_gshard.data import directions
from lingvo_gshard.data import reader
from lingvo_gshard.data import report as report_lib
from lingvo_gshard.input import mixture
from lingvo_gshard.input import packing
from lingvo_gshard.input import tokenizer
from lingvo_gshard.utils import files

# tf.data traces map functions with AutoGraph by default; ours have no Python control flow on tensors (the
# packing loop is an explicit tf.while_loop), and converting them is most of building a pipeline.
_Plain = tf.autograph.experimental.do_not_convert

STATS = ('examples', 'dropped', 'source_too_long', 'target_too_long')


def VocabParams():
  """Where the SentencePiece models live and how they are trained (tokenizer.EnsureVocabularies)."""
  p = hyperparams.Params()
  p.Define('dir', '', "Directory of the models; '' = DATA_DIR/vocab. Train, Dev and Test must agree.")
  p.Define('kind', 'shared', "'shared': one model for sources and targets; 'separate': a source and a "
           'target (English) model.', domains.OneOf('shared', 'separate'))
  p.Define('source_size', 8000, 'Pieces in the source (or shared) model, reserved ids included.',
           domains.Positive(int))
  p.Define('target_size', 8000, 'Pieces in the target model (= source_size when shared).', domains.Positive(int))
  p.Define('languages', [], 'Languages of the text sample (empty = all in the manifest); tags are made '
           'for every language regardless.')
  p.Define('temperature', 5.0, 'T of the temperature-sampled text sample.', domains.Positive())
  p.Define('sample_sentences', 300000, 'Sentences SentencePiece is trained on (per model).', domains.Positive(int))
  p.Define('seed', 1, 'Seed of the text sample.', domains.NonNegative(int))
  p.Define('train_if_missing', True, 'Train a missing model on first use (else it is an error).')
  p.Define('model_path', '', "A SentencePiece .model of your own for the source side (kind 'shared': both "
           "sides) instead of one trained here: laid out with pad, eos, unk and the language tags first "
           '(input/user_vocab.py; segmentation unchanged), its size (after tags added) must be source_size.')
  p.Define('target_model_path', '', "Your own target model (kind 'separate'; needs model_path too).")
  p.Define('model_sha256', '', "sha256 of model_path's file, recorded when a run starts ('': not yet); a "
           'file that changed since is refused.')
  p.Define('target_model_sha256', '', 'The same for target_model_path.')
  return p


def UserModels(vocab, key: str = 'vocab') -> dict:
  """{side: (path, sha256)} of a VocabParams' own models ({} when it trains its own); ValueError naming the
  param (`key`.model_path ...) when they do not fit its kind."""
  if not vocab.model_path and not vocab.target_model_path:
    return {}
  if vocab.kind == 'shared':
    if vocab.target_model_path:
      raise ValueError(f"{key}.target_model_path: a shared vocabulary has one model ({key}.model_path); use "
                       "kind 'separate' for two")
    return {'shared': (vocab.model_path, vocab.model_sha256)}
  if not (vocab.model_path and vocab.target_model_path):
    raise ValueError(f"{key}.model_path and {key}.target_model_path: a 'separate' vocabulary takes both "
                     'models (or neither)')
  return {'source': (vocab.model_path, vocab.model_sha256),
          'target': (vocab.target_model_path, vocab.target_model_sha256)}


def CheckUserVocab(input_params, key: str = 'input') -> None:
  """An input's own SentencePiece models (vocab.model_path ...): that they fit the vocabulary's kind, exist,
  and adopted (user_vocab.Adopt) have the declared sizes; records their files' sha256 in the params. Called
  before a run writes anything (a file changed under a trained run is then refused). Raises ValueError or
  DataError naming the param or the file."""
  from lingvo_gshard.input import user_vocab  # pylint: disable=g-import-not-at-top
  vocab = input_params.vocab
  models = UserModels(vocab, f'{key}.vocab')
  if not models:
    return
  for path, _ in models.values():
    if not files.IsFile(path):
      raise ValueError(f'{key}.vocab: {path}: no such SentencePiece model')
  for path_key, sha_key in (('model_path', 'model_sha256'), ('target_model_path', 'target_model_sha256')):
    if vocab.Get(path_key) and not vocab.Get(sha_key):
      vocab.Set(**{sha_key: user_vocab.Sha256(vocab.Get(path_key))})
  tokenizer.EnsureVocabularies(input_params.data_dir, vocab.dir, vocab.kind, vocab.source_size, vocab.target_size,
                               vocab.languages, log=lambda line: None, user_models=UserModels(vocab),
                               key=f'{key}.vocab')


class MTInput:
  """X -> English translation batches from a built gettext_m4 data directory (see module docstring)."""

  @classmethod
  def Params(cls):
    p = hyperparams.InstantiableParams(cls)
    p.Define('name', 'input', 'Name of this input (for logs).')
    p.Define('data_dir', '', 'A data directory built by lingvo_gshard.tools.prepare_data.')
    p.Define('split', 'train', "'train', 'dev' or 'test'.", domains.Choices(corpus.SPLITS))
    p.Define('languages', [], 'Source languages (manifest tags); empty = all. One language = bilingual.')
    p.Define('temperature', 5.0, 'Mixture temperature T: p_l ∝ n_l^(1/T); 1 = natural proportions.',
             domains.Positive())
    p.Define('max_source_length', 64, 'Examples whose source pieces + eos exceed this are dropped, counted.',
             domains.Positive(int))
    p.Define('max_target_length', 64, 'Examples whose target pieces + eos exceed this are dropped, counted.',
             domains.Positive(int))
    p.Define('packing', True, 'Pack several examples per row; False: one example per row, padded to the '
             'max lengths.')
    p.Define('packed_source_length', 256, 'Ls of packed rows (>= max_source_length).', domains.Positive(int))
    p.Define('packed_target_length', 256, 'Lt of packed rows (>= max_target_length).', domains.Positive(int))
    p.Define('pack_window', 1024, 'Examples packed together (first-fit inside a window).', domains.Positive(int))
    p.Define('batch_rows', 32, 'Rows per batch (static): packed rows or, unpacked, examples; 0: chosen by '
             'the runtime from auto_batch_rows (runtime/hardware.py ResolveAuto) before the input is built.',
             domains.NonNegative(int))
    p.Define('auto_batch_rows', (32, 16), 'batch_rows = 0 only: (rows where bfloat16 matmuls are fast, rows '
             'elsewhere); a float32 step of the same rows is slower, so it takes fewer.',
             domains.Items(domains.Positive(int), length=2))
    p.Define('bucket_tokens', 0, 'Unpacked only: batch by tokens instead of rows. Examples are bucketed by '
             'their longer side into lengths 8, 16, 32, ... up to the max lengths; a bucket of length b '
             'yields batches of bucket_tokens // b rows trimmed to b columns (one static shape per bucket). '
             '0 = fixed batch_rows.', domains.NonNegative(int))
    p.Define('shuffle_buffer', 1000, 'Shuffle buffer per language, in examples; 0 = stored order. The first '
             'batch waits for every buffer to fill: sum over languages of min(buffer, n_l) examples.',
             domains.NonNegative(int))
    p.Define('repeat', True, 'Repeat forever (training). False: each example once, last batch padded.')
    p.Define('seed', 1234, 'Seed of shuffling and of the mixture draws.', domains.NonNegative(int))
    p.Define('vocab', VocabParams(), 'The SentencePiece vocabularies.')
    return p

  def __init__(self, params, log=None):
    self.p = params.Copy().Freeze()
    self._log = log or logging.info
    p = self.p
    if not p.data_dir:
      raise report_lib.DataError(f'{p.name}: data_dir is not set')
    for side in ('source', 'target'):
      packed, longest = p.Get(f'packed_{side}_length'), p.Get(f'max_{side}_length')
      if longest < 1 or (p.packing and packed < longest):
        raise report_lib.DataError(f'{p.name}: need 1 <= max_{side}_length ({longest}) <= '
                                   f'packed_{side}_length ({packed}) when packing')
    if p.split not in corpus.SPLITS:
      raise report_lib.DataError(f'{p.name}: unknown split {p.split!r} (have: {", ".join(corpus.SPLITS)})')
    if p.batch_rows == 0:
      raise report_lib.DataError(f'{p.name}: batch_rows is 0 (the runtime chooses it: resolve the params with '
                                 'runtime.hardware.ResolveAuto before building the input)')
    for name in ('batch_rows', 'pack_window'):
      if p.Get(name) < 1:
        raise report_lib.DataError(f'{p.name}: {name} must be >= 1, got {p.Get(name)}')
    self._manifest = reader.LoadManifest(p.data_dir)
    self._languages = self._SplitLanguages()
    self._vocabs = None
    with tf.init_scope():
      self._stats = {name: tf.Variable(0, dtype=tf.int64, trainable=False, name=name) for name in STATS}

  def _SplitLanguages(self):
    p = self.p
    langs = mixture.CheckLanguages(self._manifest, p.languages, p.data_dir)
    empty = [lang for lang in langs if not self._manifest['languages'][lang][p.split]]
    if empty and p.languages:
      raise report_lib.DataError(f'{p.name}: language {empty[0]!r} has no {p.split} examples in '
                                 f'{p.data_dir}')
    if empty:
      self._log(f'{p.name}: {len(empty)} languages have no {p.split} examples, left out: {", ".join(empty)}')
    langs = [lang for lang in langs if lang not in empty]
    if not langs:
      raise report_lib.DataError(f'{p.name}: no language has {p.split} examples in {p.data_dir}')
    return langs

  @property
  def languages(self):
    return list(self._languages)

  def Vocabularies(self):
    """(source, target) tokenizer.Vocabulary, trained on first use if missing (see VocabParams)."""
    if self._vocabs is None:
      v = self.p.vocab
      self._vocabs = tokenizer.EnsureVocabularies(
          self.p.data_dir, v.dir, v.kind, v.source_size, v.target_size, v.languages, v.temperature,
          v.sample_sentences, v.seed, v.train_if_missing, log=self._log, user_models=UserModels(v))
    return self._vocabs

  def Counts(self):
    """{lang: examples in this split}."""
    return {lang: self._manifest['languages'][lang][self.p.split] for lang in self._languages}

  def EffectiveDistribution(self):
    """{lang: expected share of the examples this input yields}.

    Repeating: the temperature weights. Not repeating: every example once, so the natural shares (the
    weights then only decide the interleaving order).
    """
    counts = self.Counts()
    if self.p.repeat:
      return mixture.TemperatureWeights(counts, self.p.temperature)
    total = sum(counts.values())
    return {lang: n / total for lang, n in counts.items()}

  def Mixture(self):
    """The mixed stream of {'lang', 'source', 'target'} strings, before tokenization."""
    p = self.p
    counts = self.Counts()
    weights = mixture.TemperatureWeights(counts, p.temperature)
    if p.repeat:
      self._log(f'{p.name}: {mixture.Describe(counts, weights, p.temperature)}')
    else:
      self._log(f'{p.name}: {len(counts)} languages, {sum(counts.values())} {p.split} examples, each once')
    datasets = {}
    for i, lang in enumerate(self._languages):
      ds = reader.LoadSplit(p.data_dir, lang, p.split)
      if p.shuffle_buffer:
        ds = ds.shuffle(min(p.shuffle_buffer, counts[lang]), seed=p.seed + 1 + i,
                        reshuffle_each_iteration=True)
      datasets[lang] = ds.repeat() if p.repeat else ds
    return mixture.Mix(datasets, weights, p.seed, stop_on_empty_dataset=p.repeat)

  def Stats(self):
    """Counters of what the pipeline has read so far (prefetched windows included): see STATS."""
    return {name: int(v.numpy()) for name, v in self._stats.items()}

  def _Window(self, window):
    """A window of string examples -> its rows (dict of [R, L] tensors)."""
    p = self.p
    src_vocab, tgt_vocab = self.Vocabularies()
    n = tf.shape(window['source'])[0]
    eos = tf.RaggedTensor.from_tensor(tf.fill([n, 1], tokenizer.EOS_ID))
    src = tf.concat([src_vocab.Tokenize(window['source']), eos], axis=1)
    tgt = tf.concat([tgt_vocab.Tokenize(window['target']), eos], axis=1)
    src_ok = src.row_lengths() <= p.max_source_length
    tgt_ok = tgt.row_lengths() <= p.max_target_length
    keep = src_ok & tgt_ok
    count = lambda mask: tf.reduce_sum(tf.cast(mask, tf.int64))
    updates = [self._stats['examples'].assign_add(tf.cast(n, tf.int64)),
               self._stats['dropped'].assign_add(count(~keep)),
               self._stats['source_too_long'].assign_add(count(~src_ok)),
               self._stats['target_too_long'].assign_add(count(~tgt_ok))]
    with tf.control_dependencies(updates):
      src = tf.ragged.boolean_mask(src, keep)
    tgt = tf.ragged.boolean_mask(tgt, keep)
    tags = self._StartTags(tgt_vocab, tf.boolean_mask(window['lang'], keep))
    if p.packing:
      return packing.Pack(src, tgt, tags, p.packed_source_length, p.packed_target_length)
    return packing.Unpacked(src, tgt, tags, p.max_source_length, p.max_target_length)

  def _StartTags(self, tgt_vocab, keys):
    """[N] decoder start ids of examples of direction `keys` [N]: the tag of each one's target language."""
    targets = [directions.Target(k) for k in self._languages]
    if set(targets) == {tokenizer.TARGET_LANGUAGE}:
      return tf.fill(tf.shape(keys), tgt_vocab.TagId(tokenizer.TARGET_LANGUAGE))
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(self._languages),
                                            tf.constant([tgt_vocab.TagId(t) for t in targets], tf.int32)), -1)
    return table.lookup(keys)

  def RowLengths(self):
    """(Ls, Lt) of the rows this input yields."""
    p = self.p
    if p.packing:
      return p.packed_source_length, p.packed_target_length
    return p.max_source_length, p.max_target_length

  def Dataset(self):
    """The tf.data.Dataset of batches: dicts of [batch_rows, Ls or Lt] tensors (packing.FEATURES)."""
    p = self.p
    self.Vocabularies()  # Trains or checks the models now, outside tf.data's tracing.
    ds = self.Mixture().batch(p.pack_window)
    ds = ds.map(_Plain(self._Window), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if p.bucket_tokens:
      return self._BucketByTokens(ds.unbatch())
    ds = ds.unbatch().batch(p.batch_rows, drop_remainder=p.repeat)
    src_len, tgt_len = self.RowLengths()
    shapes = {name: [p.batch_rows, src_len if name.startswith('src') else tgt_len]
              for name in packing.FEATURES}
    if not p.repeat:
      ds = ds.map(_Plain(lambda batch: packing.PadRows(batch, p.batch_rows)))
    ds = ds.map(_Plain(lambda batch: {k: tf.ensure_shape(v, shapes[k]) for k, v in batch.items()}))
    options = tf.data.Options()
    options.deterministic = True
    # The skip counters (Stats) are variables outside the pipeline: a checkpointed iterator (exact resume)
    # restores the position and buffers, not those diagnostics.
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)

  def BucketLengths(self):
    """Bucket row lengths for bucket_tokens: 8, 16, 32, ... capped at the longer max length."""
    longest = max(self.p.max_source_length, self.p.max_target_length)
    lengths, b = [], 8
    while b < longest:
      lengths.append(b)
      b *= 2
    return lengths + [longest]

  def _BucketByTokens(self, rows):
    """Unpacked rows -> batches of ~bucket_tokens tokens, each trimmed to its bucket's length."""
    p = self.p
    if p.packing:
      raise report_lib.DataError(f'{p.name}: bucket_tokens batches unpacked rows; set packing=False')
    lengths = self.BucketLengths()
    if p.bucket_tokens < lengths[-1]:
      raise report_lib.DataError(f'{p.name}: bucket_tokens={p.bucket_tokens} is less than one row of the '
                                 f'longest bucket ({lengths[-1]} tokens)')
    length_of = lambda row: tf.maximum(tf.reduce_sum(tf.cast(row['src_segment_ids'] > 0, tf.int32)),
                                       tf.reduce_sum(tf.cast(row['tgt_segment_ids'] > 0, tf.int32)))
    batch_sizes = [max(1, p.bucket_tokens // b) for b in lengths]
    ds = rows.bucket_by_sequence_length(
        length_of, bucket_boundaries=[b + 1 for b in lengths[:-1]], bucket_batch_sizes=batch_sizes,
        drop_remainder=p.repeat)

    def Trim(batch):
      # Every row of a batch fits its bucket: trim to the shortest bucket length that holds the batch.
      used = tf.maximum(tf.reduce_max(tf.reduce_sum(tf.cast(batch['src_segment_ids'] > 0, tf.int32), 1)),
                        tf.reduce_max(tf.reduce_sum(tf.cast(batch['tgt_segment_ids'] > 0, tf.int32), 1)))
      width = tf.gather(tf.constant(lengths), tf.argmax(tf.constant(lengths) >= used))
      return {k: v[:, :tf.minimum(width, tf.shape(v)[1])] for k, v in batch.items()}

    options = tf.data.Options()
    options.deterministic = True
    # The skip counters (Stats) are variables outside the pipeline: a checkpointed iterator (exact resume)
    # restores the position and buffers, not those diagnostics.
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    return ds.map(_Plain(Trim)).with_options(options).prefetch(tf.data.AUTOTUNE)
