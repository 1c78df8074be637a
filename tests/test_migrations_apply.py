"""How the store applies its migrations (Store._migrate): each version once, by membership rather than by order of
arrival, in ascending order whatever order they are given in, each in one transaction with its row in
schema_migrations; a file from a newer kernelbench-rl refused with one sentence; the schema version read without
creating or migrating anything."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from kernelbench_rl.store import Store
from kernelbench_rl.store.db import StoreVersionError
from kernelbench_rl.store.schema import MIGRATIONS

BASE = [m for m in MIGRATIONS if m[0] <= 2]
V2 = BASE[-1][0]
ITEMS = (V2 + 1, "items", ["CREATE TABLE items (item_id VARCHAR PRIMARY KEY, weight DOUBLE)"])
ITEMS_SIZE = (V2 + 2, "items get a size, back-filled from their weight",
              ["ALTER TABLE items ADD COLUMN size VARCHAR",
               "UPDATE items SET size = CASE WHEN weight > 1 THEN 'big' ELSE 'small' END"])
ITEMS_COLOUR = (V2 + 3, "items get a colour", ["ALTER TABLE items ADD COLUMN colour VARCHAR"])


def versions(store: Store) -> list[tuple[int, str]]:
    return store.fetchall("SELECT version, description FROM schema_migrations ORDER BY version")


def test_a_version_missing_below_the_newest_is_applied_later_by_membership(tmp_path: Path) -> None:
    """A database that got V2+3 before V2+2 existed (two lines of work merged) still gets V2+2, and nothing twice."""
    path = tmp_path / "kb.duckdb"
    early = Store(path, migrations=[*BASE, ITEMS, ITEMS_COLOUR])
    early.upsert("items", [{"item_id": "a", "weight": 2.0, "colour": "red"}, {"item_id": "b", "weight": 0.5}])
    assert early.schema_version() == ITEMS_COLOUR[0]
    later = Store(path, migrations=[*BASE, ITEMS, ITEMS_SIZE, ITEMS_COLOUR])
    assert later.migrate() == ITEMS_COLOUR[0]
    assert later.fetchall("SELECT item_id, size, colour FROM items ORDER BY item_id") == [
        ("a", "big", "red"), ("b", "small", None)]
    assert versions(later) == [(v, d) for v, d, _ in [*BASE, ITEMS, ITEMS_SIZE, ITEMS_COLOUR]]
    assert Store(path, migrations=[*BASE, ITEMS, ITEMS_SIZE, ITEMS_COLOUR]).migrate() == ITEMS_COLOUR[0]
    assert versions(later) == [(v, d) for v, d, _ in [*BASE, ITEMS, ITEMS_SIZE, ITEMS_COLOUR]]  # once each


def test_migrations_given_out_of_order_apply_in_ascending_order(tmp_path: Path) -> None:
    store = Store(tmp_path / "kb.duckdb", migrations=[ITEMS_COLOUR, ITEMS_SIZE, *reversed(BASE), ITEMS])
    store.upsert("items", [{"item_id": "a", "weight": 3.0, "size": "big", "colour": "blue"}])
    assert store.schema_version() == ITEMS_COLOUR[0]
    assert [v for v, _ in versions(store)] == sorted(v for v, _, _ in [*BASE, ITEMS, ITEMS_SIZE, ITEMS_COLOUR])


def test_a_back_fill_runs_once_on_the_rows_written_before_it(tmp_path: Path) -> None:
    path = tmp_path / "kb.duckdb"
    Store(path, migrations=[*BASE, ITEMS]).upsert("items", [{"item_id": "heavy", "weight": 5.0},
                                                          {"item_id": "light", "weight": 1.0}])
    store = Store(path, migrations=[*BASE, ITEMS, ITEMS_SIZE])
    store.upsert("items", [{"item_id": "new", "weight": 9.0, "size": "told"}])  # written after: kept as written
    assert store.fetchall("SELECT item_id, size FROM items ORDER BY item_id") == [
        ("heavy", "big"), ("light", "small"), ("new", "told")]


def test_a_file_from_a_newer_kernelbench_rl_is_refused_naming_both_versions(tmp_path: Path) -> None:
    path = tmp_path / "kb.duckdb"
    Store(path, migrations=[*BASE, ITEMS]).init()
    with pytest.raises(StoreVersionError) as caught:
        Store(path, migrations=BASE).upsert("runs", [{"run_id": "x"}])
    assert str(caught.value) == (
        f"The database {path} has schema version {ITEMS[0]} but this kernelbench-rl knows only up to {V2}, so "
        "upgrade kernelbench-rl or use another file.")
    assert Store(path).schema_version() == ITEMS[0]  # refused before anything was written
    assert Store(path, migrations=[*BASE, ITEMS]).fetchall("SELECT count(*) FROM runs") == [(0,)]


def test_the_same_version_or_a_file_with_none_is_not_refused(tmp_path: Path) -> None:
    path = tmp_path / "kb.duckdb"
    Store(path, migrations=[*BASE, ITEMS]).init()
    assert Store(path, migrations=[*BASE, ITEMS]).migrate() == ITEMS[0]
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()  # a DuckDB file with no table at all
    assert Store(empty).schema_version() == 0
    assert Store(empty, migrations=[]).migrate() == 0  # no migration known, none applied: nothing refused
    assert Store(empty, migrations=BASE).migrate() == V2


def test_a_failing_statement_leaves_nothing_of_its_migration_and_the_next_open_retries_it(tmp_path: Path) -> None:
    path = tmp_path / "kb.duckdb"
    broken = (V2 + 1, "half", ["CREATE TABLE half_done (a INTEGER)", "INSERT INTO no_such_table VALUES (1)"])
    Store(path, migrations=BASE).init()
    with pytest.raises(duckdb.Error):
        Store(path, migrations=[*BASE, broken]).init()
    with pytest.raises(duckdb.Error):  # not recorded, so tried again (and failing again) on the next open
        Store(path, migrations=[*BASE, broken]).init()
    store = Store(path, migrations=BASE)
    assert store.schema_version() == V2
    assert store.fetchall("SELECT count(*) FROM information_schema.tables WHERE table_name = 'half_done'") == [(0,)]
    fixed = (V2 + 1, "half, fixed", ["CREATE TABLE half_done (a INTEGER)"])
    assert Store(path, migrations=[*BASE, fixed]).migrate() == V2 + 1
    assert versions(store)[-1] == (V2 + 1, "half, fixed")


def test_a_store_writes_the_columns_its_migrations_just_added(tmp_path: Path) -> None:
    """The table layout a store read before migrating is not the one it writes with after."""
    path = tmp_path / "kb.duckdb"
    Store(path, migrations=[*BASE, ITEMS]).upsert("items", [{"item_id": "a", "weight": 1.0}])
    store = Store(path, migrations=[*BASE, ITEMS, ITEMS_SIZE, ITEMS_COLOUR])
    with store.connect(read_only=True) as con:  # a reader of the old layout first
        assert store._table_info(con, "items").columns
    store.upsert("items", [{"item_id": "a", "weight": 1.0, "colour": "green"}])
    assert store.fetchall("SELECT item_id, size, colour FROM items") == [("a", "small", "green")]


def test_the_schema_version_is_read_without_creating_or_migrating(tmp_path: Path) -> None:
    path = tmp_path / "kb.duckdb"
    assert Store(path).schema_version() == 0 and not path.exists()
    Store(path, migrations=BASE).init()
    newer = Store(path, migrations=[*BASE, ITEMS])
    assert newer.schema_version() == V2  # reading does not migrate
    assert newer.migrate() == ITEMS[0] and newer.schema_version() == ITEMS[0]
    assert Store(path).schema_version() == ITEMS[0]


def test_a_store_that_knows_no_migration_refuses_any_file_with_one(tmp_path: Path) -> None:
    path = tmp_path / "kb.duckdb"
    Store(path, migrations=BASE[:1]).init()  # version 1 only
    with pytest.raises(StoreVersionError, match=r"has schema version 1 but this kernelbench-rl knows only up to 0,"):
        Store(path, migrations=[]).init()


def test_the_schema_is_checked_once_per_store_not_on_every_write(tmp_path: Path, monkeypatch) -> None:
    """A write turn costs an open of the file; the migration check is paid on the store's first one only."""
    checks: list[int] = []
    original = Store._migrate

    def counted(self, con) -> None:
        checks.append(1)
        original(self, con)

    monkeypatch.setattr(Store, "_migrate", counted)
    store = Store(tmp_path / "kb.duckdb", migrations=[*BASE, ITEMS])
    for n in range(3):
        store.upsert("items", [{"item_id": str(n), "weight": 1.0}])
    assert len(checks) == 1
    Store(store.path, migrations=[*BASE, ITEMS]).upsert("items", [{"item_id": "x", "weight": 2.0}])
    assert len(checks) == 2  # another store checks again: the file may have changed since


def test_each_applied_migration_is_listed_under_the_column_names_a_reader_queries(tmp_path: Path) -> None:
    """`kernelbench-rl sql "SELECT * FROM schema_migrations"` shows version, description and applied_at by those names
    (as written, lower case), each row stamped when its migration was applied."""
    store = Store(tmp_path / "kb.duckdb", migrations=[*BASE, ITEMS])
    store.init()
    rows = store.dicts("SELECT * FROM schema_migrations ORDER BY version")
    assert [list(row) for row in rows] == [["version", "description", "applied_at"]] * len(rows)
    assert [(row["version"], row["description"]) for row in rows] == [(v, d) for v, d, _ in [*BASE, ITEMS]]
    assert all(row["applied_at"] is not None for row in rows)
