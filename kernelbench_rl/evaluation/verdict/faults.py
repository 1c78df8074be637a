"""Verdicts reached mid-evaluation, and whose fault they are.

A `Fault` carries a verdict (the kernel's, or ours: infra) out of the evaluation to its result. An
out-of-memory is the candidate's only past its device-memory budget; beside other children it may be
the device that was short, and the worker then runs the candidate again alone. A child that died is
ours before any candidate code ran, a crash after.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import torch

from kernelbench_rl.evaluation.verdict import memory_figures as footprints
from kernelbench_rl.evaluation.sandbox import outputs
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult, Flag


class Fault(Exception):
    """A verdict reached mid-evaluation (kernel fault or infra), carried to the result. `facts`: what the worker
    measured itself about it (a device OOM: the device's free memory with the child gone, the child's budget),
    kept in the result's versions (`device_oom_facts`) for whoever decides whose fault it is."""

    def __init__(self, category: ErrorCategory, message: str, flags: tuple[str, ...] = (),
                 facts: dict[str, int] | None = None) -> None:
        super().__init__(message)
        self.category = category
        self.message = message
        self.flags = flags
        self.facts = facts


# torch's message, and the exception's name that the child's short_error and the worker's own OOM verdict carry.
_DEVICE_OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError")
# Out of memory that is not the candidate's: the worker's own allocation failed, or the child's failed
# while the child was within its budget (the device was short, not the kernel greedy).
WORKER_OOM = "the evaluator's own allocation found the device full"
WITHIN_BUDGET_OOM = "within its device-memory budget"


def ran_out_of_device_memory(result: EvalResult) -> bool:
    return (result.error_category in (ErrorCategory.RUNTIME, ErrorCategory.CRASH)
            and any(marker in result.error_message for marker in _DEVICE_OOM_MARKERS))


def oom_not_the_candidates(result: EvalResult) -> bool:
    """An out-of-memory that no allocation of the candidate beyond its budget caused."""
    return result.error_category == ErrorCategory.RUNTIME and (
        result.error_message.startswith(WORKER_OOM) or WITHIN_BUDGET_OOM in result.error_message)


def child_oom_fault(message: str, oom: dict[str, Any], cap: int | None = None,
                    device_free: int | None = None) -> Fault:
    """The child's allocation failed: the candidate's fault past its budget, else (maybe) ours.

    `cap`: the budget the worker gave the child (the child's own report is used only where the worker has none);
    `device_free`: the device's free memory the worker read itself once the child was gone. Both travel with the
    fault as facts (`settle_alone_oom` decides on them), whatever the child's message claims."""
    try:
        reserved, reported_cap = int(oom.get("reserved", 0)), int(oom.get("cap", 0))
    except (TypeError, ValueError):
        reserved, reported_cap = 0, 0
    cap = int(cap) if cap else reported_cap
    facts = {"cap": cap, **({"free_without_child": int(device_free)} if device_free is not None else {})}
    fault = _child_oom_verdict(message, reserved, cap)
    fault.facts = facts
    return fault


def _child_oom_verdict(message: str, reserved: int, cap: int) -> Fault:
    requested = footprints.requested_bytes(message)
    if footprints.over_budget(reserved, requested, cap):
        return Fault(ErrorCategory.RUNTIME, (
            f"the kernel's process held {footprints.gib(reserved)} of device memory and asked for "
            f"{footprints.gib(requested)} more, past its budget of {footprints.gib(cap)} "
            f"({footprints.CANDIDATE_MEMORY_FACTOR}x the reference's peak plus the harness's own buffers)")[:700])
    return Fault(ErrorCategory.RUNTIME, (
        f"out of device memory {WITHIN_BUDGET_OOM} ({footprints.gib(reserved)} held of {footprints.gib(cap)}): "
        f"{message}")[:700])


def device_had_room(device_free: int | None, cap: int | None) -> bool:
    """With the child gone, the device had the child's whole budget free. A child within its budget cannot have run
    out of memory for want of the device then (it held less than its budget and asked for less than the rest), so
    the out-of-memory came from the kernel itself (raised by its own code, say), never from the device."""
    return device_free is not None and cap is not None and cap > 0 and device_free >= cap


