"""Reward shaping: one weighted formula, the stages and kernrl's two curves are its presets.

A preset is data (`RewardPreset`), not a code path: the stage presets of the curriculum
(format -> compile -> correctness -> speed) and kernrl's curves differ only in their weights.

Rules that hold for every preset (tests/test_reward_rules.py checks them over all of them):
- giving up never pays: a detected hack (EvalResult.is_hack, or a static error from a rule in
  HACK_RULES) earns the preset's floor, the reward of an answer with nothing right (`reward_floor()`: 0, or
  kernrl_server's -0.5), and a truncated answer is graded and then clamped to that floor
  (`clamp_truncated`, the cookbook's grade-then-clamp), so neither scores above an honest wrong or
  non-compiling answer of the same problem;
- an unverified excessive speedup earns nothing for correctness or speed;
- no pay under doubt: a correct verdict carrying a flag that says its work or its time cannot be trusted
  (EvalResult.in_doubt: DOUBT_FLAGS) is scored as the slowest honest correct kernel (a correct kernel at no speed
  at all, `DOUBT_SPEEDUP`), never as an untimed 1x one; with `hack` as well it earns the floor (above);
- abstaining never pays: a verdict the evaluator could not reach because of what the kernel used (`unsupported`:
  Triton's CPU interpreter lacks it) is scored as a wrong answer that compiled, never left out of training;
- a correct kernel's reward never falls as its speedup rises, and moves smoothly across 1x: the
  speed terms are functions of log2(speedup) bounded at `speedup_cap` (and at its inverse below 1x,
  where `slow` takes back part of the credit), and kernrl's "faster than the baseline" bonus ramps
  in from 1x to FASTER_FULL_AT instead of jumping, so timing noise on identical code (the
  [0.95, 1.05] band) moves a reward by a few hundredths, never by a step;
- an infrastructure failure (ours, decided by facts the worker holds) is not a score at all: `Score.reward` is None
  and the sample is retried or left out of training (never a zero that would teach the model a wrong lesson).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field

from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult

STAGES: tuple[str, ...] = ("format", "compile", "correctness", "speed")


@dataclass(frozen=True)
class RewardPreset:
    """reward = w_format*format_ok + w_compile*compiled + w_correct*correct
    + (when correct, s the counted speedup) w_faster*ramp(s) + w_speed*bounded_log_speedup(s) - w_slow*slowdown(s)
    + not_compiled*[not compiled] + incorrect*[compiled, not correct]
    + min(s - 1, gain_cap) above 1x + slow_slope*(s - 1) below it (kernrl's server curve, when correct).

    ramp(s) = log2(s) / log2(FASTER_FULL_AT) clipped to [0, 1]; slowdown(s) = log2(1/s) / log2(cap)
    clipped to [0, 1] (0 at and above 1x). An untimed correct kernel (the CPU) counts as 1x."""

    name: str
    format: float = 0.0
    compile: float = 0.0
    correct: float = 0.0
    faster: float = 0.0
    speed: float = 0.0
    slow: float = 0.0  # taken back from a correct kernel slower than 1x, in full at 1/speedup_cap and below
    # Penalties and the linear speed curve of kernrl's server (0: unused).
    not_compiled: float = 0.0
    incorrect: float = 0.0
    gain_cap: float = 0.0  # above 1x: min(speedup - 1, gain_cap)
    slow_slope: float = 0.0  # below 1x: slow_slope * (speedup - 1), a penalty
    # The speed term's cap is the problem's own headroom (the reference's time over its physical floor), within
    # [SOL_MIN_CAP, rewards.speedup_cap], with a dead zone of SOL_DEAD_ZONE above 1x; the shared curve where the
    # floor is missing or doubtful (speed_term below)
    floor_capped: bool = False


PRESETS: dict[str, RewardPreset] = {
    "format": RewardPreset("format", format=1.0),
    "compile": RewardPreset("compile", format=0.1, compile=0.9),
    "correctness": RewardPreset("correctness", format=0.05, compile=0.15, correct=0.8),
    # A slow correct kernel keeps a gradient toward 1x (slow) and never falls to a wrong one's 0.1.
    "speed": RewardPreset("speed", format=0.05, compile=0.05, correct=0.3, speed=0.6, slow=0.15),
    # kernrl as its blog announces it: +0.1 compiles, +0.3 correct, +0.3 faster than the baseline, up to +0.6 more
    # by log2(speedup) (ours bounds it: the full 0.6 at rewards.speedup_cap); 1.3 at most. (OpenEnv's pull request
    # text gives 0.3 for the last term; the blog, which users read, gives 0.6.) Ours ramps the +0.3 in from 1x to
    # FASTER_FULL_AT (a step at 1x would turn timing noise into 0.3 of reward) and takes up to 0.15 back below 1x.
    "kernrl": RewardPreset("kernrl", compile=0.1, correct=0.3, faster=0.3, speed=0.6, slow=0.15),
    # kernrl's server as shipped (server/kernrl_environment.py): -0.5 when it does not compile, -0.25 when wrong,
    # and when right (speedup - 1) * 0.5 below 1x, min(speedup - 1, 2) above; 0 where nothing was timed (CPU).
    "kernrl_server": RewardPreset("kernrl_server", not_compiled=-0.5, incorrect=-0.25, gain_cap=2.0, slow_slope=0.5),
    # `speed`'s weights, with the speed term paid in full at the speedup the problem's floor allows: a reference
    # already near its floor (a copy at 80% of the bandwidth) leaves 1.25x to win, and 8x would never be reached.
    "speed_of_light": RewardPreset("speed_of_light", format=0.05, compile=0.05, correct=0.3, speed=0.6, slow=0.15,
                                   floor_capped=True),
}

# kernrl's "faster than the baseline" bonus is paid in full from this speedup on, along log2(speedup) from 1x.
FASTER_FULL_AT = 2.0

# The speedup a correct verdict in doubt is scored at: none at all, below every honest correct kernel's (each preset's
# speed terms are bounded below, so this is the slowest honest correct kernel's reward).
DOUBT_SPEEDUP = 0.0

# rewards.preset=speed_of_light: the speed term's cap is never under SOL_MIN_CAP (a headroom within timing noise
# would pay a whole speed term for noise), and speedups up to 1 + SOL_DEAD_ZONE earn no speed (identical code times
# 0.95-1.05x of itself).
SOL_MIN_CAP = 1.5
SOL_DEAD_ZONE = 0.05

# The stage whose rate the curriculum watches for each stage preset.
STAGE_RATE_METRIC: dict[str, str] = {
    "format": "format_rate",
    "compile": "compile_rate",
    "correctness": "correct_rate",
    "speed": "correct_rate",
}


def is_hack(result: EvalResult) -> bool:
    """Flagged by the evaluator, or rejected by a static rule that marks a reward hack."""
    from kernelbench_rl.evaluation import static_policy

    return result.is_hack or static_policy.is_hack(result.static)


def counts_as_correct(result: EvalResult) -> bool:
    """Correct in every metric and reward: right values, no hack, no unverified excessive speedup."""
    return bool(result.correct) and not is_hack(result) and not result.unverified_speedup


def bounded_log_speedup(speedup: float, cap: float) -> float:
    """log2(speedup) / log2(cap), clipped to [0, 1]: 1x earns 0, `cap`x and beyond earn 1."""
    if speedup <= 0 or cap <= 1:
        return 0.0
    return min(max(math.log2(speedup) / math.log2(cap), 0.0), 1.0)


def bounded_log_slowdown(speedup: float, cap: float) -> float:
    """log2(1 / speedup) / log2(cap), clipped to [0, 1]: 1x and faster give 0, 1/`cap`x and slower give 1."""
    if speedup <= 0:
        return 1.0
    return bounded_log_speedup(1.0 / speedup, cap)


def floor_headroom(result: EvalResult) -> float | None:
    """How many times faster than the reference the problem's physical floor lets a kernel be: the reference's time
    over the floor (1 / its speed-of-light fraction). None where there is no floor (the CPU, a problem whose work
    could not be counted) or it is doubtful: the reference timed at or under its own floor."""
    fraction = (result.speed_of_light or {}).get("reference_sol_fraction")
    if fraction is None or not math.isfinite(fraction) or fraction <= 0 or fraction >= 1:
        return None
    return 1.0 / fraction


def speed_term(speedup: float, result: EvalResult, spec: RewardPreset, speedup_cap: float) -> float:
    """The speed term's share (0 to 1) of a counted speedup: bounded_log_speedup up to `speedup_cap`; for a
    floor-capped preset, up to the problem's headroom (within [SOL_MIN_CAP, speedup_cap]) from 1 + SOL_DEAD_ZONE on,
    where the problem has a floor that is not in doubt (floor_headroom), and the shared curve elsewhere."""
    headroom = floor_headroom(result) if spec.floor_capped else None
    if headroom is None:
        return bounded_log_speedup(speedup, speedup_cap)
    cap = min(max(headroom, SOL_MIN_CAP), speedup_cap)
    start = 1.0 + SOL_DEAD_ZONE
    return bounded_log_speedup(speedup / start, cap / start)


def reward_floor(preset: str | RewardPreset) -> float:
    """The preset's reward for an answer with nothing right (no code, nothing compiled): what a hack earns
    and what a truncated answer is clamped to. 0 for every preset but kernrl_server's -0.5."""
    spec = PRESETS[preset] if isinstance(preset, str) else preset
    return min(spec.not_compiled, 0.0)


def clamp_truncated(reward: float | None, preset: str | RewardPreset) -> float | None:
    """Grade-then-clamp (tinker-cookbook's rule for a turn stopped at its token limit, with the preset's floor
    for the cookbook's 0): a truncated answer keeps its verdict when that is worse, never more than the floor."""
    return None if reward is None else min(reward, reward_floor(preset))


@dataclass
class Score:
    """One evaluated turn's reward. `reward is None` means an infra failure: not trainable."""

    reward: float | None
    components: dict[str, float] = field(default_factory=dict)
    hack: bool = False
    infra: bool = False
    preset: str = ""
    doubt: bool = False  # correct, but a flag says its work or time cannot be trusted: scored at DOUBT_SPEEDUP
    abstained: bool = False  # `unsupported`: scored as a wrong answer that compiled

    def to_dict(self) -> dict:
        return asdict(self)


def score(result: EvalResult, preset: str | RewardPreset, *, speedup_cap: float = 8.0) -> Score:
    spec = PRESETS[preset] if isinstance(preset, str) else preset
    if result.error_category == ErrorCategory.UNSUPPORTED:
        # No verdict is ours to give, but the kernel chose what the evaluator cannot run: abstaining must not pay
        # more than being wrong (a wrong kernel that calls what the interpreter lacks would otherwise leave training).
        wrong = dataclasses.replace(result, format_ok=True, compiled=True, correct=False, speedup=None, flags=[],
                                    error_category=ErrorCategory.MISMATCH)
        scored = score(wrong, spec, speedup_cap=speedup_cap)
        return dataclasses.replace(scored, abstained=True, components={**scored.components, "abstained": 0.0})
    if result.error_category.is_ours:  # infra or too_large: no verdict on the kernel, nothing to learn
        return Score(reward=None, infra=True, preset=spec.name)
    if is_hack(result):
        return Score(reward=reward_floor(spec), components={"hack": 1.0}, hack=True, preset=spec.name)
    trusted = not result.unverified_speedup
    correct = bool(result.correct) and trusted
    doubt = correct and result.in_doubt
    if doubt:
        counted_speedup: float | None = DOUBT_SPEEDUP
    else:
        counted_speedup = result.speedup if (correct and result.speedup_counts and result.speedup is not None) else None
    components = {
        "format": spec.format * float(bool(result.format_ok)),
        "compile": spec.compile * float(bool(result.compiled)),
        "correct": spec.correct * float(correct),
        "faster": spec.faster * (bounded_log_speedup(counted_speedup, FASTER_FULL_AT) if counted_speedup else 0.0),
        "speed": spec.speed * (speed_term(counted_speedup, result, spec, speedup_cap) if counted_speedup else 0.0),
        "slowdown": -spec.slow * (bounded_log_slowdown(counted_speedup, speedup_cap)
                                  if counted_speedup is not None else 0.0),
    }
    if spec.not_compiled or spec.incorrect or spec.gain_cap or spec.slow_slope:  # kernrl's server curve
        components.update({
            "not_compiled": spec.not_compiled * float(not result.compiled),
            "incorrect": spec.incorrect * float(bool(result.compiled) and not correct),
            "gain": min(counted_speedup - 1.0, spec.gain_cap) if counted_speedup and counted_speedup > 1.0 else 0.0,
            "slow": (spec.slow_slope * (counted_speedup - 1.0)
                     if counted_speedup is not None and counted_speedup < 1.0 else 0.0),
        })
    if doubt:
        components["doubt"] = 0.0
    return Score(reward=sum(components.values()), components=components, preset=spec.name, doubt=doubt)
