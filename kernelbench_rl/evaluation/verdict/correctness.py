"""Which calls a candidate's correctness is judged on, and what they say, decided from plain data.

The worker drives the candidate's child through them (worker/checked_calls.py); here, from the problem's seeds, its
audit (discrimination.Discrimination) and the settings: how many of the problem's own seeds, which sensitivity seeds
and which closing seed, whether the problem allows a verdict at all (`refusal`), and on the CPU whether the candidate's
own Triton kernels ran (`cpu_backend_flags`). Nothing here imports the worker or timing/.
"""

from __future__ import annotations

import random
from typing import Protocol

from kernelbench_rl.evaluation.result import ErrorCategory, EvalSettings, Flag
from kernelbench_rl.evaluation.source import kernels
from kernelbench_rl.evaluation.verdict import discrimination, sensitivity
from kernelbench_rl.evaluation.verdict.faults import Fault


class SeedPool(Protocol):
    """What these decisions read of a problem's state (worker/reference_cache.ProblemState): its hidden seeds."""

    seed_pool: list[int]


def own_seed_count(settings: EvalSettings, found: discrimination.Discrimination) -> int:
    """The problem's own seeds a candidate is judged on: the settings' count, or more where a memorised answer passes
    now and then (Discrimination.own_seeds)."""
    return max(settings.correctness_trials, found.own_seeds)


def sensitivity_seeds(state: SeedPool, found: discrimination.Discrimination) -> tuple[list[tuple[int, dict]], str]:
    """The sensitivity seeds (sensitivity.py) this candidate is judged on, each drawn from the first of the problem's
    hidden seeds (their reference outputs are cached across candidates), and what the verdict says of them."""
    audited = found.sensitivity
    if audited is None:
        return [], "none (not audited: " + (found.reason or "the problem's inputs do not discriminate") + ")"
    if not sensitivity.enabled():
        return [], f"off ({sensitivity.ENV}); the problem's would be: {audited.summary()}"[:400]
    pool = state.seed_pool[:sensitivity.SENSITIVITY_SEEDS]
    return [(random.choice(pool), variant) for variant in audited.variants()], audited.summary()[:400]


def closing_seed(state: SeedPool, settings: EvalSettings, found: discrimination.Discrimination,
                 own: list[int]) -> tuple[tuple[int, dict] | None, str]:
    """The closing seed (discrimination.closing_variant) of this candidate's plan, and what the verdict says of it.
    It takes the place of one of the problem's own seeds where there are two or more (a call of the problem's own
    inputs at least stays, and the count of calls is what it was), and runs only where every kind it combines runs
    too (the sensitivity seeds on; widened seeds asked for where the problem has them)."""
    if found.closing is None:
        return None, found.closing_note or "none: the problem has no widened or sensitivity seeds"
    if not sensitivity.enabled() or (found.variant is not None and settings.discriminating_trials <= 0):
        return None, "none: not every kind it combines runs here"
    if len(own) > 1:
        own.pop()
    seed = random.choice(state.seed_pool[:sensitivity.SENSITIVITY_SEEDS])  # (its outputs are cached like theirs)
    return (seed, found.closing), f"last: {sensitivity.describe(found.closing)}"[:400]


def refusal(found: discrimination.Discrimination) -> Fault | None:
    """The verdict a problem gets before any seed when it cannot tell right from wrong (`undiscriminating`: no verdict,
    no reward, ours and never the kernel's); None when the candidate may be judged."""
    if found.audited and not found.discriminating:
        return Fault(ErrorCategory.UNDISCRIMINATING, "no verdict: " + found.summary().removeprefix("UNDISCRIMINATING: "))
    if found.sensitivity is not None and found.sensitivity.out_of_time and sensitivity.enabled():
        # Ours, not the kernel's: the reference was too slow for the audit to settle which sensitivity seeds the problem
        # gets, and without them partial work may pass. No verdict, as where no inputs discriminate.
        return Fault(ErrorCategory.UNDISCRIMINATING, (
            "no verdict: the reference's forwards used up the sensitivity audit's time before it could settle which "
            f"inputs tell whole work from partial work ({found.sensitivity.summary()})")[:500])
    return None


def cpu_backend_flags(launches: dict[str, int], names: set[str]) -> list[str]:
    """On the CPU (the Triton interpreter): the flags of a candidate none of whose own Triton kernels (`names`) was
    launched in its checked calls (`launches`: launches by kernel name, as the child counted them)."""
    if any(kernels.is_own_kernel(name, names) for name, count in launches.items() if count > 0):
        return []
    return [Flag.BACKEND_NOT_USED.value, Flag.HACK.value]
