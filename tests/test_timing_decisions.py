"""What a candidate's timing says, decided from plain numbers (timing/decisions.py, timing/floor.py): the worker's clock
against the reported times, the speedup and its direction, an excessive speedup's re-timing, the profiled work share
and the profile against the timed calls, the floor. Each decision is driven here with synthetic measurements, on
both sides of its boundary; the GPU tests check only the measuring (worker/candidate_timing.py)."""

from __future__ import annotations

import pytest

from kernelbench_rl.evaluation.result import Flag
from kernelbench_rl.evaluation.sandbox.timer import TimingRecord
from kernelbench_rl.evaluation.timing import floor as floors
from kernelbench_rl.evaluation.timing.decisions import (HOST_CLOCK_RATIO, HOST_CLOCK_SLACK_MS, HOST_CONFIRM_FRACTION,
                                                        LOW_KERNEL_SHARE, PROFILE_TIMED_FACTOR, TOKEN_KERNEL_SHARE,
                                                        BlockWall, clock_verdict, excessive_speedup_flags,
                                                        profile_verdict, profiled_gpu_ms, speedup_of, timed_sides)

CALLS = 50
CLOCK_FLAGS = [Flag.CLOCK_DISAGREES.value, Flag.HACK.value]

TRITON_SOURCE = """
import triton
import triton.language as tl

@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pass

class ModelNew:
    pass
"""

CUDA_SOURCE = '''
source = """
__global__ void scale_kernel(float* x, int n) {}
"""

class ModelNew:
    pass
'''


def walls(wall_ms_a_call: float, reported_ms: float, reached_malloc: int = 0) -> BlockWall:
    """CALLS timed calls as the worker's clock saw them (`wall_ms_a_call` each) and as the child reported them."""
    wall = BlockWall()
    wall.add(wall_ms_a_call * CALLS / 1000.0, CALLS, [reported_ms] * CALLS,
             {"calls_reaching_malloc": reached_malloc, "inputs_reaching_malloc": 0})
    return wall


# The reference: 1.0 ms reported, 1.8 ms a call on the worker's clock (0.8 ms of loop overhead a call).
REFERENCE = walls(1.8, 1.0)


class TestTheWorkersClock:
    def test_reported_times_the_workers_clock_cannot_explain_are_a_hack(self):
        # Reports 0.3 ms a call; its wall says 1.8 ms, like the reference's: the clock implies 1.0 ms.
        flags, note = clock_verdict(walls(1.8, 0.3), REFERENCE)
        assert flags == CLOCK_FLAGS
        assert note.startswith("DISAGREES: reported 0.3000 ms a call; the worker's clock implies 1.0000 ms")

    def test_an_honest_faster_kernel_agrees(self):
        flags, note = clock_verdict(walls(1.3, 0.5), REFERENCE)  # really 0.5 ms: its wall is 0.5 ms shorter
        assert flags == [] and note.startswith("agrees: ")

    def test_the_bound_is_the_ratio_and_the_slack_over_the_reported_time(self):
        reported = 0.5
        bound = HOST_CLOCK_RATIO * reported + HOST_CLOCK_SLACK_MS  # the implied time may reach this, not pass it
        overhead = REFERENCE.per_call_ms - REFERENCE.mean_ms
        inside = walls(bound + overhead - 1e-6, reported)
        outside = walls(bound + overhead + 1e-6, reported)
        assert clock_verdict(inside, REFERENCE)[0] == []
        assert clock_verdict(outside, REFERENCE)[0] == CLOCK_FLAGS

    def test_nothing_to_compare_against_is_no_flag(self):
        assert clock_verdict(walls(1.8, 0.3), None) == ([], "not checked: no timed calls on the worker's clock")
        assert clock_verdict(BlockWall(), REFERENCE)[0] == []

    def test_the_allocators_slack_stands_only_where_the_host_re_timing_confirms_it(self):
        # Its calls reached cudaMalloc (the reference's did not) and the clock implies 0.4 ms over the bound, within
        # half the reference's 0.8 ms overhead: the slack applies, if the host re-timing confirms.
        kernel = walls(0.8 + HOST_CLOCK_RATIO * 0.5 + HOST_CLOCK_SLACK_MS + 0.4, 0.5, reached_malloc=CALLS)
        asked = []

        def confirm(answer: bool):
            def ask():
                asked.append(answer)
                return answer, "re-timed"
            return ask

        assert clock_verdict(kernel, REFERENCE, confirm(True))[0] == []
        flags, note = clock_verdict(kernel, REFERENCE, confirm(False))
        assert flags == CLOCK_FLAGS and note.startswith("DISAGREES but for the allocator's slack")
        assert clock_verdict(kernel, REFERENCE)[0] == CLOCK_FLAGS  # no re-timing offered: no slack
        assert asked == [True, False]
        # Without the allocator's explanation, no re-timing is asked for: the disagreement stands.
        assert clock_verdict(walls(0.8 + HOST_CLOCK_RATIO * 0.5 + HOST_CLOCK_SLACK_MS + 0.4, 0.5), REFERENCE,
                             confirm(True))[0] == CLOCK_FLAGS
        assert asked == [True, False]


