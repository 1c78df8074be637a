"""Reward shaping, stage presets, discounted returns and advantages."""

from kernelbench_rl.rewards.returns import discounted_returns, group_advantages, is_constant
from kernelbench_rl.rewards.shaping import (
    PRESETS,
    STAGE_RATE_METRIC,
    STAGES,
    RewardPreset,
    Score,
    bounded_log_slowdown,
    bounded_log_speedup,
    clamp_truncated,
    counts_as_correct,
    is_hack,
    reward_floor,
    score,
)

__all__ = [
    "PRESETS", "STAGES", "STAGE_RATE_METRIC", "RewardPreset", "Score", "bounded_log_slowdown", "bounded_log_speedup",
    "clamp_truncated", "counts_as_correct", "discounted_returns", "group_advantages", "is_constant", "is_hack", "reward_floor", "score",
]
