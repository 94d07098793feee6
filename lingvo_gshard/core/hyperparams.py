"""Hyper-parameters: documented, nested, printable, overridable (Lingvo's `hyperparams.Params`, slimmed).

Every knob is declared with its documentation:

    p = Params()
    p.Define('num_layers', 6, 'Number of encoder layers.')
    p.Define('moe', moe_params, 'The MoE sub-layer.')   # nested Params
    p.Set(num_layers=4)
    p.Set(**{'moe.num_experts': 16})                     # dotted names
    p.Override('num_layers=4,moe.num_experts=16')        # command-line form, type checked
    print(p.ToText())                                    # sorted 'a.b.c : value' lines
    q = p.Copy(); q.FromText(p.ToText())                 # round trip

Errors are one line and name the key: an unknown key lists the closest valid names; a value of the wrong type
names the expected type. A param may declare its domain (`core/domains.py`), and a configured class the rules
that tie its params together (`ParamRules`); `Validate()` checks both over a whole tree, naming the full key.
"""
import ast
import copy
import difflib
import importlib
import re
from typing import Any, Iterator, List, Tuple

import tensorflow as tf


class ParamsError(ValueError):
  """An unknown key, a wrong type or malformed text; the message names the key."""


class _Param:
  __slots__ = ('name', 'value', 'doc', 'domain')

  def __init__(self, name: str, value: Any, doc: str, domain=None):
    self.name, self.value, self.doc, self.domain = name, value, doc, domain


_NAME_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')


