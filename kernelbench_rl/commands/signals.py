"""SIGTERM as Ctrl-C for long commands: a supervisor's stop (systemd, Kubernetes, `kill PID`) ends a run the way a
person's Ctrl-C does, with its checkpoint saved and its status recorded, instead of killing it mid-write."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt in the main thread (where Ctrl-C's clean-up runs)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
