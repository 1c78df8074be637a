"""KernelBench at real size: footprints, admission by bytes, whose out-of-memory it is, one buffer plan
for baseline and candidate, quiet timing, a sandbox that fails to start, and verdicts keyed by the
reference they were judged against.

On an 80 GB H100 our evaluator once judged 84 of 100 KernelBench level-1 references wrong: our own
buffers ran the device out of memory and the candidate was blamed. These tests hold the rules that
prevent it on any machine; the GPU sweep (`bench/kernelbench_sweep.py`) holds them at real size.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from types import SimpleNamespace

import pytest
import torch

from kernelbench_rl.evaluation.sandbox import timer
from kernelbench_rl.evaluation.verdict import checks
from kernelbench_rl.evaluation.worker import children, memory
from kernelbench_rl.evaluation.worker.memory import GIB, MIB, Footprint
from kernelbench_rl.evaluation.worker.paired_reference import ResidentReference
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalResult, EvalSettings, Flag
from kernelbench_rl.evaluation.source import kernels
from host_clock import HOST_CLOCK
from kernelbench_rl.evaluation.worker.worker import (
    LOADED_CONTEXT_BYTES, WARM_CONTEXT_BYTES, WITHIN_BUDGET_OOM, WORKER_OOM, Fault, QuietGate, SharedOrAlone, Worker,
    WorkerConfig, child_oom_fault, oom_not_the_candidates,
    ran_out_of_device_memory,
)

# KernelBench's L1/19 at real size: 4096 x 393216 fp32 in and out, 6 GiB each.
L1_19 = Footprint(param_bytes=0, input_bytes=6 * GIB, output_bytes=6 * GIB, forward_bytes=6 * GIB)
SMALL = Footprint(param_bytes=4 * MIB, input_bytes=64 * MIB, output_bytes=64 * MIB, forward_bytes=96 * MIB)
# What an H100 80 GB leaves to evaluations beside 17 children serving evaluations and 18 pre-started ones
# (contexts as bench/RESULTS.md has them) and 8 GiB of resident references; and what it leaves
# once the pre-started children are killed and other problems' references dropped.
H100_CAPACITY = int(0.92 * 79 * GIB) - 17 * LOADED_CONTEXT_BYTES - 18 * WARM_CONTEXT_BYTES - 8 * GIB
H100_ALONE = int(0.92 * 79 * GIB) - 17 * LOADED_CONTEXT_BYTES


# -- footprint arithmetic -----------------------------------------------------------------------------
def test_a_6_gib_problem_refreshes_inputs_in_place_and_fits_an_80_gb_device():
    plan = memory.plan(L1_19)
    assert not plan.fresh_buffers  # two live 6 GiB sets would buy nothing: far past any L2 cache
    assert plan.verify_trials == 1
    assert plan.poison_bytes < 8 * GIB
    # the least one evaluation needs: child (inputs + poison or forward + one verified output) + worker
    assert plan.child_bytes < 20 * GIB and plan.worker_bytes < 20 * GIB
    assert plan.fits(H100_CAPACITY), (memory.gib(plan.needed_bytes), memory.gib(H100_CAPACITY))
    # L1/25 (Swish, the same sizes, a 6 GiB temporary in its forward) needs 42.6 GiB: not beside the
    # pre-started children (41.8 GiB on the H100), so the worker kills them for its section; alone it fits
    swish = memory.plan(Footprint(param_bytes=0, input_bytes=6 * GIB, output_bytes=6 * GIB, forward_bytes=12 * GIB))
    assert not swish.fits(H100_CAPACITY) and swish.fits(H100_ALONE), memory.gib(swish.needed_bytes)
    # the candidate's budget is a few times the reference's peak, beyond our own buffers
    assert plan.candidate_cap_bytes >= plan.child_bytes + 3 * L1_19.reference_peak
    assert plan.section_bytes > H100_CAPACITY  # so its device section runs with the memory to itself


def test_a_small_problem_gets_fresh_buffers_two_verified_outputs_and_shares_the_device():
    plan = memory.plan(SMALL)
    assert plan.fresh_buffers and plan.verify_trials == 2
    # a small problem's budget is raised to a quarter of the device (cuDNN picks algorithms by workspace)
    assert plan.candidate_cap_bytes < 20 * GIB == memory.enforced_cap_bytes(plan, 80 * GIB)
    assert memory.enforced_cap_bytes(memory.plan(L1_19), 80 * GIB) == memory.plan(L1_19).candidate_cap_bytes
    assert plan.section_bytes < H100_CAPACITY // 8  # many evaluations at once
    assert plan.warm_bytes < plan.section_bytes


def test_a_problem_that_cannot_fit_even_alone_is_too_large_with_the_bytes_named():
    huge = Footprint(param_bytes=0, input_bytes=30 * GIB, output_bytes=30 * GIB, forward_bytes=30 * GIB)
    plan = memory.plan(huge)
    assert not plan.fits(H100_ALONE)
    message = memory.too_large_message(plan, H100_ALONE, 80 * GIB)
    assert memory.gib(plan.needed_bytes) in message and memory.gib(H100_ALONE) in message and "80.0 GiB" in message


def test_a_big_evaluation_drops_every_other_problems_references_but_its_own():
    worker = Worker(WorkerConfig(device="cpu", warm_children=0, ref_cache_bytes=1 << 40))
    try:
        states = [worker.references.problem_state(f"L1/{n}", f"# problem {n}\n") for n in range(3)]
        for n, state in enumerate(states):
            state.last_used = float(n)
            state.models["fp32"] = torch.nn.Linear(2, 2)
            state.refs[("fp32", 1)] = [torch.zeros(256)]
            worker.references.ref_bytes += 1024
        worker.references.trim_resident()  # within the resident budget: nothing goes
        assert all(state.refs and state.models for state in states)
        worker.references.trim_resident(keep=states[0])  # the least recently used one is the big evaluation's
        assert states[0].refs and states[0].models
        assert not any(state.refs or state.models for state in states[1:])
        assert worker.references.ref_bytes == 1024
    finally:
        worker.shutdown()


def test_the_kernels_that_took_the_most_time_are_named_first():
    rows = [["fft2d_r2c_32x32", 2, 4070.0], ["sm80_xmma_gemm_cf32cf32", 1, 5080.0], "junk", ["tiny", 9, 3.0]]
    top = kernels.top_kernels(rows, count=2)
    assert top.startswith("sm80_xmma_gemm_cf32cf32 x1 5.08 ms; fft2d_r2c_32x32 x2 4.07 ms")
    assert "tiny" not in top and kernels.top_kernels([]) == ""


def test_the_size_of_a_failed_allocation_is_read_from_torchs_message():
    text = "CUDA out of memory. Tried to allocate 24.00 GiB. GPU 0 has a total capacity of 79.19 GiB"
    assert memory.requested_bytes(text) == 24 * GIB
    assert memory.requested_bytes("Tried to allocate 512.00 MiB") == 512 * MIB
    assert memory.requested_bytes("no figure here") == 0


# -- whose out-of-memory ----------------------------------------------------------------------------------
def _result(category: ErrorCategory, message: str) -> EvalResult:
    return EvalResult(problem_id="L1/19", candidate_sha256="", backend="triton", precision="fp32", device_kind="cuda",
                      error_category=category, error_message=message)


def test_a_child_past_its_budget_is_the_kernels_fault_and_earns_no_retry():
    fault = child_oom_fault("OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB",
                            {"reserved": 50 * GIB, "cap": 55 * GIB})
    assert fault.category == ErrorCategory.RUNTIME
    assert "budget of 55.0 GiB" in fault.message and "8.0 GiB more" in fault.message
    result = _result(fault.category, fault.message)
    assert not ran_out_of_device_memory(result) and not oom_not_the_candidates(result)


def test_a_child_within_its_budget_ran_short_because_of_others_and_runs_again_alone():
    fault = child_oom_fault("OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB",
                            {"reserved": 12 * GIB, "cap": 55 * GIB})
    result = _result(fault.category, fault.message)
    assert WITHIN_BUDGET_OOM in fault.message
    assert ran_out_of_device_memory(result) and oom_not_the_candidates(result)


def _fake_cuda_worker(outcomes: list[EvalResult]) -> Worker:
    """A Worker whose single evaluation returns the given results in turn (no processes, no GPU)."""
    worker = Worker.__new__(Worker)
    worker.device = "cuda"
    worker.residency = SharedOrAlone()
    worker.children = SimpleNamespace(reaping=SimpleNamespace(join=lambda: None))
    worker.paired_reference = ResidentReference(lambda child, workdir: None)  # none resident
    calls = iter(outcomes)
    worker._evaluate_once = lambda payload, received_at=None: (next(calls), None)
    return worker


def test_an_oom_that_recurs_alone_within_budget_is_ours_never_a_zero(monkeypatch):
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    shared = _result(ErrorCategory.RUNTIME, f"{WORKER_OOM}: OutOfMemoryError: CUDA out of memory.")
    alone = _result(ErrorCategory.RUNTIME, f"{WORKER_OOM}: OutOfMemoryError: CUDA out of memory.")
    result, _ = _fake_cuda_worker([shared, alone])._evaluate_beside_others({})
    assert result.error_category == ErrorCategory.INFRA
    assert "even with the device to itself" in result.error_message and "oom_retry" in result.versions


def test_an_oom_beside_others_that_passes_alone_is_judged_on_its_merits(monkeypatch):
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    shared = _result(ErrorCategory.RUNTIME, child_oom_fault("OutOfMemoryError: x", {"reserved": GIB, "cap": 9 * GIB}).message)
    alone = _result(ErrorCategory.OK, "")
    result, _ = _fake_cuda_worker([shared, alone])._evaluate_beside_others({})
    assert result.error_category == ErrorCategory.OK


def _child_oom_result(message: str, reported: dict, cap: int | None, free: int | None) -> EvalResult:
    """The result the worker makes of a child's device OOM (worker._evaluate_once keeps the fault's facts)."""
    import json

    fault = child_oom_fault(message, reported, cap, free)
    result = _result(fault.category, fault.message)
    if fault.facts:
        result.versions["device_oom_facts"] = json.dumps(fault.facts, sort_keys=True)
    return result


# A candidate may raise any exception it likes, with any message and any figures in its process's report: only what
# the worker read itself (the device's free memory with the child gone) and the budget it gave decide.
HAND_MADE_OOMS = [
    ("torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 MiB')", {"reserved": 0, "cap": 0}),
    ("OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB", {"reserved": GIB, "cap": 80 * GIB}),
    ("RuntimeError: out of memory", {"reserved": 0, "cap": 1}),
    ("OutOfMemoryError: CUDA out of memory.", {}),
]


@pytest.mark.parametrize("message,reported", HAND_MADE_OOMS)
def test_a_hand_made_oom_with_the_device_free_is_the_kernels_fault_not_infra(monkeypatch, message, reported):
    """Alone on the device, the child within its budget, the device with its whole budget free once it is gone: no
    shortage of the device's could have made that OOM, so it is the kernel's (a verdict, scored), never infra."""
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    cap = 9 * GIB
    shared = _child_oom_result(message, reported, cap, free=60 * GIB)
    alone = _child_oom_result(message, reported, cap, free=60 * GIB)
    result, _ = _fake_cuda_worker([shared, alone])._evaluate_beside_others({})
    assert result.error_category == ErrorCategory.RUNTIME and result.error_category.is_kernel_fault, result
    if "oom_retry" in result.versions:  # (a message without torch's OOM words is a runtime fault at once)
        assert "the failure is the kernel's own" in result.error_message
    from kernelbench_rl.rewards.shaping import score

    assert score(result, "correctness").reward is not None


@pytest.mark.parametrize("free", [None, 0, 9 * GIB - 1])
def test_an_oom_alone_with_the_device_short_without_the_child_stays_ours(monkeypatch, free):
    """The device could not give the child its budget even with the child gone (the worker's buffers, or no reading
    at all): ours, retried, never the kernel's zero."""
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    message, reported = "OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB", {"reserved": GIB}
    outcomes = [_child_oom_result(message, reported, 9 * GIB, free) for _ in range(2)]
    result, _ = _fake_cuda_worker(outcomes)._evaluate_beside_others({})
    assert result.error_category == ErrorCategory.INFRA, result


