"""The prompt builder: one function for training and evaluation prompts alike.

A prompt is: what to do, k worked examples (PyTorch reference -> kernel), the problem's reference
source, the required answer format, and, in a multi-turn episode, feedback on the last attempt.
`build_prompt` returns one string; `build_messages` returns the same content as chat messages
(system + user) for chat-templated models. Neither depends on where examples came from, so
retrieval (kernelbench_rl.rag) and the default one-shot example share one format.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kernelbench_rl.problems.split import ONE_SHOT_PROBLEM_ID
from kernelbench_rl.problems import Problem

BACKENDS = ("triton", "cuda")
# Our ReLU solution is the one-shot example when nothing is retrieved; the split never holds it out.
DEFAULT_EXAMPLE_PROBLEM_ID = ONE_SHOT_PROBLEM_ID


class ExampleLike(Protocol):
    pytorch_code: str
    kernel_code: str
    backend: str


@dataclass(frozen=True)
class PromptExample:
    pytorch_code: str
    kernel_code: str
    backend: str = "triton"
    title: str = ""
    source: str = ""


SYSTEM_TEXT = (
    "You are an expert GPU kernel engineer. You rewrite PyTorch modules as custom {backend_name} kernels "
    "that produce the same outputs and run faster."
)

_BACKEND_NAMES = {"triton": "Triton", "cuda": "CUDA"}

_TASK = {
    "triton": (
        "Write `class ModelNew(nn.Module)` that computes exactly what `Model` computes, with the work done in "
        "your own Triton kernels (functions decorated with `@triton.jit`, launched from `forward`). Keep the "
        "constructor's signature and create parameters in the same order as `Model` (keep layers such as "
        "`nn.Linear` as parameter holders and read their `.weight`). Do not call the PyTorch operators that "
        "the reference uses to do the work, do not fall back to them, and do not subclass `Model`."
    ),
    "cuda": (
        "Write `class ModelNew(nn.Module)` that computes exactly what `Model` computes, with the work done in "
        "your own CUDA kernels (`__global__` functions compiled with "
        "`torch.utils.cpp_extension.load_inline` and launched from `forward`). Keep the constructor's "
        "signature and create parameters in the same order as `Model` (keep layers such as `nn.Linear` as "
        "parameter holders and read their `.weight`). Do not call the PyTorch operators that the reference "
        "uses to do the work, do not fall back to them, and do not subclass `Model`."
    ),
}

ANSWER_FORMAT = (
    "Answer with exactly one ```python code block containing the complete module: imports, your kernels "
    "and `class ModelNew`. Nothing after the block is read. (Wrapping the code in <KERNEL>...</KERNEL> "
    "tags instead of a code block is also accepted.)"
)

_CUDA_RELU_EXAMPLE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_source = r"""
#include <torch/extension.h>

__global__ void relu_kernel(const float* x, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        out[i] = v > 0.f ? v : 0.f;
    }
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    int threads = 256;
    int blocks = (int)((n + threads - 1) / threads);
    relu_kernel<<<blocks, threads>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

relu_ext = load_inline(
    name="relu_ext",
    cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
    cuda_sources=relu_source,
    functions=["relu_cuda"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_ext.relu_cuda(x.contiguous())
'''


def default_example(backend: str = "triton") -> PromptExample | None:
    """The one-shot example used when no retrieval is configured: ReLU (L1/19) with our kernel for it."""
    from kernelbench_rl.problems import get_problem, load_solution
    from kernelbench_rl.errors import UserError

    try:
        problem = get_problem(DEFAULT_EXAMPLE_PROBLEM_ID)
    except UserError:
        return None
    kernel = load_solution(problem) if backend == "triton" else _CUDA_RELU_EXAMPLE
    if not kernel:
        return None
    return PromptExample(pytorch_code=problem.source, kernel_code=kernel, backend=backend, title=problem.name,
                         source="solutions")


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        from kernelbench_rl.errors import UserError

        raise UserError(f"Unknown backend {backend!r}; choose triton or cuda.")


def system_text(backend: str) -> str:
    _check_backend(backend)
    return SYSTEM_TEXT.format(backend_name=_BACKEND_NAMES[backend])


def _fence(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def _format_example(number: int, example: ExampleLike) -> str:
    title = getattr(example, "title", "") or ""
    heading = f"### Example {number}" + (f": {title}" if title else "")
    kernel_lang = "python"
    kernel = example.kernel_code.rstrip()
    # Sakana-style examples are raw CUDA C++ extension sources, not Python modules.
    if example.backend == "cuda" and "class ModelNew" not in kernel and "__global__" in kernel:
        kernel_lang = "cpp"
    return (
        f"{heading}\nReference (PyTorch):\n{_fence(example.pytorch_code)}\n"
        f"Optimised ({_BACKEND_NAMES.get(example.backend, example.backend)}):\n```{kernel_lang}\n{kernel}\n```"
    )


def build_user_text(
    problem: Problem,
    backend: str = "triton",
    examples: Sequence[ExampleLike] | None = None,
    instructions: str | None = None,
    feedback: str | None = None,
) -> str:
    """The body of the prompt (everything but the system text)."""
    _check_backend(backend)
    if examples is None:
        fallback = default_example(backend) if problem.id != DEFAULT_EXAMPLE_PROBLEM_ID else None
        examples = [fallback] if fallback is not None else []
    parts: list[str] = [_TASK[backend]]
    if instructions:
        parts.append(instructions.strip())
    if examples:
        intro = "Here are worked examples of PyTorch modules rewritten with custom kernels:"
        parts.append(intro + "\n\n" + "\n\n".join(_format_example(i + 1, ex) for i, ex in enumerate(examples)))
    parts.append(f"## The module to optimise ({problem.id}, {problem.name})\n{_fence(problem.source)}")
    if feedback:
        parts.append("## Feedback on your previous attempt\n" + feedback.strip()
                     + "\nFix the problem and answer with the complete corrected module.")
    parts.append(ANSWER_FORMAT)
    return "\n\n".join(parts) + "\n"


def build_prompt(
    problem: Problem,
    backend: str = "triton",
    examples: Sequence[ExampleLike] | None = None,
    instructions: str | None = None,
    feedback: str | None = None,
) -> str:
    """The whole prompt as one string (system text first). examples=None: the default one-shot
    example (skipped when the problem is that example's own problem); examples=[]: zero-shot."""
    return system_text(backend) + "\n\n" + build_user_text(problem, backend, examples, instructions, feedback)


def build_messages(
    problem: Problem,
    backend: str = "triton",
    examples: Sequence[ExampleLike] | None = None,
    instructions: str | None = None,
    feedback: str | None = None,
) -> list[dict[str, str]]:
    """The same prompt as chat messages: [{role: system}, {role: user}]."""
    return [
        {"role": "system", "content": system_text(backend)},
        {"role": "user", "content": build_user_text(problem, backend, examples, instructions, feedback)},
    ]
