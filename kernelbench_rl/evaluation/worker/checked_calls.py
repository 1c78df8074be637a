"""The correctness step of the worker's evaluations: the candidate's outputs on hidden seeds against the reference's.

Each seed is one round trip with the candidate's child: the worker computes the reference's outputs, the child runs
the candidate on the same inputs and hands its outputs and its inputs back, and the worker compares
them. The first wrong seed ends the evaluation with its verdict (a Fault). This module drives the child; which seeds,
whether the problem allows a verdict at all and what the outputs, inputs and launches mean are decided from plain data
in verdict/ (correctness.py, checks.py, discrimination.py, sensitivity.py).
"""

from __future__ import annotations

import contextlib
import random
import time
from typing import Any

from kernelbench_rl.evaluation import trace
from kernelbench_rl.evaluation.sandbox import runtime
from kernelbench_rl.evaluation.source import kernels
from kernelbench_rl.evaluation.verdict import checks, discrimination, faults, sensitivity
from kernelbench_rl.evaluation.verdict.correctness import (closing_seed, cpu_backend_flags, own_seed_count,
                                                           refusal, sensitivity_seeds)
from kernelbench_rl.evaluation.worker import children
from kernelbench_rl.evaluation.worker.children import Child
from kernelbench_rl.evaluation.sandbox.compute_account import flag_result as flag_cpu_account
from kernelbench_rl.evaluation.timing.decisions import LOW_KERNEL_SHARE, TOKEN_KERNEL_SHARE, call_allowance_s
from kernelbench_rl.evaluation.verdict.faults import Fault
from kernelbench_rl.evaluation.worker.reference_cache import ProblemState, ReferenceCache
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult, EvalSettings, Flag, add_seconds
from kernelbench_rl.evaluation.worker.scheduling import QuietGate


