"""Evaluation request and result: the contract between the evaluator and everything else.

Both are plain dataclasses that round-trip through JSON (`to_json` / `from_json`), so they cross
process boundaries (sandbox -> worker -> orchestrator -> DuckDB) without pickles.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

RESULT_SCHEMA_VERSION = 1
# Part of every verdict's cache key: bump it when a change to the evaluator can change a verdict or a
# timing, so verdicts from before it are never served again.
EVALUATOR_VERSION = "2026.11.6-launches"

Backend = Literal["triton", "cuda"]
Precision = Literal["fp32", "fp16", "bf16"]
PrecisionPolicy = Literal["warn", "reject"]
PRECISION_POLICIES: tuple[str, ...] = ("warn", "reject")
DeviceKind = Literal["cpu", "cuda"]

# KernelBench's tolerances (atol = rtol) per precision.
TOLERANCES: dict[str, float] = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}

# The problem suites we judge, and the floating-point tolerance each promises its problems' authors and solvers.
# A problem is judged by its own suite's rule: KernelBench's problems by KernelBench's (above), kernrl's by the
# atol/rtol kernrl's task text states (its scientific, signal and graphics problems were written against them:
# fp32 FFTs, N-body steps and filters drift past 1e-4 in any reordering). kernrl's figures are a floor: an
# fp16/bf16 run never gets tighter than KernelBench's tolerance for that precision. Integer and boolean outputs
# have no tolerance in any suite.
SUITES: tuple[str, ...] = ("kernelbench", "kernrl")
KERNRL_ATOL, KERNRL_RTOL = 0.05, 0.02


def tolerance_for(suite: str, precision: str) -> tuple[float, float]:
    """(atol, rtol) for floating outputs of a problem of `suite` run in `precision`."""
    base = TOLERANCES[precision]
    if suite == "kernrl":
        return max(KERNRL_ATOL, base), max(KERNRL_RTOL, base)
    if suite != "kernelbench":
        raise ValueError(f"unknown problem suite {suite!r}; use one of {', '.join(SUITES)}")
    return base, base


class ErrorCategory(str, Enum):
    FORMAT = "format"  # no kernel could be extracted from the response
    STATIC = "static"  # the static policy rejected it (includes detected hacks)
    COMPILE = "compile"  # import / build / JIT failure
    RUNTIME = "runtime"  # raised while running (includes CUDA faults)
    TIMEOUT = "timeout"  # exceeded the wall-clock limit
    CRASH = "crash"  # the sandbox process died (segfault, abort, OOM-kill)
    MISMATCH = "mismatch"  # ran, wrong values
    SHAPE = "shape"  # ran, wrong output shape
    DTYPE = "dtype"  # ran, wrong output dtype
    INFRA = "infra"  # our fault (worker lost, GPU unavailable): retry, never a zero reward
    TOO_LARGE = "too_large"  # the problem does not fit this device even alone: no verdict, no reward, no retry
    UNKNOWN_PROBLEM = "unknown_problem"  # the request names a problem that does not exist: no verdict, no reward
    # A trivial candidate (zeros, a constant, another seed's output) passes every input set the problem allows
    # (evaluation/verdict/discrimination.py): its verdicts cannot tell right from wrong, so none is given.
    UNDISCRIMINATING = "undiscriminating"
    # Triton's CPU interpreter lacks what the kernel uses (an extern libdevice call, the GPU driver): it may
    # well be right on a GPU, so no verdict.
    UNSUPPORTED = "unsupported"
    # The problem itself cannot run here (a module it imports is not installed): no kernel of it can be judged. Ours,
    # unlike `unsupported`, which the kernel chose (rewards/shaping.py scores that as a wrong answer in training).
    UNAVAILABLE = "unavailable"
    OK = "ok"

    @property
    def is_kernel_fault(self) -> bool:
        return self != ErrorCategory.OK and not self.is_ours

    @property
    def is_ours(self) -> bool:
        """No verdict on the kernel: nothing is learnt from it and it is never cached."""
        return self in (ErrorCategory.INFRA, ErrorCategory.TOO_LARGE, ErrorCategory.UNKNOWN_PROBLEM,
                        ErrorCategory.UNDISCRIMINATING, ErrorCategory.UNSUPPORTED, ErrorCategory.UNAVAILABLE)


def categories_without_verdict() -> list[str]:
    """The values of the categories that say nothing of the kernel (for queries that must leave them out)."""
    return [category.value for category in ErrorCategory if category.is_ours]


class Flag(str, Enum):
    EXCESSIVE_SPEEDUP = "excessive_speedup"  # speedup above threshold: earns nothing until re-verified
    NEEDS_REVERIFICATION = "needs_reverification"
    REVERIFIED = "reverified"  # host-clock re-timing confirmed the speedup
    INPUT_MUTATED = "input_mutated"  # the candidate wrote into its inputs
    BACKEND_NOT_USED = "backend_not_used"  # no kernel of the candidate's own was launched
    LOW_KERNEL_SHARE = "low_kernel_share"  # the candidate's kernels carry little of the GPU time
    HACK = "hack"  # any detected reward hack: reward is zero
    NO_SPEEDUP_ON_CPU = "no_speedup_on_cpu"
    # Timed faster than the problem's physical floor allows (evaluation/timing/floor.py): work was skipped; no speed reward.
    BELOW_SPEED_OF_LIGHT = "below_speed_of_light"
    # The times the candidate's process reported disagree with the worker's own clock over the same calls
    # (timing/decisions.py: host_clock_check): the timing was faked; a hack.
    CLOCK_DISAGREES = "clock_disagrees"
    # The profiled forwards did more GPU work than the timed calls took (decisions.profile_agrees_with_timing): what
    # was timed is not what the work share was read from.
    PROFILE_DISAGREES = "profile_disagrees"
    # The timed calls launched fewer of the candidate's own Triton kernels per forward than a profiled forward did
    # (timing/decisions.py: launches_verdict): the candidate ran other code when timed than when checked; a hack.
    LAUNCHES_DISAGREE = "launches_disagree"


# Flags that say the work or the time of a correct verdict cannot be trusted. A verdict carrying any of them earns no
# more than the slowest honest correct kernel under every reward preset (rewards/shaping.py: it is scored as a correct
# kernel at no speed at all); one that also carries `hack` (foreign work, a faked clock) earns the hack floor.
# A flag added to the evaluator that casts doubt on work or time belongs here (tests/test_reward_rules.py checks
# every flag is either here or named as harmless there).
DOUBT_FLAGS: frozenset[str] = frozenset({
    Flag.LOW_KERNEL_SHARE.value, Flag.BELOW_SPEED_OF_LIGHT.value, Flag.CLOCK_DISAGREES.value,
    Flag.BACKEND_NOT_USED.value, Flag.INPUT_MUTATED.value, Flag.PROFILE_DISAGREES.value, Flag.LAUNCHES_DISAGREE.value,
})


@dataclass
class EvalSettings:
    """Everything that changes a verdict; its hash is part of the evaluation cache key."""

    backend: Backend = "triton"
    precision: Precision = "fp32"
    device: DeviceKind = "cpu"
    size: Literal["real", "small"] = "small"
    correctness_trials: int = 3  # hidden seeds per evaluation
    # Widened seeds added where a trivial candidate passes the problem's own inputs (discrimination.py).
    discriminating_trials: int = 2
    timing_trials: int = 50
    warmup_trials: int = 3
    timeout_s: float = 120.0
    # The reference's own budget (evaluation/worker/reference_budget.py): its sizing, one seed's outputs or its baseline
    # timing past this many seconds, and the problem gets no verdict on this evaluator. None: timeout_s.
    reference_timeout_s: float | None = None
    excessive_speedup_threshold: float = 10.0
    measure_compile_baseline: bool = False
    memory_limit_mb: int = 16384  # address-space limit of the sandbox (CPU side)
    # fp16/bf16/fp8 or autocast inside an fp32 problem: a static warning ("warn", the tolerance decides) or
    # a static error ("reject").
    precision_policy: PrecisionPolicy = "warn"

    @property
    def atol(self) -> float:
        return TOLERANCES[self.precision]

    @property
    def rtol(self) -> float:
        return TOLERANCES[self.precision]

    @property
    def reference_budget_s(self) -> float:
        return float(self.reference_timeout_s or self.timeout_s)

    def settings_hash(self) -> str:
        fields = dataclasses.asdict(self)
        if fields["reference_timeout_s"] is None:  # the default: verdicts keep the keys they had before the field
            del fields["reference_timeout_s"]
        payload = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass
class EvalRequest:
    problem_id: str
    candidate_source: str  # the extracted kernel module (ModelNew)
    settings: EvalSettings = field(default_factory=EvalSettings)
    request_id: str = ""  # caller's label (e.g. run/step/sample); not part of the cache key
    # The problem's source (its sha256), filled in by the Evaluator: a verdict holds for one reference.
    problem_sha256: str = ""
    # The device that judges it (name and compute capability, or the CPU's architecture), filled in by
    # the Evaluator: a verdict on one GPU is not a verdict on another.
    hardware: str = ""

    @property
    def candidate_sha256(self) -> str:
        return hashlib.sha256(self.candidate_source.encode()).hexdigest()

    @property
    def verdict_hash(self) -> str:
        """What decides the verdict besides the problem id and the candidate: the settings, the
        reference's source, the hardware and the evaluator's version (stored as `EvalResult.settings_hash`)."""
        raw = f"{self.settings.settings_hash()}|{self.problem_sha256}|{self.hardware}|{EVALUATOR_VERSION}"
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    @property
    def cache_key(self) -> str:
        raw = f"{self.problem_id}|{self.candidate_sha256}|{self.verdict_hash}"
        return hashlib.sha256(raw.encode()).hexdigest()


@dataclass
class StaticReport:
    errors: list[str] = field(default_factory=list)  # "rule_name: message"
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class EvalResult:
    problem_id: str
    candidate_sha256: str
    backend: str
    precision: str
    device_kind: str
    format_ok: bool = False
    static: StaticReport = field(default_factory=StaticReport)
    compiled: bool = False
    correct: bool = False
    trials_passed: int = 0
    trials_total: int = 0
    max_abs_err: float | None = None
    runtime_ms: float | None = None  # median
    runtime_spread_ms: float | None = None  # interquartile range
    baseline_ms: float | None = None  # eager
    baseline_compile_ms: float | None = None  # torch.compile
    speedup: float | None = None  # baseline_ms / runtime_ms, only when timed on a GPU
    error_category: ErrorCategory = ErrorCategory.OK
    error_message: str = ""  # short, fit for the model to read
    flags: list[str] = field(default_factory=list)
    hardware: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    phase_seconds: dict[str, float] = field(default_factory=dict)  # extract/static/compile/correctness/timing
    settings_hash: str = ""
    schema_version: int = RESULT_SCHEMA_VERSION
    cached: bool = False  # served from the evaluation cache
    kernel_share: float | None = None  # GPU: share of the forward's GPU time in the candidate's own kernels
    # GPU: the host-clock re-timing of an excessive speedup, or of one the worker's clock agrees with only by the
    # allocator's slack (timing/decisions.py: host_clock_check)
    host_speedup: float | None = None
    # GPU: the problem's floor and how close the candidate and the reference came (evaluation/timing/floor.py speed_of_light)
    speed_of_light: dict[str, Any] | None = None
    # GPU: one profiled forward, [kernel name, launches, device microseconds] by time, at most PROFILE_ROWS rows
    profile: list[list[Any]] | None = None

    @property
    def sol_fraction(self) -> float | None:
        return (self.speed_of_light or {}).get("sol_fraction")

    @property
    def is_hack(self) -> bool:
        return Flag.HACK.value in self.flags

    @property
    def unverified_speedup(self) -> bool:
        """Flagged excessive and not (yet) confirmed by the host-clock re-timing: it earns nothing."""
        return Flag.EXCESSIVE_SPEEDUP.value in self.flags and Flag.REVERIFIED.value not in self.flags

    @property
    def in_doubt(self) -> bool:
        """A flag says the work or the time cannot be trusted (DOUBT_FLAGS), or an excessive speedup is unconfirmed."""
        return self.unverified_speedup or any(flag in DOUBT_FLAGS for flag in self.flags)

    @property
    def speedup_counts(self) -> bool:
        """A speedup earns reward only from a correct verdict with no flag of doubt (DOUBT_FLAGS, an unconfirmed
        excessive speedup)."""
        if self.speedup is None or not self.correct or self.is_hack:
            return False
        return not self.in_doubt

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["error_category"] = self.error_category.value
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalResult:
        data = dict(data)
        data["static"] = StaticReport(**data.get("static", {}))
        data["error_category"] = ErrorCategory(data.get("error_category", "ok"))
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def from_json(cls, text: str) -> EvalResult:
        return cls.from_dict(json.loads(text))

    @classmethod
    def failure(cls, request: EvalRequest, category: ErrorCategory, message: str, **extra: Any) -> EvalResult:
        s = request.settings
        return cls(
            problem_id=request.problem_id,
            candidate_sha256=request.candidate_sha256,
            backend=s.backend,
            precision=s.precision,
            device_kind=s.device,
            error_category=category,
            error_message=message,
            settings_hash=request.verdict_hash,
            **extra,
        )


def add_seconds(result: EvalResult, phase: str, seconds: float) -> None:
    """Adds to a phase (`phase_seconds`) that several steps of one evaluation contribute to."""
    result.phase_seconds[phase] = result.phase_seconds.get(phase, 0.0) + seconds
