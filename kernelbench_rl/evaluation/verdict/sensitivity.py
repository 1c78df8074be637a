"""Sensitivity seeds: inputs that tell whole work from partial work.

A kernel that reads part of its input (the log-sum-exp of 256 of 32,768 rows scaled up, a scan exact on a prefix
and a straight line after it, a histogram of 81% of the pixels rescaled, pi from 2,048 of 10 million points) lands
within the tolerance of statistics-like outputs on the problem's own inputs, where every part of the input looks
like every other. Two kinds of hidden seed catch it:

- **Perturbed inputs.** A seed's own inputs with a few sites changed strongly: `k` runs of `B` elements, one at a
  random place in each of `k` equal strata of the flattened tensor (so the sites spread over the whole tensor, tail
  included), floating values set above the tensor's range (a ramp, so no new ties), integer ones (when no input is
  floating) to a value copied from elsewhere in the tensor. Zeros stay zero (triangular inputs stay triangular), a
  symmetric matrix stays symmetric, a sorted one sorted. The candidate's outputs are compared with the reference's
  on the same perturbed inputs: a kernel that never reads a site misses its effect, and one that scales up what it
  read over-counts the sites it did read. The sites and values are drawn from the seed, so the worker and the
  candidate's process make the same inputs.
- **A second shape.** The problem's inputs with a size constant of its module (the batch size first) a quarter
  larger, where the model is built from the same init inputs and its code does not read the constant: a kernel that
  hardcodes the shape leaves the extra rows unwritten.

What is sound for a problem is decided once, when the problem is first sized (`audit`): the perturbation is the
mildest one (fewest elements, values nearest the range) where a single site, at the head and at the tail, moves
the reference's outputs by MOVE_FACTOR tolerances, on as many sites as possible (32, else 8, else 2); and the
reference must stay finite on it. Where nothing moves the reference enough, no perturbation runs, and the verdict
says so. The audit may spend what its search needs at the reference's own speed (`audit_budget`); where even that
bound runs out before a kind is settled, the problem gets no verdict (`out_of_time`: the evaluator cannot tell
whether partial work would pass, and that is its limit, not the kernel's).

The inputs themselves are made by sandbox/perturbation.py, in both processes; this module decides and audits.
"""

from __future__ import annotations

import ast
import math
import os
import re
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelbench_rl.evaluation.sandbox.perturbation import STRENGTHS, Variant, constants_applied, perturbable
from kernelbench_rl.evaluation.verdict import checks

PERTURBED, SECOND_SHAPE = "perturbed", "second shape"
SITE_COUNTS = (32, 8, 2)  # sites a perturbation is tried with, most first
LENGTH_BASE = 16  # site lengths tried: 1, 16, 256, ... up to half a stratum
MOVE_FACTOR = 4.0  # a single site must move the reference by this many tolerances
# The reference's forwards the audit may spend per problem (perturbation and shape together): what its whole search
# could take at the reference's own speed (search_runs x one run's time), at least AUDIT_BUDGET_S and at most
# AUDIT_MAX_BUDGET_S (the sizing it is part of must stay within the reference's budget, 120 s by default).
AUDIT_BUDGET_S = 10.0
AUDIT_MAX_BUDGET_S = 60.0
SHAPE_GROWTH = 4  # the second shape: a constant c becomes c + c // SHAPE_GROWTH
SHAPE_MAX_INPUT_BYTES = 1 << 30  # the second shape's inputs stay under this (its reference output is cached)
SHAPE_TRIES = 3  # size constants tried
SENSITIVITY_SEEDS = 4  # sensitivity seeds are drawn from this many of the problem's hidden seeds (cached outputs)
_BATCH_NAME = re.compile(r"batch", re.IGNORECASE)
_INPUT_MAKERS = ("get_inputs", "get_init_inputs")
# KBRL_EVAL_SENSITIVITY=off leaves the sensitivity seeds out (a timing study of their cost; never for a reward).
ENV = "KBRL_EVAL_SENSITIVITY"

