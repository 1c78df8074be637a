"""Deterministic train / holdout split: evaluation never trains on its own test set."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from kernelbench_rl.problems.model import Problem

# The problem whose solution is the prompts' one-shot example (ReLU): every prompt shows it, so it
# must never be held out, whatever the fraction or seed, or evaluation would see its own answer.
ONE_SHOT_PROBLEM_ID = "L1/19"


def _position(seed: int, problem_id: str) -> float:
    digest = hashlib.sha256(f"{seed}:{problem_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def holdout_ids(problems: Sequence[Problem], holdout_fraction: float = 0.2, seed: int = 0) -> set[str]:
    """Problem ids in the holdout set: those whose seeded hash falls below the fraction.

    Hash-based so that adding problems never moves an existing problem across the split. Per level,
    a level with at least two problems always holds at least one out (the lowest hash), so
    evaluation never lacks a level that training has.
    """
    if not 0.0 <= holdout_fraction < 1.0:
        raise ValueError("holdout_fraction must be in [0, 1)")
    chosen: set[str] = set()
    if holdout_fraction == 0.0:
        return chosen
    by_level: dict[int, list[Problem]] = {}
    for problem in problems:
        if problem.id != ONE_SHOT_PROBLEM_ID:
            by_level.setdefault(problem.level, []).append(problem)
    for level_problems in by_level.values():
        held = {p.id for p in level_problems if _position(seed, p.id) < holdout_fraction}
        if not held and len(level_problems) >= 2:
            held = {min(level_problems, key=lambda p: _position(seed, p.id)).id}
        chosen |= held
    return chosen


def split_problems(
    problems: Sequence[Problem], holdout_fraction: float = 0.2, seed: int = 0
) -> tuple[list[Problem], list[Problem]]:
    held = holdout_ids(problems, holdout_fraction, seed)
    return [p for p in problems if p.id not in held], [p for p in problems if p.id in held]
