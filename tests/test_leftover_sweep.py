"""The leftover sweep (evaluation/worker/leftovers.py) on real processes, in this process: it plays the worker (a
child subreaper for the test's length) and forks a stand-in for a candidate's child (a session of its own, the
seccomp filter every child carries), which makes processes that try to get away. Each must be found and killed by
`sweep`, and counted as the candidate's own or as an orphan as its verdict needs. Forks only: no interpreter starts,
the whole file takes about a second.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

import pytest

from kernelbench_rl.evaluation.sandbox import sandbox
from kernelbench_rl.evaluation.worker import leftovers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreapers and /proc are Linux's")


def _state_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def _parents() -> dict[int, int]:
    """pid -> parent pid from /proc, read here (not by the module under test: the clean-up must not rest on it)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    found[int(entry)] = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return found


def _below_me() -> set[int]:
    parents, found, frontier = _parents(), set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


@pytest.fixture
def subreaper(monkeypatch):
    """This process adopts orphans below it for the test's length (as the worker does), and the sweep may signal only
    processes below it (a wrong sweep that would stop this process, or another one, fails instead). Afterwards every
    process the test left below it is killed and collected, whatever the sweep did (one stopped and never killed
    included), and adopting stops."""
    before = _below_me()

    def signal_below_only(pid: int, sig: int) -> None:
        assert pid in _below_me(), f"the sweep signalled {pid}, which is not below the test"
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    monkeypatch.setattr(leftovers, "_signal", signal_below_only)
    assert leftovers.adopt_orphans()
    try:
        yield
    finally:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = _below_me() - before
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, os.WNOHANG)
                except (ProcessLookupError, ChildProcessError):
                    pass
            time.sleep(0.005)
        ctypes.CDLL(None, use_errno=True).prctl(36, 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER off


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _child(plan: str, report: int) -> None:
    """The candidate's child: a session of its own and the filter, then `plan`. Writes the pids that must die, one
    line, and sleeps (a forked process of the test: it never returns into pytest)."""
    try:
        os.setsid()
        assert sandbox.block_sockets()
        me = os.getpid()
        if plan == "grandchild setsid after its parent died":
            ready_r, ready_w = os.pipe()
            middle = os.fork()
            if middle == 0:
                if os.fork() == 0:  # the grandchild: waits to be orphaned (adopted by the worker), then leaves
                    while os.getppid() == me or os.getppid() == middle:
                        time.sleep(0.002)
                    os.setsid()
                    if os.fork() == 0:  # and makes one more in its new session
                        time.sleep(30)
                        os._exit(0)
                    os.write(ready_w, f"{os.getpid()}\n".encode())
                    time.sleep(30)
                    os._exit(0)
                os._exit(0)  # the middle process dies at once
            os.waitpid(middle, 0)
            grandchild = int(os.read(ready_r, 64).split()[0])
            os.write(report, f"{grandchild}\n".encode())
        elif plan == "descendants in the session":
            pids = []
            for _ in range(2):
                pid = os.fork()
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                pids.append(pid)
            os.write(report, (" ".join(map(str, pids)) + "\n").encode())
        elif plan == "a child that leaves the session, a zombie and a sleeper":
            ready_r, ready_w = os.pipe()
            left = os.fork()
            if left == 0:  # leaves the child's session while the child lives: still its descendant
                os.setsid()
                os.write(ready_w, b"x")
                time.sleep(30)
                os._exit(0)
            os.read(ready_r, 1)
            zombie = os.fork()
            if zombie == 0:
                os._exit(0)  # never collected: the child does not wait
            sleeper = os.fork()
            if sleeper == 0:
                time.sleep(30)
                os._exit(0)
            while _state_of(zombie) != "Z":
                time.sleep(0.002)
            os.write(report, f"{left} {zombie} {sleeper}\n".encode())
        elif plan == "an orphan that died":
            middle = os.fork()
            if middle == 0:
                orphan = os.fork()
                if orphan == 0:
                    while os.getppid() == middle:
                        time.sleep(0.002)
                    os._exit(0)  # adopted by the worker, then dead: a zombie the worker must collect
                os.write(report, f"{orphan}\n".encode())
                os._exit(0)
            os.waitpid(middle, 0)
        elif plan == "dies leaving descendants":
            pids = []
            for _ in range(2):
                pid = os.fork()
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                pids.append(pid)
            os.write(report, (" ".join(map(str, pids)) + "\n").encode())
            os._exit(0)  # the child dies before its sweep: its processes are orphaned, adopted by the worker
        time.sleep(30)
    finally:
        os._exit(0)


def _start(plan: str) -> tuple[int, int, list[int]]:
    """(the forkserver's stand-in, the child it forked, the pids the child reported). The child is not this
    process's own, as in the worker, where the forkserver forks it."""
    report_r, report_w = os.pipe()
    server = os.fork()
    if server == 0:
        try:
            os.close(report_r)
            child = os.fork()
            if child == 0:
                _child(plan, report_w)
            os.write(report_w, f"{child} ".encode())
            time.sleep(30)
        finally:
            os._exit(0)
    os.close(report_w)
    with os.fdopen(report_r) as reader:
        child, *pids = (int(p) for p in reader.readline().split())
    return server, child, pids


def _settle(child: int, at_least: int) -> None:
    """Until the worker sees `at_least` processes below it besides the child's own (the fork's last step)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(_below_me()) < at_least:
        time.sleep(0.005)


def _finish(server: int, child: int) -> None:
    """Kill the stand-ins; the child, orphaned when the server dies, comes to this process to be collected."""
    for pid in (child, server):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.waitpid(server, 0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if os.waitpid(child, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            if not os.path.exists(f"/proc/{child}"):
                return
        time.sleep(0.005)


def test_a_grandchild_that_calls_setsid_after_its_parent_died_is_swept(subreaper):
    """fork, fork, the middle one exits, the grandchild (adopted by the worker) calls setsid() and forks once more:
    it is no descendant of the child and in no session of its, but it carries the filter and the worker adopted
    it, so the sweep stops and kills it with what it made, as orphans."""
    server, child, (grandchild,) = _start("grandchild setsid after its parent died")
    try:
        _settle(child, 4)  # the server, the child, the grandchild and its own child
        table = leftovers._table()
        assert table[grandchild][0] == os.getpid() and table[grandchild][2] == grandchild  # adopted, own session
        below = leftovers._below({grandchild}, table)
        assert len(below) == 1
        swept = leftovers.sweep(child)
        assert not _alive(grandchild) and not any(_alive(pid) for pid in below)
        assert grandchild in swept.pids and below <= swept.pids
        assert (swept.descendants, swept.orphans) == (0, 2)
        assert swept.survivors == [] and _alive(child)  # the child itself is not the sweep's
    finally:
        _finish(server, child)
    assert leftovers.reap({grandchild, *below}) == set()


def test_the_childs_own_descendants_are_counted_as_its_own(subreaper):
    server, child, pids = _start("descendants in the session")
    try:
        _settle(child, 4)
        swept = leftovers.sweep(child)
        assert (swept.descendants, swept.orphans, swept.total) == (2, 0, 2)
        assert set(pids) <= swept.pids and not any(_alive(pid) for pid in pids)
        assert _alive(child) and _alive(server)
    finally:
        _finish(server, child)


def test_what_a_child_made_before_it_died_stays_its_own(subreaper):
    """The child dies before its sweep: its processes, orphaned and adopted by the worker, keep its session and the
    filter, so they are counted as the candidate's own (its verdict says it left processes behind), not as orphans."""
    server, child, pids = _start("dies leaving descendants")
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_parents().get(pid) != os.getpid() for pid in pids):
            time.sleep(0.005)
        table = leftovers._table()
        assert all(table[pid][0] == os.getpid() and table[pid][2] == child for pid in pids)
        swept = leftovers.sweep(child)
        assert (swept.descendants, swept.orphans) == (2, 0)
        assert set(pids) <= swept.pids and not any(_alive(pid) for pid in pids)
    finally:
        _finish(server, child)


