"""Base layer: params, declared weights with logical axes, children, and variables made by a Partitioner.

A layer *declares* its weights in `__init__` (`CreateWeight(name, WeightSpec(shape, logical_axes, init))`)
without allocating them, so the paper's 600B models can be built and analysed (parameter counts, per-device
bytes) on a laptop. `InstantiateVariables(partitioner)` allocates them - plain variables, or DVariables laid
out by the experiment's sharding rules - from stateless, name-derived seeds, so the same experiment starts
from the same weights on 1 device and on 8. Model code reads a weight with `self.w.<name>`, which annotates
it with its logical axes under the current partitioner.
"""
import dataclasses
import hashlib
import math
from typing import Dict, Iterator, Optional, Sequence, Tuple

import tensorflow as tf

from lingvo_gshard.core import compile_hints
from lingvo_gshard.core import domains
from lingvo_gshard.core import hyperparams
from lingvo_gshard.core import sharding


@dataclasses.dataclass(frozen=True)
class WeightInit:
  """How a weight is initialised. `method`: 'gaussian' (stddev=scale), 'uniform' ([-scale, scale]),
  'xavier' (uniform with limit scale*sqrt(6/(fan_in+fan_out)) over the last two dims), 'fan_in' (gaussian with
  stddev scale/sqrt(fan_in), fan_in = product of the dims in `fan_in_axes`, default all but the last: an
  expert weight [E,M,H] names (1,), since each expert is its own [M,H] matrix), 'constant' (value scale)."""
  method: str = 'xavier'
  scale: float = 1.0
  fan_in_axes: Optional[Tuple[int, ...]] = None

  @classmethod
  def Gaussian(cls, scale=1.0):
    return cls('gaussian', scale)

  @classmethod
  def Uniform(cls, scale=1.0):
    return cls('uniform', scale)

  @classmethod
  def Xavier(cls, scale=1.0):
    return cls('xavier', scale)

  @classmethod
  def FanIn(cls, scale=1.0, fan_in_axes=None):
    return cls('fan_in', scale, None if fan_in_axes is None else tuple(fan_in_axes))

  @classmethod
  def Constant(cls, value=0.0):
    return cls('constant', value)


@dataclasses.dataclass(frozen=True)
class WeightSpec:
  """A declared weight. `logical_axes` names each dimension (e.g. ('expert', 'model', 'hidden'))."""
  shape: Tuple[int, ...]
  logical_axes: Tuple[Optional[str], ...]
  init: WeightInit = WeightInit()
  dtype: tf.dtypes.DType = tf.float32
  trainable: bool = True
  # A weight kept with its dims permuted for speed names how to get the canonical layout back: canonical =
  # transpose(weight, checkpoint_perm). Checkpoints and the initial random draw use the canonical layout, so
  # neither depends on the storage choice.
  checkpoint_perm: Optional[Tuple[int, ...]] = None

  def __post_init__(self):
    if len(self.shape) != len(self.logical_axes):
      raise ValueError(f'weight shape {self.shape} and logical axes {self.logical_axes} differ in rank')
    if self.checkpoint_perm is not None and sorted(self.checkpoint_perm) != list(range(len(self.shape))):
      raise ValueError(f'checkpoint_perm {self.checkpoint_perm} is not a permutation of the dims of shape '
                       f'{self.shape}')

  @property
  def size(self) -> int:
    return math.prod(self.shape)


def _Seed(path: str, global_seed: int) -> Tuple[int, int]:
  digest = hashlib.sha256(f'{global_seed}/{path}'.encode()).digest()
  return (int.from_bytes(digest[:4], 'little') >> 1, int.from_bytes(digest[4:8], 'little') >> 1)


