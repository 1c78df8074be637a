"""Obfuscations of a candidate's forward, as a policy learning to game the static policy would write them.

Each transform rewrites ModelNew.forward (or the calls in it) of a module's source and returns the new source, or
None where it has nothing to rewrite. Used by tests/test_static_obfuscations.py on every rule's own examples.
"""

from __future__ import annotations

import ast
import builtins
import copy
from collections.abc import Callable

# Builtins that run code or look names up, which a rule may look for by name.
HIDDEN_BUILTINS = ("exec", "eval", "compile", "__import__", "getattr", "setattr", "vars", "globals", "open", "print",
                   "super", "type", "sum", "abs", "max", "min", "pow", "round")


def _model_new(tree: ast.Module) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)


def _forward(cls: ast.ClassDef) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)


def _rewrite(source: str, edit: Callable[[ast.Module, ast.ClassDef, ast.FunctionDef], bool]) -> str | None:
    tree = ast.parse(source)
    cls = _model_new(tree)
    forward = _forward(cls) if cls is not None else None
    if forward is None or not edit(tree, cls, forward):
        return None
    return ast.unparse(ast.fix_missing_locations(tree))


def _tensor_param(forward: ast.FunctionDef) -> str | None:
    params = forward.args.args[1:]
    return params[0].arg if params else None


class _ReplaceName(ast.NodeTransformer):
    def __init__(self, name: str, make: Callable[[], ast.expr]):
        self.name, self.make, self.count = name, make, 0

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.name and isinstance(node.ctx, ast.Load):
            self.count += 1
            return ast.copy_location(self.make(), node)
        return node


def _replace_param(source: str, wrap: Callable[[str], str]) -> str | None:
    def edit(tree: ast.Module, cls: ast.ClassDef, forward: ast.FunctionDef) -> bool:
        name = _tensor_param(forward)
        if name is None:
            return False
        replacer = _ReplaceName(name, lambda: ast.parse(wrap(name), mode="eval").body)
        for stmt in forward.body:
            replacer.visit(stmt)
        return replacer.count > 0
    return _rewrite(source, edit)


def data_attribute(source: str) -> str | None:
    """`x` -> `x.data` in the forward."""
    return _replace_param(source, lambda name: f"{name}.data")


def list_index(source: str) -> str | None:
    """`x` -> `[x][0]` in the forward."""
    return _replace_param(source, lambda name: f"[{name}][0]")


def _method_calls(forward: ast.FunctionDef, self_name: str) -> list[ast.Call]:
    calls = []
    for node in ast.walk(forward):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            if isinstance(receiver, ast.Name) and receiver.id == self_name:
                continue
            calls.append(node)
    return calls


def bound_alias(source: str) -> str | None:
    """`obj.m(args)` -> `(_m := obj.m)(args)`: the method bound to a local name first."""
    def edit(tree: ast.Module, cls: ast.ClassDef, forward: ast.FunctionDef) -> bool:
        comprehended = {id(n) for c in ast.walk(forward) if isinstance(c, (ast.ListComp, ast.SetComp, ast.DictComp,
                                                                          ast.GeneratorExp)) for n in ast.walk(c)}
        calls = [c for c in _method_calls(forward, forward.args.args[0].arg if forward.args.args else "self")
                 if id(c) not in comprehended]  # (no := in a comprehension's iterable)
        for i, call in enumerate(calls):
            call.func = ast.NamedExpr(target=ast.Name(f"_bound{i}", ast.Store()), value=call.func)
        return bool(calls)
    return _rewrite(source, edit)


def getattr_built_name(source: str) -> str | None:
    """`obj.m(args)` -> `getattr(obj, "m"[:1] + "m"[1:])(args)`: the method named by a string built at run time."""
    def edit(tree: ast.Module, cls: ast.ClassDef, forward: ast.FunctionDef) -> bool:
        calls = _method_calls(forward, forward.args.args[0].arg if forward.args.args else "self")
        for call in calls:
            name = call.func.attr
            built = ast.parse(f"{name[:1]!r} + {name[1:]!r}", mode="eval").body
            call.func = ast.Call(ast.Name("getattr", ast.Load()), [call.func.value, built], [])
        return bool(calls)
    return _rewrite(source, edit)


