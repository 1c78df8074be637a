"""Rewards and GRPO credit at their edges: the speed term at zero speedup and a cap of 1, the default baseline,
constant groups at the tolerance, truncated turns under each policy, the speedup cap reaching the score, and
every sample carrying its problem. (The main cases are in tests/test_rewards.py and tests/test_training.py.)"""

from __future__ import annotations

import pytest

from kernelbench_rl.envs import EnvSpec
from kernelbench_rl.envs.kernel_env import EnvGroupBuilder
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
from kernelbench_rl.problems import get_problem
from kernelbench_rl.rewards.returns import group_advantages, is_constant
from kernelbench_rl.evaluation.result import Flag
from kernelbench_rl.rewards.shaping import PRESETS, RewardPreset, bounded_log_speedup, score
from kernelbench_rl.training import score_group
from kernelbench_rl.training.rollouts import GroupRollout

COMPILED = dict(error_category=ErrorCategory.MISMATCH, format_ok=True, compiled=True)
CORRECT = dict(error_category=ErrorCategory.OK, format_ok=True, compiled=True, correct=True, speedup=1.0)


def _verdict(**fields) -> EvalResult:
    return EvalResult(problem_id="L1/19", candidate_sha256="x", backend="triton", precision="fp32",
                      device_kind="cuda", **fields)


def _group(episodes: list[list[tuple[dict, str]]], problem: str = "L1/19") -> GroupRollout:
    """episodes[sample] = [(verdict fields, stop reason) per turn]."""
    builder = EnvGroupBuilder(get_problem(problem), len(episodes), EnvSpec(turns=len(episodes[0])))
    envs = builder()
    for env, turns in zip(envs, episodes):
        for fields, stop in turns:
            env.add_completion("p", [1, 2], "c", [3], [-0.5], stop)
            env.add_result(_verdict(**fields))
    return GroupRollout(0, builder, envs)


# -- rewards ------------------------------------------------------------------------------------------------------
def test_the_speed_term_at_no_speed_and_at_a_cap_of_one():
    assert bounded_log_speedup(0.0, 8.0) == 0.0  # no log of 0
    assert bounded_log_speedup(-1.0, 8.0) == 0.0
    assert bounded_log_speedup(2.0, 1.0) == 0.0  # no division by log2(1)
    assert bounded_log_speedup(2.0, 0.5) == 0.0
    assert bounded_log_speedup(8.0, 8.0) == 1.0 and bounded_log_speedup(2.0, 4.0) == pytest.approx(0.5)


def test_the_default_baseline_is_leave_one_out_and_an_unknown_one_is_named():
    returns = [1.0, 0.0, 0.5]
    assert group_advantages(returns) == group_advantages(returns, "loo") != group_advantages(returns, "group_mean")
    with pytest.raises(ValueError, match="unknown baseline 'rloo'"):
        group_advantages(returns, "rloo")


def test_constant_means_within_the_tolerance_and_nothing_is_constant():
    assert is_constant([]) and is_constant([0.7])
    assert is_constant([0.0, 0.5], tol=0.5)  # at the tolerance
    assert not is_constant([0.0, 0.5000001], tol=0.5)
    assert not is_constant([0.0, 1e-6])


def test_a_score_names_its_preset_and_its_parts():
    for preset in ("format", "correctness", "speed", "kernrl_server"):
        assert score(_verdict(**COMPILED), preset).preset == preset
        assert score(_verdict(error_category=ErrorCategory.INFRA), preset).preset == preset
        hack = score(_verdict(**CORRECT, flags=[Flag.HACK.value]), preset)
        assert hack.hack and hack.components == {"hack": 1.0} and hack.preset == preset
    assert set(score(_verdict(**CORRECT), "speed").components) == {"format", "compile", "correct", "faster", "speed",
                                                                   "slowdown"}
    assert set(score(_verdict(**CORRECT), "kernrl_server").components) >= {"not_compiled", "incorrect", "gain", "slow"}
    # A preset given as itself scores as its name does.
    assert score(_verdict(**CORRECT), PRESETS["speed"]) == score(_verdict(**CORRECT), "speed")


def test_kernrl_terms_apply_whichever_one_a_preset_sets():
    wrong = score(_verdict(**COMPILED), RewardPreset("only_incorrect", incorrect=-0.3))
    assert wrong.reward == pytest.approx(-0.3)
    missing = score(_verdict(error_category=ErrorCategory.COMPILE, format_ok=True), RewardPreset("only_nc", not_compiled=-0.4))
    assert missing.reward == pytest.approx(-0.4)
    fast = score(_verdict(**dict(CORRECT, speedup=2.5)), RewardPreset("only_gain", gain_cap=1.0))
    assert fast.reward == pytest.approx(1.0)
    slow = score(_verdict(**dict(CORRECT, speedup=0.5)), RewardPreset("only_slope", slow_slope=0.5))
    assert slow.reward == pytest.approx(-0.25)


