"""Environments: feedback text, single-turn and Kevin-mode episodes, RA-ICL, overlapped rollouts."""

from __future__ import annotations

import threading

import pytest

from kernelbench_rl.envs import EnvSpec, KernelEnv, clean_error_line, make_group_builders
from kernelbench_rl.envs.feedback import Feedback
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
from kernelbench_rl.problems import get_problem

GOOD_RESPONSE = """<think>draft: maybe use torch.relu? SECRET_REASONING</think>
Here is my kernel.
```python
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
```
"""

TRACEBACK = """Traceback (most recent call last):
  File "/tmp/kbrl-sandbox-81f2/candidate.py", line 22, in forward
    relu_kernel[(grid,)](x, y, n)
  File "/work/.venv/lib/python3.11/site-packages/triton/runtime/jit.py", line 345, in run
    raise TypeError(msg)
TypeError: dynamic_func() missing 1 required positional argument: 'BLOCK' at 0x7f3a9c2d1e80
"""


def result(category: ErrorCategory, **kw) -> EvalResult:
    fields = dict(problem_id="L1/19", candidate_sha256="x", backend="triton", precision="fp32", device_kind="cpu")
    fields.update(kw)
    return EvalResult(error_category=category, **fields)


def test_clean_error_line_keeps_the_error_and_drops_noise() -> None:
    line = clean_error_line(TRACEBACK)
    assert line.startswith("TypeError: dynamic_func() missing 1 required positional argument")
    assert "/tmp/kbrl-sandbox" not in line and "Traceback" not in line and "0x7f3a9c2d1e80" not in line
    assert clean_error_line("") == ""
    assert len(clean_error_line("ValueError: " + "x" * 5000)) <= 400


def test_feedback_render_has_category_trials_speedup_hint() -> None:
    fb = Feedback.from_result(result(ErrorCategory.MISMATCH, format_ok=True, compiled=True, trials_passed=1,
                                     trials_total=3, error_message="max abs error 0.5 > 1e-4"))
    text = fb.render()
    assert "Status: mismatch" in text and "1/3" in text and "max abs error" in text and "Hint:" in text
    ok = Feedback.from_result(result(ErrorCategory.OK, format_ok=True, compiled=True, correct=True,
                                     trials_passed=3, trials_total=3, speedup=1.7, device_kind="cuda"))
    assert "1.70x" in ok.render() and "faster" in ok.render()


def test_single_turn_episode_ends_after_one_turn() -> None:
    env = KernelEnv(get_problem("L1/19"), EnvSpec(turns=1))
    prompt = env.next_prompt()
    assert "class Model" in prompt and "ModelNew" in prompt
    turn = env.add_completion(prompt, [1, 2], GOOD_RESPONSE, [3, 4], [-0.1, -0.2], "stop")
    assert turn.format_ok and "relu_kernel" in turn.code and "SECRET_REASONING" not in turn.code
    env.add_result(result(ErrorCategory.OK, format_ok=True, compiled=True, correct=True))
    assert env.done and env.end_reason == "turns"


def test_kevin_turns_see_previous_kernel_and_feedback_without_reasoning() -> None:
    env = KernelEnv(get_problem("L1/19"), EnvSpec(turns=3))
    env.add_completion(env.next_prompt(), [1], GOOD_RESPONSE, [2], [-0.1], "stop")
    env.add_result(result(ErrorCategory.RUNTIME, format_ok=True, compiled=True, error_message=TRACEBACK))
    assert not env.done
    second = env.next_prompt()
    assert "relu_kernel" in second  # the previous kernel
    assert "Status: runtime" in second and "TypeError: dynamic_func()" in second
    assert "SECRET_REASONING" not in second and "Traceback" not in second and "/tmp/kbrl-sandbox" not in second
    assert "class Model" in second  # the problem is still there
    env.add_completion(second, [1], "<think>SECRET_REASONING</think> no code, sorry", [2], [-0.1], "stop")
    env.add_result(result(ErrorCategory.FORMAT))
    third = env.next_prompt()
    assert "no usable code block" in third and "SECRET_REASONING" not in third and "Status: format" in third
    env.add_completion(third, [1], GOOD_RESPONSE, [2], [-0.1], "stop")
    env.add_result(result(ErrorCategory.OK, format_ok=True, compiled=True, correct=True))
    assert env.done and len(env.turns) == 3