ReferenceFn = Callable[[int, "Variant | None"], "tuple[list[Any], list[torch.Tensor]]"]


def enabled() -> bool:
    return os.environ.get(ENV, "on").strip().lower() not in ("0", "off", "no")


def is_sensitivity(variant: Variant | None) -> bool:
    return bool(variant) and ("perturb" in variant or "constants" in variant)


# -- what the verdict says ---------------------------------------------------------------------------------


# The parts an input variant may combine: widened (discrimination.py), perturbed, at a second shape. The closing seed
# (discrimination.closing_variant) combines all a problem has.
PARTS = ("affine", "perturb", "constants")


def _combined(variant: Variant | None) -> bool:
    return bool(variant) and sum(1 for part in PARTS if variant.get(part)) > 1


def describe(variant: Variant | None) -> str:
    if not variant:
        return "the problem's own inputs"
    if _combined(variant):
        return "; ".join(describe({part: variant[part]}) for part in PARTS if variant.get(part))
    if variant.get("affine"):
        return "widened (" + ", ".join(f"input {i}: x -> {scale:g}x" + (f" {'-' if shift < 0 else '+'} {abs(shift):g}"
                                                                          if shift else "")
                                       for i, scale, shift in variant["affine"]) + ")"
    spec = variant.get("perturb")
    if spec:
        if spec.get("strength") is None:
            values = "each set to a value found elsewhere in the input"
        else:
            values = f"set above the input's range (x{spec['strength']:g} its width)"
        return f"{spec['sites']} sites of up to {spec['length']} elements spread over each input, {values}"
    constants = variant.get("constants") or {}
    return "the inputs at another size (" + ", ".join(f"{k} = {v}" for k, v in constants.items()) + ")"


def failure_note(variant: Variant | None) -> str:
    """The start of a verdict's message when a sensitivity seed fails: what it tells the kernel's author."""
    if _combined(variant):
        return (f"on inputs that combine every kind of hidden seed the problem has ({describe(variant)}): every input "
                "element must count and the kernel must not assume the problem's sizes; ")
    if variant and variant.get("perturb"):
        return ("on inputs with a few elements changed (every input element must count: "
                f"{describe(variant)}), ")
    if variant and variant.get("constants"):
        return f"on {describe(variant)}: the kernel must not assume the problem's sizes; "
    return ""


@dataclass
class Sensitivity:
    """The sensitivity seeds one problem gets, and why each kind runs or not."""

    perturbation: Variant | None = None
    shape: Variant | None = None
    notes: list[str] = field(default_factory=list)
    # The audit's time ran out before a kind was settled: partial work might pass what runs, so no verdict.
    out_of_time: bool = False
    budget_s: float = 0.0  # what the audit could spend (audit_budget)

    def variants(self) -> list[Variant]:
        return [v for v in (self.perturbation, self.shape) if v is not None]

    def summary(self) -> str:
        """What a verdict records: the seed count first ("2 seeds: ..."; `seeds_in` reads it back), then each kind,
        then why a kind does not run."""
        parts = [f"perturbed: {describe(self.perturbation)}" if self.perturbation else "",
                 f"second shape: {describe(self.shape)}" if self.shape else ""]
        count = len(self.variants())
        text = f"{count} seed{'' if count == 1 else 's'}" + "".join(f"; {p}" for p in parts if p)
        return f"{text} ({'; '.join(self.notes)})" if self.notes else text


def everyday_variant(found: Any) -> Variant | None:
    """The perturbation every checked and profiled call of a candidate carries (None where the problem has none, or
    the sensitivity seeds are off). A perturbed seed told apart from the problem's own inputs by its values (runs set
    above the input's range) let a kernel do whole work there and part of it on the own seeds; with every checked call
    perturbed alike, no value tells one from another, and partial work fails wherever it is checked. The timed calls
    keep the problem's own inputs (the worker's clock compares both sides' loops); sparing work there reads as
    `profile_disagrees` (timing/decisions.py: profile_verdict)."""
    audited = getattr(found, "sensitivity", None)
    if audited is None or audited.perturbation is None or not enabled():
        return None
    return audited.perturbation


