"""One sharding annotation API, three backends.

Model code is written on logical, full-size tensors and names the *logical* axes of each tensor it annotates:

    x = sharding.shard(x, ('group', 'length', 'model'))

An experiment owns the rules that map logical axes to mesh axes (T5X/Praxis style) and the mesh; a
`Partitioner` binds both to a backend, and `with sharding.use(partitioner):` makes it current. The paper's
low-level API is here too: `replicate(t)`, `split(t, dim, num_partitions)`, `mesh_split(t, device_mesh,
dims_mapping)`. Backends:

  none     single device; every annotation is an identity.
  dtensor  tf.experimental.dtensor: real SPMD on CPU/GPU meshes (and multi-client meshes). Annotations are
           relayouts; variables are DVariables laid out by the rules.
  xla      xla_sharding ops, partitioned by XLA SPMD under TPUStrategy(experimental_spmd_xla_partitioning=
           True). Off TPU they do not partition, but the compiled HLO carries `sharding={...}` attributes.

Rules semantics (T5X's): rules are an ordered list of (logical axis, mesh axis or None). For each dimension of
a tensor, the first rule for its logical axis whose mesh axis exists in the mesh and is not yet used by an
earlier dimension of the same tensor wins; otherwise the dimension is replicated. So one rule list serves a
1-D mesh (`data:8`: experts and groups both on `data`; the expert buffer `[E,G,C,M]` keeps E split and gives up
G, which is the all-to-all) and a 2-D mesh (`data:2,expert:4`).
"""
import contextlib
from typing import Callable, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf
from tensorflow.experimental import dtensor
from tensorflow.python.compiler.xla.experimental import xla_sharding

from lingvo_gshard.core import mesh as mesh_lib

BACKENDS = ('none', 'dtensor', 'xla')

LogicalAxes = Sequence[Optional[str]]
MeshError = mesh_lib.MeshError


class ShardingRules:
  """Ordered (logical axis, mesh axis | None) pairs; see the module docstring for how they resolve."""

  def __init__(self, rules: Sequence[Tuple[str, Optional[str]]]):
    self.rules = tuple((str(l), m) for l, m in rules)
    self.logical_axes = tuple(dict.fromkeys(l for l, _ in self.rules))
    self.mesh_axes = tuple(dict.fromkeys(m for _, m in self.rules if m is not None))

  def Resolve(self, logical_axes: LogicalAxes, mesh: mesh_lib.MeshSpec) -> Tuple[Optional[str], ...]:
    """Mesh axis (or None) for each dimension named by `logical_axes`."""
    used, out = set(), []
    for axis in logical_axes:
      if axis is None:
        out.append(None)
        continue
      if axis not in self.logical_axes:
        raise MeshError(f'logical axis {axis!r} has no sharding rule; known: {", ".join(self.logical_axes)}')
      choice = None
      for logical, mesh_axis in self.rules:
        if logical == axis and mesh_axis is not None and mesh_axis in mesh.names and mesh_axis not in used:
          choice = mesh_axis
          break
      if choice is not None:
        used.add(choice)
      out.append(choice)
    return tuple(out)

  def CheckMesh(self, mesh: mesh_lib.MeshSpec) -> None:
    unknown = [n for n in mesh.names if n not in self.mesh_axes]
    if unknown:
      raise MeshError(f'mesh axis {unknown[0]!r} is not used by the sharding rules; '
                      f'rules use: {", ".join(self.mesh_axes) or "no mesh axis"}')

  def ToText(self) -> str:
    return '\n'.join(f'{l} -> {m or "replicated"}' for l, m in self.rules)


# Default rules for the logical axes the layers use. Experiments override them.
DEFAULT_RULES = ShardingRules([
    ('batch', 'data'), ('group', 'data'),
    ('expert', 'expert'), ('expert', 'data'),
    # Tensor (model) parallelism when the mesh has a 'model' axis: heads, FFN hidden units and vocabulary.
    ('heads', 'model'), ('hidden', 'model'), ('vocab', 'model'),
    ('length', None), ('model', None), ('capacity', None), ('kv', None), ('embed', None),
])


