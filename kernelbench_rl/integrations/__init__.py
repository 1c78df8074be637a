"""Bridges to other people's tools: an OpenEnv environment server, TRL's GRPOTrainer, and
OpenAI-compatible models. Each module imports its third-party package lazily or at its own
top, so `import kernelbench_rl` never needs them."""

import importlib
import warnings
from types import ModuleType


def import_quietly(name: str) -> ModuleType:
    """Import a module whose dependencies warn about their own internals at import time.

    openenv imports fastmcp, which imports a deprecated authlib module; authlib turns its warning
    to "always" itself, so an ignore filter cannot hide it: it is recorded here and dropped."""
    with warnings.catch_warnings(record=True):
        return importlib.import_module(name)
