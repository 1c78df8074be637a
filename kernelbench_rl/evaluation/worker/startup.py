"""The worker's start-up: where its seconds go, the zygote started early, and a private per-user cache.

A worker's start was one line of steps (imports, the same-uid probe, CUDA, the zygote's own imports,
the IPC self-test, the comparison kernel's build), 10-18 s on an H100. `Phases` records each step's
start and end so the ready event can say where the time went (steps overlap now); `start_zygote`
starts the forkserver as soon as its environment and uid are final, so its imports run beside the
worker's; `PrivateCache` keeps small results (the same-uid probe's) across starts in a directory only
this user can write, and trusts nothing in it that this user did not write.

Standard library only: the worker's entry point (boot.py) uses it before torch is imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import stat
import tempfile
import threading
import time
from typing import Any

# The folder `kernelbench_rl` imports from, whatever the working folder.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))))


def package_pythonpath() -> str:
    """PYTHONPATH for a process of ours started with `python -m kernelbench_rl...`: this package first, then what this
    process has."""
    return os.pathsep.join(filter(None, [PACKAGE_PARENT, os.environ.get("PYTHONPATH", "")]))


# What the zygote (the forkserver every candidate's child is forked from) imports once, up front.
ZYGOTE_PRELOAD = ["torch", "triton", "triton.language", "kernelbench_rl.evaluation.sandbox.child",
                  "kernelbench_rl.evaluation.sandbox.account_warmup"]
CACHE_DIR_ENV = "KBRL_EVAL_CACHE_DIR"
MAX_ENTRY_BYTES = 64 << 10


def process_age_s() -> float:
    """Seconds since this process was created (the interpreter's own start included); 0 where /proc says nothing."""
    try:
        with open("/proc/self/stat") as handle:
            started_ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        return max(0.0, uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


class Phases:
    """Named steps of the start, each with its start and end in seconds since the process was created."""

    def __init__(self) -> None:
        self.origin = time.perf_counter() - process_age_s()
        self._spans: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        self.add("interpreter", self.origin, time.perf_counter())  # exec to the first line of ours

    def add(self, name: str, start: float, end: float) -> None:
        with self._lock:
            self._spans[name] = (start, end)

    @contextlib.contextmanager
    def timed(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, start, time.perf_counter())

    def now(self) -> float:
        """Seconds since the process was created."""
        return time.perf_counter() - self.origin

    def seconds(self, names: set[str] | None = None) -> dict[str, float]:
        with self._lock:
            return {name: round(end - start, 4) for name, (start, end) in self._spans.items()
                    if names is None or name in names}

    def timeline(self, names: set[str] | None = None) -> dict[str, list[float]]:
        """{step: [start, end]} in seconds since the process was created: what ran beside what."""
        with self._lock:
            return {name: [round(start - self.origin, 4), round(end - self.origin, 4)]
                    for name, (start, end) in self._spans.items() if names is None or name in names}


def zygote_environment(device: str) -> None:
    """What the zygote inherits when it starts: Triton interprets on the CPU and compiles on a GPU."""
    os.environ.setdefault("TRITON_INTERPRET", "1" if device == "cpu" else "0")
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"


def start_zygote() -> None:
    """Start the forkserver now (it imports ZYGOTE_PRELOAD while this process goes on); a no-op if it runs.

    Call only once the environment and uid it must inherit are final: children are forked from it."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(ZYGOTE_PRELOAD)
    from multiprocessing import forkserver

    forkserver.ensure_running()


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
    """Small JSON entries kept across starts, in a directory that only this effective uid may write.

    The directory is `$KBRL_EVAL_CACHE_DIR`, else `kbrl-cache-<euid>` in the temporary folder. It is
    used only if it is a real directory (not a link) owned by this uid with no group or other access;
    an entry is trusted only if it is a regular file owned by this uid that no one else may write, whose
    recorded key equals the one asked for, and which is younger than `max_age_s`. Anything else (a
    corrupt file, another user's, a stale one) is ignored, never trusted, and a later `put` replaces it.
    """

    def __init__(self, directory: str | None = None, max_age_s: float = 7 * 86400) -> None:
        self.directory = directory or os.environ.get(CACHE_DIR_ENV) or os.path.join(
            _temporary_root(), f"kbrl-cache-{os.geteuid()}")
        self.max_age_s = max_age_s
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
                    or info.st_size > MAX_ENTRY_BYTES):
                return None
            with os.fdopen(fd, "rb", closefd=False) as handle:
                entry = json.loads(handle.read(MAX_ENTRY_BYTES).decode())
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

