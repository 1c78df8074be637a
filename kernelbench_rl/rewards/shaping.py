"""Reward shaping: one weighted formula, the stages and the kernrl curve are its presets.

A preset is data (`RewardPreset`), not a code path: the stage presets of the curriculum
(format -> compile -> correctness -> speed) and the kernrl curve differ only in their weights.

Rules that hold for every preset:
- a detected hack (EvalResult.is_hack, or a static error from a rule in HACK_RULES) earns 0;
- an unverified excessive speedup earns nothing for correctness or speed;
- the speed term is bounded: log2(speedup) / log2(cap), clipped to [0, 1];
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
    + w_faster*[counted speedup > 1] + w_speed*bounded_log_speedup (the last two only when correct)."""

    name: str
    format: float = 0.0
    compile: float = 0.0
    correct: float = 0.0
    faster: float = 0.0
    speed: float = 0.0


PRESETS: dict[str, RewardPreset] = {
    "format": RewardPreset("format", format=1.0),
    "compile": RewardPreset("compile", format=0.1, compile=0.9),
    "correctness": RewardPreset("correctness", format=0.05, compile=0.15, correct=0.8),
    "speed": RewardPreset("speed", format=0.05, compile=0.05, correct=0.3, speed=0.6),
    # kernrl (OpenEnv's blog): 0.1 compile + 0.3 correct + 0.3 faster than the baseline + up to 0.6 more
    # from log2(speedup) (bounded: the full 0.6 at rewards.speedup_cap), 1.3 at most
    "kernrl": RewardPreset("kernrl", compile=0.1, correct=0.3, faster=0.3, speed=0.6),
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
    return Score(reward=sum(components.values()), components=components, preset=spec.name)