class TestTheSpeedup:
    def test_a_reference_slower_than_the_candidate_is_a_speedup_above_one(self):
        assert speedup_of(2.0, 1.0) == 2.0
        assert speedup_of(1.0, 2.0) == 0.5
        assert speedup_of(1.5, 1.5) == 1.0

    def test_no_time_for_the_candidate_is_no_speedup(self):
        assert speedup_of(1.0, 0.0) is None
        assert speedup_of(1.0, -1.0) is None

    def test_solo_the_candidate_is_judged_against_the_baseline(self):
        sides = timed_sides(TimingRecord(times_ms=[1.0, 1.0, 2.0, 1.0, 1.0]), 3.0)
        assert (sides.runtime_ms, sides.baseline_ms, sides.speedup) == (1.0, 3.0, 3.0)
        assert sides.runtime_spread_ms == TimingRecord(times_ms=[1.0, 1.0, 2.0, 1.0, 1.0]).iqr_ms

    def test_side_by_side_the_references_side_stands_for_the_baseline(self):
        kernel = TimingRecord(times_ms=[2.0, 2.0, 2.0])
        sides = timed_sides(kernel, 3.0, TimingRecord(times_ms=[1.0, 1.0, 1.0]))
        assert (sides.baseline_ms, sides.speedup) == (1.0, 0.5)  # the kernel is slower than the reference beside it
        assert timed_sides(kernel, 3.0, TimingRecord(times_ms=[])).baseline_ms == 3.0  # an empty side: the baseline


class TestAnExcessiveSpeedup:
    def test_at_the_threshold_nothing_is_flagged_and_nothing_re_timed(self):
        asked = []
        assert excessive_speedup_flags(10.0, 10.0, lambda: asked.append(1) or 10.0) == []
        assert excessive_speedup_flags(None, 10.0, lambda: asked.append(1) or 10.0) == []
        assert asked == []

    def test_past_it_the_host_clock_must_read_a_fraction_of_it(self):
        flagged = [Flag.EXCESSIVE_SPEEDUP.value, Flag.NEEDS_REVERIFICATION.value]
        speedup = 20.0
        assert excessive_speedup_flags(speedup, 10.0, lambda: HOST_CONFIRM_FRACTION * speedup) == (
            flagged + [Flag.REVERIFIED.value])
        assert excessive_speedup_flags(speedup, 10.0, lambda: HOST_CONFIRM_FRACTION * speedup - 0.01) == flagged
        assert excessive_speedup_flags(speedup, 10.0, lambda: None) == flagged


def profile(rows: list[list], launches: dict[str, int] | None = None) -> dict:
    header: dict = {"kernels": rows}
    if launches is not None:
        header["launches"] = launches
    return header


def own_and_library(own_us: float, library_us: float) -> dict:
    """A Triton forward whose own relu_kernel (launched once) took `own_us` beside `library_us` of a library's."""
    return profile([["relu_kernel", 1, own_us], ["at::native::vectorized_elementwise_kernel", 1, library_us]],
                   {"relu_kernel": 1})


