"""Reward shaping, discounted returns and per-turn advantages, on constructed EvalResults."""

from __future__ import annotations

import math

import pytest

from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult, Flag, StaticReport
from kernelbench_rl.rewards import (
    PRESETS,
    bounded_log_slowdown,
    bounded_log_speedup,
    reward_floor,
    discounted_returns,
    group_advantages,
    is_constant,
    score,
)


def result(**kw) -> EvalResult:
    base = dict(problem_id="L1/19", candidate_sha256="x", backend="triton", precision="fp32", device_kind="cuda")
    base.update(kw)
    return EvalResult(**base)


FORMAT_ONLY = result(format_ok=True, error_category=ErrorCategory.COMPILE)
COMPILED = result(format_ok=True, compiled=True, error_category=ErrorCategory.MISMATCH)
CORRECT = result(format_ok=True, compiled=True, correct=True, speedup=1.0)
FAST = result(format_ok=True, compiled=True, correct=True, speedup=4.0)


def test_stage_presets_reward_their_milestone_in_order() -> None:
    for stage in ("format", "compile", "correctness", "speed"):
        rewards = [score(r, stage).reward for r in (result(), FORMAT_ONLY, COMPILED, CORRECT, FAST)]
        assert rewards == sorted(rewards), (stage, rewards)  # never worse for a better kernel
        assert rewards[0] == 0.0
        assert max(rewards) <= 1.0 + 1e-9
    assert score(FORMAT_ONLY, "format").reward == 1.0
    assert score(COMPILED, "compile").reward > score(FORMAT_ONLY, "compile").reward > 0.0
    assert score(CORRECT, "correctness").reward > score(COMPILED, "correctness").reward
    assert score(FAST, "speed").reward > score(CORRECT, "speed").reward > score(COMPILED, "speed").reward


def test_kernrl_curve() -> None:
    # kernrl as its blog announces it: 0.1 compile + 0.3 correct + 0.3 faster + 0.6 by log2(speedup)/log2(cap)
    assert score(FORMAT_ONLY, "kernrl").reward == 0.0
    assert score(COMPILED, "kernrl").reward == pytest.approx(0.1)
    assert score(CORRECT, "kernrl").reward == pytest.approx(0.4)  # 1.0x is not faster
    # 4x with the cap at 16x: log2(4)/log2(16) = 0.5 of the 0.6; the faster bonus is whole from 2x on
    assert score(FAST, "kernrl", speedup_cap=16.0).reward == pytest.approx(0.1 + 0.3 + 0.3 + 0.3)
    # the faster bonus ramps in along log2(speedup) from 1x to 2x: half of it at sqrt(2)x, none below 1x
    at_root2 = result(format_ok=True, compiled=True, correct=True, speedup=2 ** 0.5)
    assert score(at_root2, "kernrl").components["faster"] == pytest.approx(0.15)
    # below 1x a slow kernel gives back up to 0.15, all of it at 1/cap and slower
    slow = result(format_ok=True, compiled=True, correct=True, speedup=0.125)
    assert score(slow, "kernrl").reward == pytest.approx(0.4 - 0.15)
    assert score(result(format_ok=True, compiled=True, correct=True, speedup=1000.0,
                        flags=[Flag.EXCESSIVE_SPEEDUP.value, Flag.REVERIFIED.value]), "kernrl").reward == pytest.approx(1.3)  # the cap bounds it


def test_kernrl_server_curve() -> None:
    # kernrl's server: -0.5 not compiled, -0.25 wrong, (s - 1) * 0.5 below 1x, min(s - 1, 2) above, 0 untimed.
    def right(speedup):
        return result(format_ok=True, compiled=True, correct=True, speedup=speedup)

    assert score(result(), "kernrl_server").reward == pytest.approx(-0.5)  # no code at all
    assert score(FORMAT_ONLY, "kernrl_server").reward == pytest.approx(-0.5)
    assert score(COMPILED, "kernrl_server").reward == pytest.approx(-0.25)
    assert score(right(0.8), "kernrl_server").reward == pytest.approx(-0.1)
    assert score(right(1.0), "kernrl_server").reward == pytest.approx(0.0)
    assert score(right(1.5), "kernrl_server").reward == pytest.approx(0.5)
    assert score(right(3.0), "kernrl_server").reward == pytest.approx(2.0)
    assert score(right(40.0), "kernrl_server").reward == pytest.approx(2.0)  # capped
    assert score(right(None), "kernrl_server").reward == pytest.approx(0.0)  # the CPU times nothing
    # Our rules hold over kernrl's: an unverified excessive speedup earns nothing and counts as not correct; a hack
    # earns the floor (-0.5, never more than an honest failure); an infrastructure failure is no score at all.
    unverified = result(format_ok=True, compiled=True, correct=True, speedup=50.0, flags=[Flag.EXCESSIVE_SPEEDUP.value])
    assert score(unverified, "kernrl_server").reward == pytest.approx(-0.25)
    assert score(result(compiled=True, flags=[Flag.HACK.value]), "kernrl_server").reward == pytest.approx(-0.5)
    assert score(result(error_category=ErrorCategory.INFRA), "kernrl_server").reward is None


