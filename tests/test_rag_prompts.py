"""The prompt builder: same content for training and evaluation, string and chat forms."""

from __future__ import annotations

import pytest
import rag_fixtures as fx

from kernelbench_rl.envs.prompts import (
    ANSWER_FORMAT,
    PromptExample,
    build_messages,
    build_prompt,
    default_example,
)
from kernelbench_rl.errors import UserError
from kernelbench_rl.problems import get_problem, load_solution

EXAMPLES = [
    PromptExample(pytorch_code=fx.KB_SOFTMAX_PY, kernel_code="# softmax kernel\nimport triton\n", title="SoftmaxLayer"),
    PromptExample(pytorch_code=fx.KB_RELU_PY, kernel_code="# relu kernel\nimport triton\n", title="ReLULayer"),
]


def test_prompt_holds_problem_examples_instructions_and_answer_format():
    problem = fx.softmax_problem()
    prompt = build_prompt(problem, "triton", examples=EXAMPLES, instructions="Prefer one pass over the row.")
    for part in (problem.source.strip(), fx.KB_SOFTMAX_PY.strip(), "# relu kernel", "Prefer one pass over the row.",
                 ANSWER_FORMAT, "class ModelNew", "@triton.jit", "Example 2: ReLULayer"):
        assert part in prompt
    # Examples come before the problem, the answer format last.
    assert prompt.index("# softmax kernel") < prompt.index("# relu kernel") < prompt.index(problem.source.strip())
    assert prompt.rstrip().endswith(ANSWER_FORMAT.rstrip())


def test_default_one_shot_is_our_relu_solution_except_for_relu_itself():
    relu = get_problem("L1/19")
    example = default_example("triton")
    assert example is not None and example.kernel_code == load_solution(relu)
    prompt = build_prompt(fx.softmax_problem(), "triton")
    assert load_solution(relu).strip() in prompt and "Example 1" in prompt
    own = build_prompt(relu, "triton")
    assert "Example 1" not in own and "relu_kernel" not in own  # never its own solution
    zero_shot = build_prompt(fx.softmax_problem(), "triton", examples=[])
    assert "Example 1" not in zero_shot


def test_cuda_prompt_asks_for_cuda_and_its_default_example_is_cuda():
    prompt = build_prompt(fx.matmul_problem(), "cuda")
    assert "__global__" in prompt and "load_inline" in prompt and "@triton.jit" not in prompt
    with pytest.raises(UserError):
        build_prompt(fx.matmul_problem(), "metal")


def test_feedback_is_appended_for_the_next_turn():
    prompt = build_prompt(fx.softmax_problem(), "triton", examples=[], feedback="mismatch: max abs error 0.3 at row 2")
    assert "Feedback on your previous attempt" in prompt and "max abs error 0.3" in prompt
    assert prompt.index("max abs error") < prompt.index(ANSWER_FORMAT)


def test_chat_messages_carry_the_same_content():
    problem = fx.conv_problem()
    messages = build_messages(problem, "triton", examples=EXAMPLES, feedback="compile: bad")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert build_prompt(problem, "triton", examples=EXAMPLES, feedback="compile: bad") == (
        messages[0]["content"] + "\n\n" + messages[1]["content"]
    )


def test_an_answer_in_the_requested_format_is_extractable():
    from kernelbench_rl.evaluation.source import extract
    solution = load_solution(get_problem("L1/19"))
    for response in (f"Here it is.\n```python\n{solution}```\n", f"<KERNEL>\n{solution}\n</KERNEL>"):
        extraction = extract.extract_kernel(response, backend="triton")
        assert extraction.format_ok, extraction.reason
        assert "class ModelNew" in extraction.code
