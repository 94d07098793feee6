"""Declared param domains: generated over every registered experiment and every param that declares one.

Each experiment's defaults are in their domains; each param set outside its domain is refused by Validate in
one line that starts with the full key as a user types it in --model_params_override; the trainer binary
refuses bad overrides before it creates anything; the domains themselves follow their definitions
(property-based, with hypothesis).
"""
import os
import random
import subprocess
import sys

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest
import tensorflow as tf

from lingvo_gshard import params as params_lib
from lingvo_gshard.core import domains
from lingvo_gshard.core import experiment
from lingvo_gshard.core import hyperparams

_REGISTRY = params_lib.LoadAll()
# Every experiment but the 100 bilingual baselines, which share one shape: 5 of those, drawn with a fixed seed.
_BILINGUAL = sorted(k for k in _REGISTRY.Keys() if k.startswith('bilingual.'))
_KEYS = sorted(set(_REGISTRY.Keys()) - set(_BILINGUAL)) + random.Random(35).sample(_BILINGUAL, 5)


def _Root(key):
  return experiment.ExperimentParams(_REGISTRY.GetClass(key)())


def _Declared(root):
  return [(key, root.GetDomain(key)) for key, _ in root.IterParams() if root.GetDomain(key) is not None]


@pytest.mark.parametrize('key', _KEYS)
def test_defaults_are_in_their_domains_and_every_domain_refuses_outside_values(key):
  root = _Root(key)
  assert root.Violations() == []
  declared = _Declared(root)
  assert len(declared) >= 40, key  # model, learner, optimizer and input params all declare theirs
  for name, domain in declared:
    bad = root.Copy()
    value = domain.Outside()
    bad.Set(**{name: value})
    with pytest.raises(hyperparams.ParamsError) as e:
      bad.Validate()
    message = str(e.value)
    assert '\n' not in message and message.startswith(f'{name} = '), (name, message)
    assert str(domain) in message or 'must' in message, (name, message)


def test_cross_param_rules_name_the_key():
  root = _Root('M4TinyMoE')
  root.Set(**{'task.num_heads': 3})
  with pytest.raises(hyperparams.ParamsError, match=r'^task\.num_heads = 3: must divide model_dim \(256\)$'):
    root.Validate()


def test_violations_are_counted_in_one_line():
  root = _Root('M4TinyMoE')
  experiment.ApplyOverrides(root, 'learner.optimizer.learning_rate : -0.1; task.input_dropout_prob : 1.5')
  with pytest.raises(hyperparams.ParamsError) as e:
    root.Validate()
  assert str(e.value) == 'task.input_dropout_prob = 1.5: must be in [0, 1) (and 1 more)'
  assert root.Violations()[1] == 'learner.optimizer.learning_rate = -0.1: must be > 0'


def test_a_layer_built_from_unchecked_params_still_refuses_its_own_bad_values():
  task = _Root('M4TinyDense').task
  task.Set(label_smoothing=1.0)
  with pytest.raises(hyperparams.ParamsError, match=r'^mt: label_smoothing = 1.0: must be in \[0, 1\)$'):
    task.Instantiate()


def test_params_text_with_docs_shows_each_domain():
  text = _Root('M4TinyMoE').ToText(include_docs=True)
  lines = text.splitlines()
  i = lines.index('task.input_dropout_prob : 0.1')
  assert lines[i - 1].endswith('[[0, 1)]')
  i = lines.index("learner.on_nonfinite : 'stop'")
  assert lines[i - 1].endswith("[{'stop', 'skip'}]")


@settings(max_examples=200, deadline=None, derandomize=True)
@given(lo=st.integers(-5, 5), width=st.integers(0, 5), lo_open=st.booleans(), hi_open=st.booleans(),
       x=st.floats(-20, 20, allow_nan=False))
def test_range_contains_exactly_its_interval(lo, width, lo_open, hi_open, x):
  hi = lo + width
  d = domains.Range(lo, hi, lo_open=lo_open, hi_open=hi_open)
  inside = (x > lo if lo_open else x >= lo) and (x < hi if hi_open else x <= hi)
  assert (d.Check(x) is None) == inside
  assert d.Check(d.Outside()) is not None


@settings(max_examples=100, deadline=None, derandomize=True)
@given(x=st.one_of(st.integers(-10, 10), st.floats(allow_nan=True), st.booleans(), st.text(max_size=3)))
def test_integer_domains_take_integers_only(x):
  d = domains.Positive(int)
  ok = isinstance(x, int) and not isinstance(x, bool) and x >= 1
  assert (d.Check(x) is None) == ok


def test_one_of_compares_type_and_value():
  d = domains.OneOf(None, 'auto', tf.float32)
  assert d.Check(None) is None and d.Check('auto') is None and d.Check(tf.float32) is None
  assert d.Check(tf.float16) and d.Check('float32') and d.Check(0)
  assert str(d) == "{None, 'auto', tf.float32}"


@pytest.mark.parametrize('override, key', [
    ('learner.optimizer.learning_rate : -0.1', 'learner.optimizer.learning_rate = -0.1: must be > 0'),
    ('task.input_dropout_prob : 1.5', 'task.input_dropout_prob = 1.5: must be in [0, 1)'),
    ('task.num_heads : 3', 'task.num_heads = 3: must divide model_dim (128)'),
    ('learner.save_interval : 0', 'learner.save_interval = 0: must be an integer >= 1'),
])
def test_the_trainer_refuses_a_bad_override_before_creating_anything(tmp_path, override, key):
  logdir = tmp_path / 'run'
  out = subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.trainer', '--model=M4TinyMoEDemo',
                        f'--logdir={logdir}', f'--model_params_override={override}'],
                       capture_output=True, text=True, timeout=300)
  err = [l for l in out.stderr.splitlines() if l.startswith('trainer:')]
  assert out.returncode == 1 and err == [f'trainer: {key}'], out.stderr[-2000:]
  assert 'Traceback' not in out.stderr
  assert not os.path.exists(logdir)
