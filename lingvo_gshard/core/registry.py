"""The experiment registry: `@registry.Register` on a class, `registry.Get('M4TinyMoE')` to find it.

`GetClass` (and `Get`, which instantiates) is the one place a name given as `--model=...` is resolved, in one
of three forms:
  M4TinyMoE, m4_tiny.M4TinyMoE     a registered key or any dotted suffix of one;
  my_pkg.my_module.MyExperiment    a dotted Python path: the module is imported and the attribute taken;
  path/to/my_exp.py:MyExperiment   a file imported by its path, under a module name made from its real path
                                   (the same file is one module however often it is named).
An attribute that is not a module-level name may still be one the module registered (`Register(cls,
name='Bilingual_de')`); a class that is not registered is taken as long as it is an Experiment subclass.

A module registers its experiments when it is imported; `lingvo_gshard.params.LoadAll()` imports the package's
own (an explicit list, so a reader can find them all from one place), then what installed distributions name
in the entry-point group `lingvo_gshard.experiments` (`LoadEntryPoints`). Keys are `<module>.<ClassName>`,
the module without its `lingvo_gshard.params.` prefix; a file's module is its file name without `.py`.

Every failure is a RegistryError of one line, because the tools print it as their whole answer: an unknown
name (with the closest), an ambiguous one or a key registered twice (with the file, and entry point, of each
place), a module or file that does not import (with the file and line), a broken entry point (with its
distribution).
"""
import difflib
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import traceback
from typing import Callable, Dict, List, Optional, Set, Tuple, Type

from lingvo_gshard.core import experiment

ENTRY_POINT_GROUP = 'lingvo_gshard.experiments'
_PARAMS_PACKAGE = 'lingvo_gshard.params'
# Module names of files imported by path start with this, so they never shadow a module of the same name.
_FILE_MODULE_PREFIX = 'lingvo_gshard_file_'
# Module name -> real path, of every file imported by path.
_FILE_MODULES: Dict[str, str] = {}


class RegistryError(LookupError):
  """Unknown or ambiguous experiment name, a module that does not import, or a duplicate registration."""


def _IsExperiment(obj) -> bool:
  return isinstance(obj, type) and issubclass(obj, experiment.Experiment)


def _OneLine(text: str) -> str:
  return ' '.join(str(text).split())


def _Shown(path: str) -> str:
  """A path as a message shows it: relative to the working directory when it is under it."""
  rel = os.path.relpath(path)
  return path if rel.startswith('..') else rel


def _ModuleFile(module_name: str) -> Optional[str]:
  """The file a module was imported from (a file imported by path: its real path), if known."""
  module = sys.modules.get(module_name)
  path = getattr(module, '__file__', None)
  return _FILE_MODULES.get(module_name) or path


def _ImportedFrom(real: str):
  """The module already imported from the file at real path `real` (by a dotted name or an entry point), if
  any: naming that file by its path then gives the same classes, not a second copy registered again."""
  base = os.path.basename(real)
  for module in list(sys.modules.values()):
    path = getattr(module, '__file__', None)
    if isinstance(path, str) and os.path.basename(path) == base and os.path.realpath(path) == real:
      return module
  return None


def _ImportFailure(what: str, e: BaseException, files: Tuple[str, ...]) -> str:
  """One line for an exception raised while importing `what`: the file and line it was raised at (the deepest
  frame in `files`, the module's own, when there is one) and the exception."""
  if isinstance(e, SyntaxError) and e.filename:
    return f'cannot import {what}: {_Shown(e.filename)}:{e.lineno}: {type(e).__name__}: {_OneLine(e.msg)}'
  frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith('<')]
  own = [f for f in frames if os.path.realpath(f.filename).startswith(files)] if files else []
  frame = (own or frames or [None])[-1]
  where = f'{_Shown(frame.filename)}:{frame.lineno}: ' if frame else ''
  return f'cannot import {what}: {where}{type(e).__name__}: {_OneLine(e)}'


