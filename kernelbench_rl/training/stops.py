"""Stops that land between steps: a step's optimizer update, its rows and its checkpoint are one unit.

A stop (Ctrl-C, a supervisor's SIGTERM) that arrives while a step trains would otherwise leave the
optimizer's update applied (it runs on the policy's own thread) and the step unrecorded, so a stop
checkpoint named after the last recorded step would hold one update more than it names. Inside
`deferred_stop()` SIGINT and SIGTERM are only noted; when the block ends the handler that was in
place before (Python's Ctrl-C, a command's stop handler, an orchestrator's SIGTERM bridge) gets the
signal as if it had just arrived.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def is_stop(exc_type: type[BaseException] | None) -> bool:
    """Whether an exception leaving a run is a request to stop (Ctrl-C, SIGTERM through any handler, an
    orchestrator's termination signal, SystemExit) rather than a failure: every BaseException that is not an
    Exception."""
    return exc_type is not None and issubclass(exc_type, BaseException) and not issubclass(exc_type, Exception)


@contextlib.contextmanager
def deferred_stop() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM wait for its end (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []

    def note(signum: int, frame: Any) -> None:
        noted.append(signum)

    previous: dict[int, Any] = {}
    for signum in STOP_SIGNALS:
        handler = signal.getsignal(signum)
        if handler is None or handler == signal.SIG_IGN:
            continue  # installed outside Python, or ignored on purpose: left as it is
        previous[signum] = signal.signal(signum, note)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if noted:
            # The handler in place before acts now, once, as if the signal had arrived at this moment.
            signal.raise_signal(noted[0])
