"""A scratch directory for what TFDS writes to the system's temp dir and does not remove.

TFDS (4.9) builds a `DatasetInfo` for a dataset that is not prepared yet from the GCS metadata bucket, into
`tempfile.mkdtemp('tfds')`, and never removes that directory (`DatasetInfo.initialize_from_bucket`). Every
corpus build constructs such a builder, and so does `tfds.load` of a dataset to download, so each left an
empty `/tmp/tmp*tfds` behind. Inside `Scratch()` Python's temp dir is a directory removed on exit;
the `gettext_m4` builder constructs itself inside one, so `tfds.builder`/`tfds.load` of it need no wrap.
"""
import contextlib
import tempfile


@contextlib.contextmanager
def Scratch():
  """Python's temp dir is a fresh directory for the duration, removed with what was put in it."""
  with tempfile.TemporaryDirectory(prefix='gshard_tfds_') as scratch:
    saved = tempfile.tempdir
    tempfile.tempdir = scratch
    try:
      yield scratch
    finally:
      tempfile.tempdir = saved
