"""Prefect's temporary API server for a flow run started from the command line, owned by that command.

With no PREFECT_API_URL (no `kernelbench-rl serve` up, no server of the user's), Prefect starts a temporary API server
(uvicorn) as a child of the flow process. Left to Prefect, that child shares the terminal's foreground process group,
so a Ctrl-C stops it together with the flow, and the flow can no longer report how it ended (a traceback and exit 1
instead of the stop's one line). Started here instead, the same server:

- runs in a session of its own, so a terminal's SIGINT (sent to the whole foreground group) reaches only the flow
  process, which saves its state, reports the run and then stops the server itself;
- dies with the flow process if that one is killed outright (PR_SET_PDEATHSIG), so nothing is left behind;
- writes its output to `temporary-api.log` in PREFECT_HOME instead of the terminal (its tracebacks, e.g. of a full
  database, would bury the command's one sentence), which `api_failure` reads back to say what went wrong.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import logging
import os
import re
import resource
import signal
import subprocess
import time
import types
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kernelbench_rl.errors import ExitCode, UserError
from kernelbench_rl.store.files import DiskFullError, UnwritableError, min_free_bytes

LOG_NAME = "temporary-api.log"
_STARTUP_FAILED = 3  # uvicorn's exit code when its port is taken, or its app failed to start (its database, say)
DRAIN_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0
_PR_SET_PDEATHSIG = 1
_log_since: tuple[Path, int] | None = None  # the server's log file, and its size when this run's server started


def _die_with_parent(parent: int, prctl: Any) -> None:
    """In the server's child, before exec: SIGTERM when the process that started it ends (however it ends)."""
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:  # the parent was already gone before the request above took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _libc_prctl() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child only calls it
    except (OSError, AttributeError):
        return None


def _own_session_server_class() -> type:
    from prefect.server.api import server as server_module

    class OwnSessionServer(server_module.SubprocessASGIServer):
        """Prefect's SubprocessASGIServer (its command line: what Prefect runs as its temporary API), with the child
        started in a session of its own, bound to this process's life, writing to a log file, and started and
        stopped here (a server that fails to start is said at once; stopping it says nothing)."""

        log_path: Path | None = None

        def start(self, timeout: int | None = None) -> None:
            """Start the server and wait for its health check; a server that exits while starting (its database
            full or unwritable, say) is said at once, not after the whole startup timeout."""
            if self.running:
                return
            from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

            limit_s = timeout or PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()
            deadline, retries = time.monotonic() + limit_s, 5
            self.running = True
            try:
                self.server_process = self._run_uvicorn_command()
                atexit.register(self.stop)
                while not _healthy(self.api_url):
                    code = self.server_process.poll()
                    if code == _STARTUP_FAILED and _port_taken(self.port) and retries:
                        retries -= 1  # another process took the port first: another port
                        self.port = _free_port()
                        self.server_process = self._run_uvicorn_command()
                    elif code is not None:
                        raise ApiServerError(f"Prefect's temporary API server exited with code {code} while starting "
                                             f"(its log: {self.log_path}).")
                    elif time.monotonic() > deadline:
                        raise ApiServerError(f"Prefect's temporary API server did not answer within {limit_s:.0f} s "
                                             "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS; its log: "
                                             f"{self.log_path}).")
                    else:
                        time.sleep(0.2)
            except BaseException:
                self.stop()
                raise

        def stop(self) -> None:
            """Stop the server (SIGTERM, then SIGKILL after a grace period) and forget it; quietly."""
            process, self.server_process = self.server_process, None
            if process is not None:
                _signal_session(process, signal.SIGTERM)  # its session: the server and anything it started
                try:
                    process.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
                _signal_session(process, signal.SIGKILL)
                process.wait()
            if type(self)._instances.get(self._instance_key) is self:
                del type(self)._instances[self._instance_key]
            self.running = False

        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            output: Any = subprocess.DEVNULL
            if self.log_path is not None:
                try:
                    output = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it; ours is closed below
                except OSError:
                    output = subprocess.DEVNULL
            popen = functools.partial(subprocess.Popen, start_new_session=True, stdout=output,
                                      stderr=subprocess.STDOUT,
                                      preexec_fn=functools.partial(_die_with_parent, os.getpid(), _libc_prctl()))
            # Prefect's own command line, run through a Popen that adds the above: its module's `subprocess` name
            # points at a stand-in for the length of this call only (main thread, before any flow runs).
            stand_in = types.SimpleNamespace(**{name: getattr(subprocess, name) for name in dir(subprocess)
                                                if not name.startswith("__")})
            stand_in.Popen = popen
            real = server_module.subprocess
            server_module.subprocess = stand_in
            try:
                return super()._run_uvicorn_command()
            finally:
                server_module.subprocess = real
                if output is not subprocess.DEVNULL:
                    output.close()

    return OwnSessionServer