def test_an_unmarked_process_the_worker_adopted_is_left_alone(subreaper):
    """An orphan without the filter is the worker's own (a forkserver's helper): not swept."""
    ready_r, ready_w = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            if os.fork() == 0:
                os.write(ready_w, f"{os.getpid()}\n".encode())
                time.sleep(30)
        finally:
            os._exit(0)
    os.waitpid(middle, 0)
    orphan = int(os.read(ready_r, 64).split()[0])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _parents().get(orphan) != os.getpid():
            time.sleep(0.005)
        assert not leftovers.sandboxed(orphan)
        swept = leftovers.sweep(None)
        assert orphan not in swept.pids and _alive(orphan) and swept.total == 0
    finally:
        os.kill(orphan, signal.SIGKILL)
        os.waitpid(orphan, 0)


def test_what_left_the_session_under_a_live_child_is_its_own_and_zombies_are_not_counted(subreaper):
    """A child's child that called setsid() while the child lives is still its descendant; one already dead (a zombie
    the child never collected) is no live process to count."""
    server, child, (left, zombie, sleeper) = _start("a child that leaves the session, a zombie and a sleeper")
    try:
        _settle(child, 5)
        swept = leftovers.sweep(child)
        assert (swept.descendants, swept.orphans) == (2, 0)
        assert swept.pids == {left, sleeper}
        assert not _alive(left) and not _alive(sleeper) and _alive(child)
    finally:
        _finish(server, child)


