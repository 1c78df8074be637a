"""Inputs that tell right from wrong: on problems whose own inputs make the op the identity (ReLU, LeakyReLU
and HardTanh on torch.rand's [0, 1)), a copy kernel, `return x` and a ReLU kernel for LeakyReLU must fail,
and correct kernels still pass. The evaluator finds such problems by itself (trivial candidates tried on
the problem's own inputs) and adds widened seeds."""

from __future__ import annotations

import pytest
import torch

from kernelbench_rl.evaluation.verdict import correctness, discrimination, sensitivity
from kernelbench_rl.evaluation.front.api import Evaluator
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalSettings
from kernelbench_rl.problems import Problem
from kernelbench_rl.problems import get_problem, load_solution

SETTINGS = EvalSettings(device="cpu", timeout_s=60)

HEAD = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
'''

COPY_KERNEL = HEAD + '''        out = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
'''
TOKEN_LAUNCH = '''        scratch = torch.empty(1, device=x.device)
        copy_kernel[(1,)](x, scratch, 1, BLOCK=16)
'''
RETURNS_INPUT = {name: HEAD + TOKEN_LAUNCH + f"        return {expr}\n"
                 for name, expr in (("x", "x"), ("view_as", "x.view_as(x)"), ("reshape", "x.reshape(x.shape)"))}
RELU_KERNEL = HEAD + '''        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
'''
IDENTITY_PROBLEMS = ("L1/19", "L1/20", "L1/32")  # ReLU, LeakyReLU, HardTanh on torch.rand


@pytest.fixture(scope="module")
def evaluator(shared_evaluator):
    ev = shared_evaluator(SETTINGS, static_checks=False)
    try:
        yield ev
    finally:
        ev.close()


def judge(ev: Evaluator, pairs: list[tuple[str, str]], **overrides):
    settings = EvalSettings(**{**SETTINGS.__dict__, **overrides})
    return ev.evaluate([EvalRequest(problem, source, settings) for problem, source in pairs])


def test_copy_kernels_and_returned_inputs_fail_where_the_op_is_the_identity_on_the_problems_own_inputs(evaluator):
    pairs = [(problem, COPY_KERNEL) for problem in IDENTITY_PROBLEMS]
    pairs += [("L1/19", source) for source in RETURNS_INPUT.values()]
    results = judge(evaluator, pairs)
    for (problem, _source), result in zip(pairs, results):
        assert result.compiled, (problem, result.error_message)
        assert result.error_category == ErrorCategory.MISMATCH and not result.correct, (problem, result.error_message)
        assert "widened inputs" in result.versions["inputs"], result.versions["inputs"]


def test_a_relu_kernel_is_not_a_leaky_relu_and_the_real_solutions_still_pass(evaluator):
    pairs = [("L1/20", RELU_KERNEL), ("L1/19", RELU_KERNEL)]
    pairs += [(problem, load_solution(get_problem(problem))) for problem in IDENTITY_PROBLEMS]
    wrong_for_leaky, relu, *solutions = judge(evaluator, pairs)
    assert wrong_for_leaky.error_category == ErrorCategory.MISMATCH, wrong_for_leaky.error_message
    assert relu.correct, relu.error_message
    # the problem's own seeds, the widened ones and the sensitivity seeds all ran
    assert relu.trials_total == (SETTINGS.correctness_trials + SETTINGS.discriminating_trials
                                 + sensitivity.seeds_in(relu.versions["sensitivity"])) == relu.trials_passed
    assert sensitivity.seeds_in(relu.versions["sensitivity"]) == 2, relu.versions["sensitivity"]
    for (problem, _), result in zip(pairs[2:], solutions):
        assert result.correct, (problem, result.error_message)
        assert result.versions["inputs"].startswith("widened")


def test_problems_whose_own_inputs_discriminate_keep_them_alone(evaluator):
    sigmoid = load_solution(get_problem("L1/21"))
    (result,) = judge(evaluator, [("L1/21", sigmoid)])
    assert result.correct, result.error_message
    assert result.trials_total == SETTINGS.correctness_trials + sensitivity.seeds_in(result.versions["sensitivity"])
    assert result.versions["inputs"].startswith("the problem's own inputs (no trivial candidate")


def test_without_discriminating_trials_the_copy_kernel_would_pass(evaluator):
    """The widened seeds are what catches it (so the test above can fail): with none, the copy passes ReLU."""
    (result,) = judge(evaluator, [("L1/19", COPY_KERNEL)], discriminating_trials=0)
    assert result.correct


DEGENERATE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x - x.max(dim=1, keepdim=True)[0] * 0 - x  # zeros, whatever the inputs (as L2/80's max minus mean)


def get_inputs():
    return [torch.rand(16, 64)]


def get_init_inputs():
    return []
"""
ZEROS = HEAD + TOKEN_LAUNCH + "        return torch.zeros_like(x)\n"


def test_a_problem_whose_every_input_set_zeros_pass_gets_no_verdict():
    """KernelBench's L2/80 computes zeros whatever its inputs: a zeros kernel must earn nothing there, and neither
    can an honest one (no verdict, like a problem too large for the device), never 'correct'."""
    problem = Problem(level=1, number=9001, name="9001_Zeros", source=DEGENERATE, origin="inline")
    with Evaluator(SETTINGS, static_checks=False, parallel_compiles=1, problems={problem.id: problem}) as ev:
        zeros, honest = ev.evaluate([EvalRequest(problem.id, ZEROS, SETTINGS), EvalRequest(problem.id, COPY_KERNEL, SETTINGS)])
    for result in (zeros, honest):
        assert result.error_category == ErrorCategory.UNDISCRIMINATING and not result.correct, result.error_message
        assert result.error_category.is_ours and "zeros" in result.error_message


# -- the mechanism, without the sandbox ------------------------------------------------------------------------

def _runner(forward, make):
    def run(seed, variant):
        torch.manual_seed(seed)
        inputs = discrimination.apply_variant(make(), variant)
        return inputs, [forward(*inputs)]
    return run


def test_discriminate_finds_widened_inputs_for_relu_and_none_for_a_constant_op():
    relu = discrimination.discriminate(_runner(torch.relu, lambda: [torch.rand(64, 32)]), [1, 2], 1e-4, 1e-4)
    assert relu.trivial == ["the first input returned"]
    assert relu.variant == {"name": "symmetric", "affine": [[0, 2.0, -1.0]]}
    assert relu.discriminating and "widened inputs" in relu.summary()

    constant = discrimination.discriminate(_runner(lambda x: x.sum(1) * 0 + 3.0, lambda: [torch.rand(64, 32)]),
                                           [1, 2], 1e-4, 1e-4)
    assert "a constant (another seed's mean)" in constant.trivial and constant.variant is None
    assert not constant.discriminating and constant.summary().startswith("UNDISCRIMINATING")

    softmax = discrimination.discriminate(_runner(lambda x: torch.softmax(x, 1), lambda: [torch.randn(64, 32)]),
                                          [1, 2], 1e-4, 1e-4)
    assert softmax.trivial == [] and softmax.variant is None and softmax.discriminating


def test_a_memorised_output_is_caught_where_inputs_barely_matter():
    """A deep net whose output hardly depends on its input: another seed's output passes; scaled inputs fix it."""
    torch.manual_seed(0)
    bias = torch.randn(16)

    def collapsed(x):
        return bias + 1e-6 * x.sum(1, keepdim=True)

    found = discrimination.discriminate(_runner(collapsed, lambda: [torch.rand(8, 16)]), [1, 2], 1e-4, 1e-4)
    assert "another seed's output" in found.trivial
    assert found.variant is not None and found.variant["name"] == "wide x256"  # x4 and x16 still leave it within 1e-4


def test_a_variant_on_which_the_reference_is_not_finite_is_not_kept():
    """sqrt(x)**2 is the identity on [0, 1) and NaN below zero: symmetric inputs are rejected, wide ones do not
    help (still the identity), so the problem stays undiscriminating and says why."""
    found = discrimination.discriminate(_runner(lambda x: torch.sqrt(x) ** 2, lambda: [torch.rand(64, 32)]),
                                        [1, 2], 1e-4, 1e-4)
    assert found.trivial == ["the first input returned"] and found.variant is None
    assert "symmetric: the reference is not finite" in found.reason
    assert "wide x4: the first input returned still passes" in found.reason


def _statistic_runner(values, calls=None):
    """A reference whose one output is a statistic fixed by the seed (`values[seed]`), whatever the inputs: how a
    mean over many random inputs behaves, its spread across seeds set here exactly."""
    def run(seed, variant):
        if calls is not None:
            calls.append(seed)
        inputs = discrimination.apply_variant([torch.full((4,), float(seed))], variant)
        return inputs, [torch.tensor([values[seed]])]
    return run


SEVEN = [1, 2, 3, 4, 5, 6, 7, 8]  # two seeds, then discrimination.CONFIRMATION_SEEDS more


def test_a_memorised_statistic_that_passes_now_and_then_gets_more_seeds_not_a_flag():
    """Seeds 1 and 2 land within the tolerance of each other, and one more seed of six does: 2 passes of 7, so the
    problem keeps its own inputs, judged on 5 seeds a candidate (a memoriser passing a third of them passes all
    five under 1% of the time)."""
    values = {1: 5.0, 2: 5.00001, 3: 6.0, 4: 7.0, 5: 5.000002, 6: 8.0, 7: 9.0, 8: 10.0}
    assert discrimination.discriminate(_statistic_runner(values), [1, 2], 1e-4, 1e-4).trivial  # two seeds: flagged
    found = discrimination.discriminate(_statistic_runner(values), SEVEN, 1e-4, 1e-4)
    assert found.trivial == [] and found.discriminating and found.variant is None
    assert found.own_seeds == 5 and "a constant (another seed's mean) passed 2 of 7 seeds" in found.confirmation
    assert "at least 5 seeds a candidate" in found.summary()
    settings = EvalSettings(device="cpu", correctness_trials=3)
    assert correctness.own_seed_count(settings, found) == 5
    assert correctness.own_seed_count(settings, discrimination.Discrimination()) == 3


def test_a_near_miss_is_tried_on_more_seeds_and_a_far_one_is_not():
    near = {1: 5.0, 2: 5.002, 3: 5.00001, 4: 7.0, 5: 8.0, 6: 9.0, 7: 10.0, 8: 11.0}  # 2 and 1 miss by 4x the tolerance
    calls = []
    found = discrimination.discriminate(_statistic_runner(near, calls), SEVEN, 1e-4, 1e-4)
    assert found.trivial == [] and found.own_seeds == 4 and set(calls) == set(SEVEN)  # 1 of 7: 4 seeds
    far = {seed: 10.0 * seed for seed in SEVEN}
    calls = []
    found = discrimination.discriminate(_statistic_runner(far, calls), SEVEN, 1e-4, 1e-4)
    assert found.trivial == [] and found.own_seeds == 0 and found.confirmation == "" and set(calls) == {1, 2}


def test_a_memorised_statistic_that_passes_most_seeds_is_still_flagged():
    values = {1: 5.0, 2: 5.00001, 3: 5.000003, 4: 5.00002, 5: 5.000002, 6: 5.00003, 7: 5.000004, 8: 9.0}
    found = discrimination.discriminate(_statistic_runner(values), SEVEN, 1e-4, 1e-4)
    assert set(found.trivial) == set(discrimination.MEMORISED) and not found.discriminating  # widening cannot help
    assert found.summary().startswith("UNDISCRIMINATING") and "passed 6 of 7" in found.confirmation
    # The always-constant op of the test above stays flagged with more seeds too.
    constant = discrimination.discriminate(_runner(lambda x: x.sum(1) * 0 + 3.0, lambda: [torch.rand(64, 32)]),
                                           SEVEN, 1e-4, 1e-4)
    assert "a constant (another seed's mean)" in constant.trivial and not constant.discriminating