def test_the_budget_is_the_workers_not_the_childs_report():
    """A child reporting a small budget cannot make its within-budget OOM look like the device's shortage (the worker's
    cap decides), nor escape being over budget by reporting a large one."""
    fault = child_oom_fault("OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB",
                            {"reserved": 50 * GIB, "cap": 500 * GIB}, 55 * GIB, 70 * GIB)
    assert "budget of 55.0 GiB" in fault.message and fault.facts == {"cap": 55 * GIB, "free_without_child": 70 * GIB}
    small = child_oom_fault("OutOfMemoryError: x", {"reserved": 0, "cap": 1}, 9 * GIB, 10 * GIB)
    assert small.facts["cap"] == 9 * GIB


def test_too_large_is_no_verdict_on_the_kernel():
    assert ErrorCategory.TOO_LARGE.is_ours and not ErrorCategory.TOO_LARGE.is_kernel_fault
    from kernelbench_rl.rewards.shaping import score

    assert score(_result(ErrorCategory.TOO_LARGE, "needs 90 GiB"), "correctness").reward is None


# -- one buffer plan for baseline and candidate ------------------------------------------------------------
@pytest.mark.parametrize("fresh, most_alive", [(True, 2), (False, 1)])
def test_the_buffer_plan_decides_how_many_input_sets_live_at_once(monkeypatch, fresh, most_alive):
    monkeypatch.setattr(timer, "l2_flush_buffer", lambda device: torch.empty(16))
    alive: list[weakref.ref] = []
    peak = [0]

    def inputs_for_seed(seed: int) -> list[torch.Tensor]:
        gc.collect()
        live = sum(1 for ref in alive if ref() is not None)
        peak[0] = max(peak[0], live + 1)
        x = torch.full((8,), float(seed))
        alive.append(weakref.ref(x))
        return [x]

    seen: list[float] = []
    record = timer.time_forward(lambda x: seen.append(float(x[0])) or x * 2, inputs_for_seed, [1, 2, 3, 4], 0, "cpu",
                                 HOST_CLOCK, keep={2}, fresh_buffers=fresh)
    assert seen == [1.0, 2.0, 3.0, 4.0]  # new values every call, either way
    assert peak[0] == most_alive
    assert len(record.times_ms) == 4 and float(record.kept_outputs[2][0][0]) == 6.0


