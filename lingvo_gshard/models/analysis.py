"""Model analysis without allocating weights: parameters, FLOPs, per-device memory, all-to-all traffic.

Conventions (stated because the paper's Table 1 does not state its own):
  - total_params: every declared weight, embeddings and softmax included, counted in units of 1 (not 2^30).
  - active_params_per_token: weights a token's computation touches: everything but the experts, plus k
    experts per MoE layer (k = 2 for top-2, 1 for top-1; expert-choice: capacity_factor on average).
  - flops_per_token (forward): 2 x (active matmul parameters, embedding lookup excluded, softmax and the
    routers' M x E gates included) + attention scores and context (4 x context length x M per attention
    sub-layer). Training is ~3x this.
  - bytes_per_device: weights (float32 unless declared otherwise), each sharded as the rules put it on the
    mesh; optimizer state as the optimizer's own SlotSpecs declare it (default Adafactor: factored second
    moments, rows + columns per matrix, beta1 = 0), each slot sharded like the weight's axes it keeps.
  - all_to_all_bytes_per_moe_layer: the dispatched [E,G,C,M] buffer leaves each device's group shard for the
    expert shards, forward and back, in the forward and the backward pass (4 transfers), per device.
"""
import dataclasses
import math
from typing import Dict, List

from lingvo_gshard.core import base_layer
from lingvo_gshard.core import registry
from lingvo_gshard.core import sharding
from lingvo_gshard.layers import attention
from lingvo_gshard.layers import gating as gating_lib
from lingvo_gshard.layers import moe_layer


@dataclasses.dataclass
class Analysis:
  name: str
  mesh: str
  total_params: int
  expert_params: int
  active_params_per_token: int
  flops_per_token: float
  encoder_flops_per_token: float
  decoder_flops_per_token: float
  bytes_per_device: int
  optimizer_bytes_per_device: int
  activation_bytes_per_device: int
  all_to_all_bytes_per_moe_layer: int
  num_moe_layers: int
  num_experts: int

  def AsDict(self) -> Dict:
    return dataclasses.asdict(self)


def _ExpertsPerToken(layer: moe_layer.MoELayer) -> float:
  p = layer.p
  if p.gating == 'top2':
    return 2.0
  if p.gating == 'top1':
    return 1.0
  return p.capacity_factor  # expert-choice: E*C slots over S tokens = cf per token on average


