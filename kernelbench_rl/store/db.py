"""The connection helper: short-lived connections, fair turn-taking, bounded retries.

DuckDB lets no second process open a file that another process holds read-write (not even
read-only), so every operation opens the file, does one batch and closes it. Turns are taken
through a sidecar lock file (`<db>.lock`) with an "intent" lock in front of it, so a reader that
arrives while a writer loops over batches gets the next turn instead of starving. Within a
process a per-file lock serialises threads. A file that stays busy for `busy_timeout_s` raises
`StoreBusyError` with one sentence.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import duckdb

from kernelbench_rl.errors import StoreBusyError, UserError
from kernelbench_rl.store import endings
from kernelbench_rl.store.files import DamagedFileError, check_free_space, write_error
from kernelbench_rl.store.turns import FileGate, is_lock_conflict, lock_holder
from kernelbench_rl.evaluation.result import categories_without_verdict
from kernelbench_rl.store.schema import MIGRATIONS

if TYPE_CHECKING:
    import polars as pl

    from kernelbench_rl.evaluation.result import EvalResult

DEFAULT_DB_PATH = Path(os.environ.get("KBRL_DB", "runs/kernelbench_rl.duckdb"))

# Batches at least this large go through an arrow table (15-46k rows/s) instead of executemany (~1.2k rows/s).
ARROW_BATCH_MIN_ROWS = 16

Migration = tuple[int, str, list[str]]
# Tables whose rows belong to one training step of one run (run_id, step).
RUN_STEP_TABLES: tuple[str, ...] = ("train_steps", "rollouts", "rewards", "curriculum_events", "checkpoints")
OnConflict = Literal["replace", "ignore"]


# A connection for SQL we did not write (`kernelbench-rl sql`): it reads the database it opened and
# nothing else. No file, URL or extension is read or written, and the query cannot undo these settings.
LOCKED_DOWN_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "lock_configuration": True,
}


def default_db_path() -> Path:
    """The database file used when none is given: $KBRL_DB, else runs/kernelbench_rl.duckdb."""
    return Path(os.environ.get("KBRL_DB") or "runs/kernelbench_rl.duckdb")


class StoreSchemaError(ValueError):
    """A write named a table or column the schema does not have, or left out a key column."""


class StoreMissingError(UserError):
    """A read-only operation was asked of a database file that does not exist."""


class StoreVersionError(UserError):
    """The database was written by a newer version of kernelbench-rl than this one."""


def eval_key_for(problem_id: str, candidate_sha256: str, settings_hash: str) -> str:
    """The evaluation cache key; identical to `EvalRequest.cache_key`."""
    return hashlib.sha256(f"{problem_id}|{candidate_sha256}|{settings_hash}".encode()).hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# -- in-process coordination --------------------------------------------------------------------
_REGISTRY_LOCK = threading.Lock()
_PATH_LOCKS: dict[str, threading.RLock] = {}
_OPEN = threading.local()  # .connections: dict[path key, (connection, read_only)] held by this thread
_SWEPT: set[str] = set()  # files this process has looked at for runs whose owner died (endings.py)
_SPACE_CHECKED: set[str] = set()  # files this process has checked the free-space floor for before writing


def _path_lock(key: str) -> threading.RLock:
    with _REGISTRY_LOCK:
        return _PATH_LOCKS.setdefault(key, threading.RLock())


def _open_connections() -> dict[str, tuple[duckdb.DuckDBPyConnection, bool]]:
    if not hasattr(_OPEN, "connections"):
        _OPEN.connections = {}
    return _OPEN.connections


# -- table metadata -----------------------------------------------------------------------------
@dataclass(frozen=True)
class _TableInfo:
    name: str
    columns: tuple[str, ...]  # in table order
    types: dict[str, str]  # column -> DuckDB type name
    key: tuple[str, ...]  # primary key columns, empty if none


def _encode(value: Any, column_type: str) -> Any:
    """Python value -> what DuckDB stores: JSON for dicts/lists in text columns, enum values, plain numbers."""
    if isinstance(value, Enum):
        return value.value
    if type(value).__module__ == "numpy":  # numpy scalars and arrays: DuckDB's row path takes neither
        value = value.tolist()
    if column_type == "VARCHAR":
        if isinstance(value, (dict, list, tuple)):
            return json.dumps(value, sort_keys=True)
        if isinstance(value, Path):
            return str(value)
    return value


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


class Store:
    """One DuckDB file. Cheap to construct; holds no connection between calls.

    Every call opens the file, does one batch in one transaction and closes it, so other processes
    (a user's `kernelbench-rl sql`, a second flow run) get in between batches. Opening costs ~10-40 ms,
    so write rows in batches (one call per step, not per rollout); to make several calls in one
    turn, nest them in `with store.connect():` (inner calls reuse that connection). Next to the file
    live `<db>.lock` and `<db>.lock.intent`, the turn-taking locks; they are empty and safe to delete
    when no process uses the database.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        busy_timeout_s: float = 30.0,
        migrations: Sequence[Migration] | None = None,
    ) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self.busy_timeout_s = busy_timeout_s
        self.migrations: list[Migration] = sorted(migrations if migrations is not None else MIGRATIONS)
        self._migrated = False
        self._tables: dict[str, _TableInfo] | None = None

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    @property
    def _key(self) -> str:
        return str(self.path.resolve())

    def exists(self) -> bool:
        return self.path.exists()

    # -- connections -----------------------------------------------------------------------
    @contextmanager
    def connect(self, read_only: bool = False, locked_down: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """Take a turn on the file (retrying while another process holds it), yield a connection, close.

        Read-only turns never create the file and may overlap with other readers. A nested call in
        the same thread reuses the open connection through a cursor. `locked_down` (implies read-only)
        is for SQL from outside: it can read this database and no other file, URL or extension.
        """
        key = self._key
        read_only = read_only or locked_down
        held = _open_connections().get(key)
        if held is None:
            self._first_opening(key, read_only)
        if held is not None and locked_down:
            raise RuntimeError(f"a locked-down connection to {self.path} cannot reuse an open one")
        if held is not None:
            outer, outer_read_only = held
            if outer_read_only and not read_only:
                raise RuntimeError(f"cannot write to {self.path} inside a read-only connection to it")
            with closing(outer.cursor()) as cursor:
                yield cursor
            return

        if read_only and not self.path.exists():
            raise StoreMissingError(f"There is no database at {self.path}; pass --db or set KBRL_DB to an existing file.")
        if not read_only:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise (write_error(self.path.parent, exc, "the database's folder") or exc) from None
        deadline = time.monotonic() + self.busy_timeout_s
        lock = _path_lock(key)
        if not lock.acquire(timeout=max(self.busy_timeout_s, 0.001)):
            raise self._busy("another thread of this process")
        try:
            gate = FileGate(self.path, exclusive=not read_only)
            if not gate.acquire(deadline):
                raise self._busy("another process")
            try:
                with self._file_errors():
                    with closing(self._open(read_only, deadline, LOCKED_DOWN_CONFIG if locked_down else None)) as con:
                        if not read_only and not self._migrated:
                            self._migrate(con)
                        _open_connections()[key] = (con, read_only)
                        try:
                            yield con
                        finally:
                            del _open_connections()[key]
                    if not read_only:
                        self._check_folded()
            finally:
                gate.release()
        finally:
            lock.release()

    def _first_opening(self, key: str, read_only: bool) -> None:
        """Once per process and file: runs whose owner died without a word are found and marked (endings.py), and
        before the first write, the free-space floor (KBRL_MIN_FREE_MB) is checked: every writer reads it."""
        with _REGISTRY_LOCK:
            swept = key in _SWEPT
            checked = read_only or key in _SPACE_CHECKED
            _SWEPT.add(key)
            if not read_only:
                _SPACE_CHECKED.add(key)
        if not swept and self.path.exists():
            endings.sweep_on_open(self.path)
        if not checked:
            try:
                check_free_space(self.path, "before writing to it")
            except BaseException:
                with _REGISTRY_LOCK:
                    _SPACE_CHECKED.discard(key)
                raise

    @contextmanager
    def _file_errors(self) -> Iterator[None]:
        """DuckDB's and the OS's failures of the file itself as one sentence: damaged, unwritable, disk full."""
        try:
            yield
        except (duckdb.Error, OSError) as exc:
            error = write_error(self.path, exc, "the database") or self._damaged(exc)
            if error is None:
                raise
            raise error from None

    def _damaged(self, exc: BaseException) -> DamagedFileError | None:
        """DuckDB's report of a damaged file (truncated, garbled, failed checksum) naming the file, else None."""
        text = str(exc)
        lower = text.lower()
        damaged = (isinstance(exc, (duckdb.SerializationException, duckdb.InternalException, duckdb.FatalException))
                   or "corrupt" in lower or "checksum" in lower
                   or (isinstance(exc, duckdb.IOException) and self.path.name in text))
        if not damaged:
            return None
        detail = " ".join(text.split())[:200]
        return DamagedFileError(
            f"The database {self.path} is damaged ({detail}), so restore it from a copy, or move it aside "
            f"(mv {self.path} {self.path}.damaged) and run again to start a new one.")

    def _check_folded(self) -> None:
        """After a write turn DuckDB folds its write-ahead log into the file as it closes, and says nothing when that
        fails (a full disk, a size limit): a log still there is that failure, raised here with its own words."""
        wal = self.path.with_name(self.path.name + ".wal")
        if not wal.exists() or not wal.stat().st_size:
            return
        with closing(duckdb.connect(str(self.path))) as con:
            con.execute("CHECKPOINT")

    def _open(self, read_only: bool, deadline: float, config: dict[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
        """duckdb.connect, retried while a process outside our turn-taking (a DuckDB CLI) holds the file."""
        delay = 0.01
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=read_only, config=dict(config or {}))
            except duckdb.Error as exc:
                if not is_lock_conflict(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise self._busy(lock_holder(exc) or "another process") from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.25)

    def _busy(self, holder: str) -> StoreBusyError:
        return StoreBusyError(
            f"The database {self.path} was held by {holder} for more than {self.busy_timeout_s:g} s, "
            f"so retry when that finishes or point KBRL_DB at another file."
        )

    # -- migrations ------------------------------------------------------------------------
    def _migrate(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
            "description VARCHAR, applied_at TIMESTAMP DEFAULT now())"
        )
        applied = {row[0] for row in con.execute("SELECT version FROM schema_migrations").fetchall()}
        latest = max((version for version, _, _ in self.migrations), default=0)
        if applied and max(applied) > latest:
            raise StoreVersionError(
                f"The database {self.path} has schema version {max(applied)} but this kernelbench-rl knows "
                f"only up to {latest}, so upgrade kernelbench-rl or use another file."
            )
        for version, description, statements in self.migrations:
            if version in applied:
                continue
            con.execute("BEGIN TRANSACTION")
            try:
                for statement in statements:
                    con.execute(statement)
                con.execute(
                    "INSERT INTO schema_migrations (version, description) VALUES (?, ?)", [version, description]
                )
                con.execute("COMMIT")
            except Exception:
                _rollback_quietly(con)
                raise
            self._tables = None
        self._migrated = True

    def find_ended_runs(self, *, every_running_row: bool = False) -> list[dict[str, Any]]:
        """Runs whose owner is gone get their ending (`crashed`, or the last word left beside the file): endings.py."""
        return endings.find_ended_runs(self, every_running_row=every_running_row)

    def init(self) -> None:
        """Create the file if needed and bring its schema up to date."""
        with self.connect():
            pass

    def migrate(self) -> int:
        """Bring the schema up to date; returns the schema version."""
        self.init()
        return self.schema_version()

    def schema_version(self) -> int:
        """The highest migration applied to the file (0 for a file with none); never creates the file."""
        if not self.path.exists():
            return 0
        with self.connect(read_only=True) as con:
            present = con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_migrations'"
            ).fetchone()[0]
            if not present:
                return 0
            return con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]

    # -- metadata --------------------------------------------------------------------------
    def _table_info(self, con: duckdb.DuckDBPyConnection, table: str) -> _TableInfo:
        if self._tables is None or table not in self._tables:
            columns: dict[str, list[tuple[str, str]]] = {}
            for name, column, data_type in con.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position"
            ).fetchall():
                columns.setdefault(name, []).append((column, data_type))
            keys = {
                name: tuple(cols)
                for name, cols in con.execute(
                    "SELECT table_name, constraint_column_names FROM duckdb_constraints() "
                    "WHERE constraint_type = 'PRIMARY KEY' AND schema_name = 'main'"
                ).fetchall()
            }
            self._tables = {
                name: _TableInfo(
                    name=name,
                    columns=tuple(c for c, _ in cols),
                    types=dict(cols),
                    key=keys.get(name, ()),
                )
                for name, cols in columns.items()
            }
        info = self._tables.get(table)
        if info is None:
            known = ", ".join(sorted(t for t in self._tables if t != "schema_migrations"))
            raise StoreSchemaError(f"The store has no table {table!r}; the tables are: {known}.")
        return info

    # -- writes ----------------------------------------------------------------------------
    def upsert(
        self, table: str, rows: Sequence[Mapping[str, Any]], on_conflict: OnConflict = "replace"
    ) -> int:
        """Write rows in one transaction, idempotent on the table's natural (primary) key.

        on_conflict="replace": a row whose key exists updates the columns the row gives; columns it
        leaves out keep their stored values (`updated_at` is set to now() where the table has one).
        on_conflict="ignore": an existing row is kept as it is (write-once data).
        Within one batch the last row for a key wins ("replace") or the first ("ignore").
        Returns the number of distinct rows written.
        """
        if on_conflict not in ("replace", "ignore"):
            raise ValueError(f"on_conflict must be 'replace' or 'ignore', not {on_conflict!r}")
        rows = list(rows)
        if not rows:
            return 0
        with self.connect() as con:
            info = self._table_info(con, table)
            try:
                self._check_rows(info, rows)
            except StoreSchemaError:
                self._tables = None  # another process may have migrated the file since we looked
                info = self._table_info(con, table)
                self._check_rows(info, rows)
            rows = _dedupe(rows, info.key, keep_last=on_conflict == "replace")
            con.execute("BEGIN TRANSACTION")
            try:
                self._insert_rows(con, info, rows, on_conflict)
                con.execute("COMMIT")
            except Exception:
                _rollback_quietly(con)
                raise
        return len(rows)

    def write_batch(
        self, tables: Mapping[str, Sequence[Mapping[str, Any]]], *, replace_where: Mapping[str, Any] | None = None
    ) -> int:
        """Write rows of several tables in one transaction (all land or none do).

        With `replace_where` (column -> value), each table's rows matching it are deleted first, so
        a re-done unit of work (e.g. one step's group for one problem) replaces what an earlier,
        interrupted attempt wrote, even when the new attempt has fewer rows (fewer turns).
        """
        written = 0
        with self.connect() as con:
            prepared = []
            for table, rows in tables.items():
                info = self._table_info(con, table)
                rows = list(rows)
                if rows:
                    self._check_rows(info, rows)
                if replace_where:
                    unknown = sorted(set(replace_where) - set(info.columns))
                    if unknown:
                        raise StoreSchemaError(f"Table {table} has no column(s) {', '.join(unknown)} to match on.")
                prepared.append((info, _dedupe(rows, info.key, keep_last=True)))
            con.execute("BEGIN TRANSACTION")
            try:
                for info, rows in prepared:
                    if replace_where:
                        clause = " AND ".join(f"{column} = ?" for column in replace_where)
                        con.execute(f"DELETE FROM {info.name} WHERE {clause}", list(replace_where.values()))
                    self._insert_rows(con, info, rows, "replace")
                    written += len(rows)
                con.execute("COMMIT")
            except Exception:
                _rollback_quietly(con)
                raise
        return written

    def discard_steps_after(self, run_id: str, step: int, tables: Sequence[str] = RUN_STEP_TABLES) -> dict[str, int]:
        """Delete a run's rows of steps after `step` from `tables`, in one transaction (all or none).

        A resumed run starts after its last checkpoint; rows a killed attempt wrote for later steps
        (a promotion, a step's metrics, its rollouts) would otherwise outlive the state that made them.
        Returns the rows deleted per table.
        """
        deleted: dict[str, int] = {}
        with self.connect() as con:
            infos = [self._table_info(con, table) for table in tables]
            con.execute("BEGIN TRANSACTION")
            try:
                for info in infos:
                    count = con.execute(f"SELECT count(*) FROM {_quote(info.name)} WHERE run_id = ? AND step > ?",
                                        [run_id, step]).fetchone()[0]
                    if count:
                        con.execute(f"DELETE FROM {_quote(info.name)} WHERE run_id = ? AND step > ?", [run_id, step])
                    deleted[info.name] = count
                con.execute("COMMIT")
            except Exception:
                _rollback_quietly(con)
                raise
        return deleted

    def _insert_rows(
        self, con: duckdb.DuckDBPyConnection, info: _TableInfo, rows: Sequence[Mapping[str, Any]], on_conflict: OnConflict
    ) -> None:
        """Insert inside the caller's transaction, one statement per set of columns the rows give."""
        groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
        for row in rows:
            groups.setdefault(tuple(c for c in info.columns if c in row), []).append(row)
        for names, group in groups.items():
            self._insert(con, info, names, group, on_conflict)

    def insert_ignore(self, table: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """Write rows whose key is not stored yet; existing rows are left untouched."""
        return self.upsert(table, rows, on_conflict="ignore")

    @staticmethod
    def _check_rows(info: _TableInfo, rows: Sequence[Mapping[str, Any]]) -> None:
        known = set(info.columns)
        unknown = sorted({k for row in rows for k in row} - known)
        if unknown:
            raise StoreSchemaError(
                f"Table {info.name} has no column(s) {', '.join(unknown)}; its columns are: {', '.join(info.columns)}."
            )
        for index, row in enumerate(rows):
            missing = [k for k in info.key if row.get(k) is None]
            if missing:
                raise StoreSchemaError(
                    f"Row {index} for table {info.name} lacks key column(s) {', '.join(missing)} "
                    f"(the key is {', '.join(info.key)})."
                )

    def _insert(
        self,
        con: duckdb.DuckDBPyConnection,
        info: _TableInfo,
        names: tuple[str, ...],
        rows: list[Mapping[str, Any]],
        on_conflict: OnConflict,
    ) -> None:
        column_list = ", ".join(_quote(c) for c in names)
        conflict = ""
        if info.key:
            updates = [f"{_quote(c)} = excluded.{_quote(c)}" for c in names if c not in info.key]
            if "updated_at" in info.columns and "updated_at" not in names and updates:
                updates.append('"updated_at" = now()')
            keys = ", ".join(_quote(c) for c in info.key)
            if on_conflict == "ignore" or not updates:
                conflict = f" ON CONFLICT ({keys}) DO NOTHING"
            else:
                conflict = f" ON CONFLICT ({keys}) DO UPDATE SET {', '.join(updates)}"
        values = [[_encode(row.get(c), info.types[c]) for c in names] for row in rows]

        if len(rows) >= ARROW_BATCH_MIN_ROWS:
            staged = _arrow_table(con, info, names, values)
            if staged is not None:
                view = f"_kbrl_staged_{info.name}"
                con.register(view, staged)
                try:
                    con.execute(
                        f"INSERT INTO {_quote(info.name)} ({column_list}) "
                        f"SELECT {column_list} FROM {_quote(view)}{conflict}"
                    )
                finally:
                    con.unregister(view)
                return
        placeholders = ", ".join("?" for _ in names)
        con.executemany(f"INSERT INTO {_quote(info.name)} ({column_list}) VALUES ({placeholders}){conflict}", values)

    def put_text(self, kind: str, text: str) -> str:
        """Store a text (prompt, completion, feedback) once; returns its sha256."""
        return self.put_texts(kind, [text])[0]

    def put_texts(self, kind: str, texts: Sequence[str]) -> list[str]:
        """Store many texts once each in one batch; returns their sha256s in order."""
        digests = [sha256_text(text) for text in texts]
        self.insert_ignore("blobs", [{"sha256": d, "kind": kind, "text": t} for d, t in zip(digests, texts)])
        return digests

    def put_kernel(self, source: str, backend: str) -> str:
        """Store a candidate kernel source once; returns its sha256 (== EvalRequest.candidate_sha256)."""
        digest = sha256_text(source)
        self.insert_ignore("kernels", [{"sha256": digest, "backend": backend, "source": source}])
        return digest

    def record_evaluations(self, results: Sequence[EvalResult]) -> list[str]:
        """Write evaluation results (replacing earlier verdicts for the same key); returns their eval keys."""
        rows = []
        keys = []
        for result in results:
            key = eval_key_for(result.problem_id, result.candidate_sha256, result.settings_hash)
            keys.append(key)
            stored = dataclasses.replace(result, cached=False)
            rows.append(
                {
                    "eval_key": key,
                    "problem_id": result.problem_id,
                    "suite": result.versions.get("suite"),  # the evaluator names it (Evaluator._record)
                    "kernel_sha256": result.candidate_sha256,
                    "settings_hash": result.settings_hash,
                    "backend": result.backend,
                    "precision": result.precision,
                    "device_kind": result.device_kind,
                    "hardware": result.hardware,
                    "format_ok": result.format_ok,
                    "compiled": result.compiled,
                    "correct": result.correct,
                    "error_category": result.error_category,
                    "error_message": result.error_message,
                    "runtime_ms": result.runtime_ms,
                    "baseline_ms": result.baseline_ms,
                    "speedup": result.speedup,
                    "floor_ms": (result.speed_of_light or {}).get("floor_ms"),
                    "sol_fraction": (result.speed_of_light or {}).get("sol_fraction"),
                    "reference_sol_fraction": (result.speed_of_light or {}).get("reference_sol_fraction"),
                    "bound": (result.speed_of_light or {}).get("bound"),
                    "flags": list(result.flags),
                    "result_json": stored.to_json(),
                }
            )
        self.upsert("evaluations", rows)
        return keys

    def get_cached_evaluation(self, eval_key: str) -> EvalResult | None:
        """The stored verdict for a cache key (EvalRequest.cache_key), marked cached; None if absent.

        Infrastructure failures are never served from the cache: they are ours, not the kernel's.
        """
        return self.get_cached_evaluations([eval_key]).get(eval_key)

    def get_cached_evaluations(self, eval_keys: Sequence[str]) -> dict[str, EvalResult]:
        """Stored verdicts for many cache keys in one read; keys without a usable verdict are absent."""
        from kernelbench_rl.evaluation.result import EvalResult

        if not eval_keys or not self.path.exists():
            return {}
        with self.connect(read_only=True) as con:
            has_table = con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = 'evaluations'"
            ).fetchone()[0]
            if not has_table:
                return {}
            found = con.execute(
                "SELECT eval_key, result_json FROM evaluations "
                "WHERE eval_key IN (SELECT unnest(?::VARCHAR[])) "
                "AND coalesce(error_category, '') NOT IN (SELECT unnest(?::VARCHAR[]))",
                [list(eval_keys), categories_without_verdict()],
            ).fetchall()
        out = {}
        for key, text in found:
            result = EvalResult.from_json(text)
            result.cached = True
            out[key] = result
        return out

    # -- reads -----------------------------------------------------------------------------
    def query(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None, read_only: bool = False,
        locked_down: bool = False,
    ) -> pl.DataFrame:
        """Run SQL and return a polars DataFrame (empty for a statement with no result).

        read_only=True never creates or migrates the file and may overlap with other readers;
        locked_down=True (for SQL typed by a user) also forbids every other file, URL and extension.
        """
        import polars as pl

        with self.connect(read_only=read_only, locked_down=locked_down) as con:
            def run(on: duckdb.DuckDBPyConnection) -> pl.DataFrame:
                relation = on.sql(sql, params=_params(params))
                return relation.pl() if relation is not None else pl.DataFrame()

            # A user's query may run for minutes inside DuckDB, where a Ctrl-C is not seen until it ends: it runs on
            # a helper thread while this one waits, so the Ctrl-C interrupts it at once.
            return _interruptible(con, run) if locked_down else run(con)

    def dicts(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None, read_only: bool = False
    ) -> list[dict[str, Any]]:
        """Run SQL and return its rows as {column: value} (no polars: training reads its rows this way, so it
        runs where only duckdb is installed)."""
        with self.connect(read_only=read_only) as con:
            cursor = con.execute(sql, _params(params) or [])
            if cursor.description is None:
                return []
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row)) for row in cursor.fetchall()]

    def fetchall(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None, read_only: bool = False
    ) -> list[tuple[Any, ...]]:
        with self.connect(read_only=read_only) as con:
            cursor = con.execute(sql, _params(params) or [])
            return cursor.fetchall() if cursor.description is not None else []

    def count(self, table: str) -> int:
        """Rows in a table (0 when the file or table does not exist yet)."""
        if not self.path.exists():
            return 0
        with self.connect(read_only=True) as con:
            if table not in self._read_tables(con):
                return 0
            return con.execute(f"SELECT count(*) FROM {_quote(table)}").fetchone()[0]

    @staticmethod
    def _read_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
        return {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}


