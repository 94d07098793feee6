"""A device mesh described once: ordered axis names and sizes, e.g. `data:2,expert:4`.

The mesh says nothing about which tensor dimension goes where; that is the sharding rules' job
(`sharding.py`). Everything here is validated before any compute, so a bad `--mesh` fails in one line.
"""
import dataclasses
import math
import re
from typing import Optional, Sequence, Tuple

_AXIS_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')


class MeshError(ValueError):
  """A malformed mesh, or one that does not fit the devices or the tensor shapes."""


@dataclasses.dataclass(frozen=True)
class MeshSpec:
  """Axis names and sizes of a logical device mesh, in order (the last axis varies fastest)."""
  axes: Tuple[Tuple[str, int], ...]

  def __post_init__(self):
    names = [n for n, _ in self.axes]
    for name, size in self.axes:
      if not isinstance(name, str) or not _AXIS_RE.match(name):
        raise MeshError(f'mesh axis name {name!r} is not an identifier')
      if not isinstance(size, int) or size < 1:
        raise MeshError(f'mesh axis {name!r} has size {size!r}; sizes are positive integers')
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
      raise MeshError(f'mesh axis {dup[0]!r} appears twice')
    if not self.axes:
      raise MeshError('a mesh needs at least one axis')

  @classmethod
  def Parse(cls, text: str) -> 'MeshSpec':
    """`'data:2,expert:4'` -> MeshSpec; also accepts a bare count `'8'` as `data:8`."""
    text = (text or '').strip()
    if not text:
      raise MeshError('empty mesh; expected e.g. "data:2,expert:4"')
    if text.isdigit():
      return cls((('data', int(text)),))
    axes = []
    for item in text.split(','):
      name, sep, size = item.strip().partition(':')
      if not sep or not size.strip().isdigit():
        raise MeshError(f'mesh axis {item.strip()!r} is not of the form name:size (in {text!r})')
      axes.append((name.strip(), int(size)))
    return cls(tuple(axes))

  @property
  def names(self) -> Tuple[str, ...]:
    return tuple(n for n, _ in self.axes)

  @property
  def shape(self) -> Tuple[int, ...]:
    return tuple(s for _, s in self.axes)

  @property
  def size(self) -> int:
    return math.prod(self.shape)

  def AxisSize(self, name: str) -> int:
    for n, s in self.axes:
      if n == name:
        return s
    raise MeshError(f'mesh {self} has no axis {name!r}; axes are {", ".join(self.names)}')

  def AxisIndex(self, name: str) -> int:
    if name not in self.names:
      raise MeshError(f'mesh {self} has no axis {name!r}; axes are {", ".join(self.names)}')
    return self.names.index(name)

  def CheckDevices(self, num_devices: int, kind: str = '') -> None:
    if self.size > num_devices:
      raise MeshError(f'mesh {self} needs {self.size} devices, only {num_devices} {kind + " " if kind else ""}'
                      'devices exist')

  def __str__(self) -> str:
    return ','.join(f'{n}:{s}' for n, s in self.axes)


def LocalDevices(device_type: Optional[str] = None) -> Sequence[str]:
  """Names of the local logical devices of `device_type` (default: GPU if any, else CPU), e.g. 'CPU:3'."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if device_type is None:
    device_type = 'GPU' if tf.config.list_logical_devices('GPU') else 'CPU'
  return [f'{device_type}:{i}' for i in range(len(tf.config.list_logical_devices(device_type)))]
