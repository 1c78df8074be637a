"""Feedback for the next refinement turn: what happened to the last kernel, in a few lines.

The model reads the status category, the one error line that matters (traceback frames, file
paths and addresses removed), how many correctness trials passed, the speedup, and a hint for
the category. It never reads a raw traceback: those are long, noisy and leak sandbox paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernelbench_rl.evaluation.source import kernels
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult

MAX_ERROR_CHARS = 400

HINTS: dict[str, str] = {
    ErrorCategory.FORMAT.value: "Answer with one complete Python code block that defines class ModelNew.",
    ErrorCategory.STATIC.value: "Do the computation in your own kernel: no torch compute ops, fallbacks or patching in forward.",
    ErrorCategory.COMPILE.value: "Fix the syntax, imports or kernel signature so the module imports and the kernel compiles.",
    ErrorCategory.RUNTIME.value: "Check the launch grid, pointer arithmetic, masks and tensor arguments of the kernel call.",
    ErrorCategory.TIMEOUT.value: "The kernel ran too long: check loop bounds and the launch grid.",
    ErrorCategory.CRASH.value: "The process died: look for out-of-bounds accesses and missing masks.",
    ErrorCategory.MISMATCH.value: "Outputs differ from the reference: check the math, reductions, masks and accumulation dtype.",
    ErrorCategory.SHAPE.value: "The output shape is wrong: return a tensor of exactly the reference's shape.",
    ErrorCategory.DTYPE.value: "The output dtype is wrong: return the reference's dtype.",
    ErrorCategory.INFRA.value: "The evaluation failed on our side; resubmit the same kernel or improve it.",
    ErrorCategory.TOO_LARGE.value: "This problem does not fit this GPU (its memory, or its reference's time budget); no verdict on your kernel.",
    ErrorCategory.UNSUPPORTED.value: ("Triton's CPU interpreter cannot run what this kernel uses, so it could not be "
                                      "checked and scores as a wrong answer: use what the interpreter runs."),
    ErrorCategory.UNAVAILABLE.value: "This problem cannot run on this evaluator; no verdict on your kernel.",
    ErrorCategory.UNDISCRIMINATING.value: "This problem's inputs cannot tell a right kernel from a wrong one; no verdict on your kernel.",
    ErrorCategory.OK.value: "Correct. Make it faster: fuse operations, tune block sizes, reduce memory traffic.",
}

_TRACEBACK_NOISE = re.compile(r'^\s*(Traceback \(most recent call last\):|File ".*", line \d+|\^+\s*$|~+\s*$)')
_ERROR_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)|AssertionError)\b.*")
_PATH = re.compile(r"(/[\w.\-]+)+/([\w.\-]+)")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")


def clean_error_line(message: str) -> str:
    """The key line of an error message: the last `XxxError: ...` line, traceback noise removed."""
    if not message:
        return ""
    lines = [line.rstrip() for line in message.splitlines() if line.strip()]
    lines = [line for line in lines if not _TRACEBACK_NOISE.match(line)]
    key = next((line for line in reversed(lines) if _ERROR_LINE.match(line)), lines[-1] if lines else "")
    key = _PATH.sub(lambda m: m.group(2), key.strip())  # keep file names, drop sandbox directories
    key = _ADDRESS.sub("0x…", key)
    if len(key) > MAX_ERROR_CHARS:
        key = key[: MAX_ERROR_CHARS - 1] + "…"
    return key


@dataclass
class Feedback:
    category: str
    error_line: str
    trials_passed: int
    trials_total: int
    speedup: float | None
    hint: str
    profile: str = ""  # the profile's lines (evaluation/kernels.profile_text), when asked for and measured

    @classmethod
    def from_result(cls, result: EvalResult, profile: bool = False) -> Feedback:
        category = result.error_category.value
        return cls(
            profile=kernels.profile_text(result.profile or [], result.speed_of_light) if profile else "",
            category=category,
            error_line=clean_error_line(result.error_message) if category != ErrorCategory.OK.value else "",
            trials_passed=result.trials_passed,
            trials_total=result.trials_total,
            speedup=result.speedup if result.speedup_counts else None,
            hint=HINTS.get(category, ""),
        )

    def render(self) -> str:
        lines = [f"Status: {self.category}"]
        if self.error_line:
            lines.append(f"Error: {self.error_line}")
        if self.trials_total:
            lines.append(f"Correctness trials passed: {self.trials_passed}/{self.trials_total}")
        if self.speedup is not None:
            lines.append(f"Speedup over PyTorch eager: {self.speedup:.2f}x")
        if self.profile:
            lines.append(self.profile)
        if self.hint:
            lines.append(f"Hint: {self.hint}")
        return "\n".join(lines)


def refinement_feedback(previous_kernel: str | None, previous_response: str, result: EvalResult, max_chars: int = 6000,
                        profile: bool = False) -> str:
    """The text a refinement turn sees about the previous turn: its kernel, then the feedback."""
    if previous_kernel:
        shown = previous_kernel if len(previous_kernel) <= max_chars else previous_kernel[:max_chars] + "\n# … (truncated)"
        attempt = f"Your previous kernel:\n```python\n{shown}\n```"
    else:
        excerpt = previous_response.strip()[:1000] or "(empty)"
        attempt = f"Your previous answer contained no usable code block. It began:\n{excerpt}"
    return f"{attempt}\n\n{Feedback.from_result(result, profile=profile).render()}"
