"""Where the suite's time goes: wall and CPU per test, the CPU of every process a test starts included.

A pytest plugin, off unless asked for, and its report:

    PYTEST_ADDOPTS="-p tests.cpu_profile" CPU_PROFILE_OUT=/tmp/cpu make test
    .venv/bin/python tests/cpu_profile.py /tmp/cpu          # CPU by what tests start, files and tests by CPU, waiting

Each pytest process (each xdist worker, the alone part) moves itself into a cgroup of its own (cgroup v1 `cpuacct`,
where the process may create one: root on this project's CI and development machines), so a test's CPU counts its
evaluator workers, their zygotes and children, CLI subprocesses and servers, whether or not they were waited for.
Elsewhere it falls back to this process and the children it waited for (`getrusage`), which misses what is still
running or was never reaped. A test's row is its setup, call and teardown; a module fixture's start lands on the
file's first test. "Waiting" is wall minus CPU: sleeps, timeouts and polls that hold a worker while a core idles.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup/cpuacct")


class _Clock:
    """CPU seconds of this process's tree: its cgroup's counter, else getrusage of itself and its reaped children."""

    def __init__(self, name: str) -> None:
        self.group: Path | None = None
        self.home = CGROUP_ROOT  # the group this process came from, where it goes back before its own is removed
        try:
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                if "cpuacct" in controllers.split(","):
                    self.home = CGROUP_ROOT / path.lstrip("/")
        except OSError:
            pass
        group = CGROUP_ROOT / name
        try:
            group.mkdir(exist_ok=True)
        except OSError:
            return
        try:
            (group / "cgroup.procs").write_text(str(os.getpid()))
            self.group = group
        except OSError:  # made but not joinable: removed again, nothing left behind
            with contextlib.suppress(OSError):
                group.rmdir()

    @property
    def source(self) -> str:
        return "cgroup" if self.group is not None else "getrusage"

    def cpu_s(self) -> float:
        if self.group is not None:
            return int((self.group / "cpuacct.usage").read_text()) / 1e9
        own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


_state: dict = {}


def pytest_configure(config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _state.update(clock=_Clock(f"kbrl_tests_{worker}_{os.getpid()}"), worker=worker, rows={}, started=time.monotonic())
    _state["cpu0"] = _state["clock"].cpu_s()


def pytest_runtest_protocol(item, nextitem):  # noqa: ARG001 - pytest's hook signature
    clock = _state["clock"]
    wall, cpu = time.monotonic(), clock.cpu_s()
    heavy = item.get_closest_marker("heavy")
    _state["open"] = (item.nodeid, wall, cpu, heavy.kwargs.get("reason", "heavy") if heavy is not None else None)
    return None


def pytest_runtest_logfinish(nodeid, location) -> None:  # noqa: ARG001
    opened = _state.pop("open", None)
    if opened and opened[0] == nodeid:
        _state["rows"][nodeid] = [round(time.monotonic() - opened[1], 3), round(_state["clock"].cpu_s() - opened[2], 3),
                                  opened[3]]


def pytest_sessionfinish(session) -> None:  # noqa: ARG001
    out = Path(os.environ.get("CPU_PROFILE_OUT", "cpu_profile"))
    out.mkdir(parents=True, exist_ok=True)
    clock = _state["clock"]
    record = {"worker": _state["worker"], "source": clock.source,
              "wall_s": round(time.monotonic() - _state["started"], 1), "cpu_s": round(clock.cpu_s() - _state["cpu0"], 1),
              "tests": _state["rows"]}
    (out / f"{_state['worker']}-{os.getpid()}.json").write_text(json.dumps(record))


def pytest_unconfigure(config) -> None:  # noqa: ARG001
    """The cgroup goes once the session's fixtures have stopped what they started (an evaluator pool, a server): this
    process moves back home, and the group is removed when its last process has gone (within a few seconds; a
    process that outlives the session keeps it)."""
    clock = _state.get("clock")
    if clock is None or clock.group is None:
        return
    with contextlib.suppress(OSError):
        (clock.home / "cgroup.procs").write_text(str(os.getpid()))
    deadline = time.monotonic() + 5.0
    while True:
        try:
            clock.group.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)


def report(folder: Path, top: int = 25) -> str:
    """CPU by what the tests start (the fast tier, each kind of heavy test), files and tests by CPU, then tests by
    waiting, over every pytest process's file in `folder`."""
    from conftest import heavy_kind  # tests/ is on the path: this runs as `python tests/cpu_profile.py` or from tests
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    if not records:
        return f"no profile in {folder} (run pytest with -p tests.cpu_profile and CPU_PROFILE_OUT={folder})"
    tests = {k: v for r in records for k, v in r["tests"].items()}
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    kinds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for nodeid, (wall, cpu, *reason) in tests.items():
        for row in (kinds[heavy_kind(reason[0]) if reason else "(not recorded)"], files[nodeid.split("::")[0]]):
            row[0] += wall
            row[1] += cpu
            row[2] += 1
    lines = [f"{r['worker']}: {r['wall_s']} s wall, {r['cpu_s']} CPU-s ({r['source']})" for r in records]
    lines.append(f"all tests: {sum(v[1] for v in tests.values()):.0f} CPU-s, {sum(v[0] for v in tests.values()):.0f} s wall")
    total = sum(v[1] for v in kinds.values()) or 1.0
    lines.append("\nby what the tests start (tests/conftest.py: HEAVY_GROUPS, HEAVY_FIXTURES):")
    for name, (wall, cpu, n) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"  {cpu:7.1f} CPU-s {100 * cpu / total:3.0f}% {wall:7.1f} s wall {n:5d} tests  {name}")
    lines.append(f"\nfiles by CPU (top {top}):")
    for name, (wall, cpu, n) in sorted(files.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"  {cpu:7.1f} CPU-s {wall:7.1f} s wall {n:4d} tests  {name}")
    lines.append(f"\ntests by waiting, wall minus CPU (top {top}):")
    for nodeid, (wall, cpu, *_) in sorted(tests.items(), key=lambda kv: -(kv[1][0] - kv[1][1]))[:top]:
        lines.append(f"  {wall - cpu:7.1f} s waiting ({wall:.1f} s wall, {cpu:.1f} CPU-s)  {nodeid}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print("usage: python tests/cpu_profile.py FOLDER   (the CPU_PROFILE_OUT of a run with -p tests.cpu_profile)")
        sys.exit(0 if len(sys.argv) == 2 else 2)
    print(report(Path(sys.argv[1])))