def Analyze(name: str, model: base_layer.BaseLayer, partitioner: sharding.Partitioner, tokens_per_step: int,
            seq_len: int, remat: bool = True, optimizer=None) -> Analysis:
  """Analyses a built (not necessarily instantiated) model for `tokens_per_step` tokens on the mesh;
  `optimizer`: its params (default Adafactor's), whose SlotSpecs give the optimizer state."""
  from lingvo_gshard.core import optimizers  # pylint: disable=g-import-not-at-top
  opt = (optimizer or optimizers.Adafactor.Params()).Instantiate()
  specs = list(model.IterWeightSpecs())
  total = sum(s.size for _, s in specs)
  expert = sum(s.size for _, s in specs if 'expert' in s.logical_axes)
  layers = list(model.IterLayers())
  moes = [l for l in layers if isinstance(l, moe_layer.MoELayer)]
  in_encoder = lambda path: '.encoder.' in path
  active = total - expert
  enc_active = sum(s.size for path, s in specs if in_encoder(path) and 'expert' not in s.logical_axes)
  # The router's [M,E] gate is a replicated matmul weight, already in `active`.
  for l in moes:
    per_token = int(2 * l.p.input_dim * l.p.hidden_dim * _ExpertsPerToken(l))
    active += per_token
    if in_encoder(l.path + '.'):
      enc_active += per_token
  # Embedding lookups are gathers, not matmuls; a tied softmax still multiplies by the target embedding.
  lookups = sum(s.size for path, s in specs if path.endswith(('src_emb.emb', 'pos_emb')))
  matmul_active = active - lookups
  attn_layers = [l for l in layers if isinstance(l, attention.MultiHeadAttention)]
  attn = lambda ls: sum(4 * seq_len * l.p.num_heads * l.dim_per_head for l in ls)
  attn_flops = attn(attn_layers)
  enc_attn = attn([l for l in attn_layers if in_encoder(l.path + '.')])
  flops = 2 * matmul_active + attn_flops
  enc_flops = 2 * enc_active + enc_attn

  mesh = partitioner.mesh
  weight_bytes = optimizer_bytes = 0
  for path, s in specs:
    local = partitioner.ShardShape(s.shape, s.logical_axes, what=path)
    weight_bytes += math.prod(local) * s.dtype.size
    if s.trainable:
      for slot, (shape, axes) in opt.SlotSpecs(s).items():
        optimizer_bytes += math.prod(partitioner.ShardShape(shape, axes, what=f'{path}/{slot}')) * 4
  tokens_per_device = tokens_per_step / mesh.size
  m = getattr(model.p, 'model_dim', 0) or (moes[0].p.input_dim if moes else 0)
  num_layers = sum(1 for l in layers if l.__class__.__name__ == 'TransformerLayer')
  # With remat, each layer keeps its input for the backward pass; one layer's working set is live at a time.
  widest = max([l.p.hidden_dim for l in moes] + [getattr(model.p, 'hidden_dim', 0)])
  per_layer_live = tokens_per_device * (8 * m + 2 * widest) * 4
  activation = int(tokens_per_device * m * 4 * num_layers + per_layer_live) if remat else int(
      per_layer_live * num_layers)
  a2a = 0
  if moes:
    l = moes[0]
    # num_groups groups, or groups of about group_size tokens (MoELayer.GroupShape needs the exact token
    # count to split them evenly; E·G·C, the buffer, is about the same).
    g = l.p.num_groups or math.ceil(tokens_per_step / l.p.group_size)
    s = max(int(tokens_per_step) // g, 1)
    c = gating_lib.expert_capacity(s, l.p.num_experts, l.p.capacity_factor, l.p.min_capacity)
    buffer_bytes = l.p.num_experts * g * c * l.p.input_dim * 4
    a2a = int(4 * buffer_bytes / mesh.size * (mesh.size - 1) / mesh.size)
  return Analysis(name=name, mesh=str(mesh), total_params=int(total), expert_params=int(expert),
                  active_params_per_token=int(active), flops_per_token=float(flops),
                  encoder_flops_per_token=float(enc_flops), decoder_flops_per_token=float(flops - enc_flops),
                  bytes_per_device=int(weight_bytes), optimizer_bytes_per_device=int(optimizer_bytes),
                  activation_bytes_per_device=activation, all_to_all_bytes_per_moe_layer=a2a,
                  num_moe_layers=len(moes), num_experts=moes[0].p.num_experts if moes else 0)


def FormatTable(rows: List[Analysis]) -> str:
  head = (f'{"name":<14} {"mesh":<12} {"total":>9} {"active/tok":>10} {"GFLOP/tok":>9} {"weights/dev":>11} '
          f'{"optim/dev":>9} {"activ/dev":>9} {"a2a/layer":>9}')
  lines = [head, '-' * len(head)]
  for r in rows:
    lines.append(f'{r.name:<14} {r.mesh:<12} {_Human(r.total_params):>9} {_Human(r.active_params_per_token):>10} '
                 f'{r.flops_per_token / 1e9:>9.2f} {_Bytes(r.bytes_per_device):>11} '
                 f'{_Bytes(r.optimizer_bytes_per_device):>9} {_Bytes(r.activation_bytes_per_device):>9} '
                 f'{_Bytes(r.all_to_all_bytes_per_moe_layer):>9}')
  return '\n'.join(lines)


def _Human(n: float) -> str:
  for unit, div in (('T', 1e12), ('B', 1e9), ('M', 1e6), ('K', 1e3)):
    if n >= div:
      return f'{n / div:.1f}{unit}'
  return str(int(n))


def _Bytes(n: float) -> str:
  for unit, div in (('TiB', 2**40), ('GiB', 2**30), ('MiB', 2**20), ('KiB', 2**10)):
    if n >= div:
      return f'{n / div:.2f}{unit}'
  return f'{int(n)}B'


def AnalyzeExperiment(name: str, mesh: str = '', seq_len: int = 256, tokens_per_step: int = 0,
                      overrides: str = '') -> Analysis:
  """Analyze() of the registered experiment `name` (lingvo_gshard.params.LoadAll() first) on `mesh` (default:
  its own) with the xla backend, which builds no devices: any mesh can be analysed on one machine."""
  exp = registry.Get(name)
  task = exp.Task()
  if overrides:
    task.Override(overrides)
  model = task.Instantiate()
  partitioner = exp.Partitioner('xla', mesh or exp.DEFAULT_MESH)
  tokens = tokens_per_step or exp.TokensPerStep() or seq_len
  return Analyze(registry.REGISTRY.KeyOf(type(exp)).rsplit('.', 1)[-1], model, partitioner,
                          tokens_per_step=tokens, seq_len=seq_len)
