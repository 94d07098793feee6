"""The README's commands are the ones CI and users run."""
import os
import re

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ReadmeCommands():
  text = open(os.path.join(_REPO, 'README.md')).read()
  return re.findall(r'```(?:bash|sh)\n(.*?)```', text, flags=re.S)


def test_ci_runs_the_readme_test_command():
  blocks = _ReadmeCommands()
  assert len(blocks) >= 2, 'README must open with the main-job and the test command'
  test_cmd = blocks[1].strip()
  ci = open(os.path.join(_REPO, '.ci', 'run')).read()
  ci_lines = [l.strip() for l in ci.splitlines() if l.strip() and not l.strip().startswith('#')]
  assert test_cmd in ci_lines, f'.ci/run does not run the README test command {test_cmd!r}'
  assert 'pytest' in test_cmd and 'pip install' in test_cmd
