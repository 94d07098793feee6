"""The README's commands are the ones CI and users run, and the quickstart explains the same main job."""
import os
import re

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _Blocks(path):
  text = open(os.path.join(_REPO, path)).read()
  return re.findall(r'```(?:bash|sh)\n(.*?)```', text, flags=re.S)


def _ReadmeCommands():
  return _Blocks('README.md')


def test_ci_runs_the_readme_test_command():
  blocks = _ReadmeCommands()
  assert len(blocks) >= 2, 'README must open with the main-job and the test command'
  test_cmd = blocks[1].strip()
  ci = open(os.path.join(_REPO, '.ci', 'run')).read()
  ci_lines = [l.strip() for l in ci.splitlines() if l.strip() and not l.strip().startswith('#')]
  assert test_cmd in ci_lines, f'.ci/run does not run the README test command {test_cmd!r}'
  assert 'pip install' in test_cmd and 'pytest' in test_cmd


def test_the_readme_opens_with_the_main_job_that_the_quickstart_walks_through():
  main_job = _ReadmeCommands()[0].strip()
  steps = [s.strip() for s in main_job.split('&&')]
  assert len(steps) == 4 and 'pip install' in steps[0], steps
  assert [s.split()[2] for s in steps[1:]] == ['lingvo_gshard.tools.prepare_data', 'lingvo_gshard.tools.trainer',
                                             'lingvo_gshard.tools.evaluate'], steps
  quickstart = [l.strip() for l in _Blocks('docs/guides/quickstart.md')[0].splitlines() if l.strip()]
  assert quickstart == steps, 'docs/guides/quickstart.md must show the README main job, one step a line'
