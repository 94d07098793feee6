"""BUILD gives every module, test file and tool a Bazel target, with the same package mapping as setup.py.

Bazel is not needed: BUILD is written in the subset of Starlark that is also Python (no load(), no def), so
it is evaluated here with Python standing in for glob() and the py_* rules. Only the last test runs Bazel
itself, when `bazel` is on PATH, and checks that `bazel query` agrees with that evaluation.
"""
import ast
import glob as glob_lib
import os
import shutil
import subprocess
import sys
import types

import pytest

# Under `bazel test` this file sits in a runfiles tree that holds only what BUILD already lists, so checking
# coverage there would prove nothing; BUILD's runfiles entry is a symlink to the real checkout, so use that.
_REPO = os.path.dirname(os.path.realpath(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'BUILD')))

_LAUNCHER = 'tests/pytest_main.py'


def _TestFiles():
  """tests/*_test.py in the checkout, relative to it."""
  return sorted(os.path.relpath(p, _REPO) for p in glob_lib.glob(os.path.join(_REPO, 'tests', '*_test.py')))


class _Rule(dict):
  """The attributes of one rule call, with its kind."""

  def __init__(self, kind, attrs):
    super().__init__(attrs)
    self.kind = kind


def _Glob(include, exclude=(), exclude_directories=1, allow_empty=True):
  """Bazel's glob() on the checkout: sorted files (not directories) relative to the package root."""
  del exclude_directories, allow_empty  # Files only, and an empty result is allowed, as Bazel 4's defaults.

  def Match(patterns):
    return {p for pattern in patterns for p in glob_lib.glob(pattern, root_dir=_REPO, recursive=True)
            if os.path.isfile(os.path.join(_REPO, p)) and '__pycache__' not in p.split('/')}

  return sorted(Match(include) - Match(exclude))


def _EvalBuild():
  rules = []
  record = lambda kind: (lambda **attrs: rules.append(_Rule(kind, attrs)))
  env = {'glob': _Glob, 'package': lambda **_: None}
  env.update({kind: record(kind) for kind in ('py_library', 'py_test', 'py_binary')})
  with open(os.path.join(_REPO, 'BUILD')) as f:
    exec(compile(f.read(), 'BUILD', 'exec'), env)  # pylint: disable=exec-used
  return env, rules


def _EvalSetup(monkeypatch):
  """setup.py's _MAPPED and the packages/package_dir it passes to setuptools.setup()."""
  import setuptools  # pylint: disable=g-import-not-at-top
  captured = {}
  fake = types.ModuleType('setuptools')
  fake.find_packages = setuptools.find_packages
  fake.setup = captured.update
  monkeypatch.setitem(sys.modules, 'setuptools', fake)
  monkeypatch.chdir(_REPO)  # setup.py's find_packages(where=folder) is relative to the repo root.
  env = {'__name__': 'setup', '__file__': os.path.join(_REPO, 'setup.py')}
  with open(os.path.join(_REPO, 'setup.py')) as f:
    exec(compile(f.read(), 'setup.py', 'exec'), env)  # pylint: disable=exec-used
  return env['_MAPPED'], captured['packages'], captured['package_dir']


@pytest.fixture(scope='module')
def build():
  env, rules = _EvalBuild()
  return types.SimpleNamespace(
      package_map=env['PACKAGE_MAP'],
      tests_importing_tests=env['TESTS_IMPORTING_TESTS'],
      libraries={r['name']: r for r in rules if r.kind == 'py_library'},
      tests={r['name']: r for r in rules if r.kind == 'py_test'},
      binaries={r['name']: r for r in rules if r.kind == 'py_binary'},
      rules=rules)


def _ModuleFiles(folder):
  """Every .py file under a source folder, as setup.py would install it (caches and hidden dirs aside)."""
  found = []
  for root, dirs, files in os.walk(os.path.join(_REPO, folder)):
    dirs[:] = [d for d in dirs if d != '__pycache__' and not d.startswith('.')]
    found += [os.path.relpath(os.path.join(root, f), _REPO) for f in files if f.endswith('.py')]
  return sorted(found)


def _ExpectedLibrary(path, package_map):
  """The library a source file belongs in: one per subpackage of lingvo_gshard/, one per other folder."""
  folder, *rest = path.split('/')
  if package_map[folder] == 'lingvo_gshard':
    return 'lingvo_gshard' if len(rest) == 1 else f'lingvo_gshard_{rest[0]}'
  return package_map[folder].replace('.', '_')


def _HasMainGuard(path):
  with open(os.path.join(_REPO, path)) as f:
    tree = ast.parse(f.read(), path)
  return any(isinstance(node, ast.If) and ast.unparse(node.test).replace('"', "'") == "__name__ == '__main__'"
             for node in tree.body)


