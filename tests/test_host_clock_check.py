"""The worker's clock against the times a candidate's process reports (decisions.host_clock_check), with the
figures an H200 recorded at KernelBench's real size for L1/19 (ReLU over 6 GiB of inputs a call), and the allocator
counts (timer.time_forward) that decide whether the check grants the loop's overhead any slack."""

from __future__ import annotations

import pytest

from host_clock import HOST_CLOCK
from kernelbench_rl.evaluation.sandbox import timer
from kernelbench_rl.evaluation.timing.decisions import (HOST_CLOCK_OVERHEAD_SHARE, HOST_CLOCK_RATIO,
                                                        HOST_CLOCK_SLACK_MS, BlockWall, host_clock_check,
                                                        host_retiming_confirms)

CALLS, WARMUP = 50, 3


def block(wall_ms_a_call: float, reported_ms: float, reached_malloc: int = 0, inputs_malloc: int = 0) -> BlockWall:
    """A block of CALLS timed calls (and WARMUP warm-ups) as the worker's clock saw it, with the child's diagnostics."""
    wall = BlockWall()
    wall.add(wall_ms_a_call * (CALLS + WARMUP) / 1000.0, CALLS + WARMUP, [reported_ms] * CALLS,
             {"timed_calls": CALLS, "calls_reaching_malloc": reached_malloc, "allocator_retries": 0,
              "inputs_reaching_malloc": inputs_malloc})
    return wall


# L1/19 on an H200: the reference's child reported 3.1519 ms a call; its block took 6.6037 ms a call on the worker's
# clock (fresh 6 GiB inputs and the L2 flush: 3.45 ms of overhead a call). None of its calls reached cudaMalloc.
REFERENCE = block(6.6037, 3.1519)
# fake_timing_report: the real ReLU, its reported times divided by three; 0/50 calls reached cudaMalloc either.
FAKE = block(6.1809, 1.0373)
# An honest kernel that memoises its last output (memoise_data_ptr) read 0.93x there: it holds 3 GiB more, so its
# calls reached cudaMalloc and its loop paid 2.5 ms a call more than the reference's, outside the events.
MEMO_REPORTED = 3.1519 / 0.93
MEMO = block(6.6037 + (MEMO_REPORTED + 2.5 - 3.1519), MEMO_REPORTED, reached_malloc=50, inputs_malloc=50)


class Confirm:
    """A stand-in for the host re-timing: what it reads, and how often it was asked."""

    def __init__(self, host_speedup: float | None, speedup: float) -> None:
        self.host_speedup, self.speedup, self.asked = host_speedup, speedup, 0

    def __call__(self) -> tuple[bool, str]:
        self.asked += 1
        return host_retiming_confirms(self.host_speedup, self.speedup)


def test_the_fake_on_the_h200_is_flagged_whatever_the_reference_overhead():
    disagrees, text = host_clock_check(FAKE, REFERENCE)
    assert disagrees and text.startswith("DISAGREES: ")
    assert "reported 1.0373 ms a call; the worker's clock implies 2.7291 ms" in text
    # What hid it: the reference's overhead share alone would have covered the gap.
    implied, reported = 2.7291, 1.0373
    overhead = REFERENCE.per_call_ms - REFERENCE.mean_ms
    assert HOST_CLOCK_RATIO * reported + HOST_CLOCK_SLACK_MS < implied
    assert implied < HOST_CLOCK_RATIO * reported + HOST_CLOCK_SLACK_MS + HOST_CLOCK_OVERHEAD_SHARE * overhead


def test_the_honest_memoising_kernel_keeps_its_verdict_once_the_host_clock_confirms_it():
    confirm = Confirm(host_speedup=0.91, speedup=0.93)
    disagrees, text = host_clock_check(MEMO, REFERENCE, confirm)
    assert not disagrees, text
    assert text.startswith("agrees with the allocator's slack") and "cudaMalloc reached 100 times in its 50 calls" in text
    assert confirm.asked == 1
    # Without the slack its own allocations would have flagged it.
    assert MEMO.per_call_ms - REFERENCE.per_call_ms + REFERENCE.mean_ms > HOST_CLOCK_RATIO * MEMO.mean_ms + HOST_CLOCK_SLACK_MS


