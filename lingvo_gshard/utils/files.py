"""Atomic writes and JSON-lines reads, written once for every module that keeps state in files.

A write goes to a temporary file next to the target and is renamed over it, so a reader or a kill sees the
old file or the new one, never half of one; the temporary file is removed if the write fails (a full disk, a
permission change), leaving the old file as it was.
"""
import json
import os
import tempfile
from typing import Any, Dict, List


def WriteBytes(path: str, data: bytes, mode: int = 0o644):
  """Writes `data` to `path` atomically (creating its directory); the file gets permissions `mode`."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix='.' + os.path.basename(path) + '.')
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.chmod(tmp, mode)  # mkstemp makes the file private; results and models are shared like their folders.
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def WriteText(path: str, text: str):
  """Writes `text` (UTF-8) to `path` atomically."""
  WriteBytes(path, text.encode('utf-8'))


def WriteJson(path: str, value: Any, sort_keys: bool = True, ensure_ascii: bool = True):
  """Writes `value` as indented JSON (one trailing newline) to `path` atomically."""
  WriteText(path, json.dumps(value, indent=1, sort_keys=sort_keys, ensure_ascii=ensure_ascii) + '\n')


def ReadJsonl(path: str) -> List[Dict]:
  """The rows of a JSON-lines file ([] if there is none); a line that does not parse (a write cut short by
  a kill) is skipped."""
  rows = []
  if os.path.exists(path):
    with open(path) as f:
      for line in f:
        try:
          rows.append(json.loads(line))
        except ValueError:
          continue
  return rows
