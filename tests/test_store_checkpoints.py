"""The checkpoints table read back (kernelbench_rl/store/checkpoints.py) from a real DuckDB file: a run's newest, one by
name, the newest of every run with its configuration, and the UserErrors a missing checkpoint gives."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from kernelbench_rl.errors import UserError
from kernelbench_rl.store import Store
from kernelbench_rl.store.checkpoints import (
    BASE, CheckpointRow, latest, named, newest_per_run, resolve_checkpoint,
)

T0 = datetime(2026, 1, 1, 12, 0, 0)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "kb.duckdb")
    store.upsert("runs", [{"run_id": run_id, "kind": "train", "config_json": json.dumps({"run_id": run_id})}
                          for run_id in ("a", "b", "empty")])
    rows = [("a", "step-2", 2, 1), ("a", "step-10", 10, 2), ("a", "step-5", 5, 3), ("b", "step-1", 1, 4)]
    store.upsert("checkpoints", [{"run_id": run_id, "name": name, "step": step, "backend": "local",
                                  "state_path": f"{name}/state", "sampler_path": f"{name}/sampler",
                                  "created_at": T0 + timedelta(minutes=minute)}
                                 for run_id, name, step, minute in rows])
    return store


def test_a_runs_newest_checkpoint_is_its_highest_step_and_a_name_finds_its_own(store: Store) -> None:
    assert latest(store, "a") == CheckpointRow("a", "step-10", 10, "step-10/sampler")
    assert named(store, "a", "step-2") == CheckpointRow("a", "step-2", 2, "step-2/sampler")
    assert latest(store, "empty") is None and named(store, "a", "step-1") is None
    for latest_name in (None, "", "latest"):
        assert resolve_checkpoint(store, "a", latest_name) == latest(store, "a")
    assert resolve_checkpoint(store, "a", "step-5").step == 5
    assert resolve_checkpoint(store, "a", BASE) is None


def test_a_missing_checkpoint_is_a_user_error_that_names_the_run(store: Store) -> None:
    with pytest.raises(UserError, match="'empty' has no checkpoint yet"):
        resolve_checkpoint(store, "empty", "latest")
    with pytest.raises(UserError, match="'a' has no checkpoint named 'step-7'"):
        resolve_checkpoint(store, "a", "step-7")


def test_the_newest_checkpoint_of_every_run_comes_with_its_configuration_most_recent_first(store: Store,
                                                                                          tmp_path: Path) -> None:
    newest = newest_per_run(store)
    assert [(row.run_id, row.name, config) for row, config in newest] == [
        ("b", "step-1", {"run_id": "b"}), ("a", "step-10", {"run_id": "a"})]
    missing = Store(tmp_path / "none.duckdb")
    assert newest_per_run(missing) == [] and not missing.path.exists()  # nothing is created


def test_a_missing_name_says_how_to_list_the_checkpoints(store: Store) -> None:
    with pytest.raises(UserError) as caught:
        resolve_checkpoint(store, "a", "step-7")
    assert str(caught.value) == ("Run 'a' has no checkpoint named 'step-7'; `kernelbench-rl sql \"SELECT * FROM "
                                 "checkpoints\"` lists them.")


def test_reading_the_newest_checkpoints_writes_nothing_to_an_older_database(tmp_path: Path) -> None:
    """The nightly evaluation's read of every run: an older file is neither migrated nor locked for writing."""
    from kernelbench_rl.store.schema import MIGRATIONS

    path = tmp_path / "old.duckdb"
    old = Store(path, migrations=[m for m in MIGRATIONS if m[0] < 15])
    old.upsert("runs", [{"run_id": "a", "kind": "train", "config_json": None}])
    old.upsert("checkpoints", [{"run_id": "a", "name": "step-1", "step": 1, "sampler_path": "s"}])
    version = old.schema_version()
    assert version < MIGRATIONS[-1][0]
    assert [(row.name, config) for row, config in newest_per_run(Store(path))] == [("step-1", {})]  # no config: {}
    assert Store(path).schema_version() == version
