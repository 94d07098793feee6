"""Experiments from outside the package: `--model` as a dotted path or FILE.py:Name, the entry-point group of
installed distributions, a name defined twice, and every failure as one line; one user experiment trained and
decoded through the binaries.

An installed distribution is stood in for by a directory on sys.path holding its modules and a
`<name>-0.1.dist-info/` with METADATA and entry_points.txt: importlib.metadata finds it as it finds a
pip-installed one.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from lingvo_gshard import params as params_lib
from lingvo_gshard.core import registry
from lingvo_gshard.params import m4_tiny
import input_helpers

_EXPERIMENTS = '''
from lingvo_gshard.core import registry
from lingvo_gshard.params import m4_tiny


class Small(m4_tiny.M4TinyBase):
  """Not registered: found by its path only."""
  MODEL_DIM = 64


@registry.Register
class Registered(m4_tiny.M4TinyBase):
  """Registered: found by its name too."""
  NUM_LAYERS = 1


registry.Register(Small, name='SmallAlias')
NOT_AN_EXPERIMENT = 3
'''


@pytest.fixture(autouse=True)
def own_registry(monkeypatch, tmp_path):
  """What a test registers, imports from its tmp_path and loads from entry points is gone after it, so the
  other test files in this process see the package's experiments only. It runs in an empty directory beside
  its files: messages show paths relative to the working directory only below it, so here they are whole."""
  params_lib.LoadAll()
  os.makedirs(tmp_path / 'cwd')
  monkeypatch.chdir(tmp_path / 'cwd')
  reg = registry.REGISTRY
  # pylint: disable=protected-access
  for attr in ('_classes', '_origins', '_loaded'):
    monkeypatch.setattr(reg, attr, type(getattr(reg, attr))(getattr(reg, attr)))
  monkeypatch.setattr(registry, '_FILE_MODULES', dict(registry._FILE_MODULES))
  # pylint: enable=protected-access
  yield
  root = str(tmp_path) + os.sep  # pytest's tmp_path is a real path already
  for name, module in list(sys.modules.items()):
    if str(getattr(module, '__file__', None)).startswith(root):
      del sys.modules[name]


def _Write(root, files):
  for rel, text in files.items():
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
      f.write(textwrap.dedent(text))


def _Installed(monkeypatch, root, dist, entry_points, files):
  """A stand-in for `pip install`ed distribution `dist` 0.1: its modules and dist-info under root, which goes
  on sys.path. entry_points: {name: 'module' or 'module:attr'} of the lingvo_gshard.experiments group."""
  _Write(root, files)
  _Write(root, {f'{dist}-0.1.dist-info/METADATA': f'Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n',
                f'{dist}-0.1.dist-info/entry_points.txt': f'[{registry.ENTRY_POINT_GROUP}]\n' + ''.join(
                    f'{name} = {value}\n' for name, value in entry_points.items())})
  monkeypatch.syspath_prepend(str(root))
  return str(root)


def _Error(name):
  """The RegistryError message of resolving `name`, checked to be one line."""
  with pytest.raises(registry.RegistryError) as e:
    registry.GetClass(name)
  message = str(e.value)
  assert '\n' not in message, message
  return message


def test_dotted_path(monkeypatch, tmp_path):
  _Write(tmp_path, {'mypkg/__init__.py': '', 'mypkg/exps.py': _EXPERIMENTS})
  monkeypatch.syspath_prepend(str(tmp_path))
  small = registry.GetClass('mypkg.exps.Small')
  assert small.__module__ == 'mypkg.exps' and issubclass(small, m4_tiny.M4TinyBase) and small.MODEL_DIM == 64
  assert registry.Get('mypkg.exps.Small').Task().model_dim == 64
  # Registered in the import: its key, its short name and a name that is no attribute are found too.
  registered = registry.GetClass('mypkg.exps.Registered')
  assert registry.GetClass('Registered') is registered and 'mypkg.exps.Registered' in registry.REGISTRY.Keys()
  assert registry.GetClass('mypkg.exps.SmallAlias') is small
  # The package's own modules are dotted paths as well.
  assert registry.GetClass('lingvo_gshard.params.m4_tiny.M4TinyMoE') is registry.GetClass('M4TinyMoE')


def test_file_path(tmp_path):
  _Write(tmp_path, {'outside/my_exp.py': _EXPERIMENTS})
  path = str(tmp_path / 'outside' / 'my_exp.py')
  small = registry.GetClass(f'{path}:Small')
  assert small.__name__ == 'Small' and small.MODEL_DIM == 64 and small.__module__.startswith('lingvo_gshard_file_')
  # One module per file: named again (by another spelling of the path too), the same classes.
  assert registry.GetClass(os.path.join(str(tmp_path), 'outside', '..', 'outside', 'my_exp.py:Small')) is small
  assert registry.GetClass(f'{path}:SmallAlias') is small
  # Its registrations are keyed by the file's name.
  assert registry.GetClass('my_exp.Registered') is registry.GetClass(f'{path}:Registered')


def test_entry_point(monkeypatch, tmp_path):
  _Installed(monkeypatch, tmp_path, 'mypkg', {'exps': 'mypkg.exps', 'small': 'mypkg.more:Unregistered'}, {
      'mypkg/__init__.py': '', 'mypkg/exps.py': _EXPERIMENTS,
      'mypkg/more.py': '''
          from lingvo_gshard.params import m4_tiny


          class Unregistered(m4_tiny.M4TinyBase):
            """Named by module:attr; loading the entry point registers it."""
          '''})
  keys = params_lib.LoadAll().Keys()
  assert {'mypkg.exps.Registered', 'mypkg.exps.SmallAlias', 'mypkg.more.Unregistered'} <= set(keys)
  assert {'m4_tiny.M4TinyMoE', 'bilingual.Bilingual_de'} <= set(keys)  # after the package's own
  assert registry.Get('Registered').Task().encoder.num_layers == 1
  assert params_lib.LoadAll().Keys() == keys  # each entry point is imported once


def test_entry_point_experiments_are_listed_by_list_models(monkeypatch, tmp_path):
  root = _Installed(monkeypatch, tmp_path / 'site', 'mypkg', {'exps': 'mypkg.exps'},
                    {'mypkg/__init__.py': '', 'mypkg/exps.py': _EXPERIMENTS})
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get('PYTHONPATH')])))
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.list_models', '--filter=mypkg'], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  assert [line.split()[0] for line in out.stdout.splitlines()] == ['mypkg.exps.Registered', 'mypkg.exps.SmallAlias']


def test_broken_entry_point_is_one_line_naming_it_and_its_distribution(monkeypatch, tmp_path):
  _Installed(monkeypatch, tmp_path / 'a', 'missing', {'exps': 'nosuchpkg.exps'}, {})
  message = str(pytest.raises(registry.RegistryError, params_lib.LoadAll).value)
  assert message == ('entry point exps = nosuchpkg.exps of missing 0.1 (group lingvo_gshard.experiments): '
                     "nosuchpkg.exps: no module named 'nosuchpkg'")
  sys.path.remove(str(tmp_path / 'a'))  # uninstalled
  _Installed(monkeypatch, tmp_path / 'b', 'typo', {'exps': 'typopkg.exps'},
             {'typopkg/__init__.py': '', 'typopkg/exps.py': 'x = 1\nclass Broken(:\n'})
  message = str(pytest.raises(registry.RegistryError, params_lib.LoadAll).value)
  assert message == ('entry point exps = typopkg.exps of typo 0.1 (group lingvo_gshard.experiments): cannot '
                     f'import typopkg.exps: {tmp_path}/b/typopkg/exps.py:2: SyntaxError: invalid syntax')


def test_broken_entry_point_through_a_binary(monkeypatch, tmp_path):
  root = _Installed(monkeypatch, tmp_path / 'site', 'mypkg', {'exps': 'mypkg.exps'},
                    {'mypkg/__init__.py': '', 'mypkg/exps.py': 'import nosuchmodule\n'})
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get('PYTHONPATH')])))
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.list_models'], cwd=tmp_path / 'cwd', env=env,
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 1 and 'Traceback' not in out.stderr, out.stderr
  assert out.stderr.strip().splitlines()[-1] == (
      'list_models: entry point exps = mypkg.exps of mypkg 0.1 (group lingvo_gshard.experiments): cannot import '
      f"mypkg.exps: {root}/mypkg/exps.py:1: ModuleNotFoundError: No module named 'nosuchmodule'")


def test_a_short_name_defined_twice_names_both_places(monkeypatch, tmp_path):
  exps = '''
      from lingvo_gshard.core import registry
      from lingvo_gshard.params import m4_tiny


      @registry.Register
      class M4TinyMoE(m4_tiny.M4TinyBase):
        """A user's experiment of the package's name."""
      '''
  for folder, dist in (('a', 'alpha'), ('b', 'beta')):
    _Installed(monkeypatch, tmp_path / folder, dist, {'exps': f'{dist}.exps'},
               {f'{dist}/__init__.py': '', f'{dist}/exps.py': exps})
  params_lib.LoadAll()
  assert _Error('M4TinyMoE') == (
      "experiment name 'M4TinyMoE' is ambiguous: "
      f'alpha.exps.M4TinyMoE ({tmp_path}/a/alpha/exps.py via entry point exps = alpha.exps of alpha 0.1), '
      f'beta.exps.M4TinyMoE ({tmp_path}/b/beta/exps.py via entry point exps = beta.exps of beta 0.1), '
      f'm4_tiny.M4TinyMoE ({m4_tiny.__file__})')
  # A longer suffix, or the dotted path, says which.
  assert registry.GetClass('alpha.exps.M4TinyMoE').__module__ == 'alpha.exps'
  assert registry.GetClass('m4_tiny.M4TinyMoE') is m4_tiny.M4TinyMoE


def test_a_key_registered_twice_names_both_places(monkeypatch, tmp_path):
  # A distribution whose top-level module is named like one of the package's experiment modules: its keys
  # are the package's.
  _Installed(monkeypatch, tmp_path, 'copycat', {'exps': 'm4_tiny'}, {'m4_tiny.py': '''
      from lingvo_gshard.core import registry
      from lingvo_gshard.params import m4_tiny as package_m4_tiny


      @registry.Register
      class M4TinyMoE(package_m4_tiny.M4TinyBase):
        """A copy."""
      '''})
  message = str(pytest.raises(registry.RegistryError, params_lib.LoadAll).value)
  assert message == ('entry point exps = m4_tiny of copycat 0.1 (group lingvo_gshard.experiments): experiment '
                     f"'m4_tiny.M4TinyMoE' is registered twice: by {m4_tiny.__file__} and by {tmp_path}/m4_tiny.py")
  assert 'm4_tiny' not in sys.modules  # it failed to import: nothing of it stays registered
  assert registry.GetClass('M4TinyMoE') is m4_tiny.M4TinyMoE


# (what is wrong, --model value, its one-line error); {root} is the test's folder, on sys.path.
_ERRORS = [
    ('unknown_module', 'nosuchpkg.exps.Small', "unknown experiment 'nosuchpkg.exps.Small': not registered, and "
     "no module named 'nosuchpkg'; closest: mypkg.exps.SmallAlias"),
    ('unknown_submodule', 'mypkg.nope.Small', "mypkg.nope.Small: no module named 'mypkg.nope'"),
    ('attribute_missing', 'mypkg.exps.Smal', "mypkg.exps.Smal: mypkg.exps has no experiment 'Smal'; closest: Small"),
    ('not_an_experiment', 'mypkg.exps.NOT_AN_EXPERIMENT', 'mypkg.exps.NOT_AN_EXPERIMENT: NOT_AN_EXPERIMENT is not '
     'an Experiment subclass (int)'),
    ('module_syntax_error', 'mypkg.syntax.X', 'cannot import mypkg.syntax: {root}/mypkg/syntax.py:3: SyntaxError: '
     'invalid syntax'),
    ('module_raises', 'mypkg.raises.X', "cannot import mypkg.raises: {root}/mypkg/raises.py:2: KeyError: "
     "'no_such_setting'"),
    ('file_not_found', '{root}/nofile.py:Small', '{root}/nofile.py:Small: no file {root}/nofile.py'),
    ('file_attribute_missing', '{root}/my_exp.py:SmallAlas', "{root}/my_exp.py:SmallAlas: {root}/my_exp.py has "
     "no experiment 'SmallAlas'; closest: SmallAlias, Small"),
    ('file_not_an_experiment', '{root}/my_exp.py:NOT_AN_EXPERIMENT', '{root}/my_exp.py:NOT_AN_EXPERIMENT: '
     'NOT_AN_EXPERIMENT is not an Experiment subclass (int)'),
    ('file_without_name', '{root}/my_exp.py', '{root}/my_exp.py: name the experiment, as {root}/my_exp.py:NAME '
     '({root}/my_exp.py defines Registered, Small, SmallAlias)'),
    ('file_syntax_error', '{root}/mypkg/syntax.py:X', 'cannot import {root}/mypkg/syntax.py: '
     '{root}/mypkg/syntax.py:3: SyntaxError: invalid syntax'),
    ('file_raises', '{root}/mypkg/raises.py:X', 'cannot import {root}/mypkg/raises.py: {root}/mypkg/raises.py:2: '
     "KeyError: 'no_such_setting'"),
    ('registered_name_typo', 'M4TinyMoe', "unknown experiment 'M4TinyMoe'; closest: m4_tiny.M4TinyMoE, "
     'm4_tiny.M4TinyMoE64, m4_tiny.M4TinyMoEDemo'),
]


@pytest.mark.parametrize('spec, expected', [e[1:] for e in _ERRORS], ids=[e[0] for e in _ERRORS])
def test_each_error_is_one_line(monkeypatch, tmp_path, spec, expected):
  _Write(tmp_path, {'mypkg/__init__.py': '', 'mypkg/exps.py': _EXPERIMENTS, 'my_exp.py': _EXPERIMENTS,
                    'mypkg/syntax.py': 'import os\n\ndef Broken(:\n  pass\n',
                    'mypkg/raises.py': 'import os\nSETTING = os.environ["no_such_setting"]\n'})
  monkeypatch.syspath_prepend(str(tmp_path))
  registry.GetClass('mypkg.exps.Small')  # so the closest match of a module path that is missing is seen
  assert _Error(spec.format(root=tmp_path)) == expected.format(root=tmp_path)


_USER_EXPERIMENT = '''
"""A user's experiment, kept outside the repository: the tiny MoE shrunk to the test corpus."""
from lingvo_gshard.params import m4_tiny


