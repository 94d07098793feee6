"""What a corpus build wrote, and whether it is still there as written.

The manifest records every file of the built dataset with its size and sha256. Opening a data directory
checks the sizes (a stat a file: cheap enough for every open, and it catches a copy cut short);
`prepare_data --verify --data_dir=DIR` also reads every file and checks its sha256 (a bit flipped in place).
Builds from before these records exist pass unchecked.
"""
import hashlib
import os
from typing import Dict, List

from lingvo_gshard.data import report as report_lib
from lingvo_gshard.utils import files as files_lib

FILES = 'files'  # manifest key: {path relative to the data directory: {'bytes': n, 'sha256': hex}}


def _Sha256(path: str) -> str:
  digest = hashlib.sha256()
  with files_lib.Open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      digest.update(block)
  return digest.hexdigest()


def Record(root: str, folder: str) -> Dict[str, Dict]:
  """{path under `root`: {'bytes', 'sha256'}} of every file below root/folder."""
  out = {}
  for base, dirs, files in files_lib.Walk(os.path.join(root, folder)):
    dirs.sort()
    for name in sorted(files):
      path = os.path.join(base, name)
      rel = os.path.relpath(path, root) if not files_lib.IsUrl(root) else path[len(root.rstrip('/')) + 1:]
      out[rel] = {'bytes': files_lib.Size(path), 'sha256': _Sha256(path)}
  return out


def _SizeProblem(data_dir: str, rel: str, info: Dict) -> str:
  path = os.path.join(data_dir, rel)
  if not files_lib.IsFile(path):
    return f'{path}: missing (the build wrote {info["bytes"]} bytes)'
  size = files_lib.Size(path)
  if size != info['bytes']:
    return f'{path}: {size} bytes, the build wrote {info["bytes"]} (cut short or changed)'
  return ''


def CheckSizes(data_dir: str, manifest: Dict):
  """DataError naming the first file of the build that is missing or not the size it was written at."""
  for rel, info in manifest.get(FILES, {}).items():
    problem = _SizeProblem(data_dir, rel, info)
    if problem:
      raise report_lib.DataError(f'{problem}; rebuild with python -m lingvo_gshard.tools.prepare_data '
                                 f'--data_dir={data_dir} --force')


def Verify(data_dir: str, manifest: Dict) -> List[str]:
  """One line per file of the build that is missing, resized or whose sha256 differs ([] if all match)."""
  problems = []
  for rel, info in manifest.get(FILES, {}).items():
    problem = _SizeProblem(data_dir, rel, info)
    if not problem and _Sha256(os.path.join(data_dir, rel)) != info['sha256']:
      problem = f'{os.path.join(data_dir, rel)}: sha256 differs from the build\'s (changed in place)'
    if problem:
      problems.append(problem)
  return problems