# -- quiet timing ----------------------------------------------------------------------------------------
def test_timing_waits_for_warm_ups_under_way_and_holds_new_ones_back():
    gate = QuietGate()
    events: list[str] = []
    warm_release = threading.Event()
    warm_in = threading.Event()

    def warm(name: str, release: threading.Event | None) -> None:
        with gate.noisy():
            events.append(f"{name} in")
            if release is not None:
                warm_in.set()
                release.wait(10)
            events.append(f"{name} out")

    def timed() -> None:
        with gate.quiet(max_wait_s=10) as calm:
            events.append(f"timing in calm={calm}")
            time.sleep(0.2)
            events.append("timing out")

    first = threading.Thread(target=warm, args=("warm1", warm_release))
    first.start()
    warm_in.wait(5)
    timer = threading.Thread(target=timed)
    timer.start()
    deadline = time.monotonic() + 5
    while gate._waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    second = threading.Thread(target=warm, args=("warm2", None))
    second.start()
    time.sleep(0.2)
    assert events == ["warm1 in"]  # timing waits for warm1; warm2 waits behind timing
    warm_release.set()
    for thread in (first, timer, second):
        thread.join(10)
    assert events == ["warm1 in", "warm1 out", "timing in calm=True", "timing out", "warm2 in", "warm2 out"]


