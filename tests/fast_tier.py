"""The fast tier's guard, a pytest plugin: `make test-fast` loads it (`-p tests.fast_tier`).

While a test of the fast tier runs (its setup, call and teardown), starting any of what makes a test heavy raises
`HeavyStart` and fails the test, even where the code under test catches the exception:

- a subprocess running a Python interpreter or one of the console scripts that start one (`kernelbench-rl`,
  `prefect`, `uvicorn`, `dask*`): an evaluator worker, a Prefect API server, a command of our CLI;
- a multiprocessing process that starts an interpreter (the spawn and forkserver methods: an evaluator's zygote
  and the sandbox children it forks, a Dask worker, a process pool). A plain fork copies this interpreter and
  stays allowed.

A test that needs one of these belongs to the heavy tier: it uses a fixture listed in `HEAVY_FIXTURES`, or
`HEAVY` names its file or itself (tests/conftest.py), and `make test-fast` leaves it out. Subprocesses that are
no Python (git, a compiler) stay allowed.

`FAST_TIER_RECORD=PATH` records instead of raising: each start is appended to PATH as one line
(`nodeid<TAB>what`) and the test goes on, which is how a file's tier is found out.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.process
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent

# Console scripts that start a Python interpreter doing one of the heavy things.
HEAVY_PROGRAMS = ("kernelbench-rl", "prefect", "uvicorn", "dask", "dask-worker", "dask-scheduler")


class HeavyStart(RuntimeError):
    """A fast-tier test started an interpreter, a worker pool or a server."""


def heavy_command(args) -> str | None:
    """What a Popen command would start, where it is heavy (a Python interpreter or a console script of
    HEAVY_PROGRAMS, directly or through a shell string); None where it is not."""
    if isinstance(args, (str, bytes, os.PathLike)):
        text = os.fsdecode(args)
        words = text.split()
    else:
        words = [os.fsdecode(a) for a in args]
        text = " ".join(words)
    if not words:
        return None
    programs = {os.path.basename(word) for word in words}
    first = os.path.basename(words[0])
    if words[0] == sys.executable or first.startswith("python") or programs & set(HEAVY_PROGRAMS):
        return f"a subprocess: {text[:160]}"
    return None


class _Guard:
    def __init__(self, record_path: str | None) -> None:
        self.record_path = record_path
        self.nodeid = ""
        self.starts: list[str] = []

    def hit(self, what: str) -> None:
        self.starts.append(what)
        if self.record_path:
            with open(self.record_path, "a", encoding="utf-8") as out:
                out.write(f"{self.nodeid}\t{what}\n")
            return
        raise HeavyStart(f"the fast tier starts no interpreter, pool or server, and this test started {what} (a "
                         "heavy test uses a fixture of HEAVY_FIXTURES or has an entry in HEAVY: tests/conftest.py, "
                         "docs/testing.md)")


@contextmanager
def guarded(guard: _Guard):
    """Within: heavy starts go through `guard.hit` first."""
    popen_init = subprocess.Popen.__init__
    process_start = multiprocessing.process.BaseProcess.start

    def checked_popen_init(self, args, *rest, **kwargs):
        what = heavy_command(args)
        if what is not None:
            guard.hit(what)
        popen_init(self, args, *rest, **kwargs)

    def checked_process_start(self):
        method = getattr(self, "_start_method", None) or multiprocessing.get_start_method()
        if method != "fork":  # spawn and forkserver start an interpreter; a plain fork copies this one
            guard.hit(f"multiprocessing process ({method}): {self.name}")
        return process_start(self)

    subprocess.Popen.__init__ = checked_popen_init
    multiprocessing.process.BaseProcess.start = checked_process_start
    try:
        yield guard
    finally:
        subprocess.Popen.__init__ = popen_init
        multiprocessing.process.BaseProcess.start = process_start


_GUARD = _Guard(os.environ.get("FAST_TIER_RECORD") or None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Guard one test's setup, call and teardown, and nothing else (pytest-xdist's own workers start outside)."""
    _GUARD.nodeid = item.nodeid
    with guarded(_GUARD):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A phase that started something heavy fails, whether or not the code under test swallowed HeavyStart."""
    outcome = yield
    report = outcome.get_result()
    starts, _GUARD.starts[:] = list(_GUARD.starts), []
    if starts and not _GUARD.record_path and report.outcome != "failed":
        report.outcome = "failed"
        report.longrepr = ("the fast tier starts no interpreter, pool or server; this test started:\n  "
                           + "\n  ".join(starts))


def _heavy_files(config) -> frozenset[Path]:
    """The files tests/conftest.py lists as heavy as a whole."""
    for plugin in config.pluginmanager.get_plugins():
        if getattr(plugin, "__file__", None) and Path(plugin.__file__).resolve() == TESTS_DIR / "conftest.py":
            return frozenset(TESTS_DIR / entry for entry in plugin.HEAVY if "::" not in entry)
    return frozenset()


def pytest_ignore_collect(collection_path, config):
    """A file heavy as a whole is not even imported: each worker's collection is the shorter for it (its tests would
    be deselected all the same)."""
    if collection_path.suffix == ".py" and collection_path.resolve() in _heavy_files(config):
        return True
    return None