def InitialValue(spec: WeightSpec, path: str, global_seed: int = 1234) -> tf.Tensor:
  """The full initial value of a weight: a pure function of (spec, path, seed), drawn in the canonical layout
  (a weight stored permuted starts as the permuted canonical draw)."""
  perm = spec.checkpoint_perm
  if perm is not None:
    init = spec.init
    if init.fan_in_axes is not None:  # stored dims -> the canonical dims they become
      init = dataclasses.replace(init, fan_in_axes=tuple(perm.index(a % len(perm)) for a in init.fan_in_axes))
    canonical = dataclasses.replace(spec, shape=tuple(spec.shape[a] for a in perm),
                                    logical_axes=tuple(spec.logical_axes[a] for a in perm), init=init,
                                    checkpoint_perm=None)
    return tf.transpose(InitialValue(canonical, path, global_seed), [perm.index(i) for i in range(len(perm))])
  shape, init = list(spec.shape), spec.init
  seed = _Seed(path, global_seed)
  if init.method == 'constant':
    return tf.fill(shape, tf.constant(init.scale, spec.dtype))
  if init.method == 'gaussian':
    value = tf.random.stateless_normal(shape, seed) * init.scale
  elif init.method == 'uniform':
    value = tf.random.stateless_uniform(shape, seed, -init.scale, init.scale)
  elif init.method == 'xavier':
    fan_in, fan_out = (shape[-2], shape[-1]) if len(shape) >= 2 else (shape[0], shape[0])
    limit = init.scale * math.sqrt(6.0 / (fan_in + fan_out))
    value = tf.random.stateless_uniform(shape, seed, -limit, limit)
  elif init.method == 'fan_in':
    if init.fan_in_axes is not None:
      if not init.fan_in_axes or any(not -len(shape) <= a < len(shape) for a in init.fan_in_axes):
        raise ValueError(f'{path}: fan_in_axes {init.fan_in_axes} do not index the dims of shape '
                         f'{tuple(shape)}')
      fan_in = math.prod(shape[a] for a in init.fan_in_axes)
    else:
      fan_in = math.prod(shape[:-1]) if len(shape) > 1 else shape[0]
    value = tf.random.stateless_normal(shape, seed) * (init.scale / math.sqrt(fan_in))
  else:
    raise ValueError(f'{path}: unknown init method {init.method!r}')
  return tf.cast(value, spec.dtype)


class _WeightReader:
  """`layer.w.name` -> the variable annotated with its logical axes under the current partitioner."""

  def __init__(self, layer: 'BaseLayer'):
    self._layer = layer

  def __getattr__(self, name):
    if name.startswith('__'):
      raise AttributeError(name)
    layer = self._layer
    if name not in layer._weight_specs:
      raise AttributeError(f'{layer.path}: no weight {name!r}; weights: {sorted(layer._weight_specs)}')
    if name not in layer._vars:
      raise RuntimeError(f'{layer.path}.{name}: call InstantiateVariables() before FProp')
    var = layer._vars[name]
    return sharding.shard(tf.convert_to_tensor(var), layer._weight_specs[name].logical_axes)