def test_package_map_matches_setup_py(build, monkeypatch):
  mapped, packages, package_dir = _EvalSetup(monkeypatch)
  assert build.package_map == mapped
  # Every package setup.py installs has its __init__.py in the library named after that package.
  assert len(packages) >= len(mapped)
  for package in packages:
    init = os.path.join(package_dir[package], '__init__.py')
    expected = _ExpectedLibrary(init, build.package_map)
    assert expected in build.libraries, (package, expected)
    assert init in build.libraries[expected]['srcs'], (package, expected)


def test_every_module_is_in_exactly_its_library(build):
  modules = [p for folder in build.package_map for p in _ModuleFiles(folder)]
  assert 'lingvo_gshard/core/hyperparams.py' in modules  # The walk really sees the tree.
  for path in modules:
    owners = [name for name, lib in build.libraries.items() if path in lib['srcs']]
    assert owners == [_ExpectedLibrary(path, build.package_map)], path
  # And no library lists a file that is not a module of its folder (a stale or mistyped pattern).
  for name, lib in build.libraries.items():
    if name != 'test_lib':
      assert lib['srcs'], name
      assert set(lib['srcs']) <= set(modules), name


def test_root_library_ships_setup_py_for_the_path_mapping(build):
  # lingvo_gshard/__init__.py maps params/, data/ and tools/ into the package only next to a setup.py.
  assert 'setup.py' in build.libraries['lingvo_gshard']['data']
  for name, lib in build.libraries.items():
    if name != 'lingvo_gshard':
      assert ':lingvo_gshard' in lib['deps'], name


def test_every_test_file_has_a_pytest_target(build):
  test_files = _TestFiles()
  assert 'tests/build_targets_test.py' in test_files
  assert sorted(build.tests) == sorted(os.path.basename(f)[:-len('.py')] for f in test_files)
  for f in test_files:
    name = os.path.basename(f)[:-len('.py')]
    rule = build.tests[name]
    direct = build.tests_importing_tests.get(name, [])
    # Sources of the test files it imports, and of those they import (one level further).
    imported = [f'tests/{t}.py' for t in direct + [u for t in direct for u in build.tests_importing_tests.get(t, [])]]
    assert rule['main'] == _LAUNCHER and sorted(rule['srcs']) == sorted([f, _LAUNCHER] + imported), f
    assert rule['args'] == [f'$(rootpath {f})'], f  # The launcher runs pytest on exactly this file.
    assert rule['legacy_create_init'] is False, f  # A made-up tests/__init__.py breaks helper imports.
    assert rule['deps'] == [':test_lib'], f


def test_tests_importing_tests_matches_imports(build):
  # A test that imports another test file fails under Bazel unless BUILD adds that file to its srcs.
  test_modules = {os.path.basename(p)[:-len('.py')] for p in _TestFiles()}
  found = {}
  for name in sorted(test_modules):
    with open(os.path.join(_REPO, 'tests', name + '.py')) as f:
      tree = ast.parse(f.read())
    imported = set()
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        imported |= {a.name.split('.')[0] for a in node.names}
      elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        imported.add(node.module.split('.')[0])
    if imported & test_modules:
      found[name] = sorted(imported & test_modules)
  assert {k: sorted(v) for k, v in build.tests_importing_tests.items()} == found, (
      'BUILD: TESTS_IMPORTING_TESTS must list exactly the test files that import other test files')


def test_test_helpers_and_all_libraries_are_in_test_lib(build):
  test_lib = build.libraries['test_lib']
  helpers = sorted(f for f in _ModuleFiles('tests')
                   if f.count('/') == 1 and not f.endswith('_test.py') and f != _LAUNCHER)
  assert 'tests/conftest.py' in helpers
  assert sorted(test_lib['srcs']) == helpers
  assert test_lib['testonly'] is True
  assert sorted(test_lib['deps']) == sorted(':' + n for n in build.libraries if n != 'test_lib')


def test_every_tool_with_a_main_is_a_binary(build):
  tools = [p for p in _ModuleFiles('tools') if p.count('/') == 1 and p != 'tools/__init__.py']
  with_main = sorted(p for p in tools if _HasMainGuard(p))
  private = [p for p in tools if os.path.basename(p).startswith('_')]
  assert sorted(r['main'] for r in build.binaries.values()) == with_main, (
      'each tools/*.py with `if __name__ == "__main__":` gets a py_binary; name helper modules tools/_*.py')
  assert not [p for p in private if p in with_main], 'tools/_*.py get no binary, so must have no main'
  for name, rule in build.binaries.items():
    assert rule['srcs'] == [rule['main']] and name == os.path.basename(rule['main'])[:-len('.py')]
    assert rule['deps'] == [':lingvo_gshard_tools']  # Which depends on everything params.LoadAll() imports.


