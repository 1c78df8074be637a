"""The sensitivity seeds (verdict/sensitivity.py, sandbox/perturbation.py) on problems with more than one input and
at both ends of an input: every perturbable input is perturbed, whichever position it holds; the audit sizes its
search by the largest of them and calibrates on whichever the reference reads; a perturbation it picks moves the
reference at the head site and at the tail site alike; and perturbed values land above the input's finite range
whatever that range is (negative, offset, with infinities). No sandbox, no subprocess: the fast tier.
"""

from __future__ import annotations

import math
import types

import pytest
import torch

from kernelbench_rl.evaluation.sandbox import perturbation
from kernelbench_rl.evaluation.verdict import checks, discrimination, sensitivity


def _variant(sites: int, length: int, strength: float | None, only: int | None = None) -> dict:
    spec = {"sites": sites, "length": length, "strength": strength}
    if only is not None:
        spec["only"] = only
    return {"name": sensitivity.PERTURBED, "perturb": spec}


def _runner(forward, make):
    """The audit's `run(seed, variant)` for a reference `forward` over the inputs `make()` builds after the seed."""
    def run(seed, variant):
        torch.manual_seed(seed)
        inputs = perturbation.perturb_inputs(discrimination.apply_variant(make(), variant), seed, variant)
        return inputs, [forward(*inputs)]
    return run


def _moves(run, variant, own, atol, rtol) -> bool:
    _inputs, outputs = run(1, variant)
    return not checks.compare_outputs(outputs, own, atol, rtol, margin=sensitivity.MOVE_FACTOR).ok


