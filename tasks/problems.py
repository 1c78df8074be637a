"""Prefect tasks over problems: thin wrappers that call kernelbench_rl and record to the store."""

from __future__ import annotations

from prefect import task

from kernelbench_rl.problems import load_problems
from kernelbench_rl.problems.sync import record_problems
from kernelbench_rl.store import Store


@task(name="sync-problems")
def sync_problems(
    db_path: str, levels: list[int] | None = None, problems_root: str | None = None,
    holdout_fraction: float = 0.2, split_seed: int = 0,
) -> int:
    problems = load_problems(problems_root, levels=levels)
    return record_problems(Store(db_path), problems, holdout_fraction, split_seed)
