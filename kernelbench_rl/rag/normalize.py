"""Code normalisation for de-duplication: the same kernel reformatted or re-commented hashes the same.

Python is normalised through its tokenizer (comments dropped, token text kept); anything that does
not tokenize as Python (CUDA C++, a truncated file) falls back to stripping C and Python comments
with regular expressions. Whitespace is then removed entirely, so indentation, blank lines and
spacing around operators never make two copies of one kernel look different.
"""

from __future__ import annotations

import ast
import hashlib
import io
import re
import tokenize

_C_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_C_LINE_COMMENT = re.compile(r"//[^\n]*")
_HASH_LINE_COMMENT = re.compile(r"(?m)^\s*#(?!\s*(include|define|pragma|if|ifdef|ifndef|endif|else|elif|undef)\b)[^\n]*")
_WHITESPACE = re.compile(r"\s+")


def _python_tokens(code: str) -> str | None:
    """Token text without comments, or None if the code is not Python (C++ often tokenizes as Python)."""
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING}
    try:
        tokens = [tok.string for tok in tokenize.generate_tokens(io.StringIO(code).readline) if tok.type not in skip]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return "".join(tokens)


def normalise_code(code: str) -> str:
    """Code with comments and all whitespace removed (Python via tokenize, else C-style rules)."""
    text = code.replace("\r\n", "\n")
    tokens = _python_tokens(text)
    if tokens is None:
        text = _C_BLOCK_COMMENT.sub("", text)
        text = _C_LINE_COMMENT.sub("", text)
        text = _HASH_LINE_COMMENT.sub("", text)
        tokens = text
    return _WHITESPACE.sub("", tokens)


def code_sha256(code: str) -> str:
    """sha256 of the normalised code: the corpus key, shared across sources."""
    return hashlib.sha256(normalise_code(code).encode()).hexdigest()


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def _is_super_init(stmt: ast.stmt) -> bool:
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "__init__"
            and isinstance(call.func.value, ast.Call) and isinstance(call.func.value.func, ast.Name)
            and call.func.value.func.id == "super")


def forward_fingerprint(pytorch_code: str) -> str | None:
    """sha256 of what a module computes: its `__init__` and `forward` bodies in canonical layout.

    Docstrings and `super().__init__()` calls are dropped: two copies of one KernelBench reference
    differ in those, in sizes and in class names, yet build the same layers and compute the same
    `forward`; an example with the same forward as a holdout
    reference solves that problem, whatever its embedding says. None when the code does not parse
    or has no forward.
    """
    try:
        tree = ast.parse(pytorch_code)
    except (SyntaxError, ValueError, RecursionError):
        return None
    bodies = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in ("__init__", "forward"):
                    args = [a.arg for a in item.args.args]
                    body = [stmt for stmt in _without_docstring(item.body) if not _is_super_init(stmt)]
                    bodies.append(f"{item.name}{args}:" + "".join(ast.unparse(stmt) for stmt in body))
    if not any(b.startswith("forward") for b in bodies):
        return None
    return hashlib.sha256(_WHITESPACE.sub("", "|".join(bodies)).encode()).hexdigest()


# Calls that shape, move or allocate tensors: they say nothing about what a module computes.
_PLUMBING_CALLS = frozenset({
    "super", "init", "size", "view", "reshape", "contiguous", "float", "half", "to", "range", "len", "int",
    "list", "tuple", "get", "append", "item", "dim", "numel", "expand", "expand_as", "unsqueeze", "squeeze",
    "permute", "transpose", "clone", "empty", "empty_like", "zeros", "ones", "zeros_like", "ones_like", "parameter",
    "register_buffer", "new_empty", "flatten", "cat", "stack", "split", "chunk", "detach", "cpu", "cuda", "type",
    "randn", "rand", "tensor", "isinstance", "print", "getattr", "setattr", "modulelist", "sequential",
})


def operator_names(pytorch_code: str) -> frozenset[str]:
    """The operations a module's `__init__`/`forward` use (softmax, conv2d, matmul, ...), lower-cased.

    A lexical signal beside the embedding: MiniLM rates modules by overall shape (a row
    normalisation looks like a softmax), while the operator names say what is computed.
    """
    try:
        tree = ast.parse(pytorch_code)
    except (SyntaxError, ValueError, RecursionError):
        return frozenset()
    names: set[str] = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for method in (m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name in ("__init__", "forward")):
            for node in ast.walk(method):
                if isinstance(node, ast.Call):
                    func = node.func
                    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
                    if name:
                        names.add(name.lower().strip("_"))
                elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                    names.add("matmul")
    return frozenset(n for n in names if n and n not in _PLUMBING_CALLS)
