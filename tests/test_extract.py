"""Kernel extraction from model responses: blocks, reasoning, and the per-backend format check."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelbench_rl.errors import UserError
from kernelbench_rl.evaluation.source.extract import extract_kernel, strip_reasoning

REPO_ROOT = Path(__file__).resolve().parents[1]
TRITON_SOLUTION = (REPO_ROOT / "KernelBench" / "solutions" / "level1" / "19_ReLU.py").read_text()
CUDA_SOLUTION = (REPO_ROOT / "tests" / "static_cases" / "cuda_elementwise_add.py").read_text()

FENCE = "```"


def fenced(code: str, lang: str = "python") -> str:
    return f"{FENCE}{lang}\n{code}\n{FENCE}"


def test_plain_python_block_is_extracted():
    result = extract_kernel(f"Here is my kernel:\n\n{fenced(TRITON_SOLUTION)}\nIt should be fast.")
    assert result.format_ok, result.reason
    assert result.code == TRITON_SOLUTION.strip("\n")
    assert result.backend == "triton"


@pytest.mark.parametrize("lang", ["py", "", "python3", "cuda"])
def test_other_fence_languages_are_accepted(lang):
    result = extract_kernel(fenced(TRITON_SOLUTION, lang))
    assert result.format_ok, result.reason
    assert "class ModelNew" in result.code


def test_tilde_fences_and_unclosed_final_fence():
    assert extract_kernel(f"~~~python\n{TRITON_SOLUTION}\n~~~").format_ok
    # Cut off before the closing fence but the code is complete: still usable.
    assert extract_kernel(f"{FENCE}python\n{TRITON_SOLUTION}\n").format_ok


def test_last_block_defining_model_new_wins_over_later_snippets():
    draft = TRITON_SOLUTION.replace("4096", "1024")
    response = f"Draft:\n{fenced(draft)}\nFinal:\n{fenced(TRITON_SOLUTION)}\nUsage:\n{fenced('model = ModelNew()')}\n"
    result = extract_kernel(response)
    assert result.format_ok, result.reason
    assert "4096" in result.code and "1024" not in result.code.replace("4096", "")


def test_last_python_block_used_when_none_defines_model_new():
    response = f"{fenced('import torch')}\n{fenced('x = 1')}"
    result = extract_kernel(response)
    assert not result.format_ok
    assert result.code == "x = 1"
    assert "does not define class ModelNew" in result.reason


def test_kernel_tags_are_preferred_over_fenced_blocks():
    other = TRITON_SOLUTION.replace("relu_kernel", "other_kernel")
    response = f"{fenced(other)}\n<KERNEL>\n{TRITON_SOLUTION}\n</KERNEL>"
    result = extract_kernel(response)
    assert result.format_ok, result.reason
    assert "relu_kernel" in result.code and "other_kernel" not in result.code
    assert "<KERNEL>" in result.reason


def test_kernel_tags_may_wrap_a_fence():
    result = extract_kernel(f"<KERNEL>\n{fenced(TRITON_SOLUTION)}\n</KERNEL>")
    assert result.format_ok, result.reason
    assert FENCE not in result.code


def test_unclosed_kernel_tag_without_code_is_reported():
    result = extract_kernel("<KERNEL>\nimport torch\n")
    assert not result.format_ok
    assert "never closed" in result.reason


def test_reasoning_is_stripped_and_drafts_inside_it_ignored():
    draft = TRITON_SOLUTION.replace("relu_kernel", "draft_kernel")
    response = f"<think>Let me try:\n{fenced(draft)}\nhmm</think>\nFinal answer:\n{fenced(TRITON_SOLUTION)}"
    result = extract_kernel(response)
    assert result.format_ok, result.reason
    assert "draft_kernel" not in result.code


def test_code_only_inside_reasoning_fails_format():
    result = extract_kernel(f"<think>{fenced(TRITON_SOLUTION)}</think>\nI am done.")
    assert not result.format_ok
    assert result.code is None
    assert "no ```python block" in result.reason


def test_unterminated_think_means_only_reasoning():
    result = extract_kernel(f"<think>I will write {fenced(TRITON_SOLUTION)} and then")
    assert not result.format_ok
    assert "only reasoning" in result.reason


def test_close_tag_without_opener_drops_the_leading_reasoning():
    # Chat templates that open <think> in the prompt leave only the closing tag in the completion.
    draft = TRITON_SOLUTION.replace("relu_kernel", "draft_kernel")
    result = extract_kernel(f"thinking {fenced(draft)} done</think>\n{fenced(TRITON_SOLUTION)}")
    assert result.format_ok, result.reason
    assert "draft_kernel" not in result.code


def test_empty_response_fails():
    assert extract_kernel("").reason == "the response is empty"
    assert not extract_kernel("   \n").format_ok


def test_no_code_block_fails_with_a_reason_for_the_model():
    result = extract_kernel("I think you should use torch.relu.")
    assert not result.format_ok
    assert result.reason == "no ```python block with class ModelNew found"


def test_syntax_error_is_reported_with_its_line():
    broken = TRITON_SOLUTION.replace("def forward(self, x: torch.Tensor) -> torch.Tensor:", "def forward(self, x) ->:")
    result = extract_kernel(fenced(broken))
    assert not result.format_ok
    assert "does not parse as Python (line" in result.reason
    assert result.code is not None  # kept for the record


def test_triton_backend_requires_import_and_jit_kernel():
    no_jit = TRITON_SOLUTION.replace("@triton.jit\n", "")
    result = extract_kernel(fenced(no_jit))
    assert not result.format_ok and "no @triton.jit kernel" in result.reason
    no_import = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    result = extract_kernel(fenced(no_import))
    assert not result.format_ok and "does not import triton" in result.reason


def test_triton_jit_through_an_alias_counts():
    code = TRITON_SOLUTION.replace("import triton\n", "import triton\nfrom triton import jit\n").replace("@triton.jit", "@jit")
    assert extract_kernel(fenced(code)).format_ok


def test_cuda_backend_requires_global_kernel_and_load_inline():
    assert extract_kernel(fenced(CUDA_SOLUTION), backend="cuda").format_ok
    result = extract_kernel(fenced(TRITON_SOLUTION), backend="cuda")
    assert not result.format_ok and "__global__" in result.reason
    never_compiled = CUDA_SOLUTION.split("elementwise_add = load_inline(")[0] + "\nclass ModelNew:\n    pass\n"
    result = extract_kernel(fenced(never_compiled), backend="cuda")
    assert not result.format_ok and "load_inline" in result.reason


def test_triton_code_fails_cuda_format_and_vice_versa():
    assert not extract_kernel(fenced(CUDA_SOLUTION), backend="triton").format_ok


def test_model_new_alias_is_well_formed_for_the_static_policy_to_judge():
    code = TRITON_SOLUTION.replace("class ModelNew(nn.Module):", "class Impl(nn.Module):") + "\nModelNew = Impl\n"
    assert extract_kernel(fenced(code)).format_ok


def test_unknown_backend_is_a_user_error():
    with pytest.raises(UserError):
        extract_kernel(fenced(TRITON_SOLUTION), backend="metal")


def test_strip_reasoning_cases():
    assert strip_reasoning("<think>a</think>answer") == "answer"
    assert strip_reasoning("<THINK>a</THINK> one <think>b</think> two") == "one  two"
    assert strip_reasoning("reasoning only</think>\nanswer") == "answer"
    assert strip_reasoning("answer first <think>never closed") == "answer first"
    assert strip_reasoning("<think>never closed") == ""
    assert strip_reasoning("no reasoning at all") == "no reasoning at all"


def test_unparsable_code_is_a_format_failure_not_an_exception():
    result = extract_kernel(fenced("class ModelNew:\n    x = " + "-" * 100_000 + "1"))
    assert not result.format_ok
    assert "cannot be parsed" in result.reason or "does not parse" in result.reason