# -- every perturbable input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["float first", "float after an integer", "floats around a small one"])
def test_every_perturbable_input_is_perturbed_whatever_its_position(layout):
    torch.manual_seed(0)
    big = [torch.rand(512), torch.rand(32, 16), torch.rand(1000)]
    inputs = {
        "float first": [big[0], big[1], big[2]],
        "float after an integer": [torch.randint(0, 9, (64,)), big[0], big[1], big[2]],
        "floats around a small one": [big[0], torch.rand(4), big[1], 3.0, big[2]],
    }[layout]
    expected = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_floating_point()
                and x.numel() >= perturbation.MIN_ELEMENTS]
    assert perturbation.perturbable(inputs) == expected and len(expected) == 3
    originals = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    out = perturbation.perturb_inputs([x.clone() if isinstance(x, torch.Tensor) else x for x in inputs], 5,
                                      _variant(8, 2, 16.0))
    for i, (before, after) in enumerate(zip(originals, out)):
        if i in expected:
            changed = (after.reshape(-1) != before.reshape(-1)).nonzero().flatten()
            # one site in each eighth of every perturbed input, above that input's own range
            assert set((changed * 8 // before.numel()).tolist()) == set(range(8)), (layout, i)
            assert bool((after.reshape(-1)[changed] > before.max()).all())
        elif isinstance(before, torch.Tensor):
            assert torch.equal(after, before), (layout, i)  # integers beside floats, small tensors: untouched
        else:
            assert after == before


def test_integer_inputs_are_all_perturbed_when_none_is_floating():
    torch.manual_seed(0)
    first, second = torch.randint(0, 100, (256,)), torch.randint(1000, 1100, (64, 8))
    flags = torch.rand(64) > 0.5
    inputs = [first.clone(), flags.clone(), second.clone()]
    assert perturbation.perturbable(inputs) == [0, 2]
    out = perturbation.perturb_inputs(inputs, 3, _variant(4, 8, None))
    assert torch.equal(out[1], flags)
    for before, after in ((first, out[0]), (second, out[2])):
        assert not torch.equal(after, before)
        assert set(after.reshape(-1).tolist()) <= set(before.reshape(-1).tolist())  # each its own values


def test_the_audit_calibrates_on_an_input_that_is_not_the_first(monkeypatch):
    """The reference reads only its second input (a mean of 65,536 values behind a small first input): the audit
    finds the sites long enough to move it there, and sizes its budget by the search over that input, not over the
    first one (each run costs 0.5 s on a clock the audit reads)."""
    now = [0.0]
    monkeypatch.setattr(sensitivity, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    inner = _runner(lambda weights, x: 4.0 * (x < 0.5).float().mean() + 0.0 * weights.sum(),
                    lambda: [torch.rand(16), torch.rand(1 << 16)])

    def run(seed, variant):
        now[0] += 0.5
        return inner(seed, variant)

    found = sensitivity.audit(run, [1, 2], 0.05, 0.02)
    assert found.perturbation is not None and not found.out_of_time, found.summary()
    assert found.budget_s == sensitivity.audit_budget(0.5, sensitivity.search_runs(1 << 16, True))
    assert found.budget_s != sensitivity.audit_budget(0.5, sensitivity.search_runs(16, True))
    spec = found.perturbation["perturb"]
    assert spec["length"] > 1
    _inputs, own = run(1, None)
    for only in (0, spec["sites"] - 1):
        assert _moves(run, _variant(spec["sites"], spec["length"], spec["strength"], only), own, 0.05, 0.02)


def test_the_search_grows_with_the_largest_input():
    assert sensitivity.search_runs(1 << 20, True) > sensitivity.search_runs(1 << 10, True) > \
        sensitivity.search_runs(16, True)
    assert sensitivity.search_runs(1 << 16, True) > sensitivity.search_runs(1 << 16, False)


# -- both ends of an input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("heavy_end", ["head", "tail"])
def test_a_chosen_perturbation_moves_the_reference_at_the_head_and_at_the_tail(heavy_end):
    """A weighted mean whose weights fall 256-fold from one end to the other: one site at the light end must move
    the reference as much as at the heavy end, so the audit may not settle for what moves the heavy end alone."""
    n = 1 << 14
    weights = torch.logspace(0, -8, n, base=2.0)
    if heavy_end == "tail":
        weights = weights.flip(0)
    run = _runner(lambda x: (x * weights).sum() / weights.sum(), lambda: [torch.rand(n)])
    atol = rtol = 1e-4
    found = sensitivity.audit(run, [1, 2], atol, rtol)
    assert found.perturbation is not None, found.summary()
    spec = found.perturbation["perturb"]
    _inputs, own = run(1, None)
    sites = min(spec["sites"], n)
    for only in (0, sites - 1):
        assert _moves(run, _variant(spec["sites"], spec["length"], spec["strength"], only), own, atol, rtol), (
            heavy_end, only, spec)


def test_an_input_smaller_than_the_site_count_keeps_every_site_and_its_tail():
    """16 elements, 32 sites asked: every element is a site, the last one is the tail, and an elementwise reference
    gets the most sites at the shortest length."""
    found = sensitivity.audit(_runner(torch.sigmoid, lambda: [torch.rand(16)]), [1, 2], 1e-4, 1e-4)
    assert found.perturbation["perturb"] == {"sites": 32, "length": 1, "strength": 0.5}
    x = torch.rand(16)
    tail = perturbation.perturb_inputs([x.clone()], 1, _variant(32, 1, 0.5, only=15))[0]
    assert (tail != x).nonzero().flatten().tolist() == [15]


@pytest.mark.parametrize(("low", "high"), [(0.0, 1.0), (-3.0, -1.0), (1000.0, 1000.5), (-50.0, 70.0)])
@pytest.mark.parametrize("strength", perturbation.STRENGTHS)
def test_perturbed_values_sit_above_the_inputs_range_by_the_strength(low, high, strength):
    """Values start `strength` x the range's width above its top (at most 6 x: u < 4, the ramp < 1.5), whatever
    the range's sign and offset; the untouched elements stay as they were."""
    torch.manual_seed(1)
    x = (low + (high - low) * torch.rand(4096, dtype=torch.float64))
    x[0], x[-1] = low, high  # the range's ends are in the tensor
    span = high - low
    out = perturbation.perturb_inputs([x.clone()], 7, _variant(8, 16, strength))[0]
    changed = out != x
    assert int(changed.sum()) == 8 * 16
    values = out[changed]
    assert bool((values >= high + strength * span * (1 - 1e-9)).all()), (values.min(), high, span)
    assert bool((values < high + 6 * strength * span).all()), (values.max(), high, span)
    assert torch.equal(out[~changed], x[~changed])


def test_the_range_ignores_infinities_and_nans_at_either_end(monkeypatch):
    """Non-finite values do not set the range (chunk by chunk: a chunk of the tensor holding only infinities
    included); the top comes from the finite values."""
    monkeypatch.setattr(perturbation, "_CHUNK", 64)
    torch.manual_seed(2)
    x = torch.rand(1024, dtype=torch.float64) * 2.0 - 5.0  # in [-5, -3)
    x[:64] = math.inf  # a whole chunk of infinities
    x[100], x[700], x[900] = -math.inf, math.nan, math.inf
    finite = x[torch.isfinite(x)]
    low, high = perturbation._finite_range(x)
    assert (low, high) == (float(finite.min()), float(finite.max()))
    assert perturbation._finite_range(torch.full((128,), math.inf)) == (0.0, 0.0)
    out = perturbation.perturb_inputs([x.clone()], 4, _variant(4, 8, 16.0))[0]
    changed = torch.isfinite(out) & (out != x) & torch.isfinite(x)
    assert changed.any()
    span = high - low
    assert bool((out[changed] >= high + 16.0 * span * (1 - 1e-9)).all())
    assert bool((out[changed] < high + 96.0 * span).all())


def test_a_constant_input_still_gets_values_above_it():
    """No width to scale by: the value itself sets the scale (at least 1), so the sites still move."""
    for value in (0.5, -2.0, 300.0):
        x = torch.full((256,), value, dtype=torch.float64)
        out = perturbation.perturb_inputs([x.clone()], 1, _variant(4, 4, 0.5))[0]
        changed = out != x
        assert int(changed.sum()) == 16
        assert bool((out[changed] >= value + 0.5 * max(abs(value), 1.0) * (1 - 1e-9)).all())
