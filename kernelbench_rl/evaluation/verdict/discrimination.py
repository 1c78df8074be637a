"""Inputs that can tell a right kernel from a wrong one.

KernelBench draws most inputs from `torch.rand`, in [0, 1). There ReLU, LeakyReLU and HardTanh return
their input unchanged, so a kernel that copies its input, or a `forward` that returns it, is "correct",
and a ReLU kernel is "correct" for LeakyReLU. A verdict is only as good as the inputs behind it.

Before a problem's first evaluation the worker runs trivial candidates against the reference on the
problem's own inputs: each input of the output's shape returned as it is, zeros, ones, a constant (the
mean of another seed's reference output: what a policy that memorised one output would write) and
another seed's whole output. When one passes, the problem gets widened inputs: its own inputs under an
affine map (a non-negative range onto a symmetric one, or a wider scale), kept only if the reference
stays finite on them and no trivial candidate passes there. Correctness then runs on both: the
problem's own seeds, as KernelBench does, and widened ones. Timing keeps the problem's own inputs, so
speedups stay comparable with KernelBench's.

Worker side: torch and the standard library only (runtime and checks are worker-side too).
"""

from __future__ import annotations

import json
import math
import random
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelbench_rl.evaluation.verdict import checks, sensitivity
from kernelbench_rl.evaluation.sandbox.runtime import apply_variant  # noqa: F401 - re-exported: the variant's meaning lives here

# A variant maps some floating inputs by x -> x * scale + shift: {"name": ..., "affine": [[index, scale, shift]]}.
Variant = dict[str, Any]
WIDE_SCALES = (4.0, 16.0, 256.0, 4096.0)


def variant_key(variant: Variant | None) -> str:
    """A stable key for caches: '' for the problem's own inputs."""
    return "" if not variant else json.dumps(variant, sort_keys=True)


def describe_variant(variant: Variant | None) -> str:
    if not variant:
        return "the problem's own inputs"
    maps = ", ".join(f"input {i}: x -> {_num(scale)}x{_signed(shift)}" for i, scale, shift in variant["affine"])
    return f"{variant['name']} ({maps})"


def _num(value: float) -> str:
    return f"{value:g}"


def _signed(value: float) -> str:
    return "" if value == 0 else f" {'-' if value < 0 else '+'} {_num(abs(value))}"


def _floating_inputs(inputs: Sequence[Any]) -> list[int]:
    return [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel()]


def _power_of_two_at_least(value: float) -> float:
    return 2.0 ** math.ceil(math.log2(value)) if value > 0 else 1.0


def candidate_variants(inputs: Sequence[Any]) -> list[Variant]:
    """Widened inputs to try, in order: every non-negative floating input onto a symmetric range
    (`torch.rand`'s [0, 1) onto [-1, 1)), then each such input alone, then all floating inputs scaled up."""
    floating = _floating_inputs(inputs)
    non_negative = []
    for i in floating:
        tensor = inputs[i]
        low, high = float(tensor.min()), float(tensor.max())
        if low >= 0 and high > 0:
            top = _power_of_two_at_least(high)
            non_negative.append([i, 2.0, -top])
    variants: list[Variant] = []
    if non_negative:
        variants.append({"name": "symmetric", "affine": non_negative})
        if len(non_negative) > 1:
            variants += [{"name": "symmetric", "affine": [entry]} for entry in non_negative]
    for scale in WIDE_SCALES:
        if floating:
            affine = [[i, scale, 0.0] for i in floating]
            variants.append({"name": f"wide x{_num(scale)}", "affine": affine})
            if non_negative:  # both: symmetric and wide
                shifted = {i: shift for i, _s, shift in non_negative}
                variants.append({"name": f"symmetric wide x{_num(scale)}",
                                 "affine": [[i, 2.0 * scale, shifted[i] * scale] if i in shifted else [i, scale, 0.0]
                                            for i in floating]})
    return variants


# -- trivial candidates ---------------------------------------------------------------------------------------

Recipe = Callable[[list[torch.Tensor], list[Any], list[torch.Tensor]], "list[torch.Tensor] | None"]


