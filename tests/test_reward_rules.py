"""The rules every reward preset keeps, checked over all of them (rewards/shaping.py's docstring states them).

1. Giving up never pays: a flagged hack, and a truncated answer (whatever its verdict), never score above an
   honest wrong or non-compiling answer of the same problem, under the truncation policies that score it.
2. A correct kernel's reward never falls as its speedup rises; for presets that pay for speed it rises across
   1x (a slow correct kernel below a 1x one below a fast one), and timing noise on identical code (the
   [0.95, 1.05] band) can move it by a small share of its range only (8%), and it never jumps.
3. No pay under doubt: a correct verdict carrying any flag of doubt earns no more than the slowest honest correct
   kernel, whatever it was timed at; with `hack` too, the floor. Every flag is either one of doubt or named here
   as harmless, so a flag added later must take a side.
4. Abstaining gains nothing: `unsupported` scores as a wrong answer, never None (left out of training), never more.
"""

from __future__ import annotations

import math

import pytest

from kernelbench_rl.envs import EnvSpec
from kernelbench_rl.envs.kernel_env import EnvGroupBuilder
from kernelbench_rl.evaluation.result import DOUBT_FLAGS, ErrorCategory, EvalResult, Flag, StaticReport
from kernelbench_rl.problems import get_problem
from kernelbench_rl.rewards import PRESETS, reward_floor, score
from kernelbench_rl.training.grpo import score_group
from kernelbench_rl.training.rollouts import GroupRollout

SPEED_PRESETS = [name for name, spec in PRESETS.items() if spec.speed or spec.faster or spec.gain_cap]
BAND = (0.95, 1.05)  # identical code's speedups on the GPU (bench/RESULTS.md: 95% of KernelBench within it)
CAP = 8.0


def result(**kw) -> EvalResult:
    base = dict(problem_id="L1/19", candidate_sha256="x", backend="triton", precision="fp32", device_kind="cuda")
    base.update(kw)
    return EvalResult(**base)


NOTHING = result(error_category=ErrorCategory.FORMAT)
NO_COMPILE = result(format_ok=True, error_category=ErrorCategory.COMPILE)
WRONG = result(format_ok=True, compiled=True, error_category=ErrorCategory.MISMATCH)


def correct(speedup: float | None) -> EvalResult:
    return result(format_ok=True, compiled=True, correct=True, speedup=speedup, error_category=ErrorCategory.OK)


HONEST_FAILURES = {"nothing": NOTHING, "no_compile": NO_COMPILE, "wrong": WRONG}
HACKS = {
    "flagged": result(format_ok=True, compiled=True, correct=True, speedup=3.0, flags=[Flag.HACK.value]),
    "static": None,  # filled below from a real static hack rule
}


def _static_hack() -> EvalResult:
    from kernelbench_rl.evaluation.static_policy import HACK_RULES

    return result(format_ok=True, compiled=True, correct=True, speedup=2.0,
                  static=StaticReport(errors=[f"{sorted(HACK_RULES)[0]}: caught"]), error_category=ErrorCategory.STATIC)