class TestTheProfiledWorkShare:
    def test_a_low_own_share_is_doubt_and_a_token_one_a_hack(self):
        low = profile_verdict([own_and_library(300.0, 700.0)], TRITON_SOURCE, "triton", 1.0)
        assert low.share == pytest.approx(0.3) and low.launches == 1
        assert low.flags == [Flag.LOW_KERNEL_SHARE.value]
        token = profile_verdict([own_and_library(50.0, 950.0)], TRITON_SOURCE, "triton", 1.0)
        assert token.flags == [Flag.LOW_KERNEL_SHARE.value, Flag.HACK.value]
        assert profile_verdict([own_and_library(900.0, 100.0)], TRITON_SOURCE, "triton", 1.0).flags == []

    def test_the_share_boundaries(self):
        # LOW_KERNEL_SHARE itself is enough; TOKEN_KERNEL_SHARE itself is doubt, not a hack.
        at_low = profile_verdict([own_and_library(LOW_KERNEL_SHARE * 1000, (1 - LOW_KERNEL_SHARE) * 1000)],
                                 TRITON_SOURCE, "triton", 1.0)
        assert at_low.share == LOW_KERNEL_SHARE and at_low.flags == []
        at_token = profile_verdict([own_and_library(TOKEN_KERNEL_SHARE * 1000, (1 - TOKEN_KERNEL_SHARE) * 1000)],
                                   TRITON_SOURCE, "triton", 1.0)
        assert at_token.share == pytest.approx(TOKEN_KERNEL_SHARE) and at_token.flags == [Flag.LOW_KERNEL_SHARE.value]

    def test_no_own_launch_is_a_hack(self):
        library_only = profile([["at::native::vectorized_elementwise_kernel", 1, 1000.0]], {})
        judged = profile_verdict([library_only], TRITON_SOURCE, "triton", 1.0)
        assert (judged.launches, judged.share) == (0, 0.0)
        assert judged.flags == [Flag.BACKEND_NOT_USED.value, Flag.HACK.value]

    def test_a_triton_kernel_is_credited_by_its_launch_record_not_its_name(self):
        named_only = own_and_library(900.0, 100.0)
        named_only["launches"] = {}  # an event named like its kernel, which the child never launched
        judged = profile_verdict([named_only], TRITON_SOURCE, "triton", 1.0)
        assert judged.launches == 0 and Flag.HACK.value in judged.flags
        assert judged.credit == "by launch record, 1 profiled forward(s)"

    def test_a_cuda_kernel_is_credited_by_name(self):
        rows = [["scale_kernel(float*, int)", 2, 600.0], ["cublasSgemm", 1, 400.0]]
        judged = profile_verdict([profile(rows)], CUDA_SOURCE, "cuda", 1.0)
        assert (judged.launches, judged.share, judged.flags) == (2, 0.6, [])
        assert judged.credit == "by name, 1 profiled forward(s)"

    def test_the_worst_profiled_forward_decides(self):
        good, bad = own_and_library(900.0, 100.0), own_and_library(200.0, 800.0)
        judged = profile_verdict([good, bad], TRITON_SOURCE, "triton", 1.0)
        assert judged.share == pytest.approx(0.2) and judged.kernel_rows is bad["kernels"]
        assert judged.flags == [Flag.LOW_KERNEL_SHARE.value]
        assert judged.credit.endswith("2 profiled forward(s)")

    def test_nothing_measured_is_no_verdict(self):
        assert profile_verdict([], TRITON_SOURCE, "triton", 1.0) is None
        assert profile_verdict([{"error": "profiler failed"}], TRITON_SOURCE, "triton", 1.0) is None


class TestTheProfileAgainstTheTimedCalls:
    def test_more_work_profiled_than_timed_disagrees(self):
        # 1.0 ms of GPU work profiled (900 + 100 us); the timed calls took 0.5 ms.
        judged = profile_verdict([own_and_library(900.0, 100.0)], TRITON_SOURCE, "triton", 0.5)
        assert judged.flags == [Flag.PROFILE_DISAGREES.value]
        assert judged.profile_vs_timed.endswith("(2.00x): disagrees")

    def test_at_the_factor_it_agrees(self):
        runtime_ms = 1.0 / PROFILE_TIMED_FACTOR
        judged = profile_verdict([own_and_library(900.0, 100.0)], TRITON_SOURCE, "triton", runtime_ms)
        assert Flag.PROFILE_DISAGREES.value not in judged.flags
        judged = profile_verdict([own_and_library(900.0, 100.0)], TRITON_SOURCE, "triton", runtime_ms - 0.01)
        assert Flag.PROFILE_DISAGREES.value in judged.flags

    def test_the_most_work_among_the_profiled_forwards_is_compared(self):
        light, heavy = own_and_library(450.0, 50.0), own_and_library(2700.0, 300.0)
        assert profiled_gpu_ms(heavy["kernels"]) == 3.0
        judged = profile_verdict([light, heavy], TRITON_SOURCE, "triton", 1.0)
        assert Flag.PROFILE_DISAGREES.value in judged.flags
        assert "profiled 3.0000 ms of GPU work against 1.0000 ms timed" in judged.profile_vs_timed

    def test_nothing_timed_is_nothing_to_compare(self):
        judged = profile_verdict([own_and_library(900.0, 100.0)], TRITON_SOURCE, "triton", None)
        assert judged.flags == [] and judged.profile_vs_timed.endswith("nothing timed")


