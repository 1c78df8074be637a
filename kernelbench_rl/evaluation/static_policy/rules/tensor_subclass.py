"""Tensor subclasses: no torch.Tensor subclass and no __torch_function__ / __torch_dispatch__.

A `torch.Tensor` subclass with a `__torch_function__` (or `__torch_dispatch__`) can defer the real work
until its output is first read, after the timer has stopped; a kernel module has no use for either. The
sandbox refuses such outputs at run time (evaluation/sandbox/outputs.py); these rules say so before anything runs.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from kernelbench_rl.evaluation.static_policy.names import unwrap_callee
from kernelbench_rl.evaluation.static_policy.rule import Rule

if TYPE_CHECKING:
    from kernelbench_rl.evaluation.static_policy.analysis import Analysis

# Classes whose subclasses are tensors (Parameter and Buffer are torch.Tensor subclasses themselves).
TENSOR_CLASSES = frozenset({
    "torch.Tensor", "torch.TensorBase", "torch._C.TensorBase", "torch._C._TensorBase", "torch.nn.Parameter",
    "torch.nn.parameter.Parameter", "torch.nn.Buffer", "torch.nn.parameter.Buffer",
    "torch.nn.UninitializedParameter", "torch.nn.parameter.UninitializedParameter",
})
SUBCLASS_MAKERS = frozenset({"as_subclass", "_make_subclass", "_make_wrapper_subclass"})
OVERRIDE_HOOKS = frozenset({"__torch_function__", "__torch_dispatch__"})
CLASS_BUILDERS = ("types.new_class",)


def _tensor_aliases(a: Analysis) -> set[str]:
    """Names assigned a tensor class anywhere (`T = torch.Tensor`, also inside functions)."""
    names: set[str] = set()
    for node in a.all_nodes:
        if isinstance(node, ast.Assign) and a.resolver.qualname(node.value) in TENSOR_CLASSES:
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def tensor_subclass(a: Analysis) -> list[tuple[int, str]]:
    """Classes derived from torch.Tensor (any spelling), subclass construction, classes built at run time."""
    found: list[tuple[int, str]] = []
    aliases = _tensor_aliases(a)
    derived: set[str] = set()
    classes = [n for n in a.all_nodes if isinstance(n, ast.ClassDef)]
    for _ in range(len(classes)):  # a class deriving from a candidate's tensor class is one too
        before = len(derived)
        for node in classes:
            for base in node.bases:
                qn = a.resolver.qualname(base)
                name = base.id if isinstance(base, ast.Name) else None
                if qn in TENSOR_CLASSES or name in aliases or name in derived:
                    if node.name not in derived:
                        derived.add(node.name)
                        found.append((node.lineno, f"class {node.name} derives from {ast.unparse(base)}: "
                                                   "outputs must be plain torch.Tensor objects"))
        if len(derived) == before:
            break
    for node in a.all_nodes:
        if isinstance(node, ast.Attribute) and node.attr in SUBCLASS_MAKERS:
            found.append((node.lineno, f".{node.attr} makes a torch.Tensor subclass: outputs must be plain tensors"))
        elif isinstance(node, ast.Constant) and node.value in SUBCLASS_MAKERS:
            found.append((node.lineno, f"{node.value!r} names a way to make a torch.Tensor subclass"))
        elif isinstance(node, ast.Call):
            func = unwrap_callee(node.func)
            if isinstance(func, ast.Name) and func.id == "type" and len(node.args) == 3 and "type" not in a.defined_names:
                found.append((node.lineno, "type(name, bases, namespace) builds a class at run time"))
            elif a.resolver.qualname(func) in CLASS_BUILDERS:
                found.append((node.lineno, f"{ast.unparse(func)} builds a class at run time"))
    return found


def torch_function_override(a: Analysis) -> list[tuple[int, str]]:
    """Defining (or naming) __torch_function__ / __torch_dispatch__ anywhere in the module."""
    found: list[tuple[int, str]] = []
    for node in a.all_nodes:
        name = None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = node.name
        elif isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value
        if name in OVERRIDE_HOOKS:
            found.append((getattr(node, "lineno", 0), f"{name} intercepts torch calls on tensors "
                                                      "(work deferred past the timer); not allowed in a kernel module"))
    return found


TENSOR_SUBCLASS = Rule(
    "tensor_subclass", "error",
    "No torch.Tensor subclasses (any spelling), as_subclass, _make_subclass, "
    "_make_wrapper_subclass or classes built at run time: outputs must be plain tensors.",
    tensor_subclass, hack=True,
)
TORCH_FUNCTION_OVERRIDE = Rule(
    "torch_function_override", "error",
    "No __torch_function__ or __torch_dispatch__ (work deferred until an "
    "output is read, past the timer).",
    torch_function_override, hack=True,
)