def _same_kind(a: torch.Tensor, b: torch.Tensor) -> bool:
    return tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype


def _input_returned(position: int) -> Recipe:
    def recipe(reference: list[torch.Tensor], inputs: list[Any], _other: list[torch.Tensor]) -> list[torch.Tensor] | None:
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        if position >= len(tensors):
            return None
        chosen = tensors[position]
        if not all(_same_kind(chosen, ref) for ref in reference):
            return None
        return [chosen for _ in reference]
    return recipe


def _filled(value: float) -> Recipe:
    def recipe(reference: list[torch.Tensor], _inputs: list[Any], _other: list[torch.Tensor]) -> list[torch.Tensor]:
        return [torch.full_like(ref, value) if ref.is_floating_point() else torch.full_like(ref, int(value))
                for ref in reference]
    return recipe


def _memorised_constant(reference: list[torch.Tensor], _inputs: list[Any], other: list[torch.Tensor]) -> list[torch.Tensor] | None:
    if len(other) != len(reference):
        return None
    out = []
    for ref, seen in zip(reference, other):
        if not _same_kind(ref, seen):
            return None
        if ref.is_floating_point():
            out.append(torch.full_like(ref, _finite_mean(seen)))
        else:
            out.append(torch.full_like(ref, int(seen.flatten()[0])) if seen.numel() else torch.empty_like(ref))
    return out


def _finite_mean(tensor: torch.Tensor) -> float:
    """The mean of the finite values, without boolean indexing (its int64 indices of a 4-D 7.5 GiB output take 56 GiB)."""
    if not tensor.numel():
        return 0.0
    mask = torch.isfinite(tensor)
    if bool(mask.all()):
        return float(tensor.mean(dtype=torch.float64))
    count = int(mask.sum())
    return float(tensor.masked_fill(~mask, 0).sum(dtype=torch.float64)) / count if count else 0.0


def _memorised_output(reference: list[torch.Tensor], _inputs: list[Any], other: list[torch.Tensor]) -> list[torch.Tensor] | None:
    if len(other) != len(reference) or not all(_same_kind(r, o) for r, o in zip(reference, other)):
        return None
    return list(other)


MEMORISED_CONSTANT, MEMORISED_OUTPUT = "a constant (another seed's mean)", "another seed's output"
MEMORISED = (MEMORISED_CONSTANT, MEMORISED_OUTPUT)
# A memorised answer (another seed's mean or output) passes or not by how far the problem's outputs move from seed to
# seed. Where it comes within NEAR_FACTOR times the tolerance on the first two seeds, one pair says little: on an H200
# KernelBench's L1/95 (a cross-entropy's mean over random logits) was flagged on 13 of 30 random pairs, and a flag
# left all of a worker's candidates of it without a verdict, while unflagged a memoriser passed its three hidden seeds
# about 6% of the time. So a near miss or a pass is tried on CONFIRMATION_SEEDS more seeds against the first seed's
# outputs. From the passes, an upper estimate of how often it passes one seed (memorised_pass_rate) sets how many of
# the problem's own seeds a candidate is judged on, so that the memoriser passes them all at most MEMORISER_PASSES of
# the time; past what the seed pool can give (a rate over MAX_PASS_RATE), the answer counts as passing and the
# problem is flagged, as before.
NEAR_FACTOR = 10.0
CONFIRMATION_SEEDS = 6
MEMORISER_PASSES = 0.01
MAX_OWN_SEEDS = 16  # reference_cache.SEED_POOL_SIZE
MAX_PASS_RATE = MEMORISER_PASSES ** (1.0 / MAX_OWN_SEEDS)  # 0.75


def memorised_pass_rate(passed: int, tried: int) -> float:
    """An upper estimate of how often a memorised answer passes one seed, from `passed` of `tried` (add-one on
    both sides, then one more try: a few seeds never read as never)."""
    return (passed + 1) / (tried + 2)


