"""Deterministic train / holdout split: evaluation never trains on its own test set."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from kernelbench_rl.problems.model import Problem

# The problem whose solution is the prompts' one-shot example (ReLU): every prompt shows it, so it
# must never be held out, whatever the fraction or seed, or evaluation would see its own answer.
ONE_SHOT_PROBLEM_ID = "L1/19"


def holdout_ids(problems: Sequence[Problem], holdout_fraction: float = 0.2, seed: int = 0) -> set[str]:
    """Problem ids in the holdout set, chosen per level by a seeded hash of the id.

    Hash-based so that adding problems never moves an existing problem across the split.
    """
    if not 0.0 <= holdout_fraction < 1.0:
        raise ValueError("holdout_fraction must be in [0, 1)")
    chosen: set[str] = set()
    for problem in problems:
        if problem.id == ONE_SHOT_PROBLEM_ID:
            continue
        digest = hashlib.sha256(f"{seed}:{problem.id}".encode()).digest()
        if int.from_bytes(digest[:8], "big") / 2**64 < holdout_fraction:
            chosen.add(problem.id)
    return chosen


def split_problems(
    problems: Sequence[Problem], holdout_fraction: float = 0.2, seed: int = 0
) -> tuple[list[Problem], list[Problem]]:
    held = holdout_ids(problems, holdout_fraction, seed)
    return [p for p in problems if p.id not in held], [p for p in problems if p.id in held]
