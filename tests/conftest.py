"""Shared test settings: offline, no telemetry, interpreter mode for Triton on CPU machines."""

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def pytest_sessionfinish(session, exitstatus):
    """A multiprocessing child a test left alive holds the interpreter at exit (multiprocessing joins its
    non-daemon children then): the run would hang after its summary. Kill such children and fail the run."""
    import multiprocessing

    left = []
    for child in multiprocessing.active_children():
        child.join(timeout=2.0)  # one being reaped right now is not a leak
        if child.is_alive():
            left.append(child)
            child.kill()
            child.join(timeout=5.0)
    if left:
        names = ", ".join(f"{child.name} (pid {child.pid})" for child in left)
        print(f"\nthe tests left {len(left)} child process(es) alive, killed now: {names}")
        session.exitstatus = 1


def pytest_unconfigure(config):
    """The run is over: should the interpreter's exit hang (a thread or process nobody stopped), print where every
    thread stands and exit non-zero after two minutes, instead of holding CI until its limit with nothing said."""
    import faulthandler
    import sys

    faulthandler.dump_traceback_later(120, exit=True, file=sys.__stderr__)
