"""The reference's own time budget: a problem whose reference is too slow for this device gets no verdict.

The worker runs each problem's reference itself (trusted code): its sizing (the first forwards on the device
and the trivial-candidate discrimination), its outputs for each correctness seed and its baseline timing. A
CUDA forward cannot be interrupted, so the worker only says when one of these phases starts and ends (an
event line of its protocol, `reporting` and `phase` below); the pool's watchdog kills a worker whose phase
runs past the budget (`EvalSettings.reference_budget_s`, config key `eval.reference_timeout_s`), remembers the
problem as too slow for the rest of its life and answers each of its requests with `too_large` at once. The
other requests the killed worker held are not at fault and run again without spending their retry.

The baseline's timed calls fit a share of the same budget (`timed_calls`), and the candidate gets as many
timed calls as its reference, so the comparison stays even.

Imports only the standard library and result.py: the pool (orchestrator side) and the worker both use it.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult

# What each phase the worker reports is, in a verdict's words.
PHASES: dict[str, str] = {
    "sizing": "sizing (its first forwards on the device and the trivial-candidate check)",
    "outputs": "forward for a correctness seed",
    "baseline": "baseline timing",
}
# Timed calls: a reference slower than this a call may get fewer than asked, so that timing it fits
# TIMING_SHARE of its budget; never fewer than MIN_TIMED_CALLS.
SLOW_CALL_S = 0.020
TIMING_SHARE = 0.25
MIN_TIMED_CALLS = 10

_reporter = threading.local()  # per worker thread: where its evaluation's phase events go


@contextlib.contextmanager
def reporting(report: Callable[[str | None], None]) -> Iterator[None]:
    """Within this block (one evaluation on this thread), reference phases are reported: report(name) when one
    starts, report(None) when it ends."""
    _reporter.report, _reporter.depth = report, 0
    try:
        yield
    finally:
        _reporter.report = None


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """A reference phase of this thread's evaluation, bounded by its budget. Only the outermost counts (the
    sizing's forwards are part of the sizing). Enter it once the locks and the device are held: waiting for
    them is not the reference's time."""
    report = getattr(_reporter, "report", None)
    if report is None or _reporter.depth:
        yield
        return
    _reporter.depth = 1
    _tell(report, name)
    try:
        yield
    finally:
        _reporter.depth = 0
        _tell(report, None)


def _tell(report: Callable[[str | None], None], name: str | None) -> None:
    try:
        report(name)
    except (BrokenPipeError, OSError, ValueError):
        pass  # the orchestrator is gone: nobody bounds this phase, and the worker is stopping


def problem_key(payload: dict[str, Any]) -> str:
    """What a too-slow verdict holds for: the problem, its source at the size asked, the precision."""
    settings = payload.get("settings") or {}
    digest = hashlib.sha256(str(payload.get("problem_source", "")).encode()).hexdigest()[:16]
    return f"{payload.get('problem_id')}|{digest}|{settings.get('size')}|{settings.get('precision')}"


def budget_of(payload: dict[str, Any]) -> float:
    """The reference budget of a request, in seconds: `reference_timeout_s`, else the candidate's timeout."""
    settings = payload.get("settings") or {}
    return float(settings.get("reference_timeout_s") or settings.get("timeout_s") or 120.0)


def over_budget_message(phase_name: str, elapsed_s: float, budget_s: float, hardware: str = "") -> str:
    where = f" on {hardware}" if hardware else ""
    return (f"no verdict: this problem's reference is too slow for its time budget{where}: its "
            f"{PHASES.get(phase_name, phase_name)} was still running after {elapsed_s:.1f} s, over the {budget_s:g} s "
            f"a reference may take (eval.reference_timeout_s); none of its requests runs on this evaluator again")


def too_slow_answer(payload: dict[str, Any], message: str, hardware: str = "") -> dict[str, Any]:
    """The pool's answer to a request of a problem found too slow: a result with no verdict (`too_large`: no
    reward, not the kernel's fault, never cached nor retried)."""
    settings = payload.get("settings") or {}
    result = EvalResult(
        problem_id=str(payload.get("problem_id", "")), candidate_sha256=str(payload.get("candidate_sha256", "")),
        backend=str(settings.get("backend", "")), precision=str(settings.get("precision", "")),
        device_kind=str(settings.get("device", "")), format_ok=True, hardware=hardware,
        error_category=ErrorCategory.TOO_LARGE, error_message=message[:500],
        versions={"reference_budget": f"{budget_of(payload):g} s"},
    )
    return {"result": result.to_dict(), "baseline": None}


def timed_calls(asked: int, per_call_s: float | None, budget_s: float) -> tuple[int, str]:
    """How many calls to time (the baseline's, and the candidate's alike), and why.

    A reference slower than SLOW_CALL_S a call whose `asked` calls would take more than TIMING_SHARE of its
    budget gets as many as fit that share, at least MIN_TIMED_CALLS (never more than asked)."""
    share_s = TIMING_SHARE * budget_s
    if not per_call_s or per_call_s <= SLOW_CALL_S or asked * per_call_s <= share_s or asked <= MIN_TIMED_CALLS:
        return asked, f"{asked} as asked"
    calls = max(MIN_TIMED_CALLS, min(asked, int(share_s / per_call_s)))
    return calls, (f"{calls} of {asked} asked: the reference takes {per_call_s:.3g} s a call, and its timed calls "
                   f"fit {TIMING_SHARE:.0%} of its {budget_s:g} s budget (eval.reference_timeout_s), at least "
                   f"{MIN_TIMED_CALLS}; the kernel gets as many")