def _signal_session(process: subprocess.Popen[Any], signum: int) -> None:
    """Signal the process group the server leads (its own session's), or only the server if it leads none."""
    try:
        os.killpg(process.pid, signum)  # started with a session of its own, it leads a group of its number
    except (ProcessLookupError, PermissionError):
        if process.poll() is None:
            process.send_signal(signum)


class ApiServerError(UserError):
    """Prefect's temporary API server would not start (a server that failed: exit code 1)."""

    exit_code = ExitCode.FAILED


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as response:
            return response.status == 200
    except (OSError, ValueError):
        return False


def log_path(prefect_home: str | os.PathLike[str]) -> Path:
    return Path(prefect_home) / LOG_NAME


@contextlib.contextmanager
def temporary_api() -> Iterator[Any]:
    """The API the flow reports to: nothing to do when PREFECT_API_URL names one (yields None); otherwise Prefect's
    temporary server, started as the module says, stopped when the block ends (after the logs and events still
    queued for it are sent). Yields the server (its `server_process`, its `api_url`).

    A failure of that server whose cause is its database (full, or not writable) leaves the block as one sentence
    (DiskFullError, code 7; UnwritableError, code 6), and Prefect's own reports of the failure are kept off the
    console: its logs once an API call failed, and its log shipping's complaints (logging.raiseExceptions)."""
    import prefect.settings
    from prefect.exceptions import CancelledRun
    from prefect.server.api.server import SubprocessASGIServer

    if prefect.settings.PREFECT_API_URL.value() or not prefect.settings.PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        yield None
        return
    from prefect.settings import get_current_settings

    home = Path(get_current_settings().home)
    home.mkdir(parents=True, exist_ok=True)
    server = _own_session_server_class()(port=_free_port())
    server.log_path = log_path(home)
    global _log_since
    _log_since = (server.log_path, _size(server.log_path))  # what this run's server writes comes after it
    before = SubprocessASGIServer._instances.get(None)
    SubprocessASGIServer._instances[None] = server  # what Prefect's clients find when they want the temporary API
    raise_exceptions, logging.raiseExceptions = logging.raiseExceptions, False
    quiet_prefect_after_api_failure()
    try:
        server.start()
        with prefect.settings.temporary_settings(updates={prefect.settings.PREFECT_API_URL: server.api_url}):
            try:
                yield server
            finally:
                _drain_workers()
    except Exception as exc:
        if isinstance(exc, (CancelledRun, UserError)) and not isinstance(exc, ApiServerError):
            raise
        failure = api_failure(exc, server.server_process)  # while the server runs: its limits can be read
        if failure is None:
            raise
        raise failure from None
    finally:
        server.stop()
        logging.raiseExceptions = raise_exceptions
        if before is not None:
            SubprocessASGIServer._instances[None] = before
        else:
            SubprocessASGIServer._instances.pop(None, None)


class QuietAfterApiFailure(logging.Filter):
    """Drops a log record that carries a failed call to Prefect's API (an HTTP 5xx, a refused connection), and every
    record after it: the flow run is going down, and the command says why in one sentence."""

    failed = False

    def filter(self, record: logging.LogRecord) -> bool:
        if QuietAfterApiFailure.failed:
            return False
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and _api_call_failed(exc):
            QuietAfterApiFailure.failed = True
            return False
        return True


def quiet_prefect_after_api_failure() -> None:
    """Put QuietAfterApiFailure on every handler configured so far (Prefect's console handlers included)."""
    quiet = QuietAfterApiFailure()
    handlers = set(logging.getLogger().handlers)
    for logger in list(logging.root.manager.loggerDict.values()):
        handlers.update(getattr(logger, "handlers", []))
    for handler in handlers:
        if not any(isinstance(f, QuietAfterApiFailure) for f in handler.filters):
            handler.addFilter(quiet)


def _api_call_failed(exc: BaseException) -> bool:
    import httpx

    for link in _chain(exc):
        response = getattr(link, "response", None)
        if isinstance(link, httpx.HTTPStatusError) and response is not None and response.status_code >= 500:
            return True
        if isinstance(link, (httpx.ConnectError, httpx.RemoteProtocolError)):
            return True
    return False


