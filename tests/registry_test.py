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


def test_a_family_makes_the_names_it_covers_on_first_use(reg):
  made = []

  def Factory(suffix):
    if suffix == 'bad':
      raise registry.RegistryError(f'Bilingual_{suffix}: no such language')
    made.append(suffix)
    return reg.Register(type(f'Bilingual_{suffix}', (experiment.Experiment,),
                             {'__module__': 'lingvo_gshard.params.bilingual'}))

  reg.RegisterFamily('Bilingual_', Factory)
  assert reg.GetClass('Bilingual_de').__name__ == 'Bilingual_de' and made == []  # registered ones first
  assert reg.GetClass('Bilingual_sw').__name__ == 'Bilingual_sw' and made == ['sw']
  assert reg.GetClass('Bilingual_sw') is reg.GetClass('bilingual.Bilingual_sw') and made == ['sw']  # once
  with pytest.raises(registry.RegistryError, match='^Bilingual_bad: no such language$'):
    reg.GetClass('Bilingual_bad')
  with pytest.raises(registry.RegistryError, match="unknown experiment 'Bilingual_'"):
    reg.GetClass('Bilingual_')


def test_a_bilingual_baseline_exists_for_any_language_tag(monkeypatch):
  params_lib.LoadAll()
  # What this test makes is not left in the shared registry (other tests compare it with a fresh process's).
  monkeypatch.setattr(registry.REGISTRY, '_classes', dict(registry.REGISTRY._classes))
  assert registry.GetClass('Bilingual_sw').LANGUAGE == 'sw'  # not one of the gettext corpus' 100
  assert registry.GetClass('Bilingual_zh_Hant') is registry.GetClass('Bilingual_zh_TW')  # the corpus' tag
  with pytest.raises(registry.RegistryError, match=r"^Bilingual_fre: write 'fre' as fr \(French\)"):
    registry.GetClass('Bilingual_fre')
  with pytest.raises(registry.RegistryError, match=r"^Bilingual_zzzz1: 'zzzz1' is not a registered language tag"):
    registry.GetClass('Bilingual_zzzz1')
