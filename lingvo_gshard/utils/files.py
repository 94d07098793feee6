"""Files of log, data, vocabulary, export and report directories, on any storage TensorFlow can reach.

A path is local, or a URL (`gs://bucket/dir`, `ram://dir`: anything with `://`). A URL goes through
`tf.io.gfile`, so Cloud Storage works wherever a local directory does; a local path keeps Python's own calls
(permission bits, fsync, errno messages). TensorFlow is imported only for a URL, so a tool that checks its
flags before importing it stays quick. A URL's failures are raised as the OSError a local path would give
(FileNotFoundError, PermissionError, FileExistsError, else OSError with TensorFlow's message): callers catch
one family.

What an object store cannot do, and what happens instead:
- Atomic writes. A write goes to a temporary file next to the target and is renamed over it. On a local disk
  rename(2) is atomic: a reader or a kill sees the old file or the new one, never half of one, and a failed
  write (a full disk) leaves the old file as it was. On gs:// a rename is a copy and a delete: the target is
  still replaced whole (an object is never half-written), but a kill between the two leaves the
  `<name>.tmp-<pid>` object behind, and a directory (`Rename`) moves one object at a time, so a kill in the
  middle leaves part of it under each name.
- Appends. An object cannot be appended to: `AppendText` on a URL reads the file and writes it back whole
  with the text added (checkpoints.jsonl and dev_eval.jsonl are small). Two processes appending to one such
  file at once (a trainer and an evaler on one gs:// log directory) can each drop the other's new line.
- Locks. `ProcessLock` is flock(2) on a local (or NFS) file; an object store has none, so on a URL it takes
  no lock (`held` is False): two trainers on one gs:// log directory are not detected.
- `ram://` (TensorFlow's in-memory filesystem, which the tests use in place of gs://) says a name exists, and
  is a directory, when it only begins a stored name (`ram://d/checkpoint` when `ram://d/checkpoints.jsonl`
  is there), and lists `.jsonl` among the children of `ram://d/checkpoints`. Here a ram:// listing keeps only
  names that exist under the directory, and a ram:// directory exists once it is made (MakeDirs, as every
  writer here does) or holds a file.
"""
import contextlib
import errno
import glob as _glob
import io
import json
import os
import shutil
import tempfile
from typing import Any, Dict, Iterator, List, Tuple


def IsUrl(path: str) -> bool:
  """True for a path TensorFlow's filesystems resolve (`gs://...`, `ram://...`), False for a local one."""
  return '://' in str(path)


def _Gfile():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  (only a URL needs it)
  return tf.io.gfile


@contextlib.contextmanager
def _OsErrors(path: str):
  """Within it, TensorFlow's error of a URL operation is raised as the OSError a local path gives."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    yield
  except tf.errors.OpError as e:
    text = (str(e.message).splitlines() or [''])[0][:200] or type(e).__name__
    kind, number = {tf.errors.NotFoundError: (FileNotFoundError, errno.ENOENT),
                    tf.errors.PermissionDeniedError: (PermissionError, errno.EACCES),
                    tf.errors.AlreadyExistsError: (FileExistsError, errno.EEXIST)}.get(type(e), (OSError, errno.EIO))
    raise kind(number, text, path) from None


def AbsPath(path: str) -> str:
  """os.path.abspath of a local path; a URL as it is (abspath would make `gs://b/d` a local `./gs:/b/d`)."""
  return path if IsUrl(path) else os.path.abspath(path)


def _IsRam(path: str) -> bool:
  return path.startswith('ram://')


def _RamExists(path: str) -> bool:
  """Whether ram:// `path` is a file of that name or a directory (see the module docstring), not only the
  beginning of stored names."""
  gfile = _Gfile()
  if not gfile.exists(path):
    return False
  if not gfile.isdir(path):
    return True  # a file of exactly this name
  parent, name = path.rstrip('/').rsplit('/', 1)
  return parent.endswith(':/') or name in ListDir(parent) or bool(ListDir(path))


def Exists(path: str) -> bool:
  if not IsUrl(path):
    return os.path.exists(path)
  with _OsErrors(path):
    return _RamExists(path) if _IsRam(path) else _Gfile().exists(path)


def IsDir(path: str) -> bool:
  if not IsUrl(path):
    return os.path.isdir(path)
  with _OsErrors(path):
    return _Gfile().isdir(path) and (not _IsRam(path) or _RamExists(path))


def IsFile(path: str) -> bool:
  if not IsUrl(path):
    return os.path.isfile(path)
  return Exists(path) and not IsDir(path)


def ListDir(path: str) -> List[str]:
  """Names in directory `path` (FileNotFoundError if there is none); gs:// directories lose their '/'."""
  if not IsUrl(path):
    return os.listdir(path)
  gfile = _Gfile()
  with _OsErrors(path):
    names = list(dict.fromkeys(name.rstrip('/') for name in gfile.listdir(path)))
    if _IsRam(path):
      names = [n for n in names if gfile.exists(f'{path.rstrip("/")}/{n}')]
    return names


