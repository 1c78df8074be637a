"""The analysis of one candidate, done once and read by every rule.

Imports and aliases are resolved, the candidate's classes, Triton kernels and compiled extensions are
collected, and the forward path is computed: ModelNew.forward plus every function, self method and
helper module reachable from it, each a `FunctionScan` whose calls are classified.
"""

from __future__ import annotations

import ast
import collections
import re
from collections.abc import Iterator

from kernelbench_rl.evaluation.static_policy.function_scan import (
    CallInfo,
    ClassInfo,
    FunctionScan,
    Kinds,
    MethodScope,
    SUBMODULE_ADDERS,
    constant_name,
    is_self_attribute,
    scalar_input_positions,
)
from kernelbench_rl.evaluation.static_policy.names import (
    Resolver,
    collect_imports,
    cuda_source_strings,
    dotted_name,
    extension_load_calls,
    is_triton_jit,
    strip_cpp_comments,
)
from kernelbench_rl.evaluation.static_policy.vocabulary import (
    NN_CONTAINER_CLASSES,
    NN_HOLDER_CLASSES,
    TENSOR_COMPUTE_METHODS,
    TORCH_ALLOWED_FUNCTIONS,
    classify_torch,
    under,
)


class Analysis:
    """Facts about one candidate that the rules read."""

    def __init__(self, source: str, backend: str, reference_source: str | None = None, precision: str = "fp32"):
        self.source = source
        self.backend = backend
        self.precision = precision
        self.tree = ast.parse(source)
        self.all_nodes: list[ast.AST] = list(ast.walk(self.tree))
        self.parents: dict[int, ast.AST] = {}
        self._references: list[tuple[ast.AST, str]] | None = None
        for node in self.all_nodes:
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
        self.imports = collect_imports(self.tree)
        self.defined_names = frozenset(self._module_defined_names())
        self.resolver = Resolver(self.imports, self.defined_names)
        self._collect_module_aliases()
        self.jit_kernels: dict[str, ast.FunctionDef] = {}
        self.module_functions: dict[str, ast.FunctionDef] = {}
        self.module_lambdas: dict[str, ast.Lambda] = {}
        self._as_forward: set[int] = set()  # callables passed around: scanned with their arguments as tensors
        self._lambda_stack: set[str] = set()
        self.classes: dict[str, ClassInfo] = {}
        for node in self.tree.body:
            self._collect_definition(node)
        self.reference_names = self._reference_names(reference_source)
        self.scalar_input_positions = scalar_input_positions(reference_source)
        self.model_new: ClassInfo | None = None
        self.extension_calls = extension_load_calls(self.tree, self.resolver)
        self.raw_cuda_sources = cuda_source_strings(self.tree)
        self.extension_functions = self._extension_function_names()
        self.cuda_sources = [strip_cpp_comments(s) for s in self.raw_cuda_sources]
        self.module_kinds: dict[str, Kinds] = {}
        self._module_scan = _ModuleScope(self)
        for _ in range(2):
            self._collect_module_kinds()
        for info in self.classes.values():
            self._collect_attr_kinds(info)
        self.model_new = self._find_model_new()
        self.path: list[FunctionScan] = self._forward_path() if self.model_new is not None else []
        self.main_guard_ids = self._main_guard_ids()

    # -- module level ----------------------------------------------------------------------------
    def _module_defined_names(self) -> set[str]:
        names: set[str] = set()
        for node in self.all_nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
        return names

    def _collect_module_aliases(self) -> None:
        for _ in range(2):
            for node in self._module_statements():
                if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Attribute, ast.Call)):
                    qn = self.resolver.qualname(node.value)
                    if qn is None:
                        continue
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            self.resolver.add_alias(target.id, qn)

    def _module_statements(self) -> Iterator[ast.stmt]:
        """Module-level statements, looking inside top-level if/try/with blocks."""
        stack = collections.deque(self.tree.body)
        while stack:
            node = stack.popleft()
            if isinstance(node, (ast.If, ast.Try, ast.With)) or type(node).__name__ == "TryStar":
                for attr in ("body", "orelse", "finalbody"):
                    stack.extend(getattr(node, attr, []) or [])
                for handler in getattr(node, "handlers", []) or []:
                    stack.extend(handler.body)
            else:
                yield node

    def _collect_definition(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if is_triton_jit(node, self.resolver):
                self.jit_kernels[node.name] = node
            else:
                self.module_functions[node.name] = node
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.module_lambdas[target.id] = node.value
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            # `kernel = triton.jit(fn)` (possibly wrapped in triton.autotune(...)(...))
            for call in ast.walk(node.value):
                if isinstance(call, ast.Call) and self.resolver.qualname(call.func) in ("triton.jit", "triton.runtime.jit"):
                    wrapped = [a for a in call.args if isinstance(a, ast.Name) and a.id in self.module_functions]
                    for target in node.targets:
                        if isinstance(target, ast.Name) and wrapped:
                            self.jit_kernels[target.id] = self.module_functions[wrapped[0].id]
        elif isinstance(node, ast.ClassDef):
            methods = {n.name: n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            for stmt in node.body:  # `forward = some_function` in a class body
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name):
                    for target in stmt.targets:
                        if isinstance(target, ast.Name) and stmt.value.id in self.module_functions:
                            methods[target.id] = self.module_functions[stmt.value.id]
            bases = [dotted_name(b) or ast.unparse(b) for b in node.bases]
            self.classes[node.name] = ClassInfo(node, methods, bases, list(node.bases))
        elif isinstance(node, (ast.If, ast.Try, ast.With)) or type(node).__name__ == "TryStar":
            for attr in ("body", "orelse", "finalbody"):
                for child in getattr(node, attr, []) or []:
                    self._collect_definition(child)
            for handler in getattr(node, "handlers", []) or []:
                for child in handler.body:
                    self._collect_definition(child)

    def _reference_names(self, reference_source: str | None) -> set[str]:
        names = {"Model"}
        if reference_source:
            try:
                ref_tree = ast.parse(reference_source)
            except SyntaxError:
                return names
            for node in ref_tree.body:
                if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name not in ("get_inputs", "get_init_inputs"):
                    names.add(node.name)
        return names

    def _extension_function_names(self) -> set[str]:
        names: set[str] = set()
        for call in self.extension_calls:
            for kw in call.keywords:
                if kw.arg == "functions" and isinstance(kw.value, (ast.List, ast.Tuple)):
                    names |= {e.value for e in kw.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        for text in self.raw_cuda_sources:
            names |= set(re.findall(r"\bm\.def\(\s*\"(\w+)\"", text))
        return names

    def _collect_module_kinds(self) -> None:
        for node in self._module_statements():
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                kinds = self._module_scan.kinds(node.value)
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and kinds:
                        self.module_kinds.setdefault(target.id, set()).update(kinds)
        # `global ext; ext = load_inline(...)` inside a function: the global is an extension too.
        for node in self.all_nodes:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.value in self.extension_calls:
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.module_kinds.setdefault(target.id, set()).add("extension")
        for name, fn in self.module_functions.items():  # a function that returns a compiled extension
            if any(isinstance(n, ast.Call) and n in self.extension_calls for n in ast.walk(fn)):
                self.module_kinds.setdefault(name, set()).add("returns_extension")

    def _collect_attr_kinds(self, info: ClassInfo) -> None:
        for _ in range(2):
            for method in info.methods.values():
                scan = MethodScope(self, method, info)
                for node in ast.walk(method):
                    value = None
                    attr = None
                    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                        for target in targets:
                            if is_self_attribute(target, scan.self_name):
                                kinds = scan.kinds(node.value)
                                if scan.is_tensor(node.value):
                                    kinds.add("tensor")
                                info.attr_kinds.setdefault(target.attr, set()).update(kinds)
                        continue
                    # self.layers.append(nn.Linear(...)); self.add_module("fc", nn.Linear(...));
                    # setattr(self, name, nn.Linear(...)). A computed name is stored under "*" (any attribute).
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                        holder = node.func.value
                        if node.func.attr in SUBMODULE_ADDERS:
                            value = node.args[-1]
                            if is_self_attribute(holder, scan.self_name):
                                attr = holder.attr
                            elif isinstance(holder, ast.Name) and holder.id == scan.self_name and len(node.args) >= 2:
                                attr = constant_name(node.args[0])
                    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                          and len(node.args) >= 3 and isinstance(node.args[0], ast.Name) and node.args[0].id == scan.self_name):
                        value = node.args[2]
                        attr = constant_name(node.args[1])
                    if attr is not None and value is not None:
                        kinds = scan.kinds(value)
                        if isinstance(node.func, ast.Attribute) and node.func.attr in ("register_parameter", "register_buffer"):
                            kinds.add("tensor")
                        info.attr_kinds.setdefault(attr, set()).update(kinds)
        for stmt in info.node.body:  # class attributes: `act = staticmethod(torch.relu)` etc.
            if isinstance(stmt, ast.Assign):
                kinds = self._module_scan.kinds(stmt.value)
                for target in stmt.targets:
                    if isinstance(target, ast.Name) and kinds:
                        info.attr_kinds.setdefault(target.id, set()).update(kinds)

    # -- classes and methods ------------------------------------------------------------------------
    def class_bases(self, name: str) -> list[str]:
        """Candidate-defined base classes of `name`, transitively (method resolution order, roughly)."""
        order, stack, seen = [], [name], set()
        while stack:
            current = stack.pop(0)
            if current in seen or current not in self.classes:
                continue
            seen.add(current)
            order.append(current)
            stack.extend(b for b in self.classes[current].base_names if b in self.classes)
        return order

    def find_method(self, class_name: str, method: str) -> tuple[ast.FunctionDef, ClassInfo] | None:
        for name in self.class_bases(class_name):
            info = self.classes[name]
            if method in info.methods:
                return info.methods[method], info
        return None

    def attr_kinds(self, owner: ClassInfo, attr: str) -> Kinds:
        kinds: Kinds = set()
        for name in self.class_bases(owner.node.name):
            kinds |= self.classes[name].attr_kinds.get(attr, set())
            kinds |= self.classes[name].attr_kinds.get("*", set()) - {"tensor"}  # setattr(self, computed, ...)
        return kinds

    def torch_layer_base(self, info: ClassInfo) -> str | None:
        """The PyTorch compute layer (nn.Linear, nn.Conv2d, ...) this class inherits from, if any."""
        for name in self.class_bases(info.node.name):
            for base in self.classes[name].base_nodes:
                qn = self.resolver.qualname(base)
                if qn and self.classify_torch(qn) == "nn_class" and qn.rsplit(".", 1)[1] not in NN_HOLDER_CLASSES:
                    return qn
        return None

    def _find_model_new(self) -> ClassInfo | None:
        if "ModelNew" in self.classes:
            return self.classes["ModelNew"]
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in self.classes:
                if any(isinstance(t, ast.Name) and t.id == "ModelNew" for t in node.targets):
                    return self.classes[node.value.id]
        return None

    def is_autograd_function(self, info: ClassInfo) -> bool:
        for name in self.class_bases(info.node.name):
            for base in self.classes[name].base_nodes:
                qn = self.resolver.qualname(base)
                if qn in ("torch.autograd.Function", "torch.autograd.function.Function"):
                    return True
        return False

    # -- classification ------------------------------------------------------------------------------
    def classify_torch(self, qn: str) -> str:
        """What a call to this library path does (see vocabulary.classify_torch)."""
        return classify_torch(qn)

    def call_result_kinds(self, call: ast.Call, scope: FunctionScan | MethodScope | _ModuleScope) -> Kinds:
        """Kinds of the value a call returns (nn layer built, helper module built, extension loaded, tensor...)."""
        func = call.func
        local_aliases = getattr(scope, "local_aliases", None)
        if call in self.extension_calls:
            return {"extension"}
        if isinstance(func, ast.Name) and func.id in self.classes:
            return {f"cls:{func.id}"}
        if isinstance(func, ast.Name) and "returns_extension" in self.module_kinds.get(func.id, set()):
            return {"extension"}
        if isinstance(func, ast.Name) and func.id in self.module_lambdas and func.id not in self._lambda_stack:
            self._lambda_stack.add(func.id)  # (a lambda that calls itself)
            try:
                return self._module_scan.kinds(self.module_lambdas[func.id].body)  # _act = lambda: nn.ReLU()
            finally:
                self._lambda_stack.discard(func.id)
        qn = self.resolver.qualname(func, local_aliases)
        if qn is not None:
            category = self.classify_torch(qn)
            if category == "nn_class":
                cls = qn.rsplit(".", 1)[1]
                if cls in NN_HOLDER_CLASSES:
                    return {"tensor"} if cls in ("Parameter", "Buffer") else set()
                if cls in NN_CONTAINER_CLASSES:
                    inner: Kinds = set()
                    for arg in list(call.args) + [kw.value for kw in call.keywords]:
                        inner |= scope.kinds(arg)
                    return inner - {"container"}
                return {"nn_layer"}
            allocates = category == "allowed" and qn.count(".") == 1 and qn.split(".")[1] in TORCH_ALLOWED_FUNCTIONS \
                and qn.split(".")[1][:1].islower()
            if category in ("compute", "data_movement") or allocates:
                return {"tensor"}
            return set()
        if isinstance(func, ast.Name) and func.id in ("list", "set", "dict", "sorted", "tuple"):
            return {"container"}
        if isinstance(func, ast.Attribute):
            recv_kinds = scope.kinds(func.value)
            if "tensor" in recv_kinds or (hasattr(scope, "is_tensor") and scope.is_tensor(func.value)):
                if func.attr in _TENSOR_RESULT_METHODS or func.attr in TENSOR_COMPUTE_METHODS:
                    return {"tensor"}
        return set()

    # -- forward path ------------------------------------------------------------------------------
    def iter_body(self, fn: ast.AST) -> Iterator[ast.AST]:
        """Nodes of a function, not descending into nested Triton kernels."""
        stack = list(ast.iter_child_nodes(fn))
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_triton_jit(node, self.resolver):
                continue
            yield node
            stack.extend(ast.iter_child_nodes(node))

    def included_classes(self) -> list[str]:
        """ModelNew, its candidate bases, and every candidate class it (transitively) builds."""
        assert self.model_new is not None
        order: list[str] = []
        stack = [self.model_new.node.name]
        while stack:
            name = stack.pop(0)
            for cls in self.class_bases(name):
                if cls in order:
                    continue
                order.append(cls)
                info = self.classes[cls]
                for node in ast.walk(info.node):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.classes:
                        stack.append(node.func.id)
                for kinds in info.attr_kinds.values():
                    stack.extend(k[4:] for k in kinds if k.startswith("cls:"))
        return order

    def _forward_path(self) -> list[FunctionScan]:
        queue: list[tuple[ast.AST, ClassInfo | None]] = []
        for name in self.included_classes():
            info = self.classes[name]
            if self.is_autograd_function(info):
                continue  # reached through .apply
            for method in ("forward", "__call__"):
                found = self.find_method(name, method)
                if found is not None:
                    queue.append((found[0], found[1]))
        queue.extend(self._hook_functions())
        queue.extend(self._callables_passed_around())
        scans: list[FunctionScan] = []
        seen: set[int] = set()
        while queue:
            fn, owner = queue.pop(0)
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            scan = FunctionScan(self, fn, owner, as_forward=id(fn) in self._as_forward)
            scans.append(scan)
            queue.extend(self._callees(scan))
        return scans

    def _callables_passed_around(self) -> list[tuple[ast.AST, ClassInfo | None]]:
        """Module-level functions used as values (`OPS = {"act": helper}`, `act = helper`) and every lambda outside
        Triton kernels and the main guard: where they are called cannot be read, so they count as the forward's."""
        out: list[tuple[ast.AST, ClassInfo | None]] = []
        guarded = self._main_guard_ids()
        for node in self.all_nodes:
            if id(node) in guarded:
                continue
            fn: ast.AST | None = None
            if isinstance(node, ast.Lambda):
                fn = node
            elif (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in self.module_functions
                  and not (isinstance(self.parents.get(id(node)), ast.Call) and self.parents[id(node)].func is node)):
                fn = self.module_functions[node.id]
            if fn is None:
                continue
            first = (fn.args.posonlyargs + fn.args.args)[:1]
            owner = self.model_new if first and first[0].arg == "self" else None  # a forward kept in a table
            self._as_forward.add(id(fn))
            out.append((fn, owner))
        return out

    def _hook_functions(self) -> list[tuple[ast.AST, ClassInfo | None]]:
        """Functions registered as module hooks run inside forward: they are part of the path."""
        out: list[tuple[ast.AST, ClassInfo | None]] = []
        for node in self.all_nodes:
            if not (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)) and node.args):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if not (name.startswith("register_") and "hook" in name):
                continue
            for arg in node.args:
                if isinstance(arg, ast.Lambda):
                    out.append((arg, None))
                elif isinstance(arg, ast.Name) and arg.id in self.module_functions:
                    out.append((self.module_functions[arg.id], None))
                elif isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name):
                    for info in self.classes.values():
                        if arg.attr in info.methods:
                            out.append((info.methods[arg.attr], info))
        return out

    def _callees(self, scan: FunctionScan) -> list[tuple[ast.AST, ClassInfo | None]]:
        out: list[tuple[ast.AST, ClassInfo | None]] = []

        def follow_method(class_name: str, method: str) -> None:
            names = ("forward",) if method == "__call__" else (method,)
            if method == "__call__":
                names = ("__call__", "forward")
            for m in names:
                found = self.find_method(class_name, m)
                if found is not None:
                    out.append(found)
                    return

        calls_custom_op = False
        for node in scan.nodes:
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if node.id in self.module_functions and node.id not in scan.local_kinds:
                    out.append((self.module_functions[node.id], None))
            elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and scan.self_name
                  and node.value.id == scan.self_name and scan.owner is not None):
                found = self.find_method(scan.owner.node.name, node.attr)  # properties and bound-method references
                if found is not None:
                    out.append(found)
            if not isinstance(node, ast.Call):
                continue
            info = scan.call_info(node)
            if info.target is not None:
                class_name, method = info.target
                if info.kind == "construct":
                    follow_method(class_name, "__init__")
                    follow_method(class_name, "__call__")
                else:
                    follow_method(class_name, method)
            elif info.kind == "super_method" and scan.owner is not None:
                for base in self.class_bases(scan.owner.node.name)[1:]:
                    found = self.find_method(base, info.name)
                    if found is not None:
                        out.append(found)
                        break
            elif info.kind == "qualified" and under(info.name, "torch.ops") and self.classify_torch(info.name) == "allowed":
                calls_custom_op = True
        if calls_custom_op:  # torch.ops.<own namespace>.fn: follow functions registered with torch.library
            for fn in self.module_functions.values():
                if any(under(self.resolver.qualname(d.func if isinstance(d, ast.Call) else d), "torch.library") for d in fn.decorator_list):
                    out.append((fn, None))
        return out

    def path_nodes(self) -> Iterator[tuple[ast.AST, FunctionScan]]:
        for scan in self.path:
            for node in scan.nodes:
                yield node, scan

    def path_calls(self) -> Iterator[tuple[ast.Call, FunctionScan, CallInfo]]:
        for node, scan in self.path_nodes():
            if isinstance(node, ast.Call):
                yield node, scan, scan.call_info(node)

    # -- whole-module references ----------------------------------------------------------------------
    def references(self) -> Iterator[tuple[ast.AST, str]]:
        """(node, library path) for every maximal name/attribute chain and every import."""
        if self._references is None:
            found: list[tuple[ast.AST, str]] = list(self.imports.imported)
            for node in self.all_nodes:
                if isinstance(node, (ast.Name, ast.Attribute)):
                    parent = self.parents.get(id(node))
                    if isinstance(parent, ast.Attribute) and parent.value is node:
                        continue
                    qn = self.resolver.qualname(node)
                    if qn is not None:
                        found.append((node, qn))
            self._references = found
        return iter(self._references)

    def used_references(self) -> Iterator[tuple[ast.AST, str]]:
        """Like references(), without the import statements themselves (importing alone is harmless)."""
        for node, qn in self.references():
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node, qn

    def _main_guard_ids(self) -> set[int]:
        ids: set[int] = set()
        for node in self.tree.body:
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
                ids |= {id(n) for n in ast.walk(node)}
        return ids


