"""The worker's wait for a child's answer: its deadline, and an answer that is already there when the deadline is.

A real pipe; the holder around it stands for a child (only its pipe, its kill and its memory figure are used)."""

from __future__ import annotations

import multiprocessing

import pytest

from kernelbench_rl.evaluation.sandbox import wire
from kernelbench_rl.evaluation.worker import children
from kernelbench_rl.evaluation.verdict.faults import Fault
from kernelbench_rl.evaluation.result import ErrorCategory


class _Holder:
    rss_limit_mb = None

    def __init__(self) -> None:
        self.conn, self.other_end = multiprocessing.Pipe()
        self.killed = False

    def kill(self) -> None:
        self.killed = True

    def rss_mb(self) -> float:
        return 0.0


def test_an_answer_waiting_at_the_deadline_is_taken():
    holder = _Holder()
    wire.send_json(holder.other_end, {"event": "timed", "times_ms": [1.0]})
    message = children.expect(holder, {"timed"}, -0.3, "timing")  # the deadline had passed on entry
    assert message["times_ms"] == [1.0] and not holder.killed


def test_no_answer_by_the_deadline_kills_and_says_how_long_it_had():
    holder = _Holder()
    with pytest.raises(Fault) as caught:
        children.expect(holder, {"timed"}, 0.2, "timing")
    assert holder.killed and caught.value.category == ErrorCategory.TIMEOUT
    assert caught.value.message == "timed out after 0.2 s while timing"


def test_a_deadline_passed_before_the_step_says_so_not_minus_zero():
    holder = _Holder()
    with pytest.raises(Fault) as caught:
        children.expect(holder, {"profiled"}, -1.7, "profiling")
    assert "-" not in caught.value.message and "had run out before this step began" in caught.value.message
    assert children.timeout_message(120.0, "timing") == "timed out after 120 s while timing"


def test_a_start_message_is_skipped_once_and_a_second_one_is_a_fault():
    """The child's first message says its start is over and is passed over; the same message again cannot keep the
    worker reading past its deadline."""
    holder = _Holder()
    wire.send_json(holder.other_end, {"event": "ready", "cuda_init_s": 0.2})
    wire.send_json(holder.other_end, {"event": "started"})
    assert children.expect(holder, {"started"}, 5.0, "starting the sandbox")["event"] == "started"
    wire.send_json(holder.other_end, {"event": "ready"})
    with pytest.raises(Fault) as caught:
        children.expect(holder, {"loaded"}, 5.0, "compiling/importing the kernel")
    assert caught.value.category == ErrorCategory.RUNTIME and "unexpected message 'ready'" in caught.value.message