def a_floor(floor_ms: float) -> floors.Floor:
    return floors.Floor(gpu="NVIDIA H100 80GB HBM3", precision="fp32", bytes_read=1 << 20, bytes_written=1 << 20,
                        weight_bytes=0, flops=1 << 20, dram_bytes=2 << 20, memory_ms=floor_ms, compute_ms=floor_ms / 2)


class TestTheFloor:
    def test_a_time_under_the_floor_is_flagged(self):
        figures, flags, note = floors.floor_verdict(a_floor(1.0), 0.5, 2.0)
        assert flags == [Flag.BELOW_SPEED_OF_LIGHT.value] and figures["below_floor"]
        assert figures["sol_fraction"] == 2.0 and figures["reference_sol_fraction"] == 0.5
        assert note.startswith("timed at 0.5 ms, under the floor of 1 ms") and note.endswith("work was skipped")

    def test_within_the_margin_under_the_floor_is_not(self):
        at_margin = 1.0 * (1 - floors.BELOW_FLOOR_MARGIN)
        assert floors.floor_verdict(a_floor(1.0), at_margin, 2.0)[1:] == ([], None)
        assert floors.floor_verdict(a_floor(1.0), at_margin - 1e-6, 2.0)[1] == [Flag.BELOW_SPEED_OF_LIGHT.value]
        figures, flags, note = floors.floor_verdict(a_floor(1.0), 1.5, 2.0)
        assert (flags, note, figures["below_floor"]) == ([], None, False)

    def test_no_floor_is_said_and_flags_nothing(self):
        assert floors.floor_verdict("an unknown GPU", 0.001, 2.0) == (None, [], "no floor: an unknown GPU")


# -- edges the mutation run found unguarded (bench/RESULTS.md, "Mutation testing") ----------------------------------


def exact_walls(per_call_ms: float, mean_ms: float, reached_malloc: int | None = None) -> BlockWall:
    """Walls whose per-call and mean times are exact in binary (CALLS calls)."""
    wall = BlockWall()
    diagnostics = {"calls_reaching_malloc": reached_malloc} if reached_malloc is not None else None
    wall.add(per_call_ms * CALLS / 1000.0, CALLS, [mean_ms] * CALLS, diagnostics)
    return wall


