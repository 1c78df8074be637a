"""The sibling child that runs a problem's reference beside the candidate when timings spread (candidate_timing.py).

Starting one (a sandbox, the problem's import, the model's construction) took about a second inside the
exclusive device section, and a problem whose timings spread pairs every candidate of it. So the last one
started stays resident for the next candidate of the same problem: one at a time (it holds up to
timing/decisions.PAIRED_MAX_BYTES beside the evaluations' budget), dropped when another problem pairs, when it
failed, or when a big evaluation needs the room.
"""

from __future__ import annotations

import secrets
import tempfile
import threading
import time
from typing import Any, Callable, Hashable

from kernelbench_rl.evaluation.worker import children, scheduling
from kernelbench_rl.evaluation.verdict.faults import Fault
from kernelbench_rl.evaluation.worker.children import START_TIMEOUT_S, Child


class ResidentReference:
    """At most one warm reference child, keyed by (problem, its source, precision)."""

    def __init__(self, retire: Callable[[Child, str], None]) -> None:
        self._retire = retire
        self._lock = threading.Lock()
        self._key: Hashable | None = None
        self._child: Child | None = None
        self._lent = False

    def take(self, key: Hashable) -> Child | None:
        """The resident child for `key`, lent until `give_back`; None when there is none (another key's is
        retired then, so a new one can take its place)."""
        with self._lock:
            child, self._child = self._child, None
            same = child is not None and self._key == key and child.process.is_alive()
            if same:
                self._lent = True
                self._child = child
                return child
            self._key = None
        if child is not None:
            self._retire(child, child.workdir)
        return None

    def give_back(self, key: Hashable, child: Child, healthy: bool) -> None:
        """Keep `child` for the next candidate of `key` if it served well; otherwise retire it."""
        with self._lock:
            self._lent = False
            if healthy and child.process.is_alive():
                if self._child is not None and self._child is not child:
                    old, self._child = self._child, None
                    self._retire(old, old.workdir)
                self._key, self._child = key, child
                return
            if self._child is child:
                self._key, self._child = None, None
        self._retire(child, child.workdir)

    def drop(self) -> None:
        """Retire the resident child (a big evaluation needs the room; the worker stops)."""
        with self._lock:
            if self._lent:
                return  # in use by the running timing; it is given back (and kept or retired) after it
            child, self._child, self._key = self._child, None, None
        if child is not None:
            self._retire(child, child.workdir)


def paired_key(state: Any, settings: Any, payload: dict[str, Any]) -> tuple[str, int, str, str]:
    """Which reference a paired child runs: the problem, its source, the precision and the size."""
    return (state.problem_id, hash(payload["problem_source"]), settings.precision, settings.size)


def start_reference_child(take_child: Callable[[], Child], retire: Callable[[Child, str], None],
                          make_job: Callable[..., dict[str, Any]], root: str, quiet_cores: set[int], state: Any,
                          settings: Any, payload: dict[str, Any], result: Any, deadline: float) -> Child | None:
    """A fresh child running the problem's reference (no candidate code in it), built and warm; None when it cannot
    start, which is ours (noted in the result) and leaves the solo baseline in place."""
    workdir = tempfile.mkdtemp(prefix="r-", dir=root)
    reference_child = take_child()
    reference_child.workdir = workdir
    scheduling.pin(reference_child.pid, quiet_cores)  # where the candidate's child times
    try:
        # The problem's own source, its Model under the candidate's name: the child's usual path runs it.
        job = make_job(workdir, payload["problem_source"] + "\n\nModelNew = Model\n", payload["problem_source"],
                       settings, state)
        children.send(reference_child, job, "starting the reference's sandbox")
        children.expect(reference_child, {"started"}, START_TIMEOUT_S, "starting the reference's sandbox")
        children.expect(reference_child, {"loaded"}, deadline - time.monotonic(), "importing the reference")
        children.send(reference_child, {"cmd": "build", "seed": state.init_seed}, "building the reference")
        children.expect(reference_child, {"built"}, deadline - time.monotonic(), "building the reference")
        # Its first forward (library handles, cuDNN's choice of algorithm) here, not in the first timed block:
        # started while a candidate's correctness runs, this is off the device's critical path.
        children.send(reference_child, {"cmd": "warm", "seed": secrets.randbits(31)}, "warming the reference")
        children.expect(reference_child, {"warmed"}, deadline - time.monotonic(), "warming the reference")
        return reference_child
    except Exception as exc:  # noqa: BLE001 - ours (a Fault from its child, or an OSError): time solo
        result.versions["timing_pairing_failed"] = (exc.message if isinstance(exc, Fault) else repr(exc))[:200]
    retire(reference_child, workdir)
    return None