def test_early_stop_on_correct_only_when_enabled() -> None:
    for early, expected_done in ((True, True), (False, False)):
        env = KernelEnv(get_problem("L1/19"), EnvSpec(turns=4, early_stop_on_correct=early))
        env.add_completion(env.next_prompt(), [1], GOOD_RESPONSE, [2], [-0.1], "stop")
        env.add_result(result(ErrorCategory.OK, format_ok=True, compiled=True, correct=True))
        assert env.done is expected_done


def test_infra_failure_ends_the_episode_and_token_budget_limits_turns() -> None:
    env = KernelEnv(get_problem("L1/19"), EnvSpec(turns=4))
    env.add_completion(env.next_prompt(), [1], GOOD_RESPONSE, [2], [-0.1], "stop")
    env.add_result(result(ErrorCategory.INFRA, error_message="worker lost"))
    assert env.done and env.end_reason == "infra"
    spec = EnvSpec(turns=4, token_budget=1000, max_tokens=300)
    env = KernelEnv(get_problem("L1/19"), spec)
    assert env.turn_max_tokens(500) == 300
    assert env.turn_max_tokens(900) == 100
    assert env.turn_max_tokens(995) == 0


def test_retriever_examples_reach_the_prompt_once_per_problem() -> None:
    from kernelbench_rl.envs.prompts import PromptExample

    calls = []

    def retrieve(problem, k):
        calls.append((problem.id, k))
        return [PromptExample(pytorch_code="# ref", kernel_code=f"# EXAMPLE_{i}_FOR_{problem.name}") for i in range(k)]

    problems = [get_problem("L1/19"), get_problem("L1/20")]
    builders = make_group_builders(problems, 3, EnvSpec(), retrieve, k=2)
    assert calls == [("L1/19", 2), ("L1/20", 2)]
    envs = builders[0]()
    assert len(envs) == 3
    assert "EXAMPLE_1_FOR_19_ReLU" in envs[0].next_prompt()


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    from kernelbench_rl.policy import PolicyConfig, make_service_client

    service = make_service_client(PolicyConfig(backend="local", base_model="local:tiny", lora_rank=4, device="cpu",
                                               log_dir=str(tmp_path_factory.mktemp("policy"))))
    training = service.create_lora_training_client(base_model="local:tiny", rank=4).result()
    return training.save_weights_and_get_sampling_client().result(), training.get_tokenizer()


def test_rollouts_overlap_evaluation_with_sampling(tiny_policy) -> None:
    """Group 0 is evaluated while group 1 is sampled: the evaluation waits for the second sampling call."""
    from kernelbench_rl.training.rollouts import PromptRenderer, RolloutRunner

    sampling_client, tokenizer = tiny_policy
    second_sampling_started = threading.Event()
    overlapped = []

    class WatchedSampler:
        calls = 0

        def sample(self, **kw):
            WatchedSampler.calls += 1
            if WatchedSampler.calls == 2:
                second_sampling_started.set()
            return sampling_client.sample(**kw)

    def evaluate(problem_ids, responses):
        if not overlapped:
            overlapped.append(second_sampling_started.wait(timeout=60))
        return [result(ErrorCategory.FORMAT) for _ in responses]

    problems = [get_problem("L1/19"), get_problem("L1/20")]
    done_order = []
    runner = RolloutRunner(WatchedSampler(), PromptRenderer(tokenizer), evaluate,
                           on_group_done=lambda g: done_order.append(g.problem.id))
    zero_shot = lambda problem, k: []  # short prompts keep the tiny model quick
    groups = runner.run(make_group_builders(problems, 2, EnvSpec(turns=2, max_tokens=8), zero_shot, k=1))
    assert overlapped == [True]
    assert sorted(done_order) == ["L1/19", "L1/20"]
    for group in groups:
        assert all(len(env.turns) == 2 and env.done for env in group.envs)
        for env in group.envs:
            turn = env.turns[1]
            assert 0 < len(turn.completion_tokens) <= 8 and len(turn.logprobs) == len(turn.completion_tokens)
            assert "Status: format" in turn.prompt
    assert WatchedSampler.calls == 2 + 2 * 2  # one call per group for turn 0, one per sample after


