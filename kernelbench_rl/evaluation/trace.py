"""A timeline of an evaluation's steps, for finding where a device section's wall goes (off unless asked).

With KBRL_EVAL_TRACE=DIR the worker appends one JSON line per step to DIR/trace-<worker pid>.jsonl:
{"who": candidate, "pid": process, "step": name, "t0": start, "t1": end}. Times are `time.perf_counter()`, which
on Linux is the system-wide monotonic clock, so a child's steps (it cannot write outside its own folder: it sends
them back in its answers' headers) line up with the worker's. `bench/trace_timeline.py` draws and sums them.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from typing import Any, Iterator

TRACE_DIR = os.environ.get("KBRL_EVAL_TRACE", "").strip()

_lock = threading.Lock()
_pending: list[dict[str, Any]] = []
_thread = threading.local()  # the evaluation this thread serves, for steps deep in shared code (wire.py)


def enabled() -> bool:
    return bool(TRACE_DIR)


def record(who: str, step: str, t0: float, t1: float | None = None, pid: int | None = None) -> None:
    """One step of `who` from t0 to t1 (now when not given), in process `pid` (this one when not given)."""
    if not TRACE_DIR:
        return
    row = {"who": who, "pid": pid or os.getpid(), "step": step, "t0": round(t0, 6),
           "t1": round(time.perf_counter() if t1 is None else t1, 6)}
    with _lock:
        _pending.append(row)


def who_of(child: Any) -> str:
    """The evaluation a child serves, as the trace names it ("" when not tracing, or for a child never named)."""
    return str(getattr(child, "trace_who", "") or "") if TRACE_DIR else ""


def serve(who: str) -> None:
    """This thread works for `who` from now on (`here` records under it)."""
    _thread.who = who


def here(step: str, t0: float) -> None:
    """A step from t0 to now of the evaluation this thread serves."""
    if TRACE_DIR:
        record(getattr(_thread, "who", ""), step, t0)


@contextlib.contextmanager
def span(who: str, step: str) -> Iterator[None]:
    if not TRACE_DIR:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        record(who, step, t0)


def record_child(who: str, pid: int, header: dict[str, Any]) -> None:
    """The steps a child reported in an answer's header ("spans": [[step, t0, t1], ...])."""
    spans = header.get("spans") if TRACE_DIR else None
    if not isinstance(spans, list):
        return
    for item in spans[:64]:  # a child's header is untrusted: bounded, and only well-formed rows
        if (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                and all(isinstance(v, (int, float)) for v in item[1:])):
            record(who, "child_" + item[0][:40], float(item[1]), float(item[2]), pid=pid)


def flush() -> None:
    """What was recorded so far, appended to this process's file (the trace is a diagnostic: a failure to
    write it is dropped, never the evaluation's)."""
    if not TRACE_DIR:
        return
    with _lock:
        rows = list(_pending)
        _pending.clear()
    if not rows:
        return
    try:
        os.makedirs(TRACE_DIR, exist_ok=True)
        with open(os.path.join(TRACE_DIR, f"trace-{os.getpid()}.jsonl"), "a", encoding="utf-8") as out:
            out.write("".join(json.dumps(row) + "\n" for row in rows))
    except OSError:
        pass


class ChildSpans:
    """The child's side: steps kept in memory and handed back in the next answer's header."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.rows: list[list[Any]] = []

    def add(self, step: str, t0: float, t1: float | None = None) -> None:
        if self.on:
            self.rows.append([step, round(t0, 6), round(time.perf_counter() if t1 is None else t1, 6)])

    def take(self) -> dict[str, Any]:
        """{"spans": [...]} for a header (empty when off), and a fresh start."""
        if not self.on:
            return {}
        rows, self.rows = self.rows, []
        return {"spans": rows}
