"""A lazy door: a package's `__getattr__` that imports each name from its home module on first use, so a front end
that reads one name pays for that module only (probes/monitoring, probes/outputs, probes/reference use it). Nothing
is kept: the home's own binding is the one read, each time, so a test that patches the home is seen."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def door_getattr(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """The `__getattr__` of `package`, whose names live in the modules `homes` maps them to."""
    def read(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)
    return read
