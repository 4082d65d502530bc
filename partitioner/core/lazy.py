"""Heavy third-party modules imported when first used, so that ``import partitioner`` stays light.

OR-Tools' ``cp_model`` (it imports pandas), PuLP and networkx together take
about 0.4 s to import on a 2-core machine, most of ``partitioner``'s start-up;
a ``partitioner plan`` with ``dp`` needs none of them. :func:`lazy_module`
returns the module object at once and runs its code on the first attribute
access (:class:`importlib.util.LazyLoader`, the recipe of the Python
documentation [1]_). A module that is missing still fails at once, with
:class:`ModuleNotFoundError`.

References
----------
.. [1] Python documentation, ``importlib`` -- "Implementing lazy imports",
   https://docs.python.org/3/library/importlib.html#implementing-lazy-imports
"""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

__all__ = ["lazy_module"]


def lazy_module(name: str) -> ModuleType:
    """The module ``name`` (dotted), its code run on first use; the loaded module if it already is."""
    found = sys.modules.get(name)
    if found is not None:
        return found
    spec = importlib.util.find_spec(name)  # imports the parent packages (light), not the module
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
