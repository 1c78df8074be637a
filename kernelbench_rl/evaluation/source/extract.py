"""Kernel extraction: find the candidate module (`class ModelNew`) in a model's response.

Order of preference: a `<KERNEL>...</KERNEL>` block, else the fenced code blocks (the last one that
defines `class ModelNew`, else the last Python block). Reasoning (`<think>...</think>`) is removed
first, so drafts inside it never count. `format_ok` only says the response is well formed for the
backend (parses, defines ModelNew, uses Triton or CUDA); the static policy judges the rest.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kernelbench_rl.errors import UserError
from kernelbench_rl.evaluation import static_policy
from kernelbench_rl.evaluation.static_policy import candidate_class

BACKENDS = ("triton", "cuda")

_THINK_PAIR = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_KERNEL_BLOCK = re.compile(r"<KERNEL>(.*?)(</KERNEL>|\Z)", re.DOTALL | re.IGNORECASE)
_FENCE_OPEN = re.compile(r"^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)[^`]*$")
_DEFINES_MODEL_NEW = re.compile(r"^\s*(class\s+ModelNew\b|ModelNew\s*=)", re.MULTILINE)

PYTHON_LANGS = frozenset({"", "python", "py", "python3", "py3", "triton"})


@dataclass
class Extraction:
    code: str | None
    format_ok: bool
    reason: str  # one line, fit for the model to read
    backend: str


@dataclass
class _Block:
    text: str
    lang: str
    closed: bool


def strip_reasoning(text: str) -> str:
    """The response without its reasoning.

    Complete `<think>...</think>` pairs go; a `</think>` with no opener (the chat template opened the
    reasoning in the prompt) drops everything before it; a `<think>` that never closes drops
    everything after it (the answer never came).
    """
    text = _THINK_PAIR.sub("", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    opened = _THINK_OPEN.search(text)
    if opened:
        text = text[: opened.start()]
    return text.strip()


def _fenced_blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE_OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        fence, lang = match.group(1), match.group(2).lower()
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped and stripped[0] == fence[0] and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                closed = True
                i += 1
                break
            body.append(lines[i])
            i += 1
        blocks.append(_Block("\n".join(body), lang, closed))
    return blocks


def _pick_block(blocks: list[_Block]) -> _Block | None:
    with_model = [b for b in blocks if _DEFINES_MODEL_NEW.search(b.text)]
    if with_model:
        return with_model[-1]
    python_blocks = [b for b in blocks if b.lang in PYTHON_LANGS]
    return python_blocks[-1] if python_blocks else None


def _find_code(answer: str) -> tuple[str | None, str]:
    """(code, where-or-why): the code and its origin, or None and why nothing was found."""
    kernel_blocks = [(m.group(1), bool(m.group(2))) for m in _KERNEL_BLOCK.finditer(answer)]
    if kernel_blocks:
        with_model = [b for b in kernel_blocks if _DEFINES_MODEL_NEW.search(b[0])]
        body, closed = (with_model or kernel_blocks)[-1]
        inner = _fenced_blocks(body)
        if inner:
            picked = _pick_block(inner) or inner[-1]
            body = picked.text
        if not closed and not _DEFINES_MODEL_NEW.search(body):
            return None, "the <KERNEL> block is never closed with </KERNEL> (was the response cut off?)"
        return body.strip("\n"), "<KERNEL> block"
    blocks = _fenced_blocks(answer)
    if not blocks:
        return None, "no ```python block with class ModelNew found"
    picked = _pick_block(blocks)
    if picked is None:
        return None, "no ```python block with class ModelNew found"
    return picked.text.strip("\n"), "```" + (picked.lang or "") + " block"


def _check_backend(tree: ast.Module, backend: str) -> str | None:
    """Why the code does not use the backend, or None when it does (format level only)."""
    # The static policy owns the import/alias resolution shared with this check (source/ imports static_policy/,
    # never the other way).
    imports = static_policy.collect_imports(tree)
    if backend == "triton":
        if not any(name == "triton" or name.startswith("triton.") for name in imports.imported_names()):
            return "the code does not import triton"
        resolver = static_policy.Resolver(imports)
        if not any(static_policy.is_triton_jit(fn, resolver) for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)):
            return "no @triton.jit kernel is defined"
        return None
    sources = static_policy.cuda_source_strings(tree)
    if not any("__global__" in s for s in sources):
        return "no CUDA source string with a __global__ kernel found"
    resolver = static_policy.Resolver(imports)
    if not static_policy.extension_load_calls(tree, resolver):
        return "the CUDA source is never compiled (call torch.utils.cpp_extension.load_inline)"
    return None


def extract_kernel(response: str, backend: str = "triton") -> Extraction:
    if backend not in BACKENDS:
        raise UserError(f"Unknown kernel backend {backend!r}; use one of: {', '.join(BACKENDS)}.")
    if not response or not response.strip():
        return Extraction(None, False, "the response is empty", backend)
    answer = strip_reasoning(response)
    if not answer:
        return Extraction(None, False, "the response contains only reasoning (<think>) and no answer after it", backend)
    code, where = _find_code(answer)
    if code is None:
        return Extraction(None, False, where, backend)
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return Extraction(code, False, f"the code in the {where} does not parse as Python (line {exc.lineno}: {exc.msg})", backend)
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        return Extraction(code, False, f"the code in the {where} cannot be parsed ({type(exc).__name__})", backend)
    if not _defines_model_new(tree):
        return Extraction(code, False, f"the code in the {where} does not define class ModelNew", backend)
    problem = _check_backend(tree, backend)
    if problem is not None:
        return Extraction(code, False, f"{problem} ({backend} backend)", backend)
    return Extraction(code, True, f"ok: extracted from the {where}", backend)


def _defines_model_new(tree: ast.Module) -> bool:
    """ModelNew as a class or an alias (the static policy judges what it points at), or, where no ModelNew is
    defined, a class Model (kernrl's convention: the candidate's module holds no other Model)."""
    return candidate_class.candidate_class_name(tree) is not None
