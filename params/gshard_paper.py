"""The paper's model family (GShard Table 1): MoE Transformers with 128-2048 experts, 12-60 layers, and the
dense T(96L) baseline. Paper dimensions: M=1024, H=8192, 16 heads, 64k source / 32k target vocabularies.

Heads are M/16 = 64 wide. The paper's text gives a key/value dim of 128, but Table 1's dense T(96L) = 2.3B
only fits 64: with 128 its 96 self- and 48 cross-attentions would add 0.6B (2.91B, +27%); with 64 it counts
2.31B (+0.6%). The MoE rows hardly depend on it (experts are 98% of them).

These cannot be trained here; they are built (weights declared, not allocated) and analysed by
`tools/model_analysis.py`. "L" counts encoder and decoder layers together (12L = 6 + 6); every other FFN is
an MoE layer. The default mesh puts one expert per device (E = D), the paper's layout.
"""
from lingvo_gshard.core import experiment
from lingvo_gshard.core import hyperparams
from lingvo_gshard.core import registry
from lingvo_gshard.input import pipeline
from lingvo_gshard.layers import moe_layer
from lingvo_gshard.models import transformer_mt


class GShardPaperBase(experiment.Experiment):
  """Base of the paper's family (not registered)."""
  NUM_LAYERS = 12          # encoder + decoder
  NUM_EXPERTS = 0          # 0 = dense
  MODEL_DIM = 1024
  HIDDEN_DIM = 8192
  NUM_HEADS = 16
  SOURCE_VOCAB = 64000
  TARGET_VOCAB = 32000
  GROUP_SIZE = 1024        # tokens routed together
  CAPACITY_FACTOR = 2.0    # C = 2S/E, the paper's capacity
  DROPOUT = 0.1

  @property
  def DEFAULT_MESH(self):  # pylint: disable=invalid-name
    return f'data:{self.NUM_EXPERTS}' if self.NUM_EXPERTS else 'data:1'

  def Task(self) -> hyperparams.InstantiableParams:
    p = transformer_mt.TransformerMT.Params().Set(
        name='mt', source_vocab_size=self.SOURCE_VOCAB, target_vocab_size=self.TARGET_VOCAB,
        model_dim=self.MODEL_DIM, num_heads=self.NUM_HEADS, hidden_dim=self.HIDDEN_DIM,
        input_dropout_prob=self.DROPOUT, label_smoothing=0.1, aux_loss_weight=0.01)
    for stack in (p.encoder, p.decoder):
      stack.num_layers = self.NUM_LAYERS // 2
      stack.layer_tpl.Set(atten_dropout_prob=self.DROPOUT, residual_dropout_prob=self.DROPOUT)
      stack.layer_tpl.ffn_tpl.Set(relu_dropout_prob=self.DROPOUT)
      if self.NUM_EXPERTS:
        stack.moe_tpl = moe_layer.MoELayer.Params().Set(
            num_experts=self.NUM_EXPERTS, group_size=self.GROUP_SIZE, capacity_factor=self.CAPACITY_FACTOR,
            eval_capacity_factor=self.CAPACITY_FACTOR, second_expert_policy='random')
        stack.moe_every = 2
        stack.remat = True  # the paper rematerialises to keep per-device memory O(1) in E
    return p

  def Learner(self):
    p = super().Learner()
    # The paper: Adafactor (beta1 = 0, decay 1 - t^-0.8, clipping 1.0), lr 1.0, rsqrt decay after 10k steps.
    p.optimizer.Set(learning_rate=1.0, warmup_steps=10000)
    p.max_steps = 500000
    return p

  def Train(self):
    # The paper's data (25B examples) is not here; the params still say how this model is fed: ~1M target
    # tokens per step in packed rows of 256.
    return pipeline.MTInput.Params().Set(
        name='train', split='train', batch_rows=4096, packed_source_length=256, packed_target_length=256,
        vocab=pipeline.VocabParams().Set(kind='separate', source_size=self.SOURCE_VOCAB,
                                         target_size=self.TARGET_VOCAB))


def _Family(name, layers, experts, doc):
  cls = type(name, (GShardPaperBase,), {'NUM_LAYERS': layers, 'NUM_EXPERTS': experts, '__doc__': doc,
                                        '__module__': __name__})
  return registry.Register(cls)


MoE128E12L = _Family('MoE128E12L', 12, 128, 'GShard MoE(128E, 12L), 12.5B parameters in the paper.')
MoE128E36L = _Family('MoE128E36L', 36, 128, 'GShard MoE(128E, 36L), 37B parameters in the paper.')
MoE512E12L = _Family('MoE512E12L', 12, 512, 'GShard MoE(512E, 12L), 50B parameters in the paper.')
MoE512E36L = _Family('MoE512E36L', 36, 512, 'GShard MoE(512E, 36L), 150B parameters in the paper.')
MoE2048E12L = _Family('MoE2048E12L', 12, 2048, 'GShard MoE(2048E, 12L), 200B parameters in the paper.')
MoE2048E36L = _Family('MoE2048E36L', 36, 2048, 'GShard MoE(2048E, 36L), 600B: the flagship (44.3 BLEU).')
MoE2048E60L = _Family('MoE2048E60L', 60, 2048, 'GShard MoE(2048E, 60L), 1T parameters (unstable).')
Dense96L = _Family('Dense96L', 96, 0, 'Dense Transformer T(96L), 2.3B parameters: the paper\'s baseline.')

# Table 1 of the paper: total parameters per experiment (for the analysis tool and its test).
PAPER_PARAMS = {
    'MoE128E12L': 12.5e9, 'MoE128E36L': 37e9, 'MoE512E12L': 50e9, 'MoE512E36L': 150e9,
    'MoE2048E12L': 200e9, 'MoE2048E36L': 600e9, 'MoE2048E60L': 1e12, 'Dense96L': 2.3e9,
}
