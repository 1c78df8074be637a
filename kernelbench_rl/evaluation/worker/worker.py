"""The evaluation worker: one per GPU (or one on the CPU), trusted, long-lived.

    python -m kernelbench_rl.evaluation.worker.worker_process --device cuda --parallel 4

Speaks JSON lines: requests on stdin ({"id", "request"}), results on stdout ({"id", "result",
"baseline"}). It owns each problem's reference (model built after a hidden seed, inputs made on
the device from a pool of hidden seeds, reference outputs cached per seed, the eager baseline timed
once) and runs every candidate in a fresh child forked from a zygote (a forkserver that imported
torch and triton but never initialised CUDA), pre-started so a child is ready when a request comes.
Compilation in children runs in parallel; correctness and timing hold the device exclusively.
Imports only torch, triton, numpy and the standard library.

This module holds the evaluation's phases; their parts live beside it: worker_process.py (the process: its
start, the request loop, its stop), children.py (the candidate processes and the conversation with one), scheduling.py (who may use the
device, when, with how many bytes), reference_cache.py (each problem's reference, baselines, sizing),
checked_calls.py (the correctness step; verdict/correctness.py decides from its data), candidate_timing.py (the
timing step; timing/decisions.py decides from its numbers), paired_reference.py (the reference's sibling child),
verdict/faults.py (verdicts and whose fault they are), build_cache.py (CUDA builds kept across candidates) and
same_uid.py (the worker as its children's unprivileged uid).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import secrets
import shutil
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable

import torch

from kernelbench_rl.evaluation.worker import tempdirs
from kernelbench_rl.evaluation.sandbox import numerics, runtime, sandbox
from kernelbench_rl.evaluation.static_policy import candidate_class
from kernelbench_rl.evaluation.sandbox import timer
from kernelbench_rl.evaluation.verdict import checks
from kernelbench_rl.evaluation.timing import floor as floors
from kernelbench_rl.evaluation.worker import memory as footprints
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult, EvalSettings, Flag
from kernelbench_rl.evaluation import trace
from kernelbench_rl.evaluation.verdict import faults
from kernelbench_rl.evaluation.worker import children, leftovers, reference_budget, scheduling, startup
from kernelbench_rl.evaluation.worker.build_cache import BuildCache
from kernelbench_rl.evaluation.worker.checked_calls import check_correctness
from kernelbench_rl.evaluation.worker.worker_config import WorkerConfig, argument_parser, config_from_args  # noqa: F401
from kernelbench_rl.evaluation.worker.paired_reference import ResidentReference, paired_key, start_reference_child
from kernelbench_rl.evaluation.worker.candidate_timing import CandidateTiming, PreparedChild
from kernelbench_rl.evaluation.timing.decisions import (
    BASELINE_IN_CHILD, BASELINE_IN_WORKER, baseline_home, call_allowance_s, pairing_wanted,
)
from kernelbench_rl.evaluation.worker.same_uid import (  # noqa: F401 - importable from here as before
    SAME_UID_NPROC, SAME_UID_PROBE_TIMEOUT_S, become_same_uid_worker, same_uid_possible, same_uid_probe,
)
from kernelbench_rl.evaluation.worker.reference_cache import (  # noqa: F401 - importable from here as before
    FRESH_TIMING_BUFFERS, SEED_POOL_SIZE, ProblemState, ReferenceCache,
)
from kernelbench_rl.evaluation.worker.children import (  # noqa: F401 - importable from here as before
    PACKAGE_DIR, START_TIMEOUT_S, Child, ChildPool, Demand, WorkerStopping, _process_state, host_memory_limit_mb, stopped,
)
from kernelbench_rl.evaluation.worker.floor_service import FloorService
from kernelbench_rl.evaluation.verdict.faults import (  # noqa: F401 - importable from here as before
    WITHIN_BUDGET_OOM, WORKER_OOM, Fault, child_oom_fault, oom_not_the_candidates, ran_out_of_device_memory,
)
from kernelbench_rl.evaluation.worker.scheduling import (  # noqa: F401 - importable from here as before
    LOADED_CONTEXT_BYTES, QUIET_WAIT_S, WARM_CONTEXT_BYTES, DeviceQueue, MemoryBudget, QuietGate, SharedOrAlone,
)

# What runs outside the exclusive device section, never beside a timed trial (the quiet gate) - KBRL_EVAL_OVERLAP:
# "off" (or 0, the default): nothing. "tail": the check of the timed outputs and the profile, after the timed calls,
# while the next candidate's section starts; on an H200 (2026-11-26, grpo_ab_KBRL_EVAL_OVERLAP_*_h200.json) it saved
# nothing on level 2 (53.3 s against 53.7 s) and level 1 took 72.0 s against 62.0 s, with 17 candidates timed side by
# side against 5 (runs of one setting spread by about 10%). "all" (or 1): correctness
# too, which on an H100 made the level-2 GRPO-shaped batch slower, 53.8 s against 46.2 s (bench/RESULTS.md), since the
# seeds of many candidates then queue at the quiet gate holding their memory. Big plans keep the device throughout.
_OVERLAP = os.environ.get("KBRL_EVAL_OVERLAP", "off").strip().lower()
OVERLAP_MODE = {"1": "all", "0": "off"}.get(_OVERLAP, _OVERLAP)
OVERLAP_UNTIMED = OVERLAP_MODE == "all"
# Where problems' speed of light is worked out - KBRL_EVAL_FLOOR_SERVICE: "on" in a helper process
# (floor_service.py), "off" in this process behind a warm-up thread (3-5 s of Python that slowed the worker's own work
# beside it on an H200).
FLOOR_SERVICE = os.environ.get("KBRL_EVAL_FLOOR_SERVICE", "on").strip().lower()

# How much of the exclusive device section other children's GPU work (builds, first forwards) stays out of -
# KBRL_EVAL_QUIET: "timed" only its timed trials; "section" all of it. Beside another context's GPU work every
# synchronise waits for the device's time slice: on an H200 (host_overhead_probe_contention_h200.json) a flush and
# synchronise took 2.45 ms beside two busy processes against 0.045 ms alone, a poisoning 2.47 ms against 0.34 ms.
QUIET_SCOPE = os.environ.get("KBRL_EVAL_QUIET", "timed").strip().lower()


class Worker:
    """Evaluates candidates, several at once (one per thread of main's pool): each in a fresh child, against
    the problem's reference held here."""

    def __init__(self, config: WorkerConfig, phases: startup.Phases | None = None) -> None:
        """Ready to take a candidate when this returns; the rest of the start goes on in `self.background`.

        The steps overlap (see startup.py): the zygote imports while this process starts CUDA, and the IPC
        self-test's child starts beside the worker's own CUDA context. The comparison kernel's build and all
        but one pre-started child come after: the build holds the device queue, so the first evaluation's
        device section waits for exactly that, and `take_child` spawns a child if none is ready yet."""
        self.config = config
        self.phases = phases or startup.Phases()
        self.in_flight = config.in_flight or config.parallel + 1
        self.device = "cuda" if config.device == "cuda" else "cpu"
        self.root = tempdirs.owned_tempdir("worker")  # named for this pid: a pool sweeps it if we are killed
        os.chmod(self.root, 0o711)
        self.cache_root = os.path.join(self.root, ".build-cache")
        os.makedirs(self.cache_root, mode=0o700, exist_ok=True)
        self.device_queue = DeviceQueue()
        # More evaluations may be under way than compile at once: one waiting for the device holds no
        # compile slot, so the CPU keeps compiling and a hang starts its timeout early instead of after
        # everything submitted before it.
        self.compile_slots = threading.Semaphore(max(1, config.parallel))
        self.clock = timer.Clock.capture() if self.device == "cuda" else None
        self.references = ReferenceCache(self.device, self.root, config.ref_cache_bytes, self.clock)
        self.arch = ""
        if self.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("no CUDA device is visible to this worker")
        startup.zygote_environment(self.device)  # (boot.py or main may have started the zygote with it already)
        # Cores kept for the device section's holder; compiling children get the others.
        self.all_cores, self.quiet_cores, self.busy_cores = scheduling.core_split(self.device)
        # Where this process's threads run outside a device section, and where the threads and processes it starts
        # (the zygote, its children) begin: off the quiet cores (KBRL_EVAL_QUIET_CORES=strict), or on every core.
        self.home_cores = scheduling.home_cores(self.all_cores, self.busy_cores)
        scheduling.pin(0, self.home_cores)
        self.children = ChildPool(self.device, config.warm_children, self.busy_cores)
        # Each evaluation's share of the pre-started children (ChildPool.job_arrived), by id of its payload: its takes,
        # the candidate's child and a reference's (which starts on a thread of its own), count on it.
        self._demands: dict[int, Demand] = {}
        # Orphans of the children's processes (a candidate's setsid'd or double-forked daemons) come to this
        # process instead of init, so the sweep after each evaluation finds them (leftovers.py).
        leftovers.adopt_orphans()
        if "zygote_spawn" not in self.phases.seconds():
            with self.phases.timed("zygote_spawn"):
                startup.start_zygote()  # its imports go on beside this process's CUDA start
        self.versions = {
            "torch": torch.__version__, "python": platform.python_version(), "triton": _triton_version(),
            "cuda": str(torch.version.cuda or ""),
        }
        # A root worker's children become "nobody" (never root: root is exempt from the process limit and could
        # write anywhere Landlock does not cover). Where nobody cannot read the Python installation (under /root),
        # they keep the one capability to read past permission bits, and Landlock's read allow-list confines it.
        self.drop_uid = config.drop_uid and os.geteuid() == 0
        self.read_search = self.drop_uid and not sandbox.python_readable_by_others()
        if self.read_search:
            self.versions["sandbox_note"] = ("children run as nobody with CAP_DAC_READ_SEARCH: the Python installation "
                                             "is not readable by nobody; reads confined by Landlock")
        self.transport = config.transport if config.transport != "auto" else "file"
        self.ipc_selftest = ""
        selftest: list[str] = []
        selftest_thread = None
        if self.device == "cuda" and config.transport in ("auto", "ipc"):
            selftest_thread = threading.Thread(target=lambda: selftest.append(self._ipc_selftest()), daemon=True,
                                               name="kbrl-ipc-selftest")
            selftest_thread.start()
        self.quiet_gate = QuietGate()
        self.background: list[threading.Thread] = []
        floor_service: FloorService | None = None
        if self.device == "cuda":
            with self.phases.timed("cuda_context"):
                major, minor = torch.cuda.get_device_capability()
                self.arch = f"{major}.{minor}"
                self.hardware = torch.cuda.get_device_name()
                torch.empty(1, device="cuda")  # this process's context, made while the self-test's child starts
            self._start_background("library_warmup", self._warm_up_libraries)
            if FLOOR_SERVICE != "off":  # its imports and warm-up go on beside the rest of this start
                try:
                    floor_service = FloorService(self.hardware)
                    # Its seconds of Python stay off the quiet cores, where a timing's thread must not be descheduled.
                    scheduling.pin(floor_service.pid or -1, self.busy_cores)
                except OSError as exc:  # the floors are worked out in this process, as without the helper
                    self.versions["floor_service"] = f"not started: {exc}"[:200]
        else:
            self.hardware = f"cpu:{platform.machine()}"
        self.builds = BuildCache(self.cache_root, self.arch, self.drop_uid)
        if selftest_thread is not None:
            selftest_thread.join()
            self.ipc_selftest = selftest[0] if selftest else "the self-test did not finish"
            self.transport = "ipc" if self.ipc_selftest == "ok" else "file"
        self.versions["transport"] = self.transport
        self.versions["worker_uid"] = "same as children (unprivileged, non-dumpable)" if config.same_uid else str(os.geteuid())
        self.residency = SharedOrAlone()
        self.candidate_timing = CandidateTiming(self.references, self.quiet_gate, self.transport, self.hardware,
                                                self._reference_child, self._give_back_reference,
                                                self._resident_or_new_reference, self._baseline_home)
        self.candidate_timing.floor_service = floor_service
        self.paired_reference = ResidentReference(self.children.retire)
        self.versions["numerics"] = numerics.describe()
        self.memory: MemoryBudget | None = None
        self.alone_capacity = 0
        self.total_memory = 0
        self.l2_bytes = 0
        if self.device == "cuda":
            # After the self-test's child is gone and before any pre-started child: free memory as it always was.
            free, self.total_memory = torch.cuda.mem_get_info()
            self.l2_bytes = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or (50 << 20))
            reserved = self._reserved_for_others()
            others = scheduling.held_by_others(free, self.total_memory, WARM_CONTEXT_BYTES + torch.cuda.memory_reserved())
            # Sharing the device with a policy: each admission also re-reads the device's free memory, since the
            # policy may have grown since. (Alone on it, the budget fixed here is the rule, as it always was.)
            self.memory, self.alone_capacity = scheduling.device_budgets(
                free, self.in_flight, config.warm_children, config.ref_cache_bytes, reserved_bytes=reserved,
                others_hold=others, free_probe=(lambda: torch.cuda.mem_get_info()[0]) if reserved else None)
            self.versions["child_memory_budget_gb"] = f"{self.memory.capacity / 2**30:.1f}"
            if reserved:
                self.versions["reserved_for_others_gb"] = f"{reserved / 2**30:.1f} ({others / 2**30:.1f} held at start)"
        with self.phases.timed("first_child"):
            self.children.prestart(min(1, config.warm_children))  # returns once the zygote serves
        self.background.append(self.children.fill_in_background(self.phases, "warm_children", gate=self.quiet_gate))
        if self.device == "cuda":
            # The fused comparison builds in the background while the first problems are sized and compiled; their
            # comparisons take the torch path (which judges alike) until it is ready, and its checking launches are
            # never beside a timed trial. Holding the device for the build instead kept a cold pool's first device
            # section waiting 4-5 s on an H200.
            checks.defer_fused_comparison()

            self._start_background("comparison_warmup",
                                   lambda: checks.warm_up_comparison("cuda", self.quiet_gate.noisy))
            if self.candidate_timing.floor_service is None:  # the floors are worked out here: warm that up now
                self._start_background("floor_warmup", lambda: floors.warm_up(self.hardware))

    def _start_background(self, phase: str, work: Callable[[], str]) -> None:
        """`work` on a thread of its own, timed as `phase` (and in the timeline); what it returns goes to versions."""

        def run() -> None:
            with self.phases.timed(phase), trace.span("worker", phase):
                self.versions[phase] = work()

        thread = threading.Thread(target=run, daemon=True, name=f"kbrl-{phase.replace('_', '-')}")
        self.background.append(thread)
        thread.start()

    def _warm_up_libraries(self) -> str:
        """cuBLAS and cuDNN loaded in this process while the pool starts (0.2-0.6 s on an H200), not inside a cold
        folder's first sizings, which hold the device and all of the children's memory. GPU work, so never beside a
        timed trial. Its seconds are the phase's (`library_warmup`)."""
        try:
            with self.quiet_gate.noisy():
                runtime.make_library_handles()
        except Exception as exc:  # noqa: BLE001 - the first sizing loads them itself
            return f"failed: {type(exc).__name__}: {exc}"[:200]
        return "ok"

    def _reserved_for_others(self) -> int:
        """config.reserved_memory_bytes where it applies to this worker's device (its UUID, when one is named)."""
        wanted = self.config.reserved_memory_bytes
        uuid = self.config.reserved_device_uuid
        if wanted <= 0 or not uuid:
            return max(0, wanted)
        return wanted if str(getattr(torch.cuda.get_device_properties(0), "uuid", "")) == uuid else 0

    def _ipc_selftest(self) -> str:
        """Can this worker open CUDA IPC handles from a confined child? ('ok' or why not)."""
        return children.ipc_selftest(self.children.ctx, self.phases, self.drop_uid, self.config.landlock,
                                    self.root, self.config.same_uid)

    # -- children (children.py) ------------------------------------------------------------
    def take_child(self, payload: dict[str, Any] | None = None) -> Child:
        """A pre-started child for a job (the evaluation of `payload`); WorkerStopping once the orchestrator is gone."""
        return self.children.take(self._demands.get(id(payload)) if payload is not None else None)

    def kill_running_children(self) -> None:
        """The orchestrator is gone: kill the children serving jobs, and start none from now on."""
        self.children.kill_running()

    def shutdown(self) -> None:
        if self.candidate_timing.floor_service is not None:
            self.candidate_timing.floor_service.close()
        self.paired_reference.drop()
        self.children.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)
        home = os.environ.get("HOME", "")
        if self.config.same_uid and os.path.basename(home).startswith("kbrl-worker-home-"):
            shutil.rmtree(home, ignore_errors=True)

    # -- one evaluation --------------------------------------------------------------------
    def evaluate(self, payload: dict[str, Any], received_at: float | None = None,
                 backlog: int | None = None) -> tuple[EvalResult, dict | None]:
        """Evaluate one candidate, `backlog` more queued at the orchestrator (None: not said), counted as what the
        pool's pre-started children are for (children.ChildPool.job_arrived)."""
        demand = self._demands[id(payload)] = self.children.job_arrived(backlog)
        try:
            return self._evaluate_beside_others(payload, received_at)
        finally:
            self._demands.pop(id(payload), None)
            self.children.job_left(demand)

    def _evaluate_beside_others(self, payload: dict[str, Any],
                                received_at: float | None = None) -> tuple[EvalResult, dict | None]:
        """Evaluate one candidate beside others; if it ran out of device memory, once more with the device alone.

        Children warm up in parallel, and one candidate that hoards device memory would otherwise turn its
        neighbours' correct kernels into OOM verdicts. Only an OOM that recurs alone is the kernel's."""
        if self.device != "cuda":
            return self._evaluate_once(payload, received_at)
        with self.residency.shared():
            result, baseline = self._evaluate_once(payload, received_at)
        if not ran_out_of_device_memory(result):
            return result, baseline
        first = result.error_message
        t = time.perf_counter()
        with self.residency.alone():
            waited = time.perf_counter() - t
            self.paired_reference.drop()
            self.children.reaping.join()  # the killed children (the hoarder among them) have let go of the device
            torch.cuda.empty_cache()
            result, baseline = self._evaluate_once(payload, None)
        result.phase_seconds["alone_wait"] = waited
        result.versions["oom_retry"] = f"ran again alone after running out of device memory beside others: {first}"[:300]
        # Alone, and the candidate within its budget: ours where the device was short without it (our buffers do not
        # fit beside it: never its zero), the kernel's where it had its whole budget free (faults.settle_alone_oom).
        faults.settle_alone_oom(result)
        return result, baseline

    def _evaluate_once(self, payload: dict[str, Any], received_at: float | None = None) -> tuple[EvalResult, dict | None]:
        t_start = time.perf_counter()
        settings = EvalSettings(**payload["settings"])
        source = payload["candidate_source"]
        result = EvalResult(
            problem_id=payload["problem_id"], candidate_sha256=payload.get("candidate_sha256", ""),
            backend=settings.backend, precision=settings.precision, device_kind=self.device,
            format_ok=True, settings_hash=settings.settings_hash(), hardware=self.hardware,
            versions=dict(self.versions), trials_total=settings.correctness_trials,
        )
        baseline_out: dict | None = None
        child: Child | None = None
        compiling = contextlib.ExitStack()  # the compile slot, released after warm-up (closing twice is a no-op)
        workdir = ""
        if received_at is not None:
            result.phase_seconds["queue"] = max(0.0, t_start - received_at)  # waiting for a worker thread
        who = f"{payload['problem_id']}#{result.candidate_sha256[:8]}" if trace.enabled() else ""
        try:
            mark = time.perf_counter()
            state = self._reference_for(payload, settings, result)
            trace.record(who, "reference", mark)  # sizing the problem, or waiting for whoever sizes it
            workdir = tempfile.mkdtemp(prefix="c-", dir=self.root)
            t = time.perf_counter()
            child = self.take_child(payload)
            child.workdir = workdir
            child.trace_who = f"{payload['problem_id']}#{result.candidate_sha256[:8]}#{child.pid}"
            trace.serve(trace.who_of(child))
            if self.device == "cuda":
                child.rss_limit_mb = host_memory_limit_mb(settings.memory_limit_mb, self.transport,
                                                          state.input_bytes + state.output_bytes)
            result.phase_seconds["child_start"] = time.perf_counter() - t
            trace.record(who, "child_take", t)
            mark = time.perf_counter()
            loaded = self._start_candidate(child, workdir, source, payload, settings, state, result, compiling)
            trace.record(who, "compile", mark)
            if loaded["event"] == "nvcc":
                self._nvcc_verdict(result, loaded)
                return result, None
            result.compiled = True
            self._build_and_warm(child, state, settings, result)
            compiling.close()
            baseline_out = self._device_section_for(child, state, settings, result, payload)
            if self.device == "cuda" and result.runtime_ms:  # host work (the meta device), off the device
                mark = time.perf_counter()
                self.candidate_timing.against_the_floor(state, settings.precision, result)
                result.phase_seconds["speed_of_light"] = time.perf_counter() - mark
                trace.record(who, "speed_of_light", mark)
        except Fault as fault:
            traceback.clear_frames(fault.__traceback__)  # its frames' references and inputs go now, not at a gc
            result.error_category = fault.category
            result.error_message = fault.message
            result.flags += [flag for flag in fault.flags if flag not in result.flags]
            if fault.facts:
                result.versions["device_oom_facts"] = json.dumps(fault.facts, sort_keys=True)
            if fault.category == ErrorCategory.COMPILE:
                result.compiled = False
        except torch.OutOfMemoryError as exc:
            # The worker's own work (references, received outputs) found the device full. Beside other
            # children that proves nothing, and evaluate() runs the candidate again alone. The candidate's
            # process cannot pass its budget (the child's allocator enforces it), so alone it is ours too.
            result.error_category = ErrorCategory.RUNTIME
            result.error_message = faults.own_oom_message(exc, self.device)
            # The traceback's frames hold the tensors that filled the device (24 GiB stayed allocated on an
            # H100 after two level-1 OOMs and starved every later evaluation): drop them before releasing.
            traceback.clear_frames(exc.__traceback__)
            del exc
            self.references.release_device_memory(force=True)
        except Exception as exc:  # noqa: BLE001 - our own failure: the pool retries INFRA
            traceback.clear_frames(exc.__traceback__)
            result.error_category = ErrorCategory.INFRA
            first_line = str(exc).splitlines()[0] if str(exc) else ""
            result.error_message = f"worker error: {type(exc).__name__}: {first_line}"[:300]
            traceback.print_exc(file=sys.stderr)
        finally:
            compiling.close()
            t = time.perf_counter()
            trace.flush()
            if child is not None:
                swept = self.children.retire(child, workdir)
                if swept.descendants and result.error_category == ErrorCategory.OK:
                    # Gone now (the sweep killed them before this verdict); a kernel that leaves processes
                    # running after its calls earns nothing.
                    result.error_category = ErrorCategory.RUNTIME
                    result.error_message = (f"the kernel left {swept.descendants} process(es) running after its "
                                            "calls; a kernel may not start processes that outlive its forward")
                    if Flag.HACK.value not in result.flags:
                        result.flags.append(Flag.HACK.value)
                if swept.descendants:  # (orphans cannot be told apart by candidate: killed, not recorded here)
                    result.versions["processes_killed"] = str(swept.descendants)
            elif workdir:
                self.children.reap_later(None, workdir)
            result.phase_seconds["teardown"] = time.perf_counter() - t
        if result.error_category != ErrorCategory.OK:
            result.correct = False
            if result.error_category.is_kernel_fault:
                result.speedup = None
        if self.device == "cpu" and Flag.NO_SPEEDUP_ON_CPU.value not in result.flags:
            result.flags.append(Flag.NO_SPEEDUP_ON_CPU.value)
        if self.device == "cpu":
            # A kernel right only under the interpreter (its masks, its float64 intermediates) or only up to the small
            # sizes is right here: the verdict must not be read as one about the GPU (nor, at small sizes, the real ones).
            result.versions["scope"] = cpu_scope(settings.size)
        result.phase_seconds["worker_total"] = time.perf_counter() - t_start
        return result, baseline_out

    def _reference_for(self, payload: dict[str, Any], settings: EvalSettings, result: EvalResult) -> ProblemState:
        """The problem's state, sized (and its inputs' discrimination found) if this is its first request."""
        state = self.references.problem_state(payload["problem_id"], payload["problem_source"],
                                              str(payload.get("suite") or "kernelbench"))
        result.versions["suite"] = state.suite
        result.versions["tolerance"] = state.tolerance_note(settings.precision)
        t = time.perf_counter()
        if state.unsized(settings.precision, payload.get("input_variant")):
            # The first request of a problem sizes it on the device (one reference forward: parameters,
            # inputs, outputs, the forward's peak) and tries trivial candidates on its inputs, alone in
            # device memory, going before queued candidates; the others wait here, not in the device
            # queue, and find it done.
            with state.sizing:
                if state.unsized(settings.precision, payload.get("input_variant")):
                    # Memory before the device, as every evaluation takes them (timing holds its bytes while it
                    # waits for the device): the other order could deadlock.
                    with scheduling.sizing_admission(self.memory), self._device_section(DeviceQueue.URGENT):
                        if self.memory is not None:
                            with trace.span(payload["problem_id"], "sizing_free_wait"):
                                scheduling.wait_for_free(int(0.75 * self.memory.capacity), result,
                                                         self.children.describe)
                        result.phase_seconds["reference_wait"] = time.perf_counter() - t
                        # Bounded by the reference's budget (the pool's watchdog), from when the locks are held.
                        with state.lock, self.references.rng_lock, reference_budget.phase("sizing"):
                            mark = time.perf_counter()
                            if not state.sized:
                                self.references.size(state, settings.precision, self.memory, self.alone_capacity,
                                                     self.l2_bytes, self.total_memory)
                            trace.record(payload["problem_id"], "sizing", mark)
                            mark = time.perf_counter()
                            self.references.discriminate(state, settings, payload.get("input_variant"))
                            result.phase_seconds["discrimination"] = time.perf_counter() - mark
                            trace.record(payload["problem_id"], "discrimination", mark)
                            # The worker's cached device memory goes back before any child may take it; a sizing
                            # next in line takes the whole budget and would allocate it again (each cudaFree here
                            # took 0.1-0.6 s on an H200, in series with every other sizing of a cold folder).
                            if self.memory is None or not self.memory.next_is_sizing():
                                with trace.span(payload["problem_id"], "sizing_release"):
                                    self.references.release_device_memory()
                else:  # sized by the request this one waited for
                    result.phase_seconds["reference_wait"] = time.perf_counter() - t
        state.last_used = time.monotonic()
        if state.too_large:
            raise Fault(ErrorCategory.TOO_LARGE, state.too_large)
        # Sizing the problem (once per problem and worker), including the wait for the device or for
        # the request that sized it.
        result.phase_seconds["reference"] = time.perf_counter() - t
        return state

    def _start_candidate(self, child: Child, workdir: str, source: str, payload: dict[str, Any], settings: EvalSettings,
                         state: ProblemState, result: EvalResult, compiling: contextlib.ExitStack) -> dict[str, Any]:
        """The child's sandbox started and the candidate compiled and imported in it (holding a compile slot from
        `compiling`); the child's 'loaded' message, or its 'nvcc' verdict for a build-only evaluation."""
        # A candidate named Model (kernrl's convention) runs as the ModelNew the static policy judged.
        job = self._job(workdir, candidate_class.as_model_new(source), payload["problem_source"], settings, state)
        build_key = self.builds.restore(workdir, source, settings, self.device)
        job["build_restored"] = bool(build_key) and os.path.isdir(os.path.join(workdir, "torch_extensions"))
        t = time.perf_counter()
        compiling.enter_context(self.compile_slots)
        result.phase_seconds["compile_wait"] = time.perf_counter() - t
        trace.record(trace.who_of(child), "compile_wait", t)
        child.device_memory_cap = job.get("device_memory_cap")  # the budget as the worker gave it, for OOM verdicts
        children.send(child, job, "starting the sandbox")
        t = time.perf_counter()
        started = children.expect(child, {"started"}, START_TIMEOUT_S, "starting the sandbox")
        trace.record(trace.who_of(child), "sandbox_start", t)
        if started.get("numerics") is not None and dict(started["numerics"]) != numerics.snapshot():
            raise Fault(ErrorCategory.INFRA, "the sandbox's numerics settings differ from the reference's: "
                        f"{numerics.describe(dict(started['numerics']))}")
        result.phase_seconds["start_wait"] = time.perf_counter() - t
        result.versions["sandbox"] = str(started.get("sandbox", ""))
        if self.device == "cuda":
            result.versions["profiler_warmup"] = str(started.get("profiler_warmup", ""))
        result.phase_seconds["cuda_init"] = float(started.get("cuda_init_s", 0.0))
        mark = time.perf_counter()
        loaded = children.expect(child, {"loaded", "nvcc"}, settings.timeout_s, "compiling/importing the kernel")
        trace.record(trace.who_of(child), "import", mark)
        result.phase_seconds["compile"] = float(loaded.get("compile_s", 0.0))
        if build_key:
            result.versions["build_cache"] = self.builds.save(workdir, build_key)
        return loaded

    def _build_and_warm(self, child: Child, state: ProblemState, settings: EvalSettings, result: EvalResult) -> None:
        """ModelNew constructed in the child and, with prewarm, called once."""
        # Construction (which may build a CUDA extension) runs outside the exclusive section, in
        # parallel with other children; so does an optional warm-up forward (Triton JIT).
        t = time.perf_counter()
        deadline = time.monotonic() + settings.timeout_s
        with self.quiet_gate.noisy():  # parameter init launches GPU work: not beside a timed trial
            mark = time.perf_counter()
            children.send(child, {"cmd": "build", "seed": state.init_seed}, "building ModelNew")
            children.expect(child, {"built"}, deadline - time.monotonic(), "building ModelNew")
            trace.record(trace.who_of(child), "build", mark)
        result.phase_seconds["build"] = time.perf_counter() - t
        if self.config.prewarm:
            # The first call (Triton JIT compile, autotuning) is its own phase: compile time, not overhead.
            # The child frees its inputs and outputs afterwards, so its memory is held only meanwhile.
            t = time.perf_counter()
            # Waiting for memory is not the candidate's time; a first call as slow as the reference's is allowed.
            remaining = max(deadline - time.monotonic(), call_allowance_s(state.forward_s))
            with scheduling.admission(self.memory, state.plan, "warm"), self.quiet_gate.noisy():
                result.phase_seconds["memory_wait"] = time.perf_counter() - t
                mark = time.perf_counter()
                children.send(child, {"cmd": "warm", "seed": secrets.randbits(31)}, "warming up (first forward)")
                children.expect(child, {"warmed"}, remaining, "warming up (first forward)")
                trace.record(trace.who_of(child), "warm", mark)
            result.phase_seconds["first_call"] = time.perf_counter() - t - result.phase_seconds["memory_wait"]

    def _device_section_for(self, child: Child, state: ProblemState, settings: EvalSettings, result: EvalResult,
                            payload: dict[str, Any]) -> dict | None:
        """Correctness and timing (with the memory they need admitted); the fresh baseline.

        By default the device is held for all of it (`_exclusive_section_for`). With KBRL_EVAL_OVERLAP=1 only the
        timed work holds it alone (`_enter_timed_section`): correctness, the check of timed outputs and the profile
        run beside other candidates' untimed work, never beside a timed trial (the quiet gate). A big plan keeps
        the device to itself throughout, with its room made first."""
        t = time.perf_counter()
        # Memory before the device, everywhere: a timed section waits for the device holding its bytes.
        with scheduling.admission(self.memory, state.plan, "section"):
            result.phase_seconds["section_memory_wait"] = time.perf_counter() - t
            if self.device != "cuda" or not OVERLAP_UNTIMED or scheduling.is_big(self.memory, state.plan):
                return self._exclusive_section_for(child, state, settings, result, payload, t)
            deadline = time.monotonic() + settings.timeout_s
            self._correctness(child, state, settings, result, deadline, payload, shared=True)
            deadline += result.phase_seconds.get("correctness_reference", 0.0)  # not the candidate's time
            timed = contextlib.ExitStack()
            try:
                self._enter_timed_section(timed, child, result, time.perf_counter())
                return self.candidate_timing.run(child, state, settings, result, deadline, payload, timed=timed)
            finally:
                timed.close()
                self.references.release_device_memory()

    def _enter_timed_section(self, timed: contextlib.ExitStack, child: Child, result: EvalResult, t: float) -> None:
        """The device alone (other timings and sizing wait; untimed work waits at the quiet gate), the quiet cores
        for the candidate's process and this thread; `timed.close()` gives them back."""
        timed.enter_context(self._device_section())
        entered = time.perf_counter()
        result.phase_seconds["device_wait"] = result.phase_seconds.get("device_wait", 0.0) + entered - t
        scheduling.pin(child.pid, self.quiet_cores)
        scheduling.pin(0, self.quiet_cores)

        def leave() -> None:
            scheduling.pin(0, self.home_cores)
            result.phase_seconds["device_section"] = result.phase_seconds.get("device_section", 0.0) + time.perf_counter() - entered
        timed.callback(leave)

    def _exclusive_section_for(self, child: Child, state: ProblemState, settings: EvalSettings, result: EvalResult,
                               payload: dict[str, Any], t: float) -> dict | None:
        """Correctness and timing with the device held (big plans, the CPU: throughout; otherwise up to the end of
        the timed calls, OVERLAP_MODE "tail")."""
        section = contextlib.ExitStack()
        try:
            section.enter_context(self._device_section())
            big = section.enter_context(self._room_for(state))
            if big:
                scheduling.wait_for_free(state.plan.needed_bytes, result, self.children.describe)
            if self.device == "cuda" and QUIET_SCOPE == "section":
                mark = time.perf_counter()
                if not section.enter_context(self.quiet_gate.quiet()):
                    result.versions["section_overlap"] = "began beside another child's warm-up (past the quiet gate's wait)"
                result.phase_seconds["section_quiet_wait"] = time.perf_counter() - mark
            entered = time.perf_counter()
            result.phase_seconds["device_wait"] = entered - t

            def leave() -> None:
                scheduling.pin(0, self.home_cores)
                result.phase_seconds["device_section"] = time.perf_counter() - entered
                trace.record(trace.who_of(child), "device_section", entered)
            section.callback(leave)
            trace.record(trace.who_of(child), "device_wait", t, entered)
            deadline = time.monotonic() + settings.timeout_s
            scheduling.pin(child.pid, self.quiet_cores)
            scheduling.pin(0, self.quiet_cores)
            prepared = None
            if (self._baseline_home(state) == BASELINE_IN_CHILD
                    and self.candidate_timing.needs_baseline(state, settings, payload)):
                # The reference's child for the baseline starts while correctness runs (its start is host work
                # and a model's construction, neither of them timed).
                prepared = PreparedChild(lambda: self._resident_or_new_reference(
                    state, settings, payload, result, time.monotonic() + max(settings.timeout_s, START_TIMEOUT_S)))
            try:
                if not self._correctness(child, state, settings, result, deadline, payload, shared=False):
                    return None
                deadline += result.phase_seconds.get("correctness_reference", 0.0)  # not the candidate's time
                tail_outside = self.device == "cuda" and OVERLAP_MODE == "tail" and not big
                return self.candidate_timing.run(child, state, settings, result, deadline, payload,
                                                 timed=section if tail_outside else None, prepared=prepared)
            finally:
                if prepared is not None:  # not taken (correctness failed): kept for the problem's next candidate
                    prepared.release(lambda kept: self._give_back_reference(kept, True, state, settings, payload))
                if big:  # its memory is back before its bytes are
                    child.signal_kill()
                    child.process.join(timeout=10)
        finally:
            section.close()
            self.references.release_device_memory()

    def _job(self, workdir: str, source: str, problem_source: str, settings: EvalSettings,
             state: ProblemState) -> dict[str, Any]:
        candidate_path = os.path.join(workdir, "kernel.py")
        problem_path = os.path.join(workdir, "problem.py")
        with open(candidate_path, "w") as handle:
            handle.write(source)
        with open(problem_path, "w") as handle:
            handle.write(runtime.without_reference_model(problem_source))
        env = sandbox.scrubbed_env(
            HOME=workdir, TMPDIR=workdir, TRITON_CACHE_DIR=os.path.join(workdir, ".triton"),
            TORCH_EXTENSIONS_DIR=os.path.join(workdir, "torch_extensions"),
            TRITON_INTERPRET="1" if self.device == "cpu" else "0", PYTHONDONTWRITEBYTECODE="1",
        )
        if self.arch:
            env["TORCH_CUDA_ARCH_LIST"] = self.arch
        drop = self.drop_uid
        if drop:
            for path in (workdir, candidate_path, problem_path):
                os.chown(path, self.children.children_uid, self.children.children_uid)
        job = {
            "cmd": "job", "workdir": workdir, "candidate_path": candidate_path, "problem_path": problem_path,
            "device": self.device, "precision": settings.precision, "env": env, "drop_uid": drop,
            "uid": self.children.children_uid,
            "read_search": self.read_search,
            "landlock": self.config.landlock, "transport": self.transport, "block_unix_sockets": self.config.same_uid,
            "address_space_mb": settings.memory_limit_mb if self.device == "cpu" else None,
            "nvcc_only": settings.backend == "cuda" and self.device == "cpu", "nvcc": self.config.nvcc,
            "readable": [PACKAGE_DIR, os.path.dirname(shutil.which(self.config.nvcc) or "/usr/bin")],
            "trace": trace.enabled(),
        }
        if state.plan is not None:
            job["device_memory_cap"] = footprints.enforced_cap_bytes(state.plan, self.total_memory)
            job["device_memory_total"] = self.total_memory
        # Tensors travel as files of the private dir: the file-size limit must admit them.
        job["file_size_mb"] = max(512, (3 * (state.input_bytes + state.output_bytes)) >> 20)
        return job

    def _nvcc_verdict(self, result: EvalResult, message: dict[str, Any]) -> None:
        text = str(message.get("message", ""))[:700]
        result.error_message = text
        if message.get("ok"):
            result.compiled = True
        elif text.startswith("cannot run"):  # no nvcc on this machine: not the kernel's fault
            result.error_category = ErrorCategory.INFRA
        else:
            result.error_category = ErrorCategory.COMPILE

    @contextlib.contextmanager
    def _room_for(self, state: ProblemState):
        """A big evaluation gets other problems' references dropped; one that does not fit beside the
        pre-started children (half a GiB of context each, 18 by default) also has them killed, and none
        spawned until it ends (take_child refills the pool gradually). Yields whether the plan is big."""
        if not scheduling.is_big(self.memory, state.plan):
            yield False
            return
        drain = state.plan.needed_bytes > self.memory.capacity
        self.paired_reference.drop()
        self.children.make_room(drain)
        self.references.trim_resident(keep=state)
        if drain:
            self.children.reaping.join()
        self.references.release_device_memory(force=True)
        try:
            yield True
        finally:
            self.children.room_made(drain)

    def _device_section(self, priority: int = DeviceQueue.NORMAL) -> contextlib.AbstractContextManager:
        # On the GPU, one child at a time runs (clean timings). On the CPU the cores are shared
        # anyway, so children run concurrently.
        return self.device_queue.hold(priority) if self.device == "cuda" else contextlib.nullcontext()

    def _correctness(self, child: Child, state: ProblemState, settings: EvalSettings, result: EvalResult,
                     deadline: float, payload: dict[str, Any], shared: bool) -> bool:
        """checked_calls.check_correctness with this worker's references, quiet gate, transport and device."""
        return check_correctness(child, state, settings, result, deadline, payload, shared=shared,
                                 references=self.references, quiet_gate=self.quiet_gate, transport=self.transport,
                                 device=self.device)

    def _reference_child(self, state: ProblemState, settings: EvalSettings, payload: dict[str, Any],
                         base: dict[str, Any], solo: timer.TimingRecord, result: EvalResult,
                         deadline: float) -> Child | None:
        """A second child running the reference itself (no candidate code in it), built and warm, when this
        problem's timing needs the pairing (see pairing_wanted); None otherwise or when it cannot start, which
        is ours and leaves the solo baseline in place."""
        if self.device != "cuda" or not pairing_wanted(
            os.environ.get("KBRL_EVAL_PAIRED", "auto"), scheduling.is_big(self.memory, state.plan),
            state.plan.needed_bytes if state.plan is not None else 0,
            [(base.get("eager_ms"), base.get("eager_spread_ms")), (solo.median_ms, solo.iqr_ms)],
        ):
            return None
        return self._resident_or_new_reference(state, settings, payload, result, deadline)

    def _baseline_home(self, state: ProblemState) -> str:
        """Where this problem's baseline is timed (decisions.baseline_home)."""
        if self.device != "cuda":
            return BASELINE_IN_WORKER
        return baseline_home(os.environ.get("KBRL_EVAL_BASELINE", BASELINE_IN_CHILD),
                             scheduling.is_big(self.memory, state.plan),
                             state.plan.needed_bytes if state.plan is not None else 0)

    def _resident_or_new_reference(self, state: ProblemState, settings: EvalSettings, payload: dict[str, Any],
                                   result: EvalResult, deadline: float) -> Child | None:
        """A child running the problem's reference, for its baseline or a side-by-side timing: the resident one, or
        a new one (kept resident after, for the problem's later candidates); None when it cannot start."""
        resident = self.paired_reference.take(paired_key(state, settings, payload))
        if resident is not None:
            return resident
        return start_reference_child(lambda: self.take_child(payload), self.children.retire, self._job, self.root, self.quiet_cores,
                                     state, settings, payload, result, deadline)

    def _give_back_reference(self, child: Child, healthy: bool, state: ProblemState, settings: EvalSettings,
                             payload: dict[str, Any]) -> None:
        """The paired reference child after a timing: kept for the problem's next candidate when it served well."""
        self.paired_reference.give_back(paired_key(state, settings, payload), child, healthy)


def cpu_scope(size: str) -> str:
    """What a CPU verdict holds for (`versions["scope"]`): the sizes that ran, under Triton's interpreter."""
    if size == "real":
        return "CPU: Triton's interpreter at the problem's real sizes; says nothing about a GPU"
    return "CPU: Triton's interpreter at the problem's small sizes; says nothing about a GPU or the real sizes"


def _triton_version() -> str:
    try:
        import triton

        return str(triton.__version__)
    except Exception:  # noqa: BLE001
        return ""