def test_timing_gives_up_on_a_long_warm_up_and_says_so():
    gate = QuietGate()
    release = threading.Event()
    inside = threading.Event()

    def warm() -> None:
        with gate.noisy():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=warm)
    thread.start()
    inside.wait(5)
    with gate.quiet(max_wait_s=0.2) as calm:
        assert calm is False
    release.set()
    thread.join(10)


def test_work_that_waits_for_no_timing_waits_for_a_timing_and_never_holds_one_back():
    """A pre-start's wait: it begins only once no timing runs or waits, and a timing never waits for it."""
    gate = QuietGate()
    assert gate.wait_for_no_timing(0.1) is True  # nothing under way
    inside, release, began = threading.Event(), threading.Event(), threading.Event()

    def timed() -> None:
        with gate.quiet(max_wait_s=0.1):
            inside.set()
            release.wait(10)

    def pre_start() -> None:
        if gate.wait_for_no_timing(10):
            began.set()

    timer = threading.Thread(target=timed)
    timer.start()
    assert inside.wait(5)
    assert gate.wait_for_no_timing(0.1) is False  # a timing holds the gate
    starter = threading.Thread(target=pre_start)
    starter.start()
    assert not began.wait(0.2)
    release.set()
    assert began.wait(5)  # the timing ended: the pre-start begins
    timer.join(5)
    starter.join(5)
    with gate.quiet(max_wait_s=0.1) as calm:  # it took nothing: the next timing is calm at once
        assert calm is True