def subscripted_builtins(source: str) -> str | None:
    """`exec(...)`, `getattr(...)`, `__import__(...)` -> `[exec][0](...)`: the builtin reached through a list."""
    def edit(tree: ast.Module, cls: ast.ClassDef, forward: ast.FunctionDef) -> bool:
        count = 0
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in HIDDEN_BUILTINS
                    and hasattr(builtins, node.func.id)):
                node.func = ast.Subscript(ast.List([node.func], ast.Load()), ast.Constant(0), ast.Load())
                count += 1
        return count > 0
    return _rewrite(source, edit)


def _hoist_forward(tree: ast.Module, cls: ast.ClassDef, forward: ast.FunctionDef, name: str) -> ast.FunctionDef:
    """The forward's body as a module-level function `name(self, ...)`, placed after the class."""
    hidden = copy.deepcopy(forward)
    hidden.name = name
    hidden.decorator_list = []
    tree.body.insert(tree.body.index(cls) + 1, hidden)
    return hidden


def _call_through(expr: str, forward: ast.FunctionDef) -> None:
    params = [a.arg for a in forward.args.args[1:]]
    forward.body = [ast.parse(f"return {expr}({', '.join([forward.args.args[0].arg] + params)})").body[0]]


def module_table(source: str) -> str | None:
    """The forward's body in a module-level function, called through a dict: `_TABLE["f"](self, x)`."""
    def edit(tree: ast.Module, cls: ast.ClassDef, forward: ast.FunctionDef) -> bool:
        if not forward.args.args:
            return False
        _hoist_forward(tree, cls, forward, "_hidden_forward")
        tree.body.append(ast.parse('_TABLE = {"f": _hidden_forward}').body[0])
        _call_through('_TABLE["f"]', forward)
        return True
    return _rewrite(source, edit)


def module_lambda(source: str) -> str | None:
    """Every library call in the forward through a module-level lambda: `torch.relu(x)` -> `_op0(x)`."""
    def edit(tree: ast.Module, cls: ast.ClassDef, forward: ast.FunctionDef) -> bool:
        count = 0
        for node in ast.walk(forward):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, (ast.Name, ast.Attribute)):
                root = node.func.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if not (isinstance(root, ast.Name) and root.id in {"torch", "F", "nn", "np", "operator", "G"}):
                    continue
                name = f"_op{count}"
                tree.body.insert(tree.body.index(cls), ast.parse(f"{name} = lambda *p, **k: {ast.unparse(node.func)}(*p, **k)").body[0])
                node.func = ast.Name(name, ast.Load())
                count += 1
        return count > 0
    return _rewrite(source, edit)


def forward_reassigned(source: str) -> str | None:
    """The class keeps a harmless forward; the real one replaces it after the class: `ModelNew.forward = _f`."""
    def edit(tree: ast.Module, cls: ast.ClassDef, forward: ast.FunctionDef) -> bool:
        if not forward.args.args or len(forward.args.args) < 2:
            return False
        _hoist_forward(tree, cls, forward, "_real_forward")
        forward.body = [ast.parse(f"return {forward.args.args[1].arg}").body[0]]
        tree.body.append(ast.parse("ModelNew.forward = _real_forward").body[0])
        return True
    return _rewrite(source, edit)


TRANSFORMS: dict[str, Callable[[str], str | None]] = {
    "bound_alias": bound_alias,
    "getattr_built_name": getattr_built_name,
    "subscripted_builtins": subscripted_builtins,
    "module_lambda": module_lambda,
    "module_table": module_table,
    "forward_reassigned": forward_reassigned,
    "data_attribute": data_attribute,
    "list_index": list_index,
}
