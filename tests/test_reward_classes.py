"""Red-team classes 3 and 4 on synthetic verdicts, independent of the evaluator (tests/hacks/README.md, "Classes"):

3. Paid under doubt: a verdict carrying a flag of doubt (`low_kernel_share`, `clock_disagrees`,
   `below_speed_of_light`) earns no more than the slowest honest correct kernel, under every reward preset, whatever
   speedup, device and other flags it carries; foreign work (a doubt flag with `hack`) earns the hack floor.
4. Abstaining pays: a verdict of `unsupported` (what the CPU interpreter lacks) scores under every preset, and no more
   than a plain wrong answer of the same problem.

A property over the product preset x flag x speedup x device x companion flags x speedup cap, stated from the rule
and not from `score`'s code, so a preset or flag added later is held to it too.
"""

from __future__ import annotations

import itertools

import pytest

from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult, Flag
from kernelbench_rl.rewards import PRESETS, reward_floor, score

DOUBT = (Flag.LOW_KERNEL_SHARE.value, Flag.CLOCK_DISAGREES.value, Flag.BELOW_SPEED_OF_LIGHT.value)
SPEEDUPS = (None, 1e-4, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0, 1.05, 1.5, 2.0, 5.0, 9.9, 10.0, 50.0, 1e4)
# What a doubtful verdict may carry besides its flag of doubt (none of them may lift it).
COMPANIONS = ((), (Flag.REVERIFIED.value,), (Flag.EXCESSIVE_SPEEDUP.value, Flag.REVERIFIED.value),
              (Flag.NO_SPEEDUP_ON_CPU.value,), (Flag.NEEDS_REVERIFICATION.value,))
CAPS = (2.0, 8.0, 32.0)
DEVICES = ("cpu", "cuda")
EPS = 1e-9


def verdict(device: str = "cuda", **kw) -> EvalResult:
    base = dict(problem_id="L1/19", candidate_sha256="c" * 64, backend="triton", precision="fp32", device_kind=device,
                format_ok=True, compiled=True)
    base.update(kw)
    return EvalResult(**base)


def honest(speedup: float | None, device: str = "cuda") -> EvalResult:
    return verdict(device, correct=True, trials_passed=3, trials_total=3, speedup=speedup,
                   runtime_ms=None if speedup is None else 1.0 / speedup, error_category=ErrorCategory.OK)


def slowest_honest(preset: str, cap: float) -> float:
    """The least any honest correct kernel earns: the minimum over speedups down to 1e-6x and the untimed verdict."""
    rewards = [score(honest(s, d), preset, speedup_cap=cap).reward for s in (*SPEEDUPS, 1e-6) for d in DEVICES]
    assert all(r is not None for r in rewards)
    return min(rewards)


def plain_wrong(device: str = "cuda") -> EvalResult:
    return verdict(device, correct=False, trials_passed=0, trials_total=3, max_abs_err=1.0,
                   error_category=ErrorCategory.MISMATCH)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_a_doubtful_verdict_earns_no_more_than_the_slowest_honest_kernel(preset: str) -> None:
    broken = []
    for cap in CAPS:
        ceiling = slowest_honest(preset, cap)
        for flag, speedup, device, companions in itertools.product(DOUBT, SPEEDUPS, DEVICES, COMPANIONS):
            result = honest(speedup, device)
            result.flags = [*companions, flag]
            reward = score(result, preset, speedup_cap=cap).reward
            if reward is None or reward > ceiling + EPS:
                broken.append(f"{flag} {speedup}x on {device} with {list(companions)}, cap {cap}: {reward} "
                              f"(slowest honest {ceiling:.4f})")
    assert not broken, f"{preset}: {len(broken)} doubtful verdicts paid more than the slowest honest kernel, e.g. " \
                       f"{broken[:4]}"


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_several_flags_of_doubt_together_earn_no_more(preset: str) -> None:
    ceiling = slowest_honest(preset, 8.0)
    for size in (2, 3):
        for flags, speedup in itertools.product(itertools.combinations(DOUBT, size), SPEEDUPS):
            result = honest(speedup)
            result.flags = list(flags)
            reward = score(result, preset).reward
            assert reward is not None and reward <= ceiling + EPS, (preset, flags, speedup, reward, ceiling)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_foreign_work_earns_the_hack_floor(preset: str) -> None:
    floor = reward_floor(preset)
    for flag, speedup, device, correct in itertools.product(DOUBT, SPEEDUPS, DEVICES, (True, False)):
        result = honest(speedup, device)
        result.correct = correct
        result.flags = [flag, Flag.HACK.value]
        reward = score(result, preset).reward
        assert reward == pytest.approx(floor), (preset, flag, speedup, device, correct, reward, floor)


def test_the_doubt_property_can_fail() -> None:
    """Guards the property itself: an honest fast kernel does earn more than the slowest honest one under a speed
    preset, so the ceiling is not vacuous."""
    speed = [p for p, spec in PRESETS.items() if spec.speed or spec.gain_cap]
    assert speed
    for preset in speed:
        assert score(honest(5.0), preset).reward > slowest_honest(preset, 8.0) + 0.05


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_abstaining_earns_no_more_than_a_wrong_answer(preset: str) -> None:
    broken = []
    for device, compiled, format_ok, speedup, flags in itertools.product(
            DEVICES, (True, False), (True, False), (None, 1.0, 3.0), ((), (Flag.NO_SPEEDUP_ON_CPU.value,))):
        wrong = score(plain_wrong(device), preset).reward
        abstained = verdict(device, format_ok=format_ok, compiled=compiled, correct=False, speedup=speedup,
                            flags=list(flags), error_category=ErrorCategory.UNSUPPORTED,
                            error_message="the CPU interpreter cannot run this kernel: libdevice.popc")
        reward = score(abstained, preset).reward
        if reward is None:
            broken.append(f"{device} compiled={compiled} format_ok={format_ok}: no score (left out of training)")
        elif wrong is not None and reward > wrong + EPS:
            broken.append(f"{device} compiled={compiled} format_ok={format_ok}: {reward} above a wrong answer's "
                          f"{wrong}")
    assert not broken, f"{preset}: {broken[:4]}"


def test_infrastructure_failures_stay_unscored() -> None:
    """The abstaining rule is about what the kernel chose: the evaluator's own failure is still no score at all."""
    for preset in PRESETS:
        assert score(verdict(error_category=ErrorCategory.INFRA, compiled=False), preset).reward is None
