"""Precision: fp16/bf16/fp8, TF32 or autocast inside an fp32 problem (a warning, an error under
precision_policy="reject").
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from kernelbench_rl.evaluation.static_policy.rule import Finding, Rule, line_of
from kernelbench_rl.evaluation.static_policy.vocabulary import LOW_PRECISION_DTYPES

if TYPE_CHECKING:
    from kernelbench_rl.evaluation.static_policy.analysis import Analysis


def _precision_downgrade(a: Analysis) -> list[Finding]:
    if a.precision != "fp32":
        return []
    found: list[Finding] = []
    scopes: list[ast.AST] = [s.fn for s in a.path] + list(a.jit_kernels.values())
    for scope in scopes:
        for node in ast.walk(scope):
            if isinstance(node, ast.Attribute):
                qn = a.resolver.qualname(node)
                if qn in LOW_PRECISION_DTYPES:
                    found.append((line_of(node), f"{qn} in an fp32 problem: keep fp32 precision"))
            elif isinstance(node, ast.Call) and a.resolver.qualname(node.func) == "triton.language.dot":
                for kw in node.keywords:
                    value = kw.value.value if isinstance(kw.value, ast.Constant) else None
                    tf32 = (kw.arg == "input_precision" and isinstance(value, str) and value.startswith("tf32")) \
                        or (kw.arg == "allow_tf32" and value is True)
                    if tf32:
                        found.append((line_of(node), "tl.dot in TF32 in an fp32 problem: use input_precision=\"ieee\""))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("half", "bfloat16")
                  and not node.args):
                if a.resolver.qualname(node.func) is None:
                    found.append((line_of(node), f".{node.func.attr}() in an fp32 problem: keep fp32 precision"))
    for node, qn in a.used_references():
        if a.classify_torch(qn) == "precision":
            found.append((line_of(node), f"{qn}: autocast/reduced matmul precision in an fp32 problem"))
    for text in a.cuda_sources:
        if re.search(r"\b(__half2?|half2|__nv_bfloat16\w*|__float2half\w*|__float2bfloat16\w*)\b", text):
            found.append((0, "half/bfloat16 types in the CUDA source of an fp32 problem"))
    return found


PRECISION_DOWNGRADE = Rule(
    "precision_downgrade", "warning",
    "fp16/bf16/fp8 or autocast inside an fp32 problem.",
    _precision_downgrade,
)
