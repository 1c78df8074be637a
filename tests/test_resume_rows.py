"""What a resumed run removes before it redoes steps: the rows of its own steps after the checkpoint, in every
step table, and nothing else (not its earlier steps, not another run's rows), with a count per table.

The training loop's resume goes through this (tests/test_rl_resume.py drives the whole loop); here the store's
part is checked on its own, on a real DuckDB file.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from kernelbench_rl.store import Store
from kernelbench_rl.store.db import RUN_STEP_TABLES, StoreSchemaError


def _steps(store: Store, table: str, run_id: str) -> list[int]:
    return [r[0] for r in store.fetchall(f"SELECT step FROM {table} WHERE run_id = ? ORDER BY step", [run_id])]


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "kb.duckdb")
    for run_id in ("killed", "other"):
        store.upsert("train_steps", [{"run_id": run_id, "step": s, "stage": "format"} for s in range(5)])
        store.upsert("checkpoints", [{"run_id": run_id, "name": f"step{s}", "step": s} for s in (2, 4)])
        store.upsert("curriculum_events", [{"run_id": run_id, "step": 4, "kind": "stage", "from_value": "format",
                                            "to_value": "compile"}])
    return store


def test_rows_after_the_checkpoint_go_and_the_rest_stay(store: Store) -> None:
    deleted = store.discard_steps_after("killed", 2)
    assert deleted == {"train_steps": 2, "rollouts": 0, "rewards": 0, "curriculum_events": 1, "checkpoints": 1}
    assert _steps(store, "train_steps", "killed") == [0, 1, 2]  # the checkpoint's own step stays
    assert _steps(store, "checkpoints", "killed") == [2]
    assert _steps(store, "curriculum_events", "killed") == []
    # Another run's rows of the same steps are not touched.
    assert _steps(store, "train_steps", "other") == [0, 1, 2, 3, 4]
    assert _steps(store, "checkpoints", "other") == [2, 4]
    assert _steps(store, "curriculum_events", "other") == [4]
    # Nothing left to remove: a second call deletes nothing and says so.
    assert store.discard_steps_after("killed", 2) == {table: 0 for table in RUN_STEP_TABLES}


def test_a_run_without_a_checkpoint_starts_over(store: Store) -> None:
    deleted = store.discard_steps_after("killed", -1)
    assert deleted["train_steps"] == 5 and deleted["checkpoints"] == 2 and deleted["curriculum_events"] == 1
    for table in ("train_steps", "checkpoints", "curriculum_events"):
        assert _steps(store, table, "killed") == [], table
    assert _steps(store, "train_steps", "other") == [0, 1, 2, 3, 4]


def test_only_the_tables_asked_for(store: Store) -> None:
    assert store.discard_steps_after("killed", 0, tables=("curriculum_events",)) == {"curriculum_events": 1}
    assert _steps(store, "train_steps", "killed") == [0, 1, 2, 3, 4]
    assert _steps(store, "checkpoints", "killed") == [2, 4]


def test_an_unknown_table_removes_nothing(store: Store) -> None:
    with pytest.raises(StoreSchemaError, match="no table .no_such_table."):
        store.discard_steps_after("killed", 0, tables=("train_steps", "no_such_table"))
    assert _steps(store, "train_steps", "killed") == [0, 1, 2, 3, 4]


def test_a_failure_part_way_removes_nothing_and_says_what_failed(store: Store) -> None:
    # `runs` has no step column: the second table fails after the first one's rows were deleted in the transaction.
    with pytest.raises(duckdb.Error, match="step"):
        store.discard_steps_after("killed", 0, tables=("train_steps", "runs"))
    assert _steps(store, "train_steps", "killed") == [0, 1, 2, 3, 4]
