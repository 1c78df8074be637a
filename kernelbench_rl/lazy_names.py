"""A package face whose public names are imported on first use (PEP 562's module `__getattr__`).

`kernelbench_rl.evaluation`, `.policy` and `.training` name their public classes and functions in one table
(name -> module) and import a module only when one of its names is asked for: the worker side never pulls in the
orchestrator's stack, and a command that refuses a bad flag never pays for torch or the Tinker SDK.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def loader(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """The `__getattr__` of `package`: each name in `names` from its module, anything else an AttributeError."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
