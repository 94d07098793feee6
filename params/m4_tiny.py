"""CPU-sized multilingual experiments on the embedded gettext corpus (100 languages -> English).

`M4TinyDense`, `M4TinyMoE` and `M4TinyMoE64` have the same per-token FLOPs: the MoE model's experts have half the dense
FFN's hidden size, and top-2 routing runs two of them per token (plus a router that costs M*E). Both are
small enough to train on a CPU of a few cores (step times per machine: docs/guides/performance.md).

Two recipes, one class constant block apart (docs/experiments/recipe_search/README.md has the figures behind them):
  M4TinyMoEDemo, M4TinyDenseDemo   the 15-minute CPU budget of the README's main job: as many steps as
                                   fit (learner.max_train_seconds) of a smaller model (M=128, 2+2 layers)
                                   on twice the rows, a cosine schedule from a 100-step warm-up to the last
                                   step (peak 0.05), no dropout, Adafactor with momentum 0.9;
  M4TinyMoE, M4TinyDense           the 2-hour budget: 8,500 steps, the same schedule, dropout 0.1 on the
                                   input and the residual branches only (attention and ReLU dropout cost
                                   more step time than they gave back in steps).
Both use an 8k source / 4k English SentencePiece vocabulary: the softmax was ~23% of the FLOPs at 8k.
The experiments leave two choices to the machine they run on (the runtime makes them, `runtime/hardware.py`):
where the processor has bfloat16 matmuls (AMX / AVX512_BF16 CPUs, GPUs, TPUs) activations train in bfloat16
with 32 rows a step (the demo 64), elsewhere in float32 with half the rows. params.txt records the choice;
decoding runs float32 either way.
"""
from lingvo_gshard.core import experiment
from lingvo_gshard.core import registry
from lingvo_gshard.core import sharding
from lingvo_gshard.input import pipeline
from lingvo_gshard.layers import moe_layer
from lingvo_gshard.models import transformer_mt
from lingvo_gshard.utils import paths