class Params:
  """A tree of named, documented values. See the module docstring."""

  def __init__(self):
    object.__setattr__(self, '_params', {})
    object.__setattr__(self, '_frozen', False)

  # --- declaration and access ---------------------------------------------------------------------------

  def Define(self, name: str, default: Any, doc: str, domain=None) -> None:
    """Declares `name` with a default value, its (required) documentation and optionally its domain (a
    `domains.Domain`: the values it may take, checked by Validate())."""
    if self._frozen:
      raise ParamsError(f'cannot Define {name!r}: params are frozen')
    if not isinstance(name, str) or not _NAME_RE.match(name):
      raise ParamsError(f'invalid param name {name!r}: use letters, digits and underscores')
    if name in self._params:
      raise ParamsError(f'param {name!r} is already defined')
    if not isinstance(doc, str) or not doc.strip():
      raise ParamsError(f'param {name!r} needs a documentation string')
    self._params[name] = _Param(name, default, doc, domain)

  def __getattr__(self, name: str) -> Any:
    if name.startswith('__'):  # copy/pickle/nest probes: no suggestions needed
      raise AttributeError(name)
    params = object.__getattribute__(self, '_params')
    if name in params:
      return params[name].value
    raise AttributeError(self._UnknownMessage(name))

  def __setattr__(self, name: str, value: Any) -> None:
    if self._frozen:
      raise ParamsError(f'cannot set {name!r}: params are frozen')
    if name not in self._params:
      raise ParamsError(self._UnknownMessage(name))
    self._params[name].value = value

  def __contains__(self, name: str) -> bool:
    try:
      self.Get(name)
      return True
    except ParamsError:
      return False

  def __dir__(self):
    return sorted(self._params)

  def __eq__(self, other) -> bool:
    return isinstance(other, Params) and self.ToText() == other.ToText()

  def __repr__(self) -> str:
    return self.ToText()

  def _Lookup(self, dotted: str) -> Tuple['Params', str]:
    """Returns (owner Params, leaf name) for a dotted name, or raises naming the closest keys."""
    parts = dotted.split('.')
    owner = self
    for i, part in enumerate(parts[:-1]):
      sub = owner._params.get(part)
      if sub is None or not isinstance(sub.value, Params):
        raise ParamsError(self._UnknownMessage(dotted))
      owner = sub.value
    if parts[-1] not in owner._params:
      raise ParamsError(self._UnknownMessage(dotted))
    return owner, parts[-1]

  def _UnknownMessage(self, dotted: str) -> str:
    keys = [k for k, _ in self.IterParams()]
    close = difflib.get_close_matches(dotted, keys, n=3, cutoff=0.5)
    if not close:  # Try matching the last component alone, e.g. a misspelt leaf under the right parent.
      leaf = dotted.split('.')[-1]
      close = [k for k in keys if difflib.get_close_matches(leaf, [k.split('.')[-1]], cutoff=0.75)][:3]
    hint = f'; closest: {", ".join(close)}' if close else ''
    return f'unknown param {dotted!r}{hint}'

  def Get(self, dotted: str) -> Any:
    owner, leaf = self._Lookup(dotted)
    return owner._params[leaf].value

  def GetDoc(self, dotted: str) -> str:
    owner, leaf = self._Lookup(dotted)
    return owner._params[leaf].doc

  def GetDomain(self, dotted: str):
    """The declared domain of `dotted` (None: any value of its type)."""
    owner, leaf = self._Lookup(dotted)
    return owner._params[leaf].domain

  def Set(self, **kwargs) -> 'Params':
    """Sets values by name; dotted names reach into nested params (`p.Set(**{'a.b': 1})`). Returns self."""
    for dotted, value in kwargs.items():
      if self._frozen:
        raise ParamsError(f'cannot set {dotted!r}: params are frozen')
      owner, leaf = self._Lookup(dotted)
      if owner._frozen:
        raise ParamsError(f'cannot set {dotted!r}: params are frozen')
      owner._params[leaf].value = value
    return self

  def IterParams(self, prefix: str = '') -> Iterator[Tuple[str, Any]]:
    """Yields (dotted name, value) for every leaf, depth first, in definition order."""
    for name, param in self._params.items():
      key = prefix + name
      if isinstance(param.value, Params):
        yield from param.value.IterParams(key + '.')
      else:
        yield key, param.value

  # --- copies -------------------------------------------------------------------------------------------

  def Copy(self) -> 'Params':
    """A deep, unfrozen copy."""
    new = copy.deepcopy(self)
    new._Unfreeze()
    return new

  def __deepcopy__(self, memo):
    new = self.__class__.__new__(self.__class__)
    object.__setattr__(new, '_frozen', self._frozen)
    params = {}
    for name, p in self._params.items():
      # Classes, dtypes and functions are shared, not copied.
      value = p.value if _IsAtomic(p.value) else copy.deepcopy(p.value, memo)
      params[name] = _Param(name, value, p.doc, p.domain)
    object.__setattr__(new, '_params', params)
    for k, v in self.__dict__.items():
      if k not in ('_params', '_frozen'):
        object.__setattr__(new, k, copy.deepcopy(v, memo))
    return new

  def Freeze(self) -> 'Params':
    """Makes this tree read-only (recursively). Returns self."""
    object.__setattr__(self, '_frozen', True)
    for p in self._params.values():
      if isinstance(p.value, Params):
        p.value.Freeze()
    return self

  def _Unfreeze(self):
    object.__setattr__(self, '_frozen', False)
    for p in self._params.values():
      if isinstance(p.value, Params):
        p.value._Unfreeze()

  @property
  def frozen(self) -> bool:
    return self._frozen

  # --- checks -------------------------------------------------------------------------------------------

  def Violations(self, prefix: str = '', recursive: bool = True) -> List[str]:
    """Every value outside its declared domain and every broken ParamRules rule in this tree (or, not
    `recursive`, of this level alone), each as `full.key = value: why` (keys prefixed with `prefix`)."""
    out = []
    for name, param in self._params.items():
      key = prefix + name
      if isinstance(param.value, Params):
        out += param.value.Violations(key + '.') if recursive else []
      elif param.domain is not None:
        why = param.domain.Check(param.value)
        if why:
          out.append(f'{key} = {_ValueToText(param.value)}: {why}')
    cls = self._params['cls'].value if 'cls' in self._params else None
    rules = getattr(cls, 'ParamRules', None)
    if rules is not None and not out:  # rules may assume each value is in its domain
      out += [f'{prefix}{leaf} = {_ValueToText(self.Get(leaf))}: {why}' for leaf, why in rules(self)]
    return out

  def Validate(self, prefix: str = '') -> 'Params':
    """Raises ParamsError, in one line, at the first value outside its domain or broken rule (saying how
    many more there are). Returns self."""
    found = self.Violations(prefix)
    if found:
      more = f' (and {len(found) - 1} more)' if len(found) > 1 else ''
      raise ParamsError(found[0] + more)
    return self

  # --- text ---------------------------------------------------------------------------------------------

  def ToText(self, include_docs: bool = False) -> str:
    """Sorted `a.b.c : value` lines; with `include_docs`, each preceded by `# doc [domain]`."""
    lines = []
    for key, value in sorted(self.IterParams()):
      if include_docs:
        domain = self.GetDomain(key)
        lines.append(f'# {self.GetDoc(key)}' + (f' [{domain}]' if domain is not None else ''))
      lines.append(f'{key} : {_ValueToText(value)}')
    return '\n'.join(lines) + ('\n' if lines else '')

  def FromText(self, text: str) -> 'Params':
    """Sets values from `ToText` output (comments and blank lines ignored), type checked. Returns self."""
    for lineno, line in enumerate(text.splitlines(), 1):
      stripped = line.strip()
      if not stripped or stripped.startswith('#'):
        continue
      if ' : ' not in stripped and not stripped.endswith(' :'):
        raise ParamsError(f'line {lineno}: expected "name : value", got {stripped[:80]!r}')
      key, _, raw = stripped.partition(' :')
      self._SetFromString(key.strip(), raw.strip(), where=f'line {lineno}: ')
    return self

  def Override(self, overrides: str) -> 'Params':
    """Applies `'a.b=1,c=foo,d=[1, 2]'` (commas inside brackets or quotes do not split). Returns self."""
    for item in _SplitTopLevel(overrides):
      if not item.strip():
        continue
      if '=' not in item:
        raise ParamsError(f'override {item.strip()!r} is not of the form name=value')
      key, _, raw = item.partition('=')
      self._SetFromString(key.strip(), raw.strip(), where='')
    return self

  def _SetFromString(self, key: str, raw: str, where: str) -> None:
    owner, leaf = self._Lookup(key)
    current = owner._params[leaf].value
    try:
      value = _ParseValue(raw, current)
    except ParamsError as e:
      raise ParamsError(f'{where}param {key!r}: {e}') from None
    if owner._frozen:
      raise ParamsError(f'{where}cannot set {key!r}: params are frozen')
    owner._params[leaf].value = value