def _truncated_rewards(preset: str, policy: str, truncated_reward: float | None = None) -> list[float]:
    """Score a group through the training path (score_group) where the first sample of each verdict was cut at
    max_tokens; returns the cut samples' rewards."""
    verdicts = [correct(8.0), correct(2.0), correct(1.0), correct(0.5), correct(None), WRONG, NO_COMPILE, NOTHING]
    builder = EnvGroupBuilder(get_problem("L1/19"), len(verdicts), EnvSpec())
    envs = builder()
    for env, verdict in zip(envs, verdicts, strict=True):
        env.add_completion("p", [1, 2, 3], "c", [4, 5], [-0.5, -0.25], "length")
        env.add_result(verdict)
    kwargs = {} if truncated_reward is None else {"truncated_reward": truncated_reward}
    samples = score_group(GroupRollout(0, builder, envs), preset, gamma=0.4, baseline="loo", speedup_cap=CAP,
                          truncated=policy, **kwargs)
    return [s.reward for s in samples]


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_a_hack_never_scores_above_an_honest_failure(preset: str) -> None:
    honest = min(score(r, preset, speedup_cap=CAP).reward for r in HONEST_FAILURES.values())
    for name, hack in {**HACKS, "static": _static_hack()}.items():
        scored = score(hack, preset, speedup_cap=CAP)
        assert scored.hack and scored.reward <= honest, (preset, name, scored.reward, honest)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_a_truncated_answer_never_scores_above_an_honest_failure(preset: str) -> None:
    from kernelbench_rl.config import load_config

    honest = min(score(r, preset, speedup_cap=CAP).reward for r in HONEST_FAILURES.values())
    default = load_config("default").rewards
    assert default.truncated == "clamp"  # the rule holds with the shipped setting
    rewards = _truncated_rewards(preset, "clamp")
    assert max(rewards) <= honest, (preset, rewards, honest)
    # graded, then clamped: a cut answer that was worse than the floor keeps its own grade (none here is)
    assert rewards == [min(score(r, preset, speedup_cap=CAP).reward, reward_floor(preset)) for r in
                       (correct(8.0), correct(2.0), correct(1.0), correct(0.5), correct(None), WRONG, NO_COMPILE,
                        NOTHING)]
    # rewards.truncated=reward: the config refuses a flat reward above the floor, and the floor itself is fine
    accepted = load_config("default", [f"rewards.preset={preset}", "rewards.truncated=reward",
                                       f"rewards.truncated_reward={reward_floor(preset)}"]).rewards
    assert max(_truncated_rewards(preset, "reward", accepted.truncated_reward)) <= honest


def test_the_config_refuses_a_flat_truncation_reward_above_the_floor() -> None:
    from kernelbench_rl.config import load_config
    from kernelbench_rl.errors import UserError

    with pytest.raises(UserError, match="truncated_reward .* more than an honest failure"):
        load_config("default", ["rewards.preset=kernrl_server", "rewards.truncated=reward"])
    with pytest.raises(UserError, match="truncated_reward"):
        load_config("default", ["rewards.truncated=reward", "rewards.truncated_reward=0.2"])


def _curve(preset: str, speedups: list[float]) -> list[float]:
    return [score(correct(s), preset, speedup_cap=CAP).reward for s in speedups]


GRID = [round(0.05 * 1.02 ** i, 6) for i in range(int(math.log(40 / 0.05) / math.log(1.02)))]


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_a_correct_kernel_never_loses_reward_by_being_faster(preset: str) -> None:
    rewards = _curve(preset, GRID)
    assert all(b >= a - 1e-12 for a, b in zip(rewards, rewards[1:])), preset


@pytest.mark.parametrize("preset", SPEED_PRESETS)
def test_speed_presets_rise_across_1x(preset: str) -> None:
    slow, half, one, just_faster, double = _curve(preset, [0.25, 0.5, 1.0, 1.01, 2.0])
    assert slow < half < one < just_faster < double, (preset, slow, half, one, just_faster, double)


@pytest.mark.parametrize("preset", SPEED_PRESETS)
def test_timing_noise_cannot_cross_a_step(preset: str) -> None:
    """Identical code lands anywhere in [0.95, 1.05]: across that band the reward moves by at most 8% of its
    whole range (1/cap to cap; kernrl's old step at 1x was 29% of it), and nowhere does it jump (a 0.1% change
    of speedup moves it by under 1% of the range)."""
    low, high = _curve(preset, [1 / CAP, CAP])
    a, b = _curve(preset, list(BAND))
    assert 0 < b - a <= 0.08 * (high - low), (preset, b - a, high - low)
    for s in GRID:
        a, b = _curve(preset, [s, s * 1.001])
        assert b - a <= 0.01 * (high - low), (preset, s, b - a)


