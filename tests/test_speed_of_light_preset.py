"""`rewards.preset=speed_of_light`: the speed term paid in full at the speedup the problem's floor allows.

Its speed term's cap is the headroom the floor leaves over the reference (1 / reference_sol_fraction), kept within
[SOL_MIN_CAP, rewards.speedup_cap], with no speed paid up to 1 + SOL_DEAD_ZONE; where the floor is missing or
doubtful it is `speed`'s curve exactly. Checked as properties over headrooms and speedups, not as single values.
"""

from __future__ import annotations

import itertools
import math

import pytest

from kernelbench_rl.config import load_config
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult, Flag
from kernelbench_rl.rewards import PRESETS, score
from kernelbench_rl.rewards.shaping import SOL_DEAD_ZONE, SOL_MIN_CAP, floor_headroom

CAP = 8.0
HEADROOMS = (1.02, 1.2, 1.5, 1.9, 2.0, 3.7, 8.0, 12.0, 100.0)
SPEEDUPS = (0.3, 0.5, 0.9, 0.95, 1.0, 1.03, 1.05, 1.06, 1.2, 1.5, 1.9, 2.0, 3.0, 3.7, 5.0, 8.0, 12.0)


def verdict(speedup: float | None, headroom: float | None = None, *, fraction: float | None = None,
            flags: list[str] | None = None) -> EvalResult:
    if headroom is not None:
        fraction = 1.0 / headroom
    figures = None if fraction is None else {"reference_sol_fraction": fraction, "floor_ms": 0.1}
    return EvalResult(problem_id="L1/19", candidate_sha256="x", backend="triton", precision="fp32", device_kind="cuda",
                      format_ok=True, compiled=True, correct=True, speedup=speedup, flags=flags or [],
                      error_category=ErrorCategory.OK, speed_of_light=figures)


def sol(result: EvalResult, cap: float = CAP) -> float:
    return score(result, "speed_of_light", speedup_cap=cap).reward


def speed(result: EvalResult, cap: float = CAP) -> float:
    return score(result, "speed", speedup_cap=cap).reward


def test_the_preset_is_speeds_weights_with_the_floor_cap_and_the_config_takes_it(tmp_path) -> None:
    floor, plain = PRESETS["speed_of_light"], PRESETS["speed"]
    assert floor.floor_capped and not plain.floor_capped
    assert (floor.format, floor.compile, floor.correct, floor.speed, floor.slow) == (
        plain.format, plain.compile, plain.correct, plain.speed, plain.slow)
    cfg = load_config("default", ["rewards.preset=speed_of_light", f"db_path={tmp_path / 'kb.duckdb'}"])
    assert cfg.rewards.preset == "speed_of_light"


@pytest.mark.parametrize("headroom", HEADROOMS)
def test_the_reward_never_falls_as_the_speedup_rises(headroom: float) -> None:
    rewards = [sol(verdict(s, headroom)) for s in SPEEDUPS]
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(rewards)), rewards


@pytest.mark.parametrize("headroom", HEADROOMS)
def test_the_full_speed_term_is_paid_at_the_capped_headroom_and_not_before(headroom: float) -> None:
    cap = min(max(headroom, SOL_MIN_CAP), CAP)
    assert sol(verdict(cap, headroom)) == pytest.approx(1.0)
    assert sol(verdict(cap * 1.5, headroom)) == pytest.approx(1.0)  # past the cap: saturated, never more
    assert sol(verdict(cap * 0.97, headroom)) < 1.0 - 1e-6


@pytest.mark.parametrize("headroom", HEADROOMS)
def test_no_speed_is_paid_inside_the_dead_zone(headroom: float) -> None:
    for s in (1.0, 1.01, 1.03, 1.0 + SOL_DEAD_ZONE):
        assert sol(verdict(s, headroom)) == pytest.approx(speed(verdict(1.0)))  # a correct kernel at 1x
    assert sol(verdict(1.0 + SOL_DEAD_ZONE + 0.02, headroom)) > speed(verdict(1.0))
    # Below 1x the same slowdown is taken back as under `speed`
    for s in (0.3, 0.5, 0.9, 0.95):
        assert sol(verdict(s, headroom)) == pytest.approx(speed(verdict(s)))


@pytest.mark.parametrize("fraction", [None, 1.0, 1.05, 0.0, -0.5, math.nan, math.inf])
def test_a_missing_or_doubtful_floor_falls_back_to_speeds_curve_exactly(fraction) -> None:
    assert floor_headroom(verdict(2.0, fraction=fraction)) is None
    for s in SPEEDUPS:
        assert sol(verdict(s, fraction=fraction)) == pytest.approx(speed(verdict(s, fraction=fraction)))


def test_the_headroom_is_the_references_time_over_the_floor() -> None:
    assert floor_headroom(verdict(1.0, fraction=0.25)) == pytest.approx(4.0)
    assert floor_headroom(verdict(1.0, fraction=0.999)) == pytest.approx(1 / 0.999)


@pytest.mark.parametrize("headroom", HEADROOMS)
@pytest.mark.parametrize("flag", [Flag.BELOW_SPEED_OF_LIGHT.value, Flag.LOW_KERNEL_SHARE.value])
def test_no_pay_under_doubt_whatever_the_headroom(headroom: float, flag: str) -> None:
    doubtful = sol(verdict(min(headroom, CAP), headroom, flags=[flag]))
    assert doubtful == pytest.approx(speed(verdict(2.0, flags=[flag])))
    assert doubtful <= min(sol(verdict(s, headroom)) for s in SPEEDUPS)
    assert sol(verdict(3.0, headroom, flags=[flag, Flag.HACK.value])) == 0.0


def test_a_lower_speedup_cap_bounds_the_headroom() -> None:
    assert sol(verdict(3.0, 20.0), cap=3.0) == pytest.approx(1.0)
    assert sol(verdict(2.9, 20.0), cap=3.0) < 1.0