def seeds_in(summary: str) -> int:
    """How many sensitivity seeds a verdict's `versions["sensitivity"]` says ran (0 when off or not audited)."""
    head = summary.split(" ", 1)[0]
    return int(head) if head.isdigit() else 0


# -- the audit (worker side) ----------------------------------------------------------------------------------


def search_runs(largest: int, floating: bool) -> int:
    """The most reference runs the audit's search can make for inputs whose largest perturbable tensor has `largest`
    elements: for every site count and strength, a single site at the head and the tail at the shortest length and
    at the longest, a bisection between them, all sites together; then the second shape's tries."""
    runs = 0
    for sites in SITE_COUNTS:
        top = _top_level(largest, sites)
        steps = math.ceil(math.log2(top)) if top > 1 else 0
        runs += len(STRENGTHS if floating else (None,)) * (2 + 2 + 2 * steps + 1)
    return runs + SHAPE_TRIES


def audit_budget(forward_s: float | None, runs: int) -> float:
    """Seconds of reference runs the audit may spend: `runs` of `forward_s` each, within [AUDIT_BUDGET_S,
    AUDIT_MAX_BUDGET_S]."""
    return min(AUDIT_MAX_BUDGET_S, max(AUDIT_BUDGET_S, runs * (forward_s or 0.0)))


