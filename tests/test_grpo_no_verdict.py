"""A sample the evaluator gave no verdict on (infra: a worker lost; too_large: the reference past its budget)
is no score: in a single-turn group it is left out of the loss and out of the others' baseline, never trained
as a reward of 0.

The groups are chosen so that counting the sample as 0 changes what is trained: in one the scored samples
differ (a 0 would move every advantage), in the other they are equal (a 0 would turn a dropped group into a
trained one, the lost sample pushed down).
"""

from __future__ import annotations

import pytest

from kernelbench_rl.envs import EnvSpec
from kernelbench_rl.envs.kernel_env import EnvGroupBuilder
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
from kernelbench_rl.problems import get_problem
from kernelbench_rl.rewards.shaping import score
from kernelbench_rl.training import build_datums, score_group
from kernelbench_rl.training.metrics import step_metrics
from kernelbench_rl.training.rollouts import GroupRollout

COMPILED = dict(error_category=ErrorCategory.MISMATCH, format_ok=True, compiled=True)
CORRECT = dict(error_category=ErrorCategory.OK, format_ok=True, compiled=True, correct=True, speedup=1.0)
NO_VERDICT = (ErrorCategory.INFRA, ErrorCategory.TOO_LARGE)


def _verdict(**fields) -> EvalResult:
    return EvalResult(problem_id="L1/19", candidate_sha256="x", backend="triton", precision="fp32",
                      device_kind="cuda", **fields)


def _single_turn_group(verdicts: list[dict]) -> GroupRollout:
    builder = EnvGroupBuilder(get_problem("L1/19"), len(verdicts), EnvSpec(turns=1))
    envs = builder()
    for index, (env, fields) in enumerate(zip(envs, verdicts)):
        # Each completion its own tokens, so a datum shows which sample it came from.
        env.add_completion("p", [1, 2, 3], "c", [100 + index, 7], [-0.5, -0.25], "stop")
        env.add_result(_verdict(**fields))
    return GroupRollout(0, builder, envs)


def _trained_samples(datums) -> set[int]:
    return {int(d.loss_fn_inputs["target_tokens"].to_torch()[2]) - 100 for d in datums}


@pytest.mark.parametrize("baseline", ["loo", "group_mean"])
@pytest.mark.parametrize("category", NO_VERDICT, ids=lambda c: c.value)
def test_a_lost_sample_is_out_of_the_loss_and_the_baseline(category, baseline):
    lost = dict(error_category=category, error_message="worker lost")
    group = _single_turn_group([CORRECT, COMPILED, lost, CORRECT])
    samples = score_group(group, "correctness", gamma=0.4, baseline=baseline, speedup_cap=8.0)
    by = {s.sample_index: s for s in samples}
    correct, compiled = (score(_verdict(**v), "correctness").reward for v in (CORRECT, COMPILED))
    assert correct > compiled  # the scored samples differ: the group is trained

    assert by[2].reward is None and by[2].return_value is None
    assert not by[2].trainable and by[2].advantage == 0.0
    # The baseline of the three scored samples only.
    returns = {0: correct, 1: compiled, 3: correct}
    for index, mine in returns.items():
        others = [r for i, r in returns.items() if i != index]
        expected = mine - sum(others) / len(others) if baseline == "loo" else mine - sum(returns.values()) / 3
        assert by[index].advantage == pytest.approx(expected), (index, by[index].advantage, expected)
        assert by[index].trainable

    datums = build_datums(samples)
    assert _trained_samples(datums) == {0, 1, 3}
    metrics, _ = step_metrics([group], samples)
    assert metrics["num_infra_dropped"] == 1.0 and metrics["num_trained"] == 3.0
    assert metrics["reward_mean"] == pytest.approx((2 * correct + compiled) / 3)


@pytest.mark.parametrize("category", NO_VERDICT, ids=lambda c: c.value)
def test_a_lost_sample_beside_equal_scores_leaves_the_group_untrained(category):
    lost = dict(error_category=category, error_message="worker lost")
    for preset in ("format", "compile", "correctness", "speed", "kernrl_server"):
        group = _single_turn_group([CORRECT, lost, CORRECT])
        samples = score_group(group, preset, gamma=0.4, baseline="loo", speedup_cap=8.0)
        assert build_datums(samples) == [], preset  # two equal scores carry no signal; the lost one is none
        assert all(s.advantage == 0.0 and not s.trainable for s in samples), preset
        assert [s.dropped_constant for s in samples] == [True, False, True], preset


def test_a_group_of_lost_samples_trains_nothing():
    lost = dict(error_category=ErrorCategory.INFRA, error_message="worker lost")
    samples = score_group(_single_turn_group([lost, lost, lost]), "correctness", gamma=0.4, baseline="loo",
                          speedup_cap=8.0)
    assert [s.reward for s in samples] == [None, None, None]
    assert build_datums(samples) == []