def own_seeds_against(rate: float) -> int:
    """The fewest own-input seeds a memoriser passing each with probability `rate` passes all of at most
    MEMORISER_PASSES of the time."""
    if rate <= 0:
        return 1
    return max(1, math.ceil(math.log(MEMORISER_PASSES) / math.log(rate)))


def trivial_recipes(inputs: Sequence[Any]) -> list[tuple[str, Recipe]]:
    count = sum(1 for x in inputs if isinstance(x, torch.Tensor))
    recipes: list[tuple[str, Recipe]] = [
        ("the first input returned" if i == 0 else f"input {i} returned", _input_returned(i)) for i in range(count)
    ]
    recipes += [("zeros", _filled(0.0)), ("ones", _filled(1.0)),
                (MEMORISED_CONSTANT, _memorised_constant), (MEMORISED_OUTPUT, _memorised_output)]
    return recipes


def confirm_memorised(run: ReferenceFn, seen: list[torch.Tensor], first_passed: Sequence[str], seeds: Sequence[int],
                      atol: float, rtol: float) -> tuple[list[str], int, str]:
    """Each memorised answer (built from `seen`, the first seed's outputs) tried on the problem's own inputs of
    `seeds` too: those whose pass rate no seed count within MAX_OWN_SEEDS can answer, the own seeds a candidate
    needs against the others (0: no more than the settings ask), and a note of the counts."""
    passed = {name: int(name in first_passed) for name in MEMORISED}
    for seed in seeds:
        inputs, reference = run(seed, None)
        for name in trivial_passes(reference, inputs, seen, atol, rtol, only=MEMORISED):
            passed[name] += 1
        del inputs, reference
    tried = 1 + len(seeds)
    flagged, needed = [], 0
    for name, count in passed.items():
        rate = memorised_pass_rate(count, tried)
        if rate > MAX_PASS_RATE:
            flagged.append(name)
        elif count:
            needed = max(needed, own_seeds_against(rate))
    note = "; ".join(f"{name} passed {count} of {tried} seeds" for name, count in passed.items())
    return flagged, needed, note


def trivial_passes(reference: list[torch.Tensor], inputs: list[Any], other_reference: list[torch.Tensor],
                   atol: float, rtol: float, only: Sequence[str] | None = None) -> list[str]:
    """The trivial candidates (those named in `only`, else all) the evaluator's own comparison accepts for these
    inputs. `other_reference` is the reference's output on another seed (a memorising candidate's material). One
    candidate's outputs at a time, so at most one output's worth of extra memory."""
    passed = []
    for name, recipe in trivial_recipes(inputs):
        if only is not None and name not in only:
            continue
        candidate = recipe(reference, inputs, other_reference)
        if candidate is None:
            continue
        if checks.compare_outputs(reference, candidate, atol, rtol).ok:
            passed.append(name)
        del candidate
    return passed


