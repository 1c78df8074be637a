"""The `checkpoints` table read back: a checkpoint's row as a type and its readers (a run's newest, one by name, the
newest of every run), for checkpoint evaluation and the nightly evaluation's choice of runs.

    row = resolve_checkpoint(store, run_id, "latest")  # None for "base": the run's base model, no checkpoint
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kernelbench_rl.errors import UserError
from kernelbench_rl.store.db import Store

BASE = "base"  # no checkpoint: the run's base model
LATEST = ("", "latest")  # (and None): the run's newest checkpoint


@dataclass(frozen=True)
class CheckpointRow:
    """One saved checkpoint of a run: its name, its step and where its sampler weights are (a relative path is
    under the run's folder: `training.checkpoints.resolved_path`)."""

    run_id: str
    name: str
    step: int
    sampler_path: str | None


_COLUMNS = "run_id, name, step, sampler_path"


def _row(row: dict[str, Any]) -> CheckpointRow:
    return CheckpointRow(str(row["run_id"]), str(row["name"]), int(row["step"]), row["sampler_path"])


def latest(store: Store, run_id: str) -> CheckpointRow | None:
    """The run's checkpoint of the highest step, None where it has none."""
    rows = store.dicts(f"SELECT {_COLUMNS} FROM checkpoints WHERE run_id = ? ORDER BY step DESC LIMIT 1", [run_id])
    return _row(rows[0]) if rows else None


def named(store: Store, run_id: str, name: str) -> CheckpointRow | None:
    """The run's checkpoint called `name`, None where it has none of that name."""
    rows = store.dicts(f"SELECT {_COLUMNS} FROM checkpoints WHERE run_id = ? AND name = ?", [run_id, name])
    return _row(rows[0]) if rows else None


def resolve_checkpoint(store: Store, run_id: str, checkpoint: str | None) -> CheckpointRow | None:
    """None/""/"latest": the run's newest checkpoint; "base": None (the base model); else the one of that name. A run
    without it is a UserError that says what to do."""
    if checkpoint == BASE:
        return None
    if checkpoint is None or checkpoint in LATEST:
        found = latest(store, run_id)
        if found is None:
            raise UserError(f"Run {run_id!r} has no checkpoint yet; train it first or evaluate checkpoint='base'.")
        return found
    found = named(store, run_id, checkpoint)
    if found is None:
        raise UserError(f"Run {run_id!r} has no checkpoint named {checkpoint!r}; "
                        "`kernelbench-rl sql \"SELECT * FROM checkpoints\"` lists them.")
    return found


def newest_per_run(store: Store) -> list[tuple[CheckpointRow, dict[str, Any]]]:
    """(newest checkpoint, the run's stored configuration) of every run that has a checkpoint, the run whose newest
    checkpoint is the most recent first; empty where the file or its checkpoints table does not exist yet (nothing
    is created)."""
    if not store.exists() or "checkpoints" not in {r[0] for r in store.fetchall(
            "SELECT table_name FROM information_schema.tables", read_only=True)}:
        return []
    rows = store.dicts(
        "SELECT c.run_id, c.name, c.step, c.sampler_path, c.created_at, r.config_json FROM checkpoints c "
        "JOIN runs r USING (run_id) "
        "QUALIFY row_number() OVER (PARTITION BY c.run_id ORDER BY c.step DESC, c.created_at DESC) = 1 "
        "ORDER BY c.created_at DESC", read_only=True)
    return [(_row(row), json.loads(row["config_json"] or "{}")) for row in rows]