_TENSOR_RESULT_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "contiguous", "permute", "transpose", "t", "flatten", "unflatten",
    "squeeze", "unsqueeze", "expand", "expand_as", "narrow", "select", "to", "float", "double", "half", "bfloat16",
    "cuda", "cpu", "clone", "detach", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "type_as",
    "as_strided",
})


class _ModuleScope:
    """Kinds of module-level expressions (no locals, no self)."""

    def __init__(self, analysis: Analysis):
        self.analysis = analysis
        self.local_aliases: dict[str, str] = {}

    def kinds(self, expr: ast.AST) -> Kinds:
        a = self.analysis
        if isinstance(expr, ast.Name):
            kinds = set(a.module_kinds.get(expr.id, set()))
            if expr.id in a.jit_kernels:
                kinds.add("kernel")
            qn = a.resolver.qualname(expr)
            if qn and a.classify_torch(qn) == "compute":
                kinds.add("torch_fn")
            return kinds
        if isinstance(expr, ast.Attribute):
            qn = a.resolver.qualname(expr)
            if qn:
                return {"torch_fn"} if a.classify_torch(qn) == "compute" else set()
            return {"ext_fn"} if "extension" in self.kinds(expr.value) else set()
        if isinstance(expr, ast.Call):
            if isinstance(expr.func, ast.Name) and expr.func.id in ("staticmethod", "classmethod") and expr.args:
                return self.kinds(expr.args[0])
            return a.call_result_kinds(expr, self)
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
        if isinstance(expr, (ast.ListComp, ast.GeneratorExp)):
            return {"container"} | self.kinds(expr.elt)
        if isinstance(expr, ast.IfExp):
            return self.kinds(expr.body) | self.kinds(expr.orelse)
        if isinstance(expr, ast.Subscript):
            return self.kinds(expr.value) - {"container"}
        return set()