def test_a_correct_kernel_whose_speedup_does_not_count_earns_no_speed():
    below = _verdict(**dict(CORRECT, speedup=4.0), flags=[Flag.BELOW_SPEED_OF_LIGHT.value])
    assert not below.speedup_counts
    assert score(below, "speed").components["speed"] == 0.0
    # Scored as the slowest honest correct kernel, below an untimed one (it once scored as an untimed 1x kernel,
    # above an honest correct kernel at 0.99x).
    assert score(below, "speed").doubt
    assert score(below, "speed").reward == score(_verdict(**dict(CORRECT, speedup=1e-6)), "speed").reward
    assert score(below, "speed").reward < score(_verdict(**dict(CORRECT, speedup=0.99)), "speed").reward


# -- GRPO credit --------------------------------------------------------------------------------------------------
def test_an_unknown_truncation_policy_is_named():
    with pytest.raises(ValueError, match="unknown truncation policy 'truncate'"):
        score_group(_group([[(CORRECT, "stop")]]), "correctness", gamma=0.4, baseline="loo", speedup_cap=8.0,
                    truncated="truncate")


def test_the_reward_policy_scores_a_cut_turn_by_its_flat_reward_and_keeps_it_scored():
    group = _group([[(CORRECT, "length")], [(CORRECT, "stop")], [(dict(error_category=ErrorCategory.INFRA), "length")]])
    default = score_group(group, "correctness", gamma=0.4, baseline="loo", speedup_cap=8.0, truncated="reward")
    assert [s.reward for s in default] == [0.0, 1.0, None]  # the default flat reward; a lost turn stays no score
    flat = score_group(group, "correctness", gamma=0.4, baseline="loo", speedup_cap=8.0, truncated="reward",
                       truncated_reward=-0.25)
    assert [s.reward for s in flat] == [-0.25, 1.0, None]
    assert flat[0].trainable and flat[0].advantage == pytest.approx(-1.25)


def test_the_speedup_cap_reaches_the_score():
    fast = dict(CORRECT, speedup=4.0)
    group = _group([[(fast, "stop")], [(COMPILED, "stop")]])
    for cap in (2.0, 16.0):
        samples = score_group(group, "speed", gamma=0.4, baseline="loo", speedup_cap=cap)
        assert samples[0].reward == pytest.approx(score(_verdict(**fast), "speed", speedup_cap=cap).reward)
    assert score(_verdict(**fast), "speed", speedup_cap=2.0).reward != score(_verdict(**fast), "speed",
                                                                           speedup_cap=16.0).reward


def test_every_sample_names_its_problem_and_level():
    samples = score_group(_group([[(CORRECT, "stop")], [(COMPILED, "stop")]], problem="L2/1"), "correctness",
                          gamma=0.4, baseline="loo", speedup_cap=8.0)
    assert {(s.problem_id, s.level) for s in samples} == {("L2/1", 2)}


def test_a_dropped_cut_turn_leaves_the_later_turns_of_its_episode_in_training():
    episodes = [[(COMPILED, "length"), (CORRECT, "stop")],  # turn 0 cut, turn 1 answered in full
                [(COMPILED, "stop"), (COMPILED, "stop")]]
    samples = score_group(_group(episodes), "correctness", gamma=0.4, baseline="loo", speedup_cap=8.0,
                          truncated="drop")
    by = {(s.sample_index, s.turn): s for s in samples}
    assert by[0, 0].dropped_truncated and not by[0, 0].trainable
    assert by[0, 1].trainable and by[1, 1].trainable
    assert by[0, 1].advantage == pytest.approx(by[0, 1].return_value - by[1, 1].return_value)


def test_a_constant_turn_leaves_the_later_turns_of_the_group_in_training():
    # gamma 0: each turn's return is its own reward, so turn 0 (both compiled) carries no signal and turn 1 does.
    episodes = [[(COMPILED, "stop"), (CORRECT, "stop")], [(COMPILED, "stop"), (COMPILED, "stop")]]
    samples = score_group(_group(episodes), "correctness", gamma=0.0, baseline="loo", speedup_cap=8.0)
    by = {(s.sample_index, s.turn): s for s in samples}
    assert by[0, 0].dropped_constant and by[1, 0].dropped_constant
    assert by[0, 1].trainable and by[1, 1].trainable and by[0, 1].advantage > 0 > by[1, 1].advantage