class BaseLayer(tf.Module):
  """Base class: `Params()` declares the knobs, `__init__` declares weights and children."""

  @classmethod
  def Params(cls) -> hyperparams.InstantiableParams:
    p = hyperparams.InstantiableParams(cls)
    p.Define('name', cls.__name__.lower(), 'Layer name; the path of a weight is its layers\' names joined.')
    p.Define('dtype', tf.float32, 'Weight dtype.', domains.OneOf(tf.float32, tf.bfloat16, tf.float16))
    p.Define('fprop_dtype', None, "Activation dtype (e.g. tf.bfloat16); None means `dtype`; 'auto': the "
             'runtime chooses for the machine before the model runs (runtime/hardware.py ResolveAuto).',
             domains.OneOf(None, 'auto', tf.float32, tf.bfloat16, tf.float16))
    return p

  def __init__(self, params: hyperparams.InstantiableParams):
    # This layer's own params (its children check theirs when they are built); an experiment's params were
    # checked whole before (hyperparams.Params.Validate), with the keys the user typed.
    broken = params.Violations(recursive=False)
    if broken:
      raise hyperparams.ParamsError(f'{params.name}: {broken[0]}')
    super().__init__(name=params.name)
    self.p = params.Copy().Freeze()
    self._weight_specs: Dict[str, WeightSpec] = {}
    self._vars: Dict[str, tf.Variable] = {}
    self._children: Dict[str, 'BaseLayer'] = {}
    self._parent_path = ''
    self.w = _WeightReader(self)

  @property
  def path(self) -> str:
    return f'{self._parent_path}{self.p.name}'

  @property
  def fprop_dtype(self):
    if isinstance(self.p.fprop_dtype, str) and self.p.fprop_dtype == 'auto':
      raise ValueError(f"{self.path}: fprop_dtype 'auto' is the runtime's to choose and was not resolved "
                       '(runtime.hardware.ResolveAuto)')
    return self.p.fprop_dtype or self.p.dtype

  def CreateWeight(self, name: str, spec: WeightSpec) -> None:
    if name in self._weight_specs or name in self._children:
      raise ValueError(f'{self.path}: {name!r} is already defined')
    self._weight_specs[name] = spec

  def CreateChild(self, name: str, params: hyperparams.InstantiableParams) -> 'BaseLayer':
    if name in self._weight_specs or name in self._children:
      raise ValueError(f'{self.path}: {name!r} is already defined')
    params = params.Copy().Set(name=name)
    child = params.Instantiate()
    child._SetParentPath(f'{self.path}.')
    self._children[name] = child
    setattr(self, name, child)
    return child

  def CreateChildren(self, name: str, params_list: Sequence[hyperparams.InstantiableParams]):
    children = [self.CreateChild(f'{name}_{i}', p) for i, p in enumerate(params_list)]
    object.__setattr__(self, name, children)  # tf.Module tracks lists
    return children

  def _SetParentPath(self, parent_path: str):
    self._parent_path = parent_path
    for child in self._children.values():
      child._SetParentPath(f'{self.path}.')

  def IterWeightSpecs(self) -> Iterator[Tuple[str, WeightSpec]]:
    """(path, spec) of every declared weight in this layer and below, without allocating anything."""
    for name, spec in self._weight_specs.items():
      yield f'{self.path}.{name}', spec
    for child in self._children.values():
      yield from child.IterWeightSpecs()

  def IterLayers(self) -> Iterator['BaseLayer']:
    """This layer and every descendant, depth first."""
    yield self
    for child in self._children.values():
      yield from child.IterLayers()

  def NumParams(self) -> int:
    return sum(spec.size for _, spec in self.IterWeightSpecs())

  def InstantiateVariables(self, partitioner: Optional[sharding.Partitioner] = None, seed: int = 1234):
    """Allocates every declared weight under `partitioner` (default: the current one)."""
    partitioner = partitioner or sharding.current()
    for name, spec in self._weight_specs.items():
      if name in self._vars:
        continue
      path = f'{self.path}.{name}'
      self._vars[name] = partitioner.CreateVariable(
          path, lambda spec=spec, path=path: InitialValue(spec, path, seed), spec.logical_axes,
          trainable=spec.trainable)
    for child in self._children.values():
      child.InstantiateVariables(partitioner, seed)
    return self

  def IterVariables(self) -> Iterator[Tuple[str, tf.Variable]]:
    for name, var in self._vars.items():
      yield f'{self.path}.{name}', var
    for child in self._children.values():
      yield from child.IterVariables()

  def IterVariablesWithSpecs(self) -> Iterator[Tuple[str, tf.Variable, WeightSpec]]:
    for name, var in self._vars.items():
      yield f'{self.path}.{name}', var, self._weight_specs[name]
    for child in self._children.values():
      yield from child.IterVariablesWithSpecs()

  def VariablesSummary(self, partitioner: Optional[sharding.Partitioner] = None) -> str:
    """One line per weight: path, shape, dtype, logical axes, mesh axes, per-device shape (Praxis's
    post_init_model_params.txt)."""
    partitioner = partitioner or sharding.current()
    lines = []
    for path, spec in self.IterWeightSpecs():
      mesh_axes = partitioner.MeshAxes(spec.logical_axes, spec.shape, what=path)
      local = partitioner.ShardShape(spec.shape, spec.logical_axes, what=path)
      lines.append(f'{path:<60} {str(list(spec.shape)):<20} {spec.dtype.name:<8} '
                   f'logical={tuple(spec.logical_axes)} mesh={mesh_axes} per_device={list(local)}')
    return '\n'.join(lines)

  def FProp(self, *args, **kwargs):
    raise NotImplementedError(f'{type(self).__name__}.FProp')

  def __call__(self, *args, **kwargs):
    return self.FProp(*args, **kwargs)