@pytest.mark.parametrize("preset", ["speed", "kernrl"])
def test_a_slow_correct_kernel_still_beats_a_wrong_one(preset: str) -> None:
    """The credit a slow kernel gives back is bounded: being right is never worth less than being wrong."""
    assert score(correct(0.001), preset, speedup_cap=CAP).reward > score(WRONG, preset, speedup_cap=CAP).reward


def test_the_docs_table_is_the_commands_output() -> None:
    from pathlib import Path

    from kernelbench_rl.rewards.table import markdown

    assert markdown() in (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text()


# Flags that cast no doubt on a correct verdict's work or time: the excessive-speedup pair (its own rule: no
# correctness credit until the host clock confirms), the confirmation itself, hack (the floor) and the CPU's note.
HARMLESS_FLAGS = {Flag.EXCESSIVE_SPEEDUP.value, Flag.NEEDS_REVERIFICATION.value, Flag.REVERIFIED.value,
                  Flag.HACK.value, Flag.NO_SPEEDUP_ON_CPU.value}


def test_every_flag_takes_a_side():
    assert {flag.value for flag in Flag} == DOUBT_FLAGS | HARMLESS_FLAGS
    assert not DOUBT_FLAGS & HARMLESS_FLAGS


def _slowest_honest(preset: str, device: str) -> float:
    """The least an honest correct kernel earns: on a GPU the limit of ever slower ones, on the CPU (untimed) 1x."""
    if device == "cpu":
        return score(result(format_ok=True, compiled=True, correct=True, device_kind="cpu"), preset,
                     speedup_cap=CAP).reward
    return min(_curve(preset, [1e-9, 1e-6, 1 / CAP ** 2, 1 / CAP]))


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("flag", sorted(DOUBT_FLAGS))
def test_no_pay_under_doubt(preset: str, flag: str) -> None:
    for device in ("cuda", "cpu"):
        slowest = _slowest_honest(preset, device)
        for speedup in ([None] if device == "cpu" else [None, 0.3, 0.99, 1.0, 1.5, 3.0, 9.9, 40.0]):
            for extra in ([], [Flag.REVERIFIED.value, Flag.EXCESSIVE_SPEEDUP.value]):
                doubtful = result(format_ok=True, compiled=True, correct=True, speedup=speedup, device_kind=device,
                                  flags=[flag, *extra])
                scored = score(doubtful, preset, speedup_cap=CAP)
                assert scored.reward <= slowest + 1e-12, (preset, flag, device, speedup, extra, scored.reward, slowest)
                assert not doubtful.speedup_counts
            hacked = result(format_ok=True, compiled=True, correct=True, speedup=speedup, device_kind=device,
                            flags=[flag, Flag.HACK.value])
            assert score(hacked, preset, speedup_cap=CAP).reward == reward_floor(preset)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_abstaining_by_what_the_interpreter_lacks_earns_a_wrong_answers_reward(preset: str) -> None:
    for compiled in (False, True):
        abstained = result(format_ok=True, compiled=compiled, error_category=ErrorCategory.UNSUPPORTED)
        scored = score(abstained, preset, speedup_cap=CAP)
        assert scored.reward is not None and scored.abstained and not scored.infra
        assert scored.reward == score(WRONG, preset, speedup_cap=CAP).reward
    # Our own failures stay no score at all.
    for category in (ErrorCategory.INFRA, ErrorCategory.TOO_LARGE, ErrorCategory.UNDISCRIMINATING):
        assert score(result(format_ok=True, error_category=category), preset, speedup_cap=CAP).reward is None


def test_the_flag_table_in_the_docs_is_the_commands_output() -> None:
    from pathlib import Path

    from kernelbench_rl.rewards.table import flags_markdown

    assert flags_markdown() in (Path(__file__).resolve().parents[1] / "docs" / "evaluator.md").read_text()
