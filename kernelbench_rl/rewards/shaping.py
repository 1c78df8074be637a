"""Reward shaping: one weighted formula, the stages and kernrl's two curves are its presets.

A preset is data (`RewardPreset`), not a code path: the stage presets of the curriculum
(format -> compile -> correctness -> speed) and kernrl's curves differ only in their weights.

Rules that hold for every preset:
- a detected hack (EvalResult.is_hack, or a static error from a rule in HACK_RULES) earns 0;
- an unverified excessive speedup earns nothing for correctness or speed;
- the speed term is bounded: log2(speedup) / log2(cap), clipped to [0, 1]; the linear terms of kernrl's
  server curve are bounded by their own cap;
- an infrastructure failure is not a score at all: `Score.reward` is None and the sample is
  retried or left out of training (never a zero that would teach the model a wrong lesson).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult

STAGES: tuple[str, ...] = ("format", "compile", "correctness", "speed")


@dataclass(frozen=True)
class RewardPreset:
    """reward = w_format*format_ok + w_compile*compiled + w_correct*correct
    + w_faster*[counted speedup > 1] + w_speed*bounded_log_speedup (the last two only when correct)
    + not_compiled*[not compiled] + incorrect*[compiled, not correct]
    + min(counted speedup - 1, gain_cap) above 1x + slow_slope*(counted speedup - 1) below it (when correct)."""

    name: str
    format: float = 0.0
    compile: float = 0.0
    correct: float = 0.0
    faster: float = 0.0
    speed: float = 0.0
    # Penalties and the linear speed curve of kernrl's server (0: unused).
    not_compiled: float = 0.0
    incorrect: float = 0.0
    gain_cap: float = 0.0  # above 1x: min(speedup - 1, gain_cap)
    slow_slope: float = 0.0  # below 1x: slow_slope * (speedup - 1), a penalty


PRESETS: dict[str, RewardPreset] = {
    "format": RewardPreset("format", format=1.0),
    "compile": RewardPreset("compile", format=0.1, compile=0.9),
    "correctness": RewardPreset("correctness", format=0.05, compile=0.15, correct=0.8),
    "speed": RewardPreset("speed", format=0.05, compile=0.05, correct=0.3, speed=0.6),
    # kernrl as its blog announces it: +0.1 compiles, +0.3 correct, +0.3 faster than the baseline, up to +0.6 more
    # by log2(speedup) (ours bounds it: the full 0.6 at rewards.speedup_cap); 1.3 at most. (OpenEnv's pull request
    # text gives 0.3 for the last term; the blog, which users read, gives 0.6.)
    "kernrl": RewardPreset("kernrl", compile=0.1, correct=0.3, faster=0.3, speed=0.6),
    # kernrl's server as shipped (server/kernrl_environment.py): -0.5 when it does not compile, -0.25 when wrong,
    # and when right (speedup - 1) * 0.5 below 1x, min(speedup - 1, 2) above; 0 where nothing was timed (CPU).
    "kernrl_server": RewardPreset("kernrl_server", not_compiled=-0.5, incorrect=-0.25, gain_cap=2.0, slow_slope=0.5),
}

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


@dataclass
class Score:
    """One evaluated turn's reward. `reward is None` means an infra failure: not trainable."""

    reward: float | None
    components: dict[str, float] = field(default_factory=dict)
    hack: bool = False
    infra: bool = False
    preset: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def score(result: EvalResult, preset: str | RewardPreset, *, speedup_cap: float = 8.0) -> Score:
    spec = PRESETS[preset] if isinstance(preset, str) else preset
    if result.error_category.is_ours:  # infra or too_large: no verdict on the kernel, nothing to learn
        return Score(reward=None, infra=True, preset=spec.name)
    if is_hack(result):
        return Score(reward=0.0, components={"hack": 1.0}, hack=True, preset=spec.name)
    trusted = not result.unverified_speedup
    correct = bool(result.correct) and trusted
    counted_speedup = result.speedup if (correct and result.speedup_counts and result.speedup is not None) else None
    components = {
        "format": spec.format * float(bool(result.format_ok)),
        "compile": spec.compile * float(bool(result.compiled)),
        "correct": spec.correct * float(correct),
        "faster": spec.faster * float(counted_speedup is not None and counted_speedup > 1.0),
        "speed": spec.speed * (bounded_log_speedup(counted_speedup, speedup_cap) if counted_speedup else 0.0),
    }
    if spec.not_compiled or spec.incorrect or spec.gain_cap or spec.slow_slope:  # kernrl's server curve
        components.update({
            "not_compiled": spec.not_compiled * float(not result.compiled),
            "incorrect": spec.incorrect * float(bool(result.compiled) and not correct),
            "gain": min(counted_speedup - 1.0, spec.gain_cap) if counted_speedup and counted_speedup > 1.0 else 0.0,
            "slow": spec.slow_slope * (counted_speedup - 1.0) if counted_speedup and counted_speedup < 1.0 else 0.0,
        })
    return Score(reward=sum(components.values()), components=components, preset=spec.name)
