"""Timing fidelity rules that a CPU can check: when both sides are timed again side by side, how the
candidate is held still meanwhile, and the profiler warm-up that must not leave CUPTI attached.

What they buy on a GPU is measured in bench/ (bench/RESULTS.md, H100, 2026-11-23): identical level-3 code read
0.57-0.80 with CUPTI attached in the child, and 20 of 24 noisy level-3 problems within [0.95, 1.05] once
paired.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from host_clock import HOST_CLOCK
from kernelbench_rl.evaluation.sandbox import child
from kernelbench_rl.evaluation.timing.decisions import (AGREEMENT, CLOSE_CALL, PAIRED_BLOCKS, PAIRED_MAX_CALLS,
                                                        PAIRED_BLOCK_CALLS, PAIRED_MAX_BYTES, PAIRED_MAX_SIDE_MS,
                                                        PAIRED_MIN_SIDE_MS, PAIRED_SPREAD, TIMING_ALLOWANCE,
                                                        BASELINE_IN_CHILD, BASELINE_IN_WORKER, REFRESH_LIMIT,
                                                        baseline_home, paired_blocks, pairing_wanted,
                                                        refreshed_baseline, timing_window_s, usable_baseline)
from kernelbench_rl.evaluation.sandbox.timer import TimingRecord
from kernelbench_rl.evaluation.worker.candidate_timing import PreparedChild
from kernelbench_rl.evaluation.worker.worker import _process_state, stopped

SMALL = 64 << 20


class TestPairingWanted:
    def test_steady_timings_keep_the_solo_baseline(self):
        assert not pairing_wanted("auto", False, SMALL, [(10.0, 0.1), (10.2, 0.2)])

    @pytest.mark.parametrize("side", [0, 1])
    def test_either_side_spreading_past_the_bar_pairs(self, side):
        timings = [(10.0, 0.1), (10.0, 0.1)]
        timings[side] = (10.0, 10.0 * PAIRED_SPREAD * 1.2)
        assert pairing_wanted("auto", False, SMALL, timings)

    def test_a_spread_right_at_the_bar_does_not_pair(self):
        assert not pairing_wanted("auto", False, SMALL, [(10.0, 10.0 * PAIRED_SPREAD), (10.0, 0.0)])

    def test_big_or_heavy_plans_never_pair_a_second_child(self):
        noisy = [(10.0, 5.0), (10.0, 5.0)]
        assert not pairing_wanted("auto", True, SMALL, noisy)
        assert not pairing_wanted("always", False, PAIRED_MAX_BYTES + 1, noisy)

    def test_the_switch_overrides_in_both_directions(self):
        assert pairing_wanted(" ALWAYS ", False, SMALL, [(10.0, 0.0), (10.0, 0.0)])
        assert not pairing_wanted("off", False, SMALL, [(10.0, 5.0), (10.0, 5.0)])

    def test_missing_figures_are_not_noise(self):
        assert not pairing_wanted("auto", False, SMALL, [(None, None), (0.0, 1.0), (10.0, None)])

    @pytest.mark.parametrize("speedup", [0.85, 1.0 - 2 * AGREEMENT, 1.0 + 2 * AGREEMENT, 1.2])
    def test_a_close_call_pairs_even_when_steady(self, speedup):
        assert pairing_wanted("auto", False, SMALL, [(10.0 * speedup, 0.0), (10.0, 0.0)])

    @pytest.mark.parametrize("speedup", [1.0, 1.0 + AGREEMENT / 2, CLOSE_CALL[0] * 0.9, CLOSE_CALL[1] * 1.1, 5.0])
    def test_agreement_or_a_clear_difference_keeps_the_solo_baseline(self, speedup):
        assert not pairing_wanted("auto", False, SMALL, [(10.0 * speedup, 0.0), (10.0, 0.0)])


def test_a_candidate_as_slow_as_its_reference_has_time_for_its_timed_calls():
    # 10 calls and 3 warm-ups of a 3.4 s reference: 44 s of the reference's own, past a 60 s timeout's remainder.
    assert timing_window_s(10, 3, 3400.0, 60.0) == pytest.approx(TIMING_ALLOWANCE * 13 * 3.4)
    assert timing_window_s(10, 3, 3400.0, 60.0, sides=2) == pytest.approx(2 * TIMING_ALLOWANCE * 13 * 3.4)
    assert timing_window_s(100, 3, 0.5, 60.0) == 60.0  # short references keep the candidate's timeout


class TestPairedBlocks:
    @staticmethod
    def _numbers(blocks):
        return sorted(n for block in blocks for n in block)

    def test_long_kernels_keep_the_solo_count(self):
        blocks = paired_blocks(100, 5.0)
        assert self._numbers(blocks) == list(range(100)) and len(blocks) == 100 // PAIRED_BLOCK_CALLS
        assert len(paired_blocks(20, 5.0)) == PAIRED_BLOCKS

    def test_short_kernels_get_enough_gpu_time_in_small_blocks(self):
        blocks = paired_blocks(100, 0.2)
        calls = self._numbers(blocks)
        assert calls == list(range(len(calls)))  # every trial numbered once
        assert len(calls) * 0.2 >= PAIRED_MIN_SIDE_MS
        assert len(blocks) >= len(calls) // 12  # about ten calls a block

    def test_the_calls_are_capped(self):
        assert len(self._numbers(paired_blocks(100, 1e-4))) == PAIRED_MAX_CALLS
        assert len(self._numbers(paired_blocks(100, 0.0))) == PAIRED_MAX_CALLS

    def test_a_slow_side_keeps_the_solo_count(self):
        # A 0.01 ms kernel beside a 200 ms reference: 1,000 calls a side would be 200 s of the reference.
        assert len(self._numbers(paired_blocks(12, 0.01, 200.0))) == 12
        calls = len(self._numbers(paired_blocks(100, 0.05, 2.0)))
        assert calls * 2.0 <= PAIRED_MAX_SIDE_MS and calls * 0.05 < PAIRED_MIN_SIDE_MS  # capped by the longer side
        assert len(self._numbers(paired_blocks(100, 0.2, 0.21))) * 0.2 >= PAIRED_MIN_SIDE_MS  # close call: unchanged

    def test_few_calls_never_make_empty_blocks(self):
        blocks = paired_blocks(3, 50.0)
        assert all(blocks) and self._numbers(blocks) == [0, 1, 2]


class TestWhereTheBaselineIsTimed:
    def test_a_small_problem_is_timed_in_a_child_running_the_reference(self):
        assert baseline_home("child", False, SMALL) == BASELINE_IN_CHILD
        assert baseline_home(" CHILD ", False, PAIRED_MAX_BYTES) == BASELINE_IN_CHILD

    def test_big_plans_and_the_switch_keep_the_worker(self):
        assert baseline_home("child", True, SMALL) == BASELINE_IN_WORKER
        assert baseline_home("child", False, PAIRED_MAX_BYTES + 1) == BASELINE_IN_WORKER
        assert baseline_home("worker", False, SMALL) == BASELINE_IN_WORKER

    def test_a_cached_baseline_stands_only_where_it_was_timed_alike(self):
        assert usable_baseline({"eager_ms": 2.0, "timed_in": "child"}, BASELINE_IN_CHILD)
        assert not usable_baseline({"eager_ms": 2.0, "timed_in": "worker"}, BASELINE_IN_CHILD)
        # a row from before the column existed was timed in the worker
        assert not usable_baseline({"eager_ms": 2.0, "timed_in": None}, BASELINE_IN_CHILD)
        assert usable_baseline({"eager_ms": 2.0}, BASELINE_IN_WORKER)
        assert not usable_baseline({"eager_ms": None, "timed_in": "child"}, BASELINE_IN_CHILD)
        assert not usable_baseline(None, BASELINE_IN_WORKER)


class TestBaselineRefresh:
    BASE = {"eager_ms": 10.0, "eager_spread_ms": 0.9, "compile_ms": None, "timed_in": "child"}

    def test_a_spread_baseline_gives_way_to_a_steady_side_by_side_reference(self):
        refreshed = refreshed_baseline(self.BASE, TimingRecord(times_ms=[10.2, 10.3, 10.25, 10.28, 10.22]))
        assert refreshed is not None
        assert refreshed["eager_ms"] == pytest.approx(10.25) and refreshed["eager_spread_ms"] < 0.1
        assert refreshed["timed_in"] == "child" and "10 ms" in refreshed["refreshed"]
        assert self.BASE["eager_ms"] == 10.0  # a new entry: the first one is not rewritten

    def test_a_spread_reference_side_keeps_the_baseline(self):
        assert refreshed_baseline(self.BASE, TimingRecord(times_ms=[9.0, 10.0, 11.0, 12.0, 10.5])) is None

    def test_a_jump_past_the_limit_is_an_anomaly_not_drift(self):
        jump = 10.0 * (1.0 + REFRESH_LIMIT) * 1.05
        assert refreshed_baseline(self.BASE, TimingRecord(times_ms=[jump] * 5)) is None
        assert refreshed_baseline(self.BASE, TimingRecord(times_ms=[10.0 / (1.0 + 2 * REFRESH_LIMIT)] * 5)) is None

    def test_nothing_to_refresh_from(self):
        assert refreshed_baseline({"eager_ms": None}, TimingRecord(times_ms=[1.0] * 5)) is None
        assert refreshed_baseline(self.BASE, TimingRecord(times_ms=[])) is None


class TestPreparedChild:
    def test_take_waits_for_the_start_and_hands_its_child_over_once(self):
        given_back = []
        prepared = PreparedChild(lambda: (time.sleep(0.05), "child")[1])
        assert prepared.take() == "child"
        prepared.release(given_back.append)
        assert given_back == []  # taken: the taker gives it back

    def test_one_never_taken_is_given_back(self):
        given_back = []
        prepared = PreparedChild(lambda: "child")
        prepared.release(given_back.append)
        prepared.release(given_back.append)
        assert given_back == ["child"]

    def test_a_start_that_fails_gives_none(self):
        def start():
            raise OSError("no child")
        given_back = []
        prepared = PreparedChild(start)
        prepared.release(given_back.append)
        assert prepared.take() is None and given_back == []


def _resumes(pid: int, within_s: float = 2.0) -> bool:
    deadline = time.monotonic() + within_s
    while _process_state(pid) in ("T", "t") and time.monotonic() < deadline:
        time.sleep(0.01)
    return _process_state(pid) not in ("T", "t")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
class TestStopped:
    def _sleeper(self, new_session: bool) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=new_session)

    @pytest.mark.parametrize("new_session", [True, False], ids=["group-leader", "plain-process"])
    def test_the_process_is_stopped_inside_and_running_after(self, new_session):
        proc = self._sleeper(new_session)
        try:
            time.sleep(0.2)
            with stopped(proc.pid, settle_s=1.0):
                assert _process_state(proc.pid) in ("T", "t")
            assert _resumes(proc.pid)
        finally:
            proc.kill()
            proc.wait()

    def test_a_process_that_is_gone_is_no_error(self):
        proc = self._sleeper(True)
        proc.kill()
        proc.wait()
        with stopped(proc.pid, settle_s=0.05):
            pass

    def test_the_process_continues_when_the_block_raises(self):
        proc = self._sleeper(True)
        try:
            time.sleep(0.2)
            with pytest.raises(RuntimeError):
                with stopped(proc.pid, settle_s=1.0):
                    raise RuntimeError("timing failed")
            assert _resumes(proc.pid)
        finally:
            proc.kill()
            proc.wait()


class TestProfilerWarmup:
    def test_default_is_no_warm_up(self, monkeypatch):
        monkeypatch.delenv(child.PROFILER_WARMUP_ENV, raising=False)
        assert child.profiler_warmup_mode() == "off"

    @pytest.mark.parametrize("value,mode", [("attached", "attached"), (" Teardown ", "teardown"), ("bogus", "off")])
    def test_the_switch(self, monkeypatch, value, mode):
        monkeypatch.setenv(child.PROFILER_WARMUP_ENV, value)
        assert child.profiler_warmup_mode() == mode

    def test_off_never_starts_a_profiler(self, monkeypatch):
        monkeypatch.delenv(child.PROFILER_WARMUP_ENV, raising=False)
        monkeypatch.setattr(child, "_PROFILER_WARM", [False])
        child._warm_profiler()
        assert child._PROFILER_WARM == [False]

    def test_teardown_asks_kineto_to_detach_and_allows_its_lazy_reinit(self, monkeypatch):
        monkeypatch.setenv("DISABLE_CUPTI_LAZY_REINIT", "1")
        monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
        child._cupti_env("teardown")
        assert os.environ.get("TEARDOWN_CUPTI") == "1"
        assert "DISABLE_CUPTI_LAZY_REINIT" not in os.environ

    @pytest.mark.parametrize("mode", ["off", "attached"])
    def test_other_modes_leave_kineto_alone(self, monkeypatch, mode):
        monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
        child._cupti_env(mode)
        assert "TEARDOWN_CUPTI" not in os.environ

    def test_the_sandbox_keeps_the_switch_for_the_child(self):
        from kernelbench_rl.evaluation.sandbox import sandbox

        env = sandbox.scrubbed_env({child.PROFILER_WARMUP_ENV: "teardown", "OPENAI_API_KEY": "x"})
        assert env == {child.PROFILER_WARMUP_ENV: "teardown"}



# -- timing diagnostics: why two processes time the same code differently ----------------------------------
def _busy(ms: float):
    def forward(x):  # `ms` of this thread's CPU time (so at least as much wall), however busy the machine is
        end = time.thread_time() + ms / 1000.0
        while time.thread_time() < end:
            pass
        return x
    return forward


def _sleepy(ms: float):
    def forward(x):
        time.sleep(ms / 1000.0)
        return x
    return forward


@pytest.mark.parametrize("forward, cpu_bound", [(_busy(20.0), True), (_sleepy(20.0), False)])
def test_launch_cpu_time_tells_host_work_from_waiting(monkeypatch, forward, cpu_bound):
    import torch

    from kernelbench_rl.evaluation.sandbox import timer

    monkeypatch.setattr(timer, "l2_flush_buffer", lambda device: torch.empty(16))
    record = timer.time_forward(forward, lambda seed: [torch.zeros(4)], [1, 2, 3, 4, 5], 1, "cpu", HOST_CLOCK)
    diag = record.diagnostics()
    assert diag["timed_calls"] == 5 and len(record.launch_cpu_ms) == 5
    assert all(t >= 19.0 for t in record.times_ms)  # both take 20 ms of wall time
    if cpu_bound:
        assert diag["launch_cpu_median_ms"] > 10.0
    else:
        assert diag["launch_cpu_median_ms"] < 5.0
    # Off a GPU there is no allocator to count: unknown, never zero.
    assert diag["calls_reaching_malloc"] is None and diag["allocator_retries"] is None
    assert diag["inputs_reaching_malloc"] is None


def test_diagnostics_merge_blocks_and_read_as_one_line():
    from kernelbench_rl.evaluation.sandbox import timer

    blocks = [{"timed_calls": 20, "calls_reaching_malloc": 3, "allocator_retries": 1, "launch_cpu_median_ms": 0.4,
               "inputs_reaching_malloc": 2},
              {"timed_calls": 20, "calls_reaching_malloc": 0, "allocator_retries": 0, "launch_cpu_median_ms": 0.6},
              {"timed_calls": 20, "calls_reaching_malloc": 5, "allocator_retries": 2, "launch_cpu_median_ms": 0.5,
               "inputs_reaching_malloc": 4}]
    merged = timer.merge_diagnostics(blocks)
    assert merged == {"timed_calls": 60, "calls_reaching_malloc": 8, "allocator_retries": 3,
                      "inputs_reaching_malloc": 6, "launch_cpu_median_ms": 0.5}
    line = timer.describe_diagnostics({"kernel": merged, "reference": None})
    assert line == ("kernel: 8/60 timed calls reached cudaMalloc (3 allocator retries), 6 calls' inputs did, "
                    "launch CPU 0.500 ms; reference: cached")
    cpu_only = timer.merge_diagnostics([{"timed_calls": 5, "calls_reaching_malloc": None, "launch_cpu_median_ms": 2.0}])
    assert timer.describe_diagnostics({"kernel": cpu_only}) == "kernel: launch CPU 2.000 ms"
