"""What a rule is: a named check over the `Analysis` of a candidate, returning (line, message) findings."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from kernelbench_rl.evaluation.static_policy.analysis import Analysis

Severity = Literal["error", "warning"]
Finding = tuple[int, str]  # (line, message); line 0 when there is none (CUDA source strings)


@dataclass(frozen=True)
class Rule:
    name: str
    severity: Severity
    description: str
    check: Callable[[Analysis], list[Finding]]
    backends: frozenset[str] = frozenset({"triton", "cuda"})
    hack: bool = False  # firing means a reward hack (the evaluator sets Flag.HACK; the reward is zero)


def line_of(node: ast.AST) -> int:
    return getattr(node, "lineno", 0)
