"""Params: definition, nesting, text round trip, overrides and their errors."""
import pytest
import tensorflow as tf

from lingvo_gshard.core import hyperparams
from lingvo_gshard.core import base_layer


def _Tree():
  moe = hyperparams.Params()
  moe.Define('num_experts', 8, 'Experts per MoE layer.')
  moe.Define('capacity_factor', 2.0, 'Capacity factor.')
  moe.Define('policy', 'all', 'Second-expert policy.')
  enc = hyperparams.Params()
  enc.Define('num_layers', 6, 'Encoder layers.')
  enc.Define('use_bias', True, 'Bias in projections.')
  enc.Define('dims', (4, 8), 'A tuple.')
  p = hyperparams.InstantiableParams(base_layer.BaseLayer)
  p.Define('encoder', enc, 'Encoder.')
  p.Define('moe', moe, 'MoE.')
  p.Define('dtype', tf.float32, 'Dtype.')
  p.Define('note', None, 'Optional note.')
  return p


def test_to_text_is_sorted_and_round_trips():
  p = _Tree()
  text = p.ToText()
  keys = [line.split(' : ')[0] for line in text.splitlines()]
  assert keys == sorted(keys)
  assert 'encoder.num_layers : 6' in text
  assert 'dtype : tf.float32' in text
  assert 'cls : type/lingvo_gshard.core.base_layer.BaseLayer' in text
  q = _Tree()
  q.Set(**{'encoder.num_layers': 1, 'moe.policy': 'random', 'dtype': tf.bfloat16, 'note': 'x'})
  assert q != p
  q.FromText(text)
  assert q == p and q.ToText() == text
  assert q.dtype == tf.float32 and q.encoder.dims == (4, 8) and q.note is None


def test_set_get_copy_freeze():
  p = _Tree()
  p.Set(**{'moe.num_experts': 16}).Set(note='hello')
  assert p.Get('moe.num_experts') == 16 and p.moe.num_experts == 16
  c = p.Copy()
  c.moe.num_experts = 4
  assert p.moe.num_experts == 16  # deep copy
  p.Freeze()
  with pytest.raises(hyperparams.ParamsError, match='frozen'):
    p.moe.num_experts = 2
  with pytest.raises(hyperparams.ParamsError, match='frozen'):
    p.Set(note='x')
  assert not p.Copy().frozen
  assert p.GetDoc('moe.capacity_factor') == 'Capacity factor.'


def test_override_string_with_type_checks():
  p = _Tree()
  p.Override('encoder.num_layers=4,moe.num_experts=16,moe.capacity_factor=1,moe.policy=sampling,'
             'encoder.dims=(2, 3),encoder.use_bias=False,dtype=tf.bfloat16')
  assert p.encoder.num_layers == 4 and p.moe.num_experts == 16
  assert p.moe.capacity_factor == 1.0 and isinstance(p.moe.capacity_factor, float)
  assert p.moe.policy == 'sampling' and p.encoder.dims == (2, 3) and p.encoder.use_bias is False
  assert p.dtype == tf.bfloat16


@pytest.mark.parametrize('override,message', [
    ('encoder.num_layrs=4', r"unknown param 'encoder.num_layrs'; closest: encoder.num_layers"),
    ('moe.num_expert=4', r"closest: moe.num_experts"),
    ('encoder.num_layers=four', r"param 'encoder.num_layers': cannot parse 'four' as int"),
    ('encoder.num_layers=2.5', r"param 'encoder.num_layers': expected int"),
    ('encoder.use_bias=1', r"param 'encoder.use_bias': expected bool"),
    ('moe=3', r"param 'moe': is a nested params object"),
    ('dtype=tf.float99', r"unknown dtype 'tf.float99'"),
    ('encoder.num_layers', r'is not of the form name=value'),
])
def test_override_errors_name_the_key(override, message):
  with pytest.raises(hyperparams.ParamsError, match=message) as e:
    _Tree().Override(override)
  assert '\n' not in str(e.value)


def test_define_errors():
  p = hyperparams.Params()
  p.Define('a', 1, 'A.')
  with pytest.raises(hyperparams.ParamsError, match='already defined'):
    p.Define('a', 2, 'A again.')
  with pytest.raises(hyperparams.ParamsError, match='documentation'):
    p.Define('b', 2, '')
  with pytest.raises(hyperparams.ParamsError, match='invalid param name'):
    p.Define('b.c', 2, 'Dotted.')
  with pytest.raises(AttributeError, match="unknown param 'aa'"):
    _ = p.aa
  with pytest.raises(hyperparams.ParamsError, match='line 1'):
    p.FromText('a = 3')


def test_instantiate():
  p = base_layer.BaseLayer.Params().Set(name='foo')
  layer = p.Instantiate()
  assert isinstance(layer, base_layer.BaseLayer) and layer.path == 'foo' and layer.p.frozen


def test_a_float_param_an_experiment_set_with_an_int_reads_back_the_float_a_tool_wrote():
  """learner.max_train_seconds is a float param; an experiment sets it with 900 (an int), the trainer's
  --max_train_seconds=0 writes 0.0 into params.txt: the run's params.txt must load (the evaluator rebuilds
  the run from it), and the param's domain, not the int it happened to hold, decides what it may be."""
  from lingvo_gshard import params as params_lib  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.core import experiment  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.core import registry  # pylint: disable=g-import-not-at-top
  params_lib.LoadAll()
  root = experiment.ExperimentParams(registry.Get('M4TinyMoEDemo'))
  assert root.learner.max_train_seconds == 900 and isinstance(root.learner.max_train_seconds, int)
  experiment.ApplyOverrides(root, 'learner.max_train_seconds : 0.0; task.encoder.num_layers : 3.0')
  assert root.learner.max_train_seconds == 0.0 and isinstance(root.learner.max_train_seconds, float)
  with pytest.raises(hyperparams.ParamsError, match=r'task.encoder.num_layers = 3.0: must be an integer >= 1'):
    root.Validate()  # an int param given an integral float: its domain refuses it
