"""One process owns a run at a time: a lock file per run, beside the database, naming its owner.

The lock is an flock() on `<db>.runs/<run id>.lock`, so the kernel lets it go when the owner dies,
however it dies (SIGKILL included): a lock left by a dead process is never in the way. The file
holds the owner's pid, host and start time, so a second process can say who holds the run.
Within one process the lock is re-entrant (the pipeline holds it around its curriculum flow).

The file is also the run's record of how its owner let go (kernelbench_rl/store/endings.py reads it): the owner's record
while it owns the run, `released` once it let go, and `ended` (status, exit code, sentence) where the command's last
word could not reach the database (a full disk, a folder made read-only, the file held by another process). A free
lock whose record names an owner that never let go is an owner that died without a word. The record is written over
the same reserved bytes each time, so a final word needs no new block on a full disk.
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
_OWNED: dict[str, tuple[str, str]] = {}  # lock path -> (db path, run id): every run this process has owned
_NEW_OWNER_HOOKS: list[Callable[[str | os.PathLike[str], str, dict[str, Any]], None]] = []
RESERVED_BYTES = 1024  # each lock file's record is padded to this size (blocks a later record overwrites in place)
ACQUIRE_WAIT_S = 1.0  # a lock held for a moment by another process's look at it (is_owned, a sweep) is waited for


def lock_path(db_path: str | os.PathLike[str], run_id: str) -> Path:
    db = Path(db_path)
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id) or "_"
    return db.with_name(db.name + ".runs") / f"{safe}.lock"


def read_owner(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text().strip() or "{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _read_fd(fd: int) -> dict[str, Any]:
    try:
        size = os.fstat(fd).st_size
        record = json.loads(os.pread(fd, max(size, 1), 0).decode(errors="replace").strip() or "{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _write_fd(fd: int, record: dict[str, Any]) -> None:
    """The record over the file's first bytes, padded with blanks to the reserved size (or the file's, if longer)."""
    data = json.dumps(record).encode() if record else b""
    size = max(RESERVED_BYTES, len(data), os.fstat(fd).st_size)
    os.pwrite(fd, data.ljust(size, b" "), 0)


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
            if not _lock_within(fd, path, ACQUIRE_WAIT_S):
                raise _busy(run_id, path)
            previous = _read_fd(fd)
        except BaseException:
            os.close(fd)
            raise
        _HELD[key] = (fd, 1)
    try:
        # An earlier owner that died without a word, or whose last word is here: its ending goes to the run's row
        # first (outside the lock above: the database's first opening in this process looks at the run locks);
        # then this attempt starts with no ending (store/endings.py's hook).
        for hook in list(_NEW_OWNER_HOOKS):
            hook(db_path, run_id, previous)
        _write_fd(fd, {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "run_id": run_id})
    except BaseException:
        with _HELD_LOCK:
            _HELD.pop(key, None)
        os.close(fd)
        raise
    with _HELD_LOCK:
        _OWNED[key] = (str(db_path), run_id)
    return path


def _lock_within(fd: int, path: Path, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while not _try_lock(fd, path):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


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
            record = _read_fd(fd)
            _write_fd(fd, {**record, "released": time.time()})  # let go: no live owner named any more
        except OSError:
            pass  # a file we can no longer write: the lock goes all the same
        finally:
            os.close(fd)  # closing releases the flock


def release_all() -> None:
    """Let go of every run this process still holds (at its exit)."""
    with _HELD_LOCK:
        held = [(_OWNED[key], depth) for key, (_, depth) in _HELD.items() if key in _OWNED]
    for (db_path, run_id), depth in held:
        for _ in range(depth):
            release(db_path, run_id)


def owned_runs() -> list[tuple[str, str]]:
    """(db path, run id) of every run this process has owned, held now or not."""
    with _HELD_LOCK:
        return list(_OWNED.values())


def update_record(path: Path, change: Callable[[dict[str, Any]], dict[str, Any] | None],
                  wait_s: float = ACQUIRE_WAIT_S) -> bool:
    """Rewrite a free lock file's record: `change(record)` gives the new one (None: leave it). False where a live
    owner holds the lock (or the file cannot be opened or written)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        if not _lock_within(fd, path, wait_s):
            return False
        new = change(_read_fd(fd))
        if new is not None:
            _write_fd(fd, new)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # also lets go of the lock


def free_records(db_path: str | os.PathLike[str]) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Run id -> (lock file, record) of every lock beside the database that no live process holds and whose record
    names an owner (a blank record has nothing to tell). Nothing is created."""
    folder = lock_path(db_path, "_").parent
    try:
        paths = sorted(folder.glob("*.lock"))
    except OSError:
        return {}
    found: dict[str, tuple[Path, dict[str, Any]]] = {}
    for path in paths:
        with _HELD_LOCK:
            if os.path.realpath(path) in _HELD:
                continue
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            continue
        try:
            if _try_lock(fd, path):
                record = _read_fd(fd)
                if record.get("run_id") and record.get("pid"):
                    found[str(record["run_id"])] = (path, record)
        finally:
            os.close(fd)
    return found


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


def on_new_owner(hook: Callable[[str | os.PathLike[str], str, dict[str, Any]], None]) -> None:
    """Call `hook(db_path, run_id, previous record)` whenever this process takes a run, before it names itself in the
    lock file (store/endings.py: the earlier attempt's ending, then a clean row for this one). Once per hook."""
    if hook not in _NEW_OWNER_HOOKS:
        _NEW_OWNER_HOOKS.append(hook)


def mark_interrupted_runs(store: Any) -> list[dict[str, Any]]:
    """Runs recorded as running whose owner is gone get their ending: `crashed` (or the last word the owner left
    beside the database); returns them (run_id, last_step, owner). Store.find_ended_runs (store/endings.py)."""
    return store.find_ended_runs(every_running_row=True)
