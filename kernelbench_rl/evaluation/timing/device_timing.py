"""Timing a candidate that passed correctness, on the device, against its reference.

The eager baseline (timed once per problem, the candidate's child stopped meanwhile), the candidate's timed
trials with some of their outputs checked, a side-by-side re-timing with the reference in a sibling child
where either side's trials spread, the problem's physical floor, a re-check on the host clock of an
excessive speedup, and a profile telling whether the kernel's own code did the work.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import secrets
import threading
import time
from typing import Any, Callable

from kernelbench_rl.evaluation import trace
from kernelbench_rl.evaluation.sandbox import wire
from kernelbench_rl.evaluation.source import kernels
from kernelbench_rl.evaluation.sandbox import timer
from kernelbench_rl.evaluation.verdict import faults, sensitivity
from kernelbench_rl.evaluation.worker import children
from kernelbench_rl.evaluation.timing import floor as floors
from kernelbench_rl.evaluation.worker.children import Child, stopped
from kernelbench_rl.evaluation.verdict.faults import Fault
from kernelbench_rl.evaluation.worker.reference_cache import ProblemState, ReferenceCache, host_calls
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult, EvalSettings, Flag
from kernelbench_rl.evaluation.host_share import host_share
from kernelbench_rl.evaluation.worker.scheduling import QuietGate, gpu_identity, same_gpu

LOW_KERNEL_SHARE = 0.5
TOKEN_KERNEL_SHARE = 0.1  # own kernels under 10% of GPU time: a token launch beside library work
HOST_CONFIRM_FRACTION = 0.5  # host-clock speedup must reach this fraction of the event speedup
# When the solo baseline's or the candidate's timed trials spread (IQR) by more than this share of their
# median, both are timed again side by side: the reference in a sibling child (same sandbox, no candidate
# code), alternating blocks with the candidate. Level-3 launch-bound models moved by up to 50% between
# consecutive medians of 100 calls in one quiet process on an H100 (bench/RESULTS.md), so a baseline timed
# seconds earlier cannot tell identical code from a 1.3x change. KBRL_EVAL_PAIRED=off|always overrides.
PAIRED_SPREAD = 0.05
# A close call is timed side by side too: a solo speedup in CLOSE_CALL but off 1 by more than AGREEMENT. Near 1
# is where a reward turns (beats the reference or not), and a baseline timed in the worker minutes earlier read
# identical short kernels 5-9% apart with tight spreads on an H100 (kernrl's radix sort, FP8 GEMM).
CLOSE_CALL = (0.8, 1.25)
AGREEMENT = 0.03
PAIRED_BLOCKS = 5  # at least; short kernels get more (paired_blocks)
# Side by side, each side gets at least this much GPU time, in blocks of about PAIRED_BLOCK_CALLS calls:
# 100 calls of a 0.2 ms launch-bound kernel spread by a third left identical code outside [0.95, 1.05].
PAIRED_MIN_SIDE_MS = 100.0
PAIRED_MAX_CALLS = 1000
# Those extra calls stop where the longer side would pass this much GPU time: a fast kernel beside a slow
# reference (0.01 ms against 200 ms) keeps the solo count, which the reference's own budget already bounds.
PAIRED_MAX_SIDE_MS = 1000.0
PAIRED_BLOCK_CALLS = 10
PAIRED_MAX_BYTES = 4 << 30  # the reference's child sits beside the candidate's: small problems only
# A diagnostic for showing that one defence holds alone (bench/floor_check.py, retired; in git history before
# 1406398): "0" turns off the check of timed calls' outputs (reference_cache.FRESH_TIMING_BUFFERS is its sibling).
# Never off in a real evaluation.
VERIFY_TIMED_OUTPUTS = os.environ.get("KBRL_EVAL_VERIFY_TIMED", "1") != "0"


# The clock the candidate cannot touch. A child reports its own timed calls' device times, and the candidate's code
# runs in that process: whatever it patches, the worker's clock still sees how long the whole block took. Its timed
# calls and the reference's go through one loop (inputs, L2 flush, the calls, synchronise), so what the worker's clock
# adds per call beyond the reported times is the same overhead on both sides: the candidate's time per call implied by
# the worker's clock is the reference's reported time plus the difference of the two walls per call. Reported times
# that this implied time exceeds by more than HOST_CLOCK_RATIO (and HOST_CLOCK_SLACK_MS: launch overhead the events
# need not see) are a flagged verdict, whatever speedup they claim.
# The loop's overhead is the same on both sides only up to the allocator: fresh inputs are made in the candidate's own
# process, and a kernel that holds memory (a workspace, a memo) can make its calls reach cudaMalloc where the
# reference's did not (an honest memoising kernel on KernelBench's L1/19, 6 GiB of inputs a call, read 0.93x and was
# flagged on an H200). Such a verdict gets more slack, a share HOST_CLOCK_OVERHEAD_SHARE of the reference's own
# overhead a call, but only where something explains it (the kernel's calls, or their inputs, reached cudaMalloc more
# often than the reference's) and never on that explanation alone: the counts come from the candidate's process, which
# can forge them as easily as its times, so a verdict that agrees only with this slack is re-timed on the host clock
# (`host_time`, as an excessive speedup is) and stands only if the speedup that reads is at least the events' over
# HOST_CLOCK_RATIO (host_retiming_confirms); otherwise it is flagged as any other disagreement.
# (Without the condition, the slack of L1/19's 3.45 ms of overhead a call let a kernel report a third of its time.)
# What this promises: a candidate that only rewrites its reported times is flagged, whatever its diagnostics say,
# unless it also rewrites its host re-timing, which runs in its process too; that, and faking less than
# HOST_CLOCK_RATIO, this check cannot see (the static policy, which rejects patching the evaluator's modules, and the
# problem's floor are the defences there).
HOST_CLOCK_RATIO = 1.5
HOST_CLOCK_SLACK_MS = 0.05
HOST_CLOCK_OVERHEAD_SHARE = 0.5


@dataclasses.dataclass
class BlockWall:
    """Timed calls as the worker's clock saw them: seconds from the command to its answer, the calls made in them
    (warm-ups included), the times the child reported and how many of those calls (or their inputs) the child said
    reached cudaMalloc (None: it did not say)."""

    seconds: float = 0.0
    calls: int = 0
    times_ms: list[float] = dataclasses.field(default_factory=list)
    reached_malloc: int | None = None

    def add(self, seconds: float, calls: int, times_ms: list[float], diagnostics: Any = None) -> None:
        self.seconds += seconds
        self.calls += calls
        self.times_ms += list(times_ms)
        counts = [diagnostics.get(key) for key in ("calls_reaching_malloc", "inputs_reaching_malloc")
                  if isinstance(diagnostics, dict)]
        counts = [n for n in counts if isinstance(n, int) and not isinstance(n, bool) and n >= 0]
        if counts:
            self.reached_malloc = (self.reached_malloc or 0) + sum(counts)

    @property
    def per_call_ms(self) -> float:
        return 1000.0 * self.seconds / self.calls if self.calls else 0.0

    @property
    def mean_ms(self) -> float:
        return sum(self.times_ms) / len(self.times_ms) if self.times_ms else 0.0

    @property
    def malloc_share(self) -> float:
        """cudaMalloc reached per timed call (by the call or its inputs); 0 where unknown."""
        return (self.reached_malloc or 0) / len(self.times_ms) if self.times_ms else 0.0


def host_clock_check(kernel: BlockWall, reference: BlockWall | None,
                     confirm: Callable[[], tuple[bool, str]] | None = None) -> tuple[bool, str]:
    """(whether the candidate's reported times disagree with the worker's clock, what the verdict records).
    `confirm` re-times the candidate on the host clock (whether that confirms its speedup, and what it read); it is
    called only for a verdict that agrees thanks to the allocator's slack alone, which without it disagrees."""
    if reference is None or not kernel.calls or not reference.calls or not kernel.times_ms or not reference.times_ms:
        return False, "not checked: no timed calls on the worker's clock"
    implied = max(0.0, reference.mean_ms + kernel.per_call_ms - reference.per_call_ms)
    reported = kernel.mean_ms
    overhead = max(0.0, reference.per_call_ms - reference.mean_ms)
    text = (f"reported {reported:.4f} ms a call; the worker's clock implies {implied:.4f} ms (its wall {kernel.per_call_ms:.4f}"
            f" ms a call against the reference's {reference.per_call_ms:.4f} ms, which reported {reference.mean_ms:.4f} ms)")
    bound = HOST_CLOCK_RATIO * reported + HOST_CLOCK_SLACK_MS
    if implied <= bound:
        return False, "agrees: " + text
    allocating = kernel.malloc_share > reference.malloc_share
    if not allocating or implied > bound + HOST_CLOCK_OVERHEAD_SHARE * overhead:
        return True, "DISAGREES: " + text
    malloc = (f"cudaMalloc reached {kernel.reached_malloc} times in its {len(kernel.times_ms)} calls, the reference's "
              f"{reference.reached_malloc or 0} in {len(reference.times_ms)}")
    confirmed, retimed = confirm() if confirm is not None else (False, "not re-timed on the host clock")
    if confirmed:
        return False, f"agrees with the allocator's slack, which the host re-timing confirms ({malloc}; {retimed}): {text}"
    return True, (f"DISAGREES but for the allocator's slack, which the host re-timing does not confirm ({malloc}; "
                  f"{retimed}): {text}")