class MyExperiment(m4_tiny.M4TinyBase):
  """M4-tiny with 4 experts of width 32, on 2 languages."""
  MODEL_DIM, NUM_HEADS, HIDDEN_DIM, NUM_LAYERS, NUM_EXPERTS, GROUP_SIZE = 32, 2, 64, 2, 4, 64
  SOURCE_VOCAB = TARGET_VOCAB = 400  # the fewest pieces that hold every character and language tag
  BATCH_ROWS, MAX_LENGTH, PACKED_SOURCE_LENGTH, PACKED_TARGET_LENGTH = 4, 48, 96, 96
  MAX_STEPS, WARMUP_STEPS, SAVE_INTERVAL, DROPOUT = 4, 2, 4, 0.0
  DECODE_FIRST_CACHE_LENGTH = 48  # one decode loop: the quickest to compile

  def _Input(self, split, repeat):
    p = super()._Input(split, repeat)
    p.vocab.sample_sentences = 3000  # the corpus holds a few hundred pairs
    return p
'''


def test_a_user_file_trains_decodes_exports_and_translates_through_the_console_scripts(tmp_path):
  data_dir = input_helpers.BuildCorpus(str(tmp_path / 'corpus'), sizes={'de': 200, 'ja': 60})
  _Write(tmp_path, {'user/my_exp.py': _USER_EXPERIMENT})
  logdir = str(tmp_path / 'run')

  def Run(tool, *args, run=True):
    # From the user's folder, outside the repository, naming the experiment by its file; the console scripts
    # setup.py installs (gshard_trainer, ...).
    run_args = ['--model=my_exp.py:MyExperiment', f'--logdir={logdir}'] if run else []
    out = subprocess.run([shutil.which(f'gshard_{tool}'), *run_args, *args], cwd=tmp_path / 'user',
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout

  out = Run('trainer', f'--data_dir={data_dir}', '--mode=train')
  assert re.search(r'^step +4/4 loss \d', out, re.M), out
  with open(os.path.join(logdir, 'params.txt')) as f:
    params = f.read()
  assert re.match(r'# experiment: lingvo_gshard_file_my_exp_\w+\.MyExperiment$', params.splitlines()[0]), params
  assert 'task.encoder.moe_tpl.num_experts : 4' in params and 'learner.max_steps : 4' in params
  out = Run('evaluate', '--languages=de', '--max_sentences=1', '--beam_size=1')
  with open(os.path.join(logdir, 'decode_test', 'ckpt-4', 'results.json')) as f:
    results = json.load(f)
  assert results['experiment'] == 'MyExperiment' and 'de' in results['languages'], results
  source = 'Datei öffnen'
  (tmp_path / 'user' / 'in.txt').write_text(source + '\n', encoding='utf-8')
  Run('export', f'--export_dir={tmp_path / "export"}')
  direct = Run('translate', '--input=in.txt')
  exported = Run('translate', f'--saved_model={tmp_path / "export"}', '--input=in.txt', run=False)
  assert len(direct.splitlines()) == 1 and exported == direct
