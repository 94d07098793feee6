"""lingvo_gshard: GShard Mixture-of-Experts Transformers for multilingual translation."""
import os as _os

# In a source checkout that is not installed (Bazel, or `python -m` from the repo root), `params/`, `data/`
# and `tools/` sit next to this package rather than inside it; setup.py maps them to
# `lingvo_gshard.{params,data,tools}` on install. Extending __path__ to the repo root gives the same import
# names in a checkout. The marker file keeps this from ever firing inside site-packages.
_ROOT = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_ROOT, 'setup.py')) and _os.path.isdir(_os.path.join(_ROOT, 'params')):
  __path__.append(_ROOT)  # pylint: disable=undefined-variable

__version__ = '0.1.0'
