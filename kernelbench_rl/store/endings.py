"""How a run ended, said once it is known: by the command that ran it as it exits, or by the next command that opens
the store when the run's owner died without a word.

- **At a command's exit** (`settle_at_exit`, called by the CLI's entry point and the pipeline's): every run the process
  owned gets its exit code, the time and the command's one sentence; a row still `running` becomes `stopped` (130, or
  0) or `failed` (any other code). Where the database cannot take that last word (a full disk, a folder made read-only,
  the file held too long by another process), it goes into the run's lock file beside the database, over bytes
  reserved when the run started (kernelbench_rl.ownership), and the next command that opens the store moves it into
  the row.
- **A run that died without a word** (SIGKILL, the OOM killer, a lost machine): its row still says `running`, and its
  lock, which the kernel let go with the process, names an owner that never let the run go. The first time a process
  opens the store (`Store.connect`, once per database and process), and whenever a run starts (`new_attempt`), such a
  row becomes `crashed`, with `ended_at` (when it was found) and `end_reason` (whose process, last written when, found
  by which command). A pipeline's Prefect flow runs are set to Crashed too (kernelbench_rl.prefect_marks).

`store/db.py` installs this module (`install`): the Store class it opens files with, and the hook that
`ownership.acquire` calls when a process takes a run. (So neither imports the other back.)
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from kernelbench_rl import ownership
from kernelbench_rl.store import runs

FOUND_BY: str | None = None  # the command this process runs ("`kernelbench-rl sql`"), set by the CLI's entry point
SWEEP_BUSY_TIMEOUT_S = 2.0  # a command that finds the file busy leaves the sweep to the next one
_PREVIOUS: dict[tuple[str, str], str] = {}  # (db real path, run id) -> how the attempt before this process's ended


def found_by() -> str:
    if FOUND_BY:
        return FOUND_BY
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    return f"process {os.getpid()} ({name})"


def _when(epoch: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(epoch)))
    except (TypeError, ValueError):
        return "an unknown time"


def _owner(row: dict[str, Any], record: dict[str, Any]) -> str:
    pid, host = row.get("owner_pid"), row.get("owner_host")
    if record.get("pid") and (pid is None or int(record["pid"]) == int(pid)):
        return f"process {record['pid']} on {record.get('host')}, its owner since {_when(record.get('started'))}"
    return f"process {pid} on {host}" if pid else "its owner process"


def crash_reason(row: dict[str, Any], record: dict[str, Any], finder: str | None = None) -> str:
    """One sentence: whose process is gone, what it last wrote when, and who found it."""
    finder = finder or found_by()
    last = row.get("updated_at")
    last_text = f"; the row was last written at {last:%Y-%m-%d %H:%M:%S}" if hasattr(last, "strftime") else ""
    if record.get("released"):
        return (f"Its owner ({_owner(row, record)}) let the run go at {_when(record['released'])} without recording "
                f"how it ended{last_text}; found by {finder}.")
    return (f"Its owner ({_owner(row, record)}) is gone without a word (killed, or its machine lost){last_text}; "
            f"found by {finder}, which saw the run's lock free.")


_STORE_CLASS: Any = None  # kernelbench_rl.store.db.Store, installed by that module


def install(store_class: Any) -> None:
    """Called once by store/db.py: the class that opens a database, and the hook a new owner of a run calls."""
    global _STORE_CLASS
    _STORE_CLASS = store_class
    ownership.on_new_owner(new_attempt)


def _store(db_path: str | os.PathLike[str], busy_timeout_s: float = SWEEP_BUSY_TIMEOUT_S) -> Any:
    return _STORE_CLASS(db_path, busy_timeout_s=busy_timeout_s)


def _end_from_record(store: Any, run_id: str, row: dict[str, Any] | None, record: dict[str, Any],
                     finder: str | None) -> dict[str, Any] | None:
    """Put a free lock's record into the run's row: the owner's last word (`ended`), else, for a row still `running`,
    `crashed`. Returns the ending written (None: nothing to write)."""
    ended = record.get("ended")
    if isinstance(ended, dict) and record.get("pid"):
        reason = ended.get("reason")
        note = "(said as it exited; written here by the next command, the database could not take it then)"
        written = runs.record_ending(
            store, run_id, int(record["pid"]), str(record.get("host") or ""), exit_code=ended.get("exit_code"),
            reason=f"{reason} {note}" if reason else note, status_if_running=str(ended.get("status") or "failed"),
            ended_at=ended.get("at"))
        return {"status": ended.get("status"), "exit_code": ended.get("exit_code")} if written else None
    if row is None:
        return None
    reason = crash_reason(row, record, finder)
    if runs.end_running(store, run_id, row.get("owner_pid"), status="crashed", reason=reason):
        return {"status": "crashed", "reason": reason}
    return None


def find_ended_runs(store: Any, *, every_running_row: bool = False, finder: str | None = None) -> list[dict[str, Any]]:
    """Runs whose owner is gone get their ending (see the module's docstring); returns the rows ended, each with
    `status` and `end_reason` added. Quick by default (what a store's first opening does): only the runs whose lock
    beside the database is free and still names an owner, so most calls read no row at all. `every_running_row`:
    every row that says `running` and that no live process owns (rows older than the lock records included)."""
    records = ownership.free_records(store.path)
    if not store.exists() or not (records or every_running_row):
        return []
    try:
        store.init()  # a write turn (the rows are written below) that also brings an older file's columns up to date
        rows = runs.running_rows(store, None if every_running_row else list(records))
    except Exception:  # noqa: BLE001 - no runs table, a file we cannot write or read now: the next command looks
        return []
    by_run = {row["run_id"]: row for row in rows}
    ended: list[dict[str, Any]] = []
    settled: list[str] = []
    try:
        for run_id in sorted(set(records) | set(by_run)):
            row = by_run.get(run_id)
            path, record = records.get(run_id, (None, {}))
            if path is None and ownership.is_owned(store.path, run_id):
                continue  # a live owner (a row without a lock record is only looked at in the thorough pass)
            ending = _end_from_record(store, run_id, row, record, finder)
            if path is not None:
                settled.append(run_id)
            if ending is not None and row is not None:
                ended.append({**row, **ending, "end_reason": ending.get("reason")})
    except Exception:  # noqa: BLE001 - the file went busy or unwritable mid-way: what was written stays
        pass
    for run_id in settled:  # told: the record has nothing more to say (unless a new owner wrote its own meanwhile)
        path, record = records[run_id]
        ownership.update_record(path, lambda now, was=record: {} if now == was else None, wait_s=0)
    _report_to_prefect(ended)
    return ended


def _report_to_prefect(ended: list[dict[str, Any]]) -> None:
    """Crashed pipelines' flow runs set to Crashed in Prefect (or kept in their Prefect home until an API is up)."""
    from kernelbench_rl import prefect_marks

    for row in ended:
        if row.get("status") == "crashed" and row.get("flow_run_id"):
            try:
                prefect_marks.report_crash(
                    str(row["flow_run_id"]), f"Crashed: {row['end_reason']}", api_url=row.get("prefect_api_url"),
                    home=row.get("prefect_home"))
            except Exception:  # noqa: BLE001 - Prefect's side is a courtesy: the store has the ending
                pass


def sweep_on_open(db_path: str | os.PathLike[str]) -> None:
    """A store's first opening in this process: the quick pass of `find_ended_runs`, then the Prefect marks waiting
    in this project's Prefect home, applied if a `serve` is up (a file's size looked at when none waits); never
    raising (the command's own opening says what is wrong with the file)."""
    try:
        find_ended_runs(_store(db_path))
        from kernelbench_rl import prefect_marks
        from kernelbench_rl.prefect_home import prefect_home

        prefect_marks.apply_waiting_marks({str(prefect_home())})
    except Exception:  # noqa: BLE001 - best effort
        pass


def new_attempt(db_path: str | os.PathLike[str], run_id: str, previous: dict[str, Any]) -> None:
    """A process takes the run (ownership.acquire): the attempt before it, if its lock record says it never let go or
    left its last word there, gets its ending in the row first; then the row's ending is cleared for this attempt.
    Never raises but a stop; a database that does not exist yet is not created."""
    if not Path(db_path).exists():
        return
    ended: list[dict[str, Any]] = []
    try:
        store = _store(db_path)
        with store.connect():
            if previous.get("pid"):
                row = next(iter(runs.running_rows(store, [run_id])), None)
                ending = _end_from_record(store, run_id, row, previous, None)
                if ending is not None:
                    _PREVIOUS[(os.path.realpath(db_path), run_id)] = (
                        f"its previous attempt ended {ending['status']}"
                        + (f": {ending['reason']}" if ending.get("reason") else ""))
                    if row is not None:
                        ended.append({**row, **ending, "end_reason": ending.get("reason")})
            runs.begin_attempt(store, run_id)
    except Exception:  # noqa: BLE001 - best effort: the run's own writes say what is wrong with the file
        pass
    _report_to_prefect(ended)


def previous_attempt(db_path: str | os.PathLike[str], run_id: str) -> str | None:
    """How the attempt before this process's ended, where this process found it on taking the run (else None)."""
    return _PREVIOUS.get((os.path.realpath(db_path), run_id))


def settle_at_exit(exit_code: int, reason: str | None) -> None:
    """Every run this process owned gets its ending (see the module's docstring); the runs it still holds are let go
    first. Never raises."""
    try:
        ownership.release_all()
    except Exception:  # noqa: BLE001
        pass
    status = "stopped" if exit_code in (0, 130) else "failed"
    pid, host = os.getpid(), socket.gethostname()

    def mine(record: dict[str, Any]) -> bool:
        return record.get("pid") == pid and record.get("host") == host

    for db_path, run_id in ownership.owned_runs():
        told = False
        try:
            if Path(db_path).exists():
                runs.record_ending(_store(db_path), run_id, pid, host, exit_code=exit_code, reason=reason,
                                   status_if_running=status)
                told = True
        except BaseException:  # noqa: BLE001 - a full disk, a read-only folder, a busy file: said beside it below
            told = False
        path = ownership.lock_path(db_path, run_id)
        if told:
            ownership.update_record(path, lambda record: {} if mine(record) else None, wait_s=0.2)
        else:
            last_word = {"status": status, "exit_code": exit_code, "reason": reason, "at": time.time()}
            ownership.update_record(path, lambda record: {**record, "ended": last_word} if mine(record) else None,
                                    wait_s=0.2)


# -- the pipeline's own row ----------------------------------------------------------------------------------------
def pipeline_started(db_path: str | os.PathLike[str], run_id: str, *, flow_run_id: str | None = None,
                     prefect_api_url: str | None = None, prefect_home: str | None = None) -> None:
    """The pipeline runs (again, after its training stage): its row says `running`, owned by this process, with its
    Prefect flow run and API where given, so that a crash found later is marked in Prefect too."""
    runs.pipeline_running(_store(db_path, 30.0), run_id, owner_pid=os.getpid(), owner_host=socket.gethostname(),
                          flow_run_id=flow_run_id, prefect_api_url=prefect_api_url, prefect_home=prefect_home)


def pipeline_ended(db_path: str | os.PathLike[str], run_id: str, *, stopped: bool = False,
                   error: BaseException | None = None) -> None:
    """The pipeline's ending in its row: finished, stopped (a stop) or failed (`error`, its sentence). A failure to
    write it is left to the exit (`settle_at_exit`), which keeps it beside the database if it must."""
    from kernelbench_rl.errors import UserError

    if stopped:
        status, reason, code = "stopped", None, 130
    elif error is not None:
        text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        status, reason = "failed", text if isinstance(error, UserError) else f"{type(error).__name__}: {text}"
        code = int(getattr(error, "exit_code", 1))
    else:
        status, reason, code = "finished", None, 0
    try:
        runs.pipeline_ended(_store(db_path), run_id, owner_pid=os.getpid(),
                            status=status, reason=reason, exit_code=code)
    except Exception:  # noqa: BLE001 - said at the exit, or beside the database
        pass
