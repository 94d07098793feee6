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


def CheckWritableDir(path: str, flag: str) -> None:
  """Raises ValueError (one line naming `flag`) unless `path` is a writable directory or could be made one:
  its nearest existing ancestor is a writable directory. Checked before a tool creates anything, so a
  command that cannot write its output fails before it has read or made something. A URL (`gs://`, `ram://`)
  has no permission bits to ask: its first write reports the problem instead."""
  if '://' in path:
    return
  probe = os.path.abspath(path)
  while not os.path.exists(probe):
    probe = os.path.dirname(probe)
  if not os.path.isdir(probe):
    raise ValueError(f'{flag}={path}: {probe} is a file, not a directory')
  if not os.access(probe, os.W_OK | os.X_OK):
    raise ValueError(f'{flag}={path}: {probe} is not writable')


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


class LockHeld(OSError):
  """Another live process holds the lock."""


class ProcessLock:
  """An exclusive lock on `path` for as long as this process holds it (`Acquire`, then `Release` or exit).

  flock(2): the kernel drops it when the process ends, however it ends, so a killed process never leaves it
  stuck. The file keeps the holder's pid for the message of whoever is refused. flock works on local disks
  (and NFS v4); object stores such as gs:// have no equivalent, so there two writers are not detected.
  """

  def __init__(self, path: str):
    self.path, self._file = path, None

  def Acquire(self) -> 'ProcessLock':
    """Takes the lock or raises LockHeld (naming the holder's pid, if it wrote one)."""
    import fcntl  # pylint: disable=g-import-not-at-top  (POSIX only; imported where a lock is taken)
    f = open(self.path, 'a+')  # pylint: disable=consider-using-with  (held open: the lock lives with it)
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      f.seek(0)
      holder = f.read().strip()
      f.close()
      raise LockHeld(f'{self.path}: held by {"process " + holder if holder else "another process"}') from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    self._file = f
    return self

  def Release(self):
    if self._file is not None:
      self._file.close()  # closing the descriptor releases the flock
      self._file = None