class TestTheClockAtItsEdges:
    @pytest.mark.parametrize("missing", ["kernel calls", "kernel times", "reference calls", "reference times"])
    def test_any_side_without_calls_or_times_is_not_checked(self, missing):
        kernel, reference = walls(1.8, 0.3), walls(1.8, 1.0)
        side = kernel if missing.startswith("kernel") else reference
        if missing.endswith("calls"):
            side.calls = 0
        else:
            side.times_ms = []
        assert clock_verdict(kernel, reference) == ([], "not checked: no timed calls on the worker's clock")

    def test_an_implied_time_exactly_at_the_bound_agrees(self, monkeypatch):
        from kernelbench_rl.evaluation.timing import decisions
        monkeypatch.setattr(decisions, "HOST_CLOCK_SLACK_MS", 0.0)
        # implied = 1.0 + 2.5 - 2.0 = 1.5 = HOST_CLOCK_RATIO x 1.0 reported
        assert clock_verdict(exact_walls(2.5, 1.0), exact_walls(2.0, 1.0))[0] == []
        assert clock_verdict(exact_walls(2.625, 1.0), exact_walls(2.0, 1.0))[0] == CLOCK_FLAGS

    def test_the_allocators_slack_is_half_the_references_overhead_and_no_more(self, monkeypatch):
        from kernelbench_rl.evaluation.timing import decisions
        monkeypatch.setattr(decisions, "HOST_CLOCK_SLACK_MS", 0.0)
        reference = exact_walls(2.0, 1.0)  # 1.0 ms of overhead a call: a slack of 0.5 ms over the bound of 1.5
        asked = []

        def confirm():
            asked.append(1)
            return True, "re-timed"

        # implied 2.0 = the bound and the whole slack: the host re-timing is asked, and confirms
        assert clock_verdict(exact_walls(3.0, 1.0, reached_malloc=CALLS), reference, confirm)[0] == []
        assert asked == [1]
        # implied 2.125: past the slack, flagged without asking
        flags, note = clock_verdict(exact_walls(3.125, 1.0, reached_malloc=CALLS), reference, confirm)
        assert flags == CLOCK_FLAGS and note.startswith("DISAGREES: ") and asked == [1]
        # a reference with less overhead gives less slack: 0.25 ms of it, so 2.0 is past it
        flags, _ = clock_verdict(exact_walls(2.5, 1.0, reached_malloc=CALLS), exact_walls(1.5, 1.0), confirm)
        assert flags == CLOCK_FLAGS and asked == [1]

    def test_the_allocator_note_counts_both_sides(self):
        kernel = walls(0.8 + HOST_CLOCK_RATIO * 0.5 + HOST_CLOCK_SLACK_MS + 0.4, 0.5, reached_malloc=CALLS)
        unknown = BlockWall()
        unknown.add(1.8 * CALLS / 1000.0, CALLS, [1.0] * CALLS)  # the reference's child said nothing of cudaMalloc
        assert unknown.reached_malloc is None
        flags, note = clock_verdict(kernel, unknown)
        assert flags == CLOCK_FLAGS
        assert (f"(cudaMalloc reached {CALLS} times in its {CALLS} calls, the reference's 0 in {CALLS}; "
                "not re-timed on the host clock)") in note
        _, note = clock_verdict(kernel, walls(1.8, 1.0, reached_malloc=2))
        assert f"the reference's 2 in {CALLS}" in note

    def test_no_host_re_timing_is_said(self):
        from kernelbench_rl.evaluation.timing.decisions import host_retiming_confirms
        for host, events in ((None, 2.0), (2.0, None)):
            assert host_retiming_confirms(host, events) == (
                False, "no host re-timing to read (none, or its clock functions were replaced)")
        assert host_retiming_confirms(2.0, 3.0) == (True, "2.00x on the host clock against 3.00x on the events")


class TestBlockWalls:
    def test_walls_add_up_over_blocks(self):
        wall = BlockWall()
        wall.add(0.01, 10, [0.5] * 10, {"calls_reaching_malloc": 0, "inputs_reaching_malloc": 0})
        assert wall.reached_malloc == 0  # said, and none: not unknown
        wall.add(0.03, 20, [1.0] * 20, {"calls_reaching_malloc": 3, "inputs_reaching_malloc": 1})
        assert (wall.seconds, wall.calls, len(wall.times_ms), wall.reached_malloc) == (0.04, 30, 30, 4)
        assert wall.per_call_ms == pytest.approx(40.0 / 30)
        wall.add(0.01, 5, [1.0] * 5, {"calls_reaching_malloc": -1, "inputs_reaching_malloc": True})
        assert wall.reached_malloc == 4  # nonsense counts are not read


