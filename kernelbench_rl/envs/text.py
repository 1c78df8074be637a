"""The text-side helpers the environments need, imported from their owners.

`build_prompt` lives in envs/prompts.py (the RAG/prompt area); `extract_kernel` and
`strip_reasoning` live in evaluation/extract.py. Minimal stand-ins keep the environments usable
while those modules are absent; the real ones always win when importable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kernelbench_rl.problems import Problem


@dataclass
class _Extraction:
    code: str | None
    format_ok: bool
    reason: str
    backend: str


_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


def _fallback_extract_kernel(response: str, backend: str = "triton") -> _Extraction:
    blocks = [b for b in _FENCE.findall(strip_reasoning(response)) if "class ModelNew" in b]
    if not blocks:
        return _Extraction(None, False, "no code block defining class ModelNew", backend)
    return _Extraction(blocks[-1].strip() + "\n", True, "ok", backend)


def _fallback_strip_reasoning(text: str) -> str:
    return _THINK.sub("", text).strip()


def _fallback_build_prompt(problem: Problem, backend: str, examples: list[Any] | None = None,
                           instructions: str | None = None, feedback: str | None = None) -> str:
    language = "Triton (@triton.jit kernels)" if backend == "triton" else "CUDA (__global__ kernels via load_inline)"
    parts = [
        f"Write a {language} implementation of the PyTorch model below as `class ModelNew(nn.Module)` with the same "
        "constructor and forward signatures. Answer with one Python code block.",
    ]
    if instructions:
        parts.append(instructions)
    for i, example in enumerate(examples or []):
        shown = getattr(example, "kernel_code", example)
        parts.append(f"Example {i + 1}:\n{shown}")
    parts.append(f"```python\n{problem.source}\n```")
    if feedback:
        parts.append(feedback)
    return "\n\n".join(parts)


def extract_kernel(response: str, backend: str = "triton") -> Any:
    try:
        from kernelbench_rl.evaluation.extract import extract_kernel as real
    except ImportError:
        return _fallback_extract_kernel(response, backend)
    return real(response, backend=backend)


def strip_reasoning(text: str) -> str:
    try:
        from kernelbench_rl.evaluation.extract import strip_reasoning as real
    except ImportError:
        return _fallback_strip_reasoning(text)
    return real(text)


def build_messages(problem: Problem, backend: str, *, examples: list[Any] | None = None,
                   instructions: str | None = None, feedback: str | None = None) -> list[dict[str, str]]:
    """Chat messages of a prompt. examples=None: the prompt module's default one-shot example; []: none."""
    try:
        from kernelbench_rl.envs.prompts import build_messages as real
    except ImportError:
        return [{"role": "user", "content": _fallback_build_prompt(problem, backend, examples, instructions, feedback)}]
    return real(problem, backend, examples=examples, instructions=instructions, feedback=feedback)


def messages_to_text(messages: list[dict[str, str]]) -> str:
    """The plain-text form of a prompt (what a model without a chat template reads; what the store keeps)."""
    return "\n\n".join(m["content"] for m in messages)