def _ImportedLibraries(path, build):
  """Libraries that a source file imports statically (`lingvo_gshard.*` imports, relative ones resolved)."""
  folder, *rest = path.split('/')
  # tests/ is no package: its relative imports (there are none) would not resolve anyway.
  package = '.'.join([build.package_map.get(folder, folder)] + rest[:-1])
  with open(os.path.join(_REPO, path)) as f:
    tree = ast.parse(f.read(), path)
  names = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names += [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:
        parent = package.split('.')[:len(package.split('.')) - node.level + 1]
        base = '.'.join(parent + ([base] if base else []))
      names += [f'{base}.{a.name}' for a in node.names]
  found = set()
  for name in names:
    parts = name.split('.')
    if parts[0] != 'lingvo_gshard':
      continue
    candidate = 'lingvo_gshard_' + parts[1] if len(parts) > 1 else 'lingvo_gshard'
    found.add(candidate if candidate in build.libraries else 'lingvo_gshard')
  return found


def test_library_deps_cover_static_imports(build):
  def Closure(name, seen):
    if name not in seen:
      seen.add(name)
      for dep in build.libraries[name].get('deps', []):
        Closure(dep.lstrip(':'), seen)
    return seen

  checked = 0
  for name, lib in build.libraries.items():
    reachable = Closure(name, set())
    for path in lib['srcs']:
      missing = _ImportedLibraries(path, build) - reachable
      assert not missing, f'{path} imports {sorted(missing)}, which :{name} does not depend on (LIBRARY_DEPS)'
      checked += 1
  assert checked >= 10


def test_import_resolution_sees_real_edges(build):
  # Guards the check above against passing because it finds nothing: known edges must be seen.
  assert 'lingvo_gshard_core' in _ImportedLibraries('lingvo_gshard/core/experiment.py', build)
  assert 'lingvo_gshard_core' in _ImportedLibraries('tools/list_models.py', build)


def test_bazel_query_agrees_with_build_evaluation(build, tmp_path):
  bazel = shutil.which('bazel')
  if not bazel:
    pytest.skip('bazel is not on PATH (apt-get install bazel-bootstrap); the checks above ran without it')
  # --batch and a private output root: no server is left behind and none of the user's is disturbed.
  cmd = [bazel, '--batch', f'--output_user_root={tmp_path}', 'query', '//...', '--output=label_kind']
  run = subprocess.run(cmd, cwd=_REPO, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, HOME=str(tmp_path)))
  assert run.returncode == 0, run.stderr[-3000:]
  listed = {tuple(line.split(' rule ')) for line in run.stdout.splitlines() if ' rule ' in line}
  expected = {(r.kind, f'//:{r["name"]}') for r in build.rules}
  assert listed == expected
  assert len([k for k, _ in listed if k == 'py_test']) == len(_TestFiles()) > 0


def _Closure(build, name, seen=None):
  seen = set() if seen is None else seen
  if name not in seen:
    seen.add(name)
    for dep in build.libraries[name].get('deps', []):
      _Closure(build, dep.lstrip(':'), seen)
  return seen


def test_library_graph_has_no_cycle(build):
  # Depth-first search over LIBRARY_DEPS: a back edge is a cycle (core must never reach up into params, ...).
  state = {}

  def Visit(name, path):
    if state.get(name) == 'open':
      raise AssertionError('dependency cycle: ' + ' -> '.join(path + [name]))
    if state.get(name) != 'done':
      state[name] = 'open'
      for dep in build.libraries[name].get('deps', []):
        Visit(dep.lstrip(':'), path + [name])
      state[name] = 'done'

  for name in build.libraries:
    Visit(name, [])
  assert len(state) == len(build.libraries)


# What only the runtime may know: how steps compile and what the machine is.
_MACHINE_READS = ('/proc/cpuinfo', 'list_physical_devices', 'cpu_count', 'platform.machine', 'HasFastBfloat16',
                  'ActivationDtype', 'CpuFlags', 'lingvo_gshard.runtime', '.backend ==', "backend == 'none'")


@pytest.mark.parametrize('library', ['lingvo_gshard_core', 'lingvo_gshard_layers', 'lingvo_gshard_models',
                                     'lingvo_gshard_params'])
def test_models_and_experiments_never_reach_the_runtime_or_the_machine(build, library):
  assert 'lingvo_gshard_runtime' not in _Closure(build, library)
  for path in build.libraries[library]['srcs']:
    assert 'lingvo_gshard_runtime' not in _ImportedLibraries(path, build), path
    with open(os.path.join(_REPO, path)) as f:
      code = f.read()
    # core's partitioner is where backends are defined; layers, models and experiments only use it.
    found = [token for token in _MACHINE_READS if token in code] if library != 'lingvo_gshard_core' else []
    assert not found, f'{path} reads how it runs or the machine ({", ".join(found)}): that is the runtime\'s'
  assert 'lingvo_gshard_runtime' in _Closure(build, 'lingvo_gshard_train')  # the check sees real edges
