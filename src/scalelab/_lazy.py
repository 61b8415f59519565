"""A module imported on first use, so that importing its user stays light.

``torch = LazyModule("torch")`` binds a name that imports torch the first time one of its
attributes is read (``torch.device``, ``nn.Module``), then behaves as the module. Code that
only defines classes and functions over it (``scalelab.workload``) can then be imported by
the command line's parsers and by a plan read from the cache without the two seconds of
importing torch.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class LazyModule:
    """A stand-in for module ``name``: attribute reads import it and read from it."""

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def _module(self) -> ModuleType:
        return importlib.import_module(self._name)

    def __getattr__(self, attr: str):
        return getattr(self._module(), attr)

    def __setattr__(self, attr: str, value) -> None:
        setattr(self._module(), attr, value)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"
