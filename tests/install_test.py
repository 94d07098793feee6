"""Regular and editable installs work from a directory outside the repo, with params, data and tools
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
  assert top_level == ['bin', 'lingvo_gshard'], top_level  # no stray `params`, `data`, `tools`
  assert {'gshard_trainer', 'gshard_evaluate'} <= set(os.listdir(target / 'bin'))  # the console scripts
  for sub in ('params', 'data', 'tools', 'core', 'layers'):
    assert (target / 'lingvo_gshard' / sub / '__init__.py').is_file(), sub

  code = ('import lingvo_gshard, lingvo_gshard.params, lingvo_gshard.data, lingvo_gshard.tools.list_models\n'
          'from lingvo_gshard.core import registry\n'
          'print(lingvo_gshard.params.__file__)\n'
          'print(len(lingvo_gshard.params.LoadAll().Keys()))\n')
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


def test_editable_install_exposes_the_package_only_and_the_console_scripts(tmp_path):
  """`pip install -e .` (PEP 660 via pyproject.toml): lingvo_gshard.* resolves to the checkout, while `params`,
  `data` and `tools` stay unimportable as top-level names, so they cannot shadow a user's own modules."""
  venv = tmp_path / 'venv'
  subprocess.run([sys.executable, '-m', 'venv', '--system-site-packages', str(venv)], check=True, timeout=120)
  py, bindir = str(venv / 'bin' / 'python'), venv / 'bin'
  build = subprocess.run([py, '-m', 'pip', 'install', '--no-deps', '--no-build-isolation', '--quiet', '-e',
                          _REPO], capture_output=True, text=True, timeout=300)
  assert build.returncode == 0, build.stderr[-2000:]
  code = ('import importlib.util, lingvo_gshard.params, lingvo_gshard.tools.trainer\n'
          'print(lingvo_gshard.params.__file__)\n'
          'print([m for m in ("params", "data", "tools") if importlib.util.find_spec(m)])\n')
  (tmp_path / 'elsewhere').mkdir()
  env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
  run = subprocess.run([py, '-c', code], cwd=tmp_path / 'elsewhere', env=env, capture_output=True, text=True,
                       timeout=120)
  assert run.returncode == 0, run.stderr[-2000:]
  params_file, shadowing = run.stdout.splitlines()
  assert params_file == os.path.join(_REPO, 'params', '__init__.py'), params_file  # the checkout itself
  assert shadowing == '[]', shadowing
  for script in ('gshard_trainer', 'gshard_evaluate', 'gshard_prepare_data', 'gshard_list_models',
                 'gshard_train_baselines', 'gshard_m4_report'):
    assert (bindir / script).is_file(), script
  listed = subprocess.run([str(bindir / 'gshard_list_models')], cwd=tmp_path / 'elsewhere', env=env,
                          capture_output=True, text=True, timeout=120)
  assert listed.returncode == 0 and 'M4TinyMoEDemo' in listed.stdout, listed.stderr[-2000:]
  bad = subprocess.run([str(bindir / 'gshard_trainer'), '--model=NoSuch', '--logdir=x'], cwd=tmp_path / 'elsewhere',
                       env=env, capture_output=True, text=True, timeout=300)
  assert bad.returncode == 1 and "unknown experiment 'NoSuch'" in bad.stderr
