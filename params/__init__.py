"""Registered experiments (installed as lingvo_gshard.params).

Every module that registers experiments is listed here, so `LoadAll()` finds them all and a reader can too.
The registry itself (`core/registry.py`) knows nothing of this package: whoever needs every experiment (the
tools, the baseline campaign) calls `LoadAll()` first.
"""
import importlib

from lingvo_gshard.core import registry

EXPERIMENT_MODULES = (
    'gshard_paper',
    'm4_tiny',
    'bilingual',
)


def LoadAll() -> registry.Registry:
  """Imports every module of EXPERIMENT_MODULES (each registers its experiments); returns the registry."""
  for module in EXPERIMENT_MODULES:
    importlib.import_module(f'{__name__}.{module}')
  return registry.REGISTRY
