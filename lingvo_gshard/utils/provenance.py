"""Which code produced a result: the git commit recorded next to checkpoints, decodes and baselines."""
import os
import subprocess

COMMIT_ENV = 'LINGVO_GSHARD_COMMIT'


def CodeCommit() -> str:
  """The git commit of the code running (with '+dirty' if tracked files differ from it), or ''; a copy of the
  tree outside git says its commit in $LINGVO_GSHARD_COMMIT."""
  if os.environ.get(COMMIT_ENV):
    return os.environ[COMMIT_ENV]
  here = os.path.dirname(os.path.abspath(__file__))
  try:
    head = subprocess.run(['git', '-C', here, 'rev-parse', 'HEAD'], capture_output=True, text=True,
                          timeout=10, check=True).stdout.strip()
    dirty = subprocess.run(['git', '-C', here, 'status', '--porcelain', '--untracked-files=no'],
                           capture_output=True, text=True, timeout=10, check=True).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return ''
  return head + ('+dirty' if dirty else '')