def Glob(pattern: str) -> List[str]:
  if not IsUrl(pattern):
    return _glob.glob(pattern)
  with _OsErrors(pattern):
    return _Gfile().glob(pattern)


def Walk(top: str) -> Iterator[Tuple[str, List[str], List[str]]]:
  """os.walk's (directory, subdirectories, files), top-down (nothing if `top` is missing); a caller may
  reorder the subdirectories in place."""
  if not IsUrl(top):
    yield from os.walk(top)
    return
  try:
    names = ListDir(top)
  except FileNotFoundError:
    return
  top = top.rstrip('/')
  dirs = [n for n in names if IsDir(f'{top}/{n}')]
  yield top, dirs, [n for n in names if n not in dirs]
  for name in dirs:
    yield from Walk(f'{top}/{name}')


def Size(path: str) -> int:
  if not IsUrl(path):
    return os.path.getsize(path)
  with _OsErrors(path):
    return _Gfile().stat(path).length


def MakeDirs(path: str):
  """Creates directory `path` and its parents (nothing if it is there)."""
  if not IsUrl(path):
    os.makedirs(path, exist_ok=True)
    return
  with _OsErrors(path):
    _Gfile().makedirs(path)


def Remove(path: str):
  if not IsUrl(path):
    os.remove(path)
    return
  with _OsErrors(path):
    _Gfile().remove(path)


def RemoveTree(path: str, ignore_errors: bool = False):
  if not IsUrl(path):
    shutil.rmtree(path, ignore_errors=ignore_errors)
    return
  try:
    if _IsRam(path):
      _RamRemoveTree(path)
    else:
      with _OsErrors(path):
        _Gfile().rmtree(path)
  except OSError:
    if not ignore_errors:
      raise


def _RamRemoveTree(path: str):
  """tf.io.gfile.rmtree of ram:// trips over its own listing (see the module docstring): the files, then the
  directories (names of their own there), one by one."""
  gfile, walked = _Gfile(), list(Walk(path))
  if not walked:
    raise FileNotFoundError(errno.ENOENT, 'no such directory', path)
  for base, _, names in reversed(walked):
    for name in names:
      with _OsErrors(f'{base}/{name}'):
        gfile.remove(f'{base}/{name}')
    with contextlib.suppress(OSError), _OsErrors(base):
      gfile.remove(base)  # NotFound: a directory that only held files has no name of its own


def Copy(src: str, dst: str):
  """Copies file `src` to `dst`, replacing it."""
  if not IsUrl(src) and not IsUrl(dst):
    shutil.copyfile(src, dst)
    return
  with _OsErrors(src):
    _Gfile().copy(src, dst, overwrite=True)


def Rename(src: str, dst: str):
  """Moves file or directory `src` to `dst` (a file there is replaced). Local: one rename(2), atomic. URL: a
  file is copied and deleted; a directory is moved one file at a time (as TensorFlow's gs:// does for a
  directory; its ram:// would move the directory's name and lose its files)."""
  if not IsUrl(src) and not IsUrl(dst):
    os.replace(src, dst)
    return
  gfile = _Gfile()
  if not IsDir(src):
    with _OsErrors(src):
      gfile.rename(src, dst, overwrite=True)
    return
  src, dst = src.rstrip('/'), dst.rstrip('/')
  for base, _, names in list(Walk(src)):
    target = dst + base[len(src):]
    MakeDirs(target)
    for name in names:
      with _OsErrors(f'{base}/{name}'):
        gfile.rename(f'{base}/{name}', f'{target}/{name}', overwrite=True)
  RemoveTree(src)


