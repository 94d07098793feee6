"""Which corpus build a log directory trained on (its DATA_FILE), so that a run is never resumed or compared
on another build: the vocabularies and pairs would differ under the same names."""
import json
import os
from typing import Dict

from lingvo_gshard.utils import files

DATA_FILE = 'data.json'  # the corpus build a run trains on: {'name', 'version', 'fingerprint', 'data_dir'}


def DataIdentity(manifest: Dict, data_dir: str) -> Dict:
  """What DATA_FILE records of a corpus build (its manifest): the fingerprint covers every input and setting."""
  return {'name': manifest.get('name'), 'version': manifest.get('version'),
          'fingerprint': manifest.get('fingerprint'), 'data_dir': files.AbsPath(data_dir)}


def ReadData(logdir: str) -> Dict:
  """The run's DATA_FILE ({} for a run trained before it was written)."""
  path = os.path.join(logdir, DATA_FILE)
  if not files.Exists(path):
    return {}
  try:
    return json.loads(files.ReadText(path))
  except ValueError:
    raise ValueError(f'{path}: not JSON (the corpus build this run trained on is unreadable)') from None


def CheckData(logdir: str, identity: Dict, resuming: bool) -> Dict:
  """Refuses to resume a run on another corpus build than its checkpoints were trained on (its vocabularies
  and pairs differ: the weights would read other pieces); a fresh run may reuse a log directory. Returns the
  recorded build ({} if none)."""
  old = ReadData(logdir)
  if resuming and old and old.get('fingerprint') != identity['fingerprint']:
    raise ValueError(
        f'{os.path.join(logdir, DATA_FILE)}: this run trained on {old.get("name")} {old.get("version")} '
        f'(fingerprint {str(old.get("fingerprint"))[:12]}, {old.get("data_dir")}); {identity["data_dir"]} holds '
        f'{identity["name"]} {identity["version"]} (fingerprint {str(identity["fingerprint"])[:12]}): resume '
        'with that build or train into another --logdir')
  return old
