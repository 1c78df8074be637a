"""Small sizes for problems that do not declare `KBRL_SMALL_SIZES` (external KernelBench files).

Heuristic: shrink large module-level integer constants (batch, feature and spatial sizes) so
Triton's CPU interpreter can run the problem. Small constants (kernel sizes, strides, padding,
channel counts of 3) are left alone, since shapes often depend on them.
"""

from __future__ import annotations

import ast

_SHRINK_ABOVE = 64
_SMALL_VALUE = 16


def infer_small_sizes(source: str) -> dict[str, object]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    sizes: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Constant) and type(value.value) is int and value.value > _SHRINK_ABOVE:
                sizes[node.targets[0].id] = _SMALL_VALUE if value.value < 4096 else 32
    return sizes