class _UrlFile:
  """A tf.io.gfile.GFile whose errors are OSErrors (_OsErrors)."""

  def __init__(self, path: str, mode: str):
    self._path = path
    with _OsErrors(path):
      self._file = _Gfile().GFile(path, mode)

  def __getattr__(self, name):
    attr = getattr(self._file, name)
    if not callable(attr):
      return attr

    def Call(*args, **kwargs):
      with _OsErrors(self._path):
        return attr(*args, **kwargs)
    return Call

  def __iter__(self):
    with _OsErrors(self._path):
      yield from self._file

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
    return False


def Open(path: str, mode: str = 'r', encoding: str = 'utf-8'):
  """A file object of `path` (open() for a local path; text is `encoding`). A URL's text is UTF-8 and its
  writes reach the store when the file is closed."""
  if not IsUrl(path):
    return open(path, mode, encoding=None if 'b' in mode else encoding)  # pylint: disable=consider-using-with
  return _UrlFile(path, mode)


def ReadBytes(path: str) -> bytes:
  with Open(path, 'rb') as f:
    return f.read()


def ReadText(path: str) -> str:
  """The UTF-8 text of `path` (UnicodeDecodeError, a ValueError, if it is not UTF-8)."""
  return ReadBytes(path).decode('utf-8')


def WriteBytes(path: str, data: bytes, mode: int = 0o644):
  """Writes `data` to `path` atomically (creating its directory; see the module docstring for URLs); a local
  file gets permissions `mode`."""
  if IsUrl(path):
    _WriteUrl(path, data)
    return
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


def _WriteUrl(path: str, data: bytes):
  gfile, tmp = _Gfile(), f'{path}.tmp-{os.getpid()}'
  with _OsErrors(path):
    gfile.makedirs(os.path.dirname(path))  # a ram:// listing shows only directories made as such
    try:
      with gfile.GFile(tmp, 'wb') as f:
        f.write(data)
      gfile.rename(tmp, path, overwrite=True)
    except BaseException:
      with contextlib.suppress(Exception):
        gfile.remove(tmp)
      raise


def WriteText(path: str, text: str):
  """Writes `text` (UTF-8) to `path` atomically."""
  WriteBytes(path, text.encode('utf-8'))


def WriteJson(path: str, value: Any, sort_keys: bool = True, ensure_ascii: bool = True):
  """Writes `value` as indented JSON (one trailing newline) to `path` atomically."""
  WriteText(path, json.dumps(value, indent=1, sort_keys=sort_keys, ensure_ascii=ensure_ascii) + '\n')


def SaveFigure(fig, path: str, **kwargs):
  """Saves matplotlib figure `fig` (savefig's `kwargs`) to `path`, in the format its extension names."""
  if not IsUrl(path):
    fig.savefig(path, **kwargs)
    return
  data = io.BytesIO()
  fig.savefig(data, format=os.path.splitext(path)[1][1:] or 'png', **kwargs)
  WriteBytes(path, data.getvalue())


def AppendText(path: str, text: str):
  """Adds `text` at the end of `path` (creating it). Local: an append, which a kill may cut short (readers
  skip a partial last line). URL: the whole file rewritten (see the module docstring)."""
  if not IsUrl(path):
    with open(path, 'a') as f:
      f.write(text)
    return
  old = ReadBytes(path) if Exists(path) else b''
  _WriteUrl(path, old + text.encode('utf-8'))


def CheckWritableDir(path: str, flag: str) -> None:
  """Raises ValueError (one line naming `flag`) unless `path` is a writable directory or could be made one:
  its nearest existing ancestor is a writable directory. Checked before a tool creates anything, so a
  command that cannot write its output fails before it has read or made something. A URL (`gs://`, `ram://`)
  has no permission bits to ask: its first write reports the problem instead."""
  if IsUrl(path):
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
  if Exists(path):
    with Open(path) as f:
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
  (and NFS v4); an object store (gs://) has no equivalent, so on a URL Acquire takes no lock and writes
  nothing (`held` stays False): there two writers are not detected.
  """

  def __init__(self, path: str):
    self.path, self._file = path, None

  @property
  def held(self) -> bool:
    return self._file is not None

  def Acquire(self) -> 'ProcessLock':
    """Takes the lock or raises LockHeld (naming the holder's pid, if it wrote one); on a URL, nothing."""
    if IsUrl(self.path):
      return self
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
