"""Results kept across processes, in a folder only this user can write: `PrivateCache`.

The same-uid probe's verdict (evaluation/worker/same_uid.py) and the problem audit of a problem set
(problems/audit.py) are worth seconds to minutes each and are the same from one process to the next while
the code and the inputs are: each is stored under a key that names both (`source_digest` over the code's
files), and an entry is trusted only if this user wrote it for exactly that key.

Standard library only: the evaluation worker's entry point uses it before torch is imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
import time
from typing import Any

CACHE_DIR_ENV = "KBRL_EVAL_CACHE_DIR"
MAX_ENTRY_BYTES = 64 << 10


def source_digest(paths: list[str]) -> str:
    """sha256 over these files' bytes (a missing file counts as empty): a cached result names the code behind it."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.encode() + b"\0")
        try:
            with open(path, "rb") as handle:
                digest.update(handle.read())
        except OSError:
            pass
    return digest.hexdigest()


def _temporary_root() -> str:
    """Where the temporary folder is, found without `tempfile.gettempdir`: that one is remembered for the process,
    and a root worker that is about to become unprivileged must not remember one that only root may write."""
    for name in ("TMPDIR", "TEMP", "TMP"):
        value = os.environ.get(name, "")
        if value and os.path.isdir(value):
            return value
    return "/tmp"


class PrivateCache:
    """JSON entries kept across processes, in a directory that only this effective uid may write.

    The directory is `$KBRL_EVAL_CACHE_DIR`, else `kbrl-cache-<euid>` in the temporary folder. It is
    used only if it is a real directory (not a link) owned by this uid with no group or other access;
    an entry is trusted only if it is a regular file owned by this uid that no one else may write, whose
    recorded key equals the one asked for, and which is younger than `max_age_s`. Anything else (a
    corrupt file, another user's, a stale one) is ignored, never trusted, and a later `put` replaces it.
    """

    def __init__(self, directory: str | None = None, max_age_s: float = 7 * 86400,
                 max_entry_bytes: int = MAX_ENTRY_BYTES) -> None:
        self.directory = directory or os.environ.get(CACHE_DIR_ENV) or os.path.join(
            _temporary_root(), f"kbrl-cache-{os.geteuid()}")
        self.max_age_s = max_age_s
        self.max_entry_bytes = max_entry_bytes  # a larger file is not read (nor trusted)
        self.refused = ""  # why the directory is not used ('' when it is)
        self.usable = self._prepare()

    def _prepare(self) -> bool:
        try:
            os.mkdir(self.directory, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            self.refused = f"cannot create {self.directory}: {exc.strerror}"
            return False
        try:
            info = os.lstat(self.directory)
        except OSError as exc:
            self.refused = f"cannot read {self.directory}: {exc.strerror}"
            return False
        if not stat.S_ISDIR(info.st_mode):
            self.refused = f"{self.directory} is not a directory"
        elif info.st_uid != os.geteuid():
            self.refused = f"{self.directory} belongs to uid {info.st_uid}, not {os.geteuid()}"
        elif info.st_mode & 0o077:
            self.refused = f"{self.directory} is open to others (mode {stat.S_IMODE(info.st_mode):o})"
        return not self.refused

    def _path(self, name: str) -> str:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]
        return os.path.join(self.directory, safe + ".json")

    def get(self, name: str, key: dict[str, Any]) -> dict[str, Any] | None:
        """The value stored under `name` for exactly `key`, or None (nothing there, or nothing to trust)."""
        if not self.usable:
            return None
        try:
            fd = os.open(self._path(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022
                    or info.st_size > self.max_entry_bytes):
                return None
            with os.fdopen(fd, "rb", closefd=False) as handle:
                entry = json.loads(handle.read(self.max_entry_bytes).decode())
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        finally:
            os.close(fd)
        if not isinstance(entry, dict) or entry.get("key") != key or not isinstance(entry.get("value"), dict):
            return None
        written = entry.get("written")
        if not isinstance(written, (int, float)) or not 0 <= time.time() - written <= self.max_age_s:
            return None
        return dict(entry["value"], written=written)

    def put(self, name: str, key: dict[str, Any], value: dict[str, Any]) -> bool:
        """Store atomically (a reader sees the old entry or the new one, never half of one); False if it could not."""
        if not self.usable:
            return False
        data = json.dumps({"key": key, "value": value, "written": time.time()}).encode()
        try:
            fd, temporary = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.chmod(temporary, 0o600)
                os.replace(temporary, self._path(name))
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        except OSError:
            return False
        return True