def test_a_slow_group_does_not_hold_back_the_evaluation_of_the_next(tiny_policy) -> None:
    """Group 0's evaluation stalls (a hang waiting out its timeout) until group 1 has been judged."""
    from kernelbench_rl.training.rollouts import PromptRenderer, RolloutRunner

    sampling_client, tokenizer = tiny_policy
    second_judged = threading.Event()
    waited = []

    def evaluate(problem_ids, responses):
        if problem_ids[0] == "L1/19":
            waited.append(second_judged.wait(timeout=20))
        else:
            second_judged.set()
        return [result(ErrorCategory.FORMAT) for _ in responses]

    runner = RolloutRunner(sampling_client, PromptRenderer(tokenizer), evaluate)
    problems = [get_problem("L1/19"), get_problem("L1/20")]
    groups = runner.run(make_group_builders(problems, 2, EnvSpec(turns=1, max_tokens=4), lambda p, k: [], k=1))
    assert waited == [True]  # one group at a time, group 0 would have waited in vain
    assert all(env.done for group in groups for env in group.envs)


def test_rollouts_retry_infra_failures_then_drop_them(tiny_policy) -> None:
    from kernelbench_rl.training.grpo import score_group
    from kernelbench_rl.training.rollouts import PromptRenderer, RolloutRunner

    sampling_client, tokenizer = tiny_policy
    calls = []

    def flaky(problem_ids, responses):
        calls.append(len(responses))
        if len(calls) == 1:  # first attempt: sample 0 lost its worker, sample 1 was judged
            return [result(ErrorCategory.INFRA), result(ErrorCategory.FORMAT)]
        return [result(ErrorCategory.INFRA) for _ in responses]  # the retry fails too

    runner = RolloutRunner(sampling_client, PromptRenderer(tokenizer), flaky, infra_retries=1)
    (group,) = runner.run(make_group_builders([get_problem("L1/19")], 2, EnvSpec(turns=1, max_tokens=4), lambda p, k: [], k=1))
    assert calls == [2, 1] and group.infra_retries_used == 1
    samples = score_group(group, "format", gamma=0.4, baseline="loo", speedup_cap=8.0)
    infra = [s for s in samples if s.sample_index == 0][0]
    assert infra.reward is None and not infra.trainable  # never a zero reward


def test_real_evaluator_judges_turns_and_rewards_follow(shared_evaluator) -> None:
    """Environment -> the real sandboxed Evaluator (CPU mode) -> reward, for a correct kernel and a hack."""
    from kernelbench_rl.evaluation.result import EvalSettings
    from kernelbench_rl.problems import load_solution
    from kernelbench_rl.training.grpo import score_group
    from kernelbench_rl.training.rollouts import GroupRollout

    problem = get_problem("L1/19")
    responses = [f"<think>plan</think>\n```python\n{load_solution(problem)}\n```",
                 "```python\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x.relu()\n```"]
    builder = make_group_builders([problem], 2, EnvSpec(turns=2), lambda p, k: [], k=1)[0]
    envs = builder()
    for env, response in zip(envs, responses):
        env.add_completion(env.next_prompt(), [1], response, [2], [-0.1], "stop")
    with shared_evaluator(EvalSettings(device="cpu")) as evaluator:
        results = evaluator.evaluate_responses([problem.id] * 2, responses)
    for env, r in zip(envs, results):
        env.add_result(r)
    good, hack = envs[0].turns[0].result, envs[1].turns[0].result
    assert good.correct and good.error_category == ErrorCategory.OK
    assert not hack.correct and hack.error_category == ErrorCategory.STATIC
    assert "Status: static" in envs[1].next_prompt()
    for env in envs:  # finish the episodes so the group can be scored
        env.end("test")
    samples = score_group(GroupRollout(0, builder, envs), "correctness", gamma=0.4, baseline="loo", speedup_cap=8.0)
    assert samples[0].reward > 0.9 and samples[1].reward == 0.0
    assert samples[0].advantage > 0 > samples[1].advantage
