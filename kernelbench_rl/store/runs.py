"""The `runs` table's status: a run's ending written once it is known (by the command that ran it, or by the next
command that finds its owner gone), and the pipeline's own row. The decisions are store/endings.py's;
the SQL is here.

Statuses: `running`, then `finished`, `stopped` (Ctrl-C, SIGTERM, --stop-after: resumable), `failed` (an error, with
its exit code), or `crashed` (its owner process died without a word: SIGKILL, the OOM killer, a lost machine; found
by the next command that opened the store). Older files may also hold `interrupted`, the name `crashed` had before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Store(Protocol):
    """What these statements need of a store (store/db.py's Store): this module sits below it and imports nothing
    back."""

    def dicts(self, sql: str, params: Any = None, read_only: bool = False) -> list[dict[str, Any]]: ...

    def fetchall(self, sql: str, params: Any = None, read_only: bool = False) -> list[tuple[Any, ...]]: ...

    def connect(self, read_only: bool = False, locked_down: bool = False) -> Any: ...

    def upsert(self, table: str, rows: Any, on_conflict: Any = "replace") -> int: ...

ENDED = ("finished", "stopped", "failed", "crashed", "interrupted")


def running_rows(store: Store, run_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Rows whose status says `running` (of `run_ids` only, when given), with their owner and last write."""
    sql = ("SELECT run_id, kind, last_step, owner_pid, owner_host, updated_at, flow_run_id, prefect_api_url, "
           "prefect_home FROM runs WHERE status = 'running'")
    if run_ids is not None:
        if not run_ids:
            return []
        sql += " AND run_id IN (SELECT unnest(?::VARCHAR[]))"
        return store.dicts(sql, [list(run_ids)], read_only=True)
    return store.dicts(sql, read_only=True)


def end_running(store: Store, run_id: str, owner_pid: int | None, *, status: str, reason: str,
                exit_code: int | None = None, ended_at: float | None = None) -> bool:
    """The run's row, if it still says `running` for this owner (any owner for None), gets its ending; returns whether
    it did (a row a newer owner took over, or that another command ended first, is left alone)."""
    owner = "" if owner_pid is None else " AND owner_pid = ?"
    rows = store.fetchall(
        "UPDATE runs SET status = ?, end_reason = ?, exit_code = ?, "
        "ended_at = CASE WHEN ? IS NULL THEN now() ELSE to_timestamp(?) END, "
        f"updated_at = now() WHERE run_id = ? AND status = 'running'{owner} RETURNING run_id",
        [status, reason, exit_code, ended_at, ended_at, run_id, *([] if owner_pid is None else [owner_pid])])
    return bool(rows)


def record_ending(store: Store, run_id: str, owner_pid: int, owner_host: str, *, exit_code: int | None,
                  reason: str | None, status_if_running: str, ended_at: float | None = None) -> bool:
    """At a command's exit: the row this process owned gets its exit code, the time (`ended_at`, else now) and its
    sentence (None: the one the run wrote, if any); a row still `running` gets `status_if_running`. Returns whether
    the row was this owner's (a newer owner's row is left alone)."""
    rows = store.fetchall(
        "UPDATE runs SET status = CASE WHEN status = 'running' THEN ? ELSE status END, exit_code = ?, "
        "end_reason = coalesce(?, end_reason), "
        "ended_at = CASE WHEN ? IS NULL THEN now() ELSE to_timestamp(?) END, updated_at = now() "
        "WHERE run_id = ? AND owner_pid = ? AND owner_host = ? RETURNING run_id",
        [status_if_running, exit_code, reason, ended_at, ended_at, run_id, owner_pid, owner_host])
    return bool(rows)


def begin_attempt(store: Store, run_id: str) -> None:
    """A new owner starts the run: the ending of an earlier attempt (its time, sentence and exit code) is cleared."""
    store.fetchall("UPDATE runs SET ended_at = NULL, end_reason = NULL, exit_code = NULL WHERE run_id = ? "
                   "AND (ended_at IS NOT NULL OR end_reason IS NOT NULL OR exit_code IS NOT NULL)", [run_id])


def pipeline_running(store: Store, run_id: str, *, owner_pid: int, owner_host: str, flow_run_id: str | None = None,
                     prefect_api_url: str | None = None, prefect_home: str | None = None) -> None:
    """The pipeline's row says `running` (a new run's row has kind `pipeline` until its SFT or RL stage writes its
    own), owned by this process; the Prefect flow run and its API, where given, are kept for a crash found later."""
    with store.connect():
        store.upsert("runs", [{"run_id": run_id, "kind": "pipeline"}], on_conflict="ignore")
        row: dict[str, Any] = {"run_id": run_id, "status": "running", "owner_pid": owner_pid, "owner_host": owner_host,
                               "ended_at": None, "end_reason": None, "exit_code": None}
        if flow_run_id is not None:
            row.update(flow_run_id=flow_run_id, prefect_api_url=prefect_api_url, prefect_home=prefect_home)
        store.upsert("runs", [row])


def pipeline_ended(store: Store, run_id: str, *, owner_pid: int, status: str, reason: str | None = None,
                   exit_code: int | None = None) -> None:
    """The pipeline's own ending of its row (this owner's only): finished, stopped or failed."""
    store.fetchall(
        "UPDATE runs SET status = ?, end_reason = ?, exit_code = coalesce(?, exit_code), ended_at = now(), "
        "updated_at = now() WHERE run_id = ? AND owner_pid = ?",
        [status, reason, exit_code, run_id, owner_pid])