def host_retiming_confirms(host_speedup: float | None, speedup: float | None) -> tuple[bool, str]:
    """Whether the host clock's speedup (None: no re-timing to read) confirms the events' within HOST_CLOCK_RATIO,
    and what the verdict records."""
    if host_speedup is None or speedup is None:
        return False, "no host re-timing to read (none, or its clock functions were replaced)"
    return (HOST_CLOCK_RATIO * host_speedup >= speedup,
            f"{host_speedup:.2f}x on the host clock against {speedup:.2f}x on the events")


def pairing_wanted(mode: str, big: bool, needed_bytes: int, timings: list[tuple[float | None, float | None]]) -> bool:
    """Whether both sides are timed again side by side (PAIRED_SPREAD): `mode` is KBRL_EVAL_PAIRED (auto,
    always, off); `timings` are (median, IQR) of the solo baseline and the solo candidate. Either spreading past
    PAIRED_SPREAD of its median asks for it, and so does a close call (CLOSE_CALL, AGREEMENT). Big plans never
    pair (a second child would not fit)."""
    mode = mode.strip().lower()
    if mode == "off" or big or needed_bytes > PAIRED_MAX_BYTES:
        return False
    if mode == "always":
        return True
    if any(median and spread is not None and spread > PAIRED_SPREAD * float(median) for median, spread in timings):
        return True
    if len(timings) != 2:
        return False
    (reference_ms, _), (kernel_ms, _) = timings
    if not (reference_ms and kernel_ms):
        return False
    speedup = float(reference_ms) / float(kernel_ms)
    return CLOSE_CALL[0] <= speedup <= CLOSE_CALL[1] and abs(speedup - 1.0) > AGREEMENT


# Where the problem's baseline is timed: in a sibling child running the reference (the process and code path a
# candidate is timed in), not in the worker. On an H200 the worker's own baselines read 3-9% slower than every
# identical candidate of L2/12, L2/99 and L1/95 (grpo_batch_h200.json), which sent a sixth of a GRPO batch to
# side-by-side re-timing. Big plans keep the worker's (a second child would not fit). KBRL_EVAL_BASELINE=worker
# times every baseline in the worker.
BASELINE_IN_CHILD, BASELINE_IN_WORKER = "child", "worker"


