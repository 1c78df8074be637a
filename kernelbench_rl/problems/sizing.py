"""Small sizes for problems that do not declare `KBRL_SMALL_SIZES` (external KernelBench files).

Heuristic: shrink large module-level integer constants (batch, feature and spatial sizes), and
the large integers inside module-level lists (e.g. an MLP's `layer_sizes = [400, 800]`), so
Triton's CPU interpreter can run the problem. Small constants (kernel sizes, strides, padding,
head counts, channel counts of 3) are left alone, since shapes often depend on them; a shrunk
value stays a multiple of every kept constant that divided the original (768 with `n_head = 12`
becomes 24, not 16, so `n_embd % n_head == 0` still holds).
"""

from __future__ import annotations

import ast
import math

_SHRINK_ABOVE = 64
_SMALL_VALUE = 16
_SMALL_VALUE_FOR_HUGE = 32  # for originals >= 4096: keeps a little more work per row
_HUGE = 4096


def _shrunk(value: int, kept: list[int]) -> int:
    target = _SMALL_VALUE if value < _HUGE else _SMALL_VALUE_FOR_HUGE
    step = 1
    for divisor in kept:
        if value % divisor == 0:
            candidate = math.lcm(step, divisor)
            if candidate <= min(value, _SHRINK_ABOVE):
                step = candidate
    return step * math.ceil(target / step)


def _is_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def infer_small_sizes(source: str) -> dict[str, object]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    assignments: list[tuple[str, ast.AST]] = [
        (node.targets[0].id, node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    ]
    # Only small kept constants (head counts, groups, batch sizes) are honoured as divisors: the
    # larger ones (channel counts of 32 or 64) would inflate every shrunk size they divide.
    kept = [v.value for _, v in assignments if _is_int(v) and 1 < v.value <= _SMALL_VALUE]
    sizes: dict[str, object] = {}
    for name, value in assignments:
        if _is_int(value) and value.value > _SHRINK_ABOVE:
            sizes[name] = _shrunk(value.value, kept)
        elif isinstance(value, ast.List) and value.elts and all(_is_int(e) for e in value.elts):
            items = [e.value for e in value.elts]
            if any(v > _SHRINK_ABOVE for v in items):
                sizes[name] = [_shrunk(v, kept) if v > _SHRINK_ABOVE else v for v in items]
    return sizes
