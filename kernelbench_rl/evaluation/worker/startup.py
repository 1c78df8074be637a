"""The worker's start-up: where its seconds go, the zygote started early, and a private per-user cache.

A worker's start was one line of steps (imports, the same-uid probe, CUDA, the zygote's own imports,
the IPC self-test, the comparison kernel's build), 10-18 s on an H100. `Phases` records each step's
start and end so the ready event can say where the time went (steps overlap now); `start_zygote`
starts the forkserver as soon as its environment and uid are final, so its imports run beside the
worker's. What is kept across starts (the same-uid probe's result) is in kernelbench_rl/private_cache.py.

Standard library only: the worker's entry point (boot.py) uses it before torch is imported.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import time

# The folder `kernelbench_rl` imports from, whatever the working folder.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))))


def package_pythonpath() -> str:
    """PYTHONPATH for a process of ours started with `python -m kernelbench_rl...`: this package first, then what this
    process has."""
    return os.pathsep.join(filter(None, [PACKAGE_PARENT, os.environ.get("PYTHONPATH", "")]))


# What the zygote (the forkserver every candidate's child is forked from) imports once, up front.
ZYGOTE_PRELOAD = ["torch", "triton", "triton.language", "kernelbench_rl.evaluation.sandbox.child",
                  "kernelbench_rl.evaluation.sandbox.account_warmup"]


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
