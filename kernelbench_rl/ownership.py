"""One process owns a run at a time: a lock file per run, beside the database, naming its owner.

The lock is an flock() on `<db>.runs/<run id>.lock`, so the kernel lets it go when the owner dies,
however it dies (SIGKILL included): a lock left by a dead process is never in the way. The file
holds the owner's pid, host and start time, so a second process can say who holds the run.
Within one process the lock is re-entrant (the pipeline holds it around its curriculum flow).
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kernelbench_rl.errors import UserError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: fall back to pid checks only
    fcntl = None  # type: ignore[assignment]


class RunBusyError(UserError):
    """Another live process owns the run."""

    exit_code = 3


_HELD: dict[str, tuple[int, int]] = {}  # lock path -> (fd, depth) held by this process
_HELD_LOCK = threading.Lock()


def lock_path(db_path: str | os.PathLike[str], run_id: str) -> Path:
    db = Path(db_path)
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id) or "_"
    return db.with_name(db.name + ".runs") / f"{safe}.lock"


def read_owner(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}


def pid_alive(pid: int) -> bool:
    """Is a process with this pid running (on this host)?"""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(owner: dict[str, Any]) -> str:
    if not owner:
        return "another process"
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(owner.get("started", 0)))
    return f"process {owner.get('pid')} on {owner.get('host')} (since {since})"


def _busy(run_id: str, path: Path) -> RunBusyError:
    return RunBusyError(f"Run {run_id!r} is owned by {_describe(read_owner(path))}; wait for it to finish, "
                        f"or stop that process, then run again.")


def check_free(db_path: str | os.PathLike[str], run_id: str) -> None:
    """Raise RunBusyError now if another process owns the run (a launcher's early check; acquire() decides)."""
    path = lock_path(db_path, run_id)
    with _HELD_LOCK:
        mine = os.path.realpath(path) in _HELD
    if not mine and is_owned(db_path, run_id):
        raise _busy(run_id, path)


def acquire(db_path: str | os.PathLike[str], run_id: str) -> Path:
    """Own the run, or raise RunBusyError naming the live owner. Re-entrant within this process."""
    path = lock_path(db_path, run_id)
    key = os.path.realpath(path)
    with _HELD_LOCK:
        if key in _HELD:
            fd, depth = _HELD[key]
            _HELD[key] = (fd, depth + 1)
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            if not _try_lock(fd, path):
                raise _busy(run_id, path)
            owner = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "run_id": run_id}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(owner).encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        _HELD[key] = (fd, 1)
    return path


def _try_lock(fd: int, path: Path) -> bool:
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
    owner = read_owner(path)  # no flock: a live owner on this host holds it; anything else is stale
    return not (owner and owner.get("host") == socket.gethostname() and pid_alive(int(owner.get("pid", 0))))


def start_owned(db_path: str | os.PathLike[str], run_id: str, start: Callable[[], None]) -> None:
    """Own the run (acquire), then `start` it; a start that fails gives the run back before the error goes on."""
    acquire(db_path, run_id)
    try:
        start()
    except BaseException:
        release(db_path, run_id)
        raise


def release(db_path: str | os.PathLike[str], run_id: str) -> None:
    path = lock_path(db_path, run_id)
    key = os.path.realpath(path)
    with _HELD_LOCK:
        if key not in _HELD:
            return
        fd, depth = _HELD[key]
        if depth > 1:
            _HELD[key] = (fd, depth - 1)
            return
        del _HELD[key]
        try:
            os.ftruncate(fd, 0)  # no owner named once released
        finally:
            os.close(fd)  # closing releases the flock


@contextmanager
def owning(db_path: str | os.PathLike[str], run_id: str) -> Iterator[Path]:
    path = acquire(db_path, run_id)
    try:
        yield path
    finally:
        release(db_path, run_id)


def is_owned(db_path: str | os.PathLike[str], run_id: str) -> bool:
    """Whether a live process (this one included) owns the run now."""
    path = lock_path(db_path, run_id)
    if not path.exists():
        return False
    with _HELD_LOCK:
        if os.path.realpath(path) in _HELD:
            return True
    fd = os.open(path, os.O_RDWR)
    try:
        if not _try_lock(fd, path):
            return True
        return False
    finally:
        os.close(fd)  # also lets go of the probe's lock


def mark_interrupted_runs(store: Any) -> list[dict[str, Any]]:
    """Runs recorded as running whose owner is gone become `interrupted`; returns them (run_id, last_step, owner)."""
    if not store.exists():
        return []
    try:
        rows = store.dicts("SELECT run_id, last_step, owner_pid, owner_host FROM runs WHERE status = 'running'",
                           read_only=True)
    except Exception:  # noqa: BLE001 - no runs table yet (or a database of an older schema)
        return []
    gone = [row for row in rows if not is_owned(store.path, row["run_id"])]
    if gone:
        store.fetchall("UPDATE runs SET status = 'interrupted', updated_at = now() "
                       "WHERE status = 'running' AND run_id IN (SELECT unnest(?::VARCHAR[]))",
                       [[row["run_id"] for row in gone]])
    return gone
