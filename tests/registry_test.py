"""Registry: registration, lookup by key or dotted suffix, ambiguity and unknown-name errors."""
import subprocess
import sys

import pytest

from lingvo_gshard import params as params_lib
from lingvo_gshard.core import experiment
from lingvo_gshard.core import registry


def _Make(module, name):
  return type(name, (experiment.Experiment,), {'__module__': module, '__doc__': f'{name} summary.\n\nMore.'})


@pytest.fixture
def reg():
  r = registry.Registry()
  r.Register(_Make('lingvo_gshard.params.m4', 'TinyMoE'))
  r.Register(_Make('lingvo_gshard.params.wmt', 'TinyMoE'))
  r.Register(_Make('lingvo_gshard.params.m4', 'TinyDense'))
  base = _Make('lingvo_gshard.params.bilingual', 'Bilingual')
  for lang in ('de', 'fr'):
    r.Register(type(f'Bilingual_{lang}', (base,), {'__module__': base.__module__}), name=f'Bilingual_{lang}')
  return r


def test_lookup(reg):
  assert reg.Keys() == ['bilingual.Bilingual_de', 'bilingual.Bilingual_fr', 'm4.TinyDense', 'm4.TinyMoE',
                        'wmt.TinyMoE']
  assert reg.GetClass('TinyDense').__name__ == 'TinyDense'
  assert reg.GetClass('m4.TinyMoE').__module__ == 'lingvo_gshard.params.m4'
  assert reg.GetClass('wmt.TinyMoE').__module__ == 'lingvo_gshard.params.wmt'
  assert reg.GetClass('Bilingual_fr').__name__ == 'Bilingual_fr'
  assert reg.GetClass('TinyDense').Summary() == 'TinyDense summary.'


def test_ambiguous_lists_all_candidates(reg):
  with pytest.raises(registry.RegistryError,
                     match=r"experiment name 'TinyMoE' is ambiguous: m4.TinyMoE, wmt.TinyMoE"):
    reg.GetClass('TinyMoE')


def test_unknown_lists_closest(reg):
  with pytest.raises(registry.RegistryError, match=r"unknown experiment 'TinyMoe'; closest: .*m4.TinyMoE"):
    reg.GetClass('TinyMoe')
  with pytest.raises(registry.RegistryError, match=r"unknown experiment 'Xyz'; 5 experiments registered"):
    reg.GetClass('Xyz')


def test_duplicate_and_non_experiment(reg):
  with pytest.raises(registry.RegistryError, match='registered twice'):
    reg.Register(_Make('lingvo_gshard.params.m4', 'TinyDense'))
  with pytest.raises(registry.RegistryError, match='not an Experiment subclass'):
    reg.Register(int)


def test_list_models_tool_runs_outside_the_repo(tmp_path):
  """The installed module runs from an unrelated directory and lists every registered experiment."""
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.list_models'], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  keys = params_lib.LoadAll().Keys()
  listed = [line.split()[0] for line in out.stdout.splitlines() if line.strip()]
  assert listed == keys
  bad = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.list_models', '--params=NoSuchModel'],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
  assert bad.returncode != 0 and "unknown experiment 'NoSuchModel'" in bad.stderr
