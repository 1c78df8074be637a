"""Record a problem set (with its train/holdout split) in the store."""

from __future__ import annotations

from collections.abc import Sequence

from kernelbench_rl.problems.model import Problem
from kernelbench_rl.problems.split import holdout_ids


def problem_rows(problems: Sequence[Problem], holdout_fraction: float = 0.2, seed: int = 0) -> list[dict]:
    held = holdout_ids(problems, holdout_fraction, seed)
    return [
        {
            "problem_id": p.id, "source_sha256": p.sha256, "level": p.level, "number": p.number,
            "name": p.name, "origin": p.origin, "suite": p.suite, "split": "holdout" if p.id in held else "train",
            "source": p.source,
        }
        for p in problems
    ]


def record_problems(store, problems: Sequence[Problem], holdout_fraction: float = 0.2, seed: int = 0) -> int:
    """Upsert the problems (idempotent on (problem_id, source_sha256)); returns the count."""
    return store.upsert("problems", problem_rows(problems, holdout_fraction, seed))
