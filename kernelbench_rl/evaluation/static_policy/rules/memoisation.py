"""Memoisation: outputs cached by data_ptr/_version or functools caches in the forward path (a warning)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from kernelbench_rl.evaluation.static_policy.rule import Finding, Rule, line_of

if TYPE_CHECKING:
    from kernelbench_rl.evaluation.static_policy.analysis import Analysis


def _memoisation(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    for node, _scan in a.path_nodes():
        if isinstance(node, ast.Attribute) and node.attr in ("_version", "_cdata"):
            found.append((line_of(node), f".{node.attr}: outputs must be recomputed from the inputs every call"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "data_ptr":
            parent = a.parents.get(id(node))
            if isinstance(parent, (ast.Tuple, ast.Dict, ast.Subscript)) or (
                    isinstance(parent, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in parent.ops)):
                found.append((line_of(node), "data_ptr() as a cache key: outputs must be recomputed every call"))
    functions = [s.fn for s in a.path] + [n for n, _s in a.path_nodes() if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for fn in functions:
        for deco in getattr(fn, "decorator_list", []):
            qn = a.resolver.qualname(deco.func if isinstance(deco, ast.Call) else deco)
            if qn in ("functools.lru_cache", "functools.cache"):
                found.append((line_of(deco), f"{qn} in the forward path: cache only what derives from shapes"))
    return found


MEMOISATION = Rule(
    "memoisation", "warning",
    "No caching of outputs keyed by data_ptr/_version (inputs are fresh every call).",
    _memoisation,
)
