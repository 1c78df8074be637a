"""One function of the forward path, its local names classified (nn layer, torch op, kernel, tensor...).

`FunctionScan` answers what a call in the function does (`call_info`) and whether an expression is
certainly a tensor; it asks the module-wide analysis (through `ScanContext`) about classes, attributes and library paths.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

from kernelbench_rl.evaluation.static_policy.names import Resolver, collect_imports, unwrap_callee
from kernelbench_rl.evaluation.static_policy.scan_context import ScanContext
from kernelbench_rl.evaluation.static_policy.vocabulary import (
    CONTAINER_METHODS,
    DYNAMIC_BUILTINS,
    TENSOR_COMPUTE_METHODS,
    runs_module,
    under,
)


Kinds = set[str]  # "nn_layer", "torch_fn", "extension", "ext_fn", "kernel", "container", "tensor", "cls:<Name>"


@dataclass
class ClassInfo:
    node: ast.ClassDef
    methods: dict[str, ast.FunctionDef]
    base_names: list[str]  # dotted names of bases as written
    base_nodes: list[ast.expr] = field(default_factory=list)
    attr_kinds: dict[str, Kinds] = field(default_factory=dict)


@dataclass
class CallInfo:
    # qualified (a library path) | nn_layer | torch_fn | kernel_launch | kernel_call | extension | self_method |
    # function | construct | instance | class_attr | super_method | container | method | builtin | unknown
    kind: str
    name: str = ""
    target: tuple[str, str] | None = None  # (class name, method name) to follow


# Attributes of a tensor that are the tensor again (its data, its transposes, its real part).
_TENSOR_VIEW_ATTRIBUTES = frozenset({"data", "T", "mT", "H", "mH", "real", "imag", "grad"})
_SCALAR_ANNOTATIONS = frozenset({"int", "float", "bool", "str", "tuple", "list", "dict", "complex"})


SUBMODULE_ADDERS = ("append", "extend", "insert", "add_module", "register_module", "register_parameter",
                     "register_buffer")


def is_self_attribute(expr: ast.AST, self_name: str | None) -> bool:
    return isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == self_name


def constant_name(expr: ast.expr) -> str:
    """The attribute name a setattr/add_module call uses, or "*" when it is computed."""
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else "*"


def _annotated_scalar(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation)
    return text.split("[")[0].split(".")[-1] in _SCALAR_ANNOTATIONS


def scalar_input_positions(reference_source: str | None) -> set[int]:
    """Positions of `get_inputs()` items in the reference that are not tensors (e.g. a Python float)."""
    if not reference_source:
        return set()
    try:
        tree = ast.parse(reference_source)
    except SyntaxError:
        return set()
    resolver = Resolver(collect_imports(tree))
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"), None)
    if fn is None:
        return set()
    assigned: dict[str, ast.expr] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned[target.id] = node.value
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and isinstance(n.value, (ast.List, ast.Tuple))]
    if not returns:
        return set()

    def makes_tensor(expr: ast.expr) -> bool:
        if isinstance(expr, ast.Name) and expr.id in assigned:
            expr = assigned[expr.id]
        return any(isinstance(c, ast.Call) and under(resolver.qualname(c.func), "torch") for c in ast.walk(expr))

    return {i for i, elt in enumerate(returns[-1].value.elts) if not makes_tensor(elt)}


class FunctionScan:
    """One function of the forward path with its local names classified."""

    def __init__(self, analysis: ScanContext, fn: ast.FunctionDef | ast.Lambda, owner: ClassInfo | None,
                 as_forward: bool = False):
        self.analysis = analysis
        self.fn = fn
        self.owner = owner
        args = fn.args.posonlyargs + fn.args.args
        is_static = isinstance(fn, ast.FunctionDef) and any(
            isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod") for d in fn.decorator_list)
        self.self_name = args[0].arg if owner is not None and args and not is_static else None
        self.nodes: list[ast.AST] = list(analysis.iter_body(fn))
        self.local_aliases: dict[str, str] = {}
        self.local_kinds: dict[str, Kinds] = {}
        self.tensor_names: set[str] = set()
        # Memo of call results (chained calls would otherwise be re-derived exponentially); reset
        # whenever the local facts grow.
        self._call_kinds: dict[int, Kinds] = {}
        self._call_infos: dict[int, CallInfo] = {}
        if owner is not None and isinstance(fn, ast.FunctionDef) and fn.name == "forward":
            params = args[1:]  # after self, or ctx for autograd functions
            scalar_positions = analysis.scalar_input_positions if owner is analysis.model_new else set()
            self.tensor_names = {p.arg for i, p in enumerate(params)
                                 if i not in scalar_positions and not _annotated_scalar(p.annotation)}
        elif as_forward:
            # A callable passed around as a value: a forward kept in a table (self first) takes the forward's
            # tensors, and so may a pass-through `*args`; a launch grid's `meta` is no tensor.
            if self.self_name:
                self.tensor_names = {p.arg for p in args[1:] if not _annotated_scalar(p.annotation)}
            if fn.args.vararg is not None:
                self.tensor_names.add(fn.args.vararg.arg)
        for _ in range(2):
            self._call_kinds.clear()
            self._prepass()
        self._call_kinds.clear()

    # -- local names -------------------------------------------------------------------------
    def _prepass(self) -> None:
        for node in self.nodes:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    self._bind(target, node.value)
            elif isinstance(node, ast.NamedExpr):
                self._bind(node.target, node.value)
            elif isinstance(node, ast.For):
                self._bind_iter(node.target, node.iter)
            elif isinstance(node, ast.comprehension):
                self._bind_iter(node.target, node.iter)

    def _bind(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, ast.Name):
            qn = self.analysis.resolver.qualname(value, self.local_aliases) if isinstance(value, (ast.Name, ast.Attribute)) else None
            if qn is not None and target.id not in self.tensor_names:
                self.local_aliases[target.id] = qn
            kinds = self.kinds(value)
            if kinds:
                self.local_kinds.setdefault(target.id, set()).update(kinds)
            if self.is_tensor(value):
                self.tensor_names.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
            for t, v in zip(target.elts, value.elts):
                self._bind(t, v)

    def _bind_iter(self, target: ast.AST, iterable: ast.AST) -> None:
        inner = iterable
        wrappers = ("enumerate", "reversed", "list", "zip")
        if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id in wrappers and inner.args:
            inner = inner.args[0]
        if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in (
                "children", "modules", "values", "items", "named_children", "named_modules"):
            inner = inner.func.value
        if isinstance(inner, ast.Name) and inner.id == self.self_name:
            kinds = self._all_attr_kinds()  # for m in self.children(): every submodule
        else:
            kinds = self.kinds(inner) - {"container"}
        names = [target] if isinstance(target, ast.Name) else [e for e in getattr(target, "elts", []) if isinstance(e, ast.Name)]
        for name in names:
            if kinds:
                self.local_kinds.setdefault(name.id, set()).update(kinds)

    def kinds(self, expr: ast.AST) -> Kinds:
        a = self.analysis
        if isinstance(expr, ast.Name):
            kinds = set(self.local_kinds.get(expr.id, set())) | set(a.module_kinds.get(expr.id, set()))
            if expr.id in a.jit_kernels:
                kinds.add("kernel")
            qn = a.resolver.qualname(expr, self.local_aliases)
            if qn and a.classify_torch(qn) == "compute":
                kinds.add("torch_fn")
            return kinds
        if isinstance(expr, ast.Attribute):
            if self.self_name and isinstance(expr.value, ast.Name) and expr.value.id == self.self_name and self.owner:
                return set(a.attr_kinds(self.owner, expr.attr))
            qn = a.resolver.qualname(expr, self.local_aliases)
            if qn:
                return {"torch_fn"} if a.classify_torch(qn) == "compute" else set()
            if "extension" in self.kinds(expr.value):
                return {"ext_fn"}
            if expr.attr in TENSOR_COMPUTE_METHODS and self.is_tensor(expr.value):
                return {"torch_fn"}  # f = x.relu: a bound method, called later by another name
            return set()
        if isinstance(expr, ast.Subscript):
            return self.kinds(expr.value) - {"container"}
        if isinstance(expr, ast.Call) and self._is_self_getattr(expr):
            name = expr.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                return set(a.attr_kinds(self.owner, name.value))
            return self._all_attr_kinds()  # getattr(self, computed): could be any submodule
        if isinstance(expr, ast.Call):
            cached = self._call_kinds.get(id(expr))
            if cached is None:
                cached = self._call_kinds[id(expr)] = a.call_result_kinds(expr, self)
            return set(cached)
        if isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
            out: Kinds = {"container"}
            for elt in expr.elts:
                out |= self.kinds(elt)
            return out
        if isinstance(expr, ast.Dict):
            out = {"container"}
            for value in expr.values:
                out |= self.kinds(value)
            return out
        if isinstance(expr, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return {"container"} | self.kinds(expr.elt)
        if isinstance(expr, ast.DictComp):
            return {"container"} | self.kinds(expr.value)
        if isinstance(expr, ast.IfExp):
            return self.kinds(expr.body) | self.kinds(expr.orelse)
        if isinstance(expr, ast.BoolOp):
            out = set()
            for value in expr.values:
                out |= self.kinds(value)
            return out
        return set()

    def _is_self_getattr(self, call: ast.Call) -> bool:
        return (isinstance(call.func, ast.Name) and call.func.id == "getattr" and len(call.args) >= 2
                and self.self_name is not None and self.owner is not None
                and isinstance(call.args[0], ast.Name) and call.args[0].id == self.self_name)

    def _all_attr_kinds(self) -> Kinds:
        kinds: Kinds = set()
        if self.owner is not None:
            for name in self.analysis.class_bases(self.owner.node.name):
                for attr_kinds in self.analysis.classes[name].attr_kinds.values():
                    kinds |= attr_kinds
        return kinds - {"container", "tensor"}

    def is_tensor(self, expr: ast.AST) -> bool:
        """Whether the expression is certainly a tensor (a forward input, a parameter, a torch result)."""
        a = self.analysis
        if isinstance(expr, ast.Name):
            return expr.id in self.tensor_names
        if isinstance(expr, ast.Attribute):
            if self.self_name and isinstance(expr.value, ast.Name) and expr.value.id == self.self_name and self.owner:
                return "tensor" in a.attr_kinds(self.owner, expr.attr)
            if expr.attr in ("weight", "bias") and "nn_layer" in self.kinds(expr.value):
                return True
            return expr.attr in _TENSOR_VIEW_ATTRIBUTES and self.is_tensor(expr.value)  # x.data, x.T
        if isinstance(expr, ast.Subscript):
            if isinstance(expr.value, (ast.List, ast.Tuple)):  # [x][0]
                return any(self.is_tensor(e) for e in expr.value.elts)
            return self.is_tensor(expr.value)
        if isinstance(expr, ast.Call):
            return "tensor" in self.kinds(expr)
        if isinstance(expr, ast.Starred):
            return self.is_tensor(expr.value)
        return False

    # -- calls ---------------------------------------------------------------------------------
    def call_info(self, call: ast.Call) -> CallInfo:
        info = self._call_infos.get(id(call))
        if info is None:
            info = self._call_infos[id(call)] = self._call_info(call)
        return info

    def _call_info(self, call: ast.Call) -> CallInfo:
        a = self.analysis
        func = unwrap_callee(call.func)  # (f := torch.relu)(x), [torch.relu][0](x)
        if isinstance(func, ast.Subscript):
            kinds = self.kinds(func.value)
            if "kernel" in kinds or any(isinstance(n, ast.Name) and n.id in a.jit_kernels for n in ast.walk(func.value)):
                return CallInfo("kernel_launch", ast.unparse(func.value))
            return self._kinds_call(kinds, ast.unparse(func))
        if isinstance(func, ast.Call):
            qn = a.resolver.qualname(func, self.local_aliases)  # getattr(torch, "matmul")(...)
            if qn is not None:
                return CallInfo("qualified", qn)
            return self._kinds_call(self.kinds(func), ast.unparse(func))
        if isinstance(func, ast.Name):
            name = func.id
            local = self.local_kinds.get(name)
            if local and local & {"nn_layer", "torch_fn", "ext_fn", "extension"} | {k for k in local if k.startswith("cls:")}:
                return self._kinds_call(local, name)
            qn = a.resolver.qualname(func, self.local_aliases)
            if qn is not None:
                return CallInfo("qualified", qn)
            if name in a.module_functions:
                return CallInfo("function", name)
            if name in a.classes:
                return CallInfo("construct", name, (name, "__init__"))
            if name in a.module_kinds:
                return self._kinds_call(a.module_kinds[name], name)
            if name in DYNAMIC_BUILTINS and name not in a.defined_names:
                return CallInfo("builtin", name)
            return CallInfo("builtin" if hasattr(builtins, name) else "unknown", name)
        if isinstance(func, ast.Attribute):
            recv, attr = func.value, func.attr
            if self.self_name and isinstance(recv, ast.Name) and recv.id == self.self_name and self.owner:
                if a.find_method(self.owner.node.name, attr) is not None:
                    return CallInfo("self_method", attr, (self.owner.node.name, attr))
                return self._kinds_call(a.attr_kinds(self.owner, attr), f"self.{attr}")
            if isinstance(recv, ast.Call) and isinstance(recv.func, ast.Name) and recv.func.id == "super":
                if self.owner is not None and runs_module(attr) and a.torch_layer_base(self.owner) is not None:
                    return CallInfo("nn_layer", f"super().{attr}")  # ModelNew(nn.Linear): super().forward(x)
                return CallInfo("super_method", attr)
            if isinstance(recv, ast.Name) and recv.id in a.classes and recv.id not in self.local_kinds:
                method = "forward" if attr == "apply" else attr
                return CallInfo("class_attr", f"{recv.id}.{attr}", (recv.id, method))
            qn = a.resolver.qualname(func, self.local_aliases)
            if qn is not None:
                return CallInfo("qualified", qn)
            recv_kinds = self.kinds(recv)
            if "extension" in recv_kinds:
                return CallInfo("extension", attr)
            for kind in recv_kinds:
                if kind.startswith("cls:"):
                    return CallInfo("instance", f"{kind[4:]}.{attr}", (kind[4:], attr))
            if "nn_layer" in recv_kinds:
                if runs_module(attr):
                    return CallInfo("nn_layer", ast.unparse(func))
                return CallInfo("unknown", attr)
            if attr in a.extension_functions and not self.is_tensor(recv):
                return CallInfo("extension", attr)
            if "container" in recv_kinds and attr in CONTAINER_METHODS:
                return CallInfo("container", attr)
            return CallInfo("method", attr)
        return CallInfo("unknown", "")

    def _kinds_call(self, kinds: Kinds, text: str) -> CallInfo:
        for kind in kinds:
            if kind.startswith("cls:"):
                return CallInfo("instance", text, (kind[4:], "__call__"))
        if "nn_layer" in kinds:
            return CallInfo("nn_layer", text)
        if "torch_fn" in kinds:
            return CallInfo("torch_fn", text)
        if kinds & {"ext_fn", "extension"}:
            return CallInfo("extension", text)
        if "kernel" in kinds:
            return CallInfo("kernel_call", text)
        return CallInfo("unknown", text)


class MethodScope(FunctionScan):
    """A method analysed for what it stores on self (used before the forward path exists)."""

    def __init__(self, analysis: ScanContext, fn: ast.FunctionDef, owner: ClassInfo):
        super().__init__(analysis, fn, owner)