def check_correctness(child: Child, state: ProblemState, settings: EvalSettings, result: EvalResult, deadline: float,
                      payload: dict[str, Any], *, shared: bool, references: ReferenceCache, quiet_gate: QuietGate,
                      transport: str, device: str) -> bool:
    """The correctness seeds (raises a Fault on the first wrong one); False when the evaluation ends here
    (the CPU: no timing). `shared`: each seed's device work takes the quiet gate shared instead of the
    device being held for the whole phase."""
    precision = settings.precision
    t = time.perf_counter()
    found = state.discrimination_for(precision, payload.get("input_variant"))
    seeds = random.sample(state.seed_pool, min(own_seed_count(settings, found), len(state.seed_pool)))
    widened_seeds = random.sample(state.seed_pool, min(settings.discriminating_trials, len(state.seed_pool)))
    sensitive, result.versions["sensitivity"] = sensitivity_seeds(state, found)
    closing, result.versions["closing_seed"] = closing_seed(state, settings, found, seeds)
    # In a secret order, the closing seed last (correctness_plan): no call's position tells the candidate what it is
    # checked on, and whatever it would fail, the last call catches.
    plan = discrimination.correctness_plan(seeds, widened_seeds, found.variant, sensitive, closing)
    # The problem's own seeds carry its perturbation too, as the profiled calls do: no value of an input tells one
    # checked call from another (sensitivity.everyday_variant; the timed calls keep the problem's own inputs).
    everyday = sensitivity.everyday_variant(found)
    if everyday is not None:
        plan = [(seed, everyday if variant is None else variant) for seed, variant in plan]
        result.versions["everyday_inputs"] = "every checked and profiled call perturbed: " + sensitivity.describe(everyday)[:200]
    result.trials_total = len(plan)
    result.versions["inputs"] = found.summary()[:400]
    refused = refusal(found)
    if refused is not None:
        raise refused
    worst = 0.0
    cpu_launches: dict[str, int] = {}
    cpu_accounts: list[Any] = []  # the child's compute account of each forward (CPU)
    # Where the correctness phase goes (worker's reference outputs, the child's round trip, the comparison,
    # the input check): host wall time, no added syncs, so the reference's GPU work still overlaps the
    # child's and is counted in whichever part waits for it.
    parts = dict.fromkeys(("correctness_reference", "correctness_child", "correctness_compare",
                           "correctness_input_check"), 0.0)
    # One round trip per seed, on purpose: with CUDA IPC a hand-off is a JSON header and a handle
    # (milliseconds), and checking seed by seed keeps only one seed's outputs alive in either process
    # (level-1 outputs reach GiBs) and stops at the first wrong seed. Batching all seeds would save
    # a few milliseconds and cost memory; it paid only while tensors crossed through files.
    for position, (seed, variant) in enumerate(plan):
        mark = time.perf_counter()
        seed_work = contextlib.ExitStack()
        if shared:  # never beside a timed trial; a timing waits for at most this one seed
            seed_work.enter_context(quiet_gate.noisy())
            result.phase_seconds["correctness_quiet_wait"] = (
                result.phase_seconds.get("correctness_quiet_wait", 0.0) + time.perf_counter() - mark)
            mark = time.perf_counter()
        with seed_work:
            with state.lock, trace.span(trace.who_of(child), "reference_outputs"):
                reference = references.reference_outputs(state, precision, seed, variant=variant)
            # The reference's forward is bounded by its own budget, not the candidate's: a reference of seconds
            # a call (kernrl's PBKDF2, 7.4 s) otherwise timed out its identical candidate.
            deadline += time.perf_counter() - mark
            parts["correctness_reference"] += time.perf_counter() - mark
            mark = time.perf_counter()
            poison = (state.plan.poison_bytes if state.plan is not None
                      else 2 * sum(r.numel() * r.element_size() for r in reference) + (32 << 20))
            # Every seed's inputs come back and are checked: a kernel may write its inputs only from some call on
            # (a call counter), so the first seed alone proves nothing about the others. Over CUDA IPC that is a
            # handle per input; the pristine copy is the reference's own inputs for the seed.
            check_inputs = not state.mutates_inputs
            deadline = max(deadline, time.monotonic() + call_allowance_s(state.forward_s))
            children.send(child, {"cmd": "check", "seed": seed, "variant": variant, "poison_bytes": poison,
                               "return_inputs": check_inputs}, "running forward")
            header = children.expect(child, {"checked"}, deadline - time.monotonic(), "running forward")
            trace.record(trace.who_of(child), "check", mark)
            faults.numerics_unchanged(header, result)
            faults.aliasing_allowed([header.get("aliases")], state.output_aliases)
            waited = time.perf_counter()
            received = children.receive(child, header, reference, state.input_bytes, transport)
            trace.record(trace.who_of(child), "check_receive", waited)
            parts["correctness_child"] += time.perf_counter() - mark
            add_seconds(result, "correctness_receive", time.perf_counter() - waited)
            for part, seconds in (header.get("host_s") or {}).items():
                if isinstance(seconds, (int, float)):
                    add_seconds(result, f"correctness_child_{part}", float(seconds))
            mark = time.perf_counter()
            if isinstance(header.get("seconds"), (int, float)):
                result.phase_seconds["correctness_forward"] = (
                    result.phase_seconds.get("correctness_forward", 0.0) + float(header["seconds"]))
            if isinstance(header.get("launches"), dict):
                for name, count in header["launches"].items():
                    if isinstance(count, int):
                        cpu_launches[str(name)] = cpu_launches.get(str(name), 0) + count
            cpu_accounts.append(header.get("account"))
            outcome = references.compare(state, precision, seed, variant, reference, received.get("outputs", []))
            trace.record(trace.who_of(child), "compare", mark)
            parts["correctness_compare"] += time.perf_counter() - mark
            if outcome.max_abs_err is not None:
                worst = max(worst, outcome.max_abs_err)
                result.max_abs_err = worst
            if not outcome.ok:
                raise Fault(outcome.category, sensitivity.failure_note(variant) + outcome.message)
            if check_inputs:
                mark = time.perf_counter()
                pristine = runtime.tensor_inputs(references.inputs(state, seed, precision, variant))
                mutated = checks.inputs_unmodified(pristine, received.get("inputs", []))
                del pristine  # a second input set (16 GiB on L1/45) must not live into the next seed's forward
                trace.record(trace.who_of(child), "input_check", mark)
                parts["correctness_input_check"] += time.perf_counter() - mark
                if mutated:
                    result.flags.append(Flag.INPUT_MUTATED.value)
                    raise Fault(ErrorCategory.MISMATCH, mutated)
            del received, reference
            result.trials_passed += 1
    result.correct = True
    result.phase_seconds["correctness"] = time.perf_counter() - t
    result.phase_seconds.update(parts)
    if device != "cuda" and settings.backend == "triton":
        names = kernels.triton_kernel_names(payload["candidate_source"])
        result.flags += cpu_backend_flags(cpu_launches, names)
        flag_cpu_account(result, cpu_accounts, names, LOW_KERNEL_SHARE, TOKEN_KERNEL_SHARE)
    if device != "cuda":
        children.send(child, {"cmd": "exit"}, "exiting")
        return False
    return True