def test_a_quiet_section_nests_its_own_quiet_and_untimed_parts_and_keeps_other_threads_out():
    """A whole device section held quiet: its timed trials (quiet again) and its own untimed work (noisy) pass
    through on its thread; another thread's warm-up waits until the section ends."""
    gate = QuietGate()
    events: list[str] = []
    other_in = threading.Event()

    def other_warm_up() -> None:
        with gate.noisy():
            events.append("other warm-up")
            other_in.set()

    with gate.quiet(max_wait_s=1) as calm:
        assert calm is True
        thread = threading.Thread(target=other_warm_up)
        thread.start()
        with gate.quiet(max_wait_s=0.1) as nested:  # would wait forever for itself if it did not nest
            assert nested is True
            events.append("timed")
        with gate.noisy():
            events.append("own untimed")
        assert not other_in.wait(0.2)
        events.append("section out")
    thread.join(5)
    assert events == ["timed", "own untimed", "section out", "other warm-up"]
    with gate.quiet(max_wait_s=0.1) as later:  # released: the next section takes it afresh
        assert later is True


# -- comparison in chunks ---------------------------------------------------------------------------------
def test_outputs_are_compared_in_chunks_with_the_same_verdicts(monkeypatch):
    monkeypatch.setattr(checks, "CHUNK_ELEMENTS", 7)
    ref = torch.linspace(-1, 1, 50)
    assert checks.compare_outputs([ref], [ref.clone()], 1e-4, 1e-4).ok
    wrong = ref.clone()
    wrong[20] += 0.5
    wrong[45] += 0.25
    outcome = checks.compare_outputs([ref], [wrong], 1e-4, 1e-4)
    assert outcome.category == ErrorCategory.MISMATCH and "at 2 of 50" in outcome.message
    assert outcome.max_abs_err == pytest.approx(0.5, abs=1e-6)
    nan = ref.clone()
    nan[49] = float("nan")
    assert "NaN" in checks.compare_outputs([ref], [nan], 1e-4, 1e-4).message


def test_an_output_as_small_as_the_tolerance_is_held_to_its_own_scale():
    """KernelBench's L1/23 at real size: softmax over 393216 values is ~2.5e-6, zeros pass atol=1e-4."""
    ref = torch.softmax(torch.rand(4, 393216), dim=1)
    zeros = checks.compare_outputs([ref], [torch.zeros_like(ref)], 1e-4, 1e-4)
    assert zeros.category == ErrorCategory.MISMATCH and "scale" in zeros.message
    exact = checks.compare_outputs([ref], [torch.softmax(ref.new_tensor(ref).log(), dim=1)], 1e-4, 1e-4)
    assert exact.ok, exact.message
    # an ordinary output is judged by KernelBench's tolerance alone
    assert checks.compare_outputs([torch.ones(8)], [torch.ones(8) + 5e-5], 1e-4, 1e-4).ok