class Registry:
  """A name -> experiment class table."""

  def __init__(self):
    self._classes: Dict[str, Type[experiment.Experiment]] = {}
    self._origins: Dict[str, str] = {}   # key -> the entry point whose import registered it
    self._loading = ''                   # the entry point being imported, while it is
    self._loaded: Set[Tuple[str, str, str]] = set()  # entry points imported: (distribution, name, value)
    self._families: Dict[str, Callable[[str], Type[experiment.Experiment]]] = {}  # name prefix -> factory

  @staticmethod
  def ModuleLabel(module: str) -> str:
    """The first part of the keys of a module's classes."""
    if module in _FILE_MODULES:
      return re.sub(r'\W', '_', os.path.splitext(os.path.basename(_FILE_MODULES[module]))[0])
    if module.startswith(_PARAMS_PACKAGE + '.'):
      return module[len(_PARAMS_PACKAGE) + 1:]
    return module

  @staticmethod
  def KeyOf(cls, name: Optional[str] = None) -> str:
    return f'{Registry.ModuleLabel(cls.__module__)}.{name or cls.__name__}'

  def Where(self, key: str) -> str:
    """The file that registered `key` (and the entry point that imported it, if one did)."""
    cls = self._classes[key]
    path = _ModuleFile(cls.__module__)
    place = _Shown(path) if path else cls.__module__
    return f'{place} via {self._origins[key]}' if key in self._origins else place

  def Register(self, cls=None, *, name: Optional[str] = None):
    """Decorator (`@Register`) or call (`Register(cls, name='Bilingual_de')`) adding an experiment class."""

    def _Add(cls):
      if not _IsExperiment(cls):
        raise RegistryError(f'{cls!r} is not an Experiment subclass')
      if cls.__module__.split('.')[0] == 'params':
        raise RegistryError(f'{cls.__module__} was imported as a top-level package; import it as '
                            f'{_PARAMS_PACKAGE}.{cls.__module__[len("params."):]} so it registers once')
      key = self.KeyOf(cls, name)
      if key in self._classes and self._classes[key] is not cls:
        path, first = _ModuleFile(cls.__module__), self._classes[key].__module__
        if path and _ModuleFile(first) and os.path.realpath(_ModuleFile(first)) == os.path.realpath(path):
          raise RegistryError(f'experiment {key!r} is registered twice: {_Shown(path)} was imported as two '
                              f'modules ({first}, {cls.__module__}); name it by one path only')
        raise RegistryError(f'experiment {key!r} is registered twice: by {self.Where(key)} and by '
                            f'{_Shown(path) if path else cls.__module__}')
      self._classes[key] = cls
      if self._loading:
        self._origins[key] = self._loading
      return cls

    return _Add(cls) if cls is not None else _Add

  def RegisterFamily(self, prefix: str, factory: Callable[[str], Type[experiment.Experiment]]) -> None:
    """Names `prefix<suffix>` that are not registered are made on first use by `factory(suffix)` (which
    registers and returns the class, or raises RegistryError saying why the suffix names none): a family of
    experiments generated from a template, e.g. Bilingual_<language> for any language of a corpus."""
    self._families[prefix] = factory

  def Keys(self) -> List[str]:
    return sorted(self._classes)

  def GetClass(self, name: str) -> Type[experiment.Experiment]:
    """The experiment class `name` names: a key or its dotted suffix, a dotted path or FILE.py:ATTR."""
    path, colon, attr = name.rpartition(':')
    if (colon and path.endswith('.py')) or name.endswith('.py'):
      return self._FromFile(path if colon else name, attr if colon else '', name)
    if '-' in name:  # language codes in names: Bilingual_sr-Latn is registered as Bilingual_sr_Latn
      name = name.replace('-', '_')
    if name in self._classes:
      return self._classes[name]
    matches = [k for k in self._classes if k.endswith('.' + name)]
    if len(matches) == 1:
      return self._classes[matches[0]]
    family = [p for p in self._families if name.startswith(p) and len(name) > len(p) and '.' not in name]
    if not matches and family:
      return self._families[family[0]](name[len(family[0]):])
    if len(matches) > 1:
      raise RegistryError(f'experiment name {name!r} is ambiguous: '
                          f'{", ".join(self._Placed(k) for k in sorted(matches))}')
    module, _, attr = name.rpartition('.')
    top = module.split('.')[0]
    importable = (module and all(p.isidentifier() for p in name.split('.'))
                  and importlib.util.find_spec(top) is not None)
    if importable:
      return self._Attribute(self._Import(module, name), attr, name)
    short = {k.rsplit('.', 1)[-1]: k for k in self._classes}
    close = difflib.get_close_matches(name, list(self._classes) + list(short), n=3, cutoff=0.6)
    close = sorted({short.get(c, c) for c in close})
    hint = f'; closest: {", ".join(close)}' if close else f'; {len(self._classes)} experiments registered'
    if module and top not in {k.split('.')[0] for k in self._classes}:
      # Written as a module path, not as a key: say that the module is missing as well.
      raise RegistryError(f'unknown experiment {name!r}: not registered, and no module named {top!r}{hint}')
    raise RegistryError(f'unknown experiment {name!r}{hint}')

  def Get(self, name: str) -> experiment.Experiment:
    return self.GetClass(name)()

  def LoadEntryPoints(self, group: str = ENTRY_POINT_GROUP) -> None:
    """Imports what each entry point of `group` names, once per process: a module (whose import registers
    its experiments) or module:attr (an Experiment subclass, registered here if its module did not)."""
    found = importlib.metadata.entry_points(group=group)
    for ep in sorted(found, key=lambda e: (e.dist.name if e.dist else '', e.name)):
      dist = f'{ep.dist.name} {ep.dist.version}' if ep.dist else 'an unknown distribution'
      label = f'entry point {ep.name} = {ep.value} of {dist}'
      ident = (dist, ep.name, ep.value)
      if ident in self._loaded:
        continue
      self._loading = label
      try:
        obj = self._Import(ep.module, ep.module)
        if ep.attr:
          try:
            obj = functools.reduce(getattr, ep.attr.split('.'), obj)
          except AttributeError:
            raise RegistryError(f'module {ep.module} has no attribute {ep.attr!r}') from None
          if not _IsExperiment(obj):
            raise RegistryError(f'{ep.attr} is not an Experiment subclass ({type(obj).__name__})')
          if obj not in self._classes.values():
            self.Register(obj)
      except RegistryError as e:
        raise RegistryError(f'{label} (group {group}): {e}') from None
      finally:
        self._loading = ''
      self._loaded.add(ident)

  def _Placed(self, key: str) -> str:
    cls = self._classes[key]
    return f'{key} ({self.Where(key)})' if _ModuleFile(cls.__module__) or key in self._origins else key

  def _Forget(self, module: str) -> None:
    """Drops what a module that failed to import registered, so importing it again starts clean."""
    for key in [k for k, c in self._classes.items() if c.__module__ == module]:
      del self._classes[key]
      self._origins.pop(key, None)

  def _Import(self, module: str, spec: str):
    """importlib.import_module(module), every failure one RegistryError line (`spec` is the name given)."""
    try:
      return importlib.import_module(module)
    except RegistryError:
      self._Forget(module)
      raise
    except ModuleNotFoundError as e:
      self._Forget(module)
      if e.name and (module == e.name or module.startswith(e.name + '.')):
        raise RegistryError(f'{spec}: no module named {e.name!r}') from None
      raise RegistryError(_ImportFailure(module, e, self._OwnFiles(module))) from None
    except Exception as e:  # pylint: disable=broad-except  # whatever the module's own code raises
      self._Forget(module)
      raise RegistryError(_ImportFailure(module, e, self._OwnFiles(module))) from None

  @staticmethod
  def _OwnFiles(module: str) -> Tuple[str, ...]:
    """The file of a module that failed to import, or the folder of its package."""
    try:
      spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
      return ()
    if not spec or not spec.origin or not os.path.isfile(spec.origin):
      return ()
    origin = os.path.realpath(spec.origin)
    return (os.path.dirname(origin) + os.sep,) if spec.submodule_search_locations else (origin,)

  def _FromFile(self, path: str, attr: str, spec: str) -> Type[experiment.Experiment]:
    """The experiment `attr` of the Python file at `path`, imported as a module once per process."""
    if not os.path.exists(path):
      raise RegistryError(f'{spec}: no file {path}')
    if not os.path.isfile(path):
      raise RegistryError(f'{spec}: {path} is not a file')
    real = os.path.realpath(path)
    stem = re.sub(r'\W', '_', os.path.splitext(os.path.basename(real))[0])
    module_name = f'{_FILE_MODULE_PREFIX}{stem}_{hashlib.sha1(real.encode(), usedforsecurity=False).hexdigest()[:10]}'
    module = sys.modules.get(module_name) or _ImportedFrom(real)
    if module is None:
      module_spec = importlib.util.spec_from_file_location(module_name, real)
      module = importlib.util.module_from_spec(module_spec)
      _FILE_MODULES[module_name] = real
      sys.modules[module_name] = module
      try:
        module_spec.loader.exec_module(module)
      except Exception as e:  # pylint: disable=broad-except  # the file's own code: any error is its own
        del sys.modules[module_name]
        self._Forget(module_name)
        del _FILE_MODULES[module_name]
        if isinstance(e, RegistryError):
          raise
        raise RegistryError(_ImportFailure(_Shown(path), e, (real,))) from None
    if not attr:
      names = self._Defined(module)
      raise RegistryError(f'{spec}: name the experiment, as {spec}:NAME'
                          + (f' ({path} defines {", ".join(names)})' if names else ''))
    return self._Attribute(module, attr, spec)

  def _Defined(self, module) -> List[str]:
    """Names under which a module offers experiments: its Experiment subclasses and what it registered."""
    names = {n for n, v in vars(module).items() if _IsExperiment(v) and not n.startswith('_')}
    names |= {k.rsplit('.', 1)[-1] for k, c in self._classes.items() if c.__module__ == module.__name__}
    return sorted(names)

  def _Attribute(self, module, attr: str, spec: str) -> Type[experiment.Experiment]:
    """Attribute `attr` of `module` (or the class the module registered under that name), checked to be an
    Experiment subclass."""
    where = _Shown(_FILE_MODULES[module.__name__]) if module.__name__ in _FILE_MODULES else module.__name__
    if not hasattr(module, attr):
      registered = self._classes.get(f'{self.ModuleLabel(module.__name__)}.{attr}')
      if registered is not None:
        return registered
      names = self._Defined(module)
      close = difflib.get_close_matches(attr, names, n=3, cutoff=0.6)
      hint = (f'; closest: {", ".join(close)}' if close else
              f'; it defines {", ".join(names)}' if names else '; it defines no Experiment subclass')
      raise RegistryError(f'{spec}: {where} has no experiment {attr!r}{hint}')
    obj = getattr(module, attr)
    if not _IsExperiment(obj):
      kind = 'a module' if isinstance(obj, type(sys)) else type(obj).__name__
      raise RegistryError(f'{spec}: {attr} is not an Experiment subclass ({kind})')
    return obj


REGISTRY = Registry()
Register = REGISTRY.Register
GetClass = REGISTRY.GetClass
Get = REGISTRY.Get
LoadEntryPoints = REGISTRY.LoadEntryPoints
RegisterFamily = REGISTRY.RegisterFamily
