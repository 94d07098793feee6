"""Default locations: where a corpus is built and read when nobody names a directory."""
import os

# Where the README's prepare_data command builds the embedded corpus, unless $LINGVO_GSHARD_DATA_DIR says
# otherwise (as TFDS_DATA_DIR does for TFDS).
DATA_DIR_ENV = 'LINGVO_GSHARD_DATA_DIR'
DEFAULT_DATA_DIR = '/tmp/gshard_data'


def DefaultDataDir() -> str:
  """$LINGVO_GSHARD_DATA_DIR if set, else /tmp/gshard_data; read when it is needed, not at import."""
  return os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR
