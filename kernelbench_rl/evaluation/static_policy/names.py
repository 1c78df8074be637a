"""Imports and name resolution: what a name or attribute chain in the candidate stands for.

`import torch.nn.functional as F`, `from torch import nn` and `mm = torch.mm` all resolve to the library
path, so no spelling evades a rule. Also finds the CUDA/C++ source strings and the extension loads.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from kernelbench_rl.evaluation.static_policy.vocabulary import COMPUTE_NAMES


@dataclass
class ImportTable:
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> dotted path it stands for
    imported: list[tuple[ast.stmt, str]] = field(default_factory=list)  # (statement, full dotted name)
    star_modules: list[str] = field(default_factory=list)

    def imported_names(self) -> list[str]:
        return [name for _, name in self.imported]


def collect_imports(tree: ast.AST) -> ImportTable:
    """Every import anywhere in the module (function-local imports count too)."""
    table = ImportTable()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    table.aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    table.aliases[root] = root
                table.imported.append((node, alias.name))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name == "*":
                    table.star_modules.append(node.module)
                    table.imported.append((node, node.module))
                    continue
                full = f"{node.module}.{alias.name}"
                table.aliases[alias.asname or alias.name] = full
                table.imported.append((node, full))
    return table


def unwrap_callee(expr: ast.AST) -> ast.AST:
    """What an expression that only passes a value on stands for: `(f := g)` is g, `[g][0]` and `(g,)[0]` are g,
    `{"k": g}["k"]` is g."""
    for _ in range(16):
        if isinstance(expr, ast.NamedExpr):
            expr = expr.value
        elif isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant):
            key = expr.slice.value
            holder = expr.value
            if isinstance(holder, (ast.List, ast.Tuple)) and isinstance(key, int) and -len(holder.elts) <= key < len(holder.elts):
                expr = holder.elts[key]
            elif isinstance(holder, ast.Dict):
                found = [v for k, v in zip(holder.keys, holder.values) if isinstance(k, ast.Constant) and k.value == key]
                if not found:
                    return expr
                expr = found[-1]
            else:
                return expr
        else:
            return expr
    return expr


def dotted_name(expr: ast.AST) -> str | None:
    """`a.b.c` for a pure attribute chain (also `getattr(a, "b")`, and through `unwrap_callee`), else None."""
    expr = unwrap_callee(expr)
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        base = dotted_name(expr.value)
        return f"{base}.{expr.attr}" if base else None
    if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr"
            and len(expr.args) >= 2 and isinstance(expr.args[1], ast.Constant) and isinstance(expr.args[1].value, str)):
        base = dotted_name(expr.args[0])
        return f"{base}.{expr.args[1].value}" if base else None
    return None


class Resolver:
    """Resolves names and attribute chains to the library path they stand for (`F.relu` -> torch.nn.functional.relu)."""

    def __init__(self, imports: ImportTable, defined_names: frozenset[str] = frozenset()):
        self.imports = imports
        self.aliases = dict(imports.aliases)
        self.defined_names = defined_names

    def add_alias(self, name: str, qualname: str) -> None:
        self.aliases[name] = qualname

    def qualname(self, expr: ast.AST, local_aliases: dict[str, str] | None = None) -> str | None:
        dotted = dotted_name(expr)
        if dotted is None:
            return None
        root, _, rest = dotted.partition(".")
        base = (local_aliases or {}).get(root) or self.aliases.get(root)
        if base is None and root not in self.defined_names:
            base = self._from_star_import(root)
        if base is None:
            return None
        return f"{base}.{rest}" if rest else base

    def _from_star_import(self, name: str) -> str | None:
        for module in self.imports.star_modules:
            if module.startswith("torch") and name in COMPUTE_NAMES:
                return f"{module}.{name}"
            if module == "torch" and name in ("nn", "cuda", "jit", "compile"):
                return f"torch.{name}"
        return None


def is_triton_jit(fn: ast.AST, resolver: Resolver) -> bool:
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for deco in fn.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        qn = resolver.qualname(target)
        if qn in ("triton.jit", "triton.runtime.jit", "triton.runtime.jit.jit"):
            return True
    return False


def docstring_nodes(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


_CPP_MARKERS = ("__global__", "#include", "torch::", "at::", "PYBIND11", "<<<")


def cuda_source_strings(tree: ast.AST) -> list[str]:
    """String constants that look like CUDA/C++ source (docstrings excluded)."""
    docstrings = docstring_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
            if any(marker in text for marker in _CPP_MARKERS):
                found.append(text)
    return found


_EXTENSION_LOADERS = ("torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load")


def extension_load_calls(tree: ast.AST, resolver: Resolver) -> list[ast.Call]:
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            qn = resolver.qualname(node.func)
            if qn in _EXTENSION_LOADERS or (qn or "").endswith(".load_inline"):
                calls.append(node)
    return calls


def strip_cpp_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", " ", text)