def baseline_home(mode: str, big: bool, needed_bytes: int) -> str:
    """Where this problem's baseline is timed (BASELINE_IN_CHILD or BASELINE_IN_WORKER); `mode` is
    KBRL_EVAL_BASELINE (child, the default, or worker)."""
    if mode.strip().lower() == BASELINE_IN_WORKER or big or needed_bytes > PAIRED_MAX_BYTES:
        return BASELINE_IN_WORKER
    return BASELINE_IN_CHILD


def usable_baseline(known: dict | None, home: str, gpu: str = "", alone_on_host: bool = True) -> bool:
    """Whether a baseline the orchestrator cached may stand for this problem's: it has a time, was timed where
    this worker would time it (a cached row from before baselines moved to a child says nothing: the worker's), and on
    this worker's GPU (`gpu`, scheduling.gpu_identity): one timed on another card never stands for this one's. One that
    names no card (the store's rows, kept per GPU model) stands only for a worker alone on its host (`alone_on_host`);
    beside others, each worker times its own once."""
    if not (known and known.get("eager_ms")) or (known.get("timed_in") or BASELINE_IN_WORKER) != home:
        return False
    timed_on = str(known.get("gpu") or "")
    return same_gpu(timed_on, gpu) if timed_on else alone_on_host


def baseline_gpu(base: dict[str, Any]) -> str:
    """For a verdict's versions: the card its baseline was timed on."""
    return str(base.get("gpu") or "not recorded: a stored baseline for this GPU model")


# After a side-by-side timing the problem's baseline becomes the reference's side of it, if that side is steady
# (within PAIRED_SPREAD) and within REFRESH_LIMIT of the baseline (drift, not an anomaly). A solo baseline that spread
# past PAIRED_SPREAD otherwise sent every later candidate of its problem to side-by-side re-timing: on an H200 all 8
# of L1/40's (5.4% and 6.9% in two runs) and of L2/12's (5.1%, 9.9%), about 1 s each.
REFRESH_LIMIT = 0.10


def refreshed_baseline(base: dict[str, Any], paired: timer.TimingRecord) -> dict[str, Any] | None:
    """The baseline later candidates compare against after a side-by-side timing whose reference side is `paired`;
    None to keep `base`."""
    old_ms = float(base.get("eager_ms") or 0.0)
    if old_ms <= 0 or not paired.times_ms or paired.median_ms <= 0:
        return None
    if abs(paired.median_ms / old_ms - 1.0) > REFRESH_LIMIT or paired.iqr_ms > PAIRED_SPREAD * paired.median_ms:
        return None
    return {**base, "eager_ms": paired.median_ms, "eager_spread_ms": paired.iqr_ms,
            "refreshed": f"the reference's side of a side-by-side timing ({len(paired.times_ms)} calls); "
                         f"the solo baseline read {old_ms:.4g} ms"}


# A candidate as slow as its reference can finish its timed calls: their deadline is at least this many times the
# reference's own time for them (kernrl's SpMV, 3.4 s a call, otherwise timed out its identical candidate).
TIMING_ALLOWANCE = 2.0


def timing_window_s(calls: int, warmup: int, reference_ms: float, timeout_s: float, sides: int = 1) -> float:
    """Seconds the timed calls may take: the candidate's timeout, or TIMING_ALLOWANCE times what the reference
    itself takes for them (`sides` 2: both timed side by side), whichever is longer."""
    return max(timeout_s, TIMING_ALLOWANCE * sides * (calls + warmup) * max(0.0, reference_ms) / 1000.0)


def call_allowance_s(reference_forward_s: float | None) -> float:
    """The least time one call of a candidate gets: TIMING_ALLOWANCE times one reference forward (0 when not yet
    learnt). A candidate as slow as a reference of tens of seconds a call (kernrl's deblocking filter) otherwise
    timed out on its first call, blamed for the reference's own cost."""
    return TIMING_ALLOWANCE * float(reference_forward_s or 0.0)