def _chain(exc: BaseException) -> list[BaseException]:
    links: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in links):
        links.append(current)
        current = current.__cause__ or current.__context__
    return links


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_taken(port: int | None) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port or 0))
        except OSError:
            return True
    return False


def _drain_workers() -> None:
    """Send the logs and events still queued for the server before it stops (else they fail, loudly, at exit)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        with contextlib.suppress(Exception):
            worker.drain_all(timeout=DRAIN_TIMEOUT_S)


# -- what went wrong with the server ------------------------------------------------------------------------------

_FULL = re.compile(r"database or disk is full|no space left on device|file too large|disk quota exceeded", re.I)
_IO_ERROR = re.compile(r"disk I/O error", re.I)
_READ_ONLY = re.compile(r"attempt to write a readonly database|readonly database|permission denied", re.I)


def database_path() -> Path | None:
    """The file of Prefect's SQLite database (None: another database)."""
    from prefect.settings import get_current_settings

    url = get_current_settings().server.database.connection_url
    url = url.get_secret_value() if hasattr(url, "get_secret_value") else str(url or "")
    match = re.match(r"sqlite(?:\+\w+)?:///(.+)$", url)
    return Path(match.group(1)) if match else None


def api_failure(exc: BaseException, process: subprocess.Popen[Any] | None = None) -> UserError | None:
    """One sentence for a failed call to the temporary API (or a server that would not start) whose cause is its
    database: the disk or a file-size limit full, or a file it may not write (None: something else, or not a failure
    of the API). The evidence: SQLite's words in the server's log, or the database's files at the file-size limit
    (this process's or the server's, `process`) or on a disk below the free-space floor (KBRL_MIN_FREE_MB)."""
    from prefect.settings import get_current_settings

    if not (isinstance(exc, ApiServerError) or _api_call_failed(exc)):
        return None
    text = _chain_text(exc) + _server_log()
    db = database_path() or Path(get_current_settings().home) / "prefect.db"
    # SQLite says "disk I/O error" where a write failed for the file-size limit (EFBIG), and the file it grew is
    # often gone by now (its write-ahead log, removed when the server closed it).
    limited = _size_limit(process) is not None or _short_of_space(db)
    if _FULL.search(text) or (_IO_ERROR.search(text) and limited) or _at_size_limit(db, process) or _short_of_space(db):
        return DiskFullError(
            f"Prefect's database {db} could not be written: the disk or a file-size limit is full, so free some space "
            "(or raise the limit) and run the same command again to go on.")
    if _READ_ONLY.search(text):
        return UnwritableError(
            f"Prefect's database {db} could not be written, so make {db.parent} writable for this user or point "
            "PREFECT_HOME at another folder.")
    return None


def _server_log() -> str:
    """What this run's temporary server wrote to its log (its last 20 kB)."""
    if _log_since is None:
        return ""
    path, start = _log_since
    try:
        with open(path, "rb") as handle:
            handle.seek(max(start, _size(path) - 20000))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _chain_text(exc: BaseException) -> str:
    parts, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        response = getattr(current, "response", None)
        if response is not None:
            with contextlib.suppress(Exception):
                parts.append(str(response.text)[:4000])
        current = current.__cause__ or current.__context__
    return "\n".join(parts) + "\n"


def _size_limit(process: subprocess.Popen[Any] | None) -> int | None:
    """The smallest file-size limit (RLIMIT_FSIZE, `ulimit -f`) of this process and of the server (`process`, one set
    on the server alone included); None: none."""
    limits = [resource.getrlimit(resource.RLIMIT_FSIZE)[0]]
    if process is not None:
        with contextlib.suppress(OSError, ValueError):
            limits.append(resource.prlimit(process.pid, resource.RLIMIT_FSIZE)[0])
    finite = [limit for limit in limits if limit != resource.RLIM_INFINITY]
    return min(finite) if finite else None


def _at_size_limit(db: Path, process: subprocess.Popen[Any] | None) -> bool:
    """Whether a file of the database reaches the file-size limit."""
    limit = _size_limit(process)
    if limit is None:
        return False
    for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-journal")):
        with contextlib.suppress(OSError):
            if path.stat().st_size + 65536 >= limit:
                return True
    return False


def _short_of_space(db: Path) -> bool:
    import shutil

    floor = min_free_bytes()
    try:
        return floor > 0 and shutil.disk_usage(db.parent if db.parent.exists() else Path.cwd()).free < floor
    except OSError:
        return False
