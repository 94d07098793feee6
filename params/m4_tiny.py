"""CPU-sized multilingual experiments on the embedded gettext corpus (100 languages -> English).

`M4TinyDense` and `M4TinyMoE` have the same per-token FLOPs: the MoE model's experts have half the dense
FFN's hidden size, and top-2 routing runs two of them per token (plus a router that costs M*E). Both are
small enough that a training step on 2 CPU cores takes well under a second.
"""
from lingvo_gshard.core import experiment
from lingvo_gshard.core import registry
from lingvo_gshard.core import sharding
from lingvo_gshard.input import pipeline
from lingvo_gshard.layers import moe_layer
from lingvo_gshard.models import transformer_mt


class M4TinyBase(experiment.Experiment):
  """Shared sizes of the tiny family (not registered)."""
  MODEL_DIM = 256
  NUM_HEADS = 4
  HIDDEN_DIM = 1024           # dense FFN hidden size
  NUM_LAYERS = 3              # per stack (encoder and decoder each)
  SOURCE_VOCAB = 16000        # 100 source languages share one SentencePiece model
  TARGET_VOCAB = 8000         # English
  NUM_EXPERTS = 0
  GROUP_SIZE = 256            # tokens routed together; divides both rows x lengths below
  DROPOUT = 0.1
  BATCH_ROWS = 16             # packed rows per step
  MAX_LENGTH = 64             # longest example kept (pieces + eos), either side
  # Sources run ~1.8x as many pieces as their English targets: rows of 128/80 come out ~95% full.
  PACKED_SOURCE_LENGTH = 128
  PACKED_TARGET_LENGTH = 80
  DATA_DIR = '/tmp/gshard_data'  # what the README's prepare_data command builds; --data_dir overrides
  LANGUAGES = ()              # empty: every language of the corpus
  TEMPERATURE = 5.0           # p_l ∝ n_l^(1/T), the M4 setting

  def ShardingRules(self):
    # Groups and batch on 'data'; experts on 'expert' when the mesh has it, else on 'data' (E = D layout);
    # heads/hidden/vocab on 'model' for tensor parallelism when asked for.
    return sharding.ShardingRules([
        ('batch', 'data'), ('group', 'data'),
        ('expert', 'expert'), ('expert', 'data'),
        ('heads', 'model'), ('hidden', 'model'), ('vocab', 'model'),
        ('length', None), ('model', None), ('capacity', None), ('kv', None), ('embed', None),
    ])

  def Task(self):
    p = transformer_mt.TransformerMT.Params().Set(
        name='mt', source_vocab_size=self.SOURCE_VOCAB, target_vocab_size=self.TARGET_VOCAB,
        model_dim=self.MODEL_DIM, num_heads=self.NUM_HEADS, hidden_dim=self.HIDDEN_DIM,
        input_dropout_prob=self.DROPOUT, label_smoothing=0.1, aux_loss_weight=0.01)
    for stack in (p.encoder, p.decoder):
      stack.num_layers = self.NUM_LAYERS
      stack.layer_tpl.Set(atten_dropout_prob=self.DROPOUT, residual_dropout_prob=self.DROPOUT)
      stack.layer_tpl.ffn_tpl.Set(relu_dropout_prob=self.DROPOUT)
      if self.NUM_EXPERTS:
        stack.moe_tpl = moe_layer.MoELayer.Params().Set(
            num_experts=self.NUM_EXPERTS, hidden_dim=self.HIDDEN_DIM // 2, group_size=self.GROUP_SIZE,
            capacity_factor=2.0, eval_capacity_factor=2.0, second_expert_policy='random')
        stack.moe_every = 2
    return p

  def Learner(self):
    p = super().Learner()
    p.optimizer.Set(learning_rate=1.0, warmup_steps=1000)
    p.Set(max_steps=20000, log_interval=20, eval_interval=1000, save_interval=1000)
    return p

  def _Input(self, split, repeat):
    return pipeline.MTInput.Params().Set(
        name=split, data_dir=self.DATA_DIR, split=split, languages=list(self.LANGUAGES),
        temperature=self.TEMPERATURE, repeat=repeat, batch_rows=self.BATCH_ROWS,
        max_source_length=self.MAX_LENGTH, max_target_length=self.MAX_LENGTH,
        packed_source_length=self.PACKED_SOURCE_LENGTH, packed_target_length=self.PACKED_TARGET_LENGTH,
        vocab=pipeline.VocabParams().Set(kind='separate', source_size=self.SOURCE_VOCAB,
                                         target_size=self.TARGET_VOCAB))

  def Train(self):
    return self._Input('train', repeat=True)

  def Dev(self):
    return self._Input('dev', repeat=False)

  def Test(self):
    return self._Input('test', repeat=False)


@registry.Register
class M4TinyDense(M4TinyBase):
  """Tiny dense Transformer (3+3 layers, M=256) on the 100-language gettext corpus."""


@registry.Register
class M4TinyMoE(M4TinyBase):
  """Tiny GShard MoE (3+3 layers, 16 experts every other FFN) with the dense model's per-token FLOPs."""
  NUM_EXPERTS = 16