def test_speed_term_is_bounded() -> None:
    assert bounded_log_speedup(1.0, 8.0) == 0.0
    assert bounded_log_speedup(0.5, 8.0) == 0.0
    assert bounded_log_slowdown(0.5, 8.0) == pytest.approx(1 / 3) and bounded_log_slowdown(2.0, 8.0) == 0.0
    assert bounded_log_slowdown(0.01, 8.0) == 1.0
    assert bounded_log_speedup(2.0, 8.0) == pytest.approx(1 / 3)
    assert bounded_log_speedup(64.0, 8.0) == 1.0
    reverified = [Flag.EXCESSIVE_SPEEDUP.value, Flag.REVERIFIED.value]
    huge = score(result(format_ok=True, compiled=True, correct=True, speedup=1e6, flags=reverified), "speed")
    capped = score(result(format_ok=True, compiled=True, correct=True, speedup=8.0), "speed")
    assert huge.reward == pytest.approx(capped.reward) == pytest.approx(1.0)


def test_hacks_earn_the_floor_everywhere() -> None:
    flagged = result(format_ok=True, compiled=True, correct=True, speedup=3.0, flags=[Flag.HACK.value])
    for preset in PRESETS:
        s = score(flagged, preset)
        assert s.reward == reward_floor(preset) == score(result(), preset).reward and s.hack
        assert s.reward == (-0.5 if preset == "kernrl_server" else 0.0)


def test_static_hack_rule_earns_zero() -> None:
    from kernelbench_rl.evaluation.static_policy import HACK_RULES

    rules = sorted(HACK_RULES)
    assert rules
    hacked = result(format_ok=True, compiled=True, correct=True, speedup=2.0,
                    static=StaticReport(errors=[f"{rules[0]}: caught"]), error_category=ErrorCategory.STATIC)
    assert score(hacked, "speed").reward == 0.0


def test_unverified_excessive_speedup_earns_no_correctness_or_speed() -> None:
    flagged = result(format_ok=True, compiled=True, correct=True, speedup=50.0,
                     flags=[Flag.EXCESSIVE_SPEEDUP.value, Flag.NEEDS_REVERIFICATION.value])
    for preset in ("correctness", "speed", "kernrl"):
        s = score(flagged, preset)
        assert s.components["correct"] == 0.0 and s.components["speed"] == 0.0 and s.components["faster"] == 0.0
        assert s.components["slowdown"] == 0.0
        assert s.reward == pytest.approx(score(COMPILED, preset).reward)


def test_cpu_results_earn_correctness_but_no_speed() -> None:
    cpu = result(format_ok=True, compiled=True, correct=True, speedup=None, device_kind="cpu",
                 flags=[Flag.NO_SPEEDUP_ON_CPU.value])
    s = score(cpu, "speed")
    assert s.components["correct"] > 0 and s.components["speed"] == 0.0


def test_infra_errors_are_not_scores() -> None:
    s = score(result(error_category=ErrorCategory.INFRA, error_message="worker lost"), "correctness")
    assert s.reward is None and s.infra


def test_discounted_returns_gamma() -> None:
    assert discounted_returns([1.0, 0.0, 2.0], 0.4) == pytest.approx([1.0 + 0.16 * 2.0, 0.8, 2.0])
    assert discounted_returns([0.3, 0.5], 0.0) == [0.3, 0.5]
    assert discounted_returns([], 0.4) == []


def test_leave_one_out_and_group_mean_baselines() -> None:
    returns = [1.0, 0.0, 0.0, 0.0]
    loo = group_advantages(returns, "loo")
    assert loo[0] == pytest.approx(1.0) and loo[1] == pytest.approx(-1 / 3)
    mean = group_advantages(returns, "group_mean")
    assert mean == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert math.isclose(sum(mean), 0.0, abs_tol=1e-12)
    assert group_advantages([0.7], "loo") == [0.0]
    assert is_constant([0.2, 0.2, 0.2]) and not is_constant([0.2, 0.3])
    with pytest.raises(ValueError):
        group_advantages(returns, "median")


def test_counts_as_correct_is_one_definition_for_metrics_and_reports() -> None:
    from kernelbench_rl.evaluation.result import EvalResult, Flag
    from kernelbench_rl.rewards import counts_as_correct

    def result(correct: bool, flags: list[str]) -> EvalResult:
        return EvalResult("L1/19", "sha", "triton", "fp32", "cuda", correct=correct, compiled=True, flags=flags,
                          speedup=40.0)

    assert counts_as_correct(result(True, []))
    assert not counts_as_correct(result(False, []))
    assert not counts_as_correct(result(True, [Flag.HACK.value]))
    assert not counts_as_correct(result(True, [Flag.EXCESSIVE_SPEEDUP.value]))  # unverified: not yet trusted
    assert counts_as_correct(result(True, [Flag.EXCESSIVE_SPEEDUP.value, Flag.REVERIFIED.value]))
