"""Fallbacks: try/except or contextlib.suppress in the forward path hide a failing kernel behind PyTorch."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from kernelbench_rl.evaluation.static_policy.rule import Finding, Rule, line_of

if TYPE_CHECKING:
    from kernelbench_rl.evaluation.static_policy.analysis import Analysis


def _try_fallback(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    for node, _scan in a.path_nodes():
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            if getattr(node, "handlers", None):
                found.append((line_of(node), "try/except in the forward path (no fallbacks; let errors surface)"))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                target = item.context_expr.func if isinstance(item.context_expr, ast.Call) else item.context_expr
                if a.resolver.qualname(target) == "contextlib.suppress":
                    found.append((line_of(node), "contextlib.suppress in the forward path (no fallbacks)"))
    return found


TRY_FALLBACK = Rule(
    "try_fallback", "error",
    "No try/except (or contextlib.suppress) in the forward path: no fallbacks.",
    _try_fallback, hack=True,
)
