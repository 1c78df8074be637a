"""The candidate's own kernels, named from its source (worker side; stdlib only).

Used to decide, from a profile, whether the candidate's kernels were launched and how much GPU
time they carry. Names are read by the worker from the source, never reported by the child.
"""

from __future__ import annotations

import ast
import re

_GLOBAL_RE = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?\w[\w\s:<>,*&]*?\b(\w+)\s*\(")
_TRITON_DECORATORS = {"jit", "autotune", "heuristics"}


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def triton_kernel_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {
        node.name for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and any(_decorator_name(d) in _TRITON_DECORATORS for d in node.decorator_list)
    }


def cuda_source_strings(source: str) -> list[str]:
    """String constants of the module that hold CUDA code (contain __global__)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value
    ]


def cuda_kernel_names(source: str) -> set[str]:
    names: set[str] = set()
    for text in cuda_source_strings(source) or [source]:
        names.update(_GLOBAL_RE.findall(text))
    return names


def own_kernel_names(source: str, backend: str) -> set[str]:
    return triton_kernel_names(source) if backend == "triton" else cuda_kernel_names(source)


def is_own_kernel(event_name: str, names: set[str]) -> bool:
    for name in names:
        if event_name == name or re.search(rf"(^|[^A-Za-z0-9_]){re.escape(name)}([^A-Za-z0-9_]|$)", event_name):
            return True
    return False


def kernel_share(kernels: list[list], names: set[str]) -> tuple[int, float, float]:
    """(launches of own kernels, own GPU microseconds, share of all GPU time) from profile rows."""
    own_launches, own_us, total_us = 0, 0.0, 0.0
    for row in kernels:
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)):
            continue
        name, count, us = row[0], int(row[1]), float(row[2])
        total_us += us
        if is_own_kernel(name, names):
            own_launches += count
            own_us += us
    share = own_us / total_us if total_us > 0 else 0.0
    return own_launches, own_us, share


def top_kernels(kernels: list[list], count: int = 3, width: int = 90) -> str:
    """The kernels that took the most GPU time in a profile, named briefly (which algorithm a library
    picked is what tells two runs of the same code apart)."""
    rows = [row for row in kernels if isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)]
    rows.sort(key=lambda row: -float(row[2]))
    return "; ".join(f"{row[0][:width]} x{int(row[1])} {float(row[2]) / 1000:.2f} ms" for row in rows[:count])