class TestTheProfileAtItsEdges:
    def test_the_slack_keeps_tiny_differences_in_agreement(self):
        from kernelbench_rl.evaluation.timing.decisions import profile_agrees_with_timing
        # 5x the timed median, but only 0.04 ms more: within PROFILE_SLACK_MS
        assert profile_agrees_with_timing(0.05, 0.01)[0] is False
        # exactly the slack more (0.1 - 0.05 == 0.05): still agrees
        assert profile_agrees_with_timing(0.1, 0.05) == (
            False, "profiled 0.1000 ms of GPU work against 0.0500 ms timed (2.00x)")
        assert profile_agrees_with_timing(0.2, 0.05)[0] is True
        assert profile_agrees_with_timing(1.0, 0.0) == (False, "profiled 1.0000 ms of GPU work; nothing timed")

    def test_a_cuda_candidate_is_credited_by_name_even_with_a_launch_record(self):
        header = profile([["scale_kernel(float*, int)", 2, 600.0], ["cublasSgemm", 1, 400.0]], {})
        judged = profile_verdict([header], CUDA_SOURCE, "cuda", 1.0)
        assert (judged.launches, judged.share, judged.credit) == (2, 0.6, "by name, 1 profiled forward(s)")

    def test_a_triton_profile_without_a_launch_record_is_credited_by_its_kernel_names(self):
        header = profile([["relu_kernel", 1, 900.0], ["at::native::vectorized_elementwise_kernel", 1, 100.0]])
        judged = profile_verdict([header], TRITON_SOURCE, "triton", 1.0)
        assert (judged.launches, judged.share, judged.flags) == (1, 0.9, [])
        assert judged.credit.startswith("by name")

    def test_the_lowest_share_decides_whatever_the_launch_counts(self):
        many_low = profile([["scale_kernel(float*, int)", 3, 200.0], ["cublasSgemm", 1, 800.0]])
        one_high = profile([["scale_kernel(float*, int)", 1, 900.0], ["cublasSgemm", 1, 100.0]])
        for forwards in ([many_low, one_high], [one_high, many_low]):
            judged = profile_verdict(forwards, CUDA_SOURCE, "cuda", 1.0)
            assert (judged.launches, judged.share) == (3, pytest.approx(0.2))
            assert judged.kernel_rows is many_low["kernels"]

    def test_a_forward_without_an_own_launch_is_worse_than_any_with_one(self):
        launched_idle = profile([["scale_kernel(float*, int)", 1, 0.0], ["cublasSgemm", 1, 100.0]])  # share 0
        none = profile([["cublasSgemm", 1, 100.0]])
        for forwards in ([launched_idle, none], [none, launched_idle]):
            judged = profile_verdict(forwards, CUDA_SOURCE, "cuda", 1.0)
            assert judged.launches == 0 and judged.kernel_rows is none["kernels"]
            assert judged.flags[:2] == [Flag.BACKEND_NOT_USED.value, Flag.HACK.value]

    def test_rows_of_another_shape_count_nothing(self):
        assert profiled_gpu_ms([["a", 1], ["b", 1, 500.0], "junk", ("c", 1, 7.0)]) == 0.5


class TestTheFloorsFigures:
    def test_every_figure_against_the_floor(self):
        floor = a_floor(1.0)
        figures = floors.speed_of_light(floor, 2.0, 4.0)
        assert figures == {
            "gpu": floor.gpu, "floor_ms": 1.0, "bound": "memory", "bytes": 2 << 20, "dram_bytes": 2 << 20,
            "flops": 1 << 20, "arithmetic": floor.arithmetic,
            "sol_fraction": 0.5, "achieved_bytes_per_s": (2 << 20) / 0.002, "achieved_flops_per_s": (1 << 20) / 0.002,
            "reference_sol_fraction": 0.25, "reference_bytes_per_s": (2 << 20) / 0.004,
            "reference_flops_per_s": (1 << 20) / 0.004, "below_floor": False}

    @pytest.mark.parametrize("runtime_ms", [None, 0.0, -1.0])
    def test_no_time_reads_no_figures_and_nothing_below_the_floor(self, runtime_ms):
        figures = floors.speed_of_light(a_floor(1.0), runtime_ms, runtime_ms)
        for key in ("sol_fraction", "achieved_bytes_per_s", "achieved_flops_per_s", "reference_sol_fraction",
                    "reference_bytes_per_s", "reference_flops_per_s"):
            assert figures[key] is None, key
        assert figures["below_floor"] is False
        assert floors.floor_verdict(a_floor(1.0), runtime_ms, 2.0)[1:] == ([], None)

    def test_the_fraction_needs_both_times(self):
        assert floors.sol_fraction(1.0, 4.0) == 0.25
        for floor_ms, measured_ms in ((None, 1.0), (0.0, 1.0), (1.0, None), (1.0, 0.0), (1.0, -2.0)):
            assert floors.sol_fraction(floor_ms, measured_ms) is None, (floor_ms, measured_ms)
