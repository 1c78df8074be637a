"""PyTorch doing the work: torch ops, nn layers, tensor methods and operators on tensors in the forward path,
and PyTorch copies (a warning).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from kernelbench_rl.evaluation.static_policy.rule import Finding, Rule, line_of
from kernelbench_rl.evaluation.static_policy.vocabulary import TENSOR_COMPUTE_METHODS, under

if TYPE_CHECKING:
    from kernelbench_rl.evaluation.static_policy.analysis import Analysis


def _torch_compute(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    for node, scan in a.path_nodes():
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            found.append((line_of(node), "the @ operator runs a PyTorch matmul; do it in your kernel"))
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.MatMult):
            found.append((line_of(node), "the @= operator runs a PyTorch matmul; do it in your kernel"))
        elif isinstance(node, ast.Call):
            info = scan.call_info(node)
            if info.kind == "qualified" and info.name in ("operator.matmul", "operator.imatmul"):
                found.append((line_of(node), f"{info.name} runs a PyTorch matmul; do it in your kernel"))
            elif info.kind == "qualified" and a.classify_torch(info.name) == "compute":
                found.append((line_of(node), f"{info.name} computes in PyTorch; do the work in your own kernel"))
            elif info.kind == "nn_layer":
                found.append((line_of(node), f"{info.name}(...) calls a PyTorch layer; keep layers only as parameter holders"))
            elif info.kind == "torch_fn":
                found.append((line_of(node), f"{info.name}(...) is a PyTorch op; do the work in your own kernel"))
            elif info.kind == "method" and info.name in TENSOR_COMPUTE_METHODS:
                found.append((line_of(node), f".{info.name}() computes in PyTorch; do the work in your own kernel"))
            elif info.kind == "method" and info.name == "numpy":
                found.append((line_of(node), ".numpy() moves the work to NumPy on the host; do it in your kernel"))
    for name in a.included_classes() if a.model_new is not None else []:
        info = a.classes[name]
        base = a.torch_layer_base(info)
        if base is not None and a.find_method(name, "forward") is None and a.find_method(name, "__call__") is None:
            found.append((line_of(info.node), f"{name} inherits its forward from {base}: PyTorch computes it"))
    return found


_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitAnd, ast.BitOr,
               ast.BitXor, ast.LShift, ast.RShift)


def _tensor_operators(a: Analysis) -> list[Finding]:
    found: list[Finding] = []

    def report(node: ast.AST) -> None:
        found.append((line_of(node), f"`{ast.unparse(node)[:40]}` computes on tensors in PyTorch; do it in your kernel"))

    for node, scan in a.path_nodes():
        if isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC):
            if scan.is_tensor(node.left) or scan.is_tensor(node.right):
                report(node)
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, _ARITHMETIC) and (
                scan.is_tensor(node.target) or scan.is_tensor(node.value)):
            report(node)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Invert)) and scan.is_tensor(node.operand):
            report(node)
        elif isinstance(node, ast.Compare) and not isinstance(node.ops[0], (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
            if scan.is_tensor(node.left) or any(scan.is_tensor(c) for c in node.comparators):
                report(node)
        elif isinstance(node, ast.Call) and any(
                scan.is_tensor(arg) or (isinstance(arg, (ast.List, ast.Tuple, ast.Set)) and any(scan.is_tensor(e) for e in arg.elts))
                for arg in node.args):
            # sum(tensors), abs(x), operator.mul(x, y): operators in disguise
            info = scan.call_info(node)
            if (info.kind == "builtin" and info.name in _TENSOR_BUILTINS) or (info.kind == "qualified" and under(info.name, "operator")):
                report(node)
    return found


_TENSOR_BUILTINS = frozenset({"sum", "abs", "pow", "max", "min", "round", "divmod"})


def _torch_data_movement(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    for call, _scan, info in a.path_calls():
        if info.kind == "qualified" and a.classify_torch(info.name) == "data_movement":
            found.append((line_of(call), f"{info.name} copies in PyTorch; fusing it into your kernel is usually faster"))
    return found


TORCH_COMPUTE = Rule(
    "torch_compute", "error",
    "No PyTorch compute (torch.*/F.* ops, tensor compute methods, @, nn layers called) in the forward path.",
    _torch_compute, hack=True,
)
TENSOR_OPERATORS = Rule(
    "tensor_operators", "error",
    "No arithmetic/comparison operators on tensors in the forward path (x * y, x > 0, -x run in PyTorch).",
    _tensor_operators, hack=True,
)
TORCH_DATA_MOVEMENT = Rule(
    "torch_data_movement", "warning",
    "torch.cat/stack/clone in the forward path copy in PyTorch.",
    _torch_data_movement,
)