def finite(outputs: list[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in outputs if t.is_floating_point() or t.is_complex())


@dataclass
class Discrimination:
    """What the worker found for one (problem, precision): which trivial candidates pass on the problem's own
    inputs, and the widened inputs chosen (None: none needed, or none found)."""

    trivial: list[str] = field(default_factory=list)
    variant: Variant | None = None
    tried: int = 0  # variants tried
    reason: str = ""  # why no variant was kept, when one was needed (or why nothing was audited)
    audited: bool = True  # False: the trivial candidates could not run (the problem's own inputs serve)
    given: bool = False  # the variant came with the request (the problem audit: another problem's reference passes)
    confirmation: str = ""  # how memorised answers fared on more seeds (confirm_memorised), when they were tried
    own_seeds: int = 0  # the problem's own seeds a candidate is judged on at least (0: the settings' count)
    # The sensitivity seeds sound for the problem (sensitivity.py): None where they were not audited.
    sensitivity: sensitivity.Sensitivity | None = None
    # The last call of every plan (closing_variant): every kind of hidden seed the problem has, combined; None where it
    # has none, or the reference cannot take them combined (closing_note says why).
    closing: Variant | None = None
    closing_note: str = ""

    @property
    def needed(self) -> bool:
        return bool(self.trivial)

    @property
    def discriminating(self) -> bool:
        """True when the inputs correctness runs on tell every trivial candidate apart."""
        return not self.trivial or self.variant is not None

    def summary(self) -> str:
        if not self.audited:
            return f"the problem's own inputs (trivial candidates not tried: {self.reason})"
        if self.given and self.variant is not None:
            return (f"widened inputs {describe_variant(self.variant)} beside the problem's own (given by the problem "
                    "audit: another problem's reference passes its own inputs)")
        if not self.trivial:
            if self.own_seeds:
                return (f"the problem's own inputs, at least {self.own_seeds} seeds a candidate (a memorised answer "
                        f"passes now and then: {self.confirmation})")
            if self.confirmation:
                return f"the problem's own inputs (no trivial candidate passes them: {self.confirmation})"
            return "the problem's own inputs (no trivial candidate passes them)"
        passes = ", ".join(self.trivial)
        if self.variant is None:
            return f"UNDISCRIMINATING: {passes} pass(es) the problem's own inputs; no widened inputs help ({self.reason})"
        return f"widened inputs {describe_variant(self.variant)} beside the problem's own ({passes} pass(es) those)"


ReferenceFn = Callable[[int, "Variant | None"], "tuple[list[Any], list[torch.Tensor]]"]


def discriminate(run: ReferenceFn, seeds: Sequence[int], atol: float, rtol: float,
                 given: Variant | None = None, *, module: Any = None, source: str | None = None,
                 forward_s: float | None = None) -> Discrimination:
    """What correctness runs on for this problem: `_discriminate` (below), then, where the inputs discriminate, the
    sensitivity seeds sound for it (sensitivity.audit; the second shape needs the problem's `module`, and its
    `source` where the module has no file)."""
    found = _discriminate(run, seeds, atol, rtol, given)
    if found.discriminating:
        found.sensitivity = sensitivity.audit(run, seeds, atol, rtol, module=module, source=source,
                                              forward_s=forward_s)
        if not found.sensitivity.out_of_time:
            found.closing, found.closing_note = closing_variant(run, seeds[0], found)
    return found


CLOSING = "closing"


def closing_variant(run: ReferenceFn, seed: int, found: Discrimination) -> tuple[Variant | None, str]:
    """The closing seed's inputs: every kind of hidden seed the problem has (widened, perturbed, second shape) at once,
    so that whatever a partial or wrong kernel is caught by, the last call catches it. One kind alone is itself; two
    or more are kept where the reference takes them combined and stays finite (where it is on its own inputs)."""
    kinds = ([found.variant] if found.variant is not None else []) + (
        found.sensitivity.variants() if found.sensitivity is not None else [])
    if len(kinds) < 2:
        return (kinds[0] if kinds else None), ""
    combined: Variant = {"name": CLOSING}
    for kind in kinds:
        combined.update({part: kind[part] for part in sensitivity.PARTS if kind.get(part)})
    try:
        own_finite = finite(run(seed, None)[1])
        usable = finite(run(seed, combined)[1]) or not own_finite
    except Exception as exc:  # noqa: BLE001 - the reference cannot take them combined: each kind still runs alone
        return None, f"no closing seed: the reference raised {type(exc).__name__} on the kinds combined"
    if not usable:
        return None, "no closing seed: the reference is not finite on the kinds combined"
    return combined, ""


def _discriminate(run: ReferenceFn, seeds: Sequence[int], atol: float, rtol: float,
                  given: Variant | None = None) -> Discrimination:
    """Run the trivial candidates on the problem's own inputs and, if one passes, search widened inputs; where none
    passes, a `given` variant (from the problem audit) is used if the reference stays finite on it.

    `run(seed, variant)` returns (inputs, reference outputs) for that seed; two seeds are needed (a memorising
    candidate learns from one and is judged on the other). Given CONFIRMATION_SEEDS more, a memorised answer that
    passes or nearly passes on those two is tried on them (confirm_memorised), which may flag it or set the own
    seeds a candidate is judged on (`own_seeds`); with only two, the two decide. A variant is
    kept when the reference stays finite on both seeds (where it was finite on the problem's own inputs) and no
    trivial candidate passes on either."""
    first, second = seeds[0], seeds[1]
    inputs, reference = run(first, None)
    inputs_b, other = run(second, None)
    own_finite = finite(reference) and finite(other)
    found = Discrimination(trivial=(trivial_passes(reference, inputs, other, atol, rtol)
                                    or trivial_passes(other, inputs_b, reference, atol, rtol)))
    more = list(seeds[2:2 + CONFIRMATION_SEEDS])
    if len(more) == CONFIRMATION_SEEDS and (
            trivial_passes(reference, inputs, other, NEAR_FACTOR * atol, NEAR_FACTOR * rtol, only=MEMORISED)
            or trivial_passes(other, inputs_b, reference, NEAR_FACTOR * atol, NEAR_FACTOR * rtol, only=MEMORISED)):
        first_passed = [name for name in found.trivial if name in MEMORISED]
        inputs_b = other = None  # one more seed's inputs and outputs at a time beside the first seed's
        flagged, found.own_seeds, found.confirmation = confirm_memorised(run, reference, first_passed, more, atol, rtol)
        found.trivial = [name for name in found.trivial if name not in MEMORISED] + flagged
    if not found.trivial:
        if given:
            try:
                usable = all(finite(run(seed, given)[1]) for seed in (first, second)) or not own_finite
            except Exception as exc:  # noqa: BLE001 - the reference cannot take them
                usable, found.reason = False, f"the given inputs make the reference raise {type(exc).__name__}"
            if usable:
                found.variant, found.given = given, True
            elif not found.reason:
                found.reason = "the given inputs make the reference non-finite"
        return found
    variants = candidate_variants(inputs)
    del inputs, inputs_b, reference, other
    reasons = []
    for variant in variants:
        found.tried += 1
        try:
            widened_a, reference_a = run(first, variant)
            widened_b, reference_b = run(second, variant)
        except Exception as exc:  # noqa: BLE001 - the reference cannot take these inputs: try the next
            reasons.append(f"{variant['name']}: the reference raised {type(exc).__name__}")
            continue
        if own_finite and not (finite(reference_a) and finite(reference_b)):
            reasons.append(f"{variant['name']}: the reference is not finite")
            continue
        passes = (trivial_passes(reference_a, widened_a, reference_b, atol, rtol)
                  or trivial_passes(reference_b, widened_b, reference_a, atol, rtol))
        if passes:
            reasons.append(f"{variant['name']}: {passes[0]} still passes")
            continue
        found.variant = variant
        return found
    found.reason = "; ".join(reasons)[:300] if reasons else "no floating inputs to widen"
    return found


# Who orders a candidate's correctness calls: the operating system's entropy, never a seeded generator (a candidate
# that could predict the order could do whole work only where a widened or sensitivity seed falls).
_ORDER = secrets.SystemRandom()


def correctness_plan(own_seeds: Sequence[int], widened_seeds: Sequence[int], variant: Variant | None,
                     sensitivity_seeds: Sequence[tuple[int, Variant]] = (),
                     closing: tuple[int, Variant] | None = None,
                     order: random.Random | None = None) -> list[tuple[int, Variant | None]]:
    """The (seed, variant) pairs correctness runs on. The widened, perturbed and second-shape seeds and the problem's
    own are shuffled afresh for every evaluation by `order` (SystemRandom by default), so no call's position tells
    the candidate what it is checked on; the `closing` seed, every kind combined, comes last. A kernel honest for its
    first calls only then meets the closing seed after them, one honest until it meets the second shape meets it at
    that size again, and one honest only off the size it saw first meets the other kinds at that size."""
    plan: list[tuple[int, Variant | None]] = []
    if variant is not None:
        plan += [(seed, variant) for seed in widened_seeds]
    plan += [(seed, chosen) for seed, chosen in sensitivity_seeds]
    plan += [(seed, None) for seed in own_seeds]
    (order or _ORDER).shuffle(plan)
    if closing is not None:
        plan.append(closing)
    return plan