class Partitioner:
  """A backend bound to a mesh and rules. Use via `with use(Partitioner(...)):`."""

  def __init__(self,
               backend: str = 'none',
               mesh: Union[mesh_lib.MeshSpec, str, None] = None,
               rules: Optional[ShardingRules] = None,
               devices: Optional[Sequence[str]] = None,
               device_mesh: Optional[np.ndarray] = None):
    """Builds and validates the partitioner before any compute.

    Args:
      backend: 'none', 'dtensor' or 'xla'.
      mesh: MeshSpec or text such as 'data:2,expert:4'. Default: a 1-device 'data:1' mesh.
      rules: logical -> mesh axis rules; default DEFAULT_RULES.
      devices: dtensor only: the local devices to build the mesh from (default: all local GPUs, else CPUs).
      device_mesh: xla only: logical core ids laid out in the mesh shape (default np.arange reshaped); pass
        the one matching a TPU device assignment.

    How steps are compiled (whole-step XLA, TF graph + islands, strategy.run) is not the partitioner's
    business: `core/step_runner.py` decides it.
    """
    if backend not in BACKENDS:
      raise MeshError(f'unknown sharding backend {backend!r}; expected one of {", ".join(BACKENDS)}')
    if mesh is None:
      mesh = mesh_lib.MeshSpec((('data', 1),))
    if isinstance(mesh, str):
      mesh = mesh_lib.MeshSpec.Parse(mesh)
    self.backend, self.mesh = backend, mesh
    self.rules = rules or DEFAULT_RULES
    self.rules.CheckMesh(mesh)
    self.dmesh = None
    self.device_mesh = None
    if backend == 'dtensor':
      self.dmesh = self._CreateDTensorMesh(devices)
    elif backend == 'xla':
      if device_mesh is None:
        device_mesh = np.arange(mesh.size).reshape(mesh.shape)
      device_mesh = np.asarray(device_mesh)
      if tuple(device_mesh.shape) != mesh.shape:
        raise MeshError(f'device_mesh shape {device_mesh.shape} does not match mesh {mesh} {mesh.shape}')
      self.device_mesh = device_mesh
    elif mesh.size != 1:
      raise MeshError(f'backend "none" runs on one device; mesh {mesh} has {mesh.size}')

  def _CreateDTensorMesh(self, devices):
    if dtensor.num_clients() > 1:  # Multi-host: every client passes the same global mesh.
      self.mesh.CheckDevices(dtensor.num_global_devices(dtensor.preferred_device_type()), 'global')
      return dtensor.create_distributed_mesh(list(self.mesh.axes))
    devices = list(devices or mesh_lib.LocalDevices())
    kind = devices[0].split(':')[0] if devices else ''
    self.mesh.CheckDevices(len(devices), kind)
    return dtensor.create_mesh(list(self.mesh.axes), devices=devices[:self.mesh.size])

  def __repr__(self):
    return f'Partitioner(backend={self.backend!r}, mesh={str(self.mesh)!r})'

  # --- layouts ------------------------------------------------------------------------------------------

  def MeshAxes(self, logical_axes: LogicalAxes, shape=None, what: str = 'tensor') -> Tuple[Optional[str], ...]:
    """Mesh axis per dim; with `shape`, checks that each mesh axis divides its dimension."""
    axes = self.rules.Resolve(logical_axes, self.mesh)
    if shape is not None:
      shape = list(shape)
      if len(shape) != len(axes):
        raise MeshError(f'{what}: rank {len(shape)} but {len(axes)} logical axes {tuple(logical_axes)}')
      for dim, (size, mesh_axis, logical) in enumerate(zip(shape, axes, logical_axes)):
        if mesh_axis is not None and size is not None and size % self.mesh.AxisSize(mesh_axis):
          raise MeshError(f'{what}: dim {dim} ({logical}) of size {size} is not divisible by mesh axis '
                          f'{mesh_axis!r} of size {self.mesh.AxisSize(mesh_axis)}')
    return axes

  def ShardShape(self, shape, logical_axes: LogicalAxes, what: str = 'tensor') -> Tuple[int, ...]:
    """The per-device shape of a tensor of `shape` laid out by `logical_axes`."""
    axes = self.MeshAxes(logical_axes, shape, what)
    return tuple(s // (self.mesh.AxisSize(a) if a else 1) for s, a in zip(shape, axes))

  def DimsMapping(self, logical_axes: LogicalAxes, shape=None) -> List[int]:
    """The paper's dims_mapping: mesh axis index per tensor dim, -1 for replicated."""
    return [self.mesh.AxisIndex(a) if a else -1 for a in self.MeshAxes(logical_axes, shape)]

  def Layout(self, logical_axes: LogicalAxes, shape=None) -> dtensor.Layout:
    axes = self.MeshAxes(logical_axes, shape)
    return dtensor.Layout([a or dtensor.UNSHARDED for a in axes], self.dmesh)

  # --- annotations --------------------------------------------------------------------------------------

  def Shard(self, t, logical_axes: LogicalAxes):
    """Annotates `t` (logical shape unchanged) with the layout the rules give `logical_axes`."""
    if self.backend == 'none':
      return t
    dims_mapping = self.DimsMapping(logical_axes, t.shape)
    return self.MeshSplit(t, self.device_mesh, dims_mapping)

  def Replicate(self, t):
    if self.backend == 'xla':
      return xla_sharding.replicate(t, use_sharding_op=True)
    if self.backend == 'dtensor':
      return self._Relayout(t, [None] * t.shape.rank)
    return t

  def Split(self, t, split_dimension: int, num_partitions: int):
    """Tiles `t` along one dimension over `num_partitions` devices (the paper's `split`)."""
    if self.backend == 'xla':
      return xla_sharding.split(t, split_dimension, num_partitions, use_sharding_op=True)
    if self.backend == 'dtensor':
      # DTensor splits a dimension over exactly one mesh axis: it must have num_partitions devices.
      matches = [n for n, s in self.mesh.axes if s == num_partitions]
      if len(matches) != 1:
        raise MeshError(f'split over {num_partitions} partitions needs exactly one mesh axis of that size '
                        f'under dtensor; mesh is {self.mesh}')
      axes = [None] * t.shape.rank
      axes[split_dimension] = matches[0]
      return self._Relayout(t, axes)
    return t

  def MeshSplit(self, t, device_mesh, dims_mapping: Sequence[int]):
    """The paper's `mesh_split`: dims_mapping[i] = mesh axis index for tensor dim i, or -1."""
    if len(dims_mapping) != t.shape.rank:
      raise MeshError(f'dims_mapping {list(dims_mapping)} does not match tensor rank {t.shape.rank}')
    if self.backend == 'none':
      return t
    if self.backend == 'xla':
      device_mesh = self.device_mesh if device_mesh is None else np.asarray(device_mesh)
      if all(d < 0 for d in dims_mapping):
        return xla_sharding.replicate(t, use_sharding_op=True)
      return xla_sharding.mesh_split(t, device_mesh, list(dims_mapping), use_sharding_op=True)
    if device_mesh is not None and tuple(np.shape(device_mesh)) != self.mesh.shape:
      raise MeshError(f'device_mesh shape {np.shape(device_mesh)} does not match mesh {self.mesh}')
    return self._Relayout(t, [self.mesh.names[d] if d >= 0 else None for d in dims_mapping])

  def _Relayout(self, t, mesh_axes):
    layout = dtensor.Layout([a or dtensor.UNSHARDED for a in mesh_axes], self.dmesh)
    if tf.executing_eagerly() and not dtensor.is_dtensor(t):
      t = dtensor.copy_to_mesh(t, dtensor.Layout.replicated(self.dmesh, t.shape.rank))
    return dtensor.relayout(t, layout)

  # --- data in and out ----------------------------------------------------------------------------------

  def ToDevice(self, value, logical_axes: LogicalAxes):
    """Places a host value on the mesh laid out by `logical_axes` (dtensor); other backends: a tensor.

    Each device receives only its own block of the value, cut on the host: on several clients (hosts) each
    sends its devices their shares, never the whole value (a batch's rows on 'data' reach the client that
    owns those rows only)."""
    if self.backend != 'dtensor':
      return tf.convert_to_tensor(value)
    value = value.numpy() if tf.is_tensor(value) else np.asarray(value)
    layout = self.Layout(logical_axes, value.shape)
    mesh = self.dmesh
    blocks = []
    for location in mesh.local_device_locations():
      index = []
      for dim, axis in enumerate(layout.sharding_specs):
        if axis == dtensor.UNSHARDED:
          index.append(slice(None))
        else:
          size = value.shape[dim] // mesh.dim_size(axis)
          index.append(slice(location[axis] * size, (location[axis] + 1) * size))
      blocks.append(tf.constant(value[tuple(index)]))
    return dtensor.pack(blocks, layout)

  def Fetch(self, t) -> np.ndarray:
    """The full (logical) value of `t` as a NumPy array, whatever its layout."""
    if isinstance(t, tf.Variable):
      t = t.read_value()
    if self.backend == 'dtensor' and dtensor.is_dtensor(t):
      t = dtensor.relayout(t, dtensor.Layout.replicated(self.dmesh, t.shape.rank))
      return dtensor.unpack(t)[0].numpy()
    return np.asarray(t)

  def CreateVariable(self, name: str, initial_value: Callable[[], tf.Tensor], logical_axes: LogicalAxes,
                     trainable: bool = True) -> tf.Variable:
    """A variable laid out by the rules. `initial_value()` returns the full value, computed identically on
    every backend (so 1-device and 8-device runs start from the same weights)."""
    value = tf.convert_to_tensor(initial_value())
    if self.backend == 'dtensor':
      return dtensor.DVariable(self.ToDevice(value, logical_axes), name=name, trainable=trainable)
    self.MeshAxes(logical_axes, value.shape, what=f'variable {name}')  # validate on every backend
    return tf.Variable(value, name=name, trainable=trainable)


# --- the current partitioner ------------------------------------------------------------------------------

_STACK: List[Partitioner] = []
_DEFAULT: List[Partitioner] = []


def current() -> Partitioner:
  if _STACK:
    return _STACK[-1]
  if not _DEFAULT:
    _DEFAULT.append(Partitioner('none'))
  return _DEFAULT[0]


@contextlib.contextmanager
def use(partitioner: Partitioner):
  """Makes `partitioner` current for model code traced inside the block."""
  _STACK.append(partitioner)
  try:
    yield partitioner
  finally:
    _STACK.pop()


def shard(t, logical_axes: LogicalAxes):
  """Annotates `t` by logical axes under the current partitioner."""
  return current().Shard(t, logical_axes)


def replicate(t):
  return current().Replicate(t)


def split(t, split_dimension: int, num_partitions: int):
  return current().Split(t, split_dimension, num_partitions)


def mesh_split(t, device_mesh, dims_mapping: Sequence[int]):
  return current().MeshSplit(t, device_mesh, dims_mapping)