class InstantiableParams(Params):
  """Params that know the class they configure: `p.Instantiate()` calls `cls(p)`."""

  def __init__(self, cls=None):
    super().__init__()
    self.Define('cls', cls, 'The class these params configure.')

  def Instantiate(self, *args, **kwargs):
    if self.cls is None:
      raise ParamsError('cannot Instantiate: param "cls" is not set')
    return self.cls(self.Copy(), *args, **kwargs)


# --- value <-> text ---------------------------------------------------------------------------------------


def _IsAtomic(value) -> bool:
  return isinstance(value, (type, tf.dtypes.DType)) or callable(value) and not isinstance(value, Params)


def _ValueToText(value: Any) -> str:
  if isinstance(value, tf.dtypes.DType):
    return f'tf.{value.name}'
  if isinstance(value, type) or callable(value) and hasattr(value, '__qualname__'):
    return f'type/{value.__module__}.{value.__qualname__}'
  if isinstance(value, str):
    return repr(value)
  return repr(value)


def _ImportDotted(path: str):
  module, _, name = path.rpartition('.')
  # Nested qualnames (Outer.Inner): walk back until a module imports.
  attrs = [name]
  while module:
    try:
      obj = importlib.import_module(module)
      break
    except ImportError:
      module, _, part = module.rpartition('.')
      attrs.insert(0, part)
  else:
    raise ParamsError(f'cannot import {path!r}')
  for attr in attrs:
    obj = getattr(obj, attr)
  return obj


def _ParseValue(raw: str, current: Any) -> Any:
  """Parses `raw` and checks it against the type of the current value."""
  if raw.startswith('type/'):
    try:
      value = _ImportDotted(raw[len('type/'):])
    except (ImportError, AttributeError, ParamsError) as e:
      raise ParamsError(f'cannot resolve {raw!r} ({e})') from None
    return value
  if raw.startswith('tf.'):
    try:
      return tf.as_dtype(raw[3:])
    except TypeError:
      raise ParamsError(f'unknown dtype {raw!r}') from None
  try:
    value = ast.literal_eval(raw)
  except (ValueError, SyntaxError):
    if current is None or isinstance(current, str):
      return raw  # A bare word for a string param: 'relu' rather than "'relu'".
    raise ParamsError(f'cannot parse {raw!r} as {type(current).__name__}') from None
  if isinstance(current, Params):
    raise ParamsError('is a nested params object; set its fields instead')
  if current is None or value is None:
    return value
  if isinstance(current, bool) or isinstance(value, bool):
    if type(current) is not type(value):
      raise ParamsError(f'expected {type(current).__name__}, got {raw!r}')
    return value
  if isinstance(current, float) and isinstance(value, int):
    return float(value)
  if isinstance(current, int) and isinstance(value, float) and value.is_integer():
    # A float param an experiment happened to set with an int (MAX_TRAIN_SECONDS = 900) reads back a float a
    # tool wrote (900.0); the param's domain, checked next, says whether a float is allowed.
    return value
  if isinstance(current, (list, tuple)) and isinstance(value, (list, tuple)):
    return type(current)(value)
  if isinstance(current, tf.dtypes.DType):
    raise ParamsError(f'expected a dtype such as tf.float32, got {raw!r}')
  if isinstance(current, str) and not isinstance(value, str):
    return raw  # e.g. a string param set to `16`: keep the text.
  if not isinstance(value, type(current)):
    raise ParamsError(f'expected {type(current).__name__}, got {raw!r} ({type(value).__name__})')
  return value


def _SplitTopLevel(text: str) -> List[str]:
  """Splits on commas that are not inside brackets or quotes."""
  items, depth, quote, start = [], 0, None, 0
  for i, ch in enumerate(text):
    if quote:
      if ch == quote:
        quote = None
    elif ch in '\'"':
      quote = ch
    elif ch in '([{':
      depth += 1
    elif ch in ')]}':
      depth -= 1
    elif ch == ',' and depth == 0:
      items.append(text[start:i])
      start = i + 1
  items.append(text[start:])
  return items

