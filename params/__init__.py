"""Registered experiments (installed as lingvo_gshard.params).

Every module of this package that registers experiments is listed here, so `LoadAll()` finds them all and a
reader can too. Experiments outside the package come in through the entry-point group
`lingvo_gshard.experiments` of installed distributions (docs/guides/your_experiment.md), loaded after these.
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
  """Imports every module of EXPERIMENT_MODULES (each registers its experiments), then what the installed
  distributions' entry points of `registry.ENTRY_POINT_GROUP` name; returns the registry. A broken entry point
  is a one-line RegistryError naming it and its distribution."""
  for module in EXPERIMENT_MODULES:
    importlib.import_module(f'{__name__}.{module}')
  registry.LoadEntryPoints()
  return registry.REGISTRY
