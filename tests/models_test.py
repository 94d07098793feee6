"""One test per registered experiment (Lingvo's models_test habit): every experiment builds.

Building declares the model's weights without allocating them (so the paper's 600B models are checked too),
prints its params, and resolves every weight's layout on the experiment's default mesh.
"""
import pytest

from lingvo_gshard import params as params_lib
from lingvo_gshard.core import experiment
from lingvo_gshard.core import hyperparams
from lingvo_gshard.core import registry

_KEYS = params_lib.LoadAll().Keys()


@pytest.mark.parametrize('name', _KEYS)
def test_experiment_builds(name):
  exp = registry.Get(name)
  task = exp.Task()
  text = task.ToText()
  assert text.count('\n') >= 3
  again = task.Copy().FromText(text)
  assert again.ToText() == text
  model = task.Instantiate()
  specs = list(model.IterWeightSpecs())
  assert specs and model.NumParams() > 0
  partitioner = exp.Partitioner('xla', exp.DEFAULT_MESH)
  for path, spec in specs:
    partitioner.MeshAxes(spec.logical_axes, spec.shape, what=path)
  assert isinstance(exp.Learner(), hyperparams.Params)
  assert experiment.ResolveLearner(exp.Learner()).optimizer.Instantiate()
  if exp.Train() is not None:
    assert exp.TokensPerStep() > 0
  assert exp.Summary()


def test_every_registering_module_is_listed():
  """A params module that registers experiments but is missing from EXPERIMENT_MODULES would be invisible."""
  import os
  import lingvo_gshard.params as params_pkg
  folder = os.path.dirname(params_pkg.__file__)
  registering = sorted(f[:-3] for f in os.listdir(folder)
                       if f.endswith('.py') and 'registry.Register' in open(os.path.join(folder, f)).read())
  assert sorted(params_pkg.EXPERIMENT_MODULES) == registering


def test_bilingual_baselines_cover_the_corpus_languages():
  from lingvo_gshard.params import bilingual
  langs = bilingual.M4_LANGUAGES
  assert len(langs) == 100 and len(set(langs)) == 100
  for code in langs:
    exp = registry.Get(f'Bilingual_{code}')  # the language code as written, hyphen and all
    assert exp.LANGUAGE == code
    for split in (exp.Train(), exp.Dev(), exp.Test()):
      assert split.languages == [code]
    assert exp.Task().encoder.moe_tpl is None  # dense baselines
  # Same vocabulary as the multilingual models, so BLEU compares like with like.
  multi = registry.Get('M4TinyMoE').Train().vocab
  assert registry.Get('Bilingual_de').Train().vocab.ToText() == multi.ToText()
