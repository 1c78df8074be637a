"""Device-memory footprints: what one evaluation of a problem needs, and who is to blame when it runs out.

KernelBench's own sizes reach 6 GiB per tensor (L1/19: 4096 x 393216 fp32). On an 80 GB H100 our
evaluator once judged 84 of 100 level-1 references wrong because our own buffers (reference copies,
poison, a second input set for timing, verified outputs, neighbours' warm-ups) ran the device out of
memory and the candidate was blamed. So each problem is sized once on the device (parameters, inputs,
the peak of one reference forward), and that footprint decides:

- the timing buffer plan: fresh input sets per call only while two sets are cheap;
- how many verified timing outputs and how much poison the child keeps;
- the bytes an evaluation is admitted with (its device section, its warm-up);
- the candidate's own budget: `CANDIDATE_MEMORY_FACTOR` x the reference's peak plus our buffers in
  its process, enforced in the child through the caching allocator's per-process limit; an
  out-of-memory beyond it is the candidate's, within it ours;
- whether the problem fits this device at all (`too_large`, never the candidate's fault).

Pure arithmetic: no torch, so the rules are tested on any machine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kernelbench_rl.evaluation.verdict.memory_figures import (  # noqa: F401 - importable from here as before
    CANDIDATE_MEMORY_FACTOR, GIB, MIB, gib, over_budget, requested_bytes,
)

# Inputs up to this size get a fresh set per timed call (new addresses); larger ones are refreshed
# in place (one set alive), the same for baseline and candidate.
FRESH_INPUTS_MAX_BYTES = 512 * MIB
# Verified timing outputs are clones kept until the run ends: two when small, one when outputs are large.
VERIFY_OUTPUTS_MAX_BYTES = 1 * GIB
POISON_MAX_BYTES = 8 * GIB
# Outputs past this size get a poison of this size only: the hidden seeds differ per call, so a stale
# buffer holds another seed's answer and fails anyway; the full poison doubled the child's peak.
POISON_FULL_MAX_BYTES = 2 * GIB
# Received CUDA IPC tensors up to this size are copied into a private snapshot; larger ones are compared
# in place (a snapshot of a 6 GiB output is what ran the device out of memory).
SNAPSHOT_MAX_BYTES = 1 * GIB
# The budget never goes below this share of the device: cuDNN picks its algorithm by the workspace it
# can get, and a tight cap made identical ConvTranspose2d code read 0.71x (KernelBench L1/57, H100).
CAP_FLOOR_FRACTION = 0.25
SLACK_BYTES = 256 * MIB  # allocator rounding, cuBLAS/cuDNN workspaces, small tensors
COMPARE_CHUNK_ELEMENTS = 1 << 26  # the worker compares outputs in chunks: temporaries stay ~0.5 GiB


@dataclass(frozen=True)
class Footprint:
    """Bytes measured when a problem is sized: parameters, one input set, one output set, and the
    allocation peak of one reference forward beyond its parameters and inputs (outputs included)."""

    param_bytes: int
    input_bytes: int
    output_bytes: int
    forward_bytes: int

    @property
    def reference_peak(self) -> int:
        return self.param_bytes + self.input_bytes + max(self.forward_bytes, self.output_bytes)


@dataclass(frozen=True)
class MemoryPlan:
    fresh_buffers: bool
    verify_trials: int
    poison_bytes: int
    child_bytes: int  # the child's peak with a candidate that needs what the reference needs
    candidate_cap_bytes: int  # the child's enforced budget
    worker_bytes: int  # the worker's own transient use during the device section (baseline, references, compare)
    warm_bytes: int  # admitted for a warm-up forward
    section_bytes: int  # admitted for the device section (candidate at its cap + the worker)
    needed_bytes: int  # the least an evaluation can run with (candidate at the reference's size + the worker)

    def fits(self, capacity: int) -> bool:
        return self.needed_bytes <= capacity

    def to_dict(self) -> dict[str, int | bool]:
        return asdict(self)


def plan(footprint: Footprint, l2_bytes: int = 50 * MIB) -> MemoryPlan:
    inputs, outputs, params = footprint.input_bytes, footprint.output_bytes, footprint.param_bytes
    forward = max(footprint.forward_bytes, outputs)
    fresh = inputs <= FRESH_INPUTS_MAX_BYTES
    sets = 2 if fresh else 1
    verify = 2 if outputs <= VERIFY_OUTPUTS_MAX_BYTES else 1
    poison = (min(outputs + min(outputs, GIB), POISON_MAX_BYTES) if outputs <= POISON_FULL_MAX_BYTES else GIB) + 32 * MIB
    flush = 2 * l2_bytes
    # Correctness: inputs, then poison (freed into the child's cache, where the forward's allocations
    # reuse it). Timing: input set(s), one forward, the verified clones.
    child = params + max(inputs + max(poison, forward), sets * inputs + forward + verify * outputs) + flush + SLACK_BYTES
    cap = child + (CANDIDATE_MEMORY_FACTOR - 1) * footprint.reference_peak + 2 * SLACK_BYTES
    chunk_temps = min(outputs, COMPARE_CHUNK_ELEMENTS * 4) * 2
    received = outputs if outputs <= SNAPSHOT_MAX_BYTES else 0  # large ones are compared in place
    # Baseline timing (input set(s) + a forward), a reference forward (inputs + forward), or a
    # comparison: the reference's outputs, the received copy, the regenerated inputs for the
    # unmodified check, chunked temporaries.
    worker = params + max(sets * inputs + forward, outputs + received + inputs + chunk_temps) + SLACK_BYTES
    warm = footprint.reference_peak + SLACK_BYTES
    return MemoryPlan(
        fresh_buffers=fresh, verify_trials=verify, poison_bytes=poison, child_bytes=child,
        candidate_cap_bytes=cap, worker_bytes=worker, warm_bytes=warm, section_bytes=cap + worker,
        needed_bytes=child + worker,
    )


def enforced_cap_bytes(memory_plan: MemoryPlan, total: int) -> int:
    """The budget the child's allocator enforces: the plan's cap, never below CAP_FLOOR_FRACTION of the
    device, never above the device."""
    return min(max(memory_plan.candidate_cap_bytes, int(CAP_FLOOR_FRACTION * total)), total)


def too_large_message(memory_plan: MemoryPlan, capacity: int, total: int) -> str:
    return (f"this problem needs about {gib(memory_plan.needed_bytes)} of device memory for one evaluation "
            f"(the candidate's process {gib(memory_plan.child_bytes)}, the evaluator's own {gib(memory_plan.worker_bytes)}), "
            f"but only {gib(capacity)} of this device's {gib(total)} is available to evaluations")
