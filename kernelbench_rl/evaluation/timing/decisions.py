"""What a candidate's timing says, decided from plain numbers: the deciding half of timing a candidate.

The worker measures (worker/candidate_timing.py drives the children: the baseline, the timed trials, the
side-by-side re-timing, the host re-timing, the profile) and hands the numbers down; everything here takes those
numbers (times, walls, profiled kernel rows, cached baselines) and returns what they mean: whether to time side by
side and how, which baseline stands, the speedup and its direction, whether the worker's clock agrees with the times
the child reported, what the profiled work share earns, whether the profile agrees with the timed calls. CPU tests
drive each decision with recorded and synthetic measurements (tests/test_timing_decisions.py and the tests named in
each docstring); the GPU tests check only the measuring. Nothing here imports the worker or the verdict.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Callable

from kernelbench_rl.evaluation.result import Flag
from kernelbench_rl.evaluation.source import kernels

if TYPE_CHECKING:
    from kernelbench_rl.evaluation.sandbox.timer import TimingRecord

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


def same_gpu(a: str, b: str) -> bool:
    """Whether two gpu_identity strings name one card (by its UUID, the last word; the index may differ between
    processes that number the host's GPUs differently)."""
    return bool(a.strip()) and bool(b.strip()) and a.split()[-1] == b.split()[-1]


def usable_baseline(known: dict | None, home: str, gpu: str = "", alone_on_host: bool = True) -> bool:
    """Whether a baseline the orchestrator cached may stand for this problem's: it has a time, was timed where
    this worker would time it (a cached row from before baselines moved to a child says nothing: the worker's), and on
    this worker's GPU (`gpu`, worker/scheduling.gpu_identity): one timed on another card never stands for this one's. One that
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


def refreshed_baseline(base: dict[str, Any], paired: TimingRecord) -> dict[str, Any] | None:
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



def clock_verdict(kernel: BlockWall, reference: BlockWall | None,
                  confirm: Callable[[], tuple[bool, str]] | None = None) -> tuple[list[str], str]:
    """The flags the worker's clock earns (host_clock_check): a disagreement is `clock_disagrees` and a hack, whatever
    speedup the reported times claim; and what the verdict records of it."""
    disagrees, note = host_clock_check(kernel, reference, confirm)
    return ([Flag.CLOCK_DISAGREES.value, Flag.HACK.value] if disagrees else []), note


@dataclasses.dataclass
class LaunchTally:
    """The own launches of a candidate's timed blocks, summed (each block's launch record and forward count, as the
    child reports them); `launches` None once any block came without a record."""

    launches: dict[str, int] | None = dataclasses.field(default_factory=dict)
    forwards: int = 0

    def add(self, record: Any, forwards: Any) -> None:
        if self.launches is None:
            return
        if not isinstance(record, dict) or not isinstance(forwards, int) or isinstance(forwards, bool) or forwards < 0:
            self.launches = None
            return
        for name, count in record.items():
            self.launches[str(name)] = self.launches.get(str(name), 0) + int(count)
        self.forwards += forwards


def launches_verdict(timed: dict[str, int] | None, timed_forwards: int,
                     profiled: list[dict[str, int] | None]) -> tuple[list[str], str]:
    """Whether the timed calls ran the candidate's own kernels as often as the profiled forwards did: `timed` is the
    launch record (sandbox/launch_record.py: launches per own Triton kernel name) over all `timed_forwards` timed
    forwards, warm-ups included; `profiled` each profiled forward's record (one forward each). Deterministic code
    launches the same kernels on every call of one size, so fewer launches of any own kernel per timed forward than in
    the profiled forward that launched it least mean the candidate ran something else while timed (library work where
    it could tell the profiler was off): `launches_disagree` and a hack. More launches gain nothing and pass. No
    verdict ([]) where nothing was recorded (a CUDA candidate, no hook, no profile); returns the flags and a note."""
    records = [p for p in profiled if isinstance(p, dict)]
    if timed is None or timed_forwards <= 0 or not records:
        return [], ""
    names = set().union(*records)
    if not names:
        return [], ""
    short = {}
    for name in sorted(names):
        each = min(int(record.get(name, 0)) for record in records)
        if int(timed.get(name, 0)) < each * timed_forwards:
            short[name] = (int(timed.get(name, 0)), each * timed_forwards)
    if not short:
        return [], f"own launches agree over {timed_forwards} timed forwards ({', '.join(sorted(names))})"
    said = "; ".join(f"{name} {got} of {want}" for name, (got, want) in short.items())
    return ([Flag.LAUNCHES_DISAGREE.value, Flag.HACK.value],
            f"the timed calls launched fewer own kernels than the profiled forward, over {timed_forwards} forwards: "
            f"{said}"[:300])


def speedup_of(reference_ms: float, kernel_ms: float) -> float | None:
    """The reference's time over the candidate's: above 1 where the candidate is faster; None where the candidate's
    calls read no time."""
    if not kernel_ms or kernel_ms <= 0:
        return None
    return float(reference_ms) / float(kernel_ms)


@dataclasses.dataclass
class TimedSides:
    """What the timed calls say: the candidate's median and spread, the reference's time it is judged against (the
    reference's side of a side-by-side timing where there was one, else the baseline) and the speedup."""

    runtime_ms: float
    runtime_spread_ms: float
    baseline_ms: float
    speedup: float | None


def timed_sides(kernel: TimingRecord, baseline_ms: float, paired_reference: TimingRecord | None = None) -> TimedSides:
    """The candidate's timed calls (`kernel`: the side-by-side ones where the reference was timed beside it) against
    the solo baseline, or against `paired_reference`, the reference's side of that side-by-side timing, which then
    stands for the baseline."""
    reference_ms = paired_reference.median_ms if paired_reference is not None and paired_reference.times_ms else baseline_ms
    return TimedSides(runtime_ms=kernel.median_ms, runtime_spread_ms=kernel.iqr_ms, baseline_ms=reference_ms,
                      speedup=speedup_of(reference_ms, kernel.median_ms))


def excessive_speedup_flags(speedup: float | None, threshold: float,
                            host_speedup: Callable[[], float | None]) -> list[str]:
    """An excessive speedup (above `threshold`) is flagged for re-verification and re-timed on the host clock
    (`host_speedup`, asked only then: the reference's time over the candidate's there, None where it read nothing); it
    is reverified where the host clock reads at least HOST_CONFIRM_FRACTION of it."""
    if speedup is None or speedup <= threshold:
        return []
    flags = [Flag.EXCESSIVE_SPEEDUP.value, Flag.NEEDS_REVERIFICATION.value]
    host = host_speedup()
    if host is not None and host >= HOST_CONFIRM_FRACTION * speedup:
        flags.append(Flag.REVERIFIED.value)
    return flags


def profiled_gpu_ms(kernel_rows: list[Any]) -> float:
    """The GPU time of one profiled forward, in ms, from its kernel rows ([name, calls, device microseconds, ...]);
    rows of another shape count nothing."""
    return sum(float(row[2]) for row in kernel_rows if isinstance(row, list) and len(row) >= 3) / 1000.0


@dataclasses.dataclass
class ProfileVerdict:
    """What the profiled forwards say: the worst forward's own launches and share of the GPU time, which rule credited
    them, its kernel rows, the flags they earn and the profile against the timed calls."""

    launches: int
    share: float
    credit: str
    kernel_rows: list[Any]
    profile_vs_timed: str
    flags: list[str]


def profile_verdict(profiles: list[dict[str, Any]], candidate_source: str, backend: str,
                    runtime_ms: float | None) -> ProfileVerdict | None:
    """The profiled forwards' headers (each with its `kernels` rows, and for Triton its `launches` record) judged: the
    worst of them decides the work share (each is a call like any other, drawn at random), and the most GPU work among
    them against the timed calls' median (`runtime_ms`) says whether the timed calls ran what the profile saw. None
    where no forward was measured."""
    measured = [p for p in profiles if isinstance(p.get("kernels"), list)]
    if not measured:
        return None
    names = kernels.own_kernel_names(candidate_source, backend)
    verdicts = [judged_share(p, names, backend) for p in measured]
    launches, share, credit = min(verdicts, key=lambda v: (v[0] > 0, v[1]))
    worst = measured[verdicts.index((launches, share, credit))]
    flags = share_flags(launches, share)
    # A kernel that does its own work only when profiled and something faster otherwise reads more GPU time profiled
    # than timed.
    disagrees, compared = profile_agrees_with_timing(max(profiled_gpu_ms(p["kernels"]) for p in measured), runtime_ms)
    if disagrees:
        flags.append(Flag.PROFILE_DISAGREES.value)
    return ProfileVerdict(launches=launches, share=share, credit=f"{credit}, {len(measured)} profiled forward(s)",
                          kernel_rows=worst["kernels"], profile_vs_timed=compared, flags=flags)