# -- a sandbox that cannot start is ours -------------------------------------------------------------------
def test_a_dead_child_before_start_is_infra_and_after_import_a_crash():
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    parent, child_end = ctx.Pipe()
    # os._exit: a plain return runs the finalizers that earlier tests registered (Dask, HTTP clients), and one
    # failing in the fork made the status 1
    process = ctx.Process(target=os._exit, args=(0,))
    process.start()
    process.join(5)
    child_end.close()
    parent.close()
    child = SimpleNamespace(conn=parent, process=process, workdir="")
    with pytest.raises(Fault) as early:
        children.send(child, {"cmd": "job"}, "starting the sandbox")
    assert early.value.category == ErrorCategory.INFRA
    with pytest.raises(Fault) as late:
        children.send(child, {"cmd": "check"}, "running forward")
    assert late.value.category == ErrorCategory.CRASH and "exited with status 0" in late.value.message


def test_a_problem_the_sandbox_cannot_load_is_infra_not_the_candidates(tmp_path, shared_evaluator):
    from kernelbench_rl.problems import Problem, get_problem, load_solution

    relu = get_problem("L1/19")
    # Loads in the trusted worker (its module is named kbrl_reference_*), fails in the sandbox.
    broken = relu.source.replace("import torch\n", "import torch\nif not __name__.startswith('kbrl_reference'):\n"
                                 "    raise RuntimeError('this problem cannot load here')\n", 1)
    problem = Problem(level=1, number=19, name=relu.name, source=broken, origin="inline", small_sizes=relu.small_sizes)
    with shared_evaluator(EvalSettings(device="cpu", timeout_s=60), problems={"L1/19": problem}) as evaluator:
        result = evaluator.evaluate([EvalRequest("L1/19", load_solution(relu), EvalSettings(device="cpu", timeout_s=60))])[0]
    assert result.error_category == ErrorCategory.INFRA, result.error_message
    assert "sandbox could not start" in result.error_message and "cannot load here" in result.error_message


# -- verdicts keyed by the reference -------------------------------------------------------------------------
def test_a_verdict_is_never_served_for_a_different_reference(tmp_path, shared_evaluator):
    """A cached 'correct' for ReLU must not answer for a problem of the same id that computes sigmoid (one worker
    judges both: its reference state is keyed by the problem's source, not its id)."""
    from kernelbench_rl.problems import Problem, get_problem, load_solution
    from kernelbench_rl.store import Store

    relu = get_problem("L1/19")
    sigmoid = Problem(level=1, number=19, name=relu.name, source=relu.source.replace("torch.relu(x)", "torch.sigmoid(x)"),
                      origin="inline", small_sizes=relu.small_sizes)
    assert sigmoid.source != relu.source
    settings = EvalSettings(device="cpu", timeout_s=60)
    store = Store(tmp_path / "kb.duckdb")
    request = EvalRequest("L1/19", load_solution(relu), settings)
    with shared_evaluator(settings, store=store) as evaluator:
        first = evaluator.evaluate([request])[0]
        again = evaluator.evaluate([request])[0]
    assert first.correct and again.cached
    with shared_evaluator(settings, store=store, problems={"L1/19": sigmoid}) as evaluator:
        other = evaluator.evaluate([request])[0]
    assert not other.cached
    assert other.error_category == ErrorCategory.MISMATCH, other.error_message
    assert Flag.HACK.value not in other.flags


# -- the quiet cores ---------------------------------------------------------------------------------------------
def test_strict_quiet_cores_keep_the_workers_other_threads_off_them(monkeypatch):
    from kernelbench_rl.evaluation.worker import scheduling

    all_cores, busy = {0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 5}
    monkeypatch.setattr(scheduling, "QUIET_CORES_MODE", "strict")
    assert scheduling.home_cores(all_cores, busy) == busy
    assert scheduling.home_cores(all_cores, set()) == all_cores  # too few cores to keep any: every core
    monkeypatch.setattr(scheduling, "QUIET_CORES_MODE", "shared")
    assert scheduling.home_cores(all_cores, busy) == all_cores


def test_a_thread_started_after_the_pin_inherits_it():
    """What strict quiet cores rely on: threads (and the zygote) started after the worker's main thread is pinned
    begin on its cores."""
    from kernelbench_rl.evaluation.worker import scheduling

    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores and sched_setaffinity")
    before = os.sched_getaffinity(0)
    one = {min(before)}
    seen: list[set[int]] = []
    try:
        scheduling.pin(0, one)
        thread = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        thread.start()
        thread.join(5)
    finally:
        scheduling.pin(0, before)
    assert seen == [one]