def FoldSeed(seed: Optional[tf.Tensor], name: str) -> Optional[tf.Tensor]:
  """A per-use stateless seed: `seed` (shape [2] int32, or None when not training) mixed with `name`.

  Dropout draws from stateless RNGs so that a step is a pure function of its inputs and seed (reproducible,
  XLA-friendly, the same under every backend); each call site folds in its own name.
  """
  if seed is None:
    return None
  salt = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], 'little') >> 1
  return tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int32), salt)


def Dropout(x: tf.Tensor, rate: float, seed: Optional[tf.Tensor], name: str) -> tf.Tensor:
  """Stateless dropout; identity when `seed` is None (evaluation) or `rate` is 0.

  Each element is kept when 16 random bits are >= t = round(rate * 2^16) (clamped to [1, 2^16 - 1]), so the
  dropped fraction is t / 2^16, `rate` to within 2^-17, and kept elements are scaled by 2^16 / (2^16 - t):
  E[output] = x (up to the rounding of that scale in bfloat16).
  """
  if seed is None or not rate:
    return x
  if not 0.0 < rate < 1.0:
    raise ValueError(f'dropout rate of {name!r} must be in [0, 1), got {rate}')
  threshold = min(max(round(rate * 2**16), 1), 2**16 - 1)
  scale = 2**16 / (2**16 - threshold)
  # Philox explicitly: tf.nn.experimental.stateless_dropout's 'auto_select' generator is far slower under XLA
  # on CPU. Drawing bits is still a visible share of a small model's step, so each uint32 draw serves two
  # elements (its low and high 16 bits), and the mask is a product whose gradient is one multiply
  # (docs/guides/design_measurements.md).
  if x.shape.rank == 0:
    return tf.reshape(Dropout(tf.reshape(x, [1]), rate, seed, name), [])
  shape = tf.shape(x)
  last = x.shape[-1] if x.shape[-1] is not None else shape[-1]
  words = (last + 1) // 2
  bits = tf.random.stateless_uniform(tf.concat([shape[:-1], [words]], axis=0), FoldSeed(seed, name),
                                     minval=None, maxval=None, dtype=tf.uint32, alg='philox')
  keep = tf.reshape(_KeepHalves(bits, threshold, compile_hints.BitcastsAllowed()),
                    tf.concat([shape[:-1], [2 * words]], axis=0))
  if not isinstance(last, int) or last % 2:
    keep = keep[..., :last]
  return x * (tf.cast(keep, x.dtype) * tf.cast(scale, x.dtype))


def _KeepHalves(bits, threshold: int, bitcast: bool):
  """[..., W] uint32 -> [..., W, 2] bool: (low 16 bits, high 16 bits) >= threshold.

  bitcast=True reinterprets the words as uint16 pairs (free, where the comparisons are extra elementwise
  kernels in a TF graph; docs/guides/design_measurements.md). DTensor's SPMD expansion rejects that bitcast
  on sharded tensors, so other backends compare the halves (the same masks; under XLA both cost the same).
  """
  if bitcast:
    return tf.bitcast(bits, tf.uint16) >= tf.constant(threshold, tf.uint16)
  low = tf.bitwise.bitwise_and(bits, tf.constant(0xFFFF, tf.uint32)) >= tf.constant(threshold, tf.uint32)
  high = bits >= tf.constant(threshold << 16, tf.uint32)
  return tf.stack([low, high], axis=-1)