class M4TinyBase(experiment.Experiment):
  """Shared sizes of the tiny family (not registered)."""
  MODEL_DIM = 256
  NUM_HEADS = 4
  HIDDEN_DIM = 1024           # dense FFN hidden size
  NUM_LAYERS = 3              # per stack (encoder and decoder each)
  SOURCE_VOCAB = 8000         # 100 source languages share one SentencePiece model
  TARGET_VOCAB = 4000         # English
  NUM_EXPERTS = 0
  GROUP_SIZE = 256            # tokens routed together; divides both rows x lengths below
  DROPOUT = 0.1               # on the embeddings' output and every residual branch
  INNER_DROPOUT = 0.0         # on attention probabilities and the FFN's ReLU (the largest tensors)
  EXPERT_DROPOUT = 0.0        # on the MoE experts' ReLU (Switch Transformer's expert dropout; 0: INNER's)
  FPROP_DTYPE = 'auto'        # activation dtype; 'auto': the runtime's choice (bfloat16 where it is fast)
  # Packed rows per step; 0: the runtime picks from AUTO_BATCH_ROWS: (where bfloat16 is fast, elsewhere).
  # 32 rows are ~2,300 target tokens. Float32 activations make a step of as many rows slower, so float32 runs
  # take half the rows and keep a step's time near the recipe's (docs/guides/performance.md).
  BATCH_ROWS = 0
  AUTO_BATCH_ROWS = (32, 16)
  MAX_LENGTH = 64             # longest example kept (pieces + eos), either side
  # Sources run ~1.8x as many pieces as their English targets: rows of 128/80 come out ~95% full.
  PACKED_SOURCE_LENGTH = 128
  PACKED_TARGET_LENGTH = 80
  DECODE_FIRST_CACHE_LENGTH = 8  # decode loops' caches grow from this; >= MAX_LENGTH: one loop, fastest to compile
  DATA_DIR = ''               # '': the default data directory (paths.DefaultDataDir()); --data_dir overrides
  LANGUAGES = ()              # empty: every language of the corpus
  TEMPERATURE = 5.0           # p_l ∝ n_l^(1/T), the M4 setting
  # The recipe: Adafactor (the paper's optimizer) with a schedule that ends where the run does.
  MAX_STEPS = 8500            # the 2-hour budget (bfloat16, 32 rows; times: docs/experiments/recipe_search/README.md)
  MAX_TRAIN_SECONDS = 0       # > 0: a wall-clock budget that sizes the run to the machine (MAX_STEPS caps it)
  SCHEDULE = 'cosine'         # warm-up, then a half cosine to 0 at MAX_STEPS
  LEARNING_RATE = 0.03        # peak (Adafactor scales it by each weight's RMS)
  BETA1 = 0.0                 # Adafactor momentum; 0: the paper's (no slot)
  WARMUP_STEPS = 100
  LABEL_SMOOTHING = 0.1
  SAVE_INTERVAL = 500

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
        input_dropout_prob=self.DROPOUT, label_smoothing=self.LABEL_SMOOTHING, aux_loss_weight=0.01,
        fprop_dtype=self.FPROP_DTYPE, decode_first_cache_length=self.DECODE_FIRST_CACHE_LENGTH)
    for stack in (p.encoder, p.decoder):
      stack.num_layers = self.NUM_LAYERS
      stack.layer_tpl.Set(atten_dropout_prob=self.INNER_DROPOUT, residual_dropout_prob=self.DROPOUT)
      stack.layer_tpl.ffn_tpl.Set(relu_dropout_prob=self.INNER_DROPOUT)
      if self.NUM_EXPERTS:
        stack.moe_tpl = moe_layer.MoELayer.Params().Set(
            num_experts=self.NUM_EXPERTS, hidden_dim=self.HIDDEN_DIM // 2, group_size=self.GROUP_SIZE,
            capacity_factor=2.0, eval_capacity_factor=2.0, second_expert_policy='random',
            relu_dropout_prob=self.EXPERT_DROPOUT or self.INNER_DROPOUT)
        stack.moe_every = 2
    return p

  def Learner(self):
    p = super().Learner()
    p.optimizer.Set(learning_rate=self.LEARNING_RATE, warmup_steps=self.WARMUP_STEPS, schedule=self.SCHEDULE,
                    beta1=self.BETA1)
    p.Set(max_steps=self.MAX_STEPS, max_train_seconds=self.MAX_TRAIN_SECONDS, log_interval=20,
          eval_interval=self.SAVE_INTERVAL, save_interval=self.SAVE_INTERVAL, keep_checkpoints=5,
          keep_checkpoint_every_n_hours=0.25)
    return p

  def _Input(self, split, repeat):
    return pipeline.MTInput.Params().Set(
        name=split, data_dir=self.DATA_DIR or paths.DefaultDataDir(), split=split,
        languages=list(self.LANGUAGES),
        temperature=self.TEMPERATURE, repeat=repeat, batch_rows=self.BATCH_ROWS,
        auto_batch_rows=self.AUTO_BATCH_ROWS,
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
  # Without it the experts' 8x FFN weights memorise this small corpus: dev cross-entropy rises above the
  # dense model's in the second half of the schedule (docs/experiments/m4_tiny/README.md).
  EXPERT_DROPOUT = 0.4


@registry.Register
class M4TinyMoE64(M4TinyMoE):
  """M4TinyMoE with 64 experts: 4x the expert weights at the same per-token FLOPs (top-2 of 64 experts as
  wide as before; only the router grows, M*E): the paper's larger-MoE point of its Delta-BLEU figure."""
  NUM_EXPERTS = 64


class _Demo:
  """The 15-minute recipe (mixed into both models): a smaller model (M=128, 2+2 layers) on twice the rows,
  as many steps as 15 minutes of training fit on this machine (the trainer times the first ones and ends the
  schedule there; budget.json records the count), no dropout, Adafactor with momentum (in so few steps
  momentum's faster start outweighs its extra weight-sized slot). 15 CPU-minutes are a small compute budget:
  the model that learns most in them is smaller than the 2-hour one and sees more tokens
  (docs/experiments/recipe_search/README.md)."""
  MAX_TRAIN_SECONDS = 900
  MAX_STEPS = 5000            # the cap: a machine fast enough to pass it trains 5,000 steps in < 15 minutes
  MODEL_DIM = 128
  HIDDEN_DIM = 512            # dense FFN; each expert 256
  NUM_LAYERS = 2
  DROPOUT = 0.0
  EXPERT_DROPOUT = 0.0
  SAVE_INTERVAL = 400
  BETA1 = 0.9
  LEARNING_RATE = 0.05        # the smaller model on twice the rows takes a higher peak than the 2-hour one
  AUTO_BATCH_ROWS = (64, 32)  # twice the 2-hour model's: small matmuls use the CPU better batched


@registry.Register
class M4TinyDenseDemo(_Demo, M4TinyDense):
  """M4TinyDense trained for the README's 15-minute CPU budget (steps sized to the machine, no dropout)."""


@registry.Register
class M4TinyMoEDemo(_Demo, M4TinyMoE):
  """M4TinyMoE trained for the README's 15-minute CPU budget (steps sized to the machine, no dropout): the
  main job."""
