"""The connection helper: short-lived connections, serialised writers, bounded retries.

DuckDB lets no second process open a file another holds read-write, so every operation opens the
file, does one batch and closes it. Within a process a lock serialises writers; across processes
a busy file is retried for `busy_timeout_s`, then `StoreBusyError` says so in one sentence.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from kernelbench_rl.errors import StoreBusyError
from kernelbench_rl.store.schema import MIGRATIONS, TABLES

DEFAULT_DB_PATH = Path(os.environ.get("KBRL_DB", "runs/kernelbench_rl.duckdb"))

_PROCESS_LOCK = threading.RLock()


def _is_lock_conflict(exc: Exception) -> bool:
    text = str(exc).lower()
    return "lock" in text and ("conflict" in text or "could not set lock" in text)


class Store:
    """One DuckDB file. Cheap to construct; holds no connection between calls."""

    def __init__(self, path: str | os.PathLike[str] | None = None, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path) if path is not None else DEFAULT_DB_PATH
        self.busy_timeout_s = busy_timeout_s
        self._migrated = False
        self._columns: dict[str, list[str]] = {}

    # -- connections -----------------------------------------------------------------------
    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """Open the file (retrying while another process holds it), yield, close."""
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.busy_timeout_s
        delay = 0.02
        with _PROCESS_LOCK:
            while True:
                try:
                    con = duckdb.connect(str(self.path), read_only=read_only)
                    break
                except duckdb.Error as exc:
                    if not _is_lock_conflict(exc) or time.monotonic() >= deadline:
                        if _is_lock_conflict(exc):
                            raise StoreBusyError(
                                f"The database {self.path} stayed locked by another process for "
                                f"{self.busy_timeout_s:.0f} s; wait for it to finish or point KBRL_DB elsewhere."
                            ) from exc
                        raise
                    time.sleep(delay)
                    delay = min(delay * 2, 0.5)
            try:
                if not self._migrated and not read_only:
                    self._migrate(con)
                yield con
            finally:
                con.close()

    def _migrate(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
            "description VARCHAR, applied_at TIMESTAMP DEFAULT now())"
        )
        applied = {row[0] for row in con.execute("SELECT version FROM schema_migrations").fetchall()}
        for version, description, statements in MIGRATIONS:
            if version in applied:
                continue
            con.execute("BEGIN TRANSACTION")
            try:
                for statement in statements:
                    con.execute(statement)
                con.execute("INSERT INTO schema_migrations (version, description) VALUES (?, ?)", [version, description])
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
        self._migrated = True

    def init(self) -> None:
        with self.connect():
            pass

    # -- writes ----------------------------------------------------------------------------
    def _table_columns(self, con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
        if table not in self._columns:
            rows = con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
                [table],
            ).fetchall()
            self._columns[table] = [r[0] for r in rows]
        return self._columns[table]

    def upsert(self, table: str, rows: Sequence[dict[str, Any]]) -> int:
        """Insert rows, replacing any with the same natural key, in one transaction."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}")
        if not rows:
            return 0
        with self.connect() as con:
            columns = self._table_columns(con, table)
            names = [c for c in columns if any(c in r for r in rows)]
            unknown = {k for r in rows for k in r} - set(columns)
            if unknown:
                raise ValueError(f"table {table} has no column(s) {sorted(unknown)}")
            placeholders = ", ".join("?" for _ in names)
            sql = f"INSERT OR REPLACE INTO {table} ({', '.join(names)}) VALUES ({placeholders})"
            values = [[_encode(r.get(c)) for c in names] for r in rows]
            con.execute("BEGIN TRANSACTION")
            try:
                con.executemany(sql, values)
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
        return len(rows)

    # -- reads -----------------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] | None = None):
        """Run a query and return a polars DataFrame."""
        with self.connect() as con:
            return con.sql(sql, params=list(params) if params else None).pl()

    def fetchall(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        with self.connect() as con:
            return con.execute(sql, params or []).fetchall()


def _encode(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return value
