"""The `gettext_m4` TensorFlow Datasets builder: many languages -> English, one example per sentence pair.

An example is `{'lang': BCP-47 tag of the source, 'source': foreign text, 'target': English text}`, with
splits `train`, `dev` and `test`. The builder does not read inputs itself: `build.py` assembles a
`corpus.Corpus` (from gettext catalogs, TSV files or TFDS datasets) and hands it to the builder, because
what goes into the corpus is decided by flags no TFDS config can carry. Once built, the data loads offline:

    from lingvo_gshard.data import gettext_m4
    gettext_m4.Register()
    ds = tfds.load('gettext_m4', split='train', data_dir=DATA_DIR)

Examples are written in order (TFDS shuffling disabled): languages largest first, and within a language by
the hash of the English side. A language is therefore a contiguous slice of each split, whose bounds the
manifest records, so one language's data reads as `split='train[a:b]'` without scanning the rest
(`reader.LoadSplit`). Shuffle in the input pipeline.
"""
import contextlib
import os
from typing import Optional

from etils import epath
import tensorflow_datasets as tfds
from tensorflow_datasets.core import shuffle as tfds_shuffle

from lingvo_gshard.data import corpus as corpus_lib
from lingvo_gshard.data import report as report_lib
from lingvo_gshard.data import tfds_scratch

NAME = 'gettext_m4'
DATASET_VERSION = '1.1.0'


class GettextM4(tfds.core.GeneratorBasedBuilder):
  """Multilingual X->English sentence pairs (TFDS name `gettext_m4`)."""

  VERSION = tfds.core.Version(DATASET_VERSION)
  RELEASE_NOTES = {
      '1.0.0': 'Gettext catalogs (and optional TSV/TFDS inputs), English-hash dev/test splits.',
      '1.1.0': 'Training pairs stored in a per-language order (the same pairs; 1.0.0 stored them in the '
               'English-hash order shared by every language).'}

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls):
    # TFDS finds a builder's file through the top-level package's resources, which for this package
    # (installed from several mapped folders) needs the optional `importlib_resources` module; the file
    # is simply this one.
    return epath.Path(os.path.abspath(__file__))

  def __init__(self, *, corpus=None, **kwargs):
    """Constructor.

    Args:
      corpus: the corpus.Corpus to write; needed only to build, not to load an already-built data dir.
      **kwargs: passed to tfds.core.GeneratorBasedBuilder (data_dir, ...).
    """
    self._corpus = corpus
    # Before its data dir is prepared, TFDS builds this builder's DatasetInfo in a temp dir it never
    # removes; constructing inside a scratch temp dir covers tfds.builder and tfds.load callers too.
    with tfds_scratch.Scratch():
      super().__init__(**kwargs)

  def _info(self):
    text = tfds.features.Text()
    return tfds.core.DatasetInfo(
        builder=self,
        description=('Sentence pairs from many languages into English. Default inputs: the gettext '
                     'translation catalogs of a Debian system.'),
        features=tfds.features.FeaturesDict({'lang': text, 'source': text, 'target': text}),
        supervised_keys=('source', 'target'),
        disable_shuffling=True,
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Everything is local and already assembled.
    if self._corpus is None:
      raise report_lib.DataError(
          f'{NAME}: no prepared data in {self.data_dir}; build it with '
          f'`python -m lingvo_gshard.tools.prepare_data --data_dir=...`')
    # TFDS cannot write an empty split (e.g. --max_dev=0, or a tiny corpus), so such a split is absent
    # from the dataset, and the manifest says 0 for it.
    return {name: self._generate_examples(name) for name in corpus_lib.SPLITS
            if any(lang.splits[name] for lang in self._corpus.languages.values())}

  def _generate_examples(self, split):
    # Integer keys in writing order: with shuffling disabled TFDS stores examples sorted by key. They are
    # spread over TFDS's 128-bit key space because its writer sorts each of its 1,000 on-disk buckets in
    # memory, a bucket being a 1/1000 range of that space: keys 0, 1, 2, ... would all fall in bucket 0.
    total = sum(len(language.splits[split]) for language in self._corpus.languages.values())
    stride = _KEY_SPACE // max(total, 1)
    index = 0
    for tag, language in self._corpus.languages.items():
      for source, target in language.splits[split]:
        yield index * stride, {'lang': tag, 'source': source, 'target': target}
        index += 1


_KEY_SPACE = 2 ** 128  # TFDS's shuffle.HKEY_SIZE bits
# TFDS's writer keeps a split's serialized examples in memory up to 1 GB before it moves them to its on-disk
# buckets; a build that must not grow with the dataset moves them at this size instead.
WRITER_MEMORY_BYTES = 64 << 20


@contextlib.contextmanager
def BoundedWriterMemory(limit: Optional[int] = None):
  """While in the block, TFDS's writer holds at most `limit` bytes (default WRITER_MEMORY_BYTES) of examples
  in memory; with the keys above a split's writing then takes about that plus 1/1000 of the split at once.
  TFDS has no option for this, only the module constant `shuffle.MAX_MEM_BUFFER_SIZE`; with a TFDS version
  that lacks it, the block runs with TFDS's own limit."""
  if not hasattr(tfds_shuffle, 'MAX_MEM_BUFFER_SIZE'):
    yield
    return
  before = tfds_shuffle.MAX_MEM_BUFFER_SIZE
  tfds_shuffle.MAX_MEM_BUFFER_SIZE = min(before, WRITER_MEMORY_BYTES if limit is None else limit)
  try:
    yield
  finally:
    tfds_shuffle.MAX_MEM_BUFFER_SIZE = before


def Register():
  """Makes `tfds.load('gettext_m4', ...)` and `tfds.builder('gettext_m4')` find this builder.

  TFDS registers a builder class when its module is imported; importing this module is all it takes, and
  this function exists so that callers say so explicitly instead of importing for a side effect.
  """
  return GettextM4
