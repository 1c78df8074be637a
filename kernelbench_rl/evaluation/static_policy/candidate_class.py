"""Which class of a candidate module is the candidate: `ModelNew` (KernelBench's convention), else `Model`.

kernrl's task text asks for a class named `Model`, the reference's own name. That is unambiguous in the
candidate's module: the candidate runs in a module of its own, where the reference is never defined
(the child sees the problem without its `Model`: runtime.without_reference_model), so a `Model` there is
the candidate's. Such a module is judged as if the class were named ModelNew: `as_model_new` renames the
name `Model` wherever the module binds or reads it, token by token, so lines and columns of everything else
stay where they were (the static policy's line numbers, Triton's view of kernel sources). A module that
defines ModelNew is left alone, whatever else it defines.

Shared by extraction, the static policy and the worker; stdlib only.
"""

from __future__ import annotations

import ast
import io
import tokenize

CANDIDATE_CLASS = "ModelNew"
ALTERNATE_CLASS = "Model"


def _binds_at_top(tree: ast.Module, name: str, classes_only: bool = False) -> bool:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return True
        if not classes_only and isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


def candidate_class_name(tree: ast.Module) -> str | None:
    """ModelNew when the module defines it (a class or an alias), else Model when it defines that class, else None."""
    if _binds_at_top(tree, CANDIDATE_CLASS):
        return CANDIDATE_CLASS
    if _binds_at_top(tree, ALTERNATE_CLASS, classes_only=True):
        return ALTERNATE_CLASS
    return None


def as_model_new(source: str) -> str:
    """The source with its own `Model` renamed ModelNew when it defines `class Model` and no ModelNew; else as is.

    Attribute names (`x.Model`) and text inside strings are not names of the module and stay; a source that
    does not parse or tokenize is returned unchanged (its verdict says why it fails)."""
    if ALTERNATE_CLASS not in source:
        return source
    try:
        if candidate_class_name(ast.parse(source)) != ALTERNATE_CLASS:
            return source
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (SyntaxError, ValueError, RecursionError, MemoryError, tokenize.TokenError):
        return source
    lines = source.splitlines(keepends=True)
    previous = None
    hits: list[tuple[int, int]] = []
    for token in tokens:
        if token.type == tokenize.NAME and token.string == ALTERNATE_CLASS and not (
                previous is not None and previous.type == tokenize.OP and previous.string == "."):
            hits.append(token.start)
        if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            previous = token
    for row, col in reversed(hits):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + CANDIDATE_CLASS + line[col + len(ALTERNATE_CLASS):]
    return "".join(lines)
