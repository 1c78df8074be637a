"""Taking turns on a DuckDB file across processes (store/db.py's connections go through it).

DuckDB lets no second process open a file another holds read-write, so every operation takes a turn: a sidecar lock
file (`<db>.lock`) with an "intent" lock in front of it, so a reader that arrives while a writer loops over batches
gets the next turn instead of starving. Also what DuckDB's own lock conflicts say (who holds the file).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

try:  # POSIX only; elsewhere we fall back to DuckDB's own lock plus retries.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


def lock_holder(exc: Exception) -> str | None:
    """'PID 1234' out of DuckDB's 'Conflicting lock is held in ... (PID 1234)', when present."""
    match = re.search(r"\(PID (\d+)\)", str(exc))
    return f"process {match.group(1)}" if match else None


def is_lock_conflict(exc: Exception) -> bool:
    text = str(exc).lower()
    return "lock" in text and ("conflict" in text or "could not set lock" in text)


# -- cross-process turn-taking ------------------------------------------------------------------
class FileGate:
    """Two flock()ed sidecar files around the DuckDB file.

    To take a turn a process holds `<db>.lock.intent` exclusively, then takes `<db>.lock` (shared for
    readers, exclusive for writers) and lets the intent go. A writer that just finished a batch must
    take the intent lock before its next one, and the waiter holding it is next in line: no starving.
    """

    def __init__(self, db_path: Path, exclusive: bool) -> None:
        self.main_path = db_path.with_name(db_path.name + ".lock")
        self.intent_path = db_path.with_name(db_path.name + ".lock.intent")
        self.exclusive = exclusive
        self._main_fd: int | None = None

    def acquire(self, deadline: float) -> bool:
        """True once the turn is ours; False at the deadline; True as well where flock is unavailable."""
        if fcntl is None:
            return True
        try:
            intent_fd = _open_lock_file(self.intent_path)
        except OSError:
            return True  # read-only directory: rely on DuckDB's own lock and the retries
        try:
            main_fd = _open_lock_file(self.main_path)
        except OSError:
            os.close(intent_fd)
            return True
        try:
            if not _flock_until(intent_fd, fcntl.LOCK_EX, deadline):
                os.close(main_fd)
                return False
            mode = fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH
            if not _flock_until(main_fd, mode, deadline):
                os.close(main_fd)
                return False
            self._main_fd = main_fd
            return True
        finally:
            os.close(intent_fd)  # closing releases the intent lock

    def release(self) -> None:
        if self._main_fd is not None:
            os.close(self._main_fd)
            self._main_fd = None


def _open_lock_file(path: Path) -> int:
    """flock() needs only a descriptor: read-only will do where another user created the file."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY)


def _flock_until(fd: int, mode: int, deadline: float) -> bool:
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
