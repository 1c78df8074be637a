"""Process-tree helpers for the tests that check no candidate outlives its worker (Linux /proc)."""

from __future__ import annotations

import os
import time


def _stat_fields(pid: int | str) -> list[str]:
    """/proc/<pid>/stat after the command name: state, ppid, ... (raises OSError once the pid is gone)."""
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """Running or sleeping; a zombie (exited, not yet reaped) counts as gone."""
    try:
        return _stat_fields(pid)[0] != "Z"
    except OSError:
        return False


def descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(_stat_fields(entry)[1])
            except (OSError, ValueError, IndexError):
                pass
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def still_alive_after(pids: set[int], timeout_s: float) -> list[int]:
    """Poll until every pid is gone or the timeout passes; the pids still alive then."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]
