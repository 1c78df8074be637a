"""Multi-turn credit assignment: discounted returns and per-turn group baselines.

The cookbook gives every token of a trajectory one advantage and no discounting; Kevin-style
refinement needs each turn to be its own sample whose return is its own score plus the
discounted scores of the turns that follow it.
"""

from __future__ import annotations

from collections.abc import Sequence


def discounted_returns(rewards_T: Sequence[float], gamma: float) -> list[float]:
    """returns_T[t] = sum_{k >= t} gamma**(k - t) * rewards_T[k]."""
    returns_T = [0.0] * len(rewards_T)
    running = 0.0
    for t in range(len(rewards_T) - 1, -1, -1):
        running = rewards_T[t] + gamma * running
        returns_T[t] = running
    return returns_T


def group_advantages(returns_G: Sequence[float], baseline: str = "loo") -> list[float]:
    """Advantages of one group's returns (one turn index of one problem's group).

    `loo`: return minus the mean of the *other* samples (unbiased; RLOO / Dr. Kernel's per-turn
    baseline). `group_mean`: return minus the group mean (GRPO without std scaling). A group of
    one sample has no baseline and gets advantage 0.
    """
    n = len(returns_G)
    if n < 2:
        return [0.0] * n
    total = sum(returns_G)
    if baseline == "loo":
        return [r - (total - r) / (n - 1) for r in returns_G]
    if baseline == "group_mean":
        mean = total / n
        return [r - mean for r in returns_G]
    raise ValueError(f"unknown baseline {baseline!r}")


def is_constant(values: Sequence[float], tol: float = 1e-9) -> bool:
    return len(values) == 0 or max(values) - min(values) <= tol
