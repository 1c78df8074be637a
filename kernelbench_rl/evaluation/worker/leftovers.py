"""Processes a candidate made, found and killed before its verdict goes back, wherever they went.

Killing a child's process group misses what it moved elsewhere: a process that called setsid() is in a session of
its own, and one whose parent exited (fork, setsid, fork, exit: a daemon) is no longer anybody's descendant. Two
facts find them all, for root and unprivileged workers alike:

- the worker is a child subreaper (PR_SET_CHILD_SUBREAPER): a process orphaned anywhere below it is adopted by the
  worker instead of init, so it stays in reach;
- every process a candidate makes inherits the child's seccomp filter (sandbox.block_sockets), which cannot be
  removed: `Seccomp: 2` in /proc/<pid>/status. The worker's own processes (forkserver, helpers) carry none.

A child is the leader of a session of its own (it calls setsid() first), and a process keeps its session when its
parent dies: what a candidate made counts as its own (`Swept.descendants`, what its verdict is judged by) when it
descends from the child or is a marked process of the child's session. The second covers a child that died before
its sweep (with its forkserver, whose death it follows): its children, orphaned and adopted by the worker, are still
its own. Only what left the session (setsid() again) counts as a mere orphan.

`sweep` stops every such process and every marked orphan the worker adopted (stopped processes cannot fork, so the
set stops growing), then kills them all. Linux only; elsewhere it finds nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from dataclasses import dataclass, field

_PR_SET_CHILD_SUBREAPER = 36
_ROUNDS = 50  # stop-and-look rounds: each stops what the last one found, so a fork bomb cannot outrun it long
_DEATH_WAIT_S = 20.0  # hundreds of torch-sized processes take seconds to tear down on a loaded host


def adopt_orphans() -> bool:
    """Make this process a child subreaper (orphans below it are adopted by it, not by init)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except Exception:  # noqa: BLE001
        return False


def _table() -> dict[int, tuple[int, str, int]]:
    """pid -> (parent pid, state letter, session id) of every process, from /proc."""
    table: dict[int, tuple[int, str, int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            table[int(entry)] = (int(fields[1]), fields[0], int(fields[3]))
        except (OSError, ValueError, IndexError):
            continue
    return table


def sandboxed(pid: int) -> bool:
    """Whether `pid` carries a seccomp filter (every process a candidate made does)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("Seccomp:"):
                    return line.split()[1] == "2"
    except (OSError, IndexError):
        pass
    return False


def _below(roots: set[int], table: dict[int, tuple[int, str, int]]) -> set[int]:
    found: set[int] = set()
    frontier = set(roots)
    while frontier:
        frontier = {pid for pid, (parent, *_) in table.items() if parent in frontier} - found
        found |= frontier
    return found


def _own(root: int, table: dict[int, tuple[int, str, int]]) -> set[int]:
    """What the child `root` made, alive or dead: its descendants, and the marked processes of its session (and
    theirs) that lost their parent. `root` itself is not included."""
    members = {pid for pid, (_, _, session) in table.items() if session == root and pid != root and sandboxed(pid)}
    return _below({root} | members, table) | members


@dataclass
class Swept:
    """What one sweep killed: the child's own descendants, and orphans adopted by the worker."""

    descendants: int = 0
    orphans: int = 0
    pids: set[int] = field(default_factory=set)
    survivors: list[int] = field(default_factory=list)  # still alive after the wait (uninterruptible sleep)

    @property
    def total(self) -> int:
        return self.descendants + self.orphans


def sweep(root: int | None) -> Swept:
    """Stop, then kill, every live descendant of `root` (not `root` itself) and every sandboxed process this
    process adopted, with their descendants. Returns once all of them are dead (or after a short wait)."""
    me = os.getpid()
    swept = Swept()
    stopped: set[int] = set()
    for _ in range(_ROUNDS):
        table = _table()
        family = _own(root, table) if root else set()
        adopted = {pid for pid, (parent, *_) in table.items() if parent == me and pid not in family and sandboxed(pid)}
        adopted |= _below(adopted, table) - family
        live = {pid for pid in family | adopted if table.get(pid, (0, "Z", 0))[1] not in ("Z", "X")}
        new = live - stopped
        if not new:
            break
        swept.descendants += len(new & family)
        swept.orphans += len(new - family)
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    # Dead ones this process adopted (a killed child's process group, say) are collected with them.
    zombies = {pid for pid, (parent, state, _) in _table().items() if parent == me and state == "Z" and sandboxed(pid)}
    swept.pids = stopped | zombies
    swept.survivors = _wait_dead(stopped)
    reap(swept.pids)
    return swept


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _wait_dead(pids: set[int]) -> list[int]:
    deadline = time.monotonic() + _DEATH_WAIT_S
    left = set(pids)
    while left:
        left = {pid for pid in left if _state(pid) not in ("", "Z", "X")}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.005)
    return sorted(left)


def reap(pids: set[int]) -> set[int]:
    """Collect those of `pids` that died as this process's children (adopted orphans); the pids still pending
    (dead, but their parent has not exited yet, so not ours to collect yet)."""
    pending = set()
    for pid in pids:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            if _state(pid) == "Z":  # another dead process's child: it comes to us once that one is collected
                pending.add(pid)
            continue
        if done == 0:
            pending.add(pid)
    return pending


SHARED_MEMORY = "/dev/shm"


def shared_memory_entries() -> set[str]:
    try:
        return set(os.listdir(SHARED_MEMORY))
    except OSError:
        return set()


def sweep_shared_memory(uid: int, keep: set[str], live: set[int]) -> list[str]:
    """Remove what candidates left in /dev/shm: every entry owned by `uid` (the children's) except those in `keep`
    (there before the pool's first child) and torch's CUDA IPC reference counts of children still alive
    (`torch_<pid>_...` for a pid in `live`). Returns what was removed. A child may write /dev/shm only where tensors
    cross over CUDA IPC (child._confine); without this, answers stored there outlived their candidate."""
    removed = []
    for name in shared_memory_entries() - keep:
        parts = name.split("_")
        if len(parts) > 2 and parts[0] == "torch" and parts[1].isdigit() and int(parts[1]) in live:
            continue
        path = os.path.join(SHARED_MEMORY, name)
        try:
            if os.lstat(path).st_uid != uid:
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                import shutil

                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
            removed.append(name)
        except OSError:
            continue
    return removed

