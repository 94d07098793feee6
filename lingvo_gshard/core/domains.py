"""The values a param may take, declared where the param is defined: `p.Define(name, default, doc, domain)`.

    p.Define('dropout_prob', 0.0, 'Dropout on the output.', domains.Probability())      # [0, 1)
    p.Define('num_heads', 8, 'Attention heads.', domains.Positive(int))                  # integer > 0
    p.Define('gating', 'top2', 'Gating function.', domains.OneOf('top2', 'top1'))
    p.Define('fprop_dtype', None, '...', domains.OneOf(None, 'auto', tf.float32, tf.bfloat16))

A domain checks one value and prints itself (params.txt with docs, `list_models --params`); rules that tie
several params together (heads divide the model dimension) are a class's `ParamRules` (hyperparams.py).
`hyperparams.Params.Validate()` checks every declared domain of a tree and names the full key on failure.
"""
import math
from typing import Any, Optional, Sequence


class Domain:
  """A set of allowed values: `Check(value)` returns None if `value` is in it, else why not."""

  def Check(self, value: Any) -> Optional[str]:
    raise NotImplementedError

  def Outside(self) -> Any:
    """A value of the param's kind that is not in the domain (what tests try)."""
    raise NotImplementedError

  def __str__(self) -> str:
    raise NotImplementedError


def _IsNumber(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


class Range(Domain):
  """Numbers from `lo` to `hi` (None: unbounded), each end open or closed; `integer` requires an int."""

  def __init__(self, lo: Optional[float] = None, hi: Optional[float] = None, lo_open: bool = False,
               hi_open: bool = False, integer: bool = False):
    self.lo, self.hi, self.lo_open, self.hi_open, self.integer = lo, hi, lo_open, hi_open, integer

  def Check(self, value):
    kind_ok = (isinstance(value, int) and not isinstance(value, bool) if self.integer
               else _IsNumber(value) and not math.isnan(value))
    if kind_ok:
      low_ok = self.lo is None or (value > self.lo if self.lo_open else value >= self.lo)
      high_ok = self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)
      if low_ok and high_ok:
        return None
    return f'must be {"an integer " if self.integer else ""}{self._Bounds(phrase=True)}'

  def Outside(self):
    if self.lo is not None:
      return self.lo if self.lo_open else (self.lo - 1 if self.integer else self.lo - 0.5)
    if self.hi is not None:
      return self.hi if self.hi_open else (self.hi + 1 if self.integer else self.hi + 0.5)
    return 0.5 if self.integer else float('nan')

  def _Bounds(self, phrase: bool) -> str:
    if self.hi is None and self.lo is not None:
      return f'{">" if self.lo_open else ">="} {_Num(self.lo)}'
    if self.lo is None and self.hi is not None:
      return f'{"<" if self.hi_open else "<="} {_Num(self.hi)}'
    lo = '-inf' if self.lo is None else _Num(self.lo)
    hi = 'inf' if self.hi is None else _Num(self.hi)
    interval = (f'{"(" if self.lo_open or self.lo is None else "["}{lo}, {hi}'
                f'{")" if self.hi_open or self.hi is None else "]"}')
    return f'in {interval}' if phrase else interval

  def __str__(self):
    return ('int ' if self.integer else '') + self._Bounds(phrase=False)


def _Num(x) -> str:
  return f'{x:g}' if isinstance(x, float) else str(x)


def Positive(kind=float) -> Range:
  """> 0: a rate (float), or a size or count of at least one (int)."""
  return Range(lo=1, integer=True) if kind is int else Range(lo=0, lo_open=True)


def NonNegative(kind=float) -> Range:
  """>= 0 (a count, an interval where 0 means off, a weight)."""
  return Range(lo=0, integer=kind is int)


def Probability(include_one: bool = False) -> Range:
  """[0, 1) by default (a dropout rate: 1 would drop everything); [0, 1] with `include_one`."""
  return Range(0.0, 1.0, hi_open=not include_one)


class OneOf(Domain):
  """One of the listed values (an enum); strings compare exactly."""

  def __init__(self, *choices):
    self.choices = choices

  def Check(self, value):
    for choice in self.choices:
      if type(choice) is type(value) and choice == value or choice is None and value is None:
        return None
    return f'must be one of {self}'

  def Outside(self):
    return '<none of these>'

  def __str__(self):
    return '{' + ', '.join(_Text(c) for c in self.choices) + '}'


def _Text(value) -> str:
  name = getattr(value, 'name', None)
  if name is not None and type(value).__name__ == 'DType':
    return f'tf.{name}'
  return repr(value)


class Either(Domain):
  """In any of the domains (e.g. 0 = off, or a count >= 4)."""

  def __init__(self, *domains: Domain):
    self.domains = domains

  def Check(self, value):
    return None if any(d.Check(value) is None for d in self.domains) else f'must be {self}'

  def Outside(self):
    for d in self.domains:
      value = d.Outside()
      if self.Check(value) is not None:
        return value
    raise ValueError(f'no value outside {self} found')

  def __str__(self):
    return ' or '.join(str(d) for d in self.domains)


class Items(Domain):
  """A list or tuple whose items are each in `item` (with `length`, exactly that many)."""

  def __init__(self, item: Domain, length: Optional[int] = None):
    self.item, self.length = item, length

  def Check(self, value):
    if not isinstance(value, (list, tuple)):
      return f'must be a list of {self.item}'
    if self.length is not None and len(value) != self.length:
      return f'must have {self.length} items, each {self.item}'
    for i, x in enumerate(value):
      why = self.item.Check(x)
      if why:
        return f'item {i} ({x!r}) {why}'
    return None

  def Outside(self):
    return [self.item.Outside()] * (self.length or 1)

  def __str__(self):
    return f'{self.length or ""}{" " if self.length else ""}items, each {self.item}'


def Choices(values: Sequence[Any]) -> OneOf:
  """OneOf over a sequence (a module's table of names, e.g. gating.GATINGS)."""
  return OneOf(*sorted(values, key=str))