def paired_blocks(calls: int, shortest_ms: float, longest_ms: float = 0.0) -> list[list[int]]:
    """The side-by-side trials' numbers in alternating blocks: at least `calls` a side and PAIRED_MIN_SIDE_MS of
    GPU time for the shorter side (at most PAIRED_MAX_CALLS, and no more than PAIRED_MAX_SIDE_MS of the longer
    side's), about PAIRED_BLOCK_CALLS to a block, at least PAIRED_BLOCKS blocks."""
    wanted = math.ceil(PAIRED_MIN_SIDE_MS / shortest_ms) if shortest_ms > 0 else PAIRED_MAX_CALLS
    if longest_ms > 0:
        wanted = min(wanted, int(PAIRED_MAX_SIDE_MS // longest_ms))
    per_side = max(calls, min(PAIRED_MAX_CALLS, wanted))
    count = max(PAIRED_BLOCKS, min(per_side // PAIRED_BLOCK_CALLS, PAIRED_MAX_CALLS // PAIRED_BLOCK_CALLS))
    count = min(count, per_side)
    return [list(range(per_side))[i::count] for i in range(count)]


# Profiled forwards per candidate: two where the reference's forward is this quick (the profile costs a forward, a
# reference forward for its check and the profiler's own overhead), one otherwise.
PROFILE_TWICE_UNDER_S = 0.05
# The profiled forwards' GPU time may exceed the timed calls' median by this factor (and PROFILE_SLACK_MS) before the
# two disagree: fresh inputs sit partly in L2 when profiled, and the timed calls flush it, so honest kernels read less
# profiled than timed.
PROFILE_TIMED_FACTOR = 1.5
PROFILE_SLACK_MS = 0.05


def profile_count(reference_forward_s: float | None) -> int:
    return 2 if reference_forward_s is not None and reference_forward_s < PROFILE_TWICE_UNDER_S else 1


def judged_share(header: dict[str, Any], names: set[str], backend: str) -> tuple[int, float, str]:
    """(own launches credited, own share of the GPU time, which rule credited them) of one profiled forward."""
    if backend == "triton" and isinstance(header.get("launches"), dict):
        # By provenance: only events of kernels the candidate's own Triton functions launched, as many as it launched
        # (sandbox/launch_record.py); a name alone credits nothing.
        launches, _own_us, share = kernels.attributed_share(header["kernels"], header["launches"])
        return launches, share, "by launch record"
    launches, _own_us, share = kernels.kernel_share(header["kernels"], names)  # CUDA: launched from C++, by name
    return launches, share, "by name"


def share_flags(launches: int, share: float) -> list[str]:
    """The flags a profiled forward's credit earns: no own launch is a hack, under half of the GPU time is doubt, under a
    tenth (a token launch beside library work) a hack too."""
    if launches == 0:
        return [Flag.BACKEND_NOT_USED.value, Flag.HACK.value]
    if share < LOW_KERNEL_SHARE:
        return [Flag.LOW_KERNEL_SHARE.value] + ([Flag.HACK.value] if share < TOKEN_KERNEL_SHARE else [])
    return []


def profile_agrees_with_timing(profiled_gpu_ms: float, runtime_ms: float | None) -> tuple[bool, str]:
    """(disagrees, what was compared): the GPU time of the profiled forwards (the most of them) against the timed calls'
    median. More work profiled than timed, by PROFILE_TIMED_FACTOR and PROFILE_SLACK_MS, says the timed calls did not
    run what the profile saw."""
    if not runtime_ms or runtime_ms <= 0:
        return False, f"profiled {profiled_gpu_ms:.4f} ms of GPU work; nothing timed"
    ratio = profiled_gpu_ms / runtime_ms
    disagrees = (profiled_gpu_ms > PROFILE_TIMED_FACTOR * runtime_ms
                 and profiled_gpu_ms - runtime_ms > PROFILE_SLACK_MS)
    return disagrees, (f"profiled {profiled_gpu_ms:.4f} ms of GPU work against {runtime_ms:.4f} ms timed "
                       f"({ratio:.2f}x){': disagrees' if disagrees else ''}")


def add_seconds(result: EvalResult, phase: str, seconds: float) -> None:
    """Adds to a phase that several steps of one evaluation contribute to."""
    result.phase_seconds[phase] = result.phase_seconds.get(phase, 0.0) + seconds


class PreparedChild:
    """A reference child started on a thread of its own (`start()` returns it, or None), so that its start overlaps
    the candidate's correctness. `take()` waits for it and hands it over; `release(give_back)` returns one that was
    never taken."""

    def __init__(self, start: Callable[[], Child | None]) -> None:
        self._child: Child | None = None
        self._taken = False
        self._thread = threading.Thread(target=self._run, args=(start,), name="reference-child-start", daemon=True)
        self._thread.start()

    def _run(self, start: Callable[[], Child | None]) -> None:
        try:
            self._child = start()
        except Exception:  # noqa: BLE001 - ours; the baseline is then timed another way
            self._child = None

    def take(self) -> Child | None:
        self._thread.join()
        self._taken = True
        return self._child

    def release(self, give_back: Callable[[Child], None]) -> None:
        self._thread.join()
        if not self._taken and self._child is not None:
            self._taken = True
            give_back(self._child)


class CandidateTiming:
    """The timing step of the worker's evaluations. `reference_child` starts (or lends) the sibling running the
    reference when the timing needs it (None otherwise); `give_back(child, healthy, state, settings, payload)`
    returns it after the timing (kept for the problem's next candidate, or retired)."""

    def __init__(self, references: ReferenceCache, quiet_gate: QuietGate, transport: str, hardware: str,
                 reference_child: Callable[..., Child | None], give_back: Callable[..., None],
                 baseline_child: Callable[..., Child | None] | None = None,
                 home_for: Callable[[ProblemState], str] | None = None) -> None:
        self.references = references
        self.quiet_gate = quiet_gate
        self.transport = transport
        self.hardware = hardware
        self.reference_child = reference_child
        self.give_back = give_back
        # `baseline_child(state, settings, payload, result, deadline)`: a child running the reference (the resident
        # one or a new one), None when it cannot start; `home_for(state)`: where the problem's baseline is timed.
        self.baseline_child = baseline_child
        self.home_for = home_for or (lambda state: BASELINE_IN_WORKER)
        self.floor_service: Any = None  # a floor_service.FloorService where the worker started one
        # The card this worker times on, and whether it is its host's only worker: which cached baselines may stand for
        # its own (usable_baseline).
        self.gpu = "" if hardware.startswith("cpu") else gpu_identity()
        self.alone_on_host = host_share()[1] <= 1

    def needs_baseline(self, state: ProblemState, settings: EvalSettings, payload: dict[str, Any]) -> bool:
        """Whether this evaluation times its problem's baseline (none known here, none usable from the cache)."""
        return (settings.precision not in state.baselines
                and not usable_baseline(payload.get("baseline"), self.home_for(state), self.gpu, self.alone_on_host))

    def run(self, child: Child, state: ProblemState, settings: EvalSettings, result: EvalResult,
            deadline: float, payload: dict[str, Any], timed: contextlib.ExitStack | None = None,
            prepared: PreparedChild | None = None) -> dict | None:
        """Baseline, timed trials (paired with the reference's where they spread), floor, host re-check and
        profile of a candidate that passed correctness; the fresh baseline for the orchestrator's cache, if one.

        `timed`, when given, holds the device alone for this evaluation: it is closed as soon as the timed work is
        done, and the check of the timed outputs and the profile then run beside other candidates' untimed work
        (taking the quiet gate shared, so never beside a timed trial). `prepared`: a reference child started for
        the baseline while correctness ran (the caller gives it back if it is not taken here)."""
        precision = settings.precision
        t = time.perf_counter()
        home = self.home_for(state)
        known = (payload.get("baseline")
                 if usable_baseline(payload.get("baseline"), home, self.gpu, self.alone_on_host) else None)
        fresh = self.needs_baseline(state, settings, payload)
        # The candidate's child is stopped meanwhile: a thread of its own loading the device would inflate the
        # baseline, and the first candidate's baseline is cached for every later one of its problem.
        # (A known baseline needs neither: the timing's own quiet section waits for warm-ups once.)
        with self.quiet_gate.quiet() if fresh else contextlib.nullcontext(), \
                stopped(child.pid) if fresh else contextlib.nullcontext():
            base = None
            if fresh and home == BASELINE_IN_CHILD:
                base = self._baseline_in_child(state, settings, payload, result, prepared)
            if base is None:
                base = self.references.baseline(state, precision, settings, known)
        result.phase_seconds["baseline"] = time.perf_counter() - t
        # Timed here (now, or by an earlier candidate), or the cache's, which names its card if it knows it.
        base.setdefault("gpu", self.gpu if fresh or known is None else "")
        result.versions["baseline_gpu"] = baseline_gpu(base)
        trace.record(trace.who_of(child), "baseline", t)
        if base.get("timed_in"):
            result.versions["baseline_timed_in"] = str(base["timed_in"])
        if base.get("refreshed"):
            result.versions["baseline_refreshed"] = str(base["refreshed"])[:200]
        # The reference's time is bounded by its own budget (reference_budget.py), not taken from the kernel's.
        deadline += result.phase_seconds["baseline"]
        result.baseline_ms = base["eager_ms"]
        result.baseline_compile_ms = base.get("compile_ms")
        t = time.perf_counter()
        # As many timed calls as the baseline had: fewer than asked for a reference too slow to time them all.
        calls, why = state.timed_calls(settings)
        result.versions["timed_calls"] = why
        reference_ms = float(base["eager_ms"] or 0.0)
        deadline = max(deadline, time.monotonic() + timing_window_s(calls, settings.warmup_trials, reference_ms, 0.0))
        seeds = [secrets.randbits(31) for _ in range(calls)]
        # The profiled forwards carry the problem's perturbation where it has one, as the checked calls do
        # (sensitivity.everyday_variant). The timed calls do not: the worker's clock check compares the kernel's loop
        # with the reference's, and perturbing one side's inputs only made its loop slower by the perturbation's own
        # cost (an H200, 2026-11-28: 9 of 10 honest solutions flagged clock_disagrees). A kernel that does whole work
        # on perturbed inputs and part of it on plain ones then reads more GPU work profiled than timed
        # (profile_disagrees). Timing both sides on perturbed inputs is the way to close it.
        everyday = sensitivity.everyday_variant(state.discrimination_for(precision, payload.get("input_variant")))
        verify_trials = (state.plan.verify_trials if state.plan is not None else 2) if VERIFY_TIMED_OUTPUTS else 0
        verify = sorted(random.sample(range(len(seeds)), min(verify_trials, len(seeds))))
        paired_ms: list[float] = []
        kernel_diagnostics: list[dict] = []
        reference_diagnostics: list[dict] = []
        kept: dict[str, Any] = {}
        mark = time.perf_counter()
        with self.quiet_gate.quiet() as calm:
            result.phase_seconds["timing_quiet_wait"] = time.perf_counter() - mark
            trace.record(trace.who_of(child), "quiet_wait", mark)
            solo_walls = BlockWall()
            times = self._time_block(child, state, settings, result, seeds, verify, settings.warmup_trials, deadline,
                                     diagnostics=kernel_diagnostics, kept_out=kept if timed is not None else None,
                                     walls=solo_walls)
        solo = timer.TimingRecord(times_ms=times)
        kernel_walls, reference_walls = solo_walls, state.reference_walls.get(precision)
        # Re-timing is our choice, not the kernel's cost: it gets a timeout of its own (a kernel whose solo
        # trials took most of its timeout must not time out for being timed twice).
        deadline = time.monotonic() + timing_window_s(len(seeds), settings.warmup_trials, reference_ms,
                                                      settings.timeout_s, sides=2)
        reference_child = self.reference_child(state, settings, payload, base, solo, result, deadline)
        if reference_child is not None:
            # The child's next command releases what it kept: check the solo trials' outputs first.
            self._verify_kept(state, settings, result, seeds, kept, trace.who_of(child))
            # Timed again, both sides in alternating blocks, the side going first alternating too (ABBA): a drift
            # of the device or the host between blocks reaches both alike. The candidate is stopped during the
            # reference's blocks, so no thread of its own can load the device meanwhile.
            sides_ms = (solo.median_ms, float(base["eager_ms"] or solo.median_ms))
            blocks = paired_blocks(len(seeds), min(sides_ms), max(sides_ms))
            by_index: dict[int, float] = {}
            healthy = False
            paired_kernel_walls, paired_reference_walls = BlockWall(), BlockWall()
            try:
                with self.quiet_gate.quiet() as calm_paired:
                    for number, indices in enumerate(blocks):
                        warmup = settings.warmup_trials if number < 2 else 1
                        for side in (("reference", "kernel") if number % 2 == 0 else ("kernel", "reference")):
                            if side == "kernel":
                                block_seeds = [secrets.randbits(31) for _ in indices]
                                block_times = self._time_block(child, state, settings, result, block_seeds,
                                                               [0] if number == 0 and VERIFY_TIMED_OUTPUTS else [], warmup, deadline, indices,
                                                               diagnostics=kernel_diagnostics, walls=paired_kernel_walls)
                                by_index.update(zip(indices, block_times))
                                continue
                            try:
                                with stopped(child.pid):
                                    paired_ms += self._time_reference_block(reference_child, state, indices, warmup,
                                                                            deadline, reference_diagnostics,
                                                                            paired_reference_walls)
                            except Fault as fault:  # the reference's child: ours, retried, never the kernel's
                                raise Fault(ErrorCategory.INFRA,
                                            f"timing the reference beside the kernel failed: {fault.message}") from None
                calm = calm and calm_paired
                healthy = True
            finally:
                self.give_back(reference_child, healthy, state, settings, payload)
            times = [by_index[i] for i in sorted(by_index)]
            kernel_walls, reference_walls = paired_kernel_walls, paired_reference_walls
            state.reference_walls[precision] = paired_reference_walls
        if not calm:
            result.versions["timing_overlap"] = "timed beside another child's warm-up (it ran past the quiet gate's wait)"
        record = timer.TimingRecord(times_ms=times)
        result.versions["timing_diagnostics"] = timer.describe_diagnostics({
            "kernel": kernel_diagnostics[0] if kernel_diagnostics else None,
            "reference": base.get("diagnostics"),
            **({"kernel paired": timer.merge_diagnostics(kernel_diagnostics[1:]),
                "reference paired": timer.merge_diagnostics(reference_diagnostics)} if paired_ms else {}),
        })[:500]
        # The floor's share of timing: the solo trials, and both sides of a side-by-side run.
        result.phase_seconds["timing_trials_gpu"] = (sum(solo.times_ms) + sum(paired_ms)
                                                     + (sum(record.times_ms) if paired_ms else 0.0)) / 1000.0
        result.runtime_ms = record.median_ms
        result.runtime_spread_ms = record.iqr_ms
        if paired_ms:
            paired = timer.TimingRecord(times_ms=paired_ms)
            result.versions["timing"] = (f"paired: the reference timed beside the kernel, {len(paired_ms)} calls each in "
                                         f"{len(blocks)} alternating blocks; solo, the reference read {result.baseline_ms:.3f} ms (spread "
                                         f"{base.get('eager_spread_ms') or 0.0:.3f}), the kernel {solo.median_ms:.3f} ms "
                                         f"(spread {solo.iqr_ms:.3f})")
            result.baseline_ms = paired.median_ms
            result.versions["baseline_gpu"] = self.gpu  # the reference's side, timed beside the kernel
            refreshed = refreshed_baseline(state.baselines.get(precision) or base, paired)
            if refreshed is not None:  # for the problem's later candidates (this one is judged side by side)
                state.baselines[precision] = {**refreshed, "gpu": self.gpu}
        result.phase_seconds["timing"] = time.perf_counter() - t
        if result.runtime_ms > 0:
            result.speedup = result.baseline_ms / result.runtime_ms
        if reference_walls is None:  # the baseline came from the store: the reference's calls on this worker's clock
            mark = time.perf_counter()
            reference_walls = BlockWall(*self.references.reference_wall(state, precision, settings))
            state.reference_walls[precision] = reference_walls
            add_seconds(result, "host_clock_reference", time.perf_counter() - mark)
        retimed: list[float | None] = []  # the host re-timing, once, for whichever check asks for it

        def host_speedup() -> float | None:
            if not retimed:
                # The solo trials' kept outputs are checked before the child's next command.
                self._verify_kept(state, settings, result, seeds, kept, trace.who_of(child))
                retimed.append(self._host_speedup(child, state, settings, calls, deadline))
                result.host_speedup = retimed[0]
            return retimed[0]

        disagrees, result.versions["host_clock"] = host_clock_check(
            kernel_walls, reference_walls, lambda: host_retiming_confirms(host_speedup(), result.speedup))
        if disagrees:
            result.flags += [Flag.CLOCK_DISAGREES.value, Flag.HACK.value]
        if result.speedup is not None and result.speedup > settings.excessive_speedup_threshold:
            result.flags += [Flag.EXCESSIVE_SPEEDUP.value, Flag.NEEDS_REVERIFICATION.value]
            host = host_speedup()
            if host is not None and host >= HOST_CONFIRM_FRACTION * result.speedup:
                result.flags.append(Flag.REVERIFIED.value)
        untimed = contextlib.ExitStack()
        if timed is not None:
            timed.close()  # the device for the next timing; what follows is untimed
            mark = time.perf_counter()
            untimed.enter_context(self.quiet_gate.noisy())
            result.phase_seconds["untimed_quiet_wait"] = time.perf_counter() - mark
        with untimed:
            self._verify_kept(state, settings, result, seeds, kept, trace.who_of(child))
            t = time.perf_counter()
            profiles = [self._profile_once(child, state, settings, result, deadline, everyday)
                        for _ in range(profile_count(state.forward_s))]
            trace.record(trace.who_of(child), "profile", t)
            result.phase_seconds["profile"] = time.perf_counter() - t
        measured = [p for p in profiles if isinstance(p.get("kernels"), list)]
        if measured:
            names = kernels.own_kernel_names(payload["candidate_source"], settings.backend)
            verdicts = [judged_share(p, names, settings.backend) for p in measured]
            # The worst of the profiled forwards decides: each is a call like any other, drawn at random.
            launches, share, credit = min(verdicts, key=lambda v: (v[0] > 0, v[1]))
            result.versions["kernel_credit"] = f"{credit}, {len(measured)} profiled forward(s)"
            worst = measured[verdicts.index((launches, share, credit))]
            result.kernel_share = share
            result.versions["top_kernels"] = kernels.top_kernels(worst["kernels"])
            result.profile = kernels.profile_rows(worst["kernels"])
            for flag in share_flags(launches, share):
                if flag not in result.flags:
                    result.flags.append(flag)
            # The profiled forwards' GPU work against the timed calls': a kernel that does its own work only when
            # profiled and something faster otherwise reads more GPU time profiled than timed.
            gpu_ms = max(sum(float(row[2]) for row in p["kernels"] if isinstance(row, list) and len(row) >= 3)
                         for p in measured) / 1000.0
            disagrees, result.versions["profile_vs_timed"] = profile_agrees_with_timing(gpu_ms, result.runtime_ms)
            if disagrees:
                result.flags.append(Flag.PROFILE_DISAGREES.value)
        else:
            result.versions["profile_error"] = str(profiles[-1].get("error", ""))[:300] if profiles else "not profiled"
        try:
            wire.send_json(child.conn, {"cmd": "exit"})
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            pass  # the verdict stands; the child is killed anyway
        if fresh:
            return {"eager_ms": base["eager_ms"], "eager_spread_ms": base.get("eager_spread_ms"),
                    "compile_ms": base.get("compile_ms"), "timed_in": base.get("timed_in") or BASELINE_IN_WORKER,
                    "gpu": self.gpu}
        return None

    def _profile_once(self, child: Child, state: ProblemState, settings: EvalSettings, result: EvalResult,
                      deadline: float, variant: dict | None = None) -> dict[str, Any]:
        """One profiled forward on a fresh hidden seed; its outputs are checked like a timed call's (wrong ones are a
        hack: the forward the work share is read from must itself be right). The child's header."""
        seed = secrets.randbits(31)
        with state.lock:
            reference = self.references.reference_outputs(state, settings.precision, seed, cache=False,
                                                          variant=variant)
        poison = (state.plan.poison_bytes if state.plan is not None
                  else 2 * sum(r.numel() * r.element_size() for r in reference) + (32 << 20))
        children.send(child, {"cmd": "profile", "seed": seed, "poison_bytes": poison, "variant": variant}, "profiling")
        header = children.expect(child, {"profiled"}, deadline - time.monotonic(), "profiling")
        faults.numerics_unchanged(header, result)
        faults.aliasing_allowed([header.get("aliases")], state.output_aliases)
        received = children.receive(child, header, reference, state.input_bytes, self.transport)
        outcome = self.references.compare(state, settings.precision, seed, variant, reference,
                                          received.get("outputs", []))
        del received, reference
        if not outcome.ok:
            result.flags.append(Flag.HACK.value)
            raise Fault(ErrorCategory.MISMATCH, f"outputs of a profiled call were wrong: {outcome.message}")
        return header

    def _host_speedup(self, child: Child, state: ProblemState, settings: EvalSettings, calls: int,
                      deadline: float) -> float | None:
        """The reference's time over the candidate's, both timed on the host clock around each forward (`host_time`);
        None when the candidate's reads nothing or its clock functions were replaced."""
        host_seeds = [secrets.randbits(31) for _ in range(host_calls(calls))]
        with self.quiet_gate.quiet():
            children.send(child, {"cmd": "host_time", "seeds": host_seeds, "fresh_buffers": state.fresh_buffers()},
                          "re-timing on the host clock")
            host = children.expect(child, {"host_timed"}, deadline - time.monotonic(), "re-timing on the host clock")
            candidate_host = float(host.get("median_ms") or 0.0)
            # As for the first baseline: a thread of the candidate's own must not load the device meanwhile.
            with stopped(child.pid) if settings.precision not in state.host_baselines else contextlib.nullcontext():
                baseline_host = self.references.host_baseline(state, settings.precision, settings)
        if candidate_host > 0 and not host.get("tampered"):
            return baseline_host / candidate_host
        return None

    def _baseline_in_child(self, state: ProblemState, settings: EvalSettings, payload: dict[str, Any],
                           result: EvalResult, prepared: PreparedChild | None) -> dict[str, Any] | None:
        """The problem's baseline timed in a child running the reference, as a candidate is timed; None (the worker
        times it then) when no such child starts or its timing fails, which is ours and noted in the result."""
        calls = state.timed_calls(settings)[0]
        window = timing_window_s(calls, settings.warmup_trials, 1000.0 * (state.forward_s or 0.0), settings.timeout_s)
        mark = time.perf_counter()
        if prepared is not None:  # one that failed to start is not started again: the worker times the baseline
            reference_child = prepared.take()
        elif self.baseline_child is not None:
            reference_child = self.baseline_child(state, settings, payload, result, time.monotonic() + window)
        else:
            reference_child = None
        result.phase_seconds["baseline_child_wait"] = time.perf_counter() - mark
        if reference_child is None:
            return None
        diagnostics: list[dict] = []
        healthy = False
        walls = BlockWall()
        try:
            times = self._time_reference_block(reference_child, state, list(range(calls)), settings.warmup_trials,
                                               time.monotonic() + window, diagnostics, walls)
            state.reference_walls[settings.precision] = walls
            healthy = True
        except Fault as fault:
            result.versions["baseline_child_failed"] = fault.message[:200]
            return None
        finally:
            self.give_back(reference_child, healthy, state, settings, payload)
        record = timer.TimingRecord(times_ms=times)
        entry = self.references.record_baseline(state, settings.precision, settings, record, BASELINE_IN_CHILD)
        if diagnostics:
            entry["diagnostics"] = diagnostics[0]
        return entry

    def floor_for(self, state: ProblemState, precision: str) -> Any:
        """The speed of light of the problem on this GPU (a Floor, or why there is none), worked out once per problem
        and precision on the meta device, by the helper process where there is one. The worker asks after the
        device section (`against_the_floor`): the first one in a process imports and warms torch's meta kernels and
        FLOP counter, 1.5-3.8 s, which inside the section held the device idle, and before it kept a cold folder's
        sections waiting for the helper's warm-up (2 s on an H200)."""
        if precision not in state.floors:
            found = None
            if self.floor_service is not None and state.path:
                found = self.floor_service.floor(state.path, precision, state.problem_id)
            if found is None:  # no helper, or it failed: worked out here
                try:
                    found = floors.problem_floor(state.module, precision, self.hardware)
                except Exception as exc:  # noqa: BLE001 - an unknown GPU, or a problem the meta device cannot run
                    found = floors.why_no_floor(exc)
            state.floors[precision] = found
        return state.floors[precision]

    def against_the_floor(self, state: ProblemState, precision: str, result: EvalResult) -> None:
        """The candidate's and the reference's share of the problem's speed of light (`floor_for`), and the flag for
        a time under it; for a timed candidate, once the device section is over."""
        floor = self.floor_for(state, precision)
        if isinstance(floor, str):
            result.versions["speed_of_light"] = f"no floor: {floor}"
            return
        result.speed_of_light = floors.speed_of_light(floor, result.runtime_ms, result.baseline_ms)
        if result.speed_of_light["below_floor"]:
            result.flags.append(Flag.BELOW_SPEED_OF_LIGHT.value)
            result.versions["speed_of_light"] = (
                f"timed at {result.runtime_ms:.4g} ms, under the floor of {floor.floor_ms:.4g} ms on {floor.gpu} "
                f"({floor.bound}-bound: {floor.dram_bytes:.4g} bytes, {floor.flops:.4g} FLOPs): work was skipped")

    def _time_block(self, child: Child, state: ProblemState, settings: EvalSettings, result: EvalResult,
                    seeds: list[int], verify: list[int], warmup: int, deadline: float,
                    indices: list[int] | None = None, diagnostics: list[dict] | None = None,
                    kept_out: dict[str, Any] | None = None, walls: BlockWall | None = None) -> list[float]:
        """The candidate's timed trials on `seeds` (added to `walls` as the worker's clock saw them); the outputs of the trials at positions `verify` are checked
        against the reference, or, with `kept_out`, left there for `_verify_kept` (before the child's next
        command). `indices` number the trials in messages (default: their positions); the child's timing
        diagnostics are appended to `diagnostics`."""
        mark = time.perf_counter()
        children.send(child, {"cmd": "time", "seeds": seeds, "verify": verify, "warmup": warmup,
                              "fresh_buffers": state.fresh_buffers()}, "timing")
        header = children.expect(child, {"timed"}, deadline - time.monotonic(), "timing")
        wall = time.perf_counter() - mark  # the worker's clock: out of the candidate's reach
        trace.record(trace.who_of(child), "time_block", mark)
        faults.numerics_unchanged(header, result)
        times = header.get("times_ms")
        if not (isinstance(times, list) and len(times) == len(seeds) and all(isinstance(x, (int, float)) for x in times)):
            raise Fault(ErrorCategory.RUNTIME, "the timing run returned malformed figures")
        if header.get("tampered"):
            result.flags.append(Flag.HACK.value)
            raise Fault(ErrorCategory.RUNTIME, f"timing functions were replaced: {', '.join(map(str, header['tampered']))}")
        if walls is not None:
            walls.add(wall, len(seeds) + warmup, [float(x) for x in times], header.get("diagnostics"))
        # Correct when checked, aliased when timed: a hack, like wrong values during timing below.
        faults.aliasing_allowed(header.get("aliases"), state.output_aliases, "during timing, ", (Flag.HACK.value,))
        mark = time.perf_counter()
        kept = children.receive(child, header, None, 0, self.transport)
        trace.record(trace.who_of(child), "time_receive", mark)
        add_seconds(result, "timing_receive", time.perf_counter() - mark)
        if isinstance(header.get("seconds"), (int, float)):
            add_seconds(result, "timing_child", float(header["seconds"]))
        if isinstance(header.get("diagnostics"), dict):
            for part, seconds in (header["diagnostics"].get("host_s") or {}).items():
                if isinstance(seconds, (int, float)):
                    add_seconds(result, f"timing_child_{part}", float(seconds))
            if diagnostics is not None:
                diagnostics.append(header["diagnostics"])
        pending = {"verify": list(verify), "indices": indices, "outputs": kept}
        if kept_out is not None:
            kept_out.update(pending)
        else:
            self._verify_kept(state, settings, result, seeds, pending, trace.who_of(child))
        del kept, pending
        return [float(x) for x in times]

    def _verify_kept(self, state: ProblemState, settings: EvalSettings, result: EvalResult, seeds: list[int],
                     pending: dict[str, Any], who: str = "") -> None:
        """Checks the timed outputs `_time_block` kept (once: `pending` is emptied) against the reference's on the
        same seeds; wrong values while timed are a hack."""
        verify, indices, kept = pending.pop("verify", []), pending.pop("indices", None), pending.pop("outputs", {})
        mark = time.perf_counter()
        for position in verify:
            with state.lock:
                reference = self.references.reference_outputs(state, settings.precision, seeds[position],
                                                              cache=False)  # one-off seeds
            outcome = self.references.compare(state, settings.precision, seeds[position], None, reference,
                                              kept.get(f"trial_{position}", []))
            if not outcome.ok:
                trial = indices[position] if indices else position
                result.flags.append(Flag.HACK.value)
                raise Fault(ErrorCategory.MISMATCH, f"outputs during timing were wrong (trial {trial}): {outcome.message}")
        if verify:
            add_seconds(result, "timing_verify", time.perf_counter() - mark)
            trace.record(who, "verify", mark)
        del kept

    def _time_reference_block(self, reference_child: Child, state: ProblemState, indices: list[int], warmup: int,
                              deadline: float, diagnostics: list[dict], walls: BlockWall | None = None) -> list[float]:
        seeds = [secrets.randbits(31) for _ in indices]
        if trace.enabled() and not trace.who_of(reference_child):
            reference_child.trace_who = f"reference#{reference_child.pid}"
        mark = time.perf_counter()
        children.send(reference_child, {"cmd": "time", "seeds": seeds, "verify": [], "warmup": warmup,
                                     "fresh_buffers": state.fresh_buffers()}, "timing the reference")
        header = children.expect(reference_child, {"timed"}, deadline - time.monotonic(), "timing the reference")
        wall = time.perf_counter() - mark
        children.receive(reference_child, header, None, 0, self.transport)
        trace.record(trace.who_of(reference_child), "reference_block", mark)
        times = header.get("times_ms")
        if not (isinstance(times, list) and len(times) == len(seeds)):
            raise Fault(ErrorCategory.INFRA, "the reference's timing run returned malformed figures")
        if isinstance(header.get("diagnostics"), dict):
            diagnostics.append(header["diagnostics"])
        if walls is not None:
            walls.add(wall, len(seeds) + warmup, [float(x) for x in times], header.get("diagnostics"))
        return [float(x) for x in times]