def test_a_verdict_inside_the_strict_bound_is_not_re_timed():
    confirm = Confirm(host_speedup=None, speedup=1.0)
    honest = block(6.6037, 3.1519)  # identical code: identical walls
    assert host_clock_check(honest, REFERENCE, confirm) == (False, host_clock_check(honest, REFERENCE)[1])
    assert confirm.asked == 0


@pytest.mark.parametrize("host_speedup", [1.0, None])
def test_a_fake_that_claims_cudamalloc_calls_buys_only_a_host_re_timing(host_speedup):
    # Its diagnostics come from its own process: it can say every call reached cudaMalloc. The host clock then reads
    # the real ReLU (1.0x against 3.0x claimed), or nothing at all (its clock functions replaced): flagged either way.
    forged = block(6.1809, 1.0373, reached_malloc=50)
    confirm = Confirm(host_speedup=host_speedup, speedup=3.0)
    disagrees, text = host_clock_check(forged, REFERENCE, confirm)
    assert disagrees and text.startswith("DISAGREES but for the allocator's slack") and confirm.asked == 1
    # With no re-timing offered at all, the slack is not granted either.
    assert host_clock_check(forged, REFERENCE)[0] is True


def test_the_slack_needs_more_cudamalloc_than_the_reference_had():
    # A reference whose own calls reached cudaMalloc as often explains nothing about the kernel's overhead.
    allocating_reference = block(6.6037, 3.1519, reached_malloc=50, inputs_malloc=50)
    confirm = Confirm(host_speedup=0.91, speedup=0.93)
    assert host_clock_check(MEMO, allocating_reference, confirm)[0] is True
    assert confirm.asked == 0


def test_past_the_slack_nothing_is_re_timed():
    much_slower = block(6.6037 + 8.0, MEMO_REPORTED, reached_malloc=50)
    confirm = Confirm(host_speedup=0.91, speedup=0.93)
    assert host_clock_check(much_slower, REFERENCE, confirm)[0] is True
    assert confirm.asked == 0


def test_host_retiming_confirms_within_the_clock_ratio():
    assert host_retiming_confirms(2.0, 3.0)[0] is True  # 2.0 x 1.5 reaches 3.0
    assert host_retiming_confirms(1.9, 3.0)[0] is False
    assert host_retiming_confirms(None, 3.0)[0] is False
    assert host_retiming_confirms(1.0, None)[0] is False


def test_block_walls_count_cudamalloc_from_the_diagnostics_they_can_read():
    wall = BlockWall()
    wall.add(0.1, 12, [1.0] * 10, {"calls_reaching_malloc": 2, "inputs_reaching_malloc": 3})
    wall.add(0.1, 12, [1.0] * 10, {"calls_reaching_malloc": 1})
    assert wall.reached_malloc == 6 and wall.malloc_share == pytest.approx(0.3)
    unknown = BlockWall()
    unknown.add(0.1, 12, [1.0] * 10, {"calls_reaching_malloc": None, "inputs_reaching_malloc": "50"})
    unknown.add(0.1, 12, [1.0] * 10, None)
    unknown.add(0.1, 12, [1.0] * 10, {"calls_reaching_malloc": True, "inputs_reaching_malloc": -5})
    assert unknown.reached_malloc is None and unknown.malloc_share == 0.0


def test_time_forward_tells_the_inputs_reaching_cudamalloc_from_the_calls(monkeypatch):
    import torch

    mallocs = [0]

    def inputs_for_seed(seed: int) -> list:
        mallocs[0] += seed % 2  # odd seeds' inputs find no cached block
        return [torch.zeros(4)]

    def forward(x):
        mallocs[0] += int(x.sum().item() == 0 and forward.calls % 3 == 0)  # every third call allocates
        forward.calls += 1
        return x + 1

    forward.calls = 0
    monkeypatch.setattr(timer, "l2_flush_buffer", lambda device: torch.empty(16))
    monkeypatch.setattr(timer, "_allocator_counts", lambda device: lambda: (mallocs[0], 0))
    record = timer.time_forward(forward, inputs_for_seed, [1, 2, 3, 4, 5, 7], 0, "cpu", HOST_CLOCK)
    diag = record.diagnostics()
    assert diag["inputs_reaching_malloc"] == 4  # seeds 1, 3, 5, 7
    assert diag["calls_reaching_malloc"] == 2  # calls 0 and 3
    assert "4 calls' inputs did" in timer.describe_diagnostics({"kernel": diag})
