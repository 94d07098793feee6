"""An experiment's params as one tree (task, learner, input.<split>), overrides in both syntaxes, and the
params of a run read back from its params.txt."""
import pytest

from lingvo_gshard.core import experiment
from lingvo_gshard.core import hyperparams
from lingvo_gshard.params import m4_tiny


def test_tree_has_every_section_and_data_dir_override():
  root = experiment.ExperimentParams(m4_tiny.M4TinyMoE(), data_dir='/data/x')
  assert root.task.encoder.moe_tpl.num_experts == 16
  assert root.learner.max_steps == m4_tiny.M4TinyMoE().Learner().max_steps
  assert [s for s in experiment.SPLITS if s in root.input] == ['train', 'dev', 'test']
  assert all(root.input.Get(s).data_dir == '/data/x' for s in experiment.SPLITS)
  # Expert dropout on the 2-hour MoE recipes only: the dense FFNs keep none, the 15-minute demo no dropout.
  assert [root.task.Get(f'{s}.moe_tpl.relu_dropout_prob') for s in ('encoder', 'decoder')] == [0.4, 0.4]
  assert root.task.encoder.layer_tpl.ffn_tpl.relu_dropout_prob == 0.0
  assert m4_tiny.M4TinyMoE64().Task().decoder.moe_tpl.relu_dropout_prob == 0.4
  assert m4_tiny.M4TinyMoEDemo().Task().encoder.moe_tpl.relu_dropout_prob == 0.0


def test_both_override_syntaxes_reach_every_section():
  root = experiment.ExperimentParams(m4_tiny.M4TinyDense())
  applied = experiment.ApplyOverrides(root, "task.encoder.num_layers : 4; learner.optimizer.schedule : cosine;"
                                      "\ninput.train.batch_rows : 8; learner.optimizer.learning_rate : 0.05")
  assert (root.task.encoder.num_layers, root.learner.optimizer.schedule, root.input.train.batch_rows,
          root.learner.optimizer.learning_rate) == (4, 'cosine', 8, 0.05)
  assert applied[1] == "learner.optimizer.schedule : 'cosine'"
  experiment.ApplyOverrides(root, 'decoder.num_layers=2,learner.max_steps=7,input.dev.languages=[\'de\', \'fr\']')
  assert (root.task.decoder.num_layers, root.learner.max_steps, root.input.dev.languages) == (2, 7, ['de', 'fr'])
  with pytest.raises(hyperparams.ParamsError, match=r"unknown param 'learner.max_step'; closest: learner.max_steps"):
    experiment.ApplyOverrides(root, 'learner.max_step : 3')
  with pytest.raises(hyperparams.ParamsError, match=r"param 'task.model_dim': cannot parse 'wide' as int"):
    experiment.ApplyOverrides(root, 'model_dim=wide')
  with pytest.raises(hyperparams.ParamsError, match=r"override 'num_layers 4' is not of the form"):
    experiment.ApplyOverrides(root, 'num_layers 4')


def test_run_params_round_trip_through_params_txt(tmp_path):
  root = experiment.ExperimentParams(m4_tiny.M4TinyMoE())
  experiment.ApplyOverrides(root, 'task.encoder.num_layers : 5; input.train.vocab.source_size : 4000')
  (tmp_path / 'params.txt').write_text('# experiment: x\n' + root.ToText())
  loaded = experiment.LoadRunParams(m4_tiny.M4TinyMoE(), str(tmp_path), data_dir='/elsewhere')
  assert loaded.task.encoder.num_layers == 5 and loaded.input.train.vocab.source_size == 4000
  assert loaded.input.test.data_dir == '/elsewhere'
  assert loaded.ToText().replace('/elsewhere', 'D') == root.ToText().replace(root.input.train.data_dir, 'D')
  # A dense experiment cannot be restored from an MoE run's params.
  with pytest.raises(hyperparams.ParamsError, match=r"params.txt: .* is not a param of M4TinyDense"):
    experiment.LoadRunParams(m4_tiny.M4TinyDense(), str(tmp_path))
  # Params retired since a run was trained (they never changed what it computes) are skipped; any other
  # unknown key still fails.
  (tmp_path / 'params.txt').write_text(root.ToText() + 'task.encoder.moe_tpl.xla_islands : None\n')
  assert experiment.LoadRunParams(m4_tiny.M4TinyMoE(), str(tmp_path)).task.encoder.num_layers == 5
  (tmp_path / 'params.txt').write_text(root.ToText() + 'task.encoder.moe_tpl.islands : None\n')
  with pytest.raises(hyperparams.ParamsError, match="'task.encoder.moe_tpl.islands' is not a param"):
    experiment.LoadRunParams(m4_tiny.M4TinyMoE(), str(tmp_path))
