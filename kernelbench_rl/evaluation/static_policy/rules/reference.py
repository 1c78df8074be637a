"""The reference: ModelNew must not inherit, alias, build or call it, nor import the modules that hold it."""

from __future__ import annotations

import ast
import sys
from typing import TYPE_CHECKING

from kernelbench_rl.evaluation.static_policy.rule import Finding, Rule, line_of
from kernelbench_rl.evaluation.static_policy.vocabulary import ALLOWED_THIRD_PARTY

if TYPE_CHECKING:
    from kernelbench_rl.evaluation.static_policy.analysis import Analysis


def _reference_reuse(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    model_new = a.model_new
    if model_new is None:
        return found

    def is_reference(name: str) -> bool:
        # `Model` always; other reference names only when the candidate does not define its own.
        return name == "Model" or (name in a.reference_names and name not in a.defined_names)

    if model_new.node.name != "ModelNew" and model_new.node.name in a.reference_names:
        found.append((line_of(model_new.node), f"ModelNew is an alias of the reference {model_new.node.name}"))
    for node in a.tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and is_reference(node.value.id):
            if any(isinstance(t, ast.Name) and t.id == "ModelNew" for t in node.targets):
                found.append((line_of(node), f"ModelNew is an alias of the reference {node.value.id}"))
    for cls in a.class_bases(model_new.node.name):
        for base in a.classes[cls].base_names:
            if is_reference(base.split(".")[-1]):
                found.append((line_of(a.classes[cls].node), f"{cls} inherits from the reference {base}; write your own module"))
    # Any other use of the reference (building, calling, `Model.forward(self, x)`, patching ModelNew later),
    # except inside a copy of the reference itself and the `if __name__ == "__main__"` test block.
    copies = [n for n in a.all_nodes if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name in a.reference_names]
    inside_copy = {id(inner) for copy in copies for inner in ast.walk(copy)}
    for node in a.all_nodes:
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and is_reference(node.id)):
            continue
        if id(node) in inside_copy or id(node) in a.main_guard_ids:
            continue
        parent = a.parents.get(id(node))
        if isinstance(parent, ast.ClassDef) and node in parent.bases:
            continue  # reported above when it is ModelNew's base
        if isinstance(parent, ast.Assign) and parent in a.tree.body:
            continue  # a module-level alias: reported above when it is ModelNew
        found.append((line_of(node), f"uses the reference {node.id}; ModelNew must not build or call it"))
    return found


def _foreign_import(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    for node, name in a.imports.imported:
        top = name.split(".")[0]
        if id(node) in a.main_guard_ids:
            continue  # `if __name__ == "__main__":` never runs when the module is imported
        if top == "__main__" or (top not in sys.stdlib_module_names and top not in ALLOWED_THIRD_PARTY):
            found.append((line_of(node), f"import {name}: only the standard library, torch, triton and numpy may be imported"))
    for node in a.all_nodes:  # `import ..; x.Model()`: the reference reached through a module
        if isinstance(node, ast.Attribute) and node.attr in a.reference_names and id(node) not in a.main_guard_ids:
            qn = a.resolver.qualname(node)
            if qn is not None and qn.split(".")[0] not in ALLOWED_THIRD_PARTY:
                found.append((line_of(node), f"{qn}: the reference must not be imported"))
    return found


REFERENCE_REUSE = Rule(
    "reference_reuse", "error",
    "ModelNew must not inherit, alias, build or call the reference Model.",
    _reference_reuse, hack=True,
)
FOREIGN_IMPORT = Rule(
    "foreign_import", "error",
    "Imports only from the standard library, torch, triton and numpy (no harness, problem or evaluator modules).",
    _foreign_import, hack=True,
)