def _interruptible(con: duckdb.DuckDBPyConnection, work: Any) -> Any:
    """`work(cursor)` (a query on a cursor of `con`) on a helper thread while the main thread waits in Python: a
    signal's exception (KeyboardInterrupt) is raised here at once, the query is interrupted, and the exception goes
    on. Elsewhere than the main thread, `work(con)` as it is."""
    if threading.current_thread() is not threading.main_thread():
        return work(con)
    done: list[Any] = []
    failed: list[BaseException] = []
    finished = threading.Event()  # (not Thread.join: a join cut short by a signal may not wait again)
    with closing(con.cursor()) as cursor:  # the connection the helper keeps busy, and the one to interrupt

        def run() -> None:
            try:
                done.append(work(cursor))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                failed.append(exc)
            finally:
                finished.set()

        threading.Thread(target=run, name="kbrl-user-query", daemon=True).start()
        try:
            while not finished.wait(0.05):
                pass
        except BaseException:
            cursor.interrupt()
            while not finished.wait(0.05):
                pass
            raise
    if failed:
        raise failed[0]
    return done[0]


def _rollback_quietly(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back without hiding the error that caused it (closing rolls back as well)."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass


def _params(params: Sequence[Any] | Mapping[str, Any] | None) -> list[Any] | dict[str, Any] | None:
    if params is None:
        return None
    if isinstance(params, Mapping):
        return dict(params)
    return list(params)


def _dedupe(rows: list[Mapping[str, Any]], key: tuple[str, ...], keep_last: bool) -> list[Mapping[str, Any]]:
    """One row per natural key (DuckDB refuses or silently drops a key repeated within one statement)."""
    if not key:
        return rows
    chosen: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for row in rows:
        k = tuple(row.get(c) for c in key)
        if keep_last or k not in chosen:
            chosen.pop(k, None)  # keep the insertion order of the winning row
            chosen[k] = row
    return list(chosen.values())


def _arrow_table(con: duckdb.DuckDBPyConnection, info: _TableInfo, names: tuple[str, ...], values: list[list[Any]]):
    """The batch as a pyarrow table typed like the target columns; None if a value does not fit."""
    import pyarrow as pa

    schema = con.sql(f"SELECT {', '.join(_quote(c) for c in names)} FROM {_quote(info.name)} LIMIT 0").to_arrow_table().schema
    columns = list(zip(*values))
    try:
        arrays = [pa.array(list(col), type=field.type) for col, field in zip(columns, schema)]
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None  # let executemany's casts (e.g. ISO strings into TIMESTAMP) handle it
    return pa.Table.from_arrays(arrays, schema=schema)


endings.install(Store)  # run endings open files with this class; a new owner of a run clears its last ending