def settle_alone_oom(result: EvalResult) -> None:
    """Whose out-of-memory this is, decided on facts the worker holds, once the candidate ran with the device to
    itself and again ran out within its budget: the kernel's where the device had its whole budget free without it
    (the worker's own read, `device_oom_facts`), ours (`infra`, retried) only where it did not. An exception the
    candidate raises is no fact: before, a hand-made `torch.cuda.OutOfMemoryError` came back `infra`, left out of
    training and retried with the device held exclusively."""
    if not oom_not_the_candidates(result):
        return
    result.versions["oom_alone"] = result.error_message[:300]
    try:
        facts = json.loads(result.versions.get("device_oom_facts", "") or "{}")
    except ValueError:
        facts = {}
    free, cap = facts.get("free_without_child"), facts.get("cap")
    if not result.error_message.startswith(WORKER_OOM) and device_had_room(free, cap):
        result.error_category = ErrorCategory.RUNTIME
        result.error_message = (
            f"the kernel's process reported running out of device memory with the device to itself, yet without it "
            f"the device had {footprints.gib(int(free))} free, more than the kernel's whole budget of "
            f"{footprints.gib(int(cap))}: the device was not short, so the failure is the kernel's own")[:500]
        return
    result.error_category = ErrorCategory.INFRA
    result.error_message = ("the device ran out of memory for this evaluation even with the device to itself, "
                            f"the candidate within its budget (ours, not the kernel's): {result.error_message}")[:500]


def own_oom_message(exc: BaseException, device: str) -> str:
    """The verdict text of an out-of-memory in the worker's own work (references, received outputs)."""
    first_line = str(exc).splitlines()[0] if str(exc) else ""
    free, total = torch.cuda.mem_get_info() if device == "cuda" else (0, 0)
    return (f"{WORKER_OOM} ({free / 2**30:.1f} of {total / 2**30:.1f} GiB free, the worker holding "
            f"{torch.cuda.memory_reserved() / 2**30:.1f}): OutOfMemoryError: {first_line}")[:500]


def death_fault(child: Any, phase: str) -> Fault:
    """The verdict on a child that died or stopped answering while `phase`: how it died, and whose it is."""
    child.process.join(timeout=5)
    code = child.process.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        detail = f"the process was killed by {name}"
    elif code is None:
        detail = "the process stopped answering"
    else:
        detail = f"the process exited with status {code}"
    key = _stderr_key_line(child.workdir)
    if phase == "starting the sandbox":
        # No candidate code has run yet (it is imported after "started"): a child lost here is ours,
        # e.g. a CUDA context that could not be created on a crowded device.
        return Fault(ErrorCategory.INFRA, f"the sandbox died while starting: {detail}" + (f" ({key})" if key else ""))
    return Fault(ErrorCategory.CRASH, f"crashed while {phase}: {detail}" + (f" ({key})" if key else ""))


def _stderr_key_line(workdir: str) -> str:
    """The telling line of a dead child's stderr (faulthandler's 'Fatal Python error: ...')."""
    if not workdir:
        return ""
    try:
        with open(os.path.join(workdir, "stderr.txt"), "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 8192))
            tail = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    for line in tail:
        if line.startswith("Fatal Python error") or "CUDA error" in line or "Killed" in line:
            return line.strip()[:200]
    return ""


def numerics_unchanged(header: dict[str, Any], result: EvalResult) -> None:
    changed = header.get("numerics_changed")
    if isinstance(changed, list) and changed:
        result.flags.append(Flag.HACK.value)
        raise Fault(ErrorCategory.RUNTIME, "the kernel changed the numerics settings the reference runs under: "
                    + ", ".join(map(str, changed))[:300])


def aliasing_allowed(reported: Any, output_aliases: list[int | None], when: str = "", flags: tuple[str, ...] = ()) -> None:
    """An output that is an input or a view of one, where the reference returns a new tensor, is a mismatch
    whatever its values (returning the input is right wherever the operation leaves the inputs unchanged)."""
    for got in reported if isinstance(reported, list) else [reported]:
        if not outputs.well_formed_aliases(got):
            raise Fault(ErrorCategory.RUNTIME, "the kernel's process reported malformed output aliasing")
        fault = outputs.alias_fault(got, output_aliases)
        if fault:
            raise Fault(ErrorCategory.MISMATCH, when + fault, flags)
