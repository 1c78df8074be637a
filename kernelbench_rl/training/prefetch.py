"""A producer thread for asynchronous training: work for later steps runs while the caller trains.

Jobs run one at a time, in the order they were submitted, on one daemon thread (a daemon, so
that a Ctrl-C never waits for a half-done step's evaluation to end before the process can exit);
the caller takes their results in the same order. A job's exception is raised where its result is
taken, on the caller's thread. `stop()` sets `cancelled`, which a running job polls to end early,
and drops the jobs not started.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future, wait
from typing import Any


class Prefetcher:
    def __init__(self, name: str = "kbrl-prefetch") -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[tuple[Future, Callable[[], Any]] | None] = queue.SimpleQueue()
        self._pending: deque[tuple[Hashable, Future]] = deque()
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def pending(self) -> list[Hashable]:
        """Keys of the jobs submitted and not taken yet, in order."""
        return [key for key, _ in self._pending]

    def submit(self, key: Hashable, job: Callable[[], Any]) -> None:
        if self.cancelled:
            raise RuntimeError("the prefetcher was stopped")
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
            self._thread.start()
        future: Future = Future()
        self._pending.append((key, future))
        self._jobs.put((future, job))

    def take(self, key: Hashable, poll_s: float = 0.5) -> Any:
        """The result of the oldest pending job, which must be `key`; its exception is raised here."""
        if not self._pending or self._pending[0][0] != key:
            raise RuntimeError(f"the next prefetched job is {self.pending[:1]}, not {key!r}")
        _, future = self._pending[0]
        while not future.done():
            wait([future], timeout=poll_s)  # in short waits, so a signal's handler runs promptly
        self._pending.popleft()
        return future.result()

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Cancel what is pending and wait up to `timeout_s` for a running job to notice; True once idle."""
        self._cancel.set()
        for _, future in self._pending:
            future.cancel()  # a job not started never starts
        self._pending.clear()
        self._jobs.put(None)
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            future, job = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as exc:  # noqa: BLE001 - handed to the taker, raised on its thread
                future.set_exception(exc)