def _top_level(largest: int, sites: int) -> int:
    """The first length level (LENGTH_BASE ** level) at half a stratum, where site_length caps a site."""
    top = 0
    while LENGTH_BASE ** top < (largest // min(sites, largest)) // 2:
        top += 1
    return top


class _Clock:
    def __init__(self, budget_s: float, forward_s: float | None) -> None:
        self.started = time.perf_counter()
        self.deadline = self.started + budget_s
        self.forward_s = forward_s or 0.0
        self.ran_out = False

    def extend_to(self, budget_s: float) -> None:
        self.deadline = max(self.deadline, self.started + budget_s)

    def can_run(self) -> bool:
        if time.perf_counter() + self.forward_s <= self.deadline:
            return True
        self.ran_out = True
        return False

    def run(self, run: ReferenceFn, seed: int, variant: Variant) -> tuple[list[Any], list[torch.Tensor]]:
        t = time.perf_counter()
        out = run(seed, variant)
        self.forward_s = max(self.forward_s, time.perf_counter() - t)
        return out


def _finite(outputs: list[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in outputs if t.is_floating_point() or t.is_complex())


def _moved(perturbed: list[torch.Tensor], own: list[torch.Tensor], atol: float, rtol: float) -> bool:
    """Whether outputs within tolerance of `own` must fail against `perturbed` (they are MOVE_FACTOR tolerances apart)."""
    return not checks.compare_outputs(perturbed, own, atol, rtol, margin=MOVE_FACTOR).ok


def audit(run: ReferenceFn, seeds: Sequence[int], atol: float, rtol: float, *,
          module: types.ModuleType | None = None, source: str | None = None,
          forward_s: float | None = None, budget_s: float | None = None) -> Sensitivity:
    """The sensitivity seeds sound for this problem (see the module's docstring). `run(seed, variant)` gives the
    reference's inputs and outputs; `module` (with its `source`) is the problem's, for the second shape. The time
    its runs may take is `budget_s`, else `audit_budget` at the slower of `forward_s` and its own first run."""
    found = Sensitivity()
    clock = _Clock(budget_s or AUDIT_BUDGET_S, forward_s)
    seed = seeds[0]
    own_inputs, own = clock.run(run, seed, None)
    own_finite = _finite(own)
    if budget_s is None:  # what the whole search could take at this reference's speed, within the bounds
        targets = perturbable(own_inputs)
        largest = max((own_inputs[i].numel() for i in targets), default=1)
        floating = bool(targets) and own_inputs[targets[0]].is_floating_point()
        clock.extend_to(audit_budget(clock.forward_s, search_runs(largest, floating)))
    found.budget_s = clock.deadline - clock.started
    found.perturbation, note = _calibrate(run, clock, seed, own_inputs, own, own_finite, atol, rtol)
    if note:
        found.notes.append(note)
    if module is None:
        found.notes.append("no second shape: the problem's module was not given")
    else:
        found.shape, note = _second_shape(run, clock, module, source, seed, own_inputs, own_finite)
        if note:
            found.notes.append(note)
    found.out_of_time = clock.ran_out
    if found.out_of_time:
        found.notes.append(f"the audit's {found.budget_s:.0f} s ran out before both kinds were settled: no verdict "
                           "on this problem")
    return found


class _OutOfTime(Exception):
    pass


def _calibrate(run: ReferenceFn, clock: _Clock, seed: int, own_inputs: list[Any], own: list[torch.Tensor],
               own_finite: bool, atol: float, rtol: float) -> tuple[Variant | None, str]:
    """The mildest perturbation with the most sites whose every single site moves the reference (head and tail
    tried), with all sites together keeping it finite; or None and why."""
    targets = perturbable(own_inputs)
    if not targets:
        return None, "no perturbation: no input tensor to perturb"
    floating = own_inputs[targets[0]].is_floating_point()
    largest = max(own_inputs[i].numel() for i in targets)
    reasons: list[str] = []

    def variant(sites: int, strength: float | None, level: int, only: int | None = None) -> Variant:
        spec: dict[str, Any] = {"sites": sites, "length": LENGTH_BASE ** level, "strength": strength}
        if only is not None:
            spec["only"] = only
        return {"name": PERTURBED, "perturb": spec}

    def outputs_for(chosen: Variant) -> list[torch.Tensor] | None:
        """The reference's outputs on these inputs; None where it cannot take them (raises, or turns non-finite)."""
        if not clock.can_run():
            raise _OutOfTime
        try:
            _inputs, outputs = clock.run(run, seed, chosen)
        except Exception as exc:  # noqa: BLE001 - the reference cannot take these inputs
            reasons.append(f"the reference raised {type(exc).__name__}")
            return None
        if own_finite and not _finite(outputs):
            reasons.append("the reference is not finite")
            return None
        return outputs

    def informative(sites: int, strength: float | None, level: int) -> bool | None:
        """Whether one site alone, at the head and at the tail, moves the reference; None where it is unsound."""
        for only in (0, min(sites, largest) - 1):
            outputs = outputs_for(variant(sites, strength, level, only))
            if outputs is None:
                return None
            if not _moved(outputs, own, atol, rtol):
                return False
        return True

    def lowest_level(sites: int, strength: float | None, top: int) -> int | None:
        first = informative(sites, strength, 0)
        if first is not False:
            return 0 if first else None
        if top == 0 or not informative(sites, strength, top):
            return None
        low, high = 0, top  # not informative at `low`, informative at `high`
        while high - low > 1:
            middle = (low + high) // 2
            answer = informative(sites, strength, middle)
            if answer is None:
                break
            low, high = (low, middle) if answer else (middle, high)
        return high

    try:
        for sites in SITE_COUNTS:
            top = _top_level(largest, sites)
            for strength in (STRENGTHS if floating else (None,)):
                level = lowest_level(sites, strength, top)
                if level is None:
                    continue
                chosen = variant(sites, strength, level)
                outputs = outputs_for(chosen)
                if outputs is None:
                    continue
                if not _moved(outputs, own, atol, rtol):
                    reasons.append("all sites together did not move the reference")
                    continue
                return chosen, ""
    except _OutOfTime:
        return None, f"no perturbation: the reference's forwards took the audit's {clock.deadline - clock.started:.0f} s"
    why = f" ({'; '.join(dict.fromkeys(reasons))})" if reasons else ""
    return None, f"no perturbation: no site moved the reference's outputs by {MOVE_FACTOR:g} tolerances{why}"[:300]


def size_constants(module: types.ModuleType, source: str) -> list[str]:
    """Module-level integer constants (2 or more) that only the input makers and other constants read: those whose
    change leaves the model as it was. Batch sizes first, then in the source's order."""
    tree = ast.parse(source)
    assigned: list[str] = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        assigned += [t.id for t in targets if isinstance(t, ast.Name)]
    read_elsewhere: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in _INPUT_MAKERS:
            continue
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            read_elsewhere |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    names = []
    for name in dict.fromkeys(assigned):
        value = getattr(module, name, None)
        if type(value) is int and value >= 2 and name not in read_elsewhere and not name.startswith(("KBRL_", "_")):
            names.append(name)
    return sorted(names, key=lambda name: not _BATCH_NAME.search(name))


def _init_signature(module: types.ModuleType, variant: Variant | None) -> list[Any]:
    if not hasattr(module, "get_init_inputs"):
        return []
    with torch.random.fork_rng(devices=[]), constants_applied(module, variant):
        torch.manual_seed(0)
        values = list(module.get_init_inputs())
    return [(tuple(v.shape), str(v.dtype), v.detach().cpu().flatten()[:64].tolist()) if isinstance(v, torch.Tensor)
            else repr(v) for v in values]


def _shapes(inputs: Sequence[Any]) -> list[tuple[int, ...] | None]:
    return [tuple(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs]


def _second_shape(run: ReferenceFn, clock: _Clock, module: types.ModuleType, source: str | None, seed: int,
                  own_inputs: list[Any], own_finite: bool) -> tuple[Variant | None, str]:
    if source is None:
        path = getattr(module, "__file__", None)
        try:
            source = open(path).read() if path else None
        except OSError:
            source = None
    if source is None:
        return None, "no second shape: the problem's source is not at hand"
    try:
        names = size_constants(module, source)[:SHAPE_TRIES]
        base = _init_signature(module, None)
    except Exception as exc:  # noqa: BLE001 - a source or init inputs we cannot read: no second shape
        return None, f"no second shape: {type(exc).__name__} reading the problem's constants"
    input_bytes = sum(x.numel() * x.element_size() for x in own_inputs if isinstance(x, torch.Tensor))
    reasons: list[str] = []
    for name in names:
        old = int(getattr(module, name))
        new = old + max(1, old // SHAPE_GROWTH)
        variant = {"name": SECOND_SHAPE, "constants": {name: new}}
        if input_bytes * new / old > SHAPE_MAX_INPUT_BYTES:
            reasons.append(f"{name}: the inputs would pass {SHAPE_MAX_INPUT_BYTES >> 20} MiB")
            continue
        try:
            if _init_signature(module, variant) != base:
                reasons.append(f"{name} changes the model's init inputs")
                continue
        except Exception as exc:  # noqa: BLE001
            reasons.append(f"{name}: the init inputs raised {type(exc).__name__}")
            continue
        if not clock.can_run():
            reasons.append(f"the reference's forwards took the audit's {clock.deadline - clock.started:.0f} s")
            break
        try:
            inputs, outputs = clock.run(run, seed, variant)
        except Exception as exc:  # noqa: BLE001 - the reference does not take this size
            reasons.append(f"{name} = {new}: the reference raised {type(exc).__name__}")
            continue
        if _shapes(inputs) == _shapes(own_inputs):
            reasons.append(f"{name} does not size the inputs")
            continue
        if own_finite and not _finite(outputs):
            reasons.append(f"{name} = {new}: the reference is not finite")
            continue
        return variant, ""
    if not names:
        return None, "no second shape: no size constant read by the input makers alone"
    return None, f"no second shape ({'; '.join(reasons)})"[:300]