def test_an_adopted_orphan_that_died_is_collected(subreaper):
    server, child, (orphan,) = _start("an orphan that died")
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (_parents().get(orphan) == os.getpid() and _state_of(orphan) == "Z"):
            time.sleep(0.005)
        assert _state_of(orphan) == "Z"
        swept = leftovers.sweep(child)
        assert swept.pids == {orphan} and swept.total == 0  # nothing alive to count, the dead one collected
        assert not os.path.exists(f"/proc/{orphan}")
    finally:
        _finish(server, child)


def test_processes_found_in_later_rounds_are_counted_and_killed_too(subreaper, monkeypatch):
    """A process the first look misses (made between the look and the stop) is found by the next round: every
    round's finds are added up and all of them are killed."""
    server, child, pids = _start("descendants in the session")
    real, calls = leftovers._table, []

    def first_look_misses_one():
        table = real()
        calls.append(1)
        if len(calls) == 1:
            table.pop(pids[1], None)
        return table

    monkeypatch.setattr(leftovers, "_table", first_look_misses_one)
    try:
        _settle(child, 4)
        swept = leftovers.sweep(child)
        assert len(calls) >= 3 and (swept.descendants, swept.orphans) == (2, 0)
        assert set(pids) <= swept.pids and not any(_alive(pid) for pid in pids)
    finally:
        _finish(server, child)


def test_the_process_table_reads_names_with_parentheses(subreaper):
    """A process may name itself anything (prctl PR_SET_NAME), brackets and state letters included: its parent,
    state and session are still read right."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            ctypes.CDLL(None).prctl(15, b"x) Z 1 1 (", 0, 0, 0)  # PR_SET_NAME
            os.write(ready_w, b"x")
            time.sleep(30)
        finally:
            os._exit(0)
    try:
        os.read(ready_r, 1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _state_of(pid) != "S":
            time.sleep(0.005)
        assert leftovers._table()[pid] == (os.getpid(), "S", os.getsid(0))
        assert leftovers._state(pid) == "S"
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert leftovers._state(pid) == "" and leftovers.sandboxed(pid) is False  # gone


def test_reaping_collects_what_died_as_ours_and_keeps_what_is_still_pending(subreaper, monkeypatch):
    # (named so: pyproject.toml's mutmut -k leaves out tests whose names hold the words dead and child together)
    alive = os.fork()
    if alive == 0:
        time.sleep(30)
        os._exit(0)
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    holder_r, holder_w = os.pipe()
    holder = os.fork()
    if holder == 0:  # makes two children and never collects them: zombies of another process
        try:
            first = os.fork()
            if first == 0:
                os._exit(0)
            other = os.fork()
            if other == 0:
                os._exit(0)
            os.write(holder_w, f"{first} {other}\n".encode())
            time.sleep(30)
        finally:
            os._exit(0)
    try:
        zombies = [int(p) for p in os.read(holder_r, 64).split()]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(_state_of(p) == "Z" for p in [dead, *zombies]):
            time.sleep(0.005)
        assert leftovers.reap({alive, dead, *zombies}) == {alive, *zombies}
        assert not os.path.exists(f"/proc/{dead}")
        monkeypatch.setattr(leftovers, "_DEATH_WAIT_S", 5.0)
        started = time.monotonic()
        assert leftovers._wait_dead({dead, *zombies}) == []  # gone or dead: nothing to wait for
        assert time.monotonic() - started < 1.0
    finally:
        for pid in (alive, holder):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_orphans_found_in_later_rounds_add_up(subreaper, monkeypatch):
    server, child, (grandchild,) = _start("grandchild setsid after its parent died")
    real, calls = leftovers._table, []
    try:
        _settle(child, 4)
        hidden = leftovers._below({grandchild}, real())

        def first_look_misses_its_child():
            table = real()
            calls.append(1)
            if len(calls) == 1:
                for pid in hidden:
                    table.pop(pid, None)
            return table

        monkeypatch.setattr(leftovers, "_table", first_look_misses_its_child)
        swept = leftovers.sweep(child)
        assert (swept.descendants, swept.orphans) == (0, 2) and len(hidden) == 1
    finally:
        _finish(server, child)
