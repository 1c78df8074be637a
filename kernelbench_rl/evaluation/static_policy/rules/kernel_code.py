"""What runs in a Triton candidate besides Triton: native code compiled or loaded at run time, and Python inside a
`@triton.jit` body (which Triton's interpreter runs as Python, and the GPU compiler refuses).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from kernelbench_rl.evaluation.static_policy.rule import Finding, Rule, line_of
from kernelbench_rl.evaluation.static_policy.vocabulary import (
    NATIVE_MODULE_WORDS,
    NATIVE_MODULES,
    NATIVE_NAMES,
    under,
    under_any,
)

if TYPE_CHECKING:
    from kernelbench_rl.evaluation.static_policy.analysis import Analysis


def _native_code(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    advice = "native code is not allowed in a Triton candidate; write the work in @triton.jit kernels"
    for node, qn in a.references():  # imports included
        if under_any(qn, NATIVE_MODULES):
            found.append((line_of(node), f"{qn}: {advice}"))
    for node in a.all_nodes:
        name = None
        if isinstance(node, ast.Attribute) and node.attr in NATIVE_NAMES:
            name = node.attr
        elif isinstance(node, ast.Name) and node.id in NATIVE_NAMES:
            name = node.id
        elif isinstance(node, ast.alias) and {node.name.rsplit(".", 1)[-1], node.asname} & NATIVE_NAMES:
            name = node.name
        else:
            text = (_folded_string(node) or "").strip()
            if text in NATIVE_NAMES or (under_any(text, NATIVE_MODULES) and text.split(".")[0] not in NATIVE_MODULE_WORDS):
                name = repr(text)
        if name is not None:
            found.append((line_of(node), f"{name}: {advice}"))
    for call in a.extension_calls:
        found.append((line_of(call), f"{ast.unparse(call.func)}(...) compiles C++/CUDA: {advice}"))
    return found


def _folded_string(node: ast.AST) -> str | None:
    """The text of a string the module spells out, constants joined: `"cpp_" + "extension"`, `f"cpp_{'extension'}"`,
    `"".join(["cpp_", "extension"])`; None for anything else (a string built from run-time values)."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _folded_string(node.left), _folded_string(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = [_folded_string(v.value if isinstance(v, ast.FormattedValue) and v.conversion == -1 and v.format_spec is None
                                else v) for v in node.values]
        return "".join(parts) if all(p is not None for p in parts) else None  # type: ignore[arg-type]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
            and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple)) and not node.keywords):
        sep = _folded_string(node.func.value)
        parts = [_folded_string(e) for e in node.args[0].elts]
        return sep.join(parts) if sep is not None and all(p is not None for p in parts) else None  # type: ignore[arg-type]
    return None


# Builtins that only Python has: a Triton kernel cannot call them, and under the interpreter they reach into Python.
_PYTHON_ONLY_BUILTINS = frozenset({"getattr", "setattr", "delattr", "hasattr", "vars", "globals", "locals", "dir",
                                   "eval", "exec", "compile", "__import__", "open", "type", "object", "id", "iter",
                                   "next", "super", "callable", "memoryview", "bytearray", "breakpoint", "input",
                                   "__builtins__", "staticmethod", "classmethod", "property"})
# Module-level values a kernel may read: Triton's own (constexpr, dtypes) and plain constants.
_CONSTANT_CALLS = ("triton.language.constexpr", "triton.language.core.constexpr")


def _module_values(a: Analysis) -> dict[str, list[ast.expr]]:
    values: dict[str, list[ast.expr]] = {}
    for node in a.tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                values.setdefault(target.id, []).append(node.value)
    return values


def _constant(a: Analysis, value: ast.expr) -> bool:
    if isinstance(value, ast.Constant):
        return True
    if isinstance(value, ast.UnaryOp):
        return _constant(a, value.operand)
    if isinstance(value, ast.Tuple):  # (a list, a dict or a set is state the forward can fill)
        return all(_constant(a, v) for v in value.elts)
    if isinstance(value, ast.BinOp):
        return _constant(a, value.left) and _constant(a, value.right)
    if isinstance(value, ast.Call):
        return a.resolver.qualname(value.func) in _CONSTANT_CALLS and all(_constant(a, v) for v in value.args)
    qn = a.resolver.qualname(value)
    return qn is not None and under(qn, "triton")


def _triton_helper(a: Analysis, fn: ast.FunctionDef) -> bool:
    """A module function Triton itself lets a kernel call (`@triton.constexpr_function` and the like)."""
    for decorator in fn.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if under(a.resolver.qualname(target), "triton"):
            return True
    return False


def _kernel_python(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    module_values = _module_values(a)
    for kernel_name, fn in a.jit_kernels.items():
        params = {arg.arg for arg in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
        body = [node for stmt in fn.body for node in ast.walk(stmt)]  # (not its decorators: autotune's hooks)
        local = {n.id for n in body if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        where = f"inside the @triton.jit kernel {kernel_name}"
        for node in body:
            if isinstance(node, ast.Attribute) and node.attr == "handle":
                found.append((line_of(node), f".handle {where}: the interpreter's internals are no Triton code"))
            if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)) or node.id in params | local:
                continue
            name = node.id
            qn = a.resolver.qualname(node)
            if qn is not None:
                if not (under(qn, "triton") or under(qn, "math")) and name not in a.jit_kernels:
                    found.append((line_of(node), f"{qn} {where}: a kernel holds Triton code only"))
                continue
            if name in a.jit_kernels:
                continue
            if name in a.module_functions and not _triton_helper(a, a.module_functions[name]):
                found.append((line_of(node), f"the Python function {name} is called {where}: a kernel calls only "
                                             "@triton.jit functions"))
            elif name in a.classes or name in a.module_lambdas:
                found.append((line_of(node), f"{name} {where}: a kernel holds Triton code only"))
            elif name in module_values and not all(_constant(a, v) for v in module_values[name]):
                found.append((line_of(node), f"the module-level {name} is read {where}: a kernel reads module "
                                             "constants only (tl.constexpr), its data through pointers"))
            elif name in _PYTHON_ONLY_BUILTINS and name not in a.defined_names:
                found.append((line_of(node), f"{name} {where}: Python's reflection is no Triton code"))
    in_kernels = {id(n) for fn in a.jit_kernels.values() for stmt in fn.body for n in ast.walk(stmt)}
    for node in a.all_nodes:  # an interpreter tensor's NumPy array, reached from a helper the kernel was given
        if (isinstance(node, ast.Attribute) and node.attr == "handle" and id(node) not in in_kernels
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):  # its own attribute
            found.append((line_of(node), ".handle: the interpreter's internals are no Triton code"))
    return found


NATIVE_CODE = Rule(
    "native_code", "error",
    "A Triton candidate compiles or loads no native code: no torch.utils.cpp_extension (load_inline), "
    "torch.ops.load_library, ctypes, cffi, numba, CuPy raw kernels, NumPy's ctypeslib or f2py, nor the like.",
    _native_code, backends=frozenset({"triton"}), hack=True,
)
KERNEL_PYTHON = Rule(
    "kernel_python", "error",
    "A @triton.jit kernel holds Triton code only: no torch, NumPy or other library, no plain Python function, "
    "class or module-level object beyond constants, no Python reflection and no interpreter internals (.handle).",
    _kernel_python, backends=frozenset({"triton"}), hack=True,
)
