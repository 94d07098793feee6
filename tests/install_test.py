"""A regular (non-editable) install works from a directory outside the repo, with params, data and tools
mapped into the lingvo_gshard namespace and no generic top-level names in site-packages."""
import os
import subprocess
import sys

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_regular_install_outside_repo(tmp_path):
  target = tmp_path / 'site'
  build = subprocess.run(
      [sys.executable, '-m', 'pip', 'install', '--no-deps', '--no-build-isolation', '--quiet',
       '--target', str(target), _REPO], capture_output=True, text=True, timeout=300)
  assert build.returncode == 0, build.stderr[-2000:]
  top_level = sorted(p for p in os.listdir(target) if not p.endswith(('.dist-info', '.egg-info')))
  assert top_level == ['lingvo_gshard'], top_level  # no stray `params`, `data`, `tools`
  for sub in ('params', 'data', 'tools', 'core', 'layers'):
    assert (target / 'lingvo_gshard' / sub / '__init__.py').is_file(), sub

  code = ('import lingvo_gshard, lingvo_gshard.params, lingvo_gshard.data, lingvo_gshard.tools.list_models\n'
          'from lingvo_gshard.core import registry\n'
          'print(lingvo_gshard.params.__file__)\n'
          'print(len(registry.LoadAll().Keys()))\n')
  env = dict(os.environ, PYTHONPATH=str(target))
  run = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
  assert run.returncode == 0, run.stderr[-2000:]
  params_file, count = run.stdout.split()
  assert params_file.startswith(str(target)), params_file  # the installed copy, not the checkout
  tool = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.list_models'], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=120)
  assert tool.returncode == 0, tool.stderr[-2000:]
  assert len([l for l in tool.stdout.splitlines() if l.strip()]) == int(count)
