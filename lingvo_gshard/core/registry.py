"""The experiment registry: `@registry.Register` on a class, `registry.Get('M4TinyMoE')` to find it.

A module registers its experiments when it is imported; `lingvo_gshard.params.LoadAll()` imports every module
of the package's experiments (an explicit list, so a reader can find them all from one place). Keys are
`<module under lingvo_gshard.params>.<ClassName>`; a lookup accepts the key or any dotted suffix of it, and
unknown or ambiguous names raise a one-line error with the closest or all candidates.
"""
import difflib
from typing import Dict, List, Optional, Type

from lingvo_gshard.core import experiment

_PARAMS_PACKAGE = 'lingvo_gshard.params'


class RegistryError(LookupError):
  """Unknown or ambiguous experiment name, or a duplicate registration."""


class Registry:
  """A name -> experiment class table."""

  def __init__(self):
    self._classes: Dict[str, Type[experiment.Experiment]] = {}

  @staticmethod
  def KeyOf(cls, name: Optional[str] = None) -> str:
    module = cls.__module__
    if module.startswith(_PARAMS_PACKAGE + '.'):
      module = module[len(_PARAMS_PACKAGE) + 1:]
    return f'{module}.{name or cls.__name__}'

  def Register(self, cls=None, *, name: Optional[str] = None):
    """Decorator (`@Register`) or call (`Register(cls, name='Bilingual_de')`) adding an experiment class."""

    def _Add(cls):
      if not (isinstance(cls, type) and issubclass(cls, experiment.Experiment)):
        raise RegistryError(f'{cls!r} is not an Experiment subclass')
      if cls.__module__.split('.')[0] == 'params':
        raise RegistryError(f'{cls.__module__} was imported as a top-level package; import it as '
                            f'{_PARAMS_PACKAGE}.{cls.__module__[len("params."):]} so it registers once')
      key = self.KeyOf(cls, name)
      if key in self._classes and self._classes[key] is not cls:
        raise RegistryError(f'experiment {key!r} is registered twice')
      self._classes[key] = cls
      return cls

    return _Add(cls) if cls is not None else _Add

  def Keys(self) -> List[str]:
    return sorted(self._classes)

  def GetClass(self, name: str) -> Type[experiment.Experiment]:
    if '-' in name:  # language codes in names: Bilingual_sr-Latn is registered as Bilingual_sr_Latn
      name = name.replace('-', '_')
    if name in self._classes:
      return self._classes[name]
    matches = [k for k in self._classes if k.endswith('.' + name)]
    if len(matches) == 1:
      return self._classes[matches[0]]
    if len(matches) > 1:
      raise RegistryError(f'experiment name {name!r} is ambiguous: {", ".join(sorted(matches))}')
    short = {k.rsplit('.', 1)[-1]: k for k in self._classes}
    close = difflib.get_close_matches(name, list(self._classes) + list(short), n=3, cutoff=0.6)
    close = sorted({short.get(c, c) for c in close})
    hint = f'; closest: {", ".join(close)}' if close else f'; {len(self._classes)} experiments registered'
    raise RegistryError(f'unknown experiment {name!r}{hint}')

  def Get(self, name: str) -> experiment.Experiment:
    return self.GetClass(name)()


REGISTRY = Registry()
Register = REGISTRY.Register
GetClass = REGISTRY.GetClass
Get = REGISTRY.Get

