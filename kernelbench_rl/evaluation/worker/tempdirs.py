"""The evaluator's temporary folders, named after the process that owns them, so stale ones can be swept.

A pool's home (`kbrl-eval-home-HOST-PID-…`, PID the orchestrator's) and each worker's root
(`kbrl-eval-worker-HOST-PID-…`, PID the worker's, holding its candidates' directories) are removed by
their owner when it stops normally. A process killed outright (SIGKILL, OOM, a lost machine) cannot, so
every pool sweeps, when it starts and when it replaces a dead worker, the folders of this user and host
whose owner is no longer running. Stdlib-only, in the worker's room: the worker names its root here, and the
pool (front/pool.py) sweeps with it.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile

PREFIX = "kbrl-eval-"
_NAME = re.compile(r"^kbrl-eval-(?P<kind>home|worker)-(?P<host>[A-Za-z0-9.]+)-(?P<pid>\d+)-[a-z0-9_]+$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:40] or "host"


def owned_tempdir(kind: str) -> str:
    """mkdtemp in the temporary directory, named for this process (kind: "home" or "worker")."""
    return tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-{_host()}-{os.getpid()}-")


def owner_pid(name: str) -> int | None:
    """The pid that owns a folder of this host by its name, or None (another host's, or not ours)."""
    match = _NAME.match(name)
    if match is None or match["host"] != _host():
        return None
    return int(match["pid"])


def sweep_stale(directory: str | None = None) -> list[str]:
    """Remove this user's evaluator folders on this host whose owner is dead; the paths removed."""
    from kernelbench_rl.ownership import pid_alive  # orchestrator side only: never called by a worker

    directory = directory or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        pid = owner_pid(name)
        if pid is None or pid == os.getpid() or pid_alive(pid):
            continue
        path = os.path.join(directory, name)
        try:
            if os.stat(path).st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
