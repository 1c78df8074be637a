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


def _row_ok(row: object) -> bool:
    return isinstance(row, list) and len(row) >= 3 and isinstance(row[0], str)


def kernel_share(kernels: list[list], names: set[str]) -> tuple[int, float, float]:
    """(launches of own kernels, own GPU microseconds, share of all GPU time) from profile rows, by name: what the
    CUDA backend has (its launches are made in C++, out of the child's sight). Triton candidates are credited by
    provenance instead (attributed_share)."""
    own_launches, own_us, total_us = 0, 0.0, 0.0
    for row in kernels:
        if not _row_ok(row):
            continue
        name, count, us = row[0], int(row[1]), float(row[2])
        total_us += us
        if is_own_kernel(name, names):
            own_launches += count
            own_us += us
    share = own_us / total_us if total_us > 0 else 0.0
    return own_launches, own_us, share


def _shortest_us(row: list, k: int) -> float:
    """The device time of the `k` shortest events of a profile row. Rows list each event's time (shortest first, up
    to a cap); events past the list are the longest, taken at their mean."""
    count, total = int(row[1]), float(row[2])
    each = sorted(float(v) for v in row[3]) if len(row) > 3 and isinstance(row[3], list) else []
    if k <= 0 or count <= 0:
        return 0.0
    if k >= count:
        return total
    if k <= len(each):
        return sum(each[:k])
    if not each:  # no per-event times: the share of the row's total its k events carry, at their mean
        return total * k / count
    rest = (total - sum(each)) / max(1, count - len(each))
    return sum(each) + rest * (k - len(each))


def attributed_share(kernels: list[list], launches: dict[str, int]) -> tuple[int, float, float]:
    """(own launches credited, own GPU microseconds, share of all GPU time), crediting by provenance.

    `launches`: the launches the child counted per own Triton kernel name (sandbox/launch_record.py), made through a
    `@triton.jit` function of the candidate's module. A profile event is the candidate's only if its name is such a
    kernel's and no more of them are credited than were launched, the shortest first: a kernel named after a
    library's lends it none of that library's time (a Triton `vectorized_elementwise_kernel` launched once beside
    PyTorch's kernel of that name is credited one event, the shorter). Names the child never launched are
    foreign whatever they are called."""
    remaining = {str(name): int(count) for name, count in (launches or {}).items()
                 if isinstance(count, int) and count > 0}
    rows = [row for row in kernels if _row_ok(row)]
    total_us = sum(float(row[2]) for row in rows)
    credited = [0] * len(rows)
    # Exact names first, then names that merely contain an own kernel's (a profiler's decorated name), so an exact
    # event is never left uncredited because a look-alike took its count.
    for exact in (True, False):
        for index, row in enumerate(rows):
            for own in sorted(remaining):
                if remaining[own] <= 0 or (row[0] == own) != exact or not is_own_kernel(row[0], {own}):
                    continue
                take = min(int(row[1]) - credited[index], remaining[own])
                if take > 0:
                    credited[index] += take
                    remaining[own] -= take
    own_us = sum(_shortest_us(row, k) for row, k in zip(rows, credited))
    share = own_us / total_us if total_us > 0 else 0.0
    return sum(credited), own_us, share


PROFILE_ROWS = 12


def profile_rows(kernels: list[list], count: int = PROFILE_ROWS) -> list[list]:
    """The profile's rows with the most GPU time first, at most `count` (names cut to 160 characters)."""
    rows = [[str(r[0])[:160], int(r[1]), round(float(r[2]), 3)] for r in kernels if _row_ok(r)]
    rows.sort(key=lambda row: -row[2])
    return rows[:count]


def profile_text(rows: list[list], speed_of_light: dict | None, own_names: set[str] | None = None,
                 count: int = 4, width: int = 60) -> str:
    """A profile in a few lines a model can read: kernels per forward with their share of GPU time, and the
    speed-of-light line."""
    lines = []
    total = sum(float(r[2]) for r in rows) or 0.0
    if rows:
        launches = sum(int(r[1]) for r in rows)
        parts = []
        for name, calls, us in rows[:count]:
            mark = " (yours)" if own_names is not None and is_own_kernel(name, own_names) else ""
            share = f"{float(us) / total:.0%}" if total else "?"
            parts.append(f"{name[:width]}{mark} {share}, {float(us) / 1000:.3f} ms x{int(calls)}")
        more = f"; {len(rows) - count} more" if len(rows) > count else ""
        lines.append(f"GPU kernels per forward ({launches} launches): " + "; ".join(parts) + more)
    if speed_of_light and speed_of_light.get("sol_fraction") is not None:
        sol = speed_of_light
        lines.append(f"Speed of light: {sol['sol_fraction']:.2f} of the {sol['bound']}-bound floor "
                     f"({sol['floor_ms']:.3g} ms on {sol['gpu']}: {sol['dram_bytes'] / 1e9:.3g} GB, "
                     f"{sol['flops'] / 1e9:.3g} GFLOP)")
    return "\n".join(lines)


def top_kernels(kernels: list[list], count: int = 3, width: int = 90) -> str:
    """The kernels that took the most GPU time in a profile, named briefly (which algorithm a library
    picked is what tells two runs of the same code apart)."""
    rows = [row[:3] for row in kernels if _row_ok(row)]
    rows.sort(key=lambda row: -float(row[2]))
    return "; ".join(f"{row[0][:width]} x{int(row[1])} {float(row[2]) / 1000:.2f} ms" for row in rows[:count])
